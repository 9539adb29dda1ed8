//! Segment files written by format 1, committed under `fixtures/` with their manifest, that
//! every later build must read (docs/ARCHITECTURE.md, "Attribute encoding"). To write those
//! of a new table (the others are kept as committed), or all of them again after a
//! deliberate format change (delete them first), run
//! `cargo test -p sextant-node write_format_1_segment_fixtures -- --ignored` (and
//! `write_format_1_user_number_fixtures` for `fixtures/users/`, an events segment with user
//! numbers).

use std::path::{Path, PathBuf};

use sextant_model::query::{HostBucket, Mean, SpanTotals};
use sextant_model::row::{
    Attribute, Encoded, Event, EventRollup, HostRollup, LogLevel, ReplayEvent, SpanRollup, SpanStatus, TraceSummary,
    Value,
};
use sextant_proto::convert::persist_row::{encode_attribute, encoded_from};
use xxhash_rust::xxh3::xxh3_64;

use super::file::Effort;
use super::table::{HostMetricRow, LogRow, Row, RowRef, SpanRow, Table};
use super::{file, Manifest, Segment};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/segment/fixtures")
}

const PROJECTS: [&str; 2] = ["6f1c1a52-9d8e-4b6f-8d0b-2c8b1e0d9a11", "b2e0c7d4-1f3a-4c5b-8e9d-0a1b2c3d4e5f"];
const HOUR: i64 = 1_700_000_000 / 3600 * 3600;
const DAY: i64 = 1_700_000_000 / 86_400 * 86_400;

/// An attribute value of the fixtures.
#[derive(Clone)]
enum V {
    S(String),
    I(i64),
    D(f64),
    B(bool),
    A(Vec<V>),
    /// A value with none of its kinds set.
    Unset,
}

/// `None` for [`V::Unset`], which the domain has no value for.
fn value(v: V) -> Option<Value> {
    Some(match v {
        V::S(s) => Value::String(s),
        V::I(i) => Value::Int(i),
        V::D(d) => Value::Double(d),
        V::B(b) => Value::Bool(b),
        V::A(a) => Value::Array(a.into_iter().filter_map(value).collect()),
        V::Unset => return None,
    })
}

/// Attributes as a row holds them (encoded), sorted by key as segments store them.
fn attributes(mut kvs: Vec<(&str, Option<V>)>) -> Encoded {
    kvs.sort_by_key(|(key, _)| *key);
    encoded_from(kvs.into_iter().map(|(key, v)| {
        let unset = matches!(v, Some(V::Unset));
        let mut encoded = encode_attribute(Attribute { key: key.into(), value: v.and_then(value) });
        if unset {
            // Field 2 (the value), empty.
            encoded.extend_from_slice(&[2 << 3 | 2, 0]);
        }
        encoded
    }))
}

/// Every kind of value, keys frequent enough for columns of their own (whole, split with
/// decimal and text tails, integer) and rare ones kept with the rest.
fn span_attributes(i: u64) -> Encoded {
    let mut kvs: Vec<(&str, Option<V>)> = vec![
        ("array", Some(V::A(vec![V::S(format!("x{i}")), V::I(i as i64), V::B(i.is_multiple_of(2))]))),
        ("count", Some(if i == 7 { V::S("many".into()) } else { V::I(i as i64 * 1_000_003) })),
        ("http.status_code", Some(V::I([200, 404, 500][i as usize % 3]))),
        ("k8s.pod.name", Some(V::S(format!("checkout-{}", 48_213 + i * 7_919)))),
        ("none", None),
        ("ratio", Some(V::D(i as f64 / 8.0 - 1.5))),
        ("region", Some(V::S(["eu-1", "us-2"][i as usize % 2].into()))),
        ("sampled", Some(V::B(i.is_multiple_of(3)))),
        ("session", Some(V::S(format!("sess-{:05x}", 0xa7f30 + i * 37)))),
        ("unset", Some(V::Unset)),
    ];
    if i == 5 {
        kvs.insert(0, ("", Some(V::S("empty key".into()))));
        kvs.push(("rare", Some(V::S("only once".into()))));
        kvs.push(("rare", Some(V::I(2))));
        kvs.push(("ünïcødé", Some(V::S("välue".into()))));
    }
    attributes(kvs)
}

fn trace_id(t: u64) -> String {
    format!("{:032x}", 0x5b8e_f3a2_0000_0000_0000_0000_0000_0000_u128 + u128::from(t) * 0x1_0000_0001)
}

fn span_id(i: u64) -> String {
    format!("{:016x}", 0x00f0_67aa_0ba9_02b7_u64 + i * 0x1_0001)
}

fn spans() -> Vec<Row> {
    (0..48u64)
        .map(|i| {
            let t = i / 6;
            let root = i % 6 == 0;
            Row::Span(SpanRow {
                trace_id: if t == 7 { "not-hex-trace".into() } else { trace_id(t) },
                span_id: span_id(i),
                parent_span_id: match (root, i) {
                    (true, _) => String::new(),
                    (false, 10) => "feedfacecafebeef".into(),
                    _ => span_id(i - i % 6),
                },
                service_name: ["web", "api", "db"][i as usize % 3].into(),
                operation: format!("GET /items/{}", i % 4),
                start_unix_nanos: HOUR * 1_000_000_000 + i as i64 * 1_000_000,
                duration_nanos: (i + 1) * 1_000,
                status: [SpanStatus::Unset, SpanStatus::Ok, SpanStatus::Error][i as usize % 3],
                attributes: span_attributes(i),
            })
        })
        .collect()
}

fn trace_summaries() -> Vec<Row> {
    (0..4u64)
        .map(|t| {
            Row::TraceSummary(TraceSummary {
                trace_id: trace_id(t),
                start_unix_nanos: HOUR * 1_000_000_000 + t as i64 * 6_000_000,
                end_unix_nanos: HOUR * 1_000_000_000 + t as i64 * 6_000_000 + 5_123_456,
                root_service: if t == 3 { String::new() } else { "web".into() },
                root_operation: if t == 3 { String::new() } else { "GET /items/0".into() },
                span_count: 6,
                error_count: t as u32 % 2,
                services: if t == 2 { Vec::new() } else { vec!["api".into(), "db".into(), "web".into()] },
            })
        })
        .collect()
}

fn logs() -> Vec<Row> {
    (0..24u64)
        .map(|i| {
            let mut kvs: Vec<(&str, Option<V>)> = vec![
                ("code.lineno", Some(V::I(100 + i as i64))),
                ("logger", Some(V::S("checkout.payments".into()))),
                ("retry", Some(V::B(i % 4 == 0))),
                ("user.id", Some(V::S(format!("u-{}", 40_000 + i * 13)))),
            ];
            if i % 5 == 0 {
                kvs.push(("weight", Some(V::D(0.5 * i as f64))));
            }
            Row::Log(LogRow {
                unix_nanos: HOUR * 1_000_000_000 + i as i64 * 250_000_000,
                level: LogLevel::from_code((i % 7) as i32),
                service: ["web", "api"][i as usize % 2].into(),
                message: format!("charge {i} declined: card_declined (attempt {})", i % 3),
                trace_id: if i % 3 == 0 { String::new() } else { trace_id(i / 3) },
                span_id: if i % 3 == 0 { String::new() } else { span_id(i) },
                attributes: attributes(kvs),
            })
        })
        .collect()
}

fn host_metrics() -> Vec<Row> {
    (0..12u64)
        .map(|i| {
            let some = |x: f64| (i % 4 != 1).then_some(x);
            Row::HostMetric(HostMetricRow {
                unix_nanos: HOUR * 1_000_000_000 + i as i64 * 10_000_000_000,
                hostname: format!("host-{}", i % 2),
                cpu_percent: some(12.5 + i as f64),
                memory_used_bytes: (i % 3 != 2).then_some(1 << 30),
                memory_total_bytes: Some(16 << 30),
                disk_used_percent: some(40.25),
                network_rx_bytes_per_sec: some(1_000.0 * i as f64),
                network_tx_bytes_per_sec: (i % 2 == 0).then_some(512.5),
                attributes: attributes(vec![
                    ("host.arch", Some(V::S("amd64".into()))),
                    ("os.type", Some(V::S("linux".into()))),
                    ("cores", Some(V::I(8))),
                ]),
            })
        })
        .collect()
}

fn events() -> Vec<Row> {
    (0..20u64)
        .map(|i| {
            Row::Event(Event {
                uuid: if i % 4 == 3 { String::new() } else { format!("01890a5d-ac96-774b-bcce-b302099a{:04x}", i) },
                event: ["$pageview", "signup", "purchase"][i as usize % 3].into(),
                distinct_id: format!("user-{}", i % 5),
                unix_nanos: DAY * 1_000_000_000 + i as i64 * 60_000_000_000,
                properties_json: format!(r#"{{"plan":"pro","amount":{i},"nested":{{"ok":true}}}}"#),
            })
        })
        .collect()
}

fn replays() -> Vec<Row> {
    (0..10u64)
        .map(|i| {
            Row::Replay(ReplayEvent {
                session_id: format!("session-{}", i % 2),
                distinct_id: "user-1".into(),
                window_id: format!("window-{}", i % 3),
                unix_nanos: DAY * 1_000_000_000 + i as i64 * 1_000_000_000,
                event_type: (i % 6) as i32,
                data_json: format!(r#"{{"source":{},"x":{i}}}"#, i % 4),
                uuid: format!("replay-{i}"),
            })
        })
        .collect()
}

fn span_rollups() -> Vec<Row> {
    let durations: [&[(i64, bool)]; 4] = [
        &[(1_500_000, false), (2_000_000, true), (0, false)],
        &[(250_000_000, false)],
        &[(7, false), (40_000_000_000, true), (i64::MAX, false)],
        &[],
    ];
    (0..12u32)
        .map(|i| {
            let mut totals = SpanTotals::default();
            for &(ns, error) in durations[i as usize % 4] {
                totals.add(ns, error);
            }
            Row::SpanRollup(SpanRollup {
                service: format!("svc-{}", i % 3),
                operation: format!("GET /{}", i % 2),
                bucket_unix_nanos: (HOUR + 60 * i64::from(i / 3)) * 1_000_000_000,
                totals,
            })
        })
        .collect()
}

/// The span rollups' rows in buckets of `width` seconds from `first`, six a bucket, as `row`.
fn span_rollups_per(first: i64, width: i64, row: fn(SpanRollup) -> Row) -> Vec<Row> {
    let rows = span_rollups().into_iter().enumerate().map(|(i, r)| match r {
        Row::SpanRollup(r) => {
            row(SpanRollup { bucket_unix_nanos: (first + width * (i as i64 / 6)) * 1_000_000_000, ..r })
        }
        other => other,
    });
    rows.collect()
}

fn span_hour_rollups() -> Vec<Row> {
    span_rollups_per(HOUR, 3600, Row::SpanHourRollup)
}

fn span_day_rollups() -> Vec<Row> {
    span_rollups_per(DAY, 86_400, Row::SpanDayRollup)
}

fn event_rollups() -> Vec<Row> {
    (0..9u64)
        .map(|i| {
            Row::EventRollup(EventRollup {
                event: ["$pageview", "signup", "purchäse"][i as usize % 3].into(),
                hour_unix_nanos: (DAY + 3600 * (i as i64 / 2)) * 1_000_000_000,
                count: [1, 7, 1 << 40][i as usize % 3],
            })
        })
        .collect()
}

fn host_rollups() -> Vec<Row> {
    (0..6u64)
        .map(|i| {
            let mean = |sum: f64, count: u64| (i % 3 != 1).then_some(Mean { sum, count });
            Row::HostRollup(HostRollup {
                hostname: format!("host-{}", i % 2),
                means: HostBucket {
                    start_unix_nanos: (HOUR + 60 * (i as i64 / 2)) * 1_000_000_000,
                    cpu_percent: mean(150.75 + i as f64, 6),
                    memory_used_bytes: Some(Mean { sum: (6u64 << 30) as f64, count: 6 }),
                    memory_total_bytes: mean(f64::from(u32::MAX) * 4.0, 4),
                    disk_used_percent: None,
                    network_rx_bytes_per_sec: mean(0.0, 1),
                    network_tx_bytes_per_sec: mean(1e300, u64::MAX),
                },
            })
        })
        .collect()
}

/// A fixture segment: its table, time bucket, and rows (with their projects) in segment order.
type FixtureSegment = (Table, i64, Vec<(&'static str, Row)>);

fn fixture_rows() -> Vec<FixtureSegment> {
    let with_projects = |rows: Vec<Row>, split: usize| {
        let mut rows: Vec<(&'static str, Row)> =
            rows.into_iter().enumerate().map(|(i, r)| (PROJECTS[usize::from(i >= split)], r)).collect();
        rows.sort_by(|a, b| (a.0, a.1.sort_key()).cmp(&(b.0, b.1.sort_key())));
        rows
    };
    vec![
        (Table::Spans, HOUR, with_projects(spans(), 42)),
        (Table::TraceSummaries, HOUR, with_projects(trace_summaries(), 4)),
        (Table::Logs, HOUR, with_projects(logs(), 20)),
        (Table::HostMetrics, HOUR, with_projects(host_metrics(), 12)),
        (Table::Events, DAY, with_projects(events(), 15)),
        (Table::ReplayEvents, DAY, with_projects(replays(), 10)),
        (Table::SpanRollups, HOUR, with_projects(span_rollups(), 8)),
        (Table::EventRollups, DAY, with_projects(event_rollups(), 6)),
        (Table::HostRollups, HOUR, with_projects(host_rollups(), 4)),
        (Table::SpanHourRollups, HOUR, with_projects(span_hour_rollups(), 6)),
        (Table::SpanDayRollups, DAY, with_projects(span_day_rollups(), 6)),
    ]
}

const BATCHES: [u128; 2] = [0x0123_4567_89ab_cdef_fedc_ba98_7654_3210, 7];

#[test]
#[ignore = "writes the fixtures; run after a deliberate format change"]
fn write_format_1_segment_fixtures() {
    let dir = fixtures();
    std::fs::create_dir_all(&dir).unwrap();
    let committed = Manifest::load(&dir).unwrap().map(|(m, _)| m.segments).unwrap_or_default();
    let mut manifest = Manifest::default();
    for (id, (table, hour, rows)) in fixture_rows().into_iter().enumerate() {
        if let Some(meta) = committed.iter().find(|m| m.id == id as u64 + 1 && dir.join(&m.file.name).exists()) {
            manifest.segments.push(meta.clone());
            continue;
        }
        let refs: Vec<RowRef<'_>> =
            rows.iter().enumerate().map(|(i, (project, row))| RowRef::new(project, row, (i % 2) as u32)).collect();
        let mut meta = file::write(&dir, id as u64 + 1, table, hour, &refs, &BATCHES, None, Effort::Final).unwrap();
        if table == Table::SpanDayRollups {
            meta.covers = vec![1];
        } else if table.is_derived() {
            meta.summarizes = Some(1);
        }
        manifest.segments.push(meta);
    }
    manifest.next_segment = manifest.segments.len() as u64 + 1;
    manifest.store(&dir).unwrap();
}

#[test]
fn segments_written_by_format_1_still_read() {
    let dir = fixtures();
    let (manifest, _) = Manifest::load(&dir).unwrap().expect("the fixture manifest");
    let expected = fixture_rows();
    assert_eq!(manifest.segments.len(), expected.len());
    assert_eq!(manifest.next_segment, expected.len() as u64 + 1);
    for (meta, (table, hour, rows)) in manifest.segments.iter().zip(expected) {
        let name = table.name();
        assert_eq!((meta.table, meta.hour, meta.rows), (table, hour, rows.len() as u64), "{name}");
        let day = table == Table::SpanDayRollups;
        assert_eq!(meta.summarizes, (table.is_derived() && !day).then_some(1), "{name}");
        assert_eq!(meta.covers, if day { vec![1] } else { vec![] }, "{name}");
        let mut projects: Vec<String> = rows.iter().map(|(p, _)| (*p).to_owned()).collect();
        projects.dedup();
        assert_eq!(meta.projects, projects, "{name}");
        let times = rows.iter().map(|(_, r)| r.time_ns());
        assert_eq!((meta.min_ns, meta.max_ns), (times.clone().min().unwrap(), times.max().unwrap()), "{name}");
        let bytes = std::fs::read(dir.join(&meta.file.name)).unwrap();
        assert_eq!((bytes.len() as u64, xxh3_64(&bytes)), (meta.file.len, meta.file.xxh3), "{name}");

        let segment = Segment::open(&dir, meta.clone()).unwrap();
        assert_eq!(*segment.batches, BATCHES, "{name}");
        let read = segment.read(None).unwrap();
        assert_eq!(read.len(), rows.len(), "{name}");
        for (i, ((project, row, batch), (want_project, want))) in read.into_iter().zip(rows).enumerate() {
            assert_eq!((project.as_str(), batch), (want_project, (i % 2) as u32), "{name} row {i}");
            assert_eq!(row, want, "{name} row {i}");
        }
    }
}

/// The attributes of one span, value by value, as the segment reader decodes them.
#[test]
fn fixture_attributes_decode_to_their_values() {
    let dir = fixtures();
    let (manifest, _) = Manifest::load(&dir).unwrap().expect("the fixture manifest");
    let segment = Segment::open(&dir, manifest.segments[0].clone()).unwrap();
    let columns: Vec<String> = segment.column_bytes().into_iter().map(|(name, _)| name).collect();
    // Every way a segment stores an attribute value is in the fixture.
    for column in
        ["attr:array", "attr.int:count", "attr.head:k8s.pod.name", "attr.tail:k8s.pod.name", "attr.tail:session"]
    {
        assert!(columns.iter().any(|c| c == column), "{column} in {columns:?}");
    }
    let spans = segment.read(None).unwrap();
    let span = spans
        .iter()
        .find_map(|(_, row, _)| match row {
            Row::Span(s) if s.span_id == span_id(5) => Some(s),
            _ => None,
        })
        .expect("span 5");
    let stored = super::attribute::stored(&span.attributes);
    let decoded: Vec<(String, Option<Value>)> =
        super::attribute::decode_stored(&stored).into_iter().map(|a| (a.key, a.value)).collect();
    let s = |s: &str| value(V::S(s.into()));
    let expected: Vec<(String, Option<Value>)> = vec![
        ("".into(), s("empty key")),
        ("array".into(), value(V::A(vec![V::S("x5".into()), V::I(5), V::B(false)]))),
        ("count".into(), value(V::I(5_000_015))),
        ("http.status_code".into(), value(V::I(500))),
        ("k8s.pod.name".into(), s("checkout-87808")),
        ("none".into(), None),
        ("rare".into(), s("only once")),
        ("rare".into(), value(V::I(2))),
        ("ratio".into(), value(V::D(-0.875))),
        ("region".into(), s("us-2")),
        ("sampled".into(), value(V::B(false))),
        ("session".into(), s("sess-a7fe9")),
        // A value with none of its kinds set decodes as none.
        ("unset".into(), None),
        ("ünïcødé".into(), s("välue")),
    ];
    assert_eq!(decoded, expected);
}

/// Format 1 with user numbers: an events segment with its `user` column, written by the
/// ignored test below, in `fixtures/users/`.
fn user_fixtures() -> PathBuf {
    fixtures().join("users")
}

/// The fixture's events and, for each, the number a fresh table gives its user.
fn numbered_events() -> (Vec<(&'static str, Row)>, Vec<u32>) {
    let rows = fixture_rows().into_iter().find(|(t, _, _)| *t == Table::Events).expect("events").2;
    let hashes: Vec<u128> = rows
        .iter()
        .map(|(_, r)| match r {
            Row::Event(e) => super::user_number::id_hash(&e.distinct_id),
            _ => unreachable!("events only"),
        })
        .collect();
    let numbers = super::user_number::UserNumbers::default().numbers(&hashes);
    (rows, numbers)
}

#[test]
#[ignore = "writes the fixtures; run after a deliberate format change"]
fn write_format_1_user_number_fixtures() {
    let dir = user_fixtures();
    std::fs::create_dir_all(&dir).unwrap();
    let (rows, numbers) = numbered_events();
    let refs: Vec<RowRef<'_>> = rows.iter().map(|(project, row)| RowRef::new(project, row, 0)).collect();
    let meta = file::write(&dir, 1, Table::Events, DAY, &refs, &BATCHES, Some(&numbers), Effort::Final).unwrap();
    let manifest = Manifest { segments: vec![meta], next_segment: 2, ..Default::default() };
    manifest.store(&dir).unwrap();
}

#[test]
fn user_numbers_written_by_format_1_still_read() {
    use super::user_number::{id_hash, UserNumbers, USER, USER_ID};
    let dir = user_fixtures();
    let (manifest, _) = Manifest::load(&dir).unwrap().expect("the fixture manifest");
    let segment = std::sync::Arc::new(Segment::open(&dir, manifest.segments[0].clone()).unwrap());
    let (rows, numbers) = numbered_events();
    assert!(segment.has_user_numbers());
    let mut stored = Vec::new();
    segment.each_user(|_, n| stored.extend_from_slice(n.expect("numbers stored"))).unwrap();
    assert_eq!(stored, numbers);
    // A shard opening this segment takes its numbers; a new user gets the next one.
    let table = UserNumbers::rebuild(&[segment.clone()]).unwrap();
    let ids: Vec<u128> = rows
        .iter()
        .map(|(_, r)| match r {
            Row::Event(e) => id_hash(&e.distinct_id),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(table.numbers(&ids), numbers);
    let next = numbers.iter().max().unwrap() + 1;
    assert_eq!(table.numbers(&[id_hash("someone new")]), [next]);
    // A scan asking for numbers reads them, not the ids.
    let scan = super::Scan {
        table: Table::Events,
        project: PROJECTS[0].into(),
        from_ns: i64::MIN,
        to_ns: i64::MAX,
        filter: Default::default(),
        columns: vec![USER.into()],
        dictionaries: Vec::new(),
        stored_ids: false,
    };
    let batches = segment.scan(&scan, &|_| false).unwrap();
    let read: Vec<u32> = batches.iter().flat_map(|rb| super::table::Cols(rb).u32(USER).values().to_vec()).collect();
    let of_project: Vec<u32> =
        rows.iter().zip(&numbers).filter(|((p, _), _)| *p == PROJECTS[0]).map(|(_, n)| *n).collect();
    assert_eq!(read, of_project);
    assert!(batches.iter().all(|rb| rb.column_by_name(USER_ID).is_none()));
}
