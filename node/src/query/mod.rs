//! Query plans executed on one shard (docs/ARCHITECTURE.md "Queries"). The router sends a
//! typed plan; the shard scans its own rows of the caller's project and answers a partial that
//! the router merges with the other shards' ones: top-k lists with keyset cursors, counts, sums
//! and latency sketches. Each kind of plan is a [`QueryKind`]; its scans are started under the
//! state lock ([`prepare`]) and read without it ([`Prepared::run`], in a blocking task).
//! Before that, the router asks for the plan's [`estimate`]: the same preparation against an
//! `Estimator`, which adds up what each scan would read from segment metadata and reads
//! nothing. While a plan runs, its rows count against the query's row budget and its growing
//! tables against the node's [`MemoryPool`] ([`Budget`]).

mod activity;
mod apm;
mod cohort;
pub mod errors;
mod funnel;
mod hosts;
mod logs;
mod names;
mod replays;
mod retention;
mod service_map;
mod traces;
mod users;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::RecordBatch;
use sextant_model::query::{Cost, Merge, Partial, Plan, Refused, ShardQuery, ShardReply};

use crate::segment::{Filter, Scan, Table};
use crate::shard::{ScanJob, SegmentShard};

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("invalid plan: {0}")]
    BadPlan(String),
    /// More rows than the query's budget: the router answers with a clear error.
    #[error("the query reads more than {0} rows on one shard")]
    Budget(u64),
    /// Its tables would need more of the node's query memory than is left (the budget).
    #[error("the query needs more than the {0} bytes of memory queries may hold on this node")]
    Memory(u64),
    #[error("reading segments: {0}")]
    Io(#[from] std::io::Error),
}

/// The memory that the queries running on one node may hold at once in the tables that grow
/// with their input (users, their rows, groups): each query reserves what its tables hold as
/// they grow, and one that would pass the limit stops with [`QueryError::Memory`] instead of
/// taking the node's memory.
#[derive(Debug)]
pub struct MemoryPool {
    limit: u64,
    held: AtomicU64,
}

impl MemoryPool {
    pub fn new(limit_bytes: u64) -> Arc<Self> {
        Arc::new(Self { limit: limit_bytes, held: AtomicU64::new(0) })
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held by the queries running now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn reserve(&self, bytes: u64) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Counts the rows a query reads, and stops it past its budget; holds its share of the node's
/// [`MemoryPool`] (given back when dropped).
pub struct Budget {
    max: u64,
    pub used: u64,
    memory: Option<Arc<MemoryPool>>,
    held: u64,
}

impl Budget {
    /// A budget of `max` rows and no memory limit.
    pub fn new(max: u64) -> Self {
        Self { max, used: 0, memory: None, held: 0 }
    }

    /// A budget of `max` rows whose tables draw on `pool`.
    pub fn with_memory(max: u64, pool: Arc<MemoryPool>) -> Self {
        Self { memory: Some(pool), ..Self::new(max) }
    }

    pub fn take(&mut self, rows: usize) -> Result<(), QueryError> {
        self.used += rows as u64;
        if self.used > self.max {
            return Err(QueryError::Budget(self.max));
        }
        Ok(())
    }

    /// Records that the query's growing tables now hold about `bytes`, reserving any growth
    /// from the node's pool: an error when the pool cannot give it.
    pub fn hold(&mut self, bytes: u64) -> Result<(), QueryError> {
        let Some(pool) = &self.memory else { return Ok(()) };
        if bytes > self.held {
            if !pool.reserve(bytes - self.held) {
                return Err(QueryError::Memory(pool.limit));
            }
        } else {
            pool.release(self.held - bytes);
        }
        self.held = bytes;
        Ok(())
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        if let Some(pool) = &self.memory {
            pool.release(self.held);
        }
    }
}

/// Bytes of `v`'s elements in use (its spare capacity is address space, not memory).
pub fn bytes_of<T>(v: &[T]) -> u64 {
    std::mem::size_of_val(v) as u64
}

/// Where a plan's scans start: the shard itself, or an `Estimator` that only adds up what
/// they would read.
pub trait Scans {
    fn scan(&self, scan: Scan) -> ScanJob;
}

impl Scans for SegmentShard {
    fn scan(&self, scan: Scan) -> ScanJob {
        SegmentShard::scan(self, scan)
    }
}

/// Prepares a plan against a shard without reading anything: every scan the plan starts adds
/// its [`SegmentShard::estimate`] and gets an empty job.
struct Estimator<'a> {
    shard: &'a SegmentShard,
    cost: Cell<Cost>,
}

impl Scans for Estimator<'_> {
    fn scan(&self, scan: Scan) -> ScanJob {
        let mut cost = self.cost.get();
        cost.merge(self.shard.estimate(&scan));
        self.cost.set(cost);
        ScanJob::empty(scan)
    }
}

/// What `req` would read on `shard`: the scans its plan starts, estimated from segment
/// metadata and the buffers' sizes (the plan is checked as for running it).
pub fn estimate(shard: &SegmentShard, req: &ShardQuery) -> Result<Cost, QueryError> {
    if req.from_unix_nanos >= req.to_unix_nanos {
        return Err(QueryError::BadPlan("empty time range".into()));
    }
    let estimator = Estimator { shard, cost: Cell::new(Cost::default()) };
    drop(kind(&req.plan).prepare(req, &estimator)?);
    let mut cost = estimator.cost.get();
    cost.stops_early = matches!(req.plan, Plan::Logs(_) | Plan::Traces(_));
    Ok(cost)
}

/// One kind of query plan (a file of this folder each): checks the plan, starts the scans it
/// needs (under the shard's state lock) and returns the computation that owns them, run later
/// without the lock. Adding a kind is its file and its line in [`kind`].
pub trait QueryKind {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError>;
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
        stored_ids: false,
    }
}

/// A plan with its computation, whose scans were started under the state lock.
pub struct Prepared {
    req: ShardQuery,
    compute: Compute,
}

/// Checks the plan and starts its scans: the buffered rows are selected now (the caller holds
/// the state lock), the segments are read by [`Prepared::run`].
pub fn prepare(shard: &dyn Scans, req: ShardQuery) -> Result<Prepared, QueryError> {
    if req.from_unix_nanos >= req.to_unix_nanos {
        return Err(QueryError::BadPlan("empty time range".into()));
    }
    let compute = kind(&req.plan).prepare(&req, shard)?;
    Ok(Prepared { req, compute })
}

impl Prepared {
    /// Reads the segments and computes the partial, its tables drawing on `memory`. Over the
    /// row or the memory budget, the reply says so instead of carrying a partial.
    pub fn run(self, memory: Arc<MemoryPool>) -> Result<ShardReply, QueryError> {
        let mut budget = Budget::with_memory(self.req.max_rows, memory);
        let partial = match (self.compute)(&self.req, &mut budget) {
            Ok(partial) => Ok(partial),
            Err(QueryError::Budget(_)) => Err(Refused::Rows),
            Err(QueryError::Memory(budget_bytes)) => Err(Refused::Memory { budget_bytes }),
            Err(e) => return Err(e),
        };
        Ok(ShardReply { rows_scanned: budget.used, partial })
    }
}

pub use crate::segment::Prehashed;

/// Like [`each_batch`] for a reader whose tables grow with its input: `f` answers the bytes
/// they hold after the batch, which the budget reserves from the node's query memory.
fn each_batch_holding(
    job: ScanJob,
    budget: &mut Budget,
    mut f: impl FnMut(&RecordBatch) -> Result<u64, QueryError>,
) -> Result<(), QueryError> {
    job.run_each(|rb: RecordBatch| {
        budget.take(rb.num_rows())?;
        let held = f(&rb)?;
        budget.hold(held)
    })
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
