//! Plans against a real shard: rows in the buffer and in several segments.

use sextant_model::query::{
    ApmPlan, EventBucketsPlan, FunnelPlan, LogKey, LogSearchPlan, Partial, Plan, Refused, ServiceMapPlan, ShardQuery,
    ShardReply, SpanTotals, TraceKey, TraceListPlan,
};
use sextant_model::row::{Event, LogLevel, LogRecord, RowBatch, Span, SpanStatus};
use sextant_model::sketch::LatencySketch;
// Rows are written as the Raft log carries them.
use sextant_proto::convert::persist_row::encode_ingest;

use super::{estimate, prepare, MemoryPool};
use crate::segment::Table;
use crate::shard::SegmentShard;
use crate::state_machine::GroupStore;
use crate::types::{Command, SnapshotMeta};

const MS: i64 = 1_000_000;

fn span(trace: &str, id: &str, parent: &str, service: &str, start_ms: i64, dur_ms: i64, error: bool) -> Span {
    Span {
        trace_id: trace.into(),
        span_id: id.into(),
        parent_span_id: parent.into(),
        service_name: service.into(),
        operation: format!("op-{service}"),
        start_unix_nanos: start_ms * MS,
        duration_nanos: (dur_ms * MS) as u64,
        status: if error { SpanStatus::Error } else { SpanStatus::Ok },
        attributes: vec![],
    }
}

struct Shard {
    s: SegmentShard,
    index: u64,
    _dir: tempfile::TempDir,
}

impl Shard {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Shard { s: SegmentShard::open(dir.path()).unwrap(), index: 0, _dir: dir }
    }

    fn ingest(&mut self, project: &str, spans: Vec<Span>, logs: Vec<LogRecord>) {
        self.apply_batch(RowBatch { project_id: project.into(), spans, logs, ..Default::default() });
    }

    /// Applies `batch` as the next entry (its index is also its batch id).
    fn apply_batch(&mut self, batch: RowBatch) {
        self.index += 1;
        self.s
            .apply(self.index, Command::Ingest { batch_id: self.index as u128, payload: encode_ingest(batch).into() });
    }

    /// Flushes everything applied so far into segments.
    fn flush(&mut self) {
        let meta = SnapshotMeta { snapshot_id: format!("c{}", self.index), ..Default::default() };
        self.s.begin_checkpoint(meta)().unwrap();
    }

    fn query_at(&self, req: ShardQuery) -> ShardReply {
        prepare(&self.s, req).unwrap().run(MemoryPool::new(1 << 30)).unwrap()
    }

    /// `plan` of project `p` over `[from_ms, to_ms)`.
    fn query_ms(&self, from_ms: i64, to_ms: i64, plan: Plan) -> ShardReply {
        self.query_at(ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: from_ms * MS,
            to_unix_nanos: to_ms * MS,
            max_rows: 1_000_000,
            plan,
        })
    }

    fn query(&self, plan: impl Into<Plan>, max_rows: u64) -> ShardReply {
        let req = ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: 0,
            to_unix_nanos: 1_000_000 * MS,
            max_rows,
            plan: plan.into(),
        };
        prepare(&self.s, req).unwrap().run(MemoryPool::new(1 << 30)).unwrap()
    }
}

#[test]
fn trace_list_merges_partials_from_segments_and_buffer_then_filters_and_pages() {
    let mut sh = Shard::new();
    // Trace a: root in one segment, its error span in a later segment, one more span buffered.
    sh.ingest("p", vec![span("a", "1", "", "web", 100, 50, false), span("b", "1", "", "web", 200, 5, false)], vec![]);
    sh.flush();
    sh.ingest("p", vec![span("a", "2", "1", "db", 110, 10, true), span("c", "1", "", "db", 300, 1, false)], vec![]);
    sh.flush();
    sh.ingest("p", vec![span("a", "3", "1", "cache", 120, 200, false)], vec![]);
    sh.ingest("other", vec![span("z", "1", "", "web", 400, 1, true)], vec![]);

    let list = |plan: TraceListPlan| match sh.query(plan, 1000).partial {
        Ok(Partial::Traces(t)) => t.0,
        other => panic!("{other:?}"),
    };
    let all = list(TraceListPlan { limit: 10, ..Default::default() });
    assert_eq!(all.iter().map(|t| t.trace_id.as_str()).collect::<Vec<_>>(), ["c", "b", "a"]);
    let a = &all[2];
    assert_eq!((a.span_count, a.error_count, a.root_service.as_str()), (3, 1, "web"));
    assert_eq!((a.start_unix_nanos, a.end_unix_nanos), (100 * MS, 320 * MS));
    assert_eq!(a.services, ["cache", "db", "web"]);

    // Filters apply to the whole trace: `a` is an error trace though its root segment is not.
    let errors = list(TraceListPlan { limit: 10, errors_only: true, ..Default::default() });
    assert_eq!(errors.iter().map(|t| t.trace_id.as_str()).collect::<Vec<_>>(), ["a"]);
    let cache = list(TraceListPlan { limit: 10, services: vec!["cache".into()], ..Default::default() });
    assert_eq!(cache.len(), 1);
    let slow = list(TraceListPlan { limit: 10, min_duration_nanos: 100 * MS, ..Default::default() });
    assert_eq!(slow.iter().map(|t| t.trace_id.as_str()).collect::<Vec<_>>(), ["a"]);

    // Keyset: after c comes b.
    let page = list(TraceListPlan {
        limit: 1,
        before: Some(TraceKey { start_unix_nanos: 300 * MS, trace_id: "c".into() }),
        ..Default::default()
    });
    assert_eq!(page[0].trace_id, "b");
}

#[test]
fn trace_list_pages_traces_of_one_start_by_id_and_hex_ids_as_sent() {
    let mut sh = Shard::new();
    let ids = ["4bf92f3577b34da6a3ce929d0e0e4736", "00000000000000000000000000000001", "zz-not-hex", "ABCDEF"];
    for (i, id) in ids.iter().enumerate() {
        sh.ingest("p", vec![span(id, "1", "", "web", 100, 5, false)], vec![]);
        if i % 2 == 0 {
            sh.flush();
        }
    }
    sh.ingest("p", vec![span("older", "1", "", "web", 50, 5, false)], vec![]);
    let list = |limit: u32, before: Option<TraceKey>| match sh
        .query(TraceListPlan { limit, before, ..Default::default() }, 1000)
        .partial
    {
        Ok(Partial::Traces(t)) => t.0.into_iter().map(|t| t.trace_id).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let mut by_id: Vec<&str> = ids.to_vec();
    by_id.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(list(2, None), by_id[..2]);
    assert_eq!(list(10, None), [by_id.as_slice(), &["older"]].concat());
    let after = TraceKey { start_unix_nanos: 100 * MS, trace_id: by_id[1].to_owned() };
    assert_eq!(list(2, Some(after)), by_id[2..]);
}

#[test]
fn a_query_over_its_row_budget_says_so_instead_of_answering() {
    let mut sh = Shard::new();
    let spans = (0..50).map(|i| span(&format!("t{i}"), "1", "", "web", 100 + i, 1, false)).collect();
    sh.ingest("p", spans, vec![]);
    sh.flush();
    // Within the first minute: the spans themselves are read, not their rollups.
    let first_seconds = |max_rows| {
        sh.query_at(ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: 0,
            to_unix_nanos: 30_000 * MS,
            max_rows,
            plan: ApmPlan::default().into(),
        })
    };
    let over = first_seconds(49);
    assert_eq!(over.partial.err(), Some(Refused::Rows));
    let within = first_seconds(50);
    assert!(within.partial.is_ok());
    assert_eq!(within.rows_scanned, 50);
}

#[test]
fn log_search_pages_through_identical_lines_without_skipping_or_repeating() {
    let mut sh = Shard::new();
    let log = |ms: i64, msg: &str| LogRecord {
        unix_nanos: ms * MS,
        level: LogLevel::Error,
        service: "api".into(),
        message: msg.into(),
        ..Default::default()
    };
    // Three identical lines at the same instant, plus others; half flushed, half buffered.
    sh.ingest("p", vec![], vec![log(10, "disk full"), log(10, "disk full"), log(11, "disk ok"), log(9, "cpu hot")]);
    sh.flush();
    sh.ingest("p", vec![], vec![log(10, "disk full"), log(12, "disk full again")]);
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let plan = LogSearchPlan { query: "disk -ok".into(), limit: 2, before, ..Default::default() };
        let Ok(Partial::Logs(page)) = sh.query(plan, 1000).partial else { panic!("logs expected") };
        if page.0.is_empty() {
            break;
        }
        for l in &page.0 {
            seen.push((l.log.unix_nanos / MS, l.key.duplicate));
        }
        before = Some(page.0.last().unwrap().key);
    }
    assert_eq!(seen, [(12, 0), (10, 0), (10, 1), (10, 2)]);
}

#[test]
fn service_map_edges_join_spans_to_parents_of_other_services() {
    let mut sh = Shard::new();
    sh.ingest(
        "p",
        vec![
            span("a", "1", "", "web", 100, 50, false),
            span("a", "2", "1", "api", 101, 40, false),
            span("a", "3", "2", "api", 102, 10, false),
            span("a", "4", "2", "db", 103, 5, true),
        ],
        vec![],
    );
    sh.flush();
    sh.ingest("p", vec![span("b", "1", "", "web", 200, 20, false), span("b", "2", "1", "api", 201, 30, true)], vec![]);
    let Ok(Partial::ServiceMap(map)) = sh.query(ServiceMapPlan, 1000).partial else { panic!("service map expected") };
    let mut edges: Vec<(String, String, u64, u64, f64)> = map
        .edges
        .iter()
        .map(|((source, target), e)| {
            let p95 = e.sketch.quantile(0.95).unwrap();
            (source.clone(), target.clone(), e.count, e.errors, p95)
        })
        .collect();
    edges.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(edges.len(), 2);
    assert_eq!((edges[0].0.as_str(), edges[0].1.as_str(), edges[0].2, edges[0].3), ("api", "db", 1, 1));
    assert_eq!((edges[1].0.as_str(), edges[1].1.as_str(), edges[1].2, edges[1].3), ("web", "api", 2, 1));
    // p95 of two calls (40 ms, 30 ms) is the value at rank ⌊0.95·1⌋ = 0: 30 ms.
    assert!((edges[1].4 - 30.0).abs() / 30.0 <= 0.01, "{}", edges[1].4);
    let api = &map.nodes["api"];
    assert_eq!((api.count, api.errors), (3, 1));
}

#[test]
fn log_pages_hold_every_line_once_however_many_are_identical() {
    let mut sh = Shard::new();
    let messages = ["disk full", "disk slow", "disk gone"];
    let mut x: u64 = 0x853c49e6748fea9b;
    let mut expected: Vec<(i64, String)> = Vec::new();
    for round in 0..4 {
        let logs: Vec<LogRecord> = (0..100)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (ms, msg) = ((x % 20) as i64, messages[(x >> 8) as usize % 3]);
                expected.push((ms, msg.to_owned()));
                LogRecord {
                    unix_nanos: ms * MS,
                    level: LogLevel::Info,
                    service: "api".into(),
                    message: msg.into(),
                    ..Default::default()
                }
            })
            .collect();
        sh.ingest("p", vec![], logs);
        if round % 2 == 0 {
            sh.flush();
        }
    }
    for limit in [1, 7, 64] {
        let mut seen: Vec<(i64, String)> = Vec::new();
        let mut before = None;
        loop {
            let plan = LogSearchPlan { query: "disk".into(), limit, before, ..Default::default() };
            let Ok(Partial::Logs(page)) = sh.query(plan, 10_000).partial else { panic!("logs expected") };
            assert!(page.0.len() <= limit as usize);
            let Some(last) = page.0.last() else { break };
            before = Some(last.key);
            seen.extend(page.0.iter().map(|l| (l.log.unix_nanos / MS, l.log.message.clone())));
        }
        assert!(seen.windows(2).all(|w| w[0].0 >= w[1].0), "limit {limit}: newest first");
        let mut got = seen.clone();
        got.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(got, want, "limit {limit}: every line exactly once");
    }
}

#[test]
fn log_search_reads_row_groups_newest_first_and_stops_at_a_full_page() {
    let mut sh = Shard::new();
    // Three segments of 10k lines (two row groups each) over overlapping time ranges, and 10k
    // buffered lines: one line in 7 has the term.
    let mut expected: Vec<(i64, String)> = Vec::new();
    let mut total = 0u64;
    for seg in 0..4i64 {
        let logs: Vec<LogRecord> = (0..10_000i64)
            .map(|i| {
                let ms = 1000 + i * 3 + seg * 7_000;
                let message = if (i + seg) % 7 == 0 { format!("Needle {i} of {seg}") } else { format!("hay {i}") };
                if message.starts_with("Needle") {
                    expected.push((ms, message.clone()));
                }
                LogRecord {
                    unix_nanos: ms * MS,
                    level: LogLevel::Info,
                    service: "api".into(),
                    message,
                    ..Default::default()
                }
            })
            .collect();
        total += logs.len() as u64;
        sh.ingest("p", vec![], logs);
        if seg < 3 {
            sh.flush();
        }
    }
    expected.sort_by(|a, b| b.cmp(a));
    let page = |limit: u32, before: Option<LogKey>| {
        let plan = LogSearchPlan { query: "needle".into(), limit, before, ..Default::default() };
        let reply = sh.query(plan, 1_000_000);
        let Ok(Partial::Logs(p)) = reply.partial else { panic!("logs expected") };
        (p.0, reply.rows_scanned)
    };
    let (first, scanned) = page(100, None);
    let got: Vec<(i64, String)> = first.iter().map(|l| (l.log.unix_nanos / MS, l.log.message.clone())).collect();
    assert_eq!(got, expected[..100]);
    assert!(scanned < total / 2, "read {scanned} of {total} lines for one page: no early stop");
    // Every page after it, down to the oldest line, exactly as the reference.
    let mut seen = got;
    let mut before = Some(first.last().unwrap().key);
    loop {
        let (p, _) = page(700, before);
        let Some(last) = p.last() else { break };
        before = Some(last.key);
        seen.extend(p.iter().map(|l| (l.log.unix_nanos / MS, l.log.message.clone())));
    }
    assert_eq!(seen, expected);
}

#[test]
fn apm_over_segments_and_buffer_matches_a_sketch_of_every_span() {
    let mut sh = Shard::new();
    let spans = |trace: usize, project_rows: usize| -> Vec<Span> {
        (0..project_rows)
            .map(|i| {
                let service = ["web", "api", "db"][i % 3];
                let mut s =
                    span(&format!("t{trace}-{}", i / 7), &format!("{i}"), "", service, 100 + i as i64, 0, i % 11 == 0);
                s.operation = format!("op{}", i % 4);
                // Microsecond durations over four decades, and zeros.
                s.duration_nanos = (i as u64 * 7919 % 10_000_000) / 1000 * 1000;
                s
            })
            .collect()
    };
    // A segment of one project (row groups read whole, as dictionaries), one shared with
    // another project (through the row mask) and buffered rows (plain strings).
    let (a, b, c) = (spans(1, 9000), spans(2, 500), spans(3, 300));
    sh.ingest("p", a.clone(), vec![]);
    sh.flush();
    sh.ingest("p", b.clone(), vec![]);
    sh.ingest("other", spans(4, 200), vec![]);
    sh.flush();
    sh.ingest("p", c.clone(), vec![]);
    let all: Vec<Span> = [a, b, c].concat();
    for services in [vec![], vec!["db".to_owned()]] {
        let Ok(Partial::Apm(apm)) = sh.query(ApmPlan { services: services.clone() }, 1_000_000).partial else {
            panic!("apm expected")
        };
        let mut expected: std::collections::BTreeMap<(String, String), (u64, u64, LatencySketch)> = Default::default();
        for s in all.iter().filter(|s| services.is_empty() || services.contains(&s.service_name)) {
            let e = expected.entry((s.service_name.clone(), s.operation.clone())).or_insert((0, 0, Default::default()));
            e.0 += 1;
            e.1 += u64::from(s.status == SpanStatus::Error);
            e.2.add(s.duration_nanos as f64 / 1e6);
        }
        assert_eq!(apm.0.len(), expected.len());
        for ((service, operation), e) in &apm.0 {
            let (count, errors, one_by_one) = &expected[&(service.clone(), operation.clone())];
            // Through the wire encoding, as the router reads it.
            let sketch = LatencySketch::decode(&e.sketch.encode()).unwrap();
            assert_eq!((e.count, e.errors, sketch.count()), (*count, *errors, *count));
            assert_eq!(sketch.max(), one_by_one.max());
            for q in [0.0, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0] {
                assert_eq!(sketch.quantile(q), one_by_one.quantile(q), "{service}/{operation} q={q}");
            }
        }
    }
}

/// `n` spans `step_ms` apart from `first_ms`.
fn spread(n: usize, first_ms: i64, step_ms: i64, tag: &str) -> Vec<Span> {
    (0..n)
        .map(|i| {
            let service = ["web", "api", "db"][i % 3];
            let start = first_ms + i as i64 * step_ms;
            let mut s = span(&format!("{tag}{}", i / 5), &format!("{i}"), "", service, start, 0, i % 7 == 0);
            s.operation = format!("op{}", i % 2);
            s.duration_nanos = (i as u64 * 104_729 % 3_000_000_000) / 1000 * 1000 + u64::from(i % 13 == 0);
            s
        })
        .collect()
}

/// APM answers from stored rollups, rollups made as segments are read (a segment written
/// before rollups existed, one holding a batch aborted after it was written) and buffered
/// spans, plus spans for the partial minutes at both ends: exactly what adding up every span
/// of the range gives, sums and sketches included.
#[test]
fn apm_from_rollups_equals_adding_up_every_span_of_the_range() {
    let mut sh = Shard::new();
    let (a, old, aborted, buffered) = (
        spread(600, 0, 700, "a"),
        spread(300, 20_000, 1300, "o"),
        spread(300, 1000, 500, "x"),
        spread(200, 5, 2100, "b"),
    );
    sh.ingest("p", a.clone(), vec![]);
    sh.ingest("other", spread(100, 0, 900, "z"), vec![]);
    sh.flush();
    sh.ingest("p", old.clone(), vec![]);
    sh.flush();
    forget_derived_of_newest_spans(&mut sh, Table::SpanRollups);
    sh.ingest("p", aborted, vec![]);
    sh.flush();
    sh.s.apply(sh.index + 1, Command::Abort { batch_id: sh.index as u128 });
    sh.index += 1;
    sh.ingest("p", buffered.clone(), vec![]);
    let all: Vec<Span> = [a, old, buffered].concat();
    let ranges: [((i64, i64), &[&str]); 4] = [
        ((0, 10 * 60_000), &[]),
        ((30_500, 5 * 60_000 + 10_250), &["db"]),
        ((61_000, 119_999), &[]),
        ((125_000, 125_001), &[]),
    ];
    // Ten whole minutes: a row per endpoint and minute of the stored and the buffer's
    // rollups, the spans of the others (and of the buffer holding an aborted batch).
    let scanned = check_apm_against_every_span(&sh, &all, &ranges);
    assert!(scanned[0] < 400, "read {} rows", scanned[0]);
    // A batch aborted while buffered: the buffer's running rollups still count it, so the
    // buffer is read span by span.
    sh.ingest("p", spread(100, 7, 1100, "y"), vec![]);
    sh.s.apply(sh.index + 1, Command::Abort { batch_id: sh.index as u128 });
    sh.index += 1;
    let scanned = check_apm_against_every_span(&sh, &all, &ranges);
    assert!(scanned[0] < 600, "read {} rows", scanned[0]);
}

/// Takes the `table` segment derived from the newest spans segment out of the manifest, as if
/// an earlier release had written that segment, and reopens the shard.
fn forget_derived_of_newest_spans(sh: &mut Shard, table: Table) {
    let dir = sh._dir.path().to_owned();
    let (mut manifest, _) = crate::segment::Manifest::load(&dir).unwrap().unwrap();
    let newest_spans = manifest.segments.iter().filter(|m| m.table == Table::Spans).map(|m| m.id).max();
    let before = manifest.segments.len();
    manifest.segments.retain(|m| !(m.table == table && m.summarizes == newest_spans));
    assert_eq!(manifest.segments.len(), before - 1, "{table:?}");
    manifest.store(&dir).unwrap();
    sh.s = SegmentShard::open(&dir).unwrap();
}

/// Checks APM over each `(from_ms, to_ms)` of project "p" (the services, none meaning all)
/// against adding up every span of `all` in the range; the rows each query scanned.
fn check_apm_against_every_span(sh: &Shard, all: &[Span], ranges: &[((i64, i64), &[&str])]) -> Vec<u64> {
    let mut scanned = Vec::new();
    for &((from_ms, to_ms), services) in ranges {
        let services: Vec<String> = services.iter().map(|s| s.to_string()).collect();
        let req = ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: from_ms * MS,
            to_unix_nanos: to_ms * MS,
            max_rows: 1_000_000,
            plan: ApmPlan { services: services.clone() }.into(),
        };
        let reply = sh.query_at(req);
        let Ok(Partial::Apm(apm)) = reply.partial else { panic!("apm expected") };
        let mut expected: std::collections::BTreeMap<(String, String), SpanTotals> = Default::default();
        let in_range = |s: &&Span| (from_ms * MS..to_ms * MS).contains(&s.start_unix_nanos);
        for s in all.iter().filter(in_range).filter(|s| services.is_empty() || services.contains(&s.service_name)) {
            let e = expected.entry((s.service_name.clone(), s.operation.clone())).or_default();
            e.add(s.duration_nanos as i64, s.status == SpanStatus::Error);
        }
        assert_eq!(apm.0.len(), expected.len(), "{from_ms}..{to_ms}");
        for (key, got) in &apm.0 {
            let want = expected[key].stats();
            let (got_sketch, want_sketch) = (got.sketch.encode(), want.sketch.encode());
            assert_eq!((got.count, got.errors, got.sum_ms), (want.count, want.errors, want.sum_ms), "{key:?}");
            assert_eq!(got_sketch, want_sketch, "{key:?} {from_ms}..{to_ms}");
        }
        scanned.push(reply.rows_scanned);
    }
    scanned
}

/// APM over whole hours reads a row per endpoint and hour (stored, and the buffer's minutes
/// added up), whole minutes around them per minute and spans for the rest; a spans segment
/// without hour rollups (written by an earlier release) is read from its spans. Every answer
/// equals adding up every span of the range.
#[test]
fn apm_over_whole_hours_reads_hour_rollups_and_equals_every_span() {
    const HOUR_MS: i64 = 3_600_000;
    let mut sh = Shard::new();
    // Five hours, a span every 6 s (about 1.7 per endpoint and minute: too few for minute
    // rollups to pay, 100 per endpoint and hour).
    let (a, old, buffered) = (
        spread(3000, 0, 6000, "a"),
        spread(600, 2 * HOUR_MS + 3000, 3000, "o"),
        spread(600, 4 * HOUR_MS + 500, 2500, "b"),
    );
    sh.ingest("p", a.clone(), vec![]);
    sh.ingest("other", spread(200, 0, 50_000, "z"), vec![]);
    sh.flush();
    sh.ingest("p", old.clone(), vec![]);
    sh.flush();
    forget_derived_of_newest_spans(&mut sh, Table::SpanHourRollups);
    sh.ingest("p", buffered.clone(), vec![]);
    let all: Vec<Span> = [a, old, buffered].concat();
    let ranges: [((i64, i64), &[&str]); 5] = [
        ((0, 5 * HOUR_MS), &[]),
        ((30_500, 4 * HOUR_MS + 10_250), &[]),
        ((HOUR_MS - 60_000, 3 * HOUR_MS + 61_000), &["db"]),
        ((HOUR_MS, 2 * HOUR_MS), &[]),
        ((-HOUR_MS, 10 * HOUR_MS), &["web", "api"]),
    ];
    let scanned = check_apm_against_every_span(&sh, &all, &ranges);
    // Five hours: six endpoints' hour rows per stored hour (and the other project's), the
    // 600 spans of the segment without them, the buffer's hour rows: not the 3,000 spans.
    assert!(scanned[0] < 1000, "read {} rows", scanned[0]);
    assert!(scanned[3] < 100, "one hour read {} rows", scanned[3]);
}

/// APM over whole days reads a row per endpoint and day once compaction has added up a past
/// day's hours. Before that, and for a day whose spans segments changed since (late spans), it
/// reads that day's hours. Every answer equals adding up every span of the range, also after
/// a restart.
#[test]
fn apm_over_whole_days_reads_day_rollups_while_they_are_current_and_equals_every_span() {
    const DAY_MS: i64 = 86_400_000;
    let mut sh = Shard::new();
    // Three days, a span every 20 s (about 12 per endpoint and hour, 720 per day).
    let mut all = spread(12_960, 0, 20_000, "d");
    sh.ingest("p", all.clone(), vec![]);
    sh.ingest("other", spread(100, 0, 2_000_000, "z"), vec![]);
    sh.flush();
    let ranges: [((i64, i64), &[&str]); 4] = [
        ((0, 3 * DAY_MS), &[]),
        ((30_500, 2 * DAY_MS + 10_250), &[]),
        ((DAY_MS, 2 * DAY_MS), &["db"]),
        ((-DAY_MS, 10 * DAY_MS), &["web", "api"]),
    ];
    let by_hours = check_apm_against_every_span(&sh, &all, &ranges);
    let day_rollups = |sh: &mut Shard| {
        while let Some(job) = sh.s.compaction(i64::MAX / 1_000_000_000) {
            job.run().unwrap();
        }
        sh.s.segment_stats(Table::SpanDayRollups).0
    };
    assert_eq!(day_rollups(&mut sh), 3);
    let by_days = check_apm_against_every_span(&sh, &all, &ranges);
    assert!(by_days[0] * 10 < by_hours[0], "{by_days:?} against {by_hours:?}");

    // Late spans of the second day: its day rollups cover a spans segment no longer there.
    let late = spread(50, DAY_MS + 5000, 1000, "late");
    sh.ingest("p", late.clone(), vec![]);
    sh.flush();
    all.extend(late);
    let stale = check_apm_against_every_span(&sh, &all, &ranges);
    assert!(stale[0] > by_days[0], "the second day read by hours: {stale:?}");
    assert_eq!(day_rollups(&mut sh), 3, "the second day's rollups are replaced");
    let again = check_apm_against_every_span(&sh, &all, &ranges);
    assert_eq!(again[0], by_days[0]);
    sh.s = SegmentShard::open(sh._dir.path()).unwrap();
    assert_eq!(check_apm_against_every_span(&sh, &all, &ranges), again, "after a restart");
}

/// Events every 40 seconds from `first_ms`, names cycling.
fn events_over_days(n: usize, first_ms: i64, tag: &str) -> Vec<Event> {
    (0..n)
        .map(|i| Event {
            uuid: format!("{tag}-{i}"),
            event: ["view", "signup", "buy"][i % 3].into(),
            distinct_id: format!("u{}", i % 17),
            unix_nanos: (first_ms + i as i64 * 40_000 + (i as i64 % 5) * 1000) * MS,
            properties_json: "{}".into(),
        })
        .collect()
}

/// Event counts from hourly rollups (stored, rolled up on read for a segment without them or
/// with a batch aborted after it was written, and buffered) equal the counts of the plan that
/// reads every event, for every bucket; buckets not on whole hours are read from events.
#[test]
fn event_counts_from_rollups_equal_counting_every_event() {
    let mut sh = Shard::new();
    let dir = sh._dir.path().to_owned();
    let batch = |events: Vec<Event>| RowBatch { project_id: "p".into(), events, ..Default::default() };
    let ingest = |sh: &mut Shard, events: Vec<Event>| sh.apply_batch(batch(events));
    ingest(&mut sh, events_over_days(700, 0, "a"));
    sh.flush();
    ingest(&mut sh, events_over_days(300, 5 * 60_000, "o"));
    sh.flush();
    let (mut manifest, _) = crate::segment::Manifest::load(&dir).unwrap().unwrap();
    let newest = manifest.segments.iter().filter(|m| m.table == Table::Events).map(|m| m.id).max();
    manifest.segments.retain(|m| !(m.table == Table::EventRollups && m.summarizes == newest));
    manifest.store(&dir).unwrap();
    sh.s = SegmentShard::open(&dir).unwrap();
    ingest(&mut sh, events_over_days(200, 11 * 60_000, "x"));
    sh.flush();
    sh.s.apply(sh.index + 1, Command::Abort { batch_id: sh.index as u128 });
    sh.index += 1;
    ingest(&mut sh, events_over_days(300, 7 * 60_000, "b"));
    check_event_counts_against_every_event(&sh);
    // A batch aborted while buffered: the buffer is read event by event.
    ingest(&mut sh, events_over_days(100, 9 * 60_000, "y"));
    sh.s.apply(sh.index + 1, Command::Abort { batch_id: sh.index as u128 });
    sh.index += 1;
    check_event_counts_against_every_event(&sh);
}

fn check_event_counts_against_every_event(sh: &Shard) {
    const HOUR_MS: i64 = 3_600_000;
    let hourly: Vec<i64> = (0..100).map(|h| h * HOUR_MS * MS).collect();
    let daily: Vec<i64> = (0..5).map(|d| d * 24 * HOUR_MS * MS).collect();
    let shifted: Vec<i64> = (0..5).map(|d| (d * 24 * HOUR_MS + 30 * 60_000) * MS).collect();
    for (starts, to_ms, events) in [
        (daily.clone(), 4 * 24 * HOUR_MS + 10 * 60_000 + 123, vec![]),
        (hourly, 99 * HOUR_MS + 1, vec!["buy".to_owned()]),
        (shifted, 5 * 24 * HOUR_MS, vec![]),
        (daily, 2 * HOUR_MS + 5, vec!["view".to_owned(), "signup".to_owned()]),
    ] {
        let counts = |counts_only: bool| {
            let plan =
                EventBucketsPlan { events: events.clone(), bucket_starts: starts.clone(), cohort: None, counts_only };
            let reply = sh.query_at(ShardQuery {
                group: 1,
                project_id: "p".into(),
                from_unix_nanos: starts[0],
                to_unix_nanos: to_ms * MS,
                max_rows: 1_000_000,
                plan: plan.into(),
            });
            let Ok(Partial::EventBuckets(b)) = reply.partial else { panic!("buckets expected") };
            (b.0.iter().map(|b| b.count).collect::<Vec<_>>(), reply.rows_scanned)
        };
        let ((rolled_up, read), (scanned, all)) = (counts(true), counts(false));
        assert_eq!(rolled_up, scanned, "{events:?} to {to_ms}");
        assert!(scanned.iter().sum::<u64>() > 0);
        if to_ms > 24 * HOUR_MS && starts[0] == 0 {
            assert!(read < all, "rollups read {read} rows, events {all}");
        }
    }
}

#[test]
fn service_map_finds_parents_in_other_segments_and_counts_a_span_stored_twice_once() {
    let mut sh = Shard::new();
    sh.ingest(
        "p",
        vec![
            span("c", "1", "", "web", 100, 50, false),
            span("d", "1", "", "web", 100, 9, false),
            span("f", "2", "1", "db", 100, 3, false),
        ],
        vec![],
    );
    sh.flush();
    // The child of c's root comes in a later segment, and twice (a retried batch); f's parent
    // comes in a later segment than its child; e's child comes before its parent in a batch.
    let child = span("c", "2", "1", "api", 101, 40, true);
    sh.ingest("p", vec![child.clone(), span("f", "1", "", "web", 99, 4, false)], vec![]);
    sh.flush();
    sh.ingest(
        "p",
        vec![child, span("e", "2", "1", "db", 99, 5, false), span("e", "1", "", "api", 100, 9, false)],
        vec![],
    );
    let Ok(Partial::ServiceMap(map)) = sh.query(ServiceMapPlan, 1000).partial else { panic!("service map expected") };
    let mut edges: Vec<(String, String, u64, u64)> =
        map.edges.iter().map(|((source, target), e)| (source.clone(), target.clone(), e.count, e.errors)).collect();
    edges.sort();
    assert_eq!(
        edges,
        vec![("api".into(), "db".into(), 1, 0), ("web".into(), "api".into(), 1, 1), ("web".into(), "db".into(), 1, 0)]
    );
    let api = &map.nodes["api"];
    assert_eq!((api.count, api.errors), (2, 1));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Traces whose spans come in several batches, flushed or buffered, some twice, with hex
    /// and other ids, and a range that cuts traces: the map counts, per pair of services, the
    /// spans in the range whose parent is in the range, each span once.
    #[test]
    fn service_map_equals_a_join_of_every_span_to_its_parent_over_any_range(
        traces in proptest::collection::vec(
            (proptest::bool::ANY, proptest::collection::vec((0usize..4, 0u8..3, 0i64..40, proptest::bool::ANY), 1..12)),
            1..12,
        ),
        cut in (0i64..45, 0i64..45),
        flushes in proptest::collection::vec(proptest::bool::ANY, 4),
    ) {
        let services = ["web", "api", "db", "cache"];
        let mut all = Vec::new();
        for (t, (hex, shape)) in traces.iter().enumerate() {
            let trace = if *hex { format!("{:032x}", t * 7919 + 1) } else { format!("trace-{t}") };
            for (i, &(service, batch, start, error)) in shape.iter().enumerate() {
                // The parent: an earlier span of the trace, picked by the start, or none.
                let parent = if i == 0 || start % 5 == 0 { String::new() } else { format!("{:016x}", (start as usize) % i) };
                let mut s = span(&trace, &format!("{i:016x}"), &parent, services[service], start, 1, error);
                s.operation = format!("b{batch}");
                all.push(s);
            }
        }
        let mut sh = Shard::new();
        for batch in 0..4u8 {
            // Batch 3 repeats batch 0 (a retried write).
            let of = if batch == 3 { 0 } else { batch };
            let spans: Vec<Span> = all.iter().filter(|s| s.operation == format!("b{of}")).cloned().collect();
            sh.ingest("p", spans, vec![]);
            if flushes[batch as usize] {
                sh.flush();
            }
        }
        let (from, to) = (cut.0.min(cut.1), cut.0.max(cut.1) + 1);
        let req = ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: from * MS,
            to_unix_nanos: to * MS,
            max_rows: 1_000_000,
            plan: ServiceMapPlan.into(),
        };
        let Ok(Partial::ServiceMap(map)) = sh.query_at(req).partial else { panic!("service map expected") };
        let got: std::collections::BTreeMap<(String, String), (u64, u64)> =
            map.edges.iter().map(|(k, e)| (k.clone(), (e.count, e.errors))).collect();
        let in_range: std::collections::HashMap<(&str, &str), &Span> = all
            .iter()
            .filter(|s| (from * MS..to * MS).contains(&s.start_unix_nanos))
            .map(|s| ((s.trace_id.as_str(), s.span_id.as_str()), s))
            .collect();
        let mut want = std::collections::BTreeMap::<(String, String), (u64, u64)>::new();
        for c in in_range.values() {
            if let Some(p) = in_range.get(&(c.trace_id.as_str(), c.parent_span_id.as_str())) {
                if p.service_name != c.service_name {
                    let e = want.entry((p.service_name.clone(), c.service_name.clone())).or_default();
                    e.0 += 1;
                    e.1 += u64::from(c.status == SpanStatus::Error);
                }
            }
        }
        proptest::prop_assert_eq!(got, want);
        let spans: u64 = map.nodes.values().map(|n| n.count).sum();
        proptest::prop_assert_eq!(spans, in_range.len() as u64);
    }
}

#[test]
fn host_series_over_the_whole_i64_range_has_no_overflow() {
    use sextant_model::query::HostSeriesPlan;
    use sextant_model::row::HostMetric;
    let mut sh = Shard::new();
    let metric = HostMetric { unix_nanos: 5 * MS, hostname: "h".into(), cpu_percent: Some(50.0), ..Default::default() };
    sh.apply_batch(RowBatch { project_id: "p".into(), host_metrics: vec![metric], ..Default::default() });
    for step in [1, 7 * MS, i64::MAX] {
        let req = ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: i64::MIN,
            to_unix_nanos: i64::MAX,
            max_rows: 1000,
            plan: HostSeriesPlan { hostname: "h".into(), step_nanos: step }.into(),
        };
        let Ok(Partial::HostSeries(s)) = prepare(&sh.s, req).unwrap().run(MemoryPool::new(1 << 30)).unwrap().partial
        else {
            panic!("no host series")
        };
        assert_eq!(s.0.len(), 1, "step {step}");
        let start = *s.0.keys().next().unwrap();
        assert!(start <= 5 * MS && 5 * MS - start < step, "step {step}: bucket at {start}");
    }
}

/// Samples of two hosts every `every_ms` from `first_ms`, values varying and some missing.
fn host_samples(n: usize, first_ms: i64, every_ms: i64) -> Vec<sextant_model::row::HostMetric> {
    (0..n)
        .map(|i| {
            let f = i as f64;
            sextant_model::row::HostMetric {
                unix_nanos: (first_ms + i as i64 * every_ms) * MS,
                hostname: ["h1", "h2"][i % 2].into(),
                cpu_percent: (i % 5 != 0).then_some((f * 7.31) % 100.0),
                memory_used_bytes: Some(1_000_000 + i as u64 * 4099),
                memory_total_bytes: (i % 3 == 0).then_some(8 << 30),
                disk_used_percent: Some(40.0 + f / 1000.0),
                network_rx_bytes_per_sec: (i % 7 != 3).then_some(f * 0.1),
                network_tx_bytes_per_sec: None,
                ..Default::default()
            }
        })
        .collect()
}

/// Host series from per-minute rollups (stored, rolled up on read for a segment without them
/// or holding a batch aborted after it was written, and buffered), plus samples for the
/// partial minute at the end: per step, the mean of every sample of the step, each metric's
/// count exact and its mean equal up to float rounding; steps not on whole minutes are read
/// from samples.
#[test]
fn host_series_from_rollups_equal_averaging_every_sample() {
    use sextant_model::query::{HostSeriesPlan, HOST_METRICS};
    use sextant_model::row::HostMetric;
    let mut sh = Shard::new();
    let dir = sh._dir.path().to_owned();
    let ingest = |sh: &mut Shard, host_metrics: Vec<HostMetric>| {
        sh.apply_batch(RowBatch { project_id: "p".into(), host_metrics, ..Default::default() })
    };
    let (a, old, aborted, buffered) = (
        host_samples(2000, 0, 1000),
        host_samples(600, 777, 3000),
        host_samples(300, 50, 2000),
        host_samples(500, 3, 1700),
    );
    ingest(&mut sh, a.clone());
    sh.flush();
    ingest(&mut sh, old.clone());
    sh.flush();
    let (mut manifest, _) = crate::segment::Manifest::load(&dir).unwrap().unwrap();
    let newest = manifest.segments.iter().filter(|m| m.table == Table::HostMetrics).map(|m| m.id).max();
    manifest.segments.retain(|m| !(m.table == Table::HostRollups && m.summarizes == newest));
    manifest.store(&dir).unwrap();
    sh.s = SegmentShard::open(&dir).unwrap();
    ingest(&mut sh, aborted);
    sh.flush();
    sh.s.apply(sh.index + 1, Command::Abort { batch_id: sh.index as u128 });
    sh.index += 1;
    ingest(&mut sh, buffered.clone());
    let all: Vec<HostMetric> = [a, old, buffered].concat();
    check_host_series_against_every_sample(&sh, &all);
    // A batch aborted while buffered: the buffer is read sample by sample.
    ingest(&mut sh, host_samples(100, 9, 900));
    sh.s.apply(sh.index + 1, Command::Abort { batch_id: sh.index as u128 });
    sh.index += 1;
    check_host_series_against_every_sample(&sh, &all);

    fn check_host_series_against_every_sample(sh: &Shard, all: &[HostMetric]) {
        const MINUTE_MS: i64 = 60_000;
        for (from_ms, to_ms, step_ms, host) in [
            (0, 40 * MINUTE_MS, MINUTE_MS, "h1"),
            (0, 40 * MINUTE_MS + 12_345, 5 * MINUTE_MS, "h2"),
            (2 * MINUTE_MS, 10 * MINUTE_MS, 3 * MINUTE_MS, "h1"),
            (1_500, 30 * MINUTE_MS, 5 * MINUTE_MS, "h1"),
            (0, 30 * MINUTE_MS, 90_000, "h2"),
            (0, 20_000, MINUTE_MS, "h1"),
        ] {
            let plan = HostSeriesPlan { hostname: host.into(), step_nanos: step_ms * MS };
            let reply = sh.query_ms(from_ms, to_ms, plan.into());
            let Ok(Partial::HostSeries(got)) = reply.partial else { panic!("host series expected") };
            let mut want: std::collections::BTreeMap<i64, sextant_model::query::HostBucket> = Default::default();
            for m in all.iter().filter(|m| m.hostname == host && (from_ms * MS..to_ms * MS).contains(&m.unix_nanos)) {
                let start = from_ms * MS + (m.unix_nanos - from_ms * MS) / (step_ms * MS) * step_ms * MS;
                let b = want.entry(start).or_insert_with(|| sextant_model::query::HostBucket {
                    start_unix_nanos: start,
                    ..Default::default()
                });
                b.add_sample(m.values());
            }
            let case = format!("{host} {from_ms}..{to_ms} by {step_ms}");
            assert_eq!(got.0.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{case}");
            for (start, w) in &want {
                for (k, (g, w)) in got.0[start].means().into_iter().zip(w.means()).enumerate() {
                    let (g, w) = (g.map(|m| (m.count, m.sum)), w.map(|m| (m.count, m.sum)));
                    assert_eq!(g.map(|g| g.0), w.map(|w| w.0), "{case} {start} {} count", HOST_METRICS[k]);
                    if let (Some((_, g)), Some((_, w))) = (g, w) {
                        assert!(
                            (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                            "{case} {start} {}: {g} {w}",
                            HOST_METRICS[k]
                        );
                    }
                }
            }
            assert!(!want.is_empty(), "{case}");
            if (from_ms, step_ms) == (0, MINUTE_MS) && to_ms > MINUTE_MS {
                let samples = all.iter().filter(|m| m.hostname == host).count() as u64;
                assert!(reply.rows_scanned * 2 < samples, "read {} rows of {samples} samples", reply.rows_scanned);
            }
        }
    }
}

/// The hosts list: each host's latest sample in the range, wherever it is (an older segment
/// holding a host's newest sample, a newer one, the buffer), its metrics those of that sample.
#[test]
fn hosts_list_gives_each_hosts_latest_sample_in_the_range() {
    use sextant_model::query::HostsPlan;
    use sextant_model::row::HostMetric;
    let mut sh = Shard::new();
    let ingest = |sh: &mut Shard, host_metrics: Vec<HostMetric>| {
        sh.apply_batch(RowBatch { project_id: "p".into(), host_metrics, ..Default::default() })
    };
    let renamed = |mut samples: Vec<HostMetric>, host: &str| {
        samples.iter_mut().step_by(3).for_each(|m| m.hostname = host.into());
        samples
    };
    // Written late but newest for h3; h1 and h2 newest in the buffer.
    let (late, first, buffered) = (
        renamed(host_samples(300, 90_000, 700), "h3"),
        host_samples(5000, 0, 20),
        renamed(host_samples(400, 95_000, 11), "h4"),
    );
    ingest(&mut sh, late.clone());
    sh.flush();
    ingest(&mut sh, first.clone());
    sh.flush();
    ingest(&mut sh, buffered.clone());
    let all: Vec<HostMetric> = [late, first, buffered].concat();
    for (from_ms, to_ms) in [(0, 1_000_000), (0, 95_000), (50, 99_990), (90_500, 91_000), (500_000, 600_000)] {
        let reply = sh.query_ms(from_ms, to_ms, HostsPlan.into());
        let Ok(Partial::Hosts(got)) = reply.partial else { panic!("hosts expected") };
        let mut want: std::collections::BTreeMap<String, HostMetric> = Default::default();
        for m in all.iter().filter(|m| (from_ms * MS..to_ms * MS).contains(&m.unix_nanos)) {
            if want.get(&m.hostname).is_none_or(|w| m.unix_nanos > w.unix_nanos) {
                want.insert(m.hostname.clone(), m.clone());
            }
        }
        assert_eq!(got.0, want, "{from_ms}..{to_ms}");
        if to_ms == 1_000_000 {
            // Only samples from the hosts' latest minutes on are read (and the minutes).
            assert!(reply.rows_scanned * 3 < all.len() as u64 * 2, "read {} rows of {}", reply.rows_scanned, all.len());
        }
    }
}

const DAY_MS: i64 = 86_400_000;

/// A shard holding a year of spans and logs: one flushed segment a week (trace `t{w}` and
/// 100 lines, one of them matching "needle"), and the last week buffered.
fn a_year_of_weeks() -> Shard {
    let mut sh = Shard::new();
    for w in 0..53i64 {
        let at = w * 7 * DAY_MS;
        let spans = vec![span(&format!("t{w:02}"), "1", "", "web", at, 5, w % 2 == 0)];
        let logs = (0..100)
            .map(|i| LogRecord {
                unix_nanos: (at + i) * MS,
                level: LogLevel::Info,
                service: "api".into(),
                message: if i == 50 { format!("needle of week {w}") } else { format!("hay {i} of week {w}") },
                ..Default::default()
            })
            .collect();
        sh.ingest("p", spans, logs);
        if w < 52 {
            sh.flush();
        }
    }
    sh
}

fn year_query(plan: impl Into<Plan>) -> ShardQuery {
    ShardQuery {
        group: 1,
        project_id: "p".into(),
        from_unix_nanos: 0,
        to_unix_nanos: 400 * DAY_MS * MS,
        max_rows: 1_000_000,
        plan: plan.into(),
    }
}

#[test]
fn log_search_over_a_year_reads_only_the_newest_weeks_for_a_page() {
    let sh = a_year_of_weeks();
    let search = |query: &str, before: Option<LogKey>| {
        let plan = LogSearchPlan { query: query.into(), limit: 3, before, ..Default::default() };
        let reply = sh.query_at(year_query(plan));
        let Ok(Partial::Logs(page)) = reply.partial else { panic!("logs expected") };
        (page.0, reply.rows_scanned)
    };
    let messages = |page: &[sextant_model::query::KeyedLog]| -> Vec<String> {
        page.iter().map(|l| l.log.message.clone()).collect()
    };
    // Newest first across the buffer and a year of segments.
    let (needles, _) = search("needle", None);
    assert_eq!(messages(&needles), ["needle of week 52", "needle of week 51", "needle of week 50"]);
    // Every line has "week", so the rows handed to the search are the lines read: a page of
    // 3 reads the buffered week (100 lines), not the year's 5300.
    let (page, scanned) = search("week", None);
    assert_eq!(messages(&page), ["hay 99 of week 52", "hay 98 of week 52", "hay 97 of week 52"]);
    assert!(scanned <= 100, "read {scanned} lines for a page of 3");
    // After a cursor deep in the range, only lines at or before it are read: not the buffer
    // and the newer weeks again.
    let (page, scanned) = search("week", Some(needles[2].key));
    assert_eq!(messages(&page), ["hay 49 of week 50", "hay 48 of week 50", "hay 47 of week 50"]);
    assert!(scanned <= 100, "read {scanned} lines for a page after the cursor");
}

#[test]
fn trace_list_over_a_year_reads_only_the_newest_weeks_for_a_page() {
    let sh = a_year_of_weeks();
    let ids = |plan: TraceListPlan| {
        let reply = sh.query_at(year_query(plan));
        let Ok(Partial::Traces(list)) = reply.partial else { panic!("traces expected") };
        (list.0.into_iter().map(|t| t.trace_id).collect::<Vec<_>>(), reply.rows_scanned)
    };
    let (page, scanned) = ids(TraceListPlan { limit: 3, ..Default::default() });
    assert_eq!(page, ["t52", "t51", "t50"]);
    // A trace's partials may start an hour after it: the week before the page is read too.
    assert!(scanned <= 4, "read {scanned} summaries of 53 for a page of 3");
    // Filters and cursors see merged summaries as before: errors are the even weeks.
    let (errors, _) = ids(TraceListPlan { limit: 2, errors_only: true, ..Default::default() });
    assert_eq!(errors, ["t52", "t50"]);
    let before = TraceKey { start_unix_nanos: 50 * 7 * DAY_MS * MS, trace_id: "t50".into() };
    let (next, _) = ids(TraceListPlan { limit: 2, errors_only: true, before: Some(before), ..Default::default() });
    assert_eq!(next, ["t48", "t46"]);
    // A page deep into the year reads the weeks around it, not the newer ones again.
    let before = TraceKey { start_unix_nanos: 10 * 7 * DAY_MS * MS, trace_id: "t10".into() };
    let (deep, scanned) = ids(TraceListPlan { limit: 2, before: Some(before), ..Default::default() });
    assert_eq!(deep, ["t09", "t08"]);
    assert!(scanned <= 4, "read {scanned} summaries for a page of 2 deep in the year");
    // Everything, when the page is larger than the year.
    let (all, scanned) = ids(TraceListPlan { limit: 100, ..Default::default() });
    assert_eq!((all.len(), all.last().map(String::as_str), scanned), (53, Some("t00"), 53));
}

#[test]
fn estimates_count_the_row_groups_a_plan_would_open_and_the_buffer() {
    let sh = a_year_of_weeks();
    let cost = |from_day: i64, to_day: i64, plan: Plan| {
        let mut q = year_query(plan);
        (q.from_unix_nanos, q.to_unix_nanos) = (from_day * DAY_MS * MS, to_day * DAY_MS * MS);
        estimate(&sh.s, &q).unwrap()
    };
    // A span a week, the last one buffered.
    let year = cost(0, 400, ApmPlan::default().into());
    assert_eq!((year.rows, year.stops_early), (53, false));
    assert!(year.bytes > 0);
    // Four weeks of segments: their spans, not the year's; the buffered week is outside.
    assert_eq!(cost(7, 35, ApmPlan::default().into()).rows, 4);
    assert_eq!(cost(364, 400, ApmPlan::default().into()).rows, 1);
    // A query of the logs is a log search: it stops early, and counts the lines.
    let logs = cost(0, 400, LogSearchPlan { query: "hay".into(), limit: 10, ..Default::default() }.into());
    assert_eq!((logs.rows, logs.stops_early), (53 * 100, true));
    // The token index prunes: no segment holds "absent" (buffered lines are all counted).
    let none = cost(0, 400, LogSearchPlan { query: "absent".into(), limit: 10, ..Default::default() }.into());
    assert_eq!(none.rows, 100);
    // Nothing scanned while estimating, and what a real scan reads is within the estimate.
    let reply = sh.query_at(year_query(ApmPlan::default()));
    assert!(reply.rows_scanned <= year.rows && reply.rows_scanned > 0);
    assert_eq!(estimate(&sh.s, &year_query(ApmPlan::default())).unwrap(), year, "estimates are repeatable");
}

#[test]
fn a_funnel_whose_users_outgrow_the_node_memory_budget_is_refused_and_gives_it_back() {
    let mut sh = Shard::new();
    let events: Vec<sextant_model::row::Event> = (0..20_000)
        .map(|i| sextant_model::row::Event {
            uuid: format!("e{i}"),
            event: if i % 2 == 0 { "a".into() } else { "b".into() },
            distinct_id: format!("user-{}", i / 2),
            unix_nanos: (1000 + i) * MS,
            properties_json: "{}".into(),
        })
        .collect();
    sh.apply_batch(RowBatch { project_id: "p".into(), events, ..Default::default() });
    sh.flush();
    let plan = FunnelPlan {
        steps: vec!["a".into(), "b".into()],
        window_nanos: 1_000 * MS,
        strict: false,
        range_from: 0,
        range_to: 1_000_000 * MS,
        cohort: None,
    };
    let run = |pool: &std::sync::Arc<MemoryPool>| {
        prepare(&sh.s, year_query(plan.clone())).unwrap().run(pool.clone()).unwrap().partial
    };
    // 10 000 users and 20 000 rows need a few hundred KiB.
    let small = MemoryPool::new(64 << 10);
    assert_eq!(run(&small).err(), Some(Refused::Memory { budget_bytes: 64 << 10 }));
    assert_eq!(small.held(), 0, "a refused query gives its memory back");
    let enough = MemoryPool::new(64 << 20);
    let Ok(Partial::Funnel(steps)) = run(&enough) else { panic!("funnel expected") };
    assert_eq!((steps.0[0].users, steps.0[1].users), (10_000, 10_000));
    assert_eq!(enough.held(), 0, "a finished query gives its memory back");
}

#[test]
fn grouping_plans_hold_their_tables_against_the_node_memory_budget() {
    let sh = a_year_of_weeks();
    let plans: Vec<Plan> = vec![
        ApmPlan::default().into(),
        ServiceMapPlan.into(),
        TraceListPlan { limit: 100, ..Default::default() }.into(),
        sextant_model::query::ErrorsPlan::default().into(),
    ];
    for plan in plans {
        let name = format!("{plan:?}");
        let tiny = MemoryPool::new(16);
        let run =
            |pool: &std::sync::Arc<MemoryPool>| prepare(&sh.s, year_query(plan.clone())).unwrap().run(pool.clone());
        assert_eq!(run(&tiny).unwrap().partial.err(), Some(Refused::Memory { budget_bytes: 16 }), "{name}");
        let enough = MemoryPool::new(1 << 30);
        assert!(run(&enough).unwrap().partial.is_ok(), "{name}");
        assert_eq!((tiny.held(), enough.held()), (0, 0), "{name}: memory given back");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Per bucket, the events counted and the distinct users among them, over flushed and
    /// buffered rows with one user's events in several runs, with and without a cohort, equal
    /// counting every event and every (bucket, user) pair.
    #[test]
    fn event_buckets_count_every_event_and_each_user_once_per_bucket(
        rows in proptest::collection::vec((0u8..12, 0i64..(3 * 24 * 60)), 1..300),
        cut in 0usize..300,
        cohort in proptest::bool::ANY,
    ) {
        use std::collections::{BTreeSet, HashSet};
        let mut sh = Shard::new();
        let events: Vec<Event> = rows
            .iter()
            .enumerate()
            .map(|(i, &(u, minute))| Event {
                uuid: format!("e{i}"),
                event: "view".into(),
                distinct_id: format!("user-{u}"),
                unix_nanos: minute * 60_000 * MS,
                properties_json: "{}".into(),
            })
            .collect();
        let cut = cut.min(events.len());
        for (part, flush) in [(&events[..cut], true), (&events[cut..], false)] {
            sh.apply_batch(RowBatch { project_id: "p".into(), events: part.to_vec(), ..Default::default() });
            if flush {
                sh.flush();
            }
        }
        let day = 24 * 3_600_000 * MS;
        let starts: Vec<i64> = (0..3).map(|d| d * day + 6 * 3_600_000 * MS).collect();
        let members: HashSet<String> = (0..12).step_by(3).map(|u| format!("user-{u}")).collect();
        let members = cohort.then_some(&members);
        let req = ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: starts[0],
            to_unix_nanos: 3 * day,
            max_rows: 1_000_000,
            plan: EventBucketsPlan { events: vec![], bucket_starts: starts.clone(), cohort: None, counts_only: false }
                .into(),
        };
        let columns = [crate::segment::user_number::USER, "time_ns"];
        let scan = super::scan_of(&req, Table::Events, Default::default(), &columns, &crate::segment::EVENT_DICTIONARIES);
        let job = sh.s.scan(scan);
        let numbers = members.map(|m| job.user_numbers(m.iter().map(String::as_str)).into_iter().collect());
        let got = super::activity::buckets(&starts, numbers, job, &mut super::Budget::new(1_000_000)).unwrap();

        let mut want = vec![(0u64, BTreeSet::new()); starts.len()];
        for e in events.iter().filter(|e| members.is_none_or(|m| m.contains(&e.distinct_id))) {
            if (req.from_unix_nanos..req.to_unix_nanos).contains(&e.unix_nanos) {
                let b = starts.partition_point(|s| *s <= e.unix_nanos) - 1;
                want[b].0 += 1;
                want[b].1.insert(e.distinct_id.clone());
            }
        }
        let want: Vec<(u64, u64)> = want.into_iter().map(|(n, users)| (n, users.len() as u64)).collect();
        let got: Vec<(u64, u64)> = got.0.iter().map(|b| (b.count, b.unique_users)).collect();
        proptest::prop_assert_eq!(got, want);
    }
}

/// Every row of a user reads one number, wherever the row is: in a segment written before
/// numbers were stored (the format-1 fixture), in newer segments, in a compacted one, in the
/// buffer, and after a restart; two users never share one.
#[test]
fn a_user_reads_one_number_in_old_and_new_segments_the_buffer_and_after_a_restart() {
    use std::collections::HashMap;

    use crate::segment::user_number::{USER, USER_ID};
    use crate::segment::{Filter, Scan};

    let project = "6f1c1a52-9d8e-4b6f-8d0b-2c8b1e0d9a11";
    let fixture_day_ns = 1_700_000_000 / 86_400 * 86_400 * 1_000_000_000i64;
    let dir = tempfile::tempdir().unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/segment/fixtures");
    for entry in std::fs::read_dir(&fixtures).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    let mut sh = Shard { s: SegmentShard::open(dir.path()).unwrap(), index: 0, _dir: tempfile::tempdir().unwrap() };
    // The fixture holds user-0 to user-4; these add new-5 and new-6, in two segments of the
    // same day (merged by a compaction) and in the buffer.
    let events = |from: u64, users: u64| -> Vec<Event> {
        (from..from + 12)
            .map(|i| Event {
                uuid: format!("new-{i}"),
                event: "view".into(),
                // New users sort first: numbering them again in segment order would change
                // every number.
                distinct_id: match i % users {
                    k if k < 5 => format!("user-{k}"),
                    k => format!("new-{k}"),
                },
                unix_nanos: fixture_day_ns + i as i64 * 60_000 * MS,
                properties_json: "{}".into(),
            })
            .collect()
    };
    let apply = |sh: &mut Shard, events: Vec<Event>| {
        sh.apply_batch(RowBatch { project_id: project.into(), events, ..Default::default() })
    };
    let numbers = |s: &SegmentShard| -> Vec<(String, u32)> {
        let scan = Scan {
            table: Table::Events,
            project: project.into(),
            from_ns: i64::MIN,
            to_ns: i64::MAX,
            filter: Filter::default(),
            columns: vec![USER.into(), USER_ID.into()],
            dictionaries: crate::segment::EVENT_DICTIONARIES.to_vec(),
            stored_ids: false,
        };
        let mut out = Vec::new();
        for rb in s.scan(scan).run().unwrap() {
            let c = crate::segment::table::Cols(&rb);
            let (users, ids) = (c.u32(USER), c.strings(USER_ID));
            out.extend((0..rb.num_rows()).map(|i| (ids.value(i).to_owned(), users.value(i))));
        }
        out
    };
    let one_number_each = |rows: &[(String, u32)]| -> HashMap<String, u32> {
        let mut by_id: HashMap<String, u32> = HashMap::new();
        for (id, n) in rows {
            assert_eq!(*by_id.entry(id.clone()).or_insert(*n), *n, "{id} has two numbers");
        }
        let mut distinct: Vec<u32> = by_id.values().copied().collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), by_id.len(), "two users share a number: {by_id:?}");
        by_id
    };

    apply(&mut sh, events(0, 6));
    sh.flush();
    apply(&mut sh, events(12, 7));
    sh.flush();
    apply(&mut sh, events(24, 7));
    let before = one_number_each(&numbers(&sh.s));
    assert_eq!(before.len(), 7, "{before:?}");
    assert_eq!(numbers(&sh.s).len(), 15 + 36);

    // Compaction merges the day's segments (the old one with the new ones).
    let mut merged = 0;
    while let Some(job) = sh.s.compaction(i64::MAX / 1_000_000_000) {
        job.run().unwrap();
        merged += 1;
    }
    assert!(merged > 0 && sh.s.segment_stats(Table::Events).0 == 1, "one events segment left");
    assert_eq!(one_number_each(&numbers(&sh.s)), before, "a compaction keeps the numbers");

    // A restart rebuilds the table from the segments; the buffer is applied again.
    let index = sh.index;
    sh.s = SegmentShard::open(dir.path()).unwrap();
    sh.index = index - 1;
    apply(&mut sh, events(24, 7));
    let after = one_number_each(&numbers(&sh.s));
    assert_eq!(after, before, "numbers stored in segments come back after a restart");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// A cohort's size, its member list and the funnel it filters, decided by user number over
    /// flushed and buffered rows, equal each user's events counted directly. Users of another
    /// project and users whose events all come after the instant are never members, even
    /// where `did_not` admits users without events.
    #[test]
    fn cohort_members_are_the_users_whose_counts_meet_the_conditions(
        rows in proptest::collection::vec((0u8..10, 0u8..3, 0i64..(10 * 24 * 60), proptest::bool::weighted(0.2)), 1..200),
        cut in 0usize..200,
        first in (0u32..6, 0u64..3),
        second in (0u32..6, 0u64..3, proptest::bool::ANY),
        or in proptest::bool::ANY,
        at_minute in 0i64..(10 * 24 * 60),
    ) {
        use std::collections::BTreeMap;

        use sextant_model::cohort::{Condition, CountOp, Definition, Kind, Logic};
        use sextant_model::query::{CohortFilter, CohortSizesPlan, CohortUsersPlan};

        let minute = 60_000 * MS;
        let mut sh = Shard::new();
        let events: Vec<(bool, Event)> = rows
            .iter()
            .enumerate()
            .map(|(i, &(u, name, m, other))| (other, Event {
                uuid: format!("e{i}"),
                event: ["a", "b", "c"][name as usize].into(),
                distinct_id: format!("user-{u}"),
                unix_nanos: (m + 1) * minute,
                properties_json: "{}".into(),
            }))
            .collect();
        let cut = cut.min(events.len());
        for (part, flush) in [(&events[..cut], true), (&events[cut..], false)] {
            for project in ["p", "q"] {
                let mine = part.iter().filter(|(other, _)| *other == (project == "q")).map(|(_, e)| e.clone());
                sh.apply_batch(RowBatch { project_id: project.into(), events: mine.collect(), ..Default::default() });
            }
            if flush {
                sh.flush();
            }
        }
        let condition = |kind, event: &str, op: u32, count, days: i64| Condition {
            kind,
            event: event.into(),
            op: CountOp::from_code(op).unwrap(),
            count,
            range: format!("{days}d"),
            range_ns: days * 24 * 60 * minute,
        };
        let definition = Definition {
            logic: if or { Logic::Or } else { Logic::And },
            conditions: vec![
                condition(Kind::Did, "a", first.0, first.1, 7),
                condition(if second.2 { Kind::DidNot } else { Kind::Did }, "b", second.0, second.1, 2),
            ],
        };
        let at = (at_minute + 1) * minute;

        // Each user of project p with an event before the instant, and its counts.
        let mut counts: BTreeMap<String, [u64; 2]> = BTreeMap::new();
        for (_, e) in events.iter().filter(|(other, e)| !other && e.unix_nanos < at) {
            let mine = counts.entry(e.distinct_id.clone()).or_default();
            for (k, c) in definition.conditions.iter().enumerate() {
                if e.event == c.event && e.unix_nanos >= at - c.range_ns {
                    mine[k] += 1;
                }
            }
        }
        let want: Vec<String> =
            counts.into_iter().filter(|(_, n)| definition.matches(n)).map(|(id, _)| id).collect();

        let whole = || ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: 0,
            to_unix_nanos: 11 * 24 * 60 * minute,
            max_rows: 1_000_000,
            plan: CohortSizesPlan { cohorts: vec![definition.clone()], at_unix_nanos: at }.into(),
        };
        let Ok(Partial::CohortSizes(sizes)) = sh.query_at(whole()).partial else { panic!("sizes expected") };
        proptest::prop_assert_eq!(sizes.0, vec![want.len() as u64]);

        let filter = CohortFilter { definition: definition.clone(), at_unix_nanos: at };
        let after = want.first().cloned().unwrap_or_default();
        let plan = CohortUsersPlan { cohort: filter.clone(), after: after.clone(), limit: 3 };
        let Ok(Partial::CohortUsers(page)) = sh.query_at(ShardQuery { plan: plan.into(), ..whole() }).partial else {
            panic!("members expected")
        };
        let expected: Vec<String> = want.iter().filter(|id| **id > after).take(3).cloned().collect();
        proptest::prop_assert_eq!(page.0, expected);

        // As a filter: a one-step funnel over all of p's "c" events counts the members who did one.
        let plan = FunnelPlan {
            steps: vec!["c".into(), "c".into()],
            window_nanos: 11 * 24 * 60 * minute,
            range_from: 0,
            range_to: 11 * 24 * 60 * minute,
            strict: false,
            cohort: Some(filter),
        };
        let Ok(Partial::Funnel(steps)) = sh.query_at(ShardQuery { plan: plan.into(), ..whole() }).partial else {
            panic!("funnel expected")
        };
        let entered = want.iter().filter(|id| events.iter().any(|(other, e)| !other && e.event == "c" && e.distinct_id == **id)).count();
        proptest::prop_assert_eq!(steps.0[0].users, entered as u64);
    }
}
