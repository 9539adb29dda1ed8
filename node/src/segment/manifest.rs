//! The manifest: the one file that says which segments make up a shard and up to which Raft
//! entry they hold everything. Replaced atomically, so after a crash a shard is exactly its
//! last manifest; segment files it does not name are leftovers of an interrupted flush.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::io;
use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use super::file::SegmentMeta;
use crate::archive::FileEntry;
use crate::durable::write_file_atomic;
use crate::types::SnapshotMeta;

pub const MANIFEST: &str = "MANIFEST";

/// How many batch ids a shard remembers: a retry arriving later than this many batches is
/// not recognised (row-level idempotency still keeps trace reads exact).
const REMEMBERED_BATCHES: usize = 200_000;

/// Batch ids applied and aborted recently, so retries apply once and aborts win over late
/// arrivals. Part of the checkpoint: replicas must agree on it.
#[derive(Clone, Debug, Default)]
pub struct Dedup {
    applied: HashSet<u128>,
    applied_order: VecDeque<u128>,
    aborted: HashSet<u128>,
    aborted_order: VecDeque<u128>,
}

fn remember(set: &mut HashSet<u128>, order: &mut VecDeque<u128>, id: u128) {
    if set.insert(id) {
        order.push_back(id);
        if order.len() > REMEMBERED_BATCHES {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
    }
}

impl Dedup {
    pub fn is_applied(&self, id: u128) -> bool {
        self.applied.contains(&id)
    }
    pub fn is_aborted(&self, id: u128) -> bool {
        self.aborted.contains(&id)
    }
    pub fn record_applied(&mut self, id: u128) {
        remember(&mut self.applied, &mut self.applied_order, id)
    }
    pub fn record_aborted(&mut self, id: u128) {
        remember(&mut self.aborted, &mut self.aborted_order, id)
    }
    /// Rebuilds the sets from the lists [`Dedup::applied_in_order`] and
    /// [`Dedup::aborted_in_order`] gave.
    pub fn from_lists(applied: Vec<u128>, aborted: Vec<u128>) -> Self {
        let mut d = Dedup::default();
        applied.into_iter().for_each(|b| d.record_applied(b));
        aborted.into_iter().for_each(|b| d.record_aborted(b));
        d
    }
    pub fn applied_in_order(&self) -> impl Iterator<Item = u128> + '_ {
        self.applied_order.iter().copied()
    }
    pub fn aborted_in_order(&self) -> impl Iterator<Item = u128> + '_ {
        self.aborted_order.iter().copied()
    }
}

/// Stored in the format of docs/ARCHITECTURE.md, "Persisted formats".
#[derive(Clone, Debug, Default)]
pub struct Manifest {
    /// The Raft position (and membership) everything in the segments covers.
    pub checkpoint: Option<SnapshotMeta>,
    pub segments: Vec<SegmentMeta>,
    pub next_segment: u64,
    pub dedup: Dedup,
    /// Aborted batches whose rows were already in segments: hidden from reads until a
    /// compaction drops them.
    pub tombstones: BTreeSet<u128>,
    /// What the shard applied per project and month, as of `checkpoint`.
    pub usage: crate::shard::usage::Usage,
}

impl Manifest {
    /// Reads the manifest of `dir`; a missing manifest is an empty shard.
    pub fn load(dir: &Path) -> io::Result<Option<(Manifest, FileEntry)>> {
        let path = dir.join(MANIFEST);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let manifest =
            Self::decode(&bytes).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Some((manifest, FileEntry { name: MANIFEST.into(), len: bytes.len() as u64, xxh3: xxh3_64(&bytes) })))
    }

    pub fn decode(bytes: &[u8]) -> io::Result<Manifest> {
        if bytes.len() < 8 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "manifest is truncated"));
        }
        let (body, digest) = bytes.split_at(bytes.len() - 8);
        if xxh3_64(body).to_le_bytes() != digest {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "manifest checksum mismatch"));
        }
        crate::persist::decode_manifest(body)
    }

    /// Replaces the manifest of `dir` atomically.
    pub fn store(&self, dir: &Path) -> io::Result<FileEntry> {
        let mut bytes = crate::persist::encode_manifest(self);
        let digest = xxh3_64(&bytes);
        bytes.extend_from_slice(&digest.to_le_bytes());
        write_file_atomic(dir, MANIFEST, &bytes)
    }

    /// The files of this manifest's checkpoint, manifest first.
    pub fn files(&self, manifest: FileEntry) -> Vec<FileEntry> {
        std::iter::once(manifest).chain(self.segments.iter().map(|s| s.file.clone())).collect()
    }
}
