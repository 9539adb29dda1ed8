//! Builders of batches and probes of a shard, shared by the shard's tests.

use sextant_model::row::{Event, LogLevel, LogRecord, ReplayEvent, RowBatch, Span};
use sextant_proto::convert::persist_row::encode_ingest;

use super::SegmentShard;
use crate::segment::{Row, Scan, Table};
use crate::state_machine::GroupStore;
use crate::types::{Command, CommandResponse, SnapshotMeta};

pub(super) const HOUR: i64 = 3_600_000_000_000;

pub(super) fn span(trace: &str, id: &str, start: i64) -> Span {
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

pub(super) fn batch(project: &str, spans: Vec<Span>) -> Vec<u8> {
    encode_ingest(RowBatch { project_id: project.into(), spans, ..Default::default() })
}

pub(super) fn ingest(s: &mut SegmentShard, index: u64, batch_id: u128, payload: Vec<u8>) -> CommandResponse {
    s.apply(index, Command::Ingest { batch_id, payload: payload.into() })
}

pub(super) fn ids(s: &SegmentShard, project: &str, trace: &str) -> Vec<String> {
    s.trace(project, trace).run().unwrap().into_iter().map(|s| s.span_id).collect()
}

/// A shard in `dir` with three small spans segments of one hour (traces t1 to t3, one span
/// `a` each), each written by its own checkpoint: a compaction's inputs.
pub(super) fn three_small_segments(dir: &std::path::Path) -> SegmentShard {
    let mut s = SegmentShard::open(dir).unwrap();
    for i in 1..=3u64 {
        ingest(&mut s, i, i as u128, batch("p", vec![span(&format!("t{i}"), "a", i as i64)]));
        checkpoint(&mut s, i);
    }
    s
}

pub(super) fn checkpoint(s: &mut SegmentShard, index: u64) {
    let meta = SnapshotMeta { snapshot_id: format!("c{index}"), ..Default::default() };
    s.begin_checkpoint(meta)().unwrap();
}

pub(super) fn scan_all(s: &SegmentShard, table: Table, project: &str, filter: crate::segment::Filter) -> Vec<Row> {
    let scan = Scan {
        table,
        project: project.into(),
        from_ns: i64::MIN,
        to_ns: i64::MAX,
        filter,
        columns: vec![],
        dictionaries: vec![],
        stored_ids: false,
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

pub(super) fn log(service: &str, level: i32, message: &str, t: i64) -> LogRecord {
    LogRecord {
        unix_nanos: t,
        level: LogLevel::from_code(level),
        service: service.into(),
        message: message.into(),
        ..Default::default()
    }
}

pub(super) fn ev(uuid: &str, user: &str, t: i64) -> Event {
    Event {
        uuid: uuid.into(),
        event: "buy".into(),
        distinct_id: user.into(),
        unix_nanos: t,
        properties_json: "{}".into(),
    }
}

pub(super) fn replay(uuid: &str, t: i64) -> ReplayEvent {
    ReplayEvent {
        session_id: "s1".into(),
        unix_nanos: t,
        event_type: 3,
        data_json: "{}".into(),
        uuid: uuid.into(),
        ..Default::default()
    }
}

pub(super) fn analytics(project: &str, events: Vec<Event>, replays: Vec<ReplayEvent>) -> Vec<u8> {
    let batch: RowBatch = RowBatch { project_id: project.into(), events, replay_events: replays, ..Default::default() };
    encode_ingest(batch)
}

/// The uuids of the stored events (or replay events) of `project`, sorted, repeats kept.
pub(super) fn stored(s: &SegmentShard, table: Table, project: &str) -> Vec<String> {
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

pub(super) fn rows(n: u64) -> CommandResponse {
    CommandResponse::Ingested { duplicate: false, rows: n }
}
