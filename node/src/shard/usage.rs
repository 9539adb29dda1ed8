//! Metering at apply (docs/API.md, "Usage"): per project and month, what the shard's state
//! machine applied. Part of the shard's state, persisted in the manifest with the checkpoint,
//! so after a crash the counters are those of the checkpoint and replaying the entries after it
//! counts exactly those entries again.
//!
//! A batch is counted when it is applied (not a duplicate batch id; analytics rows whose uuid
//! the shard holds are dropped first and not counted), in the month of its receive time. An
//! abort of an applied batch takes its counts back, as long as the batch is among the last
//! [`RECENT_BATCHES`] applied (an abort follows its batch within the router's commit timeout).

use std::collections::{BTreeMap, HashMap, VecDeque};

use sextant_model::row::{Encoded, RowBatch};
use sextant_model::usage::{month_of_millis, previous_month, UsageCounts, UsageRecord};

/// How many applied batches keep their counts so that an abort can take them back.
pub const RECENT_BATCHES: usize = 4096;

/// What one applied batch counted, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchUsage {
    pub batch_id: u128,
    pub project_id: String,
    pub month: u32,
    pub counts: UsageCounts,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// (project, month `YYYYMM`) -> counts, months older than the one before the newest
    /// month applied are dropped (meta has them by then).
    pub totals: BTreeMap<(String, u32), UsageCounts>,
    /// The last [`RECENT_BATCHES`] applied batches, oldest first.
    recent: VecDeque<BatchUsage>,
    recent_index: HashMap<u128, usize>,
    /// Position of `recent[0]` in the sequence of all batches ever pushed (stable indexes).
    recent_base: usize,
    newest_month: u32,
}

impl Usage {
    /// Rebuilds the state a manifest recorded.
    pub fn from_parts(totals: BTreeMap<(String, u32), UsageCounts>, recent: Vec<BatchUsage>) -> Self {
        let mut u = Usage { totals, ..Default::default() };
        u.newest_month = u.totals.keys().map(|(_, m)| *m).max().unwrap_or(0);
        recent.into_iter().for_each(|b| u.remember(b));
        u
    }

    pub fn recent(&self) -> impl Iterator<Item = &BatchUsage> {
        self.recent.iter()
    }

    fn remember(&mut self, b: BatchUsage) {
        self.recent_index.insert(b.batch_id, self.recent_base + self.recent.len());
        self.recent.push_back(b);
        if self.recent.len() > RECENT_BATCHES {
            if let Some(old) = self.recent.pop_front() {
                if self.recent_index.get(&old.batch_id) == Some(&self.recent_base) {
                    self.recent_index.remove(&old.batch_id);
                }
                self.recent_base += 1;
            }
        }
    }

    /// Counts an applied batch (after its stored uuids were dropped); `rows_before` is how many
    /// rows it carried before, so its bytes are apportioned to the rows kept.
    pub fn count(&mut self, batch_id: u128, batch: &RowBatch<Encoded>, rows_before: usize) {
        if batch.received_unix_millis == 0 {
            // Written before batches carried their receive time: not metered.
            return;
        }
        let kept = batch.rows();
        let bytes = if kept == rows_before || rows_before == 0 {
            batch.json_bytes
        } else {
            (u128::from(batch.json_bytes) * kept as u128 / rows_before as u128) as u64
        };
        let counts = UsageCounts {
            bytes,
            spans: batch.spans.len() as u64,
            logs: batch.logs.len() as u64,
            metric_samples: batch.host_metrics.len() as u64,
            events: batch.events.len() as u64,
            replay_events: batch.replay_events.len() as u64,
        };
        if counts.is_zero() {
            return;
        }
        let month = month_of_millis(batch.received_unix_millis);
        self.totals.entry((batch.project_id.clone(), month)).or_default().add(&counts);
        self.remember(BatchUsage { batch_id, project_id: batch.project_id.clone(), month, counts });
        if month > self.newest_month {
            self.newest_month = month;
            let keep_from = previous_month(month);
            self.totals.retain(|(_, m), _| *m >= keep_from);
        }
    }

    /// Takes back what an applied batch counted (its abort); false if it is no longer known.
    pub fn uncount(&mut self, batch_id: u128) -> bool {
        let Some(i) = self.recent_index.remove(&batch_id) else { return false };
        let b = &mut self.recent[i - self.recent_base];
        if let Some(total) = self.totals.get_mut(&(b.project_id.clone(), b.month)) {
            total.sub(&b.counts);
        }
        b.counts = UsageCounts::default();
        true
    }

    /// The cumulative counts per project and month, as reported to meta.
    pub fn records(&self) -> Vec<UsageRecord> {
        self.totals.iter().map(|((p, m), c)| UsageRecord { project_id: p.clone(), month: *m, counts: *c }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::shard::SegmentShard;
    use crate::state_machine::GroupStore;
    use crate::types::{Command, CommandResponse};
    use sextant_model::row::{HostMetric, RowBatch};
    use sextant_model::usage::month_start_millis;
    use sextant_proto::convert::persist_row::encode_ingest;

    const NOV: i64 = 1_793_491_200_000; // 2026-11-01T00:00:00Z

    fn stamped(mut b: RowBatch, bytes: u64, at_ms: i64) -> Vec<u8> {
        b.json_bytes = bytes;
        b.received_unix_millis = at_ms;
        encode_ingest(b)
    }

    fn spans(project: &str, n: usize, bytes: u64, at_ms: i64) -> Vec<u8> {
        let spans = (0..n).map(|i| span("t", &format!("s{i}"), 1)).collect();
        stamped(RowBatch { project_id: project.into(), spans, ..Default::default() }, bytes, at_ms)
    }

    fn mixed(project: &str, at_ms: i64) -> Vec<u8> {
        let b = RowBatch {
            project_id: project.into(),
            spans: vec![span("t", "a", 1)],
            logs: vec![log("api", 9, "m", 1), log("api", 9, "n", 2)],
            host_metrics: vec![HostMetric { unix_nanos: 1, hostname: "h".into(), ..Default::default() }; 3],
            events: vec![ev("u1", "d", 1), ev("u2", "d", 1), ev("u3", "d", 1), ev("u4", "d", 1)],
            replay_events: vec![replay("r1", 1)],
            ..Default::default()
        };
        stamped(b, 1100, at_ms)
    }

    fn counts(s: &SegmentShard, project: &str, month: u32) -> UsageCounts {
        s.usage.totals.get(&(project.to_owned(), month)).copied().unwrap_or_default()
    }

    fn c(bytes: u64, spans: u64, logs: u64, metric_samples: u64, events: u64, replay_events: u64) -> UsageCounts {
        UsageCounts { bytes, spans, logs, metric_samples, events, replay_events }
    }

    #[test]
    fn an_applied_batch_is_counted_per_kind_and_a_retried_or_refused_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, mixed("p", NOV + 5));
        assert_eq!(counts(&s, "p", 202611), c(1100, 1, 2, 3, 4, 1));
        // The router retrying the same batch id: a duplicate, not counted.
        let again = ingest(&mut s, 2, 1, mixed("p", NOV + 6));
        assert_eq!(again, CommandResponse::Ingested { duplicate: true, rows: 0 });
        // A batch whose abort came first is refused, not counted.
        s.apply(3, Command::Abort { batch_id: 2 });
        assert_eq!(ingest(&mut s, 4, 2, spans("p", 5, 500, NOV)), CommandResponse::Refused);
        ingest(&mut s, 5, 3, spans("q", 2, 70, NOV));
        assert_eq!(counts(&s, "p", 202611), c(1100, 1, 2, 3, 4, 1));
        assert_eq!(counts(&s, "q", 202611), c(70, 2, 0, 0, 0, 0));
        assert_eq!(s.usage_report().0, 5, "the report says which entry it counts up to");
    }

    #[test]
    fn analytics_rows_already_stored_are_not_counted_and_the_bytes_follow_the_rows_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let events = |uuids: &[&str]| {
            let events = uuids.iter().map(|u| ev(u, "d", 1)).collect();
            stamped(RowBatch { project_id: "p".into(), events, ..Default::default() }, 400, NOV)
        };
        ingest(&mut s, 1, 1, events(&["a", "b", "c", "d"]));
        // A client retry under a new batch id: half of it is stored already.
        ingest(&mut s, 2, 2, events(&["c", "d", "e", "f"]));
        ingest(&mut s, 3, 3, events(&["a", "b", "e", "f"]));
        assert_eq!(counts(&s, "p", 202611), c(600, 0, 0, 0, 6, 0));
    }

    #[test]
    fn an_abort_takes_back_what_its_batch_counted_in_the_buffer_or_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        ingest(&mut s, 1, 1, spans("p", 3, 300, NOV));
        checkpoint(&mut s, 1);
        ingest(&mut s, 2, 2, spans("p", 2, 200, NOV));
        ingest(&mut s, 3, 3, spans("p", 1, 100, NOV));
        s.apply(4, Command::Abort { batch_id: 1 });
        s.apply(5, Command::Abort { batch_id: 2 });
        s.apply(6, Command::Abort { batch_id: 2 });
        assert_eq!(counts(&s, "p", 202611), c(100, 1, 0, 0, 0, 0));
        checkpoint(&mut s, 6);
        drop(s);
        let mut s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(counts(&s, "p", 202611), c(100, 1, 0, 0, 0, 0));
        s.apply(7, Command::Abort { batch_id: 1 });
        assert_eq!(counts(&s, "p", 202611), c(100, 1, 0, 0, 0, 0), "an abort is taken back once");
    }

    /// The month is the one the router received the batch in (stamped on the batch), so every
    /// replica and every replay agrees; a batch received a millisecond before midnight UTC on
    /// the last day of a month counts in that month, whenever it is applied.
    #[test]
    fn a_batch_counts_in_the_month_it_was_received_in_utc() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let dec = month_start_millis(202612);
        ingest(&mut s, 1, 1, spans("p", 1, 10, dec - 1));
        ingest(&mut s, 2, 2, spans("p", 2, 20, dec));
        assert_eq!(counts(&s, "p", 202611), c(10, 1, 0, 0, 0, 0));
        assert_eq!(counts(&s, "p", 202612), c(20, 2, 0, 0, 0, 0));
        ingest(&mut s, 3, 3, spans("p", 4, 40, month_start_millis(202701)));
        assert_eq!(counts(&s, "p", 202612), c(20, 2, 0, 0, 0, 0));
        assert_eq!(counts(&s, "p", 202701), c(40, 4, 0, 0, 0, 0));
        // Two months back is dropped once a newer month is applied: meta holds it.
        ingest(&mut s, 4, 4, spans("p", 1, 1, month_start_millis(202702)));
        assert_eq!(s.usage.totals.keys().map(|(_, m)| *m).collect::<Vec<_>>(), [202701, 202702]);
        // Entries written before batches carried a receive time are not metered.
        ingest(&mut s, 5, 5, spans("p", 1, 1, 0));
        assert_eq!(s.usage.totals.len(), 2);
    }

    /// kill -9 at any point: the shard reopens at its last checkpoint and Raft applies the
    /// entries after it again; the counters end exactly where an uninterrupted shard's are.
    #[test]
    fn after_a_crash_replaying_the_log_recounts_exactly_the_entries_after_the_checkpoint() {
        let log: Vec<(u64, Command)> = vec![
            (1, Command::Ingest { batch_id: 1, payload: mixed("p", NOV).into() }),
            (2, Command::Ingest { batch_id: 2, payload: spans("p", 5, 50, NOV).into() }),
            (3, Command::Ingest { batch_id: 3, payload: spans("q", 7, 70, NOV).into() }),
            (4, Command::Ingest { batch_id: 2, payload: spans("p", 5, 50, NOV).into() }),
            (5, Command::Abort { batch_id: 2 }),
            (6, Command::Ingest { batch_id: 4, payload: mixed("p", NOV + 1).into() }),
            (7, Command::Abort { batch_id: 3 }),
            (8, Command::Ingest { batch_id: 5, payload: spans("q", 1, 11, NOV).into() }),
        ];
        let reference = {
            let dir = tempfile::tempdir().unwrap();
            let mut s = SegmentShard::open(dir.path()).unwrap();
            log.iter().for_each(|(i, cmd)| drop(s.apply(*i, cmd.clone())));
            s.usage.totals.clone()
        };
        // Batch 4 repeats batch 1's uuids: its 5 analytics rows are dropped, and 6/11 of its
        // bytes counted.
        assert_eq!(reference[&("p".to_owned(), 202611)], c(1100 + 600, 2, 4, 6, 4, 1));
        assert_eq!(reference[&("q".to_owned(), 202611)], c(11, 1, 0, 0, 0, 0));
        for at in 0..=log.len() as u64 {
            let dir = tempfile::tempdir().unwrap();
            let mut s = SegmentShard::open(dir.path()).unwrap();
            for (i, cmd) in &log {
                s.apply(*i, cmd.clone());
                if *i == at {
                    checkpoint(&mut s, at);
                }
            }
            drop(s); // kill -9: nothing after the checkpoint reached the disk.
            let mut s = SegmentShard::open(dir.path()).unwrap();
            log.iter().filter(|(i, _)| *i > at).for_each(|(i, cmd)| drop(s.apply(*i, cmd.clone())));
            assert_eq!(s.usage.totals, reference, "checkpoint at entry {at}");
        }
    }

    #[test]
    fn a_replica_installing_a_snapshot_takes_its_counters_and_can_take_back_an_aborted_batch() {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = SegmentShard::open(a_dir.path()).unwrap();
        ingest(&mut a, 1, 1, spans("p", 3, 30, NOV));
        ingest(&mut a, 2, 2, spans("p", 2, 20, NOV));
        checkpoint(&mut a, 2);
        let (meta, files) = a.checkpoint().unwrap();
        let mut b = SegmentShard::open(b_dir.path()).unwrap();
        ingest(&mut b, 1, 7, spans("p", 9, 90, NOV));
        let staging = b_dir.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        for f in &files {
            std::fs::copy(a_dir.path().join(&f.name), staging.join(&f.name)).unwrap();
        }
        b.install(&meta, &staging, &files).unwrap();
        assert_eq!(counts(&b, "p", 202611), c(50, 5, 0, 0, 0, 0));
        b.apply(3, Command::Abort { batch_id: 1 });
        assert_eq!(counts(&b, "p", 202611), c(20, 2, 0, 0, 0, 0));
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Ingest(u8),
            /// The router retrying the k-th batch (same batch id).
            Retry(usize),
            Abort(usize),
            Checkpoint,
            /// kill -9 and restart: the entries after the last checkpoint are applied again.
            Restart,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (1u8..20).prop_map(Op::Ingest),
                1 => any::<usize>().prop_map(Op::Retry),
                1 => any::<usize>().prop_map(Op::Abort),
                1 => Just(Op::Checkpoint),
                1 => Just(Op::Restart),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
            /// Whatever the retries, aborts (before or after their batch), checkpoints and
            /// crashes: the counters are exactly those of the batches applied and not aborted.
            #[test]
            fn the_counters_are_exactly_the_applied_batches_not_aborted_whatever_the_crashes(
                ops in prop::collection::vec(op(), 1..40)
            ) {
                let dir = tempfile::tempdir().unwrap();
                let mut s = SegmentShard::open(dir.path()).unwrap();
                let mut log: Vec<(u64, Command)> = Vec::new();
                let mut checkpointed = 0u64;
                let mut batches: Vec<(u128, u8)> = Vec::new();
                let mut aborted = std::collections::HashSet::new();
                let apply = |s: &mut SegmentShard, log: &mut Vec<(u64, Command)>, cmd: Command| {
                    let index = log.len() as u64 + 1;
                    log.push((index, cmd.clone()));
                    s.apply(index, cmd);
                };
                let payload = |n: u8| spans("p", n as usize, u64::from(n) * 10, NOV);
                for op in ops {
                    match op {
                        Op::Ingest(n) => {
                            let id = batches.len() as u128 + 1;
                            apply(&mut s, &mut log, Command::Ingest { batch_id: id, payload: payload(n).into() });
                            batches.push((id, n));
                        }
                        Op::Retry(k) if !batches.is_empty() => {
                            let (id, n) = batches[k % batches.len()];
                            apply(&mut s, &mut log, Command::Ingest { batch_id: id, payload: payload(n).into() });
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
                let spans: u64 = batches.iter().filter(|(id, _)| !aborted.contains(id)).map(|(_, n)| u64::from(*n)).sum();
                prop_assert_eq!(counts(&s, "p", 202611), c(spans * 10, spans, 0, 0, 0, 0));
            }
        }
    }
}
