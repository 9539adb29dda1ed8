//! A data shard's store: applied batches go to an in-memory [`Buffer`]; a checkpoint (Raft
//! snapshot) freezes the buffer, writes it as Parquet segments and then the manifest, after
//! which openraft purges the log. Reads merge the buffer, frozen buffers and segments.
//!
//! Crash safety: segments are fsynced before the manifest names them, the manifest is replaced
//! atomically, and the log is purged only after the checkpoint returns. A crash at any point
//! restarts from the last manifest and re-applies the log after it; segment files the
//! manifest does not name are deleted on open.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use arrow_array::RecordBatch;
use sextant_proto::Span;

use crate::archive::{FileEntry, SnapshotStream};
use crate::durable::sync_dir;
use crate::failpoint;
use crate::segment::buffer::decode_batch;
use crate::segment::compaction::{self, merge_rows, RetentionPolicy};
use crate::segment::file::{self as segment_file, file_name};
use crate::segment::summary::summary_rows;
use crate::segment::table::RowRef;
use crate::segment::uuids::{self, Uuids};
use crate::segment::{Buffer, Dedup, Manifest, Row, Scan, Segment, Table};
use crate::state_machine::{CheckpointJob, CheckpointOpener, GroupStore};
use crate::types::{Command, CommandResponse, SnapshotMeta};

/// Flush when the buffer holds this much (as [`Buffer`] estimates it), whatever the Raft
/// snapshot policy says. 96 MiB is 32 MiB of Raft entries: smaller flushes make more small
/// segments for compaction to merge again (flushing at 21 MiB of entries cost 13% of spans
/// ingest throughput, docs/BENCHMARKS.md).
pub const FLUSH_BYTES: usize = 96 << 20;
/// Flush when the oldest buffered row is this old, to bound replay after a restart.
pub const FLUSH_AGE: Duration = Duration::from_secs(300);

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
    published: Arc<RwLock<Published>>,
    persisted: Arc<Mutex<Persisted>>,
    retention: Arc<RetentionPolicy>,
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
    let keep: HashSet<&str> = manifest.segments.iter().map(|s| s.file.name.as_str()).collect();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let stray_segment = name.starts_with("seg-") && !keep.contains(name.as_str());
        if stray_segment || (name.starts_with('.') && name.ends_with(".tmp")) {
            std::fs::remove_file(dir.join(&name))?;
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
        Ok(Self {
            dir: dir.to_owned(),
            active: Buffer::default(),
            dedup: manifest.dedup.clone(),
            tombstones: manifest.tombstones.clone(),
            uuids,
            published: Arc::new(RwLock::new(Published { frozen: Vec::new(), segments })),
            persisted: Arc::new(Mutex::new(Persisted { manifest, entry })),
            retention: Arc::default(),
        })
    }

    /// True when the buffer should be flushed now: by size or age, or because it holds rows of
    /// a deleted project (flushed, they are dropped by the next compaction, and the Raft log
    /// holding them is purged).
    pub fn wants_flush(&self) -> bool {
        !self.active.is_empty()
            && (self.active.bytes >= FLUSH_BYTES
                || self.active.since.elapsed() >= FLUSH_AGE
                || self.active.projects().any(|p| self.retention.deleted.contains(p)))
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

    /// Replaces the retention policy the compactor applies from now on.
    pub fn set_retention(&mut self, policy: RetentionPolicy) {
        self.retention = Arc::new(policy);
    }

    pub fn segment_count(&self) -> usize {
        self.published.read().unwrap().segments.len()
    }

    /// Starts a trace lookup: the in-memory part is done now (under the caller's lock), the
    /// segment part by [`TraceLookup::run`] without any lock held.
    pub fn trace(&self, project: &str, trace_id: &str) -> TraceLookup {
        let tombstones = self.tombstones.clone();
        let hidden = |b: u128| tombstones.contains(&b);
        let mut rows = self.active.trace(project, trace_id, &hidden);
        let published = self.published.read().unwrap();
        for frozen in &published.frozen {
            rows.extend(frozen.trace(project, trace_id, &hidden));
        }
        TraceLookup {
            project: project.to_owned(),
            trace_id: trace_id.to_owned(),
            buffered: rows,
            segments: published.segments.iter().filter(|s| s.meta.table == Table::Spans).cloned().collect(),
            tombstones,
        }
    }

    /// A compaction, if one is due (see [`compaction::next`]). Never waits for a running
    /// flush: it is called with the state machine's lock held.
    pub fn compaction(&self, now_s: i64) -> Option<CompactionJob> {
        // Planned from the published segments (the manifest's lock is held by a running flush,
        // possibly for long); the job re-checks its inputs under that lock before swapping.
        let published = self.published.read().unwrap();
        let metas: Vec<_> = published.segments.iter().map(|s| s.meta.clone()).collect();
        let (picked, drop_only) = match compaction::next(&metas, &self.retention, now_s)? {
            compaction::Plan::Drop(segments) => (segments, true),
            compaction::Plan::Rewrite(segments) => (segments, false),
        };
        let ids: HashSet<u64> = picked.iter().map(|s| s.id).collect();
        let summaries =
            metas.iter().filter(|s| s.summarizes.is_some_and(|id| ids.contains(&id))).map(|s| s.id).collect();
        let inputs: Vec<Arc<Segment>> =
            published.segments.iter().filter(|s| ids.contains(&s.meta.id)).cloned().collect();
        (inputs.len() == ids.len()).then(|| CompactionJob {
            dir: self.dir.clone(),
            drop_only,
            retention: self.retention.clone(),
            inputs,
            summaries,
            tombstones: self.tombstones.clone(),
            published: self.published.clone(),
            persisted: self.persisted.clone(),
        })
    }

    /// Starts a scan: buffered rows are selected now (under the caller's lock), segments by
    /// [`ScanJob::run`] without any lock held.
    pub fn scan(&self, scan: Scan) -> ScanJob {
        let tombstones = self.tombstones.clone();
        let hidden = |b: u128| tombstones.contains(&b);
        let mut buffered = self.active.scan_rows(&scan, &hidden);
        let published = self.published.read().unwrap();
        for frozen in &published.frozen {
            buffered.extend(frozen.scan_rows(&scan, &hidden));
        }
        let segments = published
            .segments
            .iter()
            .filter(|s| scan.wants_segment(s.meta.table, s.meta.min_ns, s.meta.max_ns))
            .cloned()
            .collect();
        drop(published);
        ScanJob { scan, buffered, segments, tombstones }
    }

    fn ingest(&mut self, batch_id: u128, payload: Vec<u8>) -> CommandResponse {
        if self.dedup.is_aborted(batch_id) {
            return CommandResponse::Refused;
        }
        if self.dedup.is_applied(batch_id) {
            return CommandResponse::Ingested { duplicate: true, rows: 0 };
        }
        let len = payload.len();
        match decode_batch(payload) {
            Ok(mut batch) => {
                self.drop_stored_uuids(&mut batch);
                self.dedup.record_applied(batch_id);
                CommandResponse::Ingested { duplicate: false, rows: self.active.push(batch_id, batch, len) }
            }
            Err(e) => CommandResponse::Rejected(format!("undecodable batch: {e}")),
        }
    }

    /// Drops the analytics rows whose uuid the shard holds (a retried batch, or a repeat
    /// within this one) and takes the uuids of the others.
    fn drop_stored_uuids(&mut self, batch: &mut sextant_proto::ShardRows) {
        let project = &batch.project_id;
        let uuids = &mut self.uuids;
        let mut new = |table: Table, uuid: &str| uuid.is_empty() || uuids.insert(uuids::key(table, project, uuid));
        batch.events.retain(|e| new(Table::Events, &e.uuid));
        batch.replay_events.retain(|r| new(Table::ReplayEvents, &r.uuid));
    }

    /// Gives back the uuids of an aborted batch's rows, wherever they are, so that a retry of
    /// it is stored. Rare (a commit that failed on another shard): segments are read here.
    fn forget_uuids(&mut self, batch_id: u128) {
        let mut keys = Vec::new();
        let mut from_buffer = |b: &Buffer| {
            let rows = b.rows.iter().filter(|r| r.batch_id == batch_id);
            keys.extend(rows.filter_map(|r| uuids::row_key(&r.project, &r.row)));
        };
        from_buffer(&self.active);
        let published = self.published.read().unwrap();
        published.frozen.iter().for_each(|b| from_buffer(b));
        let analytics = |s: &&Arc<Segment>| matches!(s.meta.table, Table::Events | Table::ReplayEvents);
        for seg in published.segments.iter().filter(analytics).filter(|s| s.batches.contains(&batch_id)) {
            if let Err(e) = seg.uuid_keys(&|b| b != batch_id, |k| keys.push(k)) {
                // The same on every replica only if reading works: a replica that cannot read
                // its segments has worse problems, and a restart rebuilds the set.
                tracing::error!(error = %e, segment = seg.meta.id, "reading the uuids of an aborted batch");
            }
        }
        drop(published);
        keys.into_iter().for_each(|k| self.uuids.remove(k));
    }

    fn abort(&mut self, batch_id: u128) -> CommandResponse {
        if !self.dedup.is_aborted(batch_id) && self.dedup.is_applied(batch_id) {
            self.forget_uuids(batch_id);
        }
        self.dedup.record_aborted(batch_id);
        if self.active.contains(batch_id) {
            self.active.aborted.insert(batch_id);
        } else if self.dedup.is_applied(batch_id) {
            // Already frozen or flushed: hide its rows wherever they are.
            self.tombstones.insert(batch_id);
        }
        CommandResponse::Aborted
    }
}

/// The part of a trace lookup that reads segments.
pub struct TraceLookup {
    project: String,
    trace_id: String,
    buffered: Vec<Row>,
    segments: Vec<Arc<Segment>>,
    tombstones: BTreeSet<u128>,
}

impl TraceLookup {
    /// The trace's spans ordered by start time; a span stored twice (a client retrying a
    /// batch) is returned once.
    pub fn run(self) -> io::Result<Vec<Span>> {
        let mut rows = self.buffered;
        for segment in &self.segments {
            for (row, ordinal) in segment.trace(&self.project, &self.trace_id)? {
                let batch = segment.batches.get(ordinal as usize).copied();
                if !batch.is_some_and(|b| self.tombstones.contains(&b)) {
                    rows.push(row);
                }
            }
        }
        let mut seen = HashSet::new();
        let mut spans: Vec<Span> = rows
            .into_iter()
            .filter_map(|r| match r {
                Row::Span(s) => Some(s),
                _ => None,
            })
            .filter(|s| seen.insert(s.span_id.clone()))
            .map(Span::from)
            .collect();
        spans.sort_by(|a, b| (a.start_unix_nanos, &a.span_id).cmp(&(b.start_unix_nanos, &b.span_id)));
        Ok(spans)
    }
}

/// A merge of small segments, prepared by [`SegmentShard::compaction`] and run off the
/// apply path. Readers keep using the inputs until the new manifest is published.
pub struct CompactionJob {
    dir: PathBuf,
    /// Every row of the inputs is expired: delete them without reading.
    drop_only: bool,
    retention: Arc<RetentionPolicy>,
    inputs: Vec<Arc<Segment>>,
    /// Trace-summary segments of spans inputs: replaced along with them.
    summaries: Vec<u64>,
    tombstones: BTreeSet<u128>,
    published: Arc<RwLock<Published>>,
    persisted: Arc<Mutex<Persisted>>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// `inputs` segments became `outputs` (0 when every row was dropped).
    Merged { inputs: usize, outputs: usize, rows_in: u64, rows_out: u64 },
    /// A snapshot install replaced the inputs meanwhile; nothing changed.
    Superseded,
}

impl CompactionJob {
    pub fn run(self) -> io::Result<CompactionOutcome> {
        let mut rows = Vec::new();
        for seg in self.inputs.iter().filter(|_| !self.drop_only) {
            for (project, row, ordinal) in seg.read(None)? {
                let batch = seg.batches.get(ordinal as usize).copied().unwrap_or_default();
                rows.push((project, row, batch));
            }
        }
        let rows_in = rows.len() as u64;
        let merged = merge_rows(rows, &|b| self.tombstones.contains(&b), &self.retention);
        let mut batches = Vec::new();
        let mut ordinals: HashMap<u128, u32> = HashMap::new();
        let refs: Vec<RowRef<'_>> = merged
            .iter()
            .map(|(project, row, b)| {
                let batch = *ordinals.entry(*b).or_insert_with(|| {
                    batches.push(*b);
                    (batches.len() - 1) as u32
                });
                RowRef { project, row, batch }
            })
            .collect();
        let (table, hour) = (self.inputs[0].meta.table, self.inputs[0].meta.hour);
        let first_id = {
            // Reserve ids; the next manifest written (by a flush or by us) records them.
            let mut p = self.persisted.lock().unwrap();
            let id = p.manifest.next_segment;
            p.manifest.next_segment += 2;
            id
        };
        let mut written = Vec::new();
        if !refs.is_empty() {
            written = write_segment(&self.dir, first_id, table, hour, &refs, &batches)?;
            sync_dir(&self.dir)?;
        }
        let opened = written
            .iter()
            .map(|m| Segment::open(&self.dir, m.clone()).map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;

        failpoint::hit(failpoint::COMPACTION_BEFORE_MANIFEST);
        let mut p = self.persisted.lock().unwrap();
        let mut gone: HashSet<u64> = self.inputs.iter().map(|s| s.meta.id).collect();
        gone.extend(&self.summaries);
        let present = p.manifest.segments.iter().filter(|s| gone.contains(&s.id)).count();
        if present != gone.len() {
            drop(p);
            for m in &written {
                let _ = std::fs::remove_file(self.dir.join(&m.file.name));
            }
            return Ok(CompactionOutcome::Superseded);
        }
        let mut manifest = p.manifest.clone();
        let removed: Vec<String> =
            manifest.segments.iter().filter(|s| gone.contains(&s.id)).map(|s| s.file.name.clone()).collect();
        manifest.segments.retain(|s| !gone.contains(&s.id));
        manifest.segments.extend(written.iter().cloned());
        let entry = manifest.store(&self.dir)?;
        {
            let mut pubd = self.published.write().unwrap();
            pubd.segments.retain(|s| !gone.contains(&s.meta.id));
            pubd.segments.extend(opened);
        }
        *p = Persisted { manifest, entry: Some(entry) };
        drop(p);
        failpoint::hit(failpoint::COMPACTION_AFTER_MANIFEST);
        // Open readers keep their file handles; new ones see the new manifest.
        for name in removed {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        Ok(CompactionOutcome::Merged {
            inputs: self.inputs.len(),
            outputs: written.iter().filter(|m| m.table != Table::TraceSummaries).count(),
            rows_in,
            rows_out: refs.len() as u64,
        })
    }
}

/// The part of a scan that reads segments.
pub struct ScanJob {
    scan: Scan,
    buffered: Vec<RecordBatch>,
    segments: Vec<Arc<Segment>>,
    tombstones: BTreeSet<u128>,
}

impl ScanJob {
    /// The matching rows: buffered ones first, then segment by segment (no global order).
    pub fn run(self) -> io::Result<Vec<RecordBatch>> {
        let mut out = self.buffered;
        let hidden = |b: u128| self.tombstones.contains(&b);
        for segment in &self.segments {
            out.extend(segment.scan(&self.scan, &hidden)?);
        }
        Ok(out)
    }

    /// At most how many rows the scan hands out (its segments may hold other projects' and
    /// other times' rows too): for sizing a reader's tables once instead of growing them.
    pub fn max_rows(&self) -> u64 {
        let buffered: usize = self.buffered.iter().map(|rb| rb.num_rows()).sum();
        buffered as u64 + self.segments.iter().map(|s| s.meta.rows).sum::<u64>()
    }

    /// Like [`run`](Self::run), handing each batch to `f` as soon as it is read, so a query
    /// over its row budget stops early instead of holding every batch.
    pub fn run_each<E: From<io::Error>>(self, mut f: impl FnMut(RecordBatch) -> Result<(), E>) -> Result<(), E> {
        let hidden = |b: u128| self.tombstones.contains(&b);
        for rb in self.buffered {
            f(rb)?;
        }
        for segment in &self.segments {
            for rb in segment.scan(&self.scan, &hidden)? {
                f(rb)?;
            }
        }
        Ok(())
    }

    /// Like [`run_each`](Self::run_each) for "the newest rows first, up to a page": the
    /// buffered rows, then the candidate row groups of every segment, latest-ending first.
    /// Before each row group, `enough(t)` is asked with the latest time it can hold: true ends
    /// the scan (the caller already has a page of rows newer than `t`, and every row group left
    /// ends at or before `t`).
    pub fn run_newest_first<E: From<io::Error>>(
        self,
        mut enough: impl FnMut(i64) -> bool,
        mut f: impl FnMut(RecordBatch) -> Result<(), E>,
    ) -> Result<(), E> {
        let hidden = |b: u128| self.tombstones.contains(&b);
        for rb in self.buffered {
            f(rb)?;
        }
        let mut groups: Vec<(i64, usize, usize)> = Vec::new();
        for (s, segment) in self.segments.iter().enumerate() {
            groups.extend(segment.row_groups_by_time(&self.scan).into_iter().map(|(rg, max)| (max, s, rg)));
        }
        groups.sort_unstable_by(|a, b| b.cmp(a));
        for (max, s, rg) in groups {
            if enough(max) {
                break;
            }
            for rb in self.segments[s].scan_row_groups(&self.scan, vec![rg], &hidden)? {
                f(rb)?;
            }
        }
        Ok(())
    }
}

/// Writes `rows` of one table and hour as segment `id`; a spans segment gets its trace
/// summaries as segment `id + 1`. Callers reserve two ids either way.
fn write_segment(
    dir: &Path,
    id: u64,
    table: Table,
    hour: i64,
    rows: &[RowRef<'_>],
    batches: &[u128],
) -> io::Result<Vec<crate::segment::SegmentMeta>> {
    let mut written = vec![segment_file::write(dir, id, table, hour, rows, batches)?];
    if table == Table::Spans {
        let summaries = summary_rows(rows);
        let refs: Vec<RowRef<'_>> = summaries.iter().map(|(p, row)| RowRef { project: p, row, batch: 0 }).collect();
        let mut meta = segment_file::write(dir, id + 1, Table::TraceSummaries, hour, &refs, &[])?;
        meta.summarizes = Some(id);
        written.push(meta);
    }
    Ok(written)
}

/// Writes a frozen buffer as segments and a new manifest; then publishes both.
fn flush(
    dir: &Path,
    frozen: &Arc<Buffer>,
    meta: SnapshotMeta,
    dedup: Dedup,
    tombstones: BTreeSet<u128>,
    published: &RwLock<Published>,
    persisted: &Mutex<Persisted>,
) -> io::Result<()> {
    let mut p = persisted.lock().unwrap();
    let mut manifest = p.manifest.clone();
    let mut written = Vec::new();
    for (table, hour, rows, batches) in frozen.partitions() {
        written.extend(write_segment(dir, manifest.next_segment, table, hour, &rows, &batches)?);
        manifest.next_segment += 2;
    }
    if !written.is_empty() {
        sync_dir(dir)?;
    }
    let mut opened = Vec::with_capacity(written.len());
    for meta in &written {
        opened.push(Arc::new(Segment::open(dir, meta.clone())?));
    }
    failpoint::hit(failpoint::FLUSH_BEFORE_MANIFEST);
    manifest.segments.extend(written);
    manifest.checkpoint = Some(meta);
    manifest.dedup = dedup;
    manifest.tombstones = tombstones;
    let entry = manifest.store(dir)?;
    failpoint::hit(failpoint::FLUSH_AFTER_MANIFEST);
    let mut pubd = published.write().unwrap();
    pubd.frozen.retain(|b| !Arc::ptr_eq(b, frozen));
    pubd.segments.extend(opened);
    drop(pubd);
    *p = Persisted { manifest, entry: Some(entry) };
    Ok(())
}

impl GroupStore for SegmentShard {
    fn apply(&mut self, _index: u64, command: Command) -> CommandResponse {
        match command {
            Command::Ingest { batch_id, payload } => self.ingest(batch_id, payload),
            Command::Abort { batch_id } => self.abort(batch_id),
            Command::Meta(_) => CommandResponse::Rejected("meta command sent to a data shard".into()),
        }
    }

    fn begin_checkpoint(&mut self, meta: SnapshotMeta) -> CheckpointJob {
        // The next buffer will likely fill like this one: sized up front, it is not copied
        // while it grows (a buffer of spans is tens of megabytes).
        let next = Buffer::with_capacity(self.active.rows.len(), self.active.trace_count());
        let frozen = Arc::new(std::mem::replace(&mut self.active, next));
        self.published.write().unwrap().frozen.push(frozen.clone());
        let (dir, dedup, tombstones) = (self.dir.clone(), self.dedup.clone(), self.tombstones.clone());
        let (published, persisted) = (self.published.clone(), self.persisted.clone());
        Box::new(move || flush(&dir, &frozen, meta, dedup, tombstones, &published, &persisted))
    }

    fn checkpoint(&self) -> Option<(SnapshotMeta, Vec<FileEntry>)> {
        self.persisted.lock().unwrap().checkpoint()
    }

    fn checkpoint_opener(&self) -> CheckpointOpener {
        let (dir, persisted) = (self.dir.clone(), self.persisted.clone());
        Box::new(move || {
            // Packed with the lock held: see `GroupStore::checkpoint_opener`.
            let p = persisted.lock().unwrap();
            let Some((meta, files)) = p.checkpoint() else { return Ok(None) };
            let stream = SnapshotStream::pack(&meta, &dir, &files)?;
            Ok(Some((meta, stream)))
        })
    }

    fn install(&mut self, meta: &SnapshotMeta, staging: &Path, files: &[FileEntry]) -> io::Result<()> {
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
        self.active = Buffer::default();
        self.dedup = manifest.dedup.clone();
        self.tombstones = manifest.tombstones.clone();
        *self.published.write().unwrap() = Published { frozen: Vec::new(), segments };
        *p = Persisted { manifest, entry: Some(entry) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use sextant_proto::{LogRecord, ShardBatch};

    fn span(trace: &str, id: &str, start: i64) -> Span {
        Span {
            trace_id: trace.into(),
            span_id: id.into(),
            service_name: "api".into(),
            operation: "GET /".into(),
            start_unix_nanos: start,
            duration_nanos: 1000,
            ..Default::default()
        }
    }

    fn batch(project: &str, spans: Vec<Span>) -> Vec<u8> {
        ShardBatch { project_id: project.into(), spans, ..Default::default() }.encode_to_vec()
    }

    fn ingest(s: &mut SegmentShard, index: u64, batch_id: u128, payload: Vec<u8>) -> CommandResponse {
        s.apply(index, Command::Ingest { batch_id, payload })
    }

    use crate::shard::CompactionOutcome;

    fn ids(s: &SegmentShard, project: &str, trace: &str) -> Vec<String> {
        s.trace(project, trace).run().unwrap().into_iter().map(|s| s.span_id).collect()
    }

    fn checkpoint(s: &mut SegmentShard, index: u64) {
        let meta = SnapshotMeta { snapshot_id: format!("c{index}"), ..Default::default() };
        s.begin_checkpoint(meta)().unwrap();
    }

    const HOUR: i64 = 3_600_000_000_000;

    #[test]
    fn rows_survive_flush_and_reopen_and_retries_apply_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let b1 = batch("p", vec![span("t1", "a", 10), span("t1", "b", 5), span("t2", "c", HOUR * 2)]);
        assert_eq!(ingest(&mut s, 1, 1, b1.clone()), CommandResponse::Ingested { duplicate: false, rows: 3 });
        assert_eq!(ingest(&mut s, 2, 1, b1), CommandResponse::Ingested { duplicate: true, rows: 0 });
        assert_eq!(ids(&s, "p", "t1"), ["b", "a"]);
        checkpoint(&mut s, 2);
        // Two hour partitions: two spans segments, each with its trace summaries segment.
        assert_eq!(s.segment_count(), 4);
        assert_eq!(ids(&s, "p", "t1"), ["b", "a"]);
        assert!(ids(&s, "other", "t1").is_empty());

        // A later batch adds to the same trace; the same span sent again is returned once.
        ingest(&mut s, 3, 2, batch("p", vec![span("t1", "d", 20), span("t1", "a", 10)]));
        assert_eq!(ids(&s, "p", "t1"), ["b", "a", "d"]);
        checkpoint(&mut s, 3);
        drop(s);

        let mut s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(ids(&s, "p", "t1"), ["b", "a", "d"]);
        assert_eq!(ids(&s, "p", "t2"), ["c"]);
        // The dedup memory is part of the checkpoint.
        assert_eq!(
            ingest(&mut s, 4, 2, batch("p", vec![span("t1", "x", 1)])),
            CommandResponse::Ingested { duplicate: true, rows: 0 }
        );
    }

    /// Attributes are kept as encoded; one encoded unlike prost would is stored in prost's
    /// form (reads as the same attribute), and a batch with an attribute that is no KeyValue
    /// is rejected whole, leaving nothing behind (the batch id is not taken either).
    #[test]
    fn attributes_are_stored_in_prosts_form_and_undecodable_ones_reject_the_batch() {
        use bytes::Bytes;
        use sextant_proto::{any_value, AnyValue, KeyValue, ShardRows};
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let kv = KeyValue { key: "k".into(), value: Some(AnyValue { value: Some(any_value::Value::IntValue(5)) }) };
        // The value field before the key field.
        let reordered = Bytes::from([&kv.encode_to_vec()[3..], b"\x0a\x01k"].concat());
        let with = |attributes: Vec<Bytes>| {
            let mut rows = ShardRows::from(ShardBatch {
                project_id: "p".into(),
                spans: vec![span("t", "a", 1)],
                ..Default::default()
            });
            rows.spans[0].attributes = attributes;
            rows.encode_to_vec()
        };
        let garbage = with(vec![kv.encode_to_vec().into(), Bytes::from_static(b"\x0a\x09k")]);
        assert!(matches!(ingest(&mut s, 1, 1, garbage), CommandResponse::Rejected(_)));
        assert!(ids(&s, "p", "t").is_empty());
        assert_eq!(
            ingest(&mut s, 2, 1, with(vec![reordered])),
            CommandResponse::Ingested { duplicate: false, rows: 1 }
        );
        let stored = |s: &SegmentShard| match &scan_all(s, Table::Spans, "p", Default::default())[..] {
            [Row::Span(row)] => row.attributes.clone(),
            other => panic!("one span expected: {other:?}"),
        };
        assert_eq!(stored(&s), [kv.encode_to_vec()]);
        assert_eq!(s.trace("p", "t").run().unwrap()[0].attributes, [kv.clone()]);
        checkpoint(&mut s, 2);
        assert_eq!(stored(&s), [kv.encode_to_vec()]);
    }

    #[test]
    fn aborts_hide_rows_in_buffer_and_in_segments_and_refuse_late_arrivals() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("p", vec![span("t", "flushed", 1)]));
        checkpoint(&mut s, 1);
        ingest(&mut s, 2, 2, batch("p", vec![span("t", "buffered", 2)]));
        ingest(&mut s, 3, 3, batch("p", vec![span("t", "kept", 3)]));
        s.apply(4, Command::Abort { batch_id: 1 });
        s.apply(5, Command::Abort { batch_id: 2 });
        assert_eq!(ids(&s, "p", "t"), ["kept"]);
        s.apply(6, Command::Abort { batch_id: 9 });
        assert_eq!(ingest(&mut s, 7, 9, batch("p", vec![span("t", "late", 4)])), CommandResponse::Refused);
        checkpoint(&mut s, 7);
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(ids(&s, "p", "t"), ["kept"]);
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

    #[test]
    fn checkpoint_installs_on_another_replica() {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = SegmentShard::open(a_dir.path()).unwrap();
        let logs = ShardBatch {
            project_id: "p".into(),
            logs: vec![LogRecord { unix_nanos: 5, message: "hello".into(), ..Default::default() }],
            ..Default::default()
        };
        ingest(&mut a, 1, 1, batch("p", vec![span("t", "a", 1), span("t", "b", 2)]));
        ingest(&mut a, 2, 2, logs.encode_to_vec());
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
        // Spans, their summaries, logs.
        assert_eq!(b.segment_count(), 3);
        drop(b);
        let b = SegmentShard::open(b_dir.path()).unwrap();
        assert_eq!(ids(&b, "p", "t"), ["a", "b"]);
        assert_eq!(b.checkpoint().unwrap().0.snapshot_id, meta.snapshot_id);
    }

    fn scan_all(s: &SegmentShard, table: Table, project: &str, filter: crate::segment::Filter) -> Vec<Row> {
        let scan = Scan {
            table,
            project: project.into(),
            from_ns: i64::MIN,
            to_ns: i64::MAX,
            filter,
            columns: vec![],
            dictionaries: vec![],
        };
        let mut rows: Vec<Row> = s
            .scan(scan)
            .run()
            .unwrap()
            .iter()
            .flat_map(|rb| crate::segment::table::from_record_batch(table, rb))
            .map(|(_, row, _)| row)
            .collect();
        rows.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        rows
    }

    fn log(service: &str, level: i32, message: &str, t: i64) -> LogRecord {
        LogRecord { unix_nanos: t, level, service: service.into(), message: message.into(), ..Default::default() }
    }

    #[test]
    fn scans_see_the_same_rows_in_the_buffer_and_in_segments() {
        use crate::segment::Filter;
        use sextant_model::text::LogQuery;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let mut root = span("t1", "a", 10);
        root.service_name = "web".into();
        let mut child = span("t1", "b", 20);
        child.parent_span_id = "a".into();
        child.status = sextant_proto::SpanStatus::Error as i32;
        ingest(&mut s, 1, 1, batch("p", vec![root, child, span("t2", "c", HOUR)]));
        ingest(&mut s, 2, 2, batch("other", vec![span("t9", "z", 10)]));
        let logs = ShardBatch {
            project_id: "p".into(),
            logs: vec![
                log("api", 5, "Payment declined for order 42", 1),
                log("api", 3, "payment accepted", 2),
                log("db", 5, "connection reset by peer", 3),
            ],
            ..Default::default()
        };
        ingest(&mut s, 3, 3, logs.encode_to_vec());

        let q = |text: &str| Filter { log_query: Some(LogQuery::parse(text).unwrap()), ..Default::default() };
        let probes = |s: &SegmentShard| {
            (
                scan_all(s, Table::Spans, "p", Filter::default()).len(),
                scan_all(s, Table::Spans, "p", Filter { errors_only: true, ..Default::default() }).len(),
                scan_all(s, Table::Spans, "p", Filter { services: vec!["web".into()], ..Default::default() }).len(),
                scan_all(s, Table::TraceSummaries, "p", Filter::default()),
                scan_all(s, Table::Logs, "p", q("payment")).len(),
                scan_all(s, Table::Logs, "p", q("payment -declined")).len(),
                scan_all(s, Table::Logs, "p", q(r#""reset by peer" service:db"#)).len(),
                scan_all(s, Table::Logs, "p", Filter { levels: vec![5], ..Default::default() }).len(),
                scan_all(s, Table::Logs, "other", Filter::default()).len(),
            )
        };
        let before = probes(&s);
        assert_eq!(
            (before.0, before.1, before.2, before.4, before.5, before.6, before.7, before.8),
            (3, 1, 1, 2, 1, 1, 2, 0)
        );
        let Row::TraceSummary(t1) = &before.3[0] else { panic!("summary expected") };
        assert_eq!(
            (t1.trace_id.as_str(), t1.span_count, t1.error_count, t1.root_service.as_str()),
            ("t1", 2, 1, "web")
        );
        assert_eq!(before.3.len(), 2);

        checkpoint(&mut s, 3);
        assert_eq!(probes(&s), before);
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(probes(&s), before);
    }

    #[test]
    fn log_search_reads_only_row_groups_holding_every_term() {
        use crate::segment::Filter;
        use sextant_model::text::LogQuery;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        // 20 000 lines sorted by time: three row groups; "needle" only in the last one.
        let logs: Vec<LogRecord> =
            (0..20_000).map(|i| log("api", 3, if i == 19_000 { "found the needle" } else { "hay hay" }, i)).collect();
        ingest(&mut s, 1, 1, ShardBatch { project_id: "p".into(), logs, ..Default::default() }.encode_to_vec());
        checkpoint(&mut s, 1);
        let scan = |text: &str| Scan {
            table: Table::Logs,
            project: "p".into(),
            from_ns: 0,
            to_ns: i64::MAX,
            filter: Filter { log_query: Some(LogQuery::parse(text).unwrap()), ..Default::default() },
            columns: vec!["message".into()],
            dictionaries: vec![],
        };
        let published = s.published.read().unwrap();
        let segment = published.segments.iter().find(|g| g.meta.table == Table::Logs).unwrap();
        assert_eq!(segment.candidate_row_groups(&scan("needle")), [2]);
        assert_eq!(segment.candidate_row_groups(&scan("needle found")), [2]);
        assert!(segment.candidate_row_groups(&scan("needle absent")).is_empty());
        assert_eq!(segment.candidate_row_groups(&scan("hay")), [0, 1, 2]);
        drop(published);
        let hits = s.scan(scan("needle")).run().unwrap();
        assert_eq!(hits.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert_eq!(hits[0].num_columns(), 1, "only the projected column comes back");
    }

    #[test]
    fn compaction_merges_small_segments_dropping_aborted_rows_and_repeated_spans() {
        use crate::segment::Filter;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("p", vec![span("t1", "a", 10), span("t1", "b", 11)]));
        checkpoint(&mut s, 1);
        // A client retry with a new batch id after the router lost its abort: same spans.
        ingest(&mut s, 2, 2, batch("p", vec![span("t1", "b", 11), span("t2", "c", 12)]));
        checkpoint(&mut s, 2);
        ingest(&mut s, 3, 3, batch("p", vec![span("t3", "gone", 13)]));
        checkpoint(&mut s, 3);
        s.apply(4, Command::Abort { batch_id: 3 });
        assert_eq!(s.segment_count(), 6);
        assert!(s.compaction(0).is_none(), "the hour is not over and only three segments exist");

        let job = s.compaction(i64::MAX).expect("three small segments of a past hour");
        assert_eq!(job.run().unwrap(), CompactionOutcome::Merged { inputs: 3, outputs: 1, rows_in: 5, rows_out: 3 });
        assert_eq!(s.segment_count(), 2, "one spans segment and its summaries");
        let spans = scan_all(&s, Table::Spans, "p", Filter::default());
        assert_eq!(spans.len(), 3);
        let summaries = scan_all(&s, Table::TraceSummaries, "p", Filter::default());
        let counts: Vec<(String, u32)> = summaries
            .iter()
            .map(|r| match r {
                Row::TraceSummary(t) => (t.trace_id.clone(), t.span_count),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(counts, [("t1".to_owned(), 2), ("t2".to_owned(), 1)]);
        // Only the manifest's files remain, and they reopen to the same rows.
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("seg-"));
        assert_eq!(files.count(), 2);
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(scan_all(&s, Table::Spans, "p", Filter::default()), spans);
    }

    /// Summaries store a trace's end as its duration; readers get times, whether they ask for
    /// the end alone or with the start, and the minimum-duration filter sees durations.
    #[test]
    fn trace_ends_read_back_as_times() {
        use crate::segment::Filter;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let mut long = span("slow", "a", 5_000);
        long.duration_nanos = 7_000;
        ingest(&mut s, 1, 1, batch("p", vec![span("fast", "a", 1_000), long]));
        checkpoint(&mut s, 1);
        let ends = |columns: &[&str], min_duration_ns: Option<i64>| -> Vec<i64> {
            let scan = Scan {
                table: Table::TraceSummaries,
                project: "p".into(),
                from_ns: i64::MIN,
                to_ns: i64::MAX,
                filter: Filter { min_duration_ns, ..Filter::default() },
                columns: columns.iter().map(|c| c.to_string()).collect(),
                dictionaries: vec![],
            };
            let batches = s.scan(scan).run().unwrap();
            let mut ends: Vec<i64> =
                batches.iter().flat_map(|rb| crate::segment::table::Cols(rb).i64("end_ns").values().to_vec()).collect();
            ends.sort();
            ends
        };
        assert_eq!(ends(&["end_ns"], None), [2_000, 12_000]);
        assert_eq!(ends(&["start_ns", "end_ns"], None), [2_000, 12_000]);
        assert_eq!(ends(&["end_ns"], Some(5_000)), [12_000]);
    }

    /// A leader sending its checkpoint while the compactor replaces segments: the files sent
    /// are those of one manifest, listed and opened together (listing first and opening later
    /// failed with "No such file or directory" once a compaction deleted a listed segment).
    #[test]
    fn a_checkpoint_is_opened_from_the_manifest_current_when_it_is_sent() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        for i in 1..=3u64 {
            ingest(&mut s, i, i as u128, batch("p", vec![span(&format!("t{i}"), "a", i as i64)]));
            checkpoint(&mut s, i);
        }
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
    fn retention_drops_expired_rows_of_each_project_and_deleted_projects_entirely() {
        use crate::segment::Filter;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("short", vec![span("a", "old", 10), span("b", "new", HOUR * 5)]));
        ingest(&mut s, 2, 2, batch("long", vec![span("c", "old", 10)]));
        ingest(&mut s, 3, 3, batch("gone", vec![span("d", "x", HOUR * 5)]));
        checkpoint(&mut s, 3);
        let mut policy = RetentionPolicy::default();
        policy.cutoffs.insert("short".into(), HOUR);
        policy.deleted.insert("gone".into());
        s.set_retention(policy);
        while let Some(job) = s.compaction(0) {
            job.run().unwrap();
        }
        let spans = |p: &str| scan_all(&s, Table::Spans, p, Filter::default()).len();
        assert_eq!((spans("short"), spans("long"), spans("gone")), (1, 1, 0));
        assert_eq!(scan_all(&s, Table::TraceSummaries, "short", Filter::default()).len(), 1);
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        let spans = |p: &str| scan_all(&s, Table::Spans, p, Filter::default()).len();
        assert_eq!((spans("short"), spans("long"), spans("gone")), (1, 1, 0));
    }

    #[test]
    fn a_buffer_holding_rows_of_a_deleted_project_wants_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("kept", vec![span("a", "x", 10)]));
        let deleted = |p: &str| RetentionPolicy { deleted: HashSet::from([p.to_owned()]), ..Default::default() };
        s.set_retention(deleted("other"));
        assert!(!s.wants_flush(), "small, young, and nothing of a deleted project");
        ingest(&mut s, 2, 2, batch("gone", vec![span("b", "x", 10)]));
        assert!(!s.wants_flush());
        s.set_retention(deleted("gone"));
        assert!(s.wants_flush());
        checkpoint(&mut s, 2);
        assert!(!s.wants_flush(), "flushed: the compactor takes it from there");
    }

    fn ev(uuid: &str, user: &str, t: i64) -> sextant_proto::Event {
        sextant_proto::Event {
            uuid: uuid.into(),
            event: "buy".into(),
            distinct_id: user.into(),
            unix_nanos: t,
            properties_json: "{}".into(),
        }
    }

    fn replay(uuid: &str, t: i64) -> sextant_proto::ReplayEvent {
        sextant_proto::ReplayEvent {
            session_id: "s1".into(),
            unix_nanos: t,
            event_type: 3,
            data_json: "{}".into(),
            uuid: uuid.into(),
            ..Default::default()
        }
    }

    fn analytics(project: &str, events: Vec<sextant_proto::Event>, replays: Vec<sextant_proto::ReplayEvent>) -> Vec<u8> {
        ShardBatch { project_id: project.into(), events, replay_events: replays, ..Default::default() }.encode_to_vec()
    }

    /// The uuids of the stored events (or replay events) of `project`, sorted, repeats kept.
    fn stored(s: &SegmentShard, table: Table, project: &str) -> Vec<String> {
        let mut out: Vec<String> = scan_all(s, table, project, Default::default())
            .into_iter()
            .map(|r| match r {
                Row::Event(e) => e.uuid,
                Row::Replay(r) => r.uuid,
                other => panic!("not an analytics row: {other:?}"),
            })
            .collect();
        out.sort();
        out
    }

    fn rows(n: u64) -> CommandResponse {
        CommandResponse::Ingested { duplicate: false, rows: n }
    }

    #[test]
    fn an_analytics_uuid_is_stored_once_within_a_batch_across_batches_and_across_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        // A repeat within the batch; events without a uuid are all kept.
        let first = analytics("p", vec![ev("a", "u1", 1), ev("a", "u1", 1), ev("b", "u2", 2), ev("", "u3", 3), ev("", "u3", 3)], vec![replay("r1", 1), replay("r1", 1)]);
        assert_eq!(ingest(&mut s, 1, 1, first), rows(5));
        // The client retried the batch: a new batch id, the same uuids (one at another time,
        // as when the timestamp defaulted to the receive time).
        let retry = analytics("p", vec![ev("a", "u1", 1), ev("b", "u2", 99)], vec![replay("r1", 1)]);
        assert_eq!(ingest(&mut s, 2, 2, retry.clone()), rows(0));
        assert_eq!(stored(&s, Table::Events, "p"), ["", "", "a", "b"]);
        checkpoint(&mut s, 2);
        assert_eq!(ingest(&mut s, 3, 3, retry), rows(0), "flushed rows keep their uuids");
        assert_eq!(
            ingest(&mut s, 4, 4, analytics("p", vec![ev("a", "u1", 1), ev("c", "u1", 4)], vec![replay("r2", 2)])),
            rows(2)
        );
        // Uuids are per project.
        assert_eq!(ingest(&mut s, 5, 5, analytics("q", vec![ev("a", "u1", 1)], vec![replay("r1", 1)])), rows(2));
        assert_eq!(stored(&s, Table::Events, "p"), ["", "", "a", "b", "c"]);
        assert_eq!(stored(&s, Table::ReplayEvents, "p"), ["r1", "r2"]);
        assert_eq!((stored(&s, Table::Events, "q"), stored(&s, Table::ReplayEvents, "q")), (vec!["a".to_owned()], vec!["r1".to_owned()]));
    }

    /// After a crash, the uuids come back from the segments, and the log entries after the
    /// checkpoint are applied again: such an entry is stored (it is not in the segments), once.
    #[test]
    fn after_a_restart_replayed_entries_are_stored_once_and_retries_still_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let log = [
            (1, 1, analytics("p", vec![ev("a", "u1", 1), ev("b", "u2", 2)], vec![replay("r1", 1)])),
            (2, 2, analytics("p", vec![ev("c", "u1", 3)], vec![replay("r2", 2)])),
            (3, 3, analytics("p", vec![ev("a", "u1", 1), ev("d", "u1", 4)], vec![])),
        ];
        let mut s = SegmentShard::open(dir.path()).unwrap();
        for (index, id, payload) in log.iter().cloned() {
            ingest(&mut s, index, id, payload);
            if index == 1 {
                checkpoint(&mut s, 1);
            }
        }
        let before = (stored(&s, Table::Events, "p"), stored(&s, Table::ReplayEvents, "p"));
        assert_eq!(before.0, ["a", "b", "c", "d"]);
        drop(s); // kill -9: entries 2 and 3 were never flushed.
        let mut s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(stored(&s, Table::Events, "p"), ["a", "b"]);
        assert_eq!(ingest(&mut s, 2, 2, log[1].2.clone()), rows(2), "a replayed entry is not its own duplicate");
        assert_eq!(ingest(&mut s, 3, 3, log[2].2.clone()), rows(1));
        assert_eq!((stored(&s, Table::Events, "p"), stored(&s, Table::ReplayEvents, "p")), before);
        let retry = analytics("p", vec![ev("a", "u1", 1), ev("c", "u1", 3), ev("d", "u1", 4)], vec![replay("r1", 1), replay("r2", 2)]);
        assert_eq!(ingest(&mut s, 4, 9, retry), rows(0));
    }

    #[test]
    fn an_aborted_batch_gives_its_uuids_back_so_that_its_retry_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, analytics("p", vec![ev("flushed", "u1", 1)], vec![replay("r", 1)]));
        checkpoint(&mut s, 1);
        ingest(&mut s, 2, 2, analytics("p", vec![ev("buffered", "u1", 2)], vec![]));
        s.apply(3, Command::Abort { batch_id: 1 });
        s.apply(4, Command::Abort { batch_id: 2 });
        assert!(stored(&s, Table::Events, "p").is_empty());
        let retry = analytics("p", vec![ev("flushed", "u1", 1), ev("buffered", "u1", 2)], vec![replay("r", 1)]);
        assert_eq!(ingest(&mut s, 5, 3, retry.clone()), rows(3));
        // The same abort again must not give back uuids the retry now holds.
        s.apply(6, Command::Abort { batch_id: 1 });
        assert_eq!(ingest(&mut s, 7, 4, retry.clone()), rows(0));
        checkpoint(&mut s, 7);
        drop(s);
        let mut s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(stored(&s, Table::Events, "p"), ["buffered", "flushed"]);
        assert_eq!(ingest(&mut s, 8, 5, retry), rows(0));
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

    fn rss_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        statm.split_whitespace().nth(1).and_then(|p| p.parse::<usize>().ok()).unwrap_or(0) * 4096
    }

    /// The costs behind deciding by uuid at apply rather than at read (docs/BENCHMARKS.md):
    /// the set's memory per event, the apply and open time it adds, and what a read-time
    /// dedup would add to a scan of the events (the uuid column and a set per query).
    #[test]
    #[ignore = "measurement: cargo nextest run -p sextant-node --run-ignored only measure_uuid --no-capture"]
    fn measure_uuid_dedup_costs() {
        use rustc_hash::FxHashSet;
        use std::time::Instant;
        const N: usize = 1_000_000;
        const BATCH: usize = 1000;
        let uuid = |i: usize| {
            let h = xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes());
            let t = format!("{h:032x}");
            format!("{}-{}-4{}-a{}-{}", &t[..8], &t[8..12], &t[13..16], &t[17..20], &t[20..])
        };
        let payloads = |with: bool| -> Vec<Vec<u8>> {
            (0..N / BATCH)
                .map(|b| {
                    let events = (b * BATCH..(b + 1) * BATCH)
                        .map(|i| ev(&if with { uuid(i) } else { String::new() }, &format!("user-{}", i % 5000), (i as i64) * 1_000_000))
                        .collect();
                    analytics("p", events, vec![])
                })
                .collect()
        };
        let apply = |dir: &Path, payloads: Vec<Vec<u8>>| {
            let mut s = SegmentShard::open(dir).unwrap();
            let started = Instant::now();
            for (i, p) in payloads.into_iter().enumerate() {
                ingest(&mut s, i as u64 + 1, i as u128 + 1, p);
            }
            (s, started.elapsed())
        };
        let (plain_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_, plain) = apply(plain_dir.path(), payloads(false));
        let (mut s, with) = apply(dir.path(), payloads(true));
        println!("apply {N} events: {plain:?} without uuids, {with:?} with uuids");
        let texts: Vec<String> = (0..N).map(uuid).collect();
        let started = Instant::now();
        let mut alone = Uuids::default();
        texts.iter().for_each(|u| {
            alone.insert(uuids::key(Table::Events, "p", u));
        });
        println!("  of which the set (key and insert): {:?}", started.elapsed());
        println!("set: {} keys, {} heap bytes, {:.1} B/event", s.uuids.len(), s.uuids.heap_bytes(), s.uuids.heap_bytes() as f64 / N as f64);
        for n in [100_000, 1_000_000, 1_500_000, 4_000_000] {
            let before = rss_bytes();
            let mut set = Uuids::default();
            (0..n as u64).for_each(|i| {
                set.insert(xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()));
            });
            let grown = rss_bytes().saturating_sub(before);
            println!("set of {n}: {:.1} B/key by capacity, {:.1} B/key by RSS", set.heap_bytes() as f64 / n as f64, grown as f64 / n as f64);
        }
        checkpoint(&mut s, (N / BATCH) as u64);
        drop(s);
        let started = Instant::now();
        let s = SegmentShard::open(dir.path()).unwrap();
        println!("open with the set rebuilt from {N} events' segments: {:?} ({} keys)", started.elapsed(), s.uuids.len());
        let segments = s.published.read().unwrap().segments.clone();
        let started = Instant::now();
        let rebuilt = segment_uuids(&segments, &BTreeSet::new()).unwrap();
        println!("  of which the rebuild: {:?} ({} keys)", started.elapsed(), rebuilt.len());

        let scan = |columns: &[&str]| Scan {
            table: Table::Events,
            project: "p".into(),
            from_ns: 0,
            to_ns: i64::MAX,
            filter: Default::default(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            dictionaries: crate::segment::EVENT_DICTIONARIES.to_vec(),
        };
        for round in 0..3 {
            let started = Instant::now();
            let rows: usize = s.scan(scan(&["distinct_id", "time_ns"])).run().unwrap().iter().map(|b| b.num_rows()).sum();
            let plain = started.elapsed();
            let started = Instant::now();
            let with_column: usize =
                s.scan(scan(&["distinct_id", "time_ns", "uuid"])).run().unwrap().iter().map(|b| b.num_rows()).sum();
            let column = started.elapsed();
            assert_eq!(with_column, rows);
            let started = Instant::now();
            let mut seen: FxHashSet<u64> = FxHashSet::default();
            let mut kept = 0;
            for rb in s.scan(scan(&["distinct_id", "time_ns", "uuid"])).run().unwrap() {
                let uuids = crate::segment::table::Cols(&rb).str("uuid");
                kept += (0..rb.num_rows()).filter(|&i| seen.insert(xxhash_rust::xxh3::xxh3_64(uuids.value(i).as_bytes()))).count();
            }
            let deduped = started.elapsed();
            println!("round {round}: scan of {rows} events {plain:?}; with the uuid column {column:?}; and a set {deduped:?} ({kept} kept)");
        }
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
                            apply(&mut s, &mut log, Command::Ingest { batch_id: id, payload: batch("p", spans.clone()) });
                            batches.push((id, spans));
                        }
                        Op::Retry(k) if !batches.is_empty() => {
                            let (id, spans) = batches[k % batches.len()].clone();
                            apply(&mut s, &mut log, Command::Ingest { batch_id: id, payload: batch("p", spans) });
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
                let mut batches: Vec<(u128, Vec<sextant_proto::Event>)> = Vec::new();
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
                            apply(&mut a, &mut b, &mut log, Command::Ingest { batch_id: id, payload: analytics("p", events.clone(), vec![]) })?;
                            batches.push((id, events));
                        }
                        // A client retry: a new batch id, the same events.
                        Op::Retry(k) if !batches.is_empty() => {
                            let events = batches[k % batches.len()].1.clone();
                            let id = batches.len() as u128 + 1;
                            apply(&mut a, &mut b, &mut log, Command::Ingest { batch_id: id, payload: analytics("p", events.clone(), vec![]) })?;
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
