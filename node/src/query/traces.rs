//! Trace list: whole-trace summaries, newest first, from the per-segment partial summaries.
//! Filters apply to the merged summary (a partial alone may lack the trace's error span or
//! one of its services).

use std::collections::HashMap;

use sextant_model::query::{trace_key, ShardQuery, TraceList, TraceListPlan};

use super::{each_batch, Budget, Compute, QueryError, QueryKind};
use crate::segment::summary::merge;
use crate::segment::table::from_record_batch;
use crate::segment::{Filter, Row, Scan, Table};
use crate::shard::{ScanJob, SegmentShard};

impl QueryKind for TraceListPlan {
    fn prepare(&self, req: &ShardQuery, shard: &SegmentShard) -> Result<Compute, QueryError> {
        let (plan, job) = (self.clone(), shard.scan(scan(req)));
        Ok(Box::new(move |req, budget| Ok(run(req, &plan, job, budget)?.into())))
    }
}

/// Partials of a trace can start up to this long after (or before) the trace's own start:
/// the scan widens the range by it, so a trace shorter than this is always seen whole.
pub const TRACE_SPREAD_NS: i64 = 3600 * 1_000_000_000;

pub fn scan(req: &ShardQuery) -> Scan {
    Scan {
        table: Table::TraceSummaries,
        project: req.project_id.clone(),
        from_ns: req.from_unix_nanos.saturating_sub(TRACE_SPREAD_NS),
        to_ns: req.to_unix_nanos.saturating_add(TRACE_SPREAD_NS),
        filter: Filter::default(),
        columns: Vec::new(),
        dictionaries: Vec::new(),
    }
}

pub fn run(req: &ShardQuery, plan: &TraceListPlan, job: ScanJob, budget: &mut Budget) -> Result<TraceList, QueryError> {
    // Summaries as the segments hold them, merged per trace.
    let mut traces = HashMap::new();
    each_batch(job, budget, |rb| {
        for (_, row, _) in from_record_batch(Table::TraceSummaries, rb) {
            if let Row::TraceSummary(t) = row {
                match traces.get_mut(&t.trace_id) {
                    Some(into) => merge(into, &t),
                    None => {
                        traces.insert(t.trace_id.clone(), t);
                    }
                }
            }
        }
        Ok(())
    })?;
    let before = plan.before.as_ref().map(|b| (b.start_unix_nanos, b.trace_id.as_str()));
    let mut kept: Vec<_> = traces
        .into_values()
        .filter(|t| {
            (req.from_unix_nanos..req.to_unix_nanos).contains(&t.start_unix_nanos)
                && (plan.services.is_empty() || t.services.iter().any(|s| plan.services.contains(s)))
                && (plan.operation.is_empty() || t.root_operation == plan.operation)
                && (!plan.errors_only || t.error_count > 0)
                && t.end_unix_nanos.saturating_sub(t.start_unix_nanos) >= plan.min_duration_nanos
                && before.is_none_or(|b| (t.start_unix_nanos, t.trace_id.as_str()) < b)
        })
        .map(Into::into)
        .collect();
    // Newest first: the list order and the cursor's.
    kept.sort_by(|a, b| trace_key(b).cmp(&trace_key(a)));
    kept.truncate(plan.limit as usize);
    Ok(TraceList(kept))
}
