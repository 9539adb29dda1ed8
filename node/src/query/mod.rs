//! Query plans executed on one shard (DESIGN B5). The router sends a typed plan; the shard
//! scans its own rows of the caller's project and answers a partial that the router merges
//! with the other shards' ones: top-k lists with keyset cursors, counts, sums and latency
//! sketches. Scans are prepared under the state lock ([`prepare`]) and run without it
//! ([`Prepared::run`], in a blocking task).

mod activity;
mod apm;
mod cohort;
pub mod errors;
mod funnel;
mod hosts;
mod logs;
mod replays;
mod retention;
mod service_map;
mod traces;
mod users;

use arrow_array::RecordBatch;
use sextant_proto::{query_reply, query_request, QueryReply, QueryRequest};

use crate::segment::{Filter, Scan, Table, EVENT_DICTIONARIES};
use crate::shard::{ScanJob, SegmentShard};

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("the query has no plan")]
    NoPlan,
    #[error("invalid plan: {0}")]
    BadPlan(String),
    /// More rows than the query's budget: the router answers with a clear error.
    #[error("the query reads more than {0} rows on one shard")]
    Budget(u64),
    #[error("reading segments: {0}")]
    Io(#[from] std::io::Error),
}

/// Counts the rows a query reads, and stops it past its budget.
pub struct Budget {
    max: u64,
    pub used: u64,
}

impl Budget {
    pub fn new(max: u64) -> Self {
        Self { max, used: 0 }
    }

    pub fn take(&mut self, rows: usize) -> Result<(), QueryError> {
        self.used += rows as u64;
        if self.used > self.max {
            return Err(QueryError::Budget(self.max));
        }
        Ok(())
    }
}

/// The scans of a plan, taken under the state lock, and the plan itself.
pub struct Prepared {
    req: QueryRequest,
    scans: Vec<ScanJob>,
}

/// What the plan reads (a plan may need more than one table, e.g. errors: spans and logs).
fn scans_of(req: &QueryRequest) -> Result<Vec<Scan>, QueryError> {
    let plan = req.plan.as_ref().ok_or(QueryError::NoPlan)?;
    if req.from_unix_nanos >= req.to_unix_nanos {
        return Err(QueryError::BadPlan("empty time range".into()));
    }
    let grouped = |table: Table, filter: Filter, columns: &[&str], dictionaries: &[&'static str]| Scan {
        table,
        project: req.project_id.clone(),
        from_ns: req.from_unix_nanos,
        to_ns: req.to_unix_nanos,
        filter,
        columns: columns.iter().map(|c| c.to_string()).collect(),
        dictionaries: dictionaries.to_vec(),
    };
    let scan = |table: Table, filter: Filter, columns: &[&str]| grouped(table, filter, columns, &[]);
    // A plan filtered by a cohort reads the cohort's rows first.
    let mut scans: Vec<Scan> = match cohort_filter(plan) {
        Some(f) => vec![cohort::Cohorts::of_filter(f)?.scan(&req.project_id)],
        None => Vec::new(),
    };
    scans.extend(match plan {
        query_request::Plan::Traces(_) => vec![traces::scan(req)],
        query_request::Plan::Logs(p) => vec![logs::scan(req, p)?],
        query_request::Plan::Apm(p) => vec![grouped(
            Table::Spans,
            Filter { services: p.services.clone(), ..Default::default() },
            &["service", "operation", "duration_ns", "status"],
            &["service", "operation"],
        )],
        query_request::Plan::ServiceMap(_) => vec![grouped(
            Table::Spans,
            Filter::default(),
            &["trace_id", "span_id", "parent_span_id", "service", "duration_ns", "status"],
            &["service"],
        )],
        query_request::Plan::Errors(p) => errors::scans(req, p),
        query_request::Plan::Hosts(_) => vec![scan(Table::HostMetrics, Filter::default(), &[])],
        query_request::Plan::HostSeries(p) => {
            if p.step_nanos <= 0 {
                return Err(QueryError::BadPlan("step must be positive".into()));
            }
            vec![scan(Table::HostMetrics, Filter { hostname: Some(p.hostname.clone()), ..Default::default() }, &[])]
        }
        query_request::Plan::Replays(p) => vec![scan(
            Table::ReplayEvents,
            Filter { distinct_id: (!p.distinct_id.is_empty()).then(|| p.distinct_id.clone()), ..Default::default() },
            &["session_id", "distinct_id", "time_ns", "data"],
        )],
        query_request::Plan::EventBuckets(p) => {
            activity::check_starts(&p.bucket_starts)?;
            vec![grouped(
                Table::Events,
                Filter { events: p.events.clone(), ..Default::default() },
                &["distinct_id", "time_ns"],
                &EVENT_DICTIONARIES,
            )]
        }
        query_request::Plan::ActiveUsers(p) => {
            activity::check_starts(&p.day_starts)?;
            vec![grouped(Table::Events, Filter::default(), &["distinct_id", "time_ns"], &EVENT_DICTIONARIES)]
        }
        query_request::Plan::Funnel(p) => {
            funnel::check(p)?;
            // Strict funnels must see every event of a user (nothing may come between steps).
            let events = if p.strict { Vec::new() } else { p.steps.clone() };
            vec![grouped(
                Table::Events,
                Filter { events, ..Default::default() },
                &["distinct_id", "time_ns", "event"],
                &EVENT_DICTIONARIES,
            )]
        }
        query_request::Plan::Retention(p) => {
            retention::check(p)?;
            let events = vec![p.start_event.clone(), p.return_event.clone()];
            let mut scans = vec![grouped(
                Table::Events,
                Filter { events, ..Default::default() },
                &["distinct_id", "time_ns", "event"],
                &EVENT_DICTIONARIES,
            )];
            scans.extend(retention::earlier_scan(req, p));
            scans
        }
        query_request::Plan::ReplayEvents(p) => {
            if p.session_id.is_empty() {
                return Err(QueryError::BadPlan("a session id is required".into()));
            }
            vec![scan(
                Table::ReplayEvents,
                Filter { session_id: Some(p.session_id.clone()), ..Default::default() },
                &[],
            )]
        }
        query_request::Plan::CohortSizes(p) => {
            vec![cohort::Cohorts::new(&p.cohorts, p.at_unix_nanos)?.scan(&req.project_id)]
        }
        query_request::Plan::CohortUsers(p) => {
            cohort::check_users(p)?;
            let filter = p.cohort.as_ref().ok_or_else(|| QueryError::BadPlan("a cohort is required".into()))?;
            vec![cohort::Cohorts::of_filter(filter)?.scan(&req.project_id)]
        }
    });
    Ok(scans)
}

/// The cohort a plan is restricted to, if any.
fn cohort_filter(plan: &query_request::Plan) -> Option<&sextant_proto::CohortFilter> {
    use query_request::Plan;
    match plan {
        Plan::EventBuckets(p) => p.cohort.as_ref(),
        Plan::ActiveUsers(p) => p.cohort.as_ref(),
        Plan::Funnel(p) => p.cohort.as_ref(),
        _ => None,
    }
}

/// Selects the buffered rows now (the caller holds the state lock) and keeps the segment
/// list for [`Prepared::run`].
pub fn prepare(shard: &SegmentShard, req: QueryRequest) -> Result<Prepared, QueryError> {
    let scans = scans_of(&req)?.into_iter().map(|s| shard.scan(s)).collect();
    Ok(Prepared { req, scans })
}

impl Prepared {
    /// Reads the segments and computes the partial. Over the row budget, the reply says so
    /// instead of carrying a partial.
    pub fn run(self) -> Result<QueryReply, QueryError> {
        let mut budget = Budget::new(self.req.max_rows);
        match self.compute(&mut budget) {
            Ok(partial) => Ok(QueryReply { rows_scanned: budget.used, budget_exceeded: false, partial: Some(partial) }),
            Err(QueryError::Budget(_)) => {
                Ok(QueryReply { rows_scanned: budget.used, budget_exceeded: true, partial: None })
            }
            Err(e) => Err(e),
        }
    }

    fn compute(self, budget: &mut Budget) -> Result<query_reply::Partial, QueryError> {
        let req = self.req;
        let mut scans = self.scans.into_iter();
        let mut next = || scans.next().ok_or_else(|| QueryError::BadPlan("missing scan".into()));
        use query_request::Plan;
        let plan = req.plan.as_ref().ok_or(QueryError::NoPlan)?;
        let members = match cohort_filter(plan) {
            Some(f) => Some(cohort::Cohorts::of_filter(f)?.only_members(next()?, budget)?),
            None => None,
        };
        let members = members.as_ref();
        Ok(match plan {
            Plan::Traces(p) => query_reply::Partial::Traces(traces::run(&req, p, next()?, budget)?),
            Plan::Logs(p) => query_reply::Partial::Logs(logs::run(&req, p, next()?, budget)?),
            Plan::Apm(_) => query_reply::Partial::Apm(apm::run(next()?, budget)?),
            Plan::ServiceMap(_) => query_reply::Partial::ServiceMap(service_map::run(next()?, budget)?),
            Plan::Errors(p) => {
                let (spans, logs) = (next()?, next()?);
                query_reply::Partial::Errors(errors::run(p, spans, logs, budget)?)
            }
            Plan::Hosts(_) => query_reply::Partial::Hosts(hosts::latest(next()?, budget)?),
            Plan::HostSeries(p) => query_reply::Partial::HostSeries(hosts::series(&req, p, next()?, budget)?),
            Plan::EventBuckets(p) => {
                query_reply::Partial::EventBuckets(activity::buckets(&p.bucket_starts, members, next()?, budget)?)
            }
            Plan::ActiveUsers(p) => query_reply::Partial::ActiveUsers(activity::active(p, members, next()?, budget)?),
            Plan::Funnel(p) => query_reply::Partial::Funnel(funnel::run(p, members, next()?, budget)?),
            Plan::Retention(p) => {
                let job = next()?;
                let earlier = if p.first_time { Some(next()?) } else { None };
                query_reply::Partial::Retention(retention::run(p, job, earlier, budget)?)
            }
            Plan::Replays(_) => query_reply::Partial::Replays(replays::sessions(next()?, budget)?),
            Plan::ReplayEvents(_) => query_reply::Partial::ReplayEvents(replays::events(next()?, budget)?),
            Plan::CohortSizes(p) => {
                let cohorts = cohort::Cohorts::new(&p.cohorts, p.at_unix_nanos)?;
                query_reply::Partial::CohortSizes(cohort::sizes(&cohorts, next()?, budget)?)
            }
            Plan::CohortUsers(p) => {
                let filter = p.cohort.as_ref().ok_or_else(|| QueryError::BadPlan("a cohort is required".into()))?;
                let cohorts = cohort::Cohorts::of_filter(filter)?;
                query_reply::Partial::CohortUsers(cohort::users(p, &cohorts, next()?, budget)?)
            }
        })
    }
}

/// A hasher for keys that already are well-mixed hashes (xxh3 of names or span ids).
#[derive(Default)]
pub struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Runs a scan, charging every batch to the budget.
fn each_batch(
    job: ScanJob,
    budget: &mut Budget,
    mut f: impl FnMut(&RecordBatch) -> Result<(), QueryError>,
) -> Result<(), QueryError> {
    job.run_each(|rb: RecordBatch| {
        budget.take(rb.num_rows())?;
        f(&rb)
    })
}

#[cfg(test)]
mod tests;
