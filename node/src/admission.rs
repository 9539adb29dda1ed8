//! Write admission: the queue between a node's gRPC writes and its shards' Raft is bounded.
//! A shard leader takes a batch only while the batches it has proposed and not yet applied
//! stay under a count and a byte bound (memory), while its recent writes took less than a
//! target from proposal to apply (latency: the queue is as long as the shard can serve in
//! that time, whatever the machine), and while the rows it has applied and not yet flushed
//! stay under a byte bound; past any it refuses at once (`RESOURCE_EXHAUSTED` with
//! [`sextant_proto::OVERLOADED_HEADER`], the router's 503 `overloaded`) instead of queueing
//! in memory until the client gives up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::types::GroupId;

/// Bounds per shard (docs/API.md, "Overload").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteLimits {
    /// Batches proposed to a shard's Raft and not yet applied.
    pub max_pending_writes: u32,
    /// Their payload bytes.
    pub max_pending_bytes: u64,
    /// Rows applied and not yet written to segments (active and frozen buffers, as estimated
    /// for flush-by-size).
    pub max_unflushed_bytes: u64,
    /// Target time from proposal to apply: while recent writes (a moving average) took
    /// longer, only [`MIN_PENDING`] batches are admitted at once.
    pub max_queue_delay: Duration,
}

/// Batches always admitted whatever the recent latency (within the count and byte bounds), so
/// that the average keeps being measured and a shard is never refused while nearly idle.
pub const MIN_PENDING: u32 = 4;

impl Default for WriteLimits {
    /// 32 MiB of entries is about a second of a shard's apply rate (docs/BENCHMARKS.md,
    /// "Overload"); 768 MiB unflushed is three flush-sized buffers: one being written, one
    /// filling, room for a slow disk.
    fn default() -> Self {
        Self {
            max_pending_writes: 512,
            max_pending_bytes: 32 << 20,
            max_unflushed_bytes: 768 << 20,
            max_queue_delay: Duration::from_millis(500),
        }
    }
}

/// Why a batch was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Overloaded {
    #[error("overloaded: shard {group} has {pending} writes in flight (limit {limit}); retry shortly")]
    Writes { group: GroupId, pending: u32, limit: u32 },
    #[error("overloaded: shard {group} has {pending} bytes of writes in flight (limit {limit}); retry shortly")]
    Bytes { group: GroupId, pending: u64, limit: u64 },
    #[error("overloaded: shard {group} holds {unflushed} bytes not yet flushed (limit {limit}); retry shortly")]
    Unflushed { group: GroupId, unflushed: u64, limit: u64 },
    #[error("overloaded: shard {group} takes {delay:?} to apply a write (target {target:?}); retry shortly")]
    Delay { group: GroupId, delay: Duration, target: Duration },
}

impl Overloaded {
    /// The `reason` label of `sextant_node_writes_shed`.
    pub fn reason(&self) -> &'static str {
        match self {
            Overloaded::Writes { .. } => "pending_writes",
            Overloaded::Bytes { .. } => "pending_bytes",
            Overloaded::Unflushed { .. } => "unflushed_bytes",
            Overloaded::Delay { .. } => "queue_delay",
        }
    }
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Pending {
    pub writes: u32,
    pub bytes: u64,
    /// Moving average of the time from admission to apply of the shard's recent writes.
    pub delay: Duration,
}

type Shards = Arc<Mutex<HashMap<GroupId, Pending>>>;

#[derive(Default)]
pub struct WriteAdmission {
    limits: RwLock<WriteLimits>,
    pending: Shards,
}

/// A batch admitted to a shard: counted as pending until dropped (applied, refused or failed);
/// its time until then goes into the shard's moving average.
#[must_use]
pub struct Admitted {
    group: GroupId,
    bytes: u64,
    since: Instant,
    done: bool,
    pending: Shards,
}

/// Weight of the newest write in the moving average of a shard's write delay.
const DELAY_WEIGHT: f64 = 0.2;

impl WriteAdmission {
    pub fn new(limits: WriteLimits) -> Self {
        Self { limits: RwLock::new(limits), pending: Default::default() }
    }

    /// Sets the bounds (`--max-pending-writes`, `--max-pending-write-mib`,
    /// `--max-unflushed-mib`); batches already admitted are kept.
    pub fn set_limits(&self, limits: WriteLimits) {
        *self.limits.write().unwrap() = limits;
    }

    pub fn limits(&self) -> WriteLimits {
        *self.limits.read().unwrap()
    }

    /// Admits a batch of `bytes` to `group`, whose buffers hold `unflushed` bytes, or says why
    /// not. A batch larger than the byte bound is admitted when nothing else is pending, so
    /// that any batch the router may send can pass on an idle shard.
    pub fn admit(&self, group: GroupId, bytes: u64, unflushed: u64) -> Result<Admitted, Overloaded> {
        let limits = self.limits();
        if unflushed > limits.max_unflushed_bytes {
            return Err(Overloaded::Unflushed { group, unflushed, limit: limits.max_unflushed_bytes });
        }
        let mut all = self.pending.lock().unwrap();
        let p = all.entry(group).or_default();
        if p.writes >= limits.max_pending_writes {
            return Err(Overloaded::Writes { group, pending: p.writes, limit: limits.max_pending_writes });
        }
        if p.writes > 0 && p.bytes.saturating_add(bytes) > limits.max_pending_bytes {
            return Err(Overloaded::Bytes { group, pending: p.bytes, limit: limits.max_pending_bytes });
        }
        if p.writes >= MIN_PENDING && p.delay > limits.max_queue_delay {
            return Err(Overloaded::Delay { group, delay: p.delay, target: limits.max_queue_delay });
        }
        p.writes += 1;
        p.bytes = p.bytes.saturating_add(bytes);
        Ok(Admitted { group, bytes, since: Instant::now(), done: false, pending: self.pending.clone() })
    }

    /// What `group` has in flight now.
    pub fn pending(&self, group: GroupId) -> Pending {
        self.pending.lock().unwrap().get(&group).copied().unwrap_or_default()
    }
}

impl Admitted {
    /// Ends the write, which took `took`.
    fn finish(&mut self, took: Duration) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let mut all = self.pending.lock().unwrap();
        if let Some(p) = all.get_mut(&self.group) {
            p.writes = p.writes.saturating_sub(1);
            p.bytes = p.bytes.saturating_sub(self.bytes);
            p.delay = p.delay.mul_f64(1.0 - DELAY_WEIGHT) + took.mul_f64(DELAY_WEIGHT);
        }
    }

    #[cfg(test)]
    fn finished_after(mut self, took: Duration) {
        self.finish(took);
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let took = self.since.elapsed();
        self.finish(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(writes: u32, bytes: u64, unflushed: u64) -> WriteAdmission {
        WriteAdmission::new(WriteLimits {
            max_pending_writes: writes,
            max_pending_bytes: bytes,
            max_unflushed_bytes: unflushed,
            max_queue_delay: Duration::from_secs(3600),
        })
    }

    #[test]
    fn writes_past_the_count_bound_are_refused_until_one_is_applied() {
        let a = limits(2, 1 << 20, 1 << 30);
        let first = a.admit(1, 10, 0).unwrap();
        let _second = a.admit(1, 10, 0).unwrap();
        assert!(matches!(a.admit(1, 10, 0), Err(Overloaded::Writes { pending: 2, limit: 2, .. })));
        let _other_shard = a.admit(2, 10, 0).expect("bounds are per shard");
        drop(first);
        let _third = a.admit(1, 10, 0).expect("one applied, one more admitted");
        assert_eq!((a.pending(1).writes, a.pending(1).bytes), (2, 20));
    }

    #[test]
    fn bytes_past_the_byte_bound_are_refused_but_a_lone_large_batch_passes() {
        let a = limits(100, 1000, 1 << 30);
        let big = a.admit(1, 5000, 0).expect("nothing pending: any size passes");
        assert!(matches!(a.admit(1, 1, 0), Err(Overloaded::Bytes { pending: 5000, .. })));
        drop(big);
        let _a = a.admit(1, 600, 0).unwrap();
        assert_eq!(a.admit(1, 401, 0).err().map(|e| e.reason()), Some("pending_bytes"));
        let _b = a.admit(1, 400, 0).expect("exactly at the bound");
        assert_eq!(a.pending(1).bytes, 1000);
    }

    #[test]
    fn a_shard_with_too_much_unflushed_refuses_writes() {
        let a = limits(100, 1 << 20, 1000);
        assert!(matches!(a.admit(1, 1, 1001), Err(Overloaded::Unflushed { unflushed: 1001, limit: 1000, .. })));
        assert_eq!(a.pending(1).writes, 0, "a refusal holds nothing");
        let _ok = a.admit(1, 1, 1000).unwrap();
    }

    #[test]
    fn a_shard_whose_writes_take_longer_than_the_target_admits_only_a_few_until_they_are_fast_again() {
        let a = WriteAdmission::new(WriteLimits { max_queue_delay: Duration::from_millis(500), ..Default::default() });
        // Slow writes raise the average past the target.
        for _ in 0..20 {
            a.admit(1, 10, 0).unwrap().finished_after(Duration::from_secs(2));
        }
        assert!(a.pending(1).delay > Duration::from_millis(500));
        let held: Vec<_> = (0..MIN_PENDING).map(|_| a.admit(1, 10, 0).expect("a few always pass")).collect();
        match a.admit(1, 10, 0) {
            Err(e @ Overloaded::Delay { .. }) => assert_eq!(e.reason(), "queue_delay"),
            other => panic!("expected a refusal for delay, got {:?}", other.err()),
        }
        let _other = a.admit(2, 10, 0).expect("another shard is not slow");
        // Fast writes bring the average back under the target.
        for w in held {
            w.finished_after(Duration::from_millis(1));
        }
        while a.pending(1).delay > Duration::from_millis(500) {
            a.admit(1, 10, 0).unwrap().finished_after(Duration::from_millis(1));
        }
        let _more: Vec<_> = (0..2 * MIN_PENDING).map(|_| a.admit(1, 10, 0).expect("fast again")).collect();
    }

    #[test]
    fn dropping_every_admitted_write_leaves_nothing_pending() {
        let a = limits(10, 1 << 20, 1 << 30);
        let held: Vec<_> = (0..10).map(|i| a.admit(i % 3, 100, 0).unwrap()).collect();
        drop(held);
        for g in 0..3 {
            assert_eq!((a.pending(g).writes, a.pending(g).bytes), (0, 0));
        }
        a.set_limits(WriteLimits { max_pending_writes: 1, ..a.limits() });
        let _one = a.admit(0, 1, 0).unwrap();
        assert!(a.admit(0, 1, 0).is_err(), "new limits apply to the next batch");
    }
}
