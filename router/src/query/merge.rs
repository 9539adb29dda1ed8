//! Merging what the shards answer. Every read's answer is a fold: one accumulator per kind of
//! plan ([`Merge`]), to which each shard's partial is added in turn
//! ([`Gathered::fold`](super::scatter::Gathered::fold)). The accumulators here are the only
//! place where partials are combined; endpoints fold, then shape the answer.
//!
//! Partials of different shards are disjoint where the data is partitioned by the key that is
//! counted (a trace, a user, a session lives on one shard), so counts add up; latency sketches
//! merge bucket by bucket, so percentiles keep the sketch's relative error whatever the
//! number of shards.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, HashMap};

use sextant_model::sketch::LatencySketch;
use sextant_proto::query_reply::Partial;
use sextant_proto::{
    ActiveDay, ActiveUsersPartial, ApmPartial, CohortSizesPartial, CohortUsersPartial, ErrorGroup, ErrorsPartial,
    EventBucket, EventBucketsPartial, FunnelPartial, HostBucket, HostMetric, HostSeriesPartial, HostsPartial, KeyedLog,
    LogKey, LogSearchPartial, Mean, ReplayEvent, ReplayEventsPartial, ReplayListPartial, ReplaySession,
    RetentionCohort, RetentionPartial, ServiceMapPartial, TraceListPartial, TraceSummary,
};

use super::params::ms;
use crate::http::error::ApiError;

/// An accumulator of one kind of shard partial.
pub trait Merge {
    /// What a shard answers to this kind of plan.
    type Partial;
    /// This kind's partial in a shard's reply; `None` for another kind, which is not merged.
    fn pick(partial: Partial) -> Option<Self::Partial>;
    /// Adds one shard's partial.
    fn add(&mut self, partial: Self::Partial) -> Result<(), ApiError>;
}

/// `impl Merge` whose `pick` takes the one variant of its kind.
macro_rules! merge {
    ($acc:ty, $variant:ident($partial:ty), |$self:ident, $p:ident| $add:block) => {
        impl Merge for $acc {
            type Partial = $partial;
            fn pick(partial: Partial) -> Option<$partial> {
                match partial {
                    Partial::$variant(p) => Some(p),
                    _ => None,
                }
            }
            fn add(&mut $self, $p: $partial) -> Result<(), ApiError> $add
        }
    };
}

/// The first `limit` of `items` in descending `order`, and whether more remain.
fn first_page<T>(mut items: Vec<T>, limit: usize, order: impl Fn(&T, &T) -> Ordering) -> (Vec<T>, bool) {
    items.sort_by(|a, b| order(b, a));
    let more = items.len() > limit;
    items.truncate(limit);
    (items, more)
}

fn merge_sketch(into: &mut LatencySketch, encoded: &[u8]) -> Result<(), ApiError> {
    into.merge_encoded(encoded).map_err(|e| ApiError::Internal(e.to_string()))
}

// ------------------------------------------------------------------------------ traces, logs

/// Trace summaries: every shard's newest `limit + 1` after the cursor, whole traces (a trace
/// lives on one shard).
#[derive(Default)]
pub struct TraceList(Vec<TraceSummary>);

/// A trace's place in the list, which is newest first: (start, trace id), descending.
pub fn trace_key(t: &TraceSummary) -> (i64, &str) {
    (t.start_unix_nanos, t.trace_id.as_str())
}

merge!(TraceList, Traces(TraceListPartial), |self, p| {
    self.0.extend(p.traces);
    Ok(())
});

impl TraceList {
    /// The newest `limit` of all shards' lists, and whether more remain.
    pub fn page(self, limit: usize) -> (Vec<TraceSummary>, bool) {
        first_page(self.0, limit, |a, b| trace_key(a).cmp(&trace_key(b)))
    }
}

/// Log lines: every shard's newest `limit + 1` after the cursor.
#[derive(Default)]
pub struct LogList(Vec<KeyedLog>);

/// A line's place in the list, compared descending (the node uses the same order): time,
/// shard, content hash, then rank among identical lines.
pub fn log_order(k: &LogKey) -> (i64, u64, u64, Reverse<u32>) {
    (k.unix_nanos, k.group, k.content_hash, Reverse(k.duplicate))
}

merge!(LogList, Logs(LogSearchPartial), |self, p| {
    self.0.extend(p.logs);
    Ok(())
});

impl LogList {
    /// The newest `limit` of all shards' lines, and whether more remain.
    pub fn page(self, limit: usize) -> (Vec<KeyedLog>, bool) {
        first_page(self.0, limit, |a, b| {
            log_order(&a.key.unwrap_or_default()).cmp(&log_order(&b.key.unwrap_or_default()))
        })
    }
}

// ------------------------------------------------------------------------------ APM, service map

/// Merged statistics of one endpoint, service or edge.
#[derive(Default)]
pub struct Stats {
    pub count: u64,
    pub errors: u64,
    pub sum_ms: f64,
    pub sketch: LatencySketch,
}

impl Stats {
    pub fn add(&mut self, count: u64, errors: u64, sum_ms: f64, sketch: &[u8]) -> Result<(), ApiError> {
        self.count += count;
        self.errors += errors;
        self.sum_ms += sum_ms;
        merge_sketch(&mut self.sketch, sketch)
    }

    pub fn error_rate(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.errors as f64 / self.count as f64
        }
    }

    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        self.sketch.quantile(q).map(ms)
    }
}

/// APM: per (service, operation), in that order.
#[derive(Default)]
pub struct Endpoints(pub BTreeMap<(String, String), Stats>);

merge!(Endpoints, Apm(ApmPartial), |self, p| {
    for e in p.endpoints {
        self.0.entry((e.service, e.operation)).or_default().add(e.count, e.error_count, e.sum_ms, &e.sketch)?;
    }
    Ok(())
});

/// The service map: per service, and per (source, target) edge (a trace lives on one shard,
/// so every edge is found whole on one).
#[derive(Default)]
pub struct ServiceMap {
    pub nodes: BTreeMap<String, Stats>,
    pub edges: BTreeMap<(String, String), Stats>,
}

merge!(ServiceMap, ServiceMap(ServiceMapPartial), |self, p| {
    for n in p.nodes {
        self.nodes.entry(n.service).or_default().add(n.span_count, n.error_count, 0.0, &n.sketch)?;
    }
    for e in p.edges {
        self.edges.entry((e.source, e.target)).or_default().add(e.call_count, e.error_count, 0.0, &e.sketch)?;
    }
    Ok(())
});

// ------------------------------------------------------------------------------ error groups

/// Occurrences in a group's detail (each shard sends at most this many).
pub const RECENT: usize = 20;

/// Error groups by fingerprint (a hash of source, service, type and normalised message, the
/// same on every shard).
#[derive(Default)]
pub struct ErrorGroups(HashMap<String, ErrorGroup>);

/// One group from two shards: counts add up, first/last seen are the min/max, the sample is
/// the latest occurrence's trace, the latest [`RECENT`] occurrences are kept.
pub fn merge_group(into: &mut ErrorGroup, other: &ErrorGroup) {
    into.count += other.count;
    into.recent.extend(other.recent.iter().cloned());
    into.recent.sort_by(|a, b| (b.unix_nanos, &b.trace_id, &b.message).cmp(&(a.unix_nanos, &a.trace_id, &a.message)));
    into.recent.truncate(RECENT);
    into.first_unix_nanos = into.first_unix_nanos.min(other.first_unix_nanos);
    into.last_unix_nanos = into.last_unix_nanos.max(other.last_unix_nanos);
    if !other.sample_trace_id.is_empty()
        && (into.sample_trace_id.is_empty() || other.sample_unix_nanos > into.sample_unix_nanos)
    {
        into.sample_trace_id.clone_from(&other.sample_trace_id);
        into.sample_unix_nanos = other.sample_unix_nanos;
    }
}

merge!(ErrorGroups, Errors(ErrorsPartial), |self, p| {
    for g in p.groups {
        match self.0.get_mut(&g.fingerprint) {
            Some(into) => merge_group(into, &g),
            None => {
                self.0.insert(g.fingerprint.clone(), g);
            }
        }
    }
    Ok(())
});

impl ErrorGroups {
    /// Most frequent first, then most recent, then by fingerprint (a stable order).
    pub fn sorted(self) -> Vec<ErrorGroup> {
        let mut out: Vec<ErrorGroup> = self.0.into_values().collect();
        out.sort_by(|a, b| {
            (b.count, b.last_unix_nanos, &a.fingerprint).cmp(&(a.count, a.last_unix_nanos, &b.fingerprint))
        });
        out
    }
}

// ------------------------------------------------------------------------------ hosts

/// The latest sample of every host, by hostname.
#[derive(Default)]
pub struct LatestHosts(pub BTreeMap<String, HostMetric>);

merge!(LatestHosts, Hosts(HostsPartial), |self, p| {
    for m in p.latest {
        if self.0.get(&m.hostname).is_none_or(|l| m.unix_nanos > l.unix_nanos) {
            self.0.insert(m.hostname.clone(), m);
        }
    }
    Ok(())
});

/// One host's buckets by start: shards answer sums and counts, so the means merge exactly.
#[derive(Default)]
pub struct HostSeries(pub BTreeMap<i64, HostBucket>);

fn add_mean(into: &mut Option<Mean>, other: &Option<Mean>) {
    if let Some(o) = other {
        let m = into.get_or_insert_with(Mean::default);
        m.sum += o.sum;
        m.count += o.count;
    }
}

merge!(HostSeries, HostSeries(HostSeriesPartial), |self, p| {
    for b in p.buckets {
        let into = self
            .0
            .entry(b.start_unix_nanos)
            .or_insert_with(|| HostBucket { start_unix_nanos: b.start_unix_nanos, ..Default::default() });
        add_mean(&mut into.cpu_percent, &b.cpu_percent);
        add_mean(&mut into.memory_used_bytes, &b.memory_used_bytes);
        add_mean(&mut into.memory_total_bytes, &b.memory_total_bytes);
        add_mean(&mut into.disk_used_percent, &b.disk_used_percent);
        add_mean(&mut into.network_rx_bytes_per_sec, &b.network_rx_bytes_per_sec);
        add_mean(&mut into.network_tx_bytes_per_sec, &b.network_tx_bytes_per_sec);
    }
    Ok(())
});

// ------------------------------------------------------------------------------ product analytics

/// Per calendar bucket: events and distinct users (users are partitioned, so they add up).
pub struct EventBuckets(pub Vec<EventBucket>);

impl EventBuckets {
    pub fn new(buckets: usize) -> Self {
        Self(vec![EventBucket::default(); buckets])
    }
}

merge!(EventBuckets, EventBuckets(EventBucketsPartial), |self, p| {
    for (sum, b) in self.0.iter_mut().zip(&p.buckets) {
        sum.count += b.count;
        sum.unique_users += b.unique_users;
    }
    Ok(())
});

/// Per reported day: DAU, WAU, MAU.
pub struct ActiveDays(pub Vec<ActiveDay>);

impl ActiveDays {
    pub fn new(days: usize) -> Self {
        Self(vec![ActiveDay::default(); days])
    }
}

merge!(ActiveDays, ActiveUsers(ActiveUsersPartial), |self, p| {
    for (sum, d) in self.0.iter_mut().zip(&p.days) {
        sum.dau += d.dau;
        sum.wau += d.wau;
        sum.mau += d.mau;
    }
    Ok(())
});

/// Per funnel step: users who reached it, and their time to convert from the previous step.
pub struct FunnelSteps {
    pub users: Vec<u64>,
    pub seconds_sum: Vec<f64>,
    pub seconds: Vec<LatencySketch>,
}

impl FunnelSteps {
    pub fn new(steps: usize) -> Self {
        Self {
            users: vec![0; steps],
            seconds_sum: vec![0.0; steps],
            seconds: (0..steps).map(|_| LatencySketch::default()).collect(),
        }
    }
}

merge!(FunnelSteps, Funnel(FunnelPartial), |self, p| {
    for (k, s) in p.steps.iter().enumerate().take(self.users.len()) {
        self.users[k] += s.users;
        self.seconds_sum[k] += s.seconds_sum;
        merge_sketch(&mut self.seconds[k], &s.seconds_sketch)?;
    }
    Ok(())
});

/// Per retention cohort: its size and how many returned in each period.
pub struct RetentionCohorts(pub Vec<RetentionCohort>);

impl RetentionCohorts {
    pub fn new(cohorts: usize, periods: usize) -> Self {
        Self((0..cohorts).map(|_| RetentionCohort { size: 0, returned: vec![0; periods] }).collect())
    }
}

merge!(RetentionCohorts, Retention(RetentionPartial), |self, p| {
    for (sum, c) in self.0.iter_mut().zip(&p.cohorts) {
        sum.size += c.size;
        for (s, n) in sum.returned.iter_mut().zip(&c.returned) {
            *s += n;
        }
    }
    Ok(())
});

/// Sizes of cohorts, in the order of the plan.
pub struct CohortSizes(pub Vec<u64>);

impl CohortSizes {
    pub fn new(cohorts: usize) -> Self {
        Self(vec![0; cohorts])
    }
}

merge!(CohortSizes, CohortSizes(CohortSizesPartial), |self, p| {
    for (sum, n) in self.0.iter_mut().zip(&p.sizes) {
        *sum += n;
    }
    Ok(())
});

/// A cohort's members: every shard's first `limit + 1` after the cursor, its own users.
#[derive(Default)]
pub struct CohortMembers(Vec<String>);

merge!(CohortMembers, CohortUsers(CohortUsersPartial), |self, p| {
    self.0.extend(p.distinct_ids);
    Ok(())
});

impl CohortMembers {
    /// By distinct id, in byte order.
    pub fn sorted(mut self) -> Vec<String> {
        self.0.sort_unstable();
        self.0
    }
}

/// Replay sessions: whole sessions (a session lives on one shard).
#[derive(Default)]
pub struct ReplaySessions(Vec<ReplaySession>);

/// A session's place in the list, which is newest first; the id makes the order total.
pub fn session_key(s: &ReplaySession) -> (i64, &str) {
    (s.start_unix_nanos, s.session_id.as_str())
}

merge!(ReplaySessions, Replays(ReplayListPartial), |self, p| {
    self.0.extend(p.sessions);
    Ok(())
});

impl ReplaySessions {
    /// The newest `limit` sessions that sort after `after` (the cursor's key), and whether
    /// more remain.
    pub fn page(self, after: Option<(i64, &str)>, limit: usize) -> (Vec<ReplaySession>, bool) {
        let rest = self.0.into_iter().filter(|s| after.is_none_or(|a| session_key(s) < a)).collect();
        first_page(rest, limit, |a, b| session_key(a).cmp(&session_key(b)))
    }
}

/// One session's recorded events.
#[derive(Default)]
pub struct ReplayEvents(Vec<ReplayEvent>);

merge!(ReplayEvents, ReplayEvents(ReplayEventsPartial), |self, p| {
    self.0.extend(p.events);
    Ok(())
});

impl ReplayEvents {
    /// In timestamp order, for a player.
    pub fn sorted(mut self) -> Vec<ReplayEvent> {
        self.0.sort_by_key(|e| e.unix_nanos);
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_merge_counts_bounds_and_latest_sample() {
        let g = |count, first, last, trace: &str| ErrorGroup {
            fingerprint: "f".into(),
            count,
            first_unix_nanos: first,
            last_unix_nanos: last,
            sample_trace_id: trace.into(),
            sample_unix_nanos: last,
            ..Default::default()
        };
        let mut a = g(2, 10, 20, "t1");
        merge_group(&mut a, &g(3, 5, 30, "t2"));
        merge_group(&mut a, &g(1, 7, 40, ""));
        assert_eq!((a.count, a.first_unix_nanos, a.last_unix_nanos, a.sample_trace_id.as_str()), (6, 5, 40, "t2"));
    }

    #[test]
    fn partials_of_another_kind_are_not_merged() {
        let other = Partial::Logs(LogSearchPartial::default());
        assert!(TraceList::pick(other).is_none());
        let mine = Partial::Traces(TraceListPartial { traces: vec![TraceSummary::default()] });
        let mut list = TraceList::default();
        list.add(TraceList::pick(mine).unwrap()).unwrap();
        assert_eq!(list.page(10).0.len(), 1);
    }

    #[test]
    fn sums_ignore_entries_past_the_plan() {
        let mut sizes = CohortSizes::new(2);
        sizes.add(CohortSizesPartial { sizes: vec![1, 2, 3] }).unwrap();
        sizes.add(CohortSizesPartial { sizes: vec![10] }).unwrap();
        assert_eq!(sizes.0, [11, 2]);
    }
}
