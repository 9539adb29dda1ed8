//! Trace list: whole-trace summaries, newest first, from the per-segment partial summaries.
//! Filters apply to the merged summary (a partial alone may lack the trace's error span or
//! one of its services). Partials merge in a compact form (names as numbers, a hex id as its
//! 128 bits): a long range merges a summary per trace, and only the page becomes text again.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;

use arrow_array::{Array, StringArray};
use sextant_model::query::{trace_key, ShardQuery, TraceList, TraceListPlan};
use sextant_model::row::TraceSummary;
use xxhash_rust::xxh3::xxh3_128;

use super::names::Names;
use super::{Budget, Compute, Prehashed, QueryError, QueryKind, Scans};
use crate::segment::table::Cols;
use crate::segment::{Filter, Scan, Table};
use crate::shard::ScanJob;

impl QueryKind for TraceListPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let (plan, job) = (self.clone(), shard.scan(scan(req, self)));
        Ok(Box::new(move |req, budget| Ok(run(req, &plan, job, budget)?.into())))
    }
}

/// Partials of a trace can start up to this long after (or before) the trace's own start:
/// the scan widens the range by it, so a trace shorter than this is always seen whole.
pub const TRACE_SPREAD_NS: i64 = 3600 * 1_000_000_000;

const COLUMNS: [&str; 8] =
    ["trace_id", "start_ns", "end_ns", "root_service", "root_operation", "span_count", "error_count", "services"];

/// The summaries of traces that may start in the range (and, after a cursor, at or before
/// the cursor's trace: later ones are on earlier pages).
pub fn scan(req: &ShardQuery, plan: &TraceListPlan) -> Scan {
    let to = match &plan.before {
        Some(b) => req.to_unix_nanos.min(b.start_unix_nanos.saturating_add(1)),
        None => req.to_unix_nanos,
    };
    Scan {
        table: Table::TraceSummaries,
        project: req.project_id.clone(),
        from_ns: req.from_unix_nanos.saturating_sub(TRACE_SPREAD_NS),
        to_ns: to.saturating_add(TRACE_SPREAD_NS),
        filter: Filter::default(),
        columns: COLUMNS.iter().map(|c| c.to_string()).collect(),
        dictionaries: vec!["root_service", "root_operation"],
        stored_ids: false,
    }
}

/// A trace id as held while listing: lowercase hex of 128 bits (OpenTelemetry's) as its
/// value, anything else as text.
#[derive(Clone, Debug, PartialEq)]
enum TraceId {
    Hex(u128),
    Text(Box<str>),
}

impl TraceId {
    fn new(id: &str) -> Self {
        let hex = id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match hex.then(|| u128::from_str_radix(id, 16).ok()).flatten() {
            Some(v) => TraceId::Hex(v),
            None => TraceId::Text(id.into()),
        }
    }

    fn text(&self) -> String {
        match self {
            TraceId::Hex(v) => format!("{v:032x}"),
            TraceId::Text(t) => t.to_string(),
        }
    }
}

/// A set of service numbers: a bit each for the first 64, a sorted list for the others.
#[derive(Clone, Debug, Default, PartialEq)]
struct ServiceSet {
    low: u64,
    high: Vec<u32>,
}

impl ServiceSet {
    fn insert(&mut self, s: u32) {
        if s < 64 {
            self.low |= 1 << s;
        } else if let Err(i) = self.high.binary_search(&s) {
            self.high.insert(i, s);
        }
    }

    fn contains(&self, s: u32) -> bool {
        if s < 64 {
            self.low & (1 << s) != 0
        } else {
            self.high.binary_search(&s).is_ok()
        }
    }

    fn union(&mut self, other: &ServiceSet) {
        self.low |= other.low;
        for &s in &other.high {
            self.insert(s);
        }
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..64).filter(|&s| self.low & (1 << s) != 0).chain(self.high.iter().copied())
    }
}

/// A trace's partial summaries merged so far (names as [`Names`] numbers).
#[derive(Clone, Debug, PartialEq)]
struct Listed {
    id: TraceId,
    start: i64,
    end: i64,
    span_count: u32,
    error_count: u32,
    /// Root service and operation, once a partial holding the root span is read.
    root: Option<(u32, u32)>,
    services: ServiceSet,
}

impl Listed {
    /// Folds in another partial of the same trace.
    fn merge(&mut self, other: &Listed) {
        if self.root.is_none() || (other.root.is_some() && other.start < self.start) {
            self.root = other.root;
        }
        self.start = self.start.min(other.start);
        self.end = self.end.max(other.end);
        self.span_count = self.span_count.saturating_add(other.span_count);
        self.error_count = self.error_count.saturating_add(other.error_count);
        self.services.union(&other.services);
    }

    /// Whether it comes before `key` (start, trace id) in the list's order.
    fn older_than(&self, key: (i64, &str)) -> bool {
        self.start < key.0 || (self.start == key.0 && self.id.text().as_str() < key.1)
    }

    fn summary(&self, services: &Names, operations: &Names) -> TraceSummary {
        let mut names: Vec<String> = self.services.iter().map(|s| services.name(s).to_owned()).collect();
        names.sort_unstable();
        let (root_service, root_operation) = match self.root {
            Some((s, o)) => (services.name(s).to_owned(), operations.name(o).to_owned()),
            None => Default::default(),
        };
        TraceSummary {
            trace_id: self.id.text(),
            start_unix_nanos: self.start,
            end_unix_nanos: self.end,
            root_service,
            root_operation,
            span_count: self.span_count,
            error_count: self.error_count,
            services: names,
        }
    }
}

/// Reads the partial summaries of a batch of the trace summaries table.
struct Partials {
    services: Names,
    operations: Names,
    /// Numbers of the batch's root services, root operations and listed services.
    roots: (Vec<u32>, Vec<u32>),
    listed: Vec<u32>,
    /// The number of the empty name, which a partial without the root span holds.
    no_root: u32,
}

impl Partials {
    fn new(plan_services: &[String]) -> Self {
        let mut services = Names::default();
        // The plan's services first: numbered below 64 unless it names more.
        for s in plan_services {
            services.get(s);
        }
        let no_root = services.get("");
        Partials { services, operations: Names::default(), roots: Default::default(), listed: Vec::new(), no_root }
    }

    /// Calls `f` with every partial of `rb` and its trace id's text.
    fn each(&mut self, rb: &arrow_array::RecordBatch, mut f: impl FnMut(&str, Listed)) {
        let c = Cols(rb);
        let n = rb.num_rows();
        let (ids, start, end) = (c.str("trace_id"), c.i64("start_ns"), c.i64("end_ns"));
        let (spans, errors, list) = (c.u32("span_count"), c.u32("error_count"), c.list("services"));
        self.services.of_rows(c.strings("root_service"), n, &mut self.roots.0);
        self.operations.of_rows(c.strings("root_operation"), n, &mut self.roots.1);
        let values = list.values().as_any().downcast_ref::<StringArray>().expect("a list of strings");
        self.listed.clear();
        self.listed.extend((0..values.len()).map(|j| self.services.get(values.value(j))));
        let offsets = list.value_offsets();
        for i in 0..n {
            let mut services = ServiceSet::default();
            for &s in &self.listed[offsets[i] as usize..offsets[i + 1] as usize] {
                services.insert(s);
            }
            let root = (self.roots.0[i] != self.no_root).then(|| (self.roots.0[i], self.roots.1[i]));
            let id = ids.value(i);
            let partial = Listed {
                id: TraceId::Text(Box::default()),
                start: start.value(i),
                end: end.value(i),
                span_count: spans.value(i),
                error_count: errors.value(i),
                root,
                services,
            };
            f(id, partial);
        }
    }
}

pub fn run(req: &ShardQuery, plan: &TraceListPlan, job: ScanJob, budget: &mut Budget) -> Result<TraceList, QueryError> {
    let mut partials = Partials::new(&plan.services);
    let plan_services: Vec<u32> = plan.services.iter().map(|s| partials.services.get(s)).collect();
    let operation = (!plan.operation.is_empty()).then(|| partials.operations.get(&plan.operation));
    let before = plan.before.as_ref().map(|b| (b.start_unix_nanos, b.trace_id.as_str()));
    let wanted = |t: &Listed| {
        (req.from_unix_nanos..req.to_unix_nanos).contains(&t.start)
            && (plan_services.is_empty() || plan_services.iter().any(|&s| t.services.contains(s)))
            && operation.is_none_or(|op| t.root.is_some_and(|(_, o)| o == op))
            && (!plan.errors_only || t.error_count > 0)
            && t.end.saturating_sub(t.start) >= plan.min_duration_nanos
            && before.is_none_or(|b| t.older_than(b))
    };
    // Traces by 128 bits of xxh3 of their id (a collision needs ~2^64 traces).
    let mut index: HashMap<u128, u32, BuildHasherDefault<Prehashed>> = HashMap::default();
    let mut traces: Vec<Listed> = Vec::new();
    let limit = plan.limit as usize;
    // Row groups newest first. A trace's partial summaries all start within TRACE_SPREAD_NS
    // of the trace's start, so once every row group left starts at or before `t`, a trace
    // seen starting after `t + TRACE_SPREAD_NS` is whole, and no trace not yet seen can start
    // after `t`: with a page of such traces kept, the scan stops. `kept`: (start, number) of
    // the wanted traces that may ever count so, those starting after the oldest row group's
    // `t` plus the spread (none when the range read is shorter than the spread).
    let floor = job.oldest_row_group_max().saturating_add(TRACE_SPREAD_NS);
    let kept = RefCell::new(BTreeSet::<(i64, u32)>::new());
    let enough = |t: i64| {
        let kept = kept.borrow();
        let last = limit.checked_sub(1).map(|k| kept.iter().rev().nth(k));
        last.is_none_or(|l| l.is_some_and(|(s, _)| *s > t.saturating_add(TRACE_SPREAD_NS)))
    };
    job.run_newest_first(enough, |rb| {
        budget.take(rb.num_rows())?;
        let mut kept = kept.borrow_mut();
        partials.each(&rb, |id, partial| {
            let key = xxh3_128(id.as_bytes());
            let n = match index.get(&key) {
                Some(&n) => {
                    let t = &mut traces[n as usize];
                    if t.start > floor {
                        kept.remove(&(t.start, n));
                    }
                    t.merge(&partial);
                    n
                }
                None => {
                    let n = traces.len() as u32;
                    index.insert(key, n);
                    traces.push(Listed { id: TraceId::new(id), ..partial });
                    n
                }
            };
            let t = &traces[n as usize];
            if t.start > floor && wanted(t) {
                kept.insert((t.start, n));
            }
        });
        budget.hold(traces.len() as u64 * TRACE_BYTES)
    })?;
    // The newest `limit` wanted traces, ties in start ordered by trace id: every one from the
    // `limit`-th newest start on, then sorted.
    let mut newest: Vec<(i64, u32)> = (0..traces.len() as u32)
        .filter(|&n| wanted(&traces[n as usize]))
        .map(|n| (traces[n as usize].start, n))
        .collect();
    if limit == 0 || newest.is_empty() {
        return Ok(TraceList(Vec::new()));
    }
    if newest.len() > limit {
        newest.select_nth_unstable_by(limit - 1, |a, b| b.0.cmp(&a.0));
        let last = newest[limit - 1].0;
        // Those past the `limit`-th that start with it: their ids decide which are on the page.
        let (page, rest) = newest.split_at_mut(limit);
        let ties: Vec<(i64, u32)> = rest.iter().copied().filter(|&(s, _)| s == last).collect();
        let mut page = page.to_vec();
        page.extend(ties);
        newest = page;
    }
    let mut page: Vec<TraceSummary> =
        newest.iter().map(|&(_, n)| traces[n as usize].summary(&partials.services, &partials.operations)).collect();
    page.sort_unstable_by(|a, b| trace_key(b).cmp(&trace_key(a)));
    page.truncate(limit);
    Ok(TraceList(page))
}

/// Memory of a trace while listing: its merged summary, its entries in the tables.
const TRACE_BYTES: u64 = 160;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::summary::summarize;
    use crate::segment::summary::tests::span;
    use crate::segment::table::SpanRow;

    fn listed(t: &TraceSummary, services: &mut Names, operations: &mut Names) -> Listed {
        let mut set = ServiceSet::default();
        for s in &t.services {
            set.insert(services.get(s));
        }
        Listed {
            id: TraceId::new(&t.trace_id),
            start: t.start_unix_nanos,
            end: t.end_unix_nanos,
            span_count: t.span_count,
            error_count: t.error_count,
            root: (!t.root_service.is_empty())
                .then(|| (services.get(&t.root_service), operations.get(&t.root_operation))),
            services: set,
        }
    }

    #[test]
    fn partials_merge_to_the_whole_in_either_order() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let spans = [
            span(id, "1", "", "web", 100, 50, false),
            span(id, "2", "1", "db", 110, 100, true),
            span(id, "3", "1", "cache", 90, 1, false),
        ];
        let (mut services, mut operations) = (Names::default(), Names::default());
        // Many services before these: numbers past 64 take the list.
        for i in 0..70 {
            services.get(&format!("s{i}"));
        }
        let summary = |rows: &[SpanRow]| summarize(rows.iter().map(|s| ("p", s))).remove(0).1;
        let whole = summary(&spans);
        for (a, b) in [(&spans[1..], &spans[..1]), (&spans[..1], &spans[1..])] {
            let mut left = listed(&summary(a), &mut services, &mut operations);
            left.merge(&listed(&summary(b), &mut services, &mut operations));
            assert_eq!(left.summary(&services, &operations), whole);
        }
    }

    #[test]
    fn trace_ids_come_back_as_they_were_sent() {
        for id in [
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            "+bf92f3577b34da6a3ce929d0e0e4736",
            "abc",
            "",
        ] {
            assert_eq!(TraceId::new(id).text(), id);
        }
        assert!(matches!(TraceId::new("00000000000000000000000000000001"), TraceId::Hex(1)));
    }
}
