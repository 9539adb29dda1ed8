//! Snapshots: the checkpoint a leader sends (its manifest and the files it names, packed under
//! the manifest's lock) and its install on a replica, replacing the replica's whole state.

use std::collections::HashMap;
use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::{open_segments, remove_strays, segment_uuids, Persisted, Published, SegmentShard};
use crate::archive::{FileEntry, SnapshotStream};
use crate::durable::sync_dir;
use crate::segment::file::file_name;
use crate::segment::user_number::UserNumbers;
use crate::segment::{Buffer, Manifest};
use crate::state_machine::CheckpointOpener;
use crate::types::SnapshotMeta;

impl SegmentShard {
    pub(super) fn last_checkpoint(&self) -> Option<(SnapshotMeta, Vec<FileEntry>)> {
        self.persisted.lock().unwrap().checkpoint()
    }

    pub(super) fn open_checkpoint(&self) -> CheckpointOpener {
        let (dir, persisted) = (self.dir.clone(), self.persisted.clone());
        Box::new(move || {
            // Packed with the lock held: see `GroupStore::checkpoint_opener`.
            let p = persisted.lock().unwrap();
            let Some((meta, files)) = p.checkpoint() else { return Ok(None) };
            let stream = SnapshotStream::pack(&meta, &dir, &files)?;
            Ok(Some((meta, stream)))
        })
    }

    pub(super) fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        staging: &Path,
        files: &[FileEntry],
    ) -> io::Result<()> {
        let Some(first) = files.first().filter(|f| f.name == crate::segment::manifest::MANIFEST) else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot does not start with a manifest"));
        };
        let mut manifest = Manifest::decode(&std::fs::read(staging.join(&first.name))?)?;
        let named: HashSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
        if manifest.segments.iter().any(|s| !named.contains(s.file.name.as_str())) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot lacks a segment its manifest names"));
        }
        let mut p = self.persisted.lock().unwrap();
        // Segment ids are unique per shard history, but a replica's own unflushed ids may
        // collide with the leader's: move received segments to fresh names first.
        let mut next = manifest.next_segment.max(p.manifest.next_segment);
        let mut new_ids = HashMap::new();
        for seg in &mut manifest.segments {
            let fresh = file_name(next);
            std::fs::rename(staging.join(&seg.file.name), self.dir.join(&fresh))?;
            new_ids.insert(seg.id, next);
            seg.id = next;
            seg.file.name = fresh;
            next += 1;
        }
        for seg in &mut manifest.segments {
            seg.summarizes = seg.summarizes.and_then(|old| new_ids.get(&old).copied());
        }
        sync_dir(&self.dir)?;
        manifest.next_segment = next;
        manifest.checkpoint = Some(meta.clone());
        let entry = manifest.store(&self.dir)?;
        remove_strays(&self.dir, &manifest)?;
        let segments = open_segments(&self.dir, &manifest)?;
        self.uuids = segment_uuids(&segments, &manifest.tombstones)?;
        self.users = Arc::new(UserNumbers::rebuild(&segments)?);
        self.active = Buffer::default();
        self.dedup = manifest.dedup.clone();
        self.tombstones = manifest.tombstones.clone();
        self.usage = manifest.usage.clone();
        self.applied_index = meta.last_log_id.map_or(0, |l| l.index);
        *self.published.write().unwrap() = Published { frozen: Vec::new(), segments };
        *p = Persisted { manifest, entry: Some(entry) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::shard::SegmentShard;
    use crate::state_machine::GroupStore;
    use sextant_model::row::{LogRecord, RowBatch};
    use sextant_proto::convert::persist_row::encode_ingest;

    #[test]
    fn checkpoint_installs_on_another_replica() {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = SegmentShard::open(a_dir.path()).unwrap();
        let logs: RowBatch = RowBatch {
            project_id: "p".into(),
            logs: vec![LogRecord { unix_nanos: 5, message: "hello".into(), ..Default::default() }],
            ..Default::default()
        };
        ingest(&mut a, 1, 1, batch("p", vec![span("t", "a", 1), span("t", "b", 2)]));
        ingest(&mut a, 2, 2, encode_ingest(logs));
        checkpoint(&mut a, 2);
        let (meta, files) = a.checkpoint().unwrap();

        let mut b = SegmentShard::open(b_dir.path()).unwrap();
        ingest(&mut b, 1, 7, batch("p", vec![span("t", "stale", 1)]));
        checkpoint(&mut b, 1);
        let staging = b_dir.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        for f in &files {
            std::fs::copy(a_dir.path().join(&f.name), staging.join(&f.name)).unwrap();
        }
        b.install(&meta, &staging, &files).unwrap();
        assert_eq!(ids(&b, "p", "t"), ["a", "b"]);
        // Spans, their summaries and two rollups, logs.
        assert_eq!(b.segment_count(), 5);
        drop(b);
        let b = SegmentShard::open(b_dir.path()).unwrap();
        assert_eq!(ids(&b, "p", "t"), ["a", "b"]);
        assert_eq!(b.checkpoint().unwrap().0.snapshot_id, meta.snapshot_id);
    }

    /// A leader sending its checkpoint while the compactor replaces segments: the files sent
    /// are those of one manifest, listed and opened together (listing first and opening later
    /// failed with "No such file or directory" once a compaction deleted a listed segment).
    #[test]
    fn a_checkpoint_is_opened_from_the_manifest_current_when_it_is_sent() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let s = three_small_segments(dir.path());
        let listed_before = s.checkpoint().unwrap().1;
        let opener = s.checkpoint_opener();
        s.compaction(i64::MAX).expect("three small segments").run().unwrap();
        assert!(listed_before.iter().any(|f| !dir.path().join(&f.name).exists()), "compaction deleted inputs");

        let (meta, mut stream) = opener().unwrap().expect("a checkpoint");
        let mut bytes = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(stream.read_to_end(&mut bytes)).unwrap();
        let other = tempfile::tempdir().unwrap();
        let staging = other.path().join("staging");
        let (_, files) = crate::archive::unpack(&mut bytes.as_slice(), &staging).unwrap();
        let mut b = SegmentShard::open(&other.path().join("b")).unwrap();
        b.install(&meta, &staging, &files).unwrap();
        for t in ["t1", "t2", "t3"] {
            assert_eq!(ids(&b, "p", t), ["a"], "trace {t}");
        }
    }

    #[test]
    fn a_replica_installing_a_snapshot_takes_its_uuids() {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = SegmentShard::open(a_dir.path()).unwrap();
        let batch = analytics("p", vec![ev("a", "u1", 1)], vec![replay("r", 1)]);
        ingest(&mut a, 1, 1, batch.clone());
        checkpoint(&mut a, 1);
        let (meta, files) = a.checkpoint().unwrap();
        let mut b = SegmentShard::open(b_dir.path()).unwrap();
        ingest(&mut b, 1, 7, analytics("p", vec![ev("stale", "u1", 1)], vec![]));
        let staging = b_dir.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        for f in &files {
            std::fs::copy(a_dir.path().join(&f.name), staging.join(&f.name)).unwrap();
        }
        b.install(&meta, &staging, &files).unwrap();
        assert_eq!(ingest(&mut b, 2, 2, batch), rows(0));
        assert_eq!(ingest(&mut b, 3, 3, analytics("p", vec![ev("stale", "u1", 1)], vec![])), rows(1));
    }
}
