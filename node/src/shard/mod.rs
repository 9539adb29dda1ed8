//! A data shard's store: applied batches go to an in-memory [`Buffer`]; a checkpoint (Raft
//! snapshot) freezes the buffer, writes it as Parquet segments and then the manifest, after
//! which openraft purges the log. Reads merge the buffer, frozen buffers and segments.
//!
//! Crash safety: segments are fsynced before the manifest names them, the manifest is replaced
//! atomically, and the log is purged only after the checkpoint returns. A crash at any point
//! restarts from the last manifest and re-applies the log after it; segment files the
//! manifest does not name are deleted on open.

mod apply;
pub mod background;
mod compact;
mod flush;
pub mod handoff;
mod install;
mod read;
#[cfg(test)]
mod testing;
pub mod usage;

pub use compact::{CompactionJob, CompactionOutcome};
pub use flush::{FLUSH_AGE, FLUSH_BYTES};
pub use read::{ScanJob, TraceLookup};

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use sextant_model::Clock;

use crate::archive::FileEntry;
use crate::segment::compaction::ExpiryPolicy;
use crate::segment::user_number::UserNumbers;
use crate::segment::uuids::Uuids;
use crate::segment::{Buffer, Dedup, Manifest, Segment, Table};
use crate::state_machine::{CheckpointJob, CheckpointOpener, GroupStore};
use crate::types::{Command, CommandResponse, SnapshotMeta};
use handoff::Handoffs;
use usage::Usage;

/// What readers see besides the active buffer; changed atomically when a flush lands.
#[derive(Default)]
struct Published {
    frozen: Vec<Arc<Buffer>>,
    segments: Vec<Arc<Segment>>,
}

/// The manifest as on disk, plus its file entry; writers of the manifest lock it.
struct Persisted {
    manifest: Manifest,
    entry: Option<FileEntry>,
}

impl Persisted {
    /// The checkpoint this manifest records: its meta and files, the manifest first.
    fn checkpoint(&self) -> Option<(SnapshotMeta, Vec<FileEntry>)> {
        Some((self.manifest.checkpoint.clone()?, self.manifest.files(self.entry.clone()?)))
    }
}

pub struct SegmentShard {
    dir: PathBuf,
    active: Buffer,
    dedup: Dedup,
    tombstones: BTreeSet<u128>,
    /// Uuids of the analytics rows applied and not aborted: a row bringing one again is dropped.
    uuids: Uuids,
    /// Numbers of the users of its events (`segment::user_number`); replaced by an install.
    users: Arc<UserNumbers>,
    published: Arc<RwLock<Published>>,
    persisted: Arc<Mutex<Persisted>>,
    expiry: Arc<ExpiryPolicy>,
    /// Where the buffer's age is measured.
    clock: Clock,
    /// What was applied, per project and month (`usage.rs`).
    usage: Usage,
    /// The index of the last entry applied: the position the usage counters are at.
    applied_index: u64,
    /// True once the replica is closed ([`SegmentShard::closer`]). Flushes and compactions
    /// hold it for reading while they run.
    closed: Arc<RwLock<bool>>,
    /// Rows handed over by a router in this process, awaiting their entries.
    handoffs: Arc<Handoffs>,
}

fn open_segments(dir: &Path, manifest: &Manifest) -> io::Result<Vec<Arc<Segment>>> {
    manifest.segments.iter().map(|m| Segment::open(dir, m.clone()).map(Arc::new)).collect()
}

/// The uuids of the analytics rows in `segments`, except those of tombstoned batches.
fn segment_uuids(segments: &[Arc<Segment>], tombstones: &BTreeSet<u128>) -> io::Result<Uuids> {
    let mut out = Uuids::default();
    for seg in segments.iter().filter(|s| matches!(s.meta.table, Table::Events | Table::ReplayEvents)) {
        seg.uuid_keys(&|b| tombstones.contains(&b), |k| {
            out.insert(k);
        })?;
    }
    Ok(out)
}

/// Deletes files a crash left behind: segments the manifest does not name, temporaries.
fn remove_strays(dir: &Path, manifest: &Manifest) -> io::Result<()> {
    remove_files(dir, &strays(dir, manifest)?)
}

fn strays(dir: &Path, manifest: &Manifest) -> io::Result<Vec<String>> {
    let keep: HashSet<&str> = manifest.segments.iter().map(|s| s.file.name.as_str()).collect();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let stray_segment = name.starts_with("seg-") && !keep.contains(name.as_str());
        if stray_segment || (name.starts_with('.') && name.ends_with(".tmp")) {
            out.push(name);
        }
    }
    Ok(out)
}

/// Deletes `names` from `dir`. One already gone is fine: a compaction deletes the inputs it
/// replaced after its manifest lands, outside the manifest's lock, so an install (or the
/// reopening of a restarted group) may list a file the compaction deletes before it does.
fn remove_files(dir: &Path, names: &[String]) -> io::Result<()> {
    for name in names {
        match std::fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

impl SegmentShard {
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (manifest, entry) = match Manifest::load(dir)? {
            Some((m, e)) => (m, Some(e)),
            None => (Manifest::default(), None),
        };
        remove_strays(dir, &manifest)?;
        let segments = open_segments(dir, &manifest)?;
        let uuids = segment_uuids(&segments, &manifest.tombstones)?;
        let users = Arc::new(UserNumbers::rebuild(&segments)?);
        Ok(Self {
            dir: dir.to_owned(),
            active: Buffer::default(),
            dedup: manifest.dedup.clone(),
            tombstones: manifest.tombstones.clone(),
            uuids,
            users,
            published: Arc::new(RwLock::new(Published { frozen: Vec::new(), segments })),
            expiry: Arc::default(),
            clock: Clock::system(),
            usage: manifest.usage.clone(),
            applied_index: manifest.checkpoint.as_ref().and_then(|c| c.last_log_id).map_or(0, |l| l.index),
            persisted: Arc::new(Mutex::new(Persisted { manifest, entry })),
            closed: Arc::default(),
            handoffs: Arc::default(),
        })
    }

    /// Closes the replica: waits for its running flush and compaction, and keeps any later one
    /// from touching its directory. A group restarted in the same process opens the directory
    /// again; a job of the old replica finishing after that would reuse the new replica's
    /// segment ids and write its own manifest over the new one's.
    pub fn closer(&self) -> impl FnOnce() + Send + 'static {
        let closed = self.closed.clone();
        move || *closed.write().unwrap() = true
    }

    /// Where a write hands over the rows of its payload (see [`handoff`]).
    pub fn handoffs(&self) -> Arc<Handoffs> {
        self.handoffs.clone()
    }

    /// The same shard, measuring time on `clock`.
    pub fn with_clock(self, clock: Clock) -> Self {
        Self { clock, ..self }
    }

    /// Segments of `table` and their bytes on disk.
    pub fn segment_stats(&self, table: Table) -> (usize, u64) {
        let published = self.published.read().unwrap();
        let of_table = published.segments.iter().filter(|s| s.meta.table == table);
        of_table.fold((0, 0), |(n, b), s| (n + 1, b + s.meta.file.len))
    }

    /// Compressed bytes per column of `table`, over all its segments.
    pub fn column_bytes(&self, table: Table) -> Vec<(String, u64)> {
        let mut total: Vec<(String, u64)> = Vec::new();
        for seg in self.published.read().unwrap().segments.iter().filter(|s| s.meta.table == table) {
            for (name, bytes) in seg.column_bytes() {
                match total.iter_mut().find(|(n, _)| *n == name) {
                    Some(t) => t.1 += bytes,
                    None => total.push((name, bytes)),
                }
            }
        }
        total
    }

    /// The usage counters (per project and month) and the index of the last entry they count:
    /// what the group's leader reports to meta.
    pub fn usage_report(&self) -> (u64, Vec<sextant_model::usage::UsageRecord>) {
        (self.applied_index, self.usage.records())
    }

    /// Bytes of rows in the active buffer, as estimated for flush-by-size.
    pub fn active_bytes(&self) -> u64 {
        self.active.bytes as u64
    }

    /// Bytes of rows applied and not yet in segments: the active buffer and the frozen ones
    /// being flushed, as estimated for flush-by-size.
    pub fn unflushed_bytes(&self) -> u64 {
        let frozen: usize = self.published.read().unwrap().frozen.iter().map(|b| b.bytes).sum();
        (self.active.bytes + frozen) as u64
    }

    pub fn segment_count(&self) -> usize {
        self.published.read().unwrap().segments.len()
    }

    /// Heap bytes held for what it applied: its buffers (as estimated for flush-by-size), its
    /// uuid set, its table of user numbers, and what its open segments keep in memory.
    pub fn memory(&self) -> ShardMemory {
        let segments = self.published.read().unwrap().segments.iter().map(|s| s.heap_bytes() as u64).sum();
        let (buffers, uuids, users) =
            (self.unflushed_bytes(), self.uuids.heap_bytes() as u64, self.users.heap_bytes() as u64);
        ShardMemory { buffers, uuids, users, segments }
    }
}

/// See [`SegmentShard::memory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardMemory {
    pub buffers: u64,
    pub uuids: u64,
    /// The table of user numbers.
    pub users: u64,
    pub segments: u64,
}

impl std::iter::Sum for ShardMemory {
    fn sum<I: Iterator<Item = ShardMemory>>(shards: I) -> ShardMemory {
        shards.fold(ShardMemory::default(), |a, b| ShardMemory {
            buffers: a.buffers + b.buffers,
            uuids: a.uuids + b.uuids,
            users: a.users + b.users,
            segments: a.segments + b.segments,
        })
    }
}

/// The Raft side of a shard, each step in its own file: apply (`apply.rs`), checkpoint =
/// flush (`flush.rs`), snapshot send and install (`install.rs`).
impl GroupStore for SegmentShard {
    fn apply(&mut self, index: u64, command: Command) -> CommandResponse {
        self.applied_index = index;
        self.apply_command(command)
    }

    fn begin_checkpoint(&mut self, meta: SnapshotMeta) -> CheckpointJob {
        self.begin_flush(meta)
    }

    fn checkpoint(&self) -> Option<(SnapshotMeta, Vec<FileEntry>)> {
        self.last_checkpoint()
    }

    fn checkpoint_opener(&self) -> CheckpointOpener {
        self.open_checkpoint()
    }

    fn install(&mut self, meta: &SnapshotMeta, staging: &Path, files: &[FileEntry]) -> io::Result<()> {
        self.install_snapshot(meta, staging, files)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::testing::*;
    use super::*;
    use crate::segment::Row;
    use sextant_model::row::Span;

    /// An install, or the reopening of a restarted group, lists the files no manifest names
    /// while a compaction deletes the inputs it replaced: "No such file or directory" stopped
    /// the install, then the group's restart.
    #[test]
    fn strays_deleted_by_someone_else_meanwhile_are_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for id in [1, 4] {
            std::fs::write(dir.path().join(crate::segment::file::file_name(id)), b"replaced").unwrap();
        }
        let listed = strays(dir.path(), &Manifest::default()).unwrap();
        assert_eq!(listed.len(), 2);
        std::fs::remove_file(dir.path().join(&listed[0])).unwrap();
        remove_files(dir.path(), &listed).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            /// A new batch of `n` spans over `traces` traces.
            Ingest {
                traces: u8,
                n: u8,
            },
            /// The router retrying the k-th earlier batch (same batch id).
            Retry(usize),
            Abort(usize),
            Checkpoint,
            /// Merge small segments (as the compactor does once their hour is over).
            Compact,
            /// Crash and restart: the store reopens from disk and Raft re-applies the log
            /// entries after the last checkpoint.
            Restart,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (1u8..4, 1u8..20).prop_map(|(traces, n)| Op::Ingest { traces, n }),
                1 => any::<usize>().prop_map(Op::Retry),
                1 => any::<usize>().prop_map(Op::Abort),
                1 => Just(Op::Checkpoint),
                1 => Just(Op::Compact),
                1 => Just(Op::Restart),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
            #[test]
            fn any_sequence_of_writes_flushes_aborts_and_restarts_keeps_exactly_the_rows_written(
                ops in prop::collection::vec(op(), 1..40)
            ) {
                let dir = tempfile::tempdir().unwrap();
                let mut s = SegmentShard::open(dir.path()).unwrap();
                // The Raft log: every command with its index; entries after the last
                // checkpoint are replayed on restart.
                let mut log: Vec<(u64, Command)> = Vec::new();
                let mut checkpointed = 0u64;
                let mut batches: Vec<(u128, Vec<Span>)> = Vec::new();
                let mut aborted = std::collections::HashSet::new();
                let apply = |s: &mut SegmentShard, log: &mut Vec<(u64, Command)>, cmd: Command| {
                    let index = log.len() as u64 + 1;
                    log.push((index, cmd.clone()));
                    s.apply(index, cmd)
                };
                for op in ops {
                    match op {
                        Op::Ingest { traces, n } => {
                            let id = batches.len() as u128 + 1;
                            let spans: Vec<Span> = (0..n)
                                .map(|i| span(&format!("t{}-{}", id, i % traces), &format!("s{id}-{i}"), (id as i64) * HOUR / 3 + i as i64))
                                .collect();
                            apply(&mut s, &mut log, Command::Ingest { batch_id: id, payload: batch("p", spans.clone()).into() });
                            batches.push((id, spans));
                        }
                        Op::Retry(k) if !batches.is_empty() => {
                            let (id, spans) = batches[k % batches.len()].clone();
                            apply(&mut s, &mut log, Command::Ingest { batch_id: id, payload: batch("p", spans).into() });
                        }
                        Op::Abort(k) if !batches.is_empty() => {
                            let id = batches[k % batches.len()].0;
                            aborted.insert(id);
                            apply(&mut s, &mut log, Command::Abort { batch_id: id });
                        }
                        Op::Checkpoint => {
                            checkpointed = log.len() as u64;
                            checkpoint(&mut s, checkpointed);
                        }
                        Op::Compact => {
                            if let Some(job) = s.compaction(i64::MAX) {
                                let merged = matches!(job.run().unwrap(), CompactionOutcome::Merged { .. });
                                prop_assert!(merged);
                            }
                        }
                        Op::Restart => {
                            drop(s);
                            s = SegmentShard::open(dir.path()).unwrap();
                            for (index, cmd) in log.iter().filter(|(i, _)| *i > checkpointed) {
                                s.apply(*index, cmd.clone());
                            }
                        }
                        _ => {}
                    }
                }
                let mut want: Vec<(String, String)> = batches
                    .iter()
                    .filter(|(id, _)| !aborted.contains(id))
                    .flat_map(|(_, spans)| spans.iter().map(|s| (s.trace_id.clone(), s.span_id.clone())))
                    .collect();
                want.sort();
                let mut got: Vec<(String, String)> = scan_all(&s, Table::Spans, "p", Default::default())
                    .into_iter()
                    .map(|r| match r {
                        Row::Span(s) => (s.trace_id, s.span_id),
                        other => panic!("not a span: {other:?}"),
                    })
                    .collect();
                got.sort();
                prop_assert_eq!(got, want);
            }

            /// Two replicas apply the same log, one also flushing, compacting and restarting at
            /// arbitrary points: they store the same events, each uuid once, and every uuid
            /// that no aborted batch carried.
            #[test]
            fn replicas_store_each_uuid_once_whatever_their_flushes_compactions_and_restarts(
                ops in prop::collection::vec(op(), 1..40)
            ) {
                let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
                let mut a = SegmentShard::open(a_dir.path()).unwrap();
                let mut b = SegmentShard::open(b_dir.path()).unwrap();
                let mut log: Vec<(u64, Command)> = Vec::new();
                let mut checkpointed = 0u64;
                let mut batches: Vec<(u128, Vec<sextant_model::row::Event>)> = Vec::new();
                let mut aborted = std::collections::HashSet::new();
                let apply = |a: &mut SegmentShard, b: &mut SegmentShard, log: &mut Vec<(u64, Command)>, cmd: Command| {
                    let index = log.len() as u64 + 1;
                    log.push((index, cmd.clone()));
                    prop_assert_eq!(a.apply(index, cmd.clone()), b.apply(index, cmd));
                    Ok(())
                };
                for op in ops {
                    match op {
                        // uuids from a small pool, so batches share them; days apart.
                        Op::Ingest { traces, n } => {
                            let id = batches.len() as u128 + 1;
                            let events: Vec<_> = (0..n)
                                .map(|i| {
                                    let u = (id as usize * 7 + i as usize * traces as usize) % 23;
                                    ev(&format!("u{u}"), "x", u as i64 * HOUR * 5)
                                })
                                .collect();
                            apply(&mut a, &mut b, &mut log, Command::Ingest { batch_id: id, payload: analytics("p", events.clone(), vec![]).into() })?;
                            batches.push((id, events));
                        }
                        // A client retry: a new batch id, the same events.
                        Op::Retry(k) if !batches.is_empty() => {
                            let events = batches[k % batches.len()].1.clone();
                            let id = batches.len() as u128 + 1;
                            apply(&mut a, &mut b, &mut log, Command::Ingest { batch_id: id, payload: analytics("p", events.clone(), vec![]).into() })?;
                            batches.push((id, events));
                        }
                        Op::Abort(k) if !batches.is_empty() => {
                            let id = batches[k % batches.len()].0;
                            aborted.insert(id);
                            apply(&mut a, &mut b, &mut log, Command::Abort { batch_id: id })?;
                        }
                        Op::Checkpoint => {
                            checkpointed = log.len() as u64;
                            checkpoint(&mut a, checkpointed);
                        }
                        Op::Compact => {
                            if let Some(job) = a.compaction(i64::MAX) {
                                job.run().unwrap();
                            }
                        }
                        Op::Restart => {
                            drop(a);
                            a = SegmentShard::open(a_dir.path()).unwrap();
                            for (index, cmd) in log.iter().filter(|(i, _)| *i > checkpointed) {
                                a.apply(*index, cmd.clone());
                            }
                        }
                        _ => {}
                    }
                }
                let got = stored(&a, Table::Events, "p");
                prop_assert_eq!(&got, &stored(&b, Table::Events, "p"));
                let mut once = got.clone();
                once.dedup();
                prop_assert_eq!(&once, &got, "a uuid stored twice");
                let in_aborted: HashSet<&str> = batches.iter().filter(|(id, _)| aborted.contains(id))
                    .flat_map(|(_, e)| e.iter().map(|e| e.uuid.as_str())).collect();
                for (_, events) in batches.iter().filter(|(id, _)| !aborted.contains(id)) {
                    for e in events.iter().filter(|e| !in_aborted.contains(e.uuid.as_str())) {
                        prop_assert!(got.contains(&e.uuid), "{} lost", e.uuid);
                    }
                }
            }
        }
    }
}
