//! Compaction: small segments of the same table and hour are merged into one, which drops
//! the rows of aborted batches and the second copy of an object sent twice. What to merge is
//! decided by [`plan`]; the merge itself by [`merge_rows`]. Both are pure; the shard does the
//! file and manifest work (see `shard::compact`).

use std::collections::{BTreeMap, HashMap, HashSet};

use rustc_hash::FxHashSet;

use super::file::SegmentMeta;
use super::rollup::DAY_S;
use super::table::{Row, Table};

/// A segment this small was written by a quiet flush and is worth merging.
pub const SMALL_SEGMENT_ROWS: u64 = 200_000;
/// At most this many rows are merged at once (they are held in memory).
pub const MAX_MERGE_ROWS: u64 = 1_000_000;
/// Merge once a time bucket has this many small segments, or two once its time is over.
pub const MIN_SEGMENTS: usize = 4;

/// How long each project keeps its data (from its plan, docs/API.md "Data retention"), and
/// which projects were deleted. Projects it does not name keep everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpiryPolicy {
    /// Rows of the project older than this (unix nanoseconds) are expired.
    pub cutoffs: HashMap<String, i64>,
    pub deleted: HashSet<String>,
}

impl ExpiryPolicy {
    pub fn expired(&self, project: &str, time_ns: i64) -> bool {
        self.deleted.contains(project) || self.cutoffs.get(project).is_some_and(|c| time_ns < *c)
    }

    /// Whether every row of a segment is expired (decidable from its manifest entry).
    pub fn expires_whole(&self, s: &SegmentMeta) -> bool {
        !s.projects.is_empty() && s.projects.iter().all(|p| self.expired(p, s.max_ns))
    }

    /// Whether some rows of a segment may be expired.
    pub fn expires_some(&self, s: &SegmentMeta) -> bool {
        s.projects.iter().any(|p| self.expired(p, s.min_ns))
    }
}

/// What to do next to a shard's segments, if anything.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Delete these segments (and those derived from them) without reading them: all expired.
    Drop(Vec<SegmentMeta>),
    /// Rewrite these segments into one, without expired, hidden or repeated rows.
    Rewrite(Vec<SegmentMeta>),
    /// Add up a past day's span rollups from the hour rollups of its spans segments.
    RollDay(DayRollup),
}

/// The span rollups of a day (see [`Table::SpanDayRollups`]), to write from `hours`.
#[derive(Debug, PartialEq, Eq)]
pub struct DayRollup {
    /// The day's start, unix seconds.
    pub day: i64,
    /// The hour rollups of each of the day's spans segments.
    pub hours: Vec<SegmentMeta>,
    /// The day's spans segments, sorted by id.
    pub covers: Vec<u64>,
    /// The day's stale span rollups, replaced.
    pub replaces: Vec<SegmentMeta>,
}

/// Expiry first (whole drops, then partial rewrites of one segment), then merges.
pub fn next(segments: &[SegmentMeta], policy: &ExpiryPolicy, now_s: i64) -> Option<Plan> {
    let data = || segments.iter().filter(|s| !s.table.is_derived());
    let dropped: Vec<SegmentMeta> = data().filter(|s| policy.expires_whole(s)).cloned().collect();
    if !dropped.is_empty() {
        return Some(Plan::Drop(dropped));
    }
    if let Some(s) = data().find(|s| policy.expires_some(s)) {
        return Some(Plan::Rewrite(vec![s.clone()]));
    }
    plan(segments, now_s).map(Plan::Rewrite).or_else(|| day_rollup(segments, now_s))
}

/// A day's spans segments and span day rollups (see [`days`]).
pub struct Day<'a, T> {
    pub spans: Vec<&'a T>,
    pub rolled: Vec<&'a T>,
    /// The ids of `spans`, sorted: what current day rollups cover.
    pub covers: Vec<u64>,
}

impl<'a, T> Day<'a, T> {
    /// The day's rollups if they are current: one segment covering exactly its spans segments.
    pub fn current(&self, meta: impl Fn(&T) -> &SegmentMeta) -> Option<&'a T> {
        match self.rolled[..] {
            [r] if meta(r).covers == self.covers => Some(r),
            _ => None,
        }
    }
}

/// The spans segments and span day rollups of `segments` per day (its start, unix seconds).
pub fn days<T>(segments: &[T], meta: impl Fn(&T) -> &SegmentMeta) -> BTreeMap<i64, Day<'_, T>> {
    let mut days: BTreeMap<i64, Day<'_, T>> = BTreeMap::new();
    for s in segments {
        let m = meta(s);
        let day = match m.table {
            Table::Spans => m.hour.div_euclid(DAY_S) * DAY_S,
            Table::SpanDayRollups => m.hour,
            _ => continue,
        };
        let d = days.entry(day).or_insert_with(|| Day { spans: Vec::new(), rolled: Vec::new(), covers: Vec::new() });
        if m.table == Table::Spans {
            d.spans.push(s);
            d.covers.push(m.id);
        } else {
            d.rolled.push(s);
        }
    }
    for d in days.values_mut() {
        d.covers.sort_unstable();
    }
    days
}

/// The oldest past day whose span rollups are missing or stale (its spans segments are not
/// the ones they cover), once its merges are done; or day rollups left without spans, to
/// drop. A day with a spans segment lacking hour rollups (an earlier release's) gets none.
pub fn day_rollup(segments: &[SegmentMeta], now_s: i64) -> Option<Plan> {
    let hours: HashMap<u64, &SegmentMeta> = segments
        .iter()
        .filter(|s| s.table == Table::SpanHourRollups)
        .filter_map(|s| Some((s.summarizes?, s)))
        .collect();
    for (day, d) in days(segments, |s| s) {
        if d.spans.is_empty() {
            return Some(Plan::Drop(d.rolled.into_iter().cloned().collect()));
        }
        if d.current(|s| s).is_some() || day.saturating_add(DAY_S) > now_s {
            continue;
        }
        let Some(hours) = d.covers.iter().map(|id| hours.get(id).map(|h| (*h).clone())).collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        if hours.iter().all(|h| h.rows == 0) {
            continue;
        }
        let replaces = d.rolled.into_iter().cloned().collect();
        return Some(Plan::RollDay(DayRollup { day, hours, covers: d.covers, replaces }));
    }
    None
}

/// Whether the time bucket of `table` starting at `start` (seconds) is over at `now_s`: the
/// compactor then merges as few as two of its small segments, or a lone draft.
pub fn bucket_over(start: i64, table: Table, now_s: i64) -> bool {
    start.saturating_add(table.bucket_seconds()) <= now_s
}

/// The spans (or other) segments to merge next, at most one group: the oldest time bucket
/// with enough small segments, or whose time is over with one draft left. Derived segments
/// (trace summaries, rollups) are never picked themselves: they are rewritten with their
/// source segments.
pub fn plan(segments: &[SegmentMeta], now_s: i64) -> Option<Vec<SegmentMeta>> {
    let mut buckets: BTreeMap<(i64, Table), Vec<&SegmentMeta>> = BTreeMap::new();
    for s in segments.iter().filter(|s| !s.table.is_derived() && s.rows < SMALL_SEGMENT_ROWS) {
        buckets.entry((s.hour, s.table)).or_default().push(s);
    }
    for ((start, table), mut small) in buckets {
        let over = bucket_over(start, table, now_s);
        let needed = if over { 2 } else { MIN_SEGMENTS };
        small.sort_by_key(|s| s.rows);
        let mut total = 0;
        let picked: Vec<SegmentMeta> = small
            .into_iter()
            .take_while(|s| {
                total += s.rows;
                total <= MAX_MERGE_ROWS
            })
            .cloned()
            .collect();
        if picked.len() >= needed || (over && picked.iter().any(|s| s.draft)) {
            return Some(picked);
        }
    }
    None
}

/// Merges rows of several segments: drops hidden ones and repeated objects (the first copy
/// wins), and sorts in segment order. Each row keeps its batch id.
pub fn merge_rows(
    rows: Vec<(String, Row, u128)>,
    hidden: &dyn Fn(u128) -> bool,
    policy: &ExpiryPolicy,
) -> Vec<(String, Row, u128)> {
    // First copies are found on borrowed keys (no allocation per row), then kept by index.
    let first: Vec<bool> = {
        let mut seen: FxHashSet<(&str, &str, &str)> = FxHashSet::default();
        rows.iter()
            .map(|(project, row, batch)| {
                !hidden(*batch)
                    && !policy.expired(project, row.time_ns())
                    && row.identity().is_none_or(|(a, b)| seen.insert((project, a, b)))
            })
            .collect()
    };
    let mut kept: Vec<(String, Row, u128)> =
        rows.into_iter().zip(first).filter_map(|(row, first)| first.then_some(row)).collect();
    kept.sort_by(|(pa, a, _), (pb, b, _)| (pa, a.sort_key()).cmp(&(pb, b.sort_key())));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::FileEntry;
    use crate::segment::table::{LogRow, SpanRow};

    fn seg(id: u64, table: Table, hour: i64, rows: u64) -> SegmentMeta {
        SegmentMeta {
            id,
            table,
            hour,
            rows,
            min_ns: 0,
            max_ns: 0,
            file: FileEntry { name: format!("s{id}"), len: 0, xxh3: 0 },
            summarizes: None,
            covers: Vec::new(),
            projects: vec!["p".into()],
            draft: false,
        }
    }

    #[test]
    fn a_lone_draft_segment_is_rewritten_once_its_time_bucket_is_over() {
        let draft = SegmentMeta { draft: true, ..seg(1, Table::Logs, 3600, 10) };
        let done = seg(2, Table::Spans, 3600, 10);
        let segs = [draft.clone(), done];
        assert_eq!(plan(&segs, 3600), None, "the hour is not over");
        assert_eq!(plan(&segs, 7200), Some(vec![draft]), "the draft, alone; the final segment stays");
        assert_eq!(plan(&segs[1..], i64::MAX), None);
    }

    #[test]
    fn plans_the_oldest_time_bucket_with_enough_small_segments() {
        let segs = vec![
            seg(1, Table::Spans, 7200, 10),
            seg(2, Table::Spans, 7200, 20),
            seg(3, Table::TraceSummaries, 7200, 5),
            seg(4, Table::Logs, 3600, 10),
            seg(5, Table::Logs, 3600, SMALL_SEGMENT_ROWS),
        ];
        // Current hour 7200: two small spans segments are not enough yet; the logs hour has
        // one small segment only.
        assert_eq!(plan(&segs, 7200), None);
        // Once the hour is over, two are enough.
        let picked: Vec<u64> = plan(&segs, 10800).unwrap().iter().map(|s| s.id).collect();
        assert_eq!(picked, [1, 2]);
    }

    #[test]
    fn expiry_drops_whole_segments_then_rewrites_mixed_ones_then_merges() {
        let mut old = seg(1, Table::Logs, 0, 10);
        old.max_ns = 100;
        let mut mixed = seg(2, Table::Logs, 0, 10);
        mixed.projects = vec!["p".into(), "q".into()];
        mixed.max_ns = 100;
        let mut recent = seg(3, Table::Logs, 3600, 10);
        (recent.min_ns, recent.max_ns) = (500, 600);
        let policy = ExpiryPolicy { cutoffs: HashMap::from([("p".to_owned(), 200)]), ..Default::default() };
        let segs = vec![old.clone(), mixed.clone(), recent.clone()];
        assert_eq!(next(&segs, &policy, 0), Some(Plan::Drop(vec![old])));
        assert_eq!(next(&segs[1..], &policy, 0), Some(Plan::Rewrite(vec![mixed])));
        assert_eq!(next(&segs[2..], &policy, 0), None);
        let deleted = ExpiryPolicy { deleted: HashSet::from(["p".to_owned()]), ..Default::default() };
        assert_eq!(next(&segs[2..], &deleted, 0), Some(Plan::Drop(vec![recent])));
        assert!(deleted.expired("p", i64::MAX) && !deleted.expired("q", 0));
    }

    #[test]
    fn merge_drops_hidden_rows_and_second_copies_and_sorts() {
        let span = |t: &str, id: &str, start: i64| {
            Row::Span(SpanRow { trace_id: t.into(), span_id: id.into(), start_unix_nanos: start, ..Default::default() })
        };
        let log = |t: i64| Row::Log(LogRow { unix_nanos: t, message: "same".into(), ..Default::default() });
        let rows = vec![
            ("p".to_owned(), span("b", "1", 5), 1),
            ("p".to_owned(), span("a", "1", 9), 1),
            ("p".to_owned(), span("b", "1", 5), 2),
            ("p".to_owned(), span("c", "1", 1), 3),
            ("p".to_owned(), log(2), 1),
            ("p".to_owned(), log(2), 2),
        ];
        let merged = merge_rows(rows, &|b| b == 3, &ExpiryPolicy::default());
        assert_eq!(merged.len(), 4);
        assert_eq!(merged.iter().filter(|(_, r, _)| r.table() == Table::Logs).count(), 2);
        let spans: Vec<&str> = merged
            .iter()
            .filter_map(|(_, r, _)| match r {
                Row::Span(s) => Some(s.trace_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(spans, ["a", "b"]);
    }

    /// A spans segment of `hour` (seconds) and its hour rollups (id + 3, as a flush numbers them).
    fn spans_with_hours(id: u64, hour: i64) -> [SegmentMeta; 2] {
        let hours = SegmentMeta { summarizes: Some(id), ..seg(id + 3, Table::SpanHourRollups, hour, 6) };
        [seg(id, Table::Spans, hour, SMALL_SEGMENT_ROWS), hours]
    }

    fn day_rollups_of(day: i64, id: u64, covers: Vec<u64>) -> SegmentMeta {
        SegmentMeta { covers, ..seg(id, Table::SpanDayRollups, day, 6) }
    }

    #[test]
    fn a_past_day_gets_span_rollups_covering_its_spans_segments_and_new_ones_when_they_change() {
        const DAY: i64 = 86_400 * 20_000;
        let mut segs: Vec<SegmentMeta> =
            [spans_with_hours(8, DAY + 3600), spans_with_hours(4, DAY)].into_iter().flatten().collect();
        assert_eq!(next(&segs, &ExpiryPolicy::default(), DAY + 86_399), None, "the day is not over");
        let Some(Plan::RollDay(plan)) = next(&segs, &ExpiryPolicy::default(), DAY + 86_400) else {
            panic!("a day rollup")
        };
        assert_eq!((plan.day, plan.covers.clone(), plan.replaces.clone()), (DAY, vec![4, 8], vec![]));
        let hours: Vec<u64> = plan.hours.iter().map(|s| s.id).collect();
        assert_eq!(hours, [7, 11], "the hour rollups of both spans segments, as they cover");

        segs.push(day_rollups_of(DAY, 20, vec![4, 8]));
        assert_eq!(day_rollup(&segs, i64::MAX), None, "current");
        // A late spans segment of the day: the rollups are stale and replaced.
        segs.extend(spans_with_hours(24, DAY + 7200));
        let Some(Plan::RollDay(plan)) = day_rollup(&segs, i64::MAX) else { panic!("a new day rollup") };
        assert_eq!((plan.covers, plan.replaces.len()), (vec![4, 8, 24], 1));
        // Without spans left (expired), the rollups are dropped.
        let orphan = [day_rollups_of(DAY, 20, vec![4, 8])];
        assert_eq!(day_rollup(&orphan, i64::MAX), Some(Plan::Drop(orphan.to_vec())));
        // A spans segment without hour rollups (an earlier release's): no day rollups.
        let old = [seg(30, Table::Spans, DAY, 10)];
        assert_eq!(day_rollup(&old, i64::MAX), None);
    }

    #[test]
    fn events_time_buckets_are_days_and_merge_once_the_day_is_over() {
        let day = 86_400 * 20_000;
        let segs = [seg(1, Table::Events, day, 10), seg(2, Table::Events, day, 10)];
        assert_eq!(plan(&segs, day + 3_600 * 5), None, "an hour later the day is still open");
        assert_eq!(plan(&segs, day + 86_400).map(|p| p.len()), Some(2));
        let spans = [seg(3, Table::Spans, day, 10), seg(4, Table::Spans, day, 10)];
        assert_eq!(plan(&spans, day + 3_600).map(|p| p.len()), Some(2), "spans time buckets are hours");
    }
}
