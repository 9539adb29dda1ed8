//! Trace list: whole-trace summaries, newest first, from the per-segment partial summaries.
//! Filters apply to the merged summary (a partial alone may lack the trace's error span or
//! one of its services).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use sextant_model::query::{ShardQuery, TraceList, TraceListPlan};
use sextant_model::row::TraceSummary;

use super::{Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::summary::merge;
use crate::segment::table::from_record_batch;
use crate::segment::{Filter, Row, Scan, Table};
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
        columns: Vec::new(),
        dictionaries: Vec::new(),
    }
}

pub fn run(req: &ShardQuery, plan: &TraceListPlan, job: ScanJob, budget: &mut Budget) -> Result<TraceList, QueryError> {
    let before = plan.before.as_ref().map(|b| (b.start_unix_nanos, b.trace_id.as_str()));
    let wanted = |t: &TraceSummary| {
        (req.from_unix_nanos..req.to_unix_nanos).contains(&t.start_unix_nanos)
            && (plan.services.is_empty() || t.services.iter().any(|s| plan.services.contains(s)))
            && (plan.operation.is_empty() || t.root_operation == plan.operation)
            && (!plan.errors_only || t.error_count > 0)
            && t.end_unix_nanos.saturating_sub(t.start_unix_nanos) >= plan.min_duration_nanos
            && before.is_none_or(|b| (t.start_unix_nanos, t.trace_id.as_str()) < b)
    };
    // Summaries as the segments hold them, merged per trace; `kept`: the keys of the merged
    // ones the plan wants so far.
    let mut traces: HashMap<String, TraceSummary> = HashMap::new();
    let kept = RefCell::new(BTreeSet::<(i64, String)>::new());
    let limit = plan.limit as usize;
    // Row groups newest first. A trace's partial summaries all start within TRACE_SPREAD_NS
    // of the trace's start, so once every row group left starts at or before `t`, a trace
    // seen starting after `t + TRACE_SPREAD_NS` is whole, and no trace not yet seen can start
    // after `t`: with a page of such traces kept, the scan stops.
    let enough = |t: i64| {
        let kept = kept.borrow();
        let last = limit.checked_sub(1).map(|k| kept.iter().rev().nth(k));
        last.is_none_or(|l| l.is_some_and(|(s, _)| *s > t.saturating_add(TRACE_SPREAD_NS)))
    };
    job.run_newest_first(enough, |rb| {
        budget.take(rb.num_rows())?;
        let mut kept = kept.borrow_mut();
        for (_, row, _) in from_record_batch(Table::TraceSummaries, &rb) {
            let Row::TraceSummary(t) = row else { continue };
            let merged = match traces.get_mut(&t.trace_id) {
                Some(into) => {
                    kept.remove(&(into.start_unix_nanos, into.trace_id.clone()));
                    merge(into, &t);
                    into
                }
                None => traces.entry(t.trace_id.clone()).or_insert(t),
            };
            if wanted(merged) {
                kept.insert((merged.start_unix_nanos, merged.trace_id.clone()));
            }
        }
        budget.hold(traces.len() as u64 * SUMMARY_BYTES)
    })?;
    let kept = kept.into_inner();
    // Newest first: the list order and the cursor's.
    let page = kept.iter().rev().take(limit).filter_map(|(_, id)| traces.remove(id)).map(Into::into).collect();
    Ok(TraceList(page))
}

/// Memory of a trace's merged summary while listing: the summary, its ids and services, and
/// its entries in the tables.
const SUMMARY_BYTES: u64 = 256;
