//! Rollups, written beside every spans, events or host metrics segment (like trace summaries,
//! and replaced with it) so that reads over long ranges read a row per key and time bucket
//! instead of every row. Span rollups: per (project, service, operation, minute), the totals
//! of the spans starting in that minute, and the same per hour; compaction adds up a past
//! day's hours into the same per day (so a year of APM reads a row per endpoint and day).
//! Event rollups: per (project, event name, hour), the events. Host rollups: per (project,
//! hostname, minute), each metric's sum and count. Counts and sketches
//! add up exactly, so a rollup answers what a scan of its rows would (a host mean's float sum
//! up to rounding, which depends on the order of addition in a scan as well).

use std::hash::BuildHasher;
use std::io;
use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, UInt64Array};
use hashbrown::HashTable;
use prost::encoding::{decode_varint, encode_varint};
use rustc_hash::FxHashMap;
use sextant_model::query::{HostBucket, Mean, SpanTotals, HOST_METRICS};
use sextant_model::row::{EventRollup, HostRollup, SpanRollup, SpanStatus};
use sextant_model::sketch::LatencyBuckets;

use super::table::{Cols, Row, RowRef, Table};

pub const MINUTE_NS: i64 = 60_000_000_000;
pub const HOUR_NS: i64 = 60 * MINUTE_NS;
pub const DAY_NS: i64 = 24 * HOUR_NS;
/// A day in seconds, as segments' time buckets are given.
pub const DAY_S: i64 = DAY_NS / 1_000_000_000;

/// The start of the `width`-long bucket (from the epoch) holding `t`.
pub fn bucket_of(t: i64, width: i64) -> i64 {
    t.div_euclid(width).saturating_mul(width)
}

pub fn minute_of(t: i64) -> i64 {
    bucket_of(t, MINUTE_NS)
}

pub fn hour_of(t: i64) -> i64 {
    bucket_of(t, HOUR_NS)
}

/// The rollup table written beside segments of `table`, if any.
pub fn rollup_table(table: Table) -> Option<Table> {
    match table {
        Table::Spans => Some(Table::SpanRollups),
        Table::Events => Some(Table::EventRollups),
        Table::HostMetrics => Some(Table::HostRollups),
        _ => None,
    }
}

/// The bucket width of a rollup table (`None` for other tables).
pub fn width(table: Table) -> Option<i64> {
    match table {
        Table::EventRollups | Table::SpanHourRollups => Some(HOUR_NS),
        Table::SpanRollups | Table::HostRollups => Some(MINUTE_NS),
        Table::SpanDayRollups => Some(DAY_NS),
        _ => None,
    }
}

/// The first start of a `width`-long bucket at or after `t`, if there is one.
pub fn bucket_at_or_after(t: i64, width: i64) -> Option<i64> {
    let m = bucket_of(t, width);
    if m >= t {
        Some(m)
    } else {
        m.checked_add(width)
    }
}

/// Rows of rollup table `table` of its source rows among `rows` (a segment's being written),
/// sorted like a segment of `table`.
pub fn rollup_rows(table: Table, rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    match table {
        Table::EventRollups => event_rollups(rows),
        Table::HostRollups => host_rollups(rows),
        Table::SpanHourRollups => span_hour_rollups(&span_rollups(rows)),
        _ => span_rollups(rows),
    }
}

/// Span rollups per hour added up from `minutes` (span rollups per minute): per (project,
/// hour, service, operation), in segment order.
pub fn span_hour_rollups(minutes: &[(String, Row)]) -> Vec<(String, Row)> {
    added_up(minutes, HOUR_NS, Row::SpanHourRollup)
}

/// Span rollups per day added up from `hours` (span rollups per hour), as
/// [`span_hour_rollups`] does from minutes.
pub fn span_day_rollups(hours: &[(String, Row)]) -> Vec<(String, Row)> {
    added_up(hours, DAY_NS, Row::SpanDayRollup)
}

/// How a row of span rollup table `table` is made.
pub fn span_rollup_row(table: Table) -> fn(SpanRollup) -> Row {
    match table {
        Table::SpanHourRollups => Row::SpanHourRollup,
        Table::SpanDayRollups => Row::SpanDayRollup,
        _ => Row::SpanRollup,
    }
}

/// Span rollup rows of `rows` added up per (project, `width`-long bucket, service, operation).
fn added_up(rows: &[(String, Row)], width: i64, row: fn(SpanRollup) -> Row) -> Vec<(String, Row)> {
    let mut groups: SpanGroups<'_> = FxHashMap::default();
    for (project, r) in rows {
        if let Row::SpanRollup(r) | Row::SpanHourRollup(r) = r {
            let key =
                (project.as_str(), bucket_of(r.bucket_unix_nanos, width), r.service.as_str(), r.operation.as_str());
            groups.entry(key).or_default().absorb(&r.totals);
        }
    }
    span_rollup_rows(groups, row)
}

/// Per (project, minute, service, operation), the totals of the spans among `rows`.
fn span_rollups(rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    let mut groups: SpanGroups<'_> = FxHashMap::default();
    for r in rows {
        if let Row::Span(s) = r.row {
            let key = (r.project, minute_of(s.start_unix_nanos), s.service_name.as_str(), s.operation.as_str());
            // As a scan reads the duration: the stored i64.
            groups.entry(key).or_default().add(s.duration_nanos as i64, s.status == SpanStatus::Error);
        }
    }
    span_rollup_rows(groups, Row::SpanRollup)
}

/// Spans' totals per (project, bucket, service, operation).
type SpanGroups<'a> = FxHashMap<(&'a str, i64, &'a str, &'a str), SpanTotals>;

/// The rows of `groups` (made with `row`), in segment order.
fn span_rollup_rows(groups: SpanGroups<'_>, row: fn(SpanRollup) -> Row) -> Vec<(String, Row)> {
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    groups
        .into_iter()
        .map(|((project, bucket, service, operation), totals)| {
            let r = SpanRollup {
                service: service.to_owned(),
                operation: operation.to_owned(),
                bucket_unix_nanos: bucket,
                totals,
            };
            (project.to_owned(), row(r))
        })
        .collect()
}

/// Per (project, hour, event name), the events among `rows`.
fn event_rollups(rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    let mut groups: FxHashMap<(&str, i64, &str), u64> = FxHashMap::default();
    for r in rows {
        if let Row::Event(e) = r.row {
            *groups.entry((r.project, hour_of(e.unix_nanos), e.event.as_str())).or_default() += 1;
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable();
    groups
        .into_iter()
        .map(|((project, hour, event), count)| {
            let r = EventRollup { event: event.to_owned(), hour_unix_nanos: hour, count };
            (project.to_owned(), Row::EventRollup(r))
        })
        .collect()
}

/// Per (project, hostname, minute), the samples among `rows`.
fn host_rollups(rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    let mut groups: FxHashMap<(&str, &str, i64), HostBucket> = FxHashMap::default();
    for r in rows {
        if let Row::HostMetric(m) = r.row {
            let minute = minute_of(m.unix_nanos);
            let b = groups
                .entry((r.project, m.hostname.as_str(), minute))
                .or_insert_with(|| HostBucket { start_unix_nanos: minute, ..Default::default() });
            b.add_sample(m.values());
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    groups
        .into_iter()
        .map(|((project, hostname, _), means)| {
            (project.to_owned(), Row::HostRollup(HostRollup { hostname: hostname.to_owned(), means }))
        })
        .collect()
}

/// The rollups of a shard buffer's rows, added up row by row, so that a rollup scan of fresh
/// rows reads a row per key and bucket too. They equal [`rollup_rows`] of the same rows; they
/// cannot take rows away, so a buffer holding an aborted batch is read row by row. A rollup
/// table whose rows stop paying (see [`pays`]) is dropped and its rows no longer added.
#[derive(Default)]
pub struct Running {
    tables: FxHashMap<Table, Kept>,
}

/// One rollup table's running rows, kept as the rows a read returns so that it only filters.
struct Kept {
    /// The source rows added.
    rows: u64,
    pays: bool,
    groups: Vec<Group>,
    /// Positions in `groups`, by the hash of a group's key.
    index: HashTable<u32>,
}

struct Group {
    project: Arc<str>,
    bucket: i64,
    row: Row,
}

impl Running {
    /// Adds `row` (tables without rollups, or whose rollups stopped paying, are skipped).
    pub fn add(&mut self, project: &Arc<str>, row: &Row) {
        let (table, bucket, name, operation) = match row {
            Row::Span(s) => (Table::SpanRollups, minute_of(s.start_unix_nanos), &s.service_name, s.operation.as_str()),
            Row::Event(e) => (Table::EventRollups, hour_of(e.unix_nanos), &e.event, ""),
            Row::HostMetric(m) => (Table::HostRollups, minute_of(m.unix_nanos), &m.hostname, ""),
            _ => return,
        };
        let kept = self.tables.entry(table).or_insert_with(|| Kept {
            rows: 0,
            pays: true,
            groups: Vec::new(),
            index: HashTable::new(),
        });
        if !kept.pays {
            return;
        }
        kept.rows += 1;
        let hash = key_hash(project, bucket, name, operation);
        let Kept { groups, index, .. } = kept;
        let at = match index.find(hash, |&i| groups[i as usize].is(project, bucket, name, operation)) {
            Some(&i) => i as usize,
            None => {
                let row = match table {
                    Table::HostRollups => Row::HostRollup(HostRollup {
                        hostname: name.clone(),
                        means: HostBucket { start_unix_nanos: bucket, ..Default::default() },
                    }),
                    Table::EventRollups => {
                        Row::EventRollup(EventRollup { event: name.clone(), hour_unix_nanos: bucket, count: 0 })
                    }
                    _ => Row::SpanRollup(SpanRollup {
                        service: name.clone(),
                        operation: operation.to_owned(),
                        bucket_unix_nanos: bucket,
                        totals: SpanTotals::default(),
                    }),
                };
                let i = u32::try_from(groups.len()).expect("fewer groups than rows, bounded by the buffer");
                index.insert_unique(hash, i, |&j| groups[j as usize].hash());
                groups.push(Group { project: project.clone(), bucket, row });
                i as usize
            }
        };
        match (row, &mut groups[at].row) {
            // As a scan reads the duration: the stored i64.
            (Row::Span(s), Row::SpanRollup(r)) => r.totals.add(s.duration_nanos as i64, s.status == SpanStatus::Error),
            (Row::HostMetric(m), Row::HostRollup(r)) => r.means.add_sample(m.values()),
            (_, Row::EventRollup(r)) => r.count += 1,
            _ => unreachable!("a group holds the rollup of its source table"),
        }
        if !pays(table, kept.rows, kept.groups.len() as u64) {
            *kept = Kept { rows: kept.rows, pays: false, groups: Vec::new(), index: HashTable::new() };
        }
    }

    /// Whether the rollups of `table` are kept: none of its rows added yet, or few enough
    /// groups for them.
    pub fn pays(&self, table: Table) -> bool {
        self.tables.get(&kept_as(table)).is_none_or(|t| t.pays)
    }

    /// How many rollup rows there are.
    pub fn len(&self) -> usize {
        self.tables.values().map(|t| t.groups.len()).sum()
    }

    /// The rows of rollup table `table` of `project` whose bucket starts in `[from_ns, to_ns)`
    /// and whose name (host, event or service) is one of `names` (any when empty).
    pub fn rows(&self, table: Table, project: &str, names: &[&str], from_ns: i64, to_ns: i64) -> RunningRows<'_> {
        let named = |g: &&Group| names.is_empty() || names.contains(&g.name());
        let groups = self.groups_in(kept_as(table), from_ns, to_ns).filter(|g| *g.project == *project).filter(named);
        if let (Table::SpanHourRollups | Table::SpanDayRollups, Some(width)) = (table, width(table)) {
            let minutes: Vec<(String, Row)> = groups.map(|g| (String::new(), g.row.clone())).collect();
            return RunningRows::AddedUp(
                added_up(&minutes, width, span_rollup_row(table)).into_iter().map(|(_, row)| row).collect(),
            );
        }
        RunningRows::Kept(groups.map(|g| &g.row).collect())
    }

    /// The rows of rollup table `table`, of every project, whose bucket starts in
    /// `[from_ns, to_ns)`: what [`rollup_rows`] gives for the same rows, in its order.
    pub fn rows_of_every_project(&self, table: Table, from_ns: i64, to_ns: i64) -> Vec<(String, Row)> {
        let mut groups: Vec<&Group> = self.groups_in(table, from_ns, to_ns).collect();
        groups.sort_unstable_by(|a, b| a.segment_order().cmp(&b.segment_order()));
        groups.into_iter().map(|g| (g.project.to_string(), g.row.clone())).collect()
    }

    fn groups_in(&self, table: Table, from_ns: i64, to_ns: i64) -> impl Iterator<Item = &Group> {
        let groups = self.tables.get(&table).map_or(&[][..], |t| &t.groups);
        groups.iter().filter(move |g| (from_ns..to_ns).contains(&g.bucket))
    }
}

/// Rows read from running rollups: the kept rows themselves, or hours and days added up from
/// minutes.
pub enum RunningRows<'a> {
    Kept(Vec<&'a Row>),
    AddedUp(Vec<Row>),
}

impl RunningRows<'_> {
    pub fn refs(&self) -> Vec<&Row> {
        match self {
            RunningRows::Kept(rows) => rows.clone(),
            RunningRows::AddedUp(rows) => rows.iter().collect(),
        }
    }
}

fn key_hash(project: &str, bucket: i64, name: &str, operation: &str) -> u64 {
    rustc_hash::FxBuildHasher.hash_one((project, bucket, name, operation))
}

/// The rollup table whose running rows make those of `table`: hours and days are added up
/// from minutes when read.
fn kept_as(table: Table) -> Table {
    match table {
        Table::SpanHourRollups | Table::SpanDayRollups => Table::SpanRollups,
        other => other,
    }
}

impl Group {
    /// The event name, the span's service or the hostname; and the span's operation (empty
    /// for the others).
    fn name_and_operation(&self) -> (&str, &str) {
        match &self.row {
            Row::HostRollup(r) => (&r.hostname, ""),
            Row::EventRollup(r) => (&r.event, ""),
            Row::SpanRollup(r) => (&r.service, &r.operation),
            _ => unreachable!("a group holds a rollup row"),
        }
    }

    fn name(&self) -> &str {
        self.name_and_operation().0
    }

    fn is(&self, project: &str, bucket: i64, name: &str, operation: &str) -> bool {
        self.bucket == bucket && self.name_and_operation() == (name, operation) && *self.project == *project
    }

    fn hash(&self) -> u64 {
        let (name, operation) = self.name_and_operation();
        key_hash(&self.project, self.bucket, name, operation)
    }

    /// Sorts like the rows of its segment: host rollups by hostname, then minute; the others
    /// by bucket, then name and operation.
    fn segment_order(&self) -> (&str, &str, i64, &str, &str) {
        let (name, operation) = self.name_and_operation();
        match self.row {
            Row::HostRollup(_) => (&self.project, name, self.bucket, "", ""),
            _ => (&self.project, "", self.bucket, name, operation),
        }
    }
}

/// Rollup rows a buffer may hold beyond one per [`min_rows_per_rollup`] rows (its first rows
/// are always rolled up).
pub const ROLLUP_SLACK: u64 = 1 << 16;

/// Whether `groups` rollup rows of `table` for `rows` source rows are worth keeping: at most
/// [`ROLLUP_SLACK`] beyond one per [`min_rows_per_rollup`] rows (which also bounds their
/// memory).
fn pays(table: Table, rows: u64, groups: u64) -> bool {
    groups <= ROLLUP_SLACK + rows / min_rows_per_rollup(table)
}

/// The columns a rollup table's consumers read from its source rows, and those read as
/// dictionaries.
pub fn source_columns(table: Table) -> (&'static [&'static str], Vec<&'static str>) {
    match table {
        Table::EventRollups => (&["time_ns"], vec![]),
        Table::HostRollups => (&HOST_SOURCE_COLUMNS, vec![]),
        _ => (&["service", "operation", "duration_ns", "status"], vec!["service", "operation"]),
    }
}

/// The columns of a host rollup holding metric `m`'s sum and count (a count of 0: no sample
/// had it).
pub fn host_columns(m: &str) -> [String; 2] {
    [format!("{m}_sum"), format!("{m}_count")]
}

/// A batch's host rollup columns (the minute and those [`host_columns`] names).
pub struct HostRollupColumns<'a> {
    minute: &'a Int64Array,
    sums: Vec<&'a Float64Array>,
    counts: Vec<&'a UInt64Array>,
}

impl<'a> HostRollupColumns<'a> {
    pub fn of(c: &Cols<'a>) -> Self {
        let columns = HOST_METRICS.map(host_columns);
        HostRollupColumns {
            minute: c.i64("minute_ns"),
            sums: columns.iter().map(|[sum, _]| c.f64(sum)).collect(),
            counts: columns.iter().map(|[_, count]| c.u64(count)).collect(),
        }
    }

    /// Every row's [`bucket`](Self::bucket), in order.
    pub fn buckets(&self) -> impl Iterator<Item = HostBucket> + '_ {
        (0..self.minute.len()).map(|i| self.bucket(i))
    }

    /// Row `i`: its minute, and per metric the sum and count (none for a count of 0).
    pub fn bucket(&self, i: usize) -> HostBucket {
        let mut b = HostBucket { start_unix_nanos: self.minute.value(i), ..Default::default() };
        for ((m, sum), count) in b.means_mut().into_iter().zip(&self.sums).zip(&self.counts) {
            let count = count.value(i);
            *m = (count > 0).then(|| Mean { sum: sum.value(i), count });
        }
        b
    }
}

/// What host series read of samples: time and metrics.
const HOST_SOURCE_COLUMNS: [&str; 7] =
    ["time_ns", HOST_METRICS[0], HOST_METRICS[1], HOST_METRICS[2], HOST_METRICS[3], HOST_METRICS[4], HOST_METRICS[5]];

/// Fewest source rows per stored rollup row for reading the rollup to pay: a span rollup row
/// (its durations decoded and added) costs about six spans; a host rollup row about two
/// samples (docs/BENCHMARKS.md, "Rollups", "Host rollups").
pub fn min_rows_per_rollup(table: Table) -> u64 {
    match table {
        Table::HostRollups => 2,
        _ => 8,
    }
}

/// Version of the stored form of a rollup's durations.
const DURATIONS_V1: u8 = 1;

/// A rollup's durations as a segment stores them (the `durations` column): a version byte,
/// the exact sum (i128, little-endian), the values at or under the sketch's minimum, the
/// extremes (f64, little-endian), then the non-empty buckets as key deltas (zigzag) and
/// counts, all varints.
pub fn encode_durations(t: &SpanTotals) -> Vec<u8> {
    let c = t.latency.counts();
    let mut out = Vec::with_capacity(40 + 4 * c.buckets.len());
    out.push(DURATIONS_V1);
    out.extend_from_slice(&t.duration_sum_ns.to_le_bytes());
    encode_varint(c.zeros, &mut out);
    out.extend_from_slice(&c.min.to_le_bytes());
    out.extend_from_slice(&c.max.to_le_bytes());
    encode_varint(c.buckets.len() as u64, &mut out);
    let mut previous = 0i64;
    for &(key, n) in &c.buckets {
        let delta = i64::from(key) - previous;
        encode_varint(((delta << 1) ^ (delta >> 63)) as u64, &mut out);
        encode_varint(n, &mut out);
        previous = i64::from(key);
    }
    out
}

/// Reads back [`encode_durations`]: the sum and the latency buckets of the totals.
pub fn decode_durations(bytes: &[u8]) -> io::Result<(i128, LatencyBuckets)> {
    let mut t = SpanTotals::default();
    add_durations(bytes, &mut t)?;
    Ok((t.duration_sum_ns, t.latency))
}

/// Adds the durations stored as [`encode_durations`] to `into` (its sum and latency buckets;
/// not its count and errors, stored beside them), without building them apart first: a long
/// APM range adds up a row per endpoint and minute.
pub fn add_durations(mut bytes: &[u8], into: &mut SpanTotals) -> io::Result<()> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("span rollup: {what}"));
    let mut fixed = |n: usize| -> io::Result<&[u8]> {
        if bytes.len() < n {
            return Err(bad("truncated"));
        }
        let (head, rest) = bytes.split_at(n);
        bytes = rest;
        Ok(head)
    };
    if fixed(1)?[0] != DURATIONS_V1 {
        return Err(bad("unknown version"));
    }
    let sum = i128::from_le_bytes(fixed(16)?.try_into().expect("16 bytes"));
    let mut rest = bytes;
    let varint = |rest: &mut &[u8]| decode_varint(rest).map_err(|_| bad("bad varint"));
    let zeros = varint(&mut rest)?;
    let f64_at = |b: &[u8], at: usize| b.get(at..at + 8).map(|s| f64::from_le_bytes(s.try_into().expect("8 bytes")));
    let (min, max) = match (f64_at(rest, 0), f64_at(rest, 8)) {
        (Some(min), Some(max)) => (min, max),
        _ => return Err(bad("truncated")),
    };
    rest = &rest[16..];
    let n = varint(&mut rest)?;
    // A row that does not decode fails the query: what it added meanwhile is never answered.
    into.duration_sum_ns += sum;
    into.latency.add_extremes(zeros, min, max);
    let (mut key, mut previous) = (0i64, None);
    for _ in 0..n {
        let z = varint(&mut rest)?;
        let count = varint(&mut rest)?;
        key += ((z >> 1) as i64) ^ -((z & 1) as i64);
        let k = i32::try_from(key).map_err(|_| bad("bucket key out of range"))?;
        if previous.is_some_and(|p| p >= k) {
            return Err(bad("bucket keys not increasing"));
        }
        previous = Some(k);
        into.latency.add_bucket(k, count);
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Rows added one by one to running rollups give, for any range of bucket starts, the
        /// rollup rows written for those rows at flush (in their order), and each project's.
        #[test]
        fn running_rollups_equal_the_rollups_written_for_the_same_rows(
            rows in proptest::collection::vec((0u8..2, 0u8..3, 0u8..3, -200i64..200, 0u64..5_000_000, proptest::bool::ANY), 0..200),
            from in -4i64..4,
            to in -4i64..4,
        ) {
            use sextant_model::row::{Event, HostMetric, Span};
            let rows: Vec<(String, Row)> = rows
                .iter()
                .map(|&(project, kind, name, seconds, duration, error)| {
                    let t = seconds * 20_000_000_000;
                    let row = if kind == 0 {
                        Row::Event(Event { event: format!("e{name}"), unix_nanos: t * 30, ..Default::default() })
                    } else if kind == 2 {
                        // Whole numbers: their sums do not depend on the order of addition.
                        Row::HostMetric(HostMetric {
                            hostname: format!("h{name}"),
                            unix_nanos: t,
                            cpu_percent: (!error).then_some((duration % 100) as f64),
                            memory_used_bytes: Some(duration),
                            network_tx_bytes_per_sec: error.then_some(duration as f64),
                            ..Default::default()
                        })
                    } else {
                        Row::Span(Span {
                            service_name: format!("s{}", name % 2),
                            operation: format!("op{name}"),
                            start_unix_nanos: t,
                            duration_nanos: duration,
                            status: if error { SpanStatus::Error } else { SpanStatus::Ok },
                            ..Default::default()
                        })
                    };
                    (format!("p{project}"), row)
                })
                .collect();
            let mut running = Running::default();
            let projects: Vec<Arc<str>> = vec![Arc::from("p0"), Arc::from("p1")];
            for (project, row) in &rows {
                running.add(&projects[usize::from(project == "p1")], row);
            }
            for table in [Table::EventRollups, Table::SpanRollups, Table::HostRollups] {
                let width = width(table).expect("a rollup table");
                let (from, to) = (from * width * 30, to * width * 30);
                let source: Vec<RowRef<'_>> = rows
                    .iter()
                    .filter(|(_, r)| r.table() == table.source() && (from..to).contains(&r.time_ns()))
                    .map(|(p, r)| RowRef::new(p, r, 0))
                    .collect();
                let debug = |rows: Vec<(String, Row)>| rows.iter().map(|r| format!("{r:?}")).collect::<Vec<_>>();
                proptest::prop_assert_eq!(
                    debug(running.rows_of_every_project(table, from, to)),
                    debug(rollup_rows(table, &source)),
                    "{:?}, as written at flush", table
                );
                for project in ["p0", "p1"] {
                    let source: Vec<RowRef<'_>> = rows
                        .iter()
                        .filter(|(p, r)| p == project && r.table() == table.source() && (from..to).contains(&r.time_ns()))
                        .map(|(p, r)| RowRef::new(p, r, 0))
                        .collect();
                    let mut want: Vec<String> = rollup_rows(table, &source).iter().map(|(_, r)| format!("{r:?}")).collect();
                    let mut got: Vec<String> = running.rows(table, project, &[], from, to).refs().iter().map(|r| format!("{r:?}")).collect();
                    got.sort();
                    want.sort();
                    proptest::prop_assert_eq!(got, want, "{:?} {}", table, project);
                    // Of one name (host, event or service): that name's rows only.
                    let name_of = |r: &Row| match r {
                        Row::HostRollup(h) => h.hostname.clone(),
                        Row::EventRollup(e) => e.event.clone(),
                        Row::SpanRollup(s) => s.service.clone(),
                        _ => unreachable!("a rollup row"),
                    };
                    for name in ["h1", "e1", "s1", "s0"] {
                        let mut named: Vec<String> = running.rows(table, project, &[name], from, to).refs().iter().map(|r| format!("{r:?}")).collect();
                        named.sort();
                        let mut want: Vec<String> = rollup_rows(table, &source).iter().filter(|(_, r)| name_of(r) == name).map(|(_, r)| format!("{r:?}")).collect();
                        want.sort();
                        proptest::prop_assert_eq!(named, want, "{:?} {} {}", table, project, name);
                    }
                }
            }
            // Hours: each endpoint's spans of the hour added up directly, the same from the
            // rollups per minute written at flush and from the running ones.
            let (from, to) = (from * HOUR_NS * 2, to * HOUR_NS * 2);
            for project in ["p0", "p1"] {
                let mut direct: std::collections::BTreeMap<(i64, String, String), SpanTotals> = Default::default();
                let mut source = Vec::new();
                for (p, row) in rows.iter().filter(|(p, r)| p == project && (from..to).contains(&r.time_ns())) {
                    if let Row::Span(s) = row {
                        let key = (hour_of(s.start_unix_nanos), s.service_name.clone(), s.operation.clone());
                        direct.entry(key).or_default().add(s.duration_nanos as i64, s.status == SpanStatus::Error);
                        source.push(RowRef::new(p, row, 0));
                    }
                }
                let want: Vec<Row> = direct
                    .into_iter()
                    .map(|((hour, service, operation), totals)| {
                        Row::SpanHourRollup(SpanRollup { service, operation, bucket_unix_nanos: hour, totals })
                    })
                    .collect();
                let written: Vec<Row> =
                    span_hour_rollups(&rollup_rows(Table::SpanRollups, &source)).into_iter().map(|(_, r)| r).collect();
                proptest::prop_assert_eq!(&written, &want);
                let running: Vec<Row> = running.rows(Table::SpanHourRollups, project, &[], from, to).refs().into_iter().cloned().collect();
                proptest::prop_assert_eq!(&running, &want);
            }
        }
    }

    #[test]
    fn hour_rollups_add_durations_bucket_by_bucket() {
        let (mut a, mut b, mut both) = (SpanTotals::default(), SpanTotals::default(), SpanTotals::default());
        for (i, ns) in [0i64, 7, 1_500_000, 250_000_000, 40_000_000_000, i64::MAX].into_iter().enumerate() {
            let into = if i % 2 == 0 { &mut a } else { &mut b };
            into.add(ns, i == 3);
            both.add(ns, i == 3);
        }
        a.absorb(&b);
        assert_eq!(a, both);
        a.absorb(&SpanTotals::default());
        assert_eq!(a, both);
    }

    #[test]
    fn minutes_round_down_and_up_also_before_1970() {
        assert_eq!(minute_of(MINUTE_NS + 5), MINUTE_NS);
        assert_eq!(minute_of(-5), -MINUTE_NS);
        assert_eq!(bucket_at_or_after(MINUTE_NS, MINUTE_NS), Some(MINUTE_NS));
        assert_eq!(bucket_at_or_after(MINUTE_NS + 1, MINUTE_NS), Some(2 * MINUTE_NS));
        assert_eq!(bucket_at_or_after(i64::MAX, MINUTE_NS), None);
        assert_eq!(minute_of(i64::MIN), i64::MIN);
    }

    #[test]
    fn durations_read_back_as_written() {
        let mut t = SpanTotals::default();
        for (ns, e) in
            [(0, false), (1, true), (2_500_000, false), (i64::MAX, false), (-7, false), (40_000_000_000, true)]
        {
            t.add(ns, e);
        }
        let (sum, latency) = decode_durations(&encode_durations(&t)).unwrap();
        assert_eq!((sum, &latency), (t.duration_sum_ns, &t.latency));
        let empty = SpanTotals::default();
        assert_eq!(decode_durations(&encode_durations(&empty)).unwrap().1, empty.latency);
        let bytes = encode_durations(&t);
        for cut in 0..bytes.len() {
            assert!(decode_durations(&bytes[..cut]).is_err(), "a prefix of {cut} bytes");
        }
        assert!(decode_durations(&[9]).is_err());
    }
}
