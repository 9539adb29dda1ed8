//! Monthly quotas (docs/API.md, "Usage"): checked once a request is authenticated and before
//! its body is read, so a client over a hard quota costs nothing more. Observability ingest
//! (JSON and OTLP) is measured in bytes, analytics ingest (events, replays, PostHog capture) in
//! events, against the limits [`resolve_limits`] gives, from the router's cached view of usage,
//! a few seconds behind what was committed, plus what this router itself committed or is
//! committing that the view does not count yet ([`Pending`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use sextant_model::row::RowBatch;
use sextant_model::usage::{
    exceeded, month_of_millis, month_start_millis, next_month, resolve_limits, Exceeded, UsageCounts,
};
use sextant_model::{OrgId, ProjectId};
use sextant_proto::convert::persist_row::Packed;

use crate::cluster::{GroupId, MetaCache};
use crate::http::error::ApiError;
use crate::identity::account::time_json;
use crate::AppState;

/// What an ingest endpoint is metered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Meter {
    /// Observability: bytes of accepted objects.
    Bytes,
    /// Product analytics: events.
    Events,
}

impl Meter {
    pub fn name(self) -> &'static str {
        match self {
            Meter::Bytes => "bytes",
            Meter::Events => "events",
        }
    }
}

/// The orgs already warned of a soft quota crossed, per month and meter: one log line each.
#[derive(Default)]
pub struct SoftWarnings(Mutex<HashSet<(OrgId, u32, Meter)>>);

impl SoftWarnings {
    /// True the first time for (org, month, meter).
    fn first(&self, org: OrgId, month: u32, meter: Meter) -> bool {
        let mut warned = self.0.lock().unwrap();
        warned.retain(|(_, m, _)| *m >= month); // months that ended are forgotten
        warned.insert((org, month, meter))
    }
}

/// Most entries kept per project, month and group while the roll-up lags; beyond, the oldest
/// two merge (into the later index, so they stay counted a little longer, never less).
const MAX_PENDING: usize = 65_536;

/// What this router accepted that the cached roll-up may not count yet: batches being
/// replicated, and committed batches by the log index they were committed at, until the view
/// shows their group's counters at or past that index.
#[derive(Default)]
pub struct Pending(Mutex<PendingState>);

#[derive(Default)]
struct PendingState {
    /// (project, month) -> counts of batches being replicated.
    in_flight: HashMap<(ProjectId, u32), UsageCounts>,
    /// (project, month) -> group -> log index -> counts committed there.
    committed: HashMap<(ProjectId, u32), HashMap<GroupId, BTreeMap<u64, UsageCounts>>>,
    /// The newest meta view version entries were dropped against.
    pruned_at: u64,
}

impl PendingState {
    fn in_flight(&mut self, key: (ProjectId, u32), counts: &UsageCounts, add: bool) {
        let c = self.in_flight.entry(key).or_default();
        if add {
            c.add(counts);
        } else {
            c.sub(counts);
            if c.is_zero() {
                self.in_flight.remove(&key);
            }
        }
    }

    /// Drops what `cache` counts, and months before `month`, once per newer view. A check that
    /// still holds an older view could miss those entries: only a refresh landing between its
    /// reading the view and taking this lock.
    fn prune(&mut self, cache: &MetaCache, month: u32) {
        if cache.version < self.pruned_at {
            return;
        }
        self.pruned_at = cache.version;
        self.committed.retain(|(_, m), groups| {
            groups.retain(|g, entries| {
                if let Some(at) = cache.usage_indexes.get(g) {
                    *entries = entries.split_off(&at.saturating_add(1));
                }
                !entries.is_empty()
            });
            *m >= month && !groups.is_empty()
        });
        self.in_flight.retain(|(_, m), _| *m >= month);
    }
}

/// Counts a request holds while it is replicated; released on drop unless committed.
pub struct Reservation {
    pending: Arc<Pending>,
    key: Option<(ProjectId, u32)>,
    total: UsageCounts,
    per_group: Vec<(GroupId, UsageCounts)>,
}

fn batch_counts(b: &RowBatch<Packed>) -> UsageCounts {
    UsageCounts {
        bytes: b.json_bytes,
        spans: b.spans.len() as u64,
        logs: b.logs.len() as u64,
        metric_samples: b.host_metrics.len() as u64,
        events: b.events.len() as u64,
        replay_events: b.replay_events.len() as u64,
    }
}

impl Pending {
    /// Counts the sub-batches of one request (one project, one receive time) from now on.
    pub fn reserve(self: &Arc<Self>, batches: &HashMap<GroupId, RowBatch<Packed>>) -> Reservation {
        let mut r = Reservation { pending: self.clone(), key: None, total: UsageCounts::default(), per_group: vec![] };
        let Some(first) = batches.values().next() else { return r };
        let Ok(project) = first.project_id.parse::<ProjectId>() else { return r };
        let key = (project, month_of_millis(first.received_unix_millis));
        for (group, b) in batches {
            let c = batch_counts(b);
            r.total.add(&c);
            r.per_group.push((*group, c));
        }
        self.0.lock().unwrap().in_flight(key, &r.total, true);
        r.key = Some(key);
        r
    }

    /// What this router accepted for the projects `of` selects in `month` that `cache` does
    /// not count.
    fn uncounted(&self, cache: &MetaCache, month: u32, of: impl Fn(&ProjectId) -> bool) -> UsageCounts {
        let mut s = self.0.lock().unwrap();
        s.prune(cache, month);
        let mut sum = UsageCounts::default();
        for (_, c) in s.in_flight.iter().filter(|((p, m), _)| *m == month && of(p)) {
            sum.add(c);
        }
        for (_, groups) in s.committed.iter().filter(|((p, m), _)| *m == month && of(p)) {
            for (g, entries) in groups {
                let from = cache.usage_indexes.get(g).map_or(0, |at| at.saturating_add(1));
                entries.range(from..).for_each(|(_, c)| sum.add(c));
            }
        }
        sum
    }
}

impl Reservation {
    /// The request committed: each group's part is counted until the roll-up reaches the
    /// index it was committed at.
    pub fn committed(mut self, indexes: &[(GroupId, u64)]) {
        let Some(key) = self.key.take() else { return };
        let mut s = self.pending.0.lock().unwrap();
        s.in_flight(key, &self.total, false);
        let groups = s.committed.entry(key).or_default();
        for (group, counts) in &self.per_group {
            let index = indexes.iter().find(|(g, _)| g == group).map_or(0, |(_, i)| *i);
            let entries = groups.entry(*group).or_default();
            entries.entry(index).or_default().add(counts);
            if entries.len() > MAX_PENDING {
                if let Some((_, oldest)) = entries.pop_first() {
                    if let Some(mut next) = entries.first_entry() {
                        next.get_mut().add(&oldest);
                    }
                }
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.pending.0.lock().unwrap().in_flight(key, &self.total, false);
        }
    }
}

/// What the quotas say about one more request of `project` at `now`.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Accept,
    /// Over a soft quota: accepted, and reported.
    AcceptOverSoft {
        org: OrgId,
        month: u32,
        exceeded: Exceeded,
    },
    /// Over a hard quota: refused until `resets_at` (Unix milliseconds).
    Refuse {
        exceeded: Exceeded,
        resets_at: i64,
    },
}

/// The quota decision for `project`'s next request metered in `meter`, at `now`.
pub fn decide(cache: &MetaCache, pending: &Pending, project: ProjectId, meter: Meter, now: i64) -> Decision {
    let Some(org_id) = cache.projects.get(&project).map(|p| p.org_id) else { return Decision::Accept };
    if !cache.orgs.contains_key(&org_id) {
        return Decision::Accept;
    }
    let limits = resolve_limits(cache.plan_of(&org_id, now), &cache.quotas, org_id, Some(project));
    let limit = match meter {
        Meter::Bytes => limits.bytes,
        Meter::Events => limits.events,
    };
    let Some(l) = limit else { return Decision::Accept };
    let month = month_of_millis(now);
    let mut counts = match l.project {
        Some(p) => cache.usage.get(&(p, month)),
        // The org's live projects, as the usage endpoint counts them.
        None => cache.org_usage.get(&(org_id, month)),
    }
    .copied()
    .unwrap_or_default();
    counts.add(&match l.project {
        Some(scope) => pending.uncounted(cache, month, |p| *p == scope),
        None => pending.uncounted(cache, month, |p| {
            cache.projects.get(p).is_some_and(|p| p.org_id == org_id) && !cache.deleted_projects.contains(p)
        }),
    });
    let used = match meter {
        Meter::Bytes => counts.bytes,
        Meter::Events => counts.events,
    };
    match exceeded(limit, used) {
        None => Decision::Accept,
        Some(exceeded) if exceeded.hard => {
            Decision::Refuse { exceeded, resets_at: month_start_millis(next_month(month)) }
        }
        Some(exceeded) => Decision::AcceptOverSoft { org: org_id, month, exceeded },
    }
}

/// Refuses a request of `project` over a hard quota with 402 `quota_exceeded`; over a soft
/// one, counts it and warns once per org and month.
pub fn check(app: &AppState, project: ProjectId, meter: Meter) -> Result<(), ApiError> {
    let Some(cache) = app.cluster.meta_cache() else { return Ok(()) };
    match decide(&cache, &app.quota_pending, project, meter, app.clock.now_millis()) {
        Decision::Accept => Ok(()),
        Decision::AcceptOverSoft { org, month, exceeded } => {
            app.metrics.over_quota(meter.name(), false);
            crate::webhooks::quota_crossed(app, &cache, project, meter, &exceeded);
            if app.soft_quota_warnings.first(org, month, meter) {
                tracing::warn!(
                    org = %org, meter = meter.name(), limit = exceeded.limit, used = exceeded.used,
                    "soft monthly quota exceeded; ingest is still accepted"
                );
            }
            Ok(())
        }
        Decision::Refuse { exceeded, resets_at } => {
            app.metrics.over_quota(meter.name(), true);
            crate::webhooks::quota_crossed(app, &cache, project, meter, &exceeded);
            Err(ApiError::QuotaExceeded {
                what: meter.name(),
                limit: exceeded.limit,
                used: exceeded.used,
                resets_at: time_json(resets_at),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::meta::{default_plans, MetaView, Org, Project, Quota};
    use sextant_model::usage::{UsageCounts, UsageRecord};
    use sextant_model::ManualClock;

    /// 2026-11-30T23:59:59.999Z: the last instant of November.
    const END_OF_NOV: i64 = 1_796_083_200_000 - 1;

    fn quota(org: OrgId, project: Option<ProjectId>, bytes: Option<u64>, events: Option<u64>, hard: bool) -> Quota {
        Quota {
            id: "q".into(),
            org_id: org,
            project_id: project,
            rate_limits: Default::default(),
            managed_by: None,
            monthly_bytes: bytes,
            monthly_events: events,
            hard,
        }
    }

    /// An org on `plan` with projects `a` and `b`, which used `used` (bytes, events) each in
    /// November 2026.
    fn cache(plan: &str, quotas: Vec<Quota>, used: (u64, u64)) -> (MetaCache, OrgId, ProjectId, ProjectId) {
        let (org, a, b) = (OrgId::random(), ProjectId::random(), ProjectId::random());
        let project = |id, name: &str| Project {
            id,
            org_id: org,
            name: name.into(),
            created_at_ms: 0,
            managed_by: None,
            key: None,
        };
        let counts = UsageCounts { bytes: used.0, events: used.1, ..Default::default() };
        let quotas = quotas.into_iter().map(|mut q| {
            q.org_id = org;
            q
        });
        let view = MetaView {
            orgs: vec![Org {
                id: org,
                name: "acme".into(),
                plan: plan.into(),
                default_project: a,
                created_at_ms: 0,
                managed_by: None,
                key: None,
                owner_email: None,
                suspended: false,
            }],
            projects: vec![project(a, "web"), project(b, "api")],
            plans: default_plans(),
            quotas: quotas.collect(),
            usage: [a, b].iter().map(|p| UsageRecord { project_id: p.to_string(), month: 202611, counts }).collect(),
            ..Default::default()
        };
        (MetaCache::from(view), org, a, b)
    }

    fn org_quota(bytes: Option<u64>, events: Option<u64>, hard: bool) -> Quota {
        quota(OrgId::random(), None, bytes, events, hard)
    }

    #[test]
    fn a_hard_quota_admits_until_the_org_reaches_it_then_refuses_until_next_month() {
        // Two projects of 50 bytes each: the org used 100.
        let (under, _, a, _) = cache("free", vec![org_quota(Some(101), None, true)], (50, 0));
        assert_eq!(decide(&under, &Pending::default(), a, Meter::Bytes, END_OF_NOV), Decision::Accept);
        let (at, _, a, _) = cache("free", vec![org_quota(Some(100), None, true)], (50, 0));
        let refused =
            Decision::Refuse { exceeded: Exceeded { limit: 100, used: 100, hard: true }, resets_at: END_OF_NOV + 1 };
        assert_eq!(decide(&at, &Pending::default(), a, Meter::Bytes, END_OF_NOV), refused);
        assert_eq!(time_json(END_OF_NOV + 1), "2026-12-01T00:00:00.000Z");
        // Events are not limited by this quota and the free plan's million is far.
        assert_eq!(decide(&at, &Pending::default(), a, Meter::Events, END_OF_NOV), Decision::Accept);
    }

    #[test]
    fn a_soft_quota_accepts_over_the_limit_and_says_so() {
        let (c, org, a, _) = cache("free", vec![org_quota(None, Some(10), false)], (0, 30));
        assert_eq!(
            decide(&c, &Pending::default(), a, Meter::Events, END_OF_NOV),
            Decision::AcceptOverSoft { org, month: 202611, exceeded: Exceeded { limit: 10, used: 60, hard: false } }
        );
        let warnings = SoftWarnings::default();
        assert!(warnings.first(org, 202611, Meter::Events));
        assert!(!warnings.first(org, 202611, Meter::Events), "once per org and month");
        assert!(warnings.first(org, 202611, Meter::Bytes));
        assert!(warnings.first(org, 202612, Meter::Events), "again the next month");
    }

    #[test]
    fn plan_limits_are_hard_and_an_unlimited_plan_never_refuses() {
        let gb = 1_000_000_000;
        let (free, _, a, _) = cache("free", vec![], (gb / 2, 0));
        assert!(matches!(decide(&free, &Pending::default(), a, Meter::Bytes, END_OF_NOV), Decision::Refuse { .. }));
        let (enterprise, _, a, _) = cache("enterprise", vec![], (u64::MAX / 4, u64::MAX / 4));
        assert_eq!(decide(&enterprise, &Pending::default(), a, Meter::Bytes, END_OF_NOV), Decision::Accept);
        assert_eq!(decide(&enterprise, &Pending::default(), a, Meter::Events, END_OF_NOV), Decision::Accept);
    }

    #[test]
    fn a_project_quota_is_measured_against_that_project_alone() {
        let p_quota = |p| quota(OrgId::random(), Some(p), Some(60), None, true);
        let (mut c, _, a, b) = cache("enterprise", vec![], (50, 0));
        let q = p_quota(a);
        c.quotas = vec![Quota { org_id: c.projects[&a].org_id, ..q }];
        // The org used 100, project a only 50 of its 60; b has no limit at all.
        assert_eq!(decide(&c, &Pending::default(), a, Meter::Bytes, END_OF_NOV), Decision::Accept);
        assert_eq!(decide(&c, &Pending::default(), b, Meter::Bytes, END_OF_NOV), Decision::Accept);
        c.quotas[0].monthly_bytes = Some(50);
        assert!(matches!(decide(&c, &Pending::default(), a, Meter::Bytes, END_OF_NOV), Decision::Refuse { .. }));
    }

    /// At 00:00 UTC on the 1st the new month's usage is empty, so a refused org ingests again.
    #[test]
    fn ingest_resumes_when_the_month_rolls_over() {
        let (c, _, a, _) = cache("free", vec![org_quota(Some(100), None, true)], (50, 0));
        let clock = ManualClock::at_millis(END_OF_NOV);
        assert!(matches!(
            decide(&c, &Pending::default(), a, Meter::Bytes, clock.clock().now_millis()),
            Decision::Refuse { .. }
        ));
        clock.advance(std::time::Duration::from_millis(1));
        assert_eq!(decide(&c, &Pending::default(), a, Meter::Bytes, clock.clock().now_millis()), Decision::Accept);
    }

    fn batch(project: ProjectId, bytes: u64) -> RowBatch<Packed> {
        RowBatch {
            project_id: project.to_string(),
            json_bytes: bytes,
            received_unix_millis: END_OF_NOV,
            ..Default::default()
        }
    }

    fn used(c: &MetaCache, pending: &Pending, p: ProjectId) -> Option<u64> {
        match decide(c, pending, p, Meter::Bytes, END_OF_NOV) {
            Decision::Refuse { exceeded, .. } => Some(exceeded.used),
            _ => None,
        }
    }

    /// A router counts its own requests from the start of their replication until the roll-up
    /// shows each group's counters at the index its part was committed at: never twice, never
    /// missing in between.
    #[test]
    fn a_router_counts_what_it_accepted_until_the_roll_up_reaches_its_log_index() {
        // An org limit of 100 bytes; two projects with 25 each in the roll-up.
        let (mut c, org, a, _) = cache("free", vec![org_quota(Some(100), None, true)], (25, 0));
        let pending = Arc::new(Pending::default());
        let batches: HashMap<GroupId, RowBatch<Packed>> = [(1, batch(a, 30)), (2, batch(a, 20))].into();
        let r = pending.reserve(&batches);
        assert_eq!(used(&c, &pending, a), Some(100), "being replicated counts");
        drop(r);
        assert_eq!(used(&c, &pending, a), None, "a failed replication counts nothing");

        pending.reserve(&batches).committed(&[(1, 10), (2, 5)]);
        assert_eq!(used(&c, &pending, a), Some(100), "committed, not in the roll-up yet");
        // The roll-up reaches group 1's index: its 30 bytes move from pending to the view.
        c.version += 1;
        c.usage.get_mut(&(a, 202611)).unwrap().bytes += 30;
        c.org_usage.get_mut(&(org, 202611)).unwrap().bytes += 30;
        c.usage_indexes = [(1, 10), (2, 4)].into();
        assert_eq!(used(&c, &pending, a), Some(100));
        c.version += 1;
        c.usage.get_mut(&(a, 202611)).unwrap().bytes += 20;
        c.org_usage.get_mut(&(org, 202611)).unwrap().bytes += 20;
        c.usage_indexes = [(1, 12), (2, 5)].into();
        assert_eq!(used(&c, &pending, a), Some(100), "and group 2's 20");
        assert!(pending.0.lock().unwrap().committed.is_empty(), "nothing left pending");
    }

    #[test]
    fn what_a_router_accepted_counts_in_its_month_only() {
        let (c, _, a, _) = cache("free", vec![org_quota(Some(100), None, true)], (0, 0));
        let pending = Arc::new(Pending::default());
        pending.reserve(&[(1, batch(a, 100))].into()).committed(&[(1, 3)]);
        assert!(matches!(decide(&c, &pending, a, Meter::Bytes, END_OF_NOV), Decision::Refuse { .. }));
        assert_eq!(decide(&c, &pending, a, Meter::Bytes, END_OF_NOV + 1), Decision::Accept, "December");
        assert!(pending.0.lock().unwrap().committed.is_empty(), "November's entries are dropped");
    }

    /// At 00:00 UTC on the 1st, by the router's clock and the same cached view: the refused
    /// org is accepted again, the usage endpoint starts the month at zero and keeps November in
    /// its history, and what this router accepted in November does not count in December.
    #[test]
    fn at_midnight_utc_on_the_first_the_refusal_lifts_usage_restarts_and_history_keeps_the_month() {
        let (c, org, a, b) = cache("free", vec![org_quota(Some(100), None, true)], (50, 0));
        let pending = Arc::new(Pending::default());
        pending.reserve(&[(1, batch(a, 10))].into()).committed(&[(1, 7)]);
        let clock = ManualClock::at_millis(END_OF_NOV);
        let now = || clock.clock().now_millis();
        assert_eq!(used(&c, &pending, a), Some(110));
        let projects = [(a, "web".to_owned()), (b, "api".to_owned())];
        let november: Vec<UsageRecord> = [a, b]
            .iter()
            .map(|p| UsageRecord {
                project_id: p.to_string(),
                month: 202611,
                counts: UsageCounts { bytes: 50, ..Default::default() },
            })
            .collect();
        let before = crate::identity::usage::usage(&c, org, &projects, now(), november.clone()).unwrap();
        assert_eq!((before.counts.bytes, before.history.len()), (100, 0));

        clock.advance(std::time::Duration::from_millis(1));
        assert_eq!(decide(&c, &pending, a, Meter::Bytes, now()), Decision::Accept);
        let after = crate::identity::usage::usage(&c, org, &projects, now(), november).unwrap();
        assert_eq!((after.counts, after.period_start.as_str()), (UsageCounts::default(), "2026-12-01T00:00:00.000Z"));
        let history: Vec<(&str, u64)> = after.history.iter().map(|h| (h.month.as_str(), h.counts.bytes)).collect();
        assert_eq!(history, [("2026-11", 100)]);
    }

    #[test]
    fn a_project_quota_counts_only_that_projects_pending_bytes() {
        let (mut c, _, a, b) = cache("enterprise", vec![], (0, 0));
        c.quotas =
            vec![Quota { org_id: c.projects[&a].org_id, ..quota(OrgId::random(), Some(a), Some(50), None, true) }];
        let pending = Arc::new(Pending::default());
        pending.reserve(&[(1, batch(b, 500))].into()).committed(&[(1, 3)]);
        assert_eq!(decide(&c, &pending, a, Meter::Bytes, END_OF_NOV), Decision::Accept);
        pending.reserve(&[(1, batch(a, 50))].into()).committed(&[(1, 4)]);
        assert_eq!(used(&c, &pending, a), Some(50));
    }

    #[test]
    fn pending_entries_of_a_group_stay_bounded_and_still_count() {
        let (c, _, a, _) = cache("enterprise", vec![], (0, 0));
        let pending = Arc::new(Pending::default());
        for i in 0..MAX_PENDING as u64 + 10 {
            pending.reserve(&[(1, batch(a, 1))].into()).committed(&[(1, i + 1)]);
        }
        let s = pending.0.lock().unwrap();
        let entries = &s.committed[&(a, 202611)][&1];
        assert_eq!(entries.len(), MAX_PENDING);
        assert_eq!(entries.values().map(|c| c.bytes).sum::<u64>(), MAX_PENDING as u64 + 10);
        drop(s);
        assert_eq!(pending.uncounted(&c, 202611, |p| *p == a).bytes, MAX_PENDING as u64 + 10);
    }

    #[test]
    fn an_unknown_project_is_not_refused_here() {
        let (c, ..) = cache("free", vec![org_quota(Some(0), Some(0), true)], (0, 0));
        assert_eq!(decide(&c, &Pending::default(), ProjectId::random(), Meter::Bytes, END_OF_NOV), Decision::Accept);
    }
}
