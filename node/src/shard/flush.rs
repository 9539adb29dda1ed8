//! Flush: a checkpoint (Raft snapshot) freezes the active buffer and writes it as Parquet
//! segments, then the manifest naming them, then publishes both to readers.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::{Persisted, Published, SegmentShard, Usage};
use crate::durable::sync_dir;
use crate::failpoint;
use crate::segment::compaction::{bucket_over, SMALL_SEGMENT_ROWS};
use crate::segment::file::{self as segment_file, Effort};
use crate::segment::rollup::{rollup_rows, rollup_table, span_hour_rollups};
use crate::segment::summary::summary_rows;
use crate::segment::table::{Row, RowRef};
use crate::segment::user_number::{id_hash, UserNumbers};
use crate::segment::{Buffer, Dedup, Segment, Table};
use crate::state_machine::CheckpointJob;
use crate::types::SnapshotMeta;

/// Flush when the buffer holds this much (as [`Buffer`] estimates it), whatever the Raft
/// snapshot policy says, unless the node's buffer budget flushes it earlier. 256 MiB holds
/// over [`SMALL_SEGMENT_ROWS`] typical spans, so a flush under steady ingest writes final
/// segments instead of drafts that compaction reads and writes again (docs/BENCHMARKS.md,
/// "Flushes at final size").
pub const FLUSH_BYTES: usize = 256 << 20;
/// Flush when the oldest buffered row is this old, to bound replay after a restart.
pub const FLUSH_AGE: Duration = Duration::from_secs(300);

impl SegmentShard {
    /// True when the buffer should be flushed now: by size or age, or because it holds rows of
    /// a deleted project (flushed, they are dropped by the next compaction, and the Raft log
    /// holding them is purged).
    pub fn wants_flush(&self) -> bool {
        !self.active.is_empty()
            && (self.active.bytes >= FLUSH_BYTES
                || self.clock.monotonic().saturating_sub(self.active.since) >= FLUSH_AGE
                || self.active.projects().any(|p| self.expiry.deleted.contains(p)))
    }

    /// Freezes the active buffer (readers still see it) and returns the job writing it out.
    pub(super) fn begin_flush(&mut self, meta: SnapshotMeta) -> CheckpointJob {
        // The next buffer will likely fill like this one: sized up front with room to spare,
        // it is not copied while it grows (a buffer of rows is hundreds of megabytes; reserved
        // and never written, the spare room takes no memory).
        let next = Buffer::with_capacity(self.active.rows.len() * 3 / 2, self.active.trace_count());
        let frozen = Arc::new(std::mem::replace(&mut self.active, next));
        self.published.write().unwrap().frozen.push(frozen.clone());
        let (dir, dedup, tombstones) = (self.dir.clone(), self.dedup.clone(), self.tombstones.clone());
        let (published, persisted) = (self.published.clone(), self.persisted.clone());
        // The counters as of the checkpoint's last entry, like the dedup memory.
        let (usage, users) = (self.usage.clone(), self.users.clone());
        let applied = Applied { dedup, tombstones, usage };
        let (closed, now_s) = (self.closed.clone(), self.clock.now_secs());
        Box::new(move || {
            if *closed.read().unwrap() {
                return Err(io::Error::other("the replica was closed"));
            }
            flush(&dir, &frozen, meta, applied, now_s, &users, &published, &persisted)
        })
    }
}

/// Segment ids a written segment may use: its own and those of its derived segments.
pub(super) const IDS_PER_SEGMENT: u64 = 4;

/// Writes `rows` of one table and hour as segment `id`; a spans segment gets its trace
/// summaries as segment `id + 1`, its rollups per minute as `id + 2` and per hour as `id + 3`,
/// an events or host metrics segment its rollups as `id + 1`. Callers reserve
/// [`IDS_PER_SEGMENT`] ids either way.
/// `rollups`: the rollups of `rows` when already added up (else they are added up here).
/// Events are stored with their user numbers from `users`. Derived segments are written at
/// the same `effort`.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_segment(
    dir: &Path,
    id: u64,
    table: Table,
    hour: i64,
    rows: &[RowRef<'_>],
    batches: &[u128],
    rollups: Option<Vec<(String, Row)>>,
    users: &UserNumbers,
    effort: Effort,
) -> io::Result<Vec<crate::segment::SegmentMeta>> {
    let numbers = (table == Table::Events).then(|| {
        let ids: Vec<u128> =
            rows.iter().map(|r| if let Row::Event(e) = r.row { id_hash(&e.distinct_id) } else { 0 }).collect();
        users.numbers(&ids)
    });
    let mut written = vec![segment_file::write(dir, id, table, hour, rows, batches, numbers.as_deref(), effort)?];
    let mut derived = Vec::new();
    if table == Table::Spans {
        derived.push((Table::TraceSummaries, summary_rows(rows)));
    }
    if let Some(rollup_table) = rollup_table(table) {
        let rollups = rollups.unwrap_or_else(|| rollup_rows(rollup_table, rows));
        let hours = (rollup_table == Table::SpanRollups).then(|| span_hour_rollups(&rollups));
        derived.push((rollup_table, rollups));
        derived.extend(hours.map(|hours| (Table::SpanHourRollups, hours)));
    }
    for (offset, (derived, rows)) in (1..).zip(derived) {
        let refs: Vec<RowRef<'_>> = rows.iter().map(|(p, row)| RowRef::new(p, row, 0)).collect();
        let mut meta = segment_file::write(dir, id + offset, derived, hour, &refs, &[], None, effort)?;
        meta.summarizes = Some(id);
        written.push(meta);
    }
    Ok(written)
}

/// The state a checkpoint records besides its segments.
struct Applied {
    dedup: Dedup,
    tombstones: BTreeSet<u128>,
    usage: Usage,
}

/// Whether `e` says the filesystem (or the user's quota on it) is full.
pub(super) fn is_out_of_space(e: &io::Error) -> bool {
    #[cfg(unix)]
    if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
        return true;
    }
    // Parquet and zstd wrap the I/O error into their own, keeping only its message.
    e.kind() == io::ErrorKind::StorageFull || e.to_string().contains("No space left on device")
}

/// Deletes the files of segments `ids` that a failed flush or compaction wrote (or began to
/// write); no manifest names them.
pub(super) fn remove_unlisted(dir: &Path, ids: std::ops::Range<u64>) {
    for id in ids {
        let _ = std::fs::remove_file(dir.join(segment_file::file_name(id)));
    }
}

/// Pauses between attempts of a flush that found the disk full, doubling up to the last.
const OUT_OF_SPACE_PAUSES: [Duration; 5] = [
    Duration::from_millis(100),
    Duration::from_millis(400),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
];

/// Writes a frozen buffer as segments and a new manifest; then publishes both. A full disk
/// does not fail the checkpoint (which would stop the group's Raft): the attempt's segments
/// are deleted and it is tried again until space returns. Meanwhile the disk guard refuses
/// new writes and reads go on from the frozen buffer.
#[allow(clippy::too_many_arguments)]
fn flush(
    dir: &Path,
    frozen: &Arc<Buffer>,
    meta: SnapshotMeta,
    mut applied: Applied,
    now_s: i64,
    users: &UserNumbers,
    published: &RwLock<Published>,
    persisted: &Mutex<Persisted>,
) -> io::Result<()> {
    let mut pauses = OUT_OF_SPACE_PAUSES.iter().chain(std::iter::repeat(&OUT_OF_SPACE_PAUSES[4]));
    loop {
        match try_flush(dir, frozen, meta.clone(), &mut applied, now_s, users, published, persisted) {
            Err(e) if is_out_of_space(&e) => {
                let pause = pauses.next().copied().unwrap_or(Duration::from_secs(5));
                tracing::warn!(dir = %dir.display(), error = %e, ?pause, "flush found the disk full; retrying");
                std::thread::sleep(pause);
            }
            done => return done,
        }
    }
}

/// `now_s`: when the flush began. A small segment of a bucket not over yet is written as a
/// draft; one of a bucket already over (data of past days) at the final level, since the
/// compactor would rewrite it at once, and again when the next flush brings its siblings.
#[allow(clippy::too_many_arguments)]
fn try_flush(
    dir: &Path,
    frozen: &Arc<Buffer>,
    meta: SnapshotMeta,
    applied: &mut Applied,
    now_s: i64,
    users: &UserNumbers,
    published: &RwLock<Published>,
    persisted: &Mutex<Persisted>,
) -> io::Result<()> {
    let mut p = persisted.lock().unwrap();
    let mut manifest = p.manifest.clone();
    let first = manifest.next_segment;
    let mut written = Vec::new();
    let mut opened = Vec::new();
    let attempt = (|| {
        for (table, hour, rows, batches) in frozen.time_buckets() {
            failpoint::fail(failpoint::FLUSH_OUT_OF_SPACE)?;
            let rollups = rollup_table(table).and_then(|rollups| {
                let from = hour.saturating_mul(1_000_000_000);
                let to = hour.saturating_add(table.bucket_seconds()).saturating_mul(1_000_000_000);
                Some(frozen.running_rollups(rollups)?.rows_of_every_project(rollups, from, to))
            });
            // Compaction merges small segments: they are written fast, and compressed harder then.
            let small = (rows.len() as u64) < SMALL_SEGMENT_ROWS;
            let effort = if small && !bucket_over(hour, table, now_s) { Effort::Draft } else { Effort::Final };
            let id = manifest.next_segment;
            written.extend(write_segment(dir, id, table, hour, &rows, &batches, rollups, users, effort)?);
            manifest.next_segment += IDS_PER_SEGMENT;
        }
        if !written.is_empty() {
            sync_dir(dir)?;
        }
        for meta in &written {
            opened.push(Arc::new(Segment::open(dir, meta.clone())?));
        }
        Ok(())
    })();
    if let Err(e) = attempt {
        // Segment ids are reserved only by a stored manifest: the next attempt reuses them.
        remove_unlisted(dir, first..manifest.next_segment + IDS_PER_SEGMENT);
        return Err(e);
    }
    failpoint::hit(failpoint::FLUSH_BEFORE_MANIFEST);
    manifest.segments.extend(written);
    manifest.checkpoint = Some(meta);
    manifest.dedup = std::mem::take(&mut applied.dedup);
    manifest.tombstones = std::mem::take(&mut applied.tombstones);
    manifest.usage = std::mem::take(&mut applied.usage);
    let entry = match manifest.store(dir) {
        Ok(entry) => entry,
        Err(e) => {
            // The previous manifest stands; give the next attempt its state back.
            applied.dedup = std::mem::take(&mut manifest.dedup);
            applied.tombstones = std::mem::take(&mut manifest.tombstones);
            applied.usage = std::mem::take(&mut manifest.usage);
            drop(p);
            remove_unlisted(dir, first..manifest.next_segment);
            return Err(e);
        }
    };
    failpoint::hit(failpoint::FLUSH_AFTER_MANIFEST);
    let mut pubd = published.write().unwrap();
    pubd.frozen.retain(|b| !Arc::ptr_eq(b, frozen));
    pubd.segments.extend(opened);
    drop(pubd);
    *p = Persisted { manifest, entry: Some(entry) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::testing::*;
    use super::*;
    use crate::segment::compaction::ExpiryPolicy;
    use crate::segment::file::file_name;
    use crate::state_machine::GroupStore;

    /// See `a_compaction_of_a_closed_replica_leaves_its_directory_alone`.
    #[test]
    fn a_flush_of_a_closed_replica_fails_without_writing() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("p", vec![span("t", "a", 1)]));
        checkpoint(&mut s, 1);
        ingest(&mut s, 2, 2, batch("p", vec![span("t", "b", 2)]));
        let job = s.begin_checkpoint(SnapshotMeta { snapshot_id: "c2".into(), ..Default::default() });
        let manifest = std::fs::read(dir.path().join("MANIFEST")).unwrap();
        let segments = s.segment_count();
        s.closer()();
        assert!(job().is_err());
        assert_eq!(std::fs::read(dir.path().join("MANIFEST")).unwrap(), manifest);
        assert_eq!((s.segment_count(), std::fs::read_dir(dir.path()).unwrap().count()), (segments, segments + 1));
    }

    #[test]
    fn crash_before_manifest_leaves_the_previous_state_and_no_strays() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("p", vec![span("t", "a", 1)]));
        checkpoint(&mut s, 1);
        // A flush that wrote its segment but died before the manifest.
        let stray = dir.path().join(file_name(99));
        std::fs::write(&stray, b"half a segment").unwrap();
        std::fs::write(dir.path().join(".MANIFEST.tmp"), b"partial").unwrap();
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert!(!stray.exists());
        assert_eq!(ids(&s, "p", "t"), ["a"]);
    }

    /// A full disk delays a flush, never fails it: the failed attempts leave no segment
    /// behind and the retry lands every row (nextest runs each test in its own process, so
    /// the armed failure is this test's).
    #[test]
    fn a_flush_that_finds_the_disk_full_retries_and_leaves_no_partial_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("p", vec![span("t", "a", 1)]));
        checkpoint(&mut s, 1);
        let files = |d: &Path| {
            let mut v: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect();
            v.sort();
            v
        };
        let before = files(dir.path());
        ingest(&mut s, 2, 2, batch("p", vec![span("t", "b", 2)]));
        failpoint::fail_next(failpoint::FLUSH_OUT_OF_SPACE, 2);
        checkpoint(&mut s, 2);
        assert!(failpoint::fail(failpoint::FLUSH_OUT_OF_SPACE).is_ok(), "both armed failures were hit");
        assert_eq!(ids(&s, "p", "t"), ["a", "b"]);
        let after = files(dir.path());
        assert_eq!(
            after.len(),
            before.len() + 4,
            "a spans, a summaries and two rollups segments, no strays: {before:?} -> {after:?}"
        );
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(ids(&s, "p", "t"), ["a", "b"]);
    }

    #[test]
    fn a_buffer_wants_a_flush_once_its_first_row_reaches_the_flush_age_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let manual = sextant_model::ManualClock::at_millis(0);
        let mut s = SegmentShard::open(dir.path()).unwrap().with_clock(manual.clock());
        manual.advance(FLUSH_AGE);
        assert!(!s.wants_flush(), "an empty buffer has no age");
        ingest(&mut s, 1, 1, batch("p", vec![span("a", "x", 10)]));
        manual.advance(FLUSH_AGE - Duration::from_millis(1));
        ingest(&mut s, 2, 2, batch("p", vec![span("b", "x", 10)]));
        assert!(!s.wants_flush(), "young enough");
        manual.advance(Duration::from_millis(1));
        assert!(s.wants_flush(), "the age is the first row's, not the last one's");
        checkpoint(&mut s, 2);
        assert!(!s.wants_flush());
        ingest(&mut s, 3, 3, batch("p", vec![span("c", "x", 10)]));
        assert!(!s.wants_flush(), "the next buffer's age starts at its own first row");
    }

    #[test]
    fn a_buffer_holding_rows_of_a_deleted_project_wants_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("kept", vec![span("a", "x", 10)]));
        let deleted = |p: &str| ExpiryPolicy { deleted: HashSet::from([p.to_owned()]), ..Default::default() };
        s.set_expiry(deleted("other"));
        assert!(!s.wants_flush(), "small, young, and nothing of a deleted project");
        ingest(&mut s, 2, 2, batch("gone", vec![span("b", "x", 10)]));
        assert!(!s.wants_flush());
        s.set_expiry(deleted("gone"));
        assert!(s.wants_flush());
        checkpoint(&mut s, 2);
        assert!(!s.wants_flush(), "flushed: the compactor takes it from there");
    }
}
