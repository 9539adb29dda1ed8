//! Prometheus metrics of a storage node.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct GroupLabel {
    pub group: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct TableLabel {
    pub table: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ShedLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ComponentLabel {
    pub component: &'static str,
}

pub struct NodeMetrics {
    pub log_fsyncs: Counter,
    /// How many appends (of any groups) each fsync made durable.
    pub log_fsync_batch: Histogram,
    pub applied_rows: Family<GroupLabel, Counter>,
    pub duplicate_batches: Counter,
    /// Storage calls relayed to a group's leader for a router that could not reach it.
    pub relayed_calls: Counter,
    /// Groups started again in-process after their Raft stopped on an error.
    pub group_restarts: Counter,
    pub commit_seconds: Histogram,
    pub snapshots_built: Counter,
    pub snapshots_installed: Counter,
    /// Segments and their bytes per table, over every shard replica of this node.
    pub segments: Family<TableLabel, Gauge>,
    pub segment_bytes: Family<TableLabel, Gauge>,
    pub flush_seconds: Histogram,
    pub compaction_seconds: Histogram,
    pub compactions: Counter,
    /// Flushes asked for before a buffer was due, because the node's buffers together passed
    /// its buffer budget (`shard::background::flusher`).
    pub early_flushes: Counter,
    /// Log entries appended but not yet applied, per group.
    pub apply_lag: Family<GroupLabel, Gauge>,
    /// Bytes on disk per component (`raft_log`, `segments`, `meta`), allocated blocks.
    pub disk_bytes: Family<ComponentLabel, Gauge>,
    /// Heap bytes of the data shards per component (`buffers`, `uuid_sets`, `segment_metadata`).
    pub memory_bytes: Family<ComponentLabel, Gauge>,
    /// Bytes still available on the data directory's filesystem.
    pub disk_available_bytes: Gauge,
    /// 1 while the disk is above its high-water mark and writes are refused.
    pub disk_writes_refused: Gauge,
    /// Batches refused because a shard's write queue was full (`crate::admission`), by reason.
    pub writes_shed: Family<ShedLabel, Counter>,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self {
            log_fsyncs: Counter::default(),
            log_fsync_batch: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            applied_rows: Family::default(),
            duplicate_batches: Counter::default(),
            relayed_calls: Counter::default(),
            group_restarts: Counter::default(),
            commit_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            snapshots_built: Counter::default(),
            snapshots_installed: Counter::default(),
            segments: Family::default(),
            segment_bytes: Family::default(),
            flush_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            compaction_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            compactions: Counter::default(),
            early_flushes: Counter::default(),
            apply_lag: Family::default(),
            disk_bytes: Family::default(),
            memory_bytes: Family::default(),
            disk_available_bytes: Gauge::default(),
            disk_writes_refused: Gauge::default(),
            writes_shed: Family::default(),
        }
    }
}

impl NodeMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("sextant_node");
        r.register("raft_log_fsyncs", "fsync calls of the shared Raft log", self.log_fsyncs.clone());
        r.register(
            "raft_log_fsync_batch_size",
            "appends made durable by one fsync (group commit)",
            self.log_fsync_batch.clone(),
        );
        r.register("applied_rows", "rows applied to shard state machines", self.applied_rows.clone());
        r.register("duplicate_batches", "retried batches recognised and applied once", self.duplicate_batches.clone());
        r.register(
            "relayed_calls",
            "storage calls relayed to the leader for a router that could not reach it",
            self.relayed_calls.clone(),
        );
        r.register(
            "group_restarts",
            "Raft groups started again on this node after they stopped on an error",
            self.group_restarts.clone(),
        );
        r.register("raft_commit_seconds", "time from proposal to apply of client writes", self.commit_seconds.clone());
        r.register("snapshots_built", "state machine snapshots written", self.snapshots_built.clone());
        r.register(
            "snapshots_installed",
            "snapshots received from a leader and installed",
            self.snapshots_installed.clone(),
        );
        r.register("segments", "segments per table on this node", self.segments.clone());
        r.register("segment_bytes", "bytes of segment files per table on this node", self.segment_bytes.clone());
        r.register("flush_seconds", "time to flush a shard buffer into segments", self.flush_seconds.clone());
        r.register("compaction_seconds", "time to merge small segments", self.compaction_seconds.clone());
        r.register("compactions", "segment merges done", self.compactions.clone());
        r.register(
            "early_flushes",
            "flushes asked for before the buffer was due, because the node's buffers together passed --buffer-memory-mib",
            self.early_flushes.clone(),
        );
        r.register("apply_lag_entries", "log entries appended but not yet applied, per group", self.apply_lag.clone());
        r.register("disk_bytes", "bytes on disk per component of this node", self.disk_bytes.clone());
        r.register(
            "memory_bytes",
            "heap bytes the data shards hold per component: buffers (as estimated for flushing), uuid sets, user numbers, open segments' metadata",
            self.memory_bytes.clone(),
        );
        r.register(
            "disk_available_bytes",
            "bytes available on the filesystem of the data directory",
            self.disk_available_bytes.clone(),
        );
        r.register(
            "disk_writes_refused",
            "1 while the disk is above its high-water mark and new writes are refused",
            self.disk_writes_refused.clone(),
        );
        r.register(
            "writes_shed",
            "batches refused because a shard had too many writes in flight or unflushed, by reason",
            self.writes_shed.clone(),
        );
    }
}
