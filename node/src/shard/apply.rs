//! Apply: a committed ingest batch goes to the active buffer (once per batch id, and once per
//! analytics uuid); an abort hides a batch's rows wherever they are.

use std::sync::Arc;

use sextant_model::row::{Encoded, RowBatch};

use super::SegmentShard;
use crate::segment::buffer::decode_batch;
use crate::segment::uuids;
use crate::segment::{Buffer, Segment, Table};
use crate::types::{Command, CommandResponse};

impl SegmentShard {
    pub(super) fn apply_command(&mut self, command: Command) -> CommandResponse {
        match command {
            Command::Ingest { batch_id, payload } => self.ingest(batch_id, payload),
            Command::Abort { batch_id } => self.abort(batch_id),
            Command::Meta(_) => CommandResponse::Rejected("meta command sent to a data shard".into()),
        }
    }

    fn ingest(&mut self, batch_id: u128, payload: bytes::Bytes) -> CommandResponse {
        if self.dedup.is_aborted(batch_id) {
            return CommandResponse::Refused;
        }
        if self.dedup.is_applied(batch_id) {
            return CommandResponse::Ingested { duplicate: true, rows: 0 };
        }
        let len = payload.len();
        let handed = self.handoffs.take(batch_id, &payload);
        match handed.map_or_else(|| decode_batch(payload), Ok) {
            Ok(mut batch) => {
                let rows_before = batch.rows();
                self.drop_stored_uuids(&mut batch);
                self.dedup.record_applied(batch_id);
                self.usage.count(batch_id, &batch, rows_before);
                CommandResponse::Ingested {
                    duplicate: false,
                    rows: self.active.push(batch_id, batch, len, self.clock.monotonic()),
                }
            }
            Err(e) => CommandResponse::Rejected(format!("undecodable batch: {e}")),
        }
    }

    /// Drops the analytics rows whose uuid the shard holds (a retried batch, or a repeat
    /// within this one) and takes the uuids of the others.
    fn drop_stored_uuids(&mut self, batch: &mut RowBatch<Encoded>) {
        let project = &batch.project_id;
        let uuids = &mut self.uuids;
        let mut new = |keys: uuids::Keys, uuid: &str| uuid.is_empty() || uuids.insert(keys.of(uuid));
        let (events, replays) =
            (uuids::Keys::new(Table::Events, project), uuids::Keys::new(Table::ReplayEvents, project));
        batch.events.retain(|e| new(events, &e.uuid));
        batch.replay_events.retain(|r| new(replays, &r.uuid));
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
            self.usage.uncount(batch_id);
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::super::segment_uuids;
    use super::super::testing::*;
    use super::*;
    use crate::segment::uuids::Uuids;
    use crate::segment::{Row, Scan};
    use crate::state_machine::GroupStore;
    use sextant_model::row::{Attribute, Value};
    use sextant_proto::convert::persist_row::{each_attribute, encode_attribute, encode_ingest_encoded, encoded_from};

    /// What `/metrics` reports as the shards' memory: the buffer until a flush, then the open
    /// segments' metadata; the uuid set all along, growing with the events stored.
    #[test]
    fn a_shard_accounts_for_its_buffers_uuid_set_and_segment_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        assert_eq!(s.memory(), super::super::ShardMemory::default());
        let events = (0..2000).map(|i| ev(&format!("uuid-{i}"), &format!("user-{}", i % 7), i * 1_000_000)).collect();
        ingest(&mut s, 1, 1, analytics("p", events, vec![]));
        let before = s.memory();
        assert!(before.buffers > 0 && before.uuids >= 2000 * 8 && before.segments == 0, "{before:?}");
        checkpoint(&mut s, 1);
        let after = s.memory();
        assert!(after.buffers == 0 && after.uuids == before.uuids && after.segments > 0, "{after:?}");
    }

    #[test]
    fn rows_survive_flush_and_reopen_and_retries_apply_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let b1 = batch("p", vec![span("t1", "a", 10), span("t1", "b", 5), span("t2", "c", HOUR * 2)]);
        assert_eq!(ingest(&mut s, 1, 1, b1.clone()), CommandResponse::Ingested { duplicate: false, rows: 3 });
        assert_eq!(ingest(&mut s, 2, 1, b1), CommandResponse::Ingested { duplicate: true, rows: 0 });
        assert_eq!(ids(&s, "p", "t1"), ["b", "a"]);
        checkpoint(&mut s, 2);
        // Two hour buckets: two spans segments, each with its summaries and two rollups segments.
        assert_eq!(s.segment_count(), 8);
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
    /// form (reads as the same attribute), and a batch with an attribute that is no attribute
    /// is rejected whole, leaving nothing behind (the batch id is not taken either).
    #[test]
    fn attributes_are_stored_in_prosts_form_and_undecodable_ones_reject_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let kv = Attribute { key: "k".into(), value: Some(Value::Int(5)) };
        let encoded = encode_attribute(kv.clone());
        // The value field before the key field.
        let reordered = [&encoded[3..], b"\x0a\x01k"].concat();
        let with = |attributes: Vec<&[u8]>| {
            let span = span("t", "a", 1).map_attributes(|_| encoded_from(attributes));
            encode_ingest_encoded(RowBatch { project_id: "p".into(), spans: vec![span], ..Default::default() })
        };
        let garbage = with(vec![&encoded, b"\x0a\x09k"]);
        assert!(matches!(ingest(&mut s, 1, 1, garbage), CommandResponse::Rejected(_)));
        assert!(ids(&s, "p", "t").is_empty());
        assert_eq!(
            ingest(&mut s, 2, 1, with(vec![&reordered])),
            CommandResponse::Ingested { duplicate: false, rows: 1 }
        );
        let stored = |s: &SegmentShard| match &scan_all(s, Table::Spans, "p", Default::default())[..] {
            [Row::Span(row)] => each_attribute(&row.attributes).map(<[u8]>::to_vec).collect::<Vec<_>>(),
            other => panic!("one span expected: {other:?}"),
        };
        assert_eq!(stored(&s), [encoded.clone()]);
        assert_eq!(s.trace("p", "t").run().unwrap()[0].attributes, [kv.clone()]);
        checkpoint(&mut s, 2);
        assert_eq!(stored(&s), [encoded]);
    }

    /// Apply takes the rows a router in this process handed over instead of decoding the
    /// entry, but only for the entry's very bytes, and only while the write holds them.
    #[test]
    fn rows_handed_over_apply_only_with_the_entrys_own_payload_while_held() {
        use sextant_proto::convert::persist_row::encode_ingest_decoded;
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        let handoffs = s.handoffs();
        let handed = |id: &str, start| {
            Arc::new(encode_ingest_decoded(RowBatch {
                project_id: "p".into(),
                spans: vec![span("t", id, start)],
                ..Default::default()
            }))
        };

        let other = handed("other", 1);
        let held = handoffs.hold(1, other.clone());
        assert_eq!(ingest(&mut s, 1, 1, batch("p", vec![span("t", "entry", 2)])), rows(1));
        assert_eq!(ids(&s, "p", "t"), ["entry"], "the entry's rows, not the handed ones");
        drop(held);

        let own = handed("own", 3);
        let held = handoffs.hold(2, own.clone());
        assert_eq!(ingest(&mut s, 2, 2, own.payload.to_vec()), rows(1));
        assert_eq!(own.take_rows(&own.payload), None, "apply took the handed rows");
        drop(held);

        let late = handed("late", 4);
        drop(handoffs.hold(3, late.clone()));
        assert_eq!(ingest(&mut s, 3, 3, late.payload.to_vec()), rows(1));
        assert!(late.take_rows(&late.payload).is_some(), "let go when the write ended: decoded");
        assert_eq!(ids(&s, "p", "t"), ["entry", "own", "late"]);
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
    fn an_analytics_uuid_is_stored_once_within_a_batch_across_batches_and_across_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SegmentShard::open(dir.path()).unwrap();
        // A repeat within the batch; events without a uuid are all kept.
        let first = analytics(
            "p",
            vec![ev("a", "u1", 1), ev("a", "u1", 1), ev("b", "u2", 2), ev("", "u3", 3), ev("", "u3", 3)],
            vec![replay("r1", 1), replay("r1", 1)],
        );
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
        assert_eq!(
            (stored(&s, Table::Events, "q"), stored(&s, Table::ReplayEvents, "q")),
            (vec!["a".to_owned()], vec!["r1".to_owned()])
        );
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
        let retry = analytics(
            "p",
            vec![ev("a", "u1", 1), ev("c", "u1", 3), ev("d", "u1", 4)],
            vec![replay("r1", 1), replay("r2", 2)],
        );
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
                        .map(|i| {
                            ev(
                                &if with { uuid(i) } else { String::new() },
                                &format!("user-{}", i % 5000),
                                (i as i64) * 1_000_000,
                            )
                        })
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
        println!(
            "set: {} keys, {} heap bytes, {:.1} B/event",
            s.uuids.len(),
            s.uuids.heap_bytes(),
            s.uuids.heap_bytes() as f64 / N as f64
        );
        for n in [100_000, 1_000_000, 1_500_000, 4_000_000] {
            let before = rss_bytes();
            let mut set = Uuids::default();
            (0..n as u64).for_each(|i| {
                set.insert(xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()));
            });
            let grown = rss_bytes().saturating_sub(before);
            println!(
                "set of {n}: {:.1} B/key by capacity, {:.1} B/key by RSS",
                set.heap_bytes() as f64 / n as f64,
                grown as f64 / n as f64
            );
        }
        checkpoint(&mut s, (N / BATCH) as u64);
        drop(s);
        let started = Instant::now();
        let s = SegmentShard::open(dir.path()).unwrap();
        println!(
            "open with the set rebuilt from {N} events' segments: {:?} ({} keys)",
            started.elapsed(),
            s.uuids.len()
        );
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
            stored_ids: false,
        };
        for round in 0..3 {
            let started = Instant::now();
            let rows: usize =
                s.scan(scan(&["distinct_id", "time_ns"])).run().unwrap().iter().map(|b| b.num_rows()).sum();
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
                kept += (0..rb.num_rows())
                    .filter(|&i| seen.insert(xxhash_rust::xxh3::xxh3_64(uuids.value(i).as_bytes())))
                    .count();
            }
            let deduped = started.elapsed();
            println!(
                "round {round}: scan of {rows} events {plain:?}; with the uuid column {column:?}; and a set {deduped:?} ({kept} kept)"
            );
        }
    }
}
