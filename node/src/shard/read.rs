//! Reads: a scan or trace lookup selects the buffered rows under the state lock and keeps
//! the segment list; [`ScanJob`] and [`TraceLookup`] then read the segments without it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::sync::Arc;

use arrow_array::RecordBatch;
use sextant_model::query::Cost;
use sextant_model::row::Span;

use super::SegmentShard;
use crate::segment::compaction;
use crate::segment::rollup::{min_rows_per_rollup, DAY_S};
use crate::segment::summary::select_summaries;
use crate::segment::table::{from_record_batch, RowRef};
use crate::segment::user_number::{Numbering, USER, USER_ID};
use crate::segment::{Row, Scan, Segment, Table};

impl SegmentShard {
    /// Starts a trace lookup: the in-memory part is done now (under the caller's lock), the
    /// segment part by [`TraceLookup::run`] without any lock held.
    pub fn trace(&self, project: &str, trace_id: &str) -> TraceLookup {
        let tombstones = self.tombstones.clone();
        let hidden = |b: u128| tombstones.contains(&b);
        let mut rows = self.active.trace(project, trace_id, &hidden);
        let published = self.published.read().unwrap();
        for frozen in &published.frozen {
            rows.extend(frozen.trace(project, trace_id, &hidden));
        }
        TraceLookup {
            project: project.to_owned(),
            trace_id: trace_id.to_owned(),
            buffered: rows,
            segments: published.segments.iter().filter(|s| s.meta.table == Table::Spans).cloned().collect(),
            tombstones,
        }
    }

    /// Starts a scan: buffered rows are selected now (under the caller's lock), segments by
    /// [`ScanJob::run`] without any lock held.
    pub fn scan(&self, scan: Scan) -> ScanJob {
        let tombstones = self.tombstones.clone();
        let hidden = |b: u128| tombstones.contains(&b);
        let source_scan = scan.rollup_source();
        let users = scan.returns(USER).then_some(self.users.as_ref());
        let mut buffered = self.active.scan_rows(&scan, &hidden, users);
        let published = self.published.read().unwrap();
        for frozen in &published.frozen {
            buffered.extend(frozen.scan_rows(&scan, &hidden, users));
        }
        let sources = sources(&published.segments, &scan, source_scan, &tombstones);
        drop(published);
        let numbering = users.map(|_| Numbering::new(self.users.clone(), scan.returns(USER_ID)));
        ScanJob::of(scan, buffered, sources, tombstones, numbering)
    }

    /// What [`scan`](Self::scan) would read, without reading it: the candidate row groups of
    /// its segments by their footers ([`Segment::estimate`]), and the buffered rows it would
    /// select ([`Buffer::estimate`](crate::segment::Buffer::estimate)).
    pub fn estimate(&self, scan: &Scan) -> Cost {
        let published = self.published.read().unwrap();
        let buffers = std::iter::once(&self.active).chain(published.frozen.iter().map(|b| b.as_ref()));
        let source_scan = scan.rollup_source();
        let buffered_scan = source_scan.as_ref().unwrap_or(scan);
        let mut cost = Cost::default();
        for b in buffers {
            let (rows, bytes) = b.estimate(buffered_scan);
            cost.rows += rows;
            cost.bytes += bytes;
        }
        let sources = sources(&published.segments, scan, source_scan, &self.tombstones);
        let (rows, bytes) = sources.estimate(scan);
        cost.rows += rows;
        cost.bytes += bytes;
        cost
    }
}

/// The segments a scan reads (see [`sources`]).
#[derive(Default)]
struct Sources {
    /// Read as they are.
    segments: Vec<Arc<Segment>>,
    /// For a rollup scan: source segments read as source rows.
    unrolled: Option<(Scan, Vec<Arc<Segment>>)>,
    /// For a trace-summary scan: spans segments summarized again from their visible spans.
    resummarized: Vec<Arc<Segment>>,
    /// For a scan of day rollups: the days without current ones, read as hour rollups.
    hours: Vec<(Scan, Sources)>,
}

impl Sources {
    /// Rows and bytes of the candidate row groups (see [`Segment::estimate`]).
    fn estimate(&self, scan: &Scan) -> (u64, u64) {
        let unrolled =
            self.unrolled.iter().flat_map(|(source_scan, segments)| segments.iter().map(move |s| (source_scan, s)));
        let summary_source = scan.summary_source();
        let resummarized = summary_source.iter().flat_map(|spans| self.resummarized.iter().map(move |s| (spans, s)));
        let estimates = self
            .segments
            .iter()
            .map(|s| s.estimate(scan))
            .chain(unrolled.chain(resummarized).map(|(source_scan, s)| s.estimate(source_scan)))
            .chain(self.hours.iter().map(|(hour_scan, sources)| sources.estimate(hour_scan)));
        estimates.fold((0, 0), |(rows, bytes), (r, b)| (rows + r, bytes + b))
    }
}

/// The segments a scan reads. Derived rows stored beside a segment that holds a batch aborted
/// after it was written would still count that batch: such a segment is read from its rows
/// instead. A scan of rollups (`source_scan`: its [`rollup_source`](Scan::rollup_source))
/// also reads a source segment's rows where it has no stored rollups (written by an earlier
/// release) or too few rows per rollup row for the rollup to be cheaper.
fn sources(segments: &[Arc<Segment>], scan: &Scan, source_scan: Option<Scan>, tombstones: &BTreeSet<u128>) -> Sources {
    let holds_aborted = |s: &Segment| s.batches.iter().any(|b| tombstones.contains(b));
    if scan.table == Table::SpanDayRollups {
        return day_sources(segments, scan, tombstones);
    }
    let Some(source_scan) = source_scan else {
        let by_id: HashMap<u64, &Arc<Segment>> = segments.iter().map(|s| (s.meta.id, s)).collect();
        let (mut kept, mut resummarized) = (Vec::new(), Vec::new());
        for s in segments.iter().filter(|s| scan.wants_segment(s.meta.table, s.meta.min_ns, s.meta.max_ns)) {
            match s.meta.summarizes.and_then(|id| by_id.get(&id)) {
                Some(source) if holds_aborted(source) => resummarized.push((*source).clone()),
                _ => kept.push(s.clone()),
            }
        }
        return Sources { segments: kept, unrolled: None, resummarized, hours: Vec::new() };
    };
    let rollups: HashMap<u64, &Arc<Segment>> =
        segments.iter().filter(|s| s.meta.table == scan.table).filter_map(|s| Some((s.meta.summarizes?, s))).collect();
    let (mut stored, mut unrolled) = (Vec::new(), Vec::new());
    for source in segments.iter().filter(|s| source_scan.wants_segment(s.meta.table, s.meta.min_ns, s.meta.max_ns)) {
        match rollups.get(&source.meta.id) {
            Some(r)
                if r.meta.rows.saturating_mul(min_rows_per_rollup(r.meta.table)) <= source.meta.rows
                    && !holds_aborted(source) =>
            {
                if scan.wants_segment(r.meta.table, r.meta.min_ns, r.meta.max_ns) {
                    stored.push((*r).clone());
                }
            }
            _ => unrolled.push(source.clone()),
        }
    }
    Sources { segments: stored, unrolled: Some((source_scan, unrolled)), resummarized: Vec::new(), hours: Vec::new() }
}

/// The segments a scan of day rollups (of whole days, like every rollup scan's range) reads:
/// a day's span rollups where they are current (they cover exactly the day's spans segments,
/// none holding an aborted batch) and pay (see [`sources`]), and for the other days of the
/// range with spans, what a scan of hour rollups of those days reads.
fn day_sources(segments: &[Arc<Segment>], scan: &Scan, tombstones: &BTreeSet<u128>) -> Sources {
    let (from_s, to_s) = (scan.from_ns.div_euclid(NS), scan.to_ns.div_euclid(NS));
    let mut stored = Vec::new();
    let mut stale: Vec<(i64, i64)> = Vec::new();
    let days = compaction::days(segments, |s| &s.meta);
    let first = from_s.div_euclid(DAY_S) * DAY_S;
    for (&day, d) in days.range(first..to_s.max(first)) {
        let aborted = d.spans.iter().any(|s| s.batches.iter().any(|b| tombstones.contains(b)));
        let spans_rows: u64 = d.spans.iter().map(|s| s.meta.rows).sum();
        let pays = |r: &Segment| r.meta.rows.saturating_mul(min_rows_per_rollup(r.meta.table)) <= spans_rows;
        match d.current(|s| &s.meta) {
            Some(r) if !aborted && pays(r) => {
                if scan.wants_segment(r.meta.table, r.meta.min_ns, r.meta.max_ns) {
                    stored.push(r.clone());
                }
            }
            _ if d.spans.is_empty() => {}
            _ => {
                let from = day.saturating_mul(NS).max(scan.from_ns);
                let to = day.saturating_add(DAY_S).saturating_mul(NS).min(scan.to_ns);
                match stale.last_mut() {
                    Some(last) if last.1 == from => last.1 = to,
                    _ => stale.push((from, to)),
                }
            }
        }
    }
    let hours = stale
        .into_iter()
        .map(|(from_ns, to_ns)| {
            let hour_scan = Scan { table: Table::SpanHourRollups, from_ns, to_ns, ..scan.clone() };
            let sources = sources(segments, &hour_scan, hour_scan.rollup_source(), tombstones);
            (hour_scan, sources)
        })
        .collect();
    Sources { segments: stored, unrolled: None, resummarized: Vec::new(), hours }
}

const NS: i64 = 1_000_000_000;

/// The part of a trace lookup that reads segments.
pub struct TraceLookup {
    project: String,
    trace_id: String,
    buffered: Vec<Row>,
    segments: Vec<Arc<Segment>>,
    tombstones: BTreeSet<u128>,
}

impl TraceLookup {
    /// The trace's spans ordered by start time; a span stored twice (a client retrying a
    /// batch) is returned once.
    pub fn run(self) -> io::Result<Vec<Span>> {
        let mut rows = self.buffered;
        for segment in &self.segments {
            for (row, ordinal) in segment.trace(&self.project, &self.trace_id)? {
                let batch = segment.batches.get(ordinal as usize).copied();
                if !batch.is_some_and(|b| self.tombstones.contains(&b)) {
                    rows.push(row);
                }
            }
        }
        let mut seen = HashSet::new();
        let mut spans: Vec<Span> = rows
            .into_iter()
            .filter_map(|r| match r {
                Row::Span(s) => Some(s),
                _ => None,
            })
            .filter(|s| seen.insert(s.span_id.clone()))
            .map(|s| s.map_attributes(|a| crate::segment::attribute::decode(&a)))
            .collect();
        spans.sort_by(|a, b| (a.start_unix_nanos, &a.span_id).cmp(&(b.start_unix_nanos, &b.span_id)));
        Ok(spans)
    }
}

/// The part of a scan that reads segments.
pub struct ScanJob {
    scan: Scan,
    buffered: Vec<RecordBatch>,
    segments: Vec<Arc<Segment>>,
    /// For a rollup scan: source segments read as source rows (see [`sources`]).
    unrolled: Option<(Scan, Vec<Arc<Segment>>)>,
    /// For a trace-summary scan: spans segments summarized again (see [`sources`]).
    resummarized: Vec<Arc<Segment>>,
    tombstones: BTreeSet<u128>,
    /// For a scan of user numbers: numbers the rows stored without them.
    numbering: Option<Numbering>,
    /// For a scan of day rollups: the days without current ones, as scans of hour rollups
    /// (their buffered rows are this scan's).
    hours: Vec<ScanJob>,
}

impl ScanJob {
    /// A scan that reads nothing (what an estimate hands the plan instead of a real one).
    pub fn empty(scan: Scan) -> Self {
        ScanJob::of(scan, Vec::new(), Sources::default(), BTreeSet::new(), None)
    }

    fn of(
        scan: Scan,
        buffered: Vec<RecordBatch>,
        sources: Sources,
        tombstones: BTreeSet<u128>,
        numbering: Option<Numbering>,
    ) -> Self {
        let Sources { segments, unrolled, resummarized, hours } = sources;
        let hours = hours
            .into_iter()
            .map(|(hour_scan, sources)| ScanJob::of(hour_scan, Vec::new(), sources, tombstones.clone(), None))
            .collect();
        ScanJob { scan, buffered, segments, unrolled, resummarized, tombstones, numbering, hours }
    }

    /// The matching rows: buffered ones first, then segment by segment (no global order).
    pub fn run(self) -> io::Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        self.run_each(|rb| {
            out.push(rb);
            Ok::<_, io::Error>(())
        })?;
        Ok(out)
    }

    /// The user numbers of `ids` (numbered now if new), for a scan of user numbers (none for
    /// another scan).
    pub fn user_numbers<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Vec<u32> {
        self.numbering.as_ref().map_or_else(Vec::new, |n| n.numbers_of(ids))
    }

    /// The same scan without its rows before `from_ns`, for a reader that needs none of them:
    /// segments ending earlier are left out, the others read from there. Of a scan of
    /// stored rows only (not rollups or summaries derived on read).
    pub fn starting_at(mut self, from_ns: i64) -> Self {
        debug_assert!(
            self.unrolled.is_none() && self.resummarized.is_empty() && self.hours.is_empty(),
            "a scan of stored rows"
        );
        if from_ns > self.scan.from_ns {
            self.scan.from_ns = from_ns;
            self.segments.retain(|s| s.meta.max_ns >= from_ns);
        }
        self
    }

    /// Where the scanned range starts.
    pub fn from_ns(&self) -> i64 {
        self.scan.from_ns
    }

    /// Where the scanned range ends (excluded).
    pub fn to_ns(&self) -> i64 {
        self.scan.to_ns
    }

    /// At most how many rows the scan hands out (its segments may hold other projects' and
    /// other times' rows too): for sizing a reader's tables once instead of growing them.
    pub fn max_rows(&self) -> u64 {
        let buffered: usize = self.buffered.iter().map(|rb| rb.num_rows()).sum();
        let unrolled = self.unrolled.iter().flat_map(|(_, segments)| segments);
        let read = self.segments.iter().chain(unrolled).chain(&self.resummarized);
        let hours: u64 = self.hours.iter().map(ScanJob::max_rows).sum();
        buffered as u64 + read.map(|s| s.meta.rows).sum::<u64>() + hours
    }

    /// Like [`run`](Self::run), handing each batch to `f` as soon as it is read, so a query
    /// over its row budget stops early instead of holding every batch.
    pub fn run_each<E: From<io::Error>>(mut self, f: impl FnMut(RecordBatch) -> Result<(), E>) -> Result<(), E> {
        let mut f = self.numbered(f);
        for rb in std::mem::take(&mut self.buffered) {
            f(rb)?;
        }
        self.each_resummarized(&mut f)?;
        let hidden = |b: u128| self.tombstones.contains(&b);
        for segment in &self.segments {
            for rb in segment.scan(&self.scan, &hidden)? {
                f(rb)?;
            }
        }
        self.each_unrolled(&mut f)?;
        for hours in std::mem::take(&mut self.hours) {
            hours.run_each(&mut f as &mut dyn FnMut(RecordBatch) -> Result<(), E>)?;
        }
        Ok(())
    }

    /// `f` of batches with user numbers where the scan asked for them (see [`Numbering`]).
    fn numbered<E: From<io::Error>>(
        &mut self,
        mut f: impl FnMut(RecordBatch) -> Result<(), E>,
    ) -> impl FnMut(RecordBatch) -> Result<(), E> {
        let mut numbering = self.numbering.take();
        move |rb| match numbering.as_mut() {
            Some(n) => f(n.add(rb).map_err(io::Error::other)?),
            None => f(rb),
        }
    }

    /// The trace summaries of each resummarized segment's spans, except hidden ones.
    fn each_resummarized<E: From<io::Error>>(&self, f: &mut impl FnMut(RecordBatch) -> Result<(), E>) -> Result<(), E> {
        let hidden = |b: u128| self.tombstones.contains(&b);
        let Some(spans_scan) = self.scan.summary_source() else { return Ok(()) };
        for segment in &self.resummarized {
            let mut spans = Vec::new();
            for rb in segment.scan(&spans_scan, &hidden)? {
                spans.extend(from_record_batch(Table::Spans, &rb));
            }
            let refs: Vec<RowRef<'_>> = spans.iter().map(|(project, row, _)| RowRef::new(project, row, 0)).collect();
            for rb in select_summaries(&self.scan, &refs) {
                f(rb)?;
            }
        }
        Ok(())
    }

    fn each_unrolled<E: From<io::Error>>(&self, f: &mut impl FnMut(RecordBatch) -> Result<(), E>) -> Result<(), E> {
        let hidden = |b: u128| self.tombstones.contains(&b);
        if let Some((source_scan, segments)) = &self.unrolled {
            for segment in segments {
                for rb in segment.scan(source_scan, &hidden)? {
                    f(rb)?;
                }
            }
        }
        Ok(())
    }

    /// The least of the row groups' latest times that [`run_newest_first`](Self::run_newest_first)
    /// would pass to its `enough` (`i64::MAX` when it would read no row group).
    pub fn oldest_row_group_max(&self) -> i64 {
        let maxima = self.segments.iter().flat_map(|s| s.row_groups_by_time(&self.scan)).map(|(_, max)| max);
        maxima.min().unwrap_or(i64::MAX)
    }

    /// Like [`run_each`](Self::run_each) for "the newest rows first, up to a page": the
    /// buffered rows, then the candidate row groups of every segment, latest-ending first.
    /// Before each row group, `enough(t)` is asked with the latest time it can hold: true ends
    /// the scan (the caller already has a page of rows newer than `t`, and every row group left
    /// ends at or before `t`).
    pub fn run_newest_first<E: From<io::Error>>(
        mut self,
        mut enough: impl FnMut(i64) -> bool,
        f: impl FnMut(RecordBatch) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut f = self.numbered(f);
        for rb in std::mem::take(&mut self.buffered) {
            f(rb)?;
        }
        self.each_resummarized(&mut f)?;
        let hidden = |b: u128| self.tombstones.contains(&b);
        let mut groups: Vec<(i64, usize, usize)> = Vec::new();
        for (s, segment) in self.segments.iter().enumerate() {
            groups.extend(segment.row_groups_by_time(&self.scan).into_iter().map(|(rg, max)| (max, s, rg)));
        }
        groups.sort_unstable_by(|a, b| b.cmp(a));
        for (max, s, rg) in groups {
            if enough(max) {
                break;
            }
            for rb in self.segments[s].scan_row_groups(&self.scan, vec![rg], &hidden)? {
                f(rb)?;
            }
        }
        debug_assert!(self.hours.is_empty(), "a scan of stored rows");
        self.each_unrolled(&mut f)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use sextant_model::row::{LogRecord, RowBatch, SpanStatus};
    use sextant_proto::convert::persist_row::encode_ingest;

    #[test]
    fn scans_see_the_same_rows_in_the_buffer_and_in_segments() {
        use crate::segment::Filter;
        use sextant_model::text::LogQuery;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let mut root = span("t1", "a", 10);
        root.service_name = "web".into();
        let mut child = span("t1", "b", 20);
        child.parent_span_id = "a".into();
        child.status = SpanStatus::Error;
        ingest(&mut s, 1, 1, batch("p", vec![root, child, span("t2", "c", HOUR)]));
        ingest(&mut s, 2, 2, batch("other", vec![span("t9", "z", 10)]));
        let logs = RowBatch {
            project_id: "p".into(),
            logs: vec![
                log("api", 5, "Payment declined for order 42", 1),
                log("api", 3, "payment accepted", 2),
                log("db", 5, "connection reset by peer", 3),
            ],
            ..Default::default()
        };
        ingest(&mut s, 3, 3, encode_ingest(logs));

        let q = |text: &str| Filter { log_query: Some(LogQuery::parse(text).unwrap()), ..Default::default() };
        let probes = |s: &SegmentShard| {
            (
                scan_all(s, Table::Spans, "p", Filter::default()).len(),
                scan_all(s, Table::Spans, "p", Filter { errors_only: true, ..Default::default() }).len(),
                scan_all(s, Table::Spans, "p", Filter { services: vec!["web".into()], ..Default::default() }).len(),
                scan_all(s, Table::TraceSummaries, "p", Filter::default()),
                scan_all(s, Table::Logs, "p", q("payment")).len(),
                scan_all(s, Table::Logs, "p", q("payment -declined")).len(),
                scan_all(s, Table::Logs, "p", q(r#""reset by peer" service:db"#)).len(),
                scan_all(s, Table::Logs, "p", Filter { levels: vec![5], ..Default::default() }).len(),
                scan_all(s, Table::Logs, "other", Filter::default()).len(),
            )
        };
        let before = probes(&s);
        assert_eq!(
            (before.0, before.1, before.2, before.4, before.5, before.6, before.7, before.8),
            (3, 1, 1, 2, 1, 1, 2, 0)
        );
        let Row::TraceSummary(t1) = &before.3[0] else { panic!("summary expected") };
        assert_eq!(
            (t1.trace_id.as_str(), t1.span_count, t1.error_count, t1.root_service.as_str()),
            ("t1", 2, 1, "web")
        );
        assert_eq!(before.3.len(), 2);

        checkpoint(&mut s, 3);
        assert_eq!(probes(&s), before);
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(probes(&s), before);
    }

    #[test]
    fn log_search_reads_only_row_groups_holding_every_term() {
        use crate::segment::Filter;
        use sextant_model::text::LogQuery;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        // 20 000 lines sorted by time: three row groups; "needle" only in the last one.
        let logs: Vec<LogRecord> =
            (0..20_000).map(|i| log("api", 3, if i == 19_000 { "found the needle" } else { "hay hay" }, i)).collect();
        ingest(&mut s, 1, 1, encode_ingest(RowBatch { project_id: "p".into(), logs, ..Default::default() }));
        checkpoint(&mut s, 1);
        let scan = |text: &str| Scan {
            table: Table::Logs,
            project: "p".into(),
            from_ns: 0,
            to_ns: i64::MAX,
            filter: Filter { log_query: Some(LogQuery::parse(text).unwrap()), ..Default::default() },
            columns: vec!["message".into()],
            dictionaries: vec![],
            stored_ids: false,
        };
        let published = s.published.read().unwrap();
        let segment = published.segments.iter().find(|g| g.meta.table == Table::Logs).unwrap();
        assert_eq!(segment.candidate_row_groups(&scan("needle")), [2]);
        assert_eq!(segment.candidate_row_groups(&scan("needle found")), [2]);
        assert!(segment.candidate_row_groups(&scan("needle absent")).is_empty());
        assert_eq!(segment.candidate_row_groups(&scan("hay")), [0, 1, 2]);
        drop(published);
        let hits = s.scan(scan("needle")).run().unwrap();
        assert_eq!(hits.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert_eq!(hits[0].num_columns(), 1, "only the projected column comes back");
    }

    /// A batch aborted after a replica flushed it and one aborted while another replica still
    /// buffered it leave both listing the same traces: a stored summary that counts the
    /// aborted batch is made again from the spans left.
    #[test]
    fn replicas_list_the_same_trace_summaries_whether_a_batch_was_aborted_before_or_after_a_flush() {
        use crate::state_machine::GroupStore;
        use crate::types::Command;
        let summaries = |flush_before_abort: bool| {
            let dir = tempfile::tempdir().unwrap();
            let mut s = SegmentShard::open(dir.path()).unwrap();
            let mut child = span("t1", "b", 20);
            child.parent_span_id = "a".into();
            ingest(&mut s, 1, 1, batch("p", vec![span("t1", "a", 10), child]));
            let mut late = span("t1", "d", 5);
            late.service_name = "worker".into();
            ingest(&mut s, 2, 2, batch("p", vec![span("t2", "c", 30), late]));
            if flush_before_abort {
                checkpoint(&mut s, 2);
            }
            s.apply(3, Command::Abort { batch_id: 2 });
            checkpoint(&mut s, 3);
            let listed = scan_all(&s, Table::TraceSummaries, "p", crate::segment::Filter::default());
            drop(s);
            let reopened = SegmentShard::open(dir.path()).unwrap();
            assert_eq!(scan_all(&reopened, Table::TraceSummaries, "p", Default::default()), listed);
            listed
        };
        let listed = summaries(true);
        assert_eq!(listed, summaries(false));
        assert_eq!(listed.len(), 1, "{listed:?}");
        let Row::TraceSummary(t1) = &listed[0] else { panic!("summary expected") };
        assert_eq!((t1.trace_id.as_str(), t1.span_count, t1.start_unix_nanos), ("t1", 2, 10));
    }

    /// Summaries store a trace's end as its duration; readers get times, whether they ask for
    /// the end alone or with the start, and the minimum-duration filter sees durations.
    #[test]
    fn trace_ends_read_back_as_times() {
        use crate::segment::Filter;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let mut long = span("slow", "a", 5_000);
        long.duration_nanos = 7_000;
        ingest(&mut s, 1, 1, batch("p", vec![span("fast", "a", 1_000), long]));
        checkpoint(&mut s, 1);
        let ends = |columns: &[&str], min_duration_ns: Option<i64>| -> Vec<i64> {
            let scan = Scan {
                table: Table::TraceSummaries,
                project: "p".into(),
                from_ns: i64::MIN,
                to_ns: i64::MAX,
                filter: Filter { min_duration_ns, ..Filter::default() },
                columns: columns.iter().map(|c| c.to_string()).collect(),
                dictionaries: vec![],
                stored_ids: false,
            };
            let batches = s.scan(scan).run().unwrap();
            let mut ends: Vec<i64> =
                batches.iter().flat_map(|rb| crate::segment::table::Cols(rb).i64("end_ns").values().to_vec()).collect();
            ends.sort();
            ends
        };
        assert_eq!(ends(&["end_ns"], None), [2_000, 12_000]);
        assert_eq!(ends(&["start_ns", "end_ns"], None), [2_000, 12_000]);
        assert_eq!(ends(&["end_ns"], Some(5_000)), [12_000]);
    }
}
