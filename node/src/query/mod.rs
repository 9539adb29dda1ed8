//! Query plans executed on one shard (docs/ARCHITECTURE.md "Queries"). The router sends a
//! typed plan; the shard scans its own rows of the caller's project and answers a partial that
//! the router merges with the other shards' ones: top-k lists with keyset cursors, counts, sums
//! and latency sketches. Each kind of plan is a [`QueryKind`]; its scans are started under the
//! state lock ([`prepare`]) and read without it ([`Prepared::run`], in a blocking task).

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
use sextant_model::query::{Partial, Plan, ShardQuery, ShardReply};

use crate::segment::{Filter, Scan, Table};
use crate::shard::{ScanJob, SegmentShard};

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
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

/// One kind of query plan (a file of this folder each): checks the plan, starts the scans it
/// needs (under the shard's state lock) and returns the computation that owns them, run later
/// without the lock. Adding a kind is its file and its line in [`kind`].
pub trait QueryKind {
    fn prepare(&self, req: &ShardQuery, shard: &SegmentShard) -> Result<Compute, QueryError>;
}

/// A prepared query's computation over the scans it owns; it reads the request (project,
/// range) and charges the budget.
pub type Compute = Box<dyn FnOnce(&ShardQuery, &mut Budget) -> Result<Partial, QueryError> + Send>;

/// The kind implementing `plan`.
fn kind(plan: &Plan) -> &dyn QueryKind {
    match plan {
        Plan::Traces(p) => p,
        Plan::Logs(p) => p,
        Plan::Apm(p) => p,
        Plan::ServiceMap(p) => p,
        Plan::Errors(p) => p,
        Plan::Hosts(p) => p,
        Plan::HostSeries(p) => p,
        Plan::Replays(p) => p,
        Plan::ReplayEvents(p) => p,
        Plan::EventBuckets(p) => p,
        Plan::ActiveUsers(p) => p,
        Plan::Funnel(p) => p,
        Plan::Retention(p) => p,
        Plan::CohortSizes(p) => p,
        Plan::CohortUsers(p) => p,
    }
}

/// A scan of the request's project and time range.
fn scan_of(req: &ShardQuery, table: Table, filter: Filter, columns: &[&str], dictionaries: &[&'static str]) -> Scan {
    Scan {
        table,
        project: req.project_id.clone(),
        from_ns: req.from_unix_nanos,
        to_ns: req.to_unix_nanos,
        filter,
        columns: columns.iter().map(|c| c.to_string()).collect(),
        dictionaries: dictionaries.to_vec(),
    }
}

/// A plan with its computation, whose scans were started under the state lock.
pub struct Prepared {
    req: ShardQuery,
    compute: Compute,
}

/// Checks the plan and starts its scans: the buffered rows are selected now (the caller holds
/// the state lock), the segments are read by [`Prepared::run`].
pub fn prepare(shard: &SegmentShard, req: ShardQuery) -> Result<Prepared, QueryError> {
    if req.from_unix_nanos >= req.to_unix_nanos {
        return Err(QueryError::BadPlan("empty time range".into()));
    }
    let compute = kind(&req.plan).prepare(&req, shard)?;
    Ok(Prepared { req, compute })
}

impl Prepared {
    /// Reads the segments and computes the partial. Over the row budget, the reply says so
    /// instead of carrying a partial.
    pub fn run(self) -> Result<ShardReply, QueryError> {
        let mut budget = Budget::new(self.req.max_rows);
        match (self.compute)(&self.req, &mut budget) {
            Ok(partial) => Ok(ShardReply { rows_scanned: budget.used, partial: Some(partial) }),
            Err(QueryError::Budget(_)) => Ok(ShardReply { rows_scanned: budget.used, partial: None }),
            Err(e) => Err(e),
        }
    }
}

pub use crate::segment::Prehashed;

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
