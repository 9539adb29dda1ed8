//! Compaction: merges a past hour's small segments (see `segment::compaction` for the plan)
//! and drops expired rows, off the apply path; readers keep the inputs until the new manifest
//! is published.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use super::flush::{write_segment, IDS_PER_SEGMENT};
use super::{Persisted, Published, SegmentShard};
use crate::durable::sync_dir;
use crate::failpoint;
use crate::segment::compaction::{self, merge_rows, DayRollup, ExpiryPolicy};
use crate::segment::file::{self as segment_file, Effort, SegmentMeta};
use crate::segment::rollup::span_day_rollups;
use crate::segment::table::{RowRef, Table};
use crate::segment::user_number::UserNumbers;
use crate::segment::Segment;

impl SegmentShard {
    /// Replaces the expiry policy the compactor applies from now on.
    pub fn set_expiry(&mut self, policy: ExpiryPolicy) {
        self.expiry = Arc::new(policy);
    }

    /// A compaction, if one is due (see [`compaction::next`]). Never waits for a running
    /// flush: it is called with the state machine's lock held.
    pub fn compaction(&self, now_s: i64) -> Option<CompactionJob> {
        // Planned from the published segments (the manifest's lock is held by a running flush,
        // possibly for long); the job re-checks its inputs under that lock before swapping.
        let published = self.published.read().unwrap();
        let metas: Vec<_> = published.segments.iter().map(|s| s.meta.clone()).collect();
        let (picked, work) = match compaction::next(&metas, &self.expiry, now_s)? {
            compaction::Plan::Drop(segments) => (segments, Work::Drop),
            compaction::Plan::Rewrite(segments) => (segments, Work::Merge),
            compaction::Plan::RollDay(DayRollup { day, hours, covers, replaces }) => {
                (hours, Work::RollDay { day, covers, replaces: replaces.iter().map(|s| s.id).collect() })
            }
        };
        let ids: HashSet<u64> = picked.iter().map(|s| s.id).collect();
        let derived = match work {
            Work::RollDay { .. } => Vec::new(),
            _ => metas.iter().filter(|s| s.summarizes.is_some_and(|id| ids.contains(&id))).map(|s| s.id).collect(),
        };
        let inputs: Vec<Arc<Segment>> =
            published.segments.iter().filter(|s| ids.contains(&s.meta.id)).cloned().collect();
        (inputs.len() == ids.len()).then(|| CompactionJob {
            dir: self.dir.clone(),
            work,
            expiry: self.expiry.clone(),
            inputs,
            derived,
            users: self.users.clone(),
            published: self.published.clone(),
            persisted: self.persisted.clone(),
            closed: self.closed.clone(),
        })
    }
}

/// A merge of small segments, prepared by [`SegmentShard::compaction`] and run off the
/// apply path. Readers keep using the inputs until the new manifest is published.
pub struct CompactionJob {
    dir: PathBuf,
    work: Work,
    expiry: Arc<ExpiryPolicy>,
    inputs: Vec<Arc<Segment>>,
    /// Segments derived from the inputs (trace summaries, rollups): replaced along with them.
    derived: Vec<u64>,
    /// The shard's user numbers, for the merged events.
    users: Arc<UserNumbers>,
    published: Arc<RwLock<Published>>,
    persisted: Arc<Mutex<Persisted>>,
    /// The replica's [`SegmentShard::closer`] flag.
    closed: Arc<RwLock<bool>>,
}

/// What a compaction job does with its inputs.
enum Work {
    /// Every row of the inputs is expired: delete them without reading.
    Drop,
    /// Merge them into one segment (and its derived ones).
    Merge,
    /// Add up the inputs (the hour rollups of the day's spans segments `covers`) into the
    /// day's span rollups, replacing the stale ones.
    RollDay { day: i64, covers: Vec<u64>, replaces: Vec<u64> },
}

#[derive(Debug, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// `inputs` segments became `outputs` (0 when every row was dropped).
    Merged { inputs: usize, outputs: usize, rows_in: u64, rows_out: u64 },
    /// A snapshot install replaced the inputs meanwhile, or the replica was closed; nothing
    /// changed.
    Superseded,
}

impl CompactionJob {
    pub fn run(self) -> io::Result<CompactionOutcome> {
        let closed = self.closed.clone();
        let closed = closed.read().unwrap();
        if *closed {
            return Ok(CompactionOutcome::Superseded);
        }
        if let Work::RollDay { day, covers, replaces } = &self.work {
            return self.roll_day(*day, covers, replaces);
        }
        // Only aborts already in the manifest: a replica that restarts rebuilds its uuid set
        // from the segments and these tombstones, and must find the rows every replica kept.
        let tombstones = self.persisted.lock().unwrap().manifest.tombstones.clone();
        let mut rows = Vec::new();
        for seg in self.inputs.iter().filter(|_| matches!(self.work, Work::Merge)) {
            for (project, row, ordinal) in seg.read(None)? {
                let batch = seg.batches.get(ordinal as usize).copied().unwrap_or_default();
                rows.push((project, row, batch));
            }
        }
        let rows_in = rows.len() as u64;
        let merged = merge_rows(rows, &|b| tombstones.contains(&b), &self.expiry);
        let mut batches = Vec::new();
        let mut ordinals: HashMap<u128, u32> = HashMap::new();
        let refs: Vec<RowRef<'_>> = merged
            .iter()
            .map(|(project, row, b)| {
                let batch = *ordinals.entry(*b).or_insert_with(|| {
                    batches.push(*b);
                    (batches.len() - 1) as u32
                });
                RowRef::new(project, row, batch)
            })
            .collect();
        let (table, hour) = (self.inputs[0].meta.table, self.inputs[0].meta.hour);
        let written = self.write(|dir, first_id| {
            if refs.is_empty() {
                return Ok(Vec::new());
            }
            write_segment(dir, first_id, table, hour, &refs, &batches, None, &self.users, Effort::Final)
        })?;
        let mut gone: HashSet<u64> = self.inputs.iter().map(|s| s.meta.id).collect();
        gone.extend(&self.derived);
        let outputs = written.iter().filter(|(m, _)| !m.table.is_derived()).count();
        if !self.swap(written, &gone, &gone)? {
            return Ok(CompactionOutcome::Superseded);
        }
        Ok(CompactionOutcome::Merged { inputs: self.inputs.len(), outputs, rows_in, rows_out: refs.len() as u64 })
    }

    /// Writes the day's span rollups, added up from the hour rollups of its spans segments.
    fn roll_day(&self, day: i64, covers: &[u64], replaces: &[u64]) -> io::Result<CompactionOutcome> {
        let mut hours = Vec::new();
        for seg in &self.inputs {
            hours.extend(seg.read(None)?.into_iter().map(|(project, row, _)| (project, row)));
        }
        let rows = span_day_rollups(&hours);
        let refs: Vec<RowRef<'_>> = rows.iter().map(|(project, row)| RowRef::new(project, row, 0)).collect();
        let written = self.write(|dir, id| {
            if refs.is_empty() {
                return Ok(Vec::new());
            }
            let mut meta = segment_file::write(dir, id, Table::SpanDayRollups, day, &refs, &[], None, Effort::Final)?;
            meta.covers = covers.to_vec();
            Ok(vec![meta])
        })?;
        let gone: HashSet<u64> = replaces.iter().copied().collect();
        let mut needed = gone.clone();
        needed.extend(covers);
        needed.extend(self.inputs.iter().map(|s| s.meta.id));
        if !self.swap(written, &gone, &needed)? {
            return Ok(CompactionOutcome::Superseded);
        }
        Ok(CompactionOutcome::Merged {
            inputs: self.inputs.len(),
            outputs: 0,
            rows_in: hours.len() as u64,
            rows_out: refs.len() as u64,
        })
    }

    /// Writes segments under ids reserved for them, synced and opened. A failed write (a full
    /// disk) leaves no partial output behind; the next pass retries.
    fn write(
        &self,
        write: impl FnOnce(&std::path::Path, u64) -> io::Result<Vec<SegmentMeta>>,
    ) -> io::Result<Vec<(SegmentMeta, Arc<Segment>)>> {
        let first_id = {
            // Reserve ids; the next manifest written (by a flush or by us) records them.
            let mut p = self.persisted.lock().unwrap();
            let id = p.manifest.next_segment;
            p.manifest.next_segment += IDS_PER_SEGMENT;
            id
        };
        let opened = (|| -> io::Result<Vec<(SegmentMeta, Arc<Segment>)>> {
            let written = write(&self.dir, first_id)?;
            if !written.is_empty() {
                sync_dir(&self.dir)?;
            }
            written.into_iter().map(|m| Ok((m.clone(), Arc::new(Segment::open(&self.dir, m)?)))).collect()
        })();
        opened.inspect_err(|_| super::flush::remove_unlisted(&self.dir, first_id..first_id + IDS_PER_SEGMENT))
    }

    /// Publishes `written` in place of the segments `gone`, if every segment of `needed` is
    /// still in the manifest (else removes `written` and returns false: superseded).
    fn swap(
        &self,
        written: Vec<(SegmentMeta, Arc<Segment>)>,
        gone: &HashSet<u64>,
        needed: &HashSet<u64>,
    ) -> io::Result<bool> {
        failpoint::hit(failpoint::COMPACTION_BEFORE_MANIFEST);
        let mut p = self.persisted.lock().unwrap();
        let present = p.manifest.segments.iter().filter(|s| needed.contains(&s.id)).count();
        if present != needed.len() {
            drop(p);
            for (m, _) in &written {
                let _ = std::fs::remove_file(self.dir.join(&m.file.name));
            }
            return Ok(false);
        }
        let (written, opened): (Vec<SegmentMeta>, Vec<Arc<Segment>>) = written.into_iter().unzip();
        let first_id = written.first().map(|m| m.id);
        let mut manifest = p.manifest.clone();
        let removed: Vec<String> =
            manifest.segments.iter().filter(|s| gone.contains(&s.id)).map(|s| s.file.name.clone()).collect();
        manifest.segments.retain(|s| !gone.contains(&s.id));
        manifest.segments.extend(written);
        let entry = manifest.store(&self.dir).inspect_err(|_| {
            if let Some(id) = first_id {
                super::flush::remove_unlisted(&self.dir, id..id + IDS_PER_SEGMENT)
            }
        })?;
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
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::segment::{Row, Table};
    use crate::state_machine::GroupStore;
    use crate::types::Command;

    /// A group restarted in the same process reopens its directory; a compaction of the old
    /// replica running later would reuse the new replica's segment ids and overwrite its
    /// manifest.
    #[test]
    fn a_compaction_of_a_closed_replica_leaves_its_directory_alone() {
        let dir = tempfile::tempdir().unwrap();
        let s = three_small_segments(dir.path());
        let job = s.compaction(i64::MAX).expect("three small segments");
        let listing = || {
            let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            names
        };
        let (files, manifest) = (listing(), std::fs::read(dir.path().join("MANIFEST")).unwrap());
        s.closer()();
        assert_eq!(job.run().unwrap(), CompactionOutcome::Superseded);
        assert_eq!(listing(), files);
        assert_eq!(std::fs::read(dir.path().join("MANIFEST")).unwrap(), manifest);
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
        // Compaction drops an aborted batch once its tombstone is in the manifest.
        checkpoint(&mut s, 4);
        assert_eq!(s.segment_count(), 12);
        assert!(s.compaction(0).is_none(), "the hour is not over and only three segments exist");

        let job = s.compaction(i64::MAX).expect("three small segments of a past hour");
        assert_eq!(job.run().unwrap(), CompactionOutcome::Merged { inputs: 3, outputs: 1, rows_in: 5, rows_out: 3 });
        assert_eq!(s.segment_count(), 4, "one spans segment, its summaries and two rollups");
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
        // The rollups per minute and per hour are written again from the kept spans.
        let published = s.published.read().unwrap();
        for table in [Table::SpanRollups, Table::SpanHourRollups] {
            let rollups = published.segments.iter().filter(|g| g.meta.table == table);
            let rolled_up: u64 = rollups
                .flat_map(|g| g.read(None).unwrap())
                .map(|(_, r, _)| match r {
                    Row::SpanRollup(r) | Row::SpanHourRollup(r) => r.totals.count,
                    _ => unreachable!(),
                })
                .sum();
            assert_eq!(rolled_up, 3, "{table:?}");
        }
        drop(published);
        // Only the manifest's files remain, and they reopen to the same rows.
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("seg-"));
        assert_eq!(files.count(), 4);
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(scan_all(&s, Table::Spans, "p", Filter::default()), spans);
    }

    /// A flush writes its small segments as drafts (compressed fast); compaction rewrites a
    /// draft left alone once its hour is over, at the final level, and then leaves it.
    #[test]
    fn a_flushed_draft_left_alone_is_rewritten_final_once_its_hour_is_over() {
        use crate::segment::Filter;
        let dir = tempfile::tempdir().unwrap();
        // Flushed within the spans' hour.
        let clock = sextant_model::ManualClock::at_millis(0);
        let mut s = SegmentShard::open(dir.path()).unwrap().with_clock(clock.clock());
        ingest(&mut s, 1, 1, batch("p", vec![span("t1", "a", 10), span("t1", "b", 11)]));
        checkpoint(&mut s, 1);
        assert_eq!(spans_segments(&s), [true]);
        assert!(s.compaction(0).is_none(), "the hour is not over");
        // An hour later: the hour is over, its day is not (no day rollups yet).
        let job = s.compaction(3600).expect("a lone draft of a past hour");
        assert_eq!(job.run().unwrap(), CompactionOutcome::Merged { inputs: 1, outputs: 1, rows_in: 2, rows_out: 2 });
        assert_eq!(spans_segments(&s), [false]);
        assert!(s.compaction(3600).is_none(), "a final segment alone is left as it is");
        assert_eq!(scan_all(&s, Table::Spans, "p", Filter::default()).len(), 2);
        drop(s);
        let s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(spans_segments(&s), [false], "the manifest says so after a restart");
    }

    /// Rows of a past hour (a backfill): the compactor would rewrite a draft at once, and
    /// again when the next flush brings rows of the same hour.
    #[test]
    fn a_small_segment_of_an_hour_already_over_is_written_final() {
        let dir = tempfile::tempdir().unwrap();
        let clock = sextant_model::ManualClock::at_millis(3_600_000);
        let mut s = SegmentShard::open(dir.path()).unwrap().with_clock(clock.clock());
        ingest(&mut s, 1, 1, batch("p", vec![span("t1", "a", 10)]));
        checkpoint(&mut s, 1);
        assert_eq!(spans_segments(&s), [false]);
        assert!(s.compaction(7200).is_none(), "nothing to rewrite");
    }

    fn spans_segments(s: &SegmentShard) -> Vec<bool> {
        let published = s.published.read().unwrap();
        published.segments.iter().filter(|g| g.meta.table == Table::Spans).map(|g| g.meta.draft).collect()
    }

    /// Until the abort is checkpointed, a restart replays it over the segments: compaction
    /// keeps the batch's rows (reads hide them already), so every replica rebuilds the same
    /// uuid set.
    #[test]
    fn compaction_keeps_a_batch_whose_abort_is_not_yet_in_the_manifest() {
        use crate::segment::Filter;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        for i in 1..=3u64 {
            ingest(&mut s, i, i as u128, batch("p", vec![span(&format!("t{i}"), "a", 10 + i as i64)]));
            checkpoint(&mut s, i);
        }
        s.apply(4, Command::Abort { batch_id: 3 });
        let job = s.compaction(i64::MAX).expect("three small segments of a past hour");
        assert_eq!(job.run().unwrap(), CompactionOutcome::Merged { inputs: 3, outputs: 1, rows_in: 3, rows_out: 3 });
        assert_eq!(scan_all(&s, Table::Spans, "p", Filter::default()).len(), 2, "the aborted span is hidden");
    }

    #[test]
    fn expiry_drops_expired_rows_of_each_project_and_deleted_projects_entirely() {
        use crate::segment::Filter;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, batch("short", vec![span("a", "old", 10), span("b", "new", HOUR * 5)]));
        ingest(&mut s, 2, 2, batch("long", vec![span("c", "old", 10)]));
        ingest(&mut s, 3, 3, batch("gone", vec![span("d", "x", HOUR * 5)]));
        checkpoint(&mut s, 3);
        let mut policy = ExpiryPolicy::default();
        policy.cutoffs.insert("short".into(), HOUR);
        policy.deleted.insert("gone".into());
        s.set_expiry(policy);
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
}
