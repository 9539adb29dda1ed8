//! One function per parser of untrusted input. Each takes the fuzzer's bytes, runs the parser
//! the way the server does, and uses what it returns; an `Err` is a correct answer, a panic
//! or an allocation over [`crate::alloc`]'s cap is a finding.

use std::io::Read;
use std::sync::OnceLock;

use axum::http::{header, HeaderMap, HeaderValue};
use bytes::Bytes;
use sextant_model::analytics::{self, BatchBody, ReplayBody, MAX_EVENTS_BODY, MAX_REPLAY_BODY, MAX_REPLAY_EVENTS};
use sextant_model::capture::recording::{self, Inflated};
use sextant_model::capture::{self, TokenPlaces};
use sextant_model::cohort::{self, CohortInput, Definition};
use sextant_model::ingest::{self, LogsBody, MetricsBody, SpansBody, MAX_OBSERVABILITY_BODY};
use sextant_model::text::{tokens, LogQuery};
use sextant_model::time::{format_nanos, parse_query_time, TimeInput};
use sextant_node::segment::file::{write as write_segment, Effort};
use sextant_node::segment::token_index::TokenIndex;
use sextant_node::segment::user_number;
use sextant_node::segment::{Filter, Manifest, Row, Scan, Segment, SegmentMeta, Table};
use sextant_proto::convert::persist_row::Packed;
use sextant_router::http::body;
use sextant_router::http::connection::ServerLimits;
use sextant_router::http::error::ApiError;
use sextant_router::ingest::otlp::http::{decode as decode_otlp, Format};
use sextant_router::ingest::otlp::mapping::{self, Mapped};
use sextant_router::ingest::otlp::wire::{self, Root};
use sextant_router::query::{decode_cursor, params, traces};

/// A fixed receive time (2026-01-01), so runs are reproducible.
const NOW_NS: i64 = 1_767_225_600_000_000_000;

/// A JSON request body as the router reads it: gzip when it starts with gzip's magic bytes
/// (sent with `Content-Encoding: gzip`), then parsed into `T`.
fn read_json<T: serde::de::DeserializeOwned>(data: &[u8], limit: usize) -> Option<T> {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if data.starts_with(&[0x1f, 0x8b]) {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    let bytes = body::read(&headers, Ok(Bytes::copy_from_slice(data)), limit).ok()?;
    body::parse_json::<T>(&bytes).ok()
}

/// `POST /v1/traces`.
pub fn ingest_spans(data: &[u8]) {
    if let Some(b) = read_json::<SpansBody>(data, MAX_OBSERVABILITY_BODY) {
        if let Ok(items) = b.spans.into_items() {
            let _ = ingest::validate_all(items, ingest::validate_span);
        }
    }
}

/// `POST /v1/logs`.
pub fn ingest_logs(data: &[u8]) {
    if let Some(b) = read_json::<LogsBody>(data, MAX_OBSERVABILITY_BODY) {
        if let Ok(items) = b.logs.into_items() {
            let _ = ingest::validate_all(items, ingest::validate_log);
        }
    }
}

/// `POST /v1/metrics/infrastructure`.
pub fn ingest_metrics(data: &[u8]) {
    if let Some(b) = read_json::<MetricsBody>(data, MAX_OBSERVABILITY_BODY) {
        if let Ok(items) = b.metrics.into_items() {
            let _ = ingest::validate_all(items, ingest::validate_host_metric);
        }
    }
}

/// `POST /v1/batch`.
pub fn analytics_batch(data: &[u8]) {
    if let Some(b) = read_json::<BatchBody>(data, MAX_EVENTS_BODY) {
        if let Ok(items) = b.events.into_items() {
            let _ = ingest::validate_all(items, |i, e, errors| analytics::validate_event(i, e, NOW_NS, errors));
        }
    }
}

/// `POST /v1/replay/events`.
pub fn analytics_replay(data: &[u8]) {
    if let Some(b) = read_json::<ReplayBody>(data, MAX_REPLAY_BODY) {
        let _ = analytics::validate_replay(b, &mut Vec::new());
    }
}

/// PostHog capture (`/batch/`, `/e/`, ...). An input starting with `?` carries the query string
/// on its first line (`?compression=gzip-js`, `?compression=lz64`); then `G\n` sends
/// `Content-Encoding: gzip`. The
/// rest is the body: JSON, gzip (also by its magic bytes) or a `data=<base64>` form. The steps
/// are the router's (`capture::Shape::Posthog`, private): the token search over the decoded
/// stream, then the whole text decoded, un-wrapped and parsed, each event validated, and the
/// recordings of `$snapshot` events expanded and validated.
pub fn posthog_capture(data: &[u8]) {
    let (query, rest) = match data.strip_prefix(b"?") {
        Some(q) => match q.iter().position(|&b| b == b'\n') {
            Some(n) => (String::from_utf8_lossy(&q[..n]).into_owned(), &q[n + 1..]),
            None => (String::from_utf8_lossy(q).into_owned(), &[][..]),
        },
        None => (String::new(), data),
    };
    let (gzip_header, raw) = match rest.strip_prefix(b"G\n") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let limit = MAX_EVENTS_BODY;
    // `?compression=lz64` (older posthog-js): the body becomes the JSON it decompresses to.
    let lz64_json;
    let raw = if query.split('&').any(|p| p == "compression=lz64") {
        let Ok(text) = capture::form_data(raw) else { return };
        match capture::lz64::decompress(&text, limit, &mut |_| Ok::<(), ()>(())) {
            Ok(json) => {
                lz64_json = json;
                &lz64_json[..]
            }
            Err(_) => return,
        }
    } else {
        raw
    };
    let gzip = gzip_header || query.split('&').any(|p| p == "compression=gzip-js") || raw.starts_with(&[0x1f, 0x8b]);
    let stream: Box<dyn Read + '_> =
        if gzip { Box::new(flate2::read::GzDecoder::new(raw).take(limit as u64)) } else { Box::new(raw) };
    let _ = capture::find_token(capture::posthog_json(stream), TokenPlaces::Posthog);
    let text = if gzip {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        match body::read(&headers, Ok(Bytes::copy_from_slice(raw)), limit) {
            Ok(t) => t.to_vec(),
            Err(_) => return,
        }
    } else {
        raw.to_vec()
    };
    let json = if capture::is_form(&text) {
        let mut out = Vec::new();
        if capture::posthog_json(&text[..]).take(limit as u64 + 1).read_to_end(&mut out).is_err() || out.len() > limit {
            return;
        }
        out
    } else {
        text
    };
    let Ok(parsed) = capture::posthog_body(&json) else { return };
    if let Ok(events) = parsed.events.into_items() {
        let _ = ingest::validate_all(events, |i, e, errors| analytics::validate_event(i, e, NOW_NS, errors));
    }
    // `$snapshot` events: the router's `ingest::posthog::replay_events`, whose expansion of
    // what posthog-js compressed is bounded by the replay limit.
    let mut errors = Vec::new();
    let found: Vec<_> = parsed.snapshots.into_iter().filter_map(|s| recording::parse(s, &mut errors)).collect();
    if found.iter().map(|r| r.len()).sum::<usize>() > MAX_REPLAY_EVENTS {
        return;
    }
    let mut left = MAX_REPLAY_BODY;
    let mut inflate = |gz: &[u8]| match body::gunzip(gz, left, &mut |_| Ok(())) {
        Ok(out) => {
            left -= out.len();
            Ok(out)
        }
        Err(ApiError::BadRequest(_, why)) => Err(Inflated::Invalid(why)),
        Err(refused) => Err(Inflated::Refused(refused)),
    };
    for r in found {
        if r.validate(&mut inflate, &mut errors).is_err() {
            return;
        }
    }
}

/// OTLP/HTTP bodies (`POST /v1/traces`, `/v1/logs`, `/v1/metrics`; gRPC decodes the same
/// messages): the first byte chooses the signal, the rest is the body, gzip when it starts
/// with gzip's magic bytes. The router's steps: the decoded cost charged before decoding (a
/// body the budget cannot hold is refused, not decoded), the message decoded, then mapped and
/// validated item by item.
/// Returns how many rows the body mapped to, when it decoded.
pub fn otlp(format: Format, data: &[u8]) -> Option<usize> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    let (&signal, rest) = data.split_first()?;
    let bytes = if rest.starts_with(&[0x1f, 0x8b]) {
        body::gunzip(rest, MAX_OBSERVABILITY_BODY, &mut |_| Ok(())).ok()?
    } else {
        rest.to_vec()
    };
    match signal % 3 {
        0 => otlp_signal::<ExportTraceServiceRequest, _>(format, &bytes, Root::Traces, |r| {
            mapping::spans::<Packed>(&r.resource_spans)
        }),
        1 => otlp_signal::<ExportLogsServiceRequest, _>(format, &bytes, Root::Logs, |r| {
            mapping::logs::<Packed>(&r.resource_logs)
        }),
        _ => otlp_signal::<ExportMetricsServiceRequest, _>(format, &bytes, Root::Metrics, |r| {
            mapping::host_metrics::<Packed>(&r.resource_metrics)
        }),
    }
}

fn otlp_signal<T: prost::Message + Default + serde::de::DeserializeOwned, R>(
    format: Format,
    bytes: &[u8],
    root: Root,
    map: impl Fn(&T) -> Mapped<R>,
) -> Option<usize> {
    let cost = match format {
        Format::Protobuf => wire::decoded_cost(bytes, root).ok()?,
        Format::Json => wire::json_cost(bytes, root).ok()?,
    };
    if cost.saturating_add(bytes.len()) > ServerLimits::default().body_budget_bytes {
        return None;
    }
    let request = decode_otlp::<T>(format, bytes).ok()?;
    let mapped = map(&request);
    let _ = mapped.message();
    assert!(
        mapped.rows.len() <= mapping::MAX_OTLP_ITEMS,
        "at most {} items stored per request",
        mapping::MAX_OTLP_ITEMS
    );
    Some(mapped.rows.len())
}

/// `POST /v1/traces`, `/v1/logs`, `/v1/metrics` in binary protobuf (and OTLP/gRPC).
pub fn otlp_protobuf(data: &[u8]) {
    let _ = otlp(Format::Protobuf, data);
}

/// `POST /v1/traces`, `/v1/logs`, `/v1/metrics` in OTLP/JSON.
pub fn otlp_json(data: &[u8]) {
    let _ = otlp(Format::Json, data);
}

/// The log search language (`q` of `/api/v1/logs/search`).
pub fn log_query(data: &[u8]) {
    let q = String::from_utf8_lossy(data);
    if let Ok(parsed) = LogQuery::parse(&q) {
        let _ = parsed.required_terms();
        let words: Vec<String> = tokens(&q).collect();
        let _ = parsed.matches_words(&words);
    }
}

/// Cohort definitions (`POST /api/cohorts`): parsed, validated, and every valid definition
/// goes through its stored form (proto) and back unchanged.
pub fn cohort_conditions(data: &[u8]) {
    let Ok(input) = body::parse_json::<CohortInput>(data) else { return };
    let Ok((_, def)) = cohort::validate(&input) else { return };
    let _ = def.to_json();
    let _ = def.longest_range_ns();
    let _ = def.matches_without_events();
    let counts: Vec<u64> = (0..def.conditions.len() as u64).collect();
    let _ = def.matches(&counts);
    // Shards get the proto (ranges in nanoseconds, not their text).
    let sent = sextant_proto::CohortDefinition::from(&def);
    let back = Definition::try_from(&sent).expect("a validated definition reads back");
    assert_eq!(sextant_proto::CohortDefinition::from(&back), sent, "a validated definition survives the plan");
}

/// Time values: JSON timestamps of ingest bodies, query-string `from`/`to`, epoch
/// milliseconds over the whole f64 range and nanoseconds over the whole i64 range.
pub fn time_values(data: &[u8]) {
    let mut values: Vec<TimeInput> = Vec::new();
    if let Ok(t) = serde_json::from_slice::<TimeInput>(data) {
        values.push(t);
    }
    if let Some(b) = data.get(..8) {
        let b: [u8; 8] = b.try_into().expect("8 bytes");
        values.push(TimeInput::EpochMillis(f64::from_le_bytes(b)));
        values.push(TimeInput::EpochNanos(i64::from_le_bytes(b)));
    }
    for t in values {
        if let Ok(ns) = t.to_unix_nanos() {
            let _ = format_nanos(ns);
        }
    }
    if let Ok(ns) = parse_query_time(&String::from_utf8_lossy(data)) {
        let _ = format_nanos(ns);
    }
}

/// The query parameters every read shares: `from`, `to`, `limit`, `allow_partial`,
/// lists, millisecond durations and cursors.
pub fn query_params(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    let Ok(query) = params::parse::<traces::ListQuery>(Some(&raw)) else { return };
    let params = &query.params;
    let _ = params.limit();
    let _ = params.allow_partial();
    let _ = params::list_of("service", query.service.as_deref());
    let _ = params::millis("min_duration_ms", query.min_duration_ms.as_deref());
    let _ = decode_cursor(params);
    for default_ns in [sextant_router::query::HOUR_NS, 366 * 24 * sextant_router::query::HOUR_NS, i64::MAX] {
        if let Ok((from, to)) = params.range_or(default_ns, NOW_NS) {
            assert!(from < to, "a range is never empty or reversed");
        }
    }
}

/// Hashes of term lists for the token index probes.
const PROBES: [u32; 4] = [0, 1, 0x8000_0000, u32::MAX];

/// The token index of a log segment's footer, both encodings.
pub fn token_index(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for index in [TokenIndex::decode(&text), TokenIndex::decode_legacy(&text)].into_iter().flatten() {
        for rg in 0..index.groups.len() + 1 {
            let _ = index.may_contain_all(rg, &PROBES);
        }
    }
}

/// Real files written by the code: the seeds that [`manifest`] and [`segment`] corrupt.
struct Written {
    manifest: Vec<u8>,
    segments: Vec<(SegmentMeta, Bytes)>,
}

fn written() -> &'static Written {
    static WRITTEN: OnceLock<Written> = OnceLock::new();
    WRITTEN.get_or_init(|| {
        use sextant_model::row::{Attribute, Event, LogLevel, LogRecord, Span, Value};
        use sextant_node::segment::table::RowRef;
        use sextant_proto::convert::persist_row::encode_attributes;
        let dir = tempfile::tempdir().expect("temporary directory");
        let attr = |k: &str, v: String| Attribute { key: k.into(), value: Some(Value::String(v)) };
        let logs: Vec<Row> = (0..300u64)
            .map(|i| {
                Row::Log(LogRecord {
                    unix_nanos: NOW_NS + i as i64 * 1_000_000,
                    level: LogLevel::from_code((i % 6) as i32 + 1),
                    service: ["api", "web", "db"][i as usize % 3].into(),
                    message: format!("request {i} took {} ms for user-{}", i * 7 % 1000, i % 13),
                    trace_id: format!("{:032x}", i / 3),
                    span_id: format!("{:016x}", i),
                    attributes: encode_attributes(vec![
                        attr("region", format!("eu-{}", i % 2)),
                        attr("pod", format!("pod-{i}")),
                    ]),
                })
            })
            .collect();
        let spans: Vec<Row> = (0..300u64)
            .map(|i| {
                Row::Span(Span {
                    trace_id: format!("{:032x}", i / 4),
                    span_id: format!("{:016x}", i),
                    parent_span_id: if i % 4 == 0 { String::new() } else { format!("{:016x}", i - 1) },
                    service_name: ["api", "web", "db"][i as usize % 3].into(),
                    operation: format!("GET /items/{}", i % 5),
                    start_unix_nanos: NOW_NS + i as i64 * 1_000,
                    duration_nanos: (i + 1) * 1_000,
                    attributes: encode_attributes(vec![attr("http.status", format!("{}", 200 + i % 3 * 100))]),
                    ..Default::default()
                })
            })
            .collect();
        let events: Vec<Row> = (0..300u64)
            .map(|i| {
                Row::Event(Event {
                    uuid: format!("u{i}"),
                    event: ["pageview", "signup", "purchase"][i as usize % 3].into(),
                    distinct_id: format!("user-{}", i % 17),
                    unix_nanos: NOW_NS + i as i64,
                    properties_json: format!("{{\"n\":{i}}}"),
                })
            })
            .collect();
        let mut segments = Vec::new();
        for (id, (table, rows)) in
            [(Table::Logs, logs), (Table::Spans, spans), (Table::Events, events)].into_iter().enumerate()
        {
            let mut rows = rows;
            rows.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
            let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
            // Events with their user numbers, as a flush stores them.
            let users = (table == Table::Events).then(|| {
                let ids = rows.iter().map(|r| match r {
                    Row::Event(e) => user_number::id_hash(&e.distinct_id),
                    _ => 0,
                });
                user_number::UserNumbers::default().numbers(&ids.collect::<Vec<_>>())
            });
            let hour = NOW_NS / 1_000_000_000 / 3600 * 3600;
            let effort = if id % 2 == 0 { Effort::Draft } else { Effort::Final };
            let meta = write_segment(dir.path(), id as u64 + 1, table, hour, &refs, &[7, 9], users.as_deref(), effort)
                .expect("segment written");
            let bytes = std::fs::read(dir.path().join(&meta.file.name)).expect("segment read");
            segments.push((meta, Bytes::from(bytes)));
        }
        let mut manifest = Manifest {
            segments: segments.iter().map(|(m, _)| m.clone()).collect(),
            next_segment: 4,
            ..Default::default()
        };
        manifest.dedup.record_applied(7);
        manifest.dedup.record_aborted(9);
        manifest.tombstones.insert(9);
        manifest.store(dir.path()).expect("manifest stored");
        let manifest =
            std::fs::read(dir.path().join(sextant_node::segment::manifest::MANIFEST)).expect("manifest read");
        Written { manifest, segments }
    })
}

/// Applies `edits` to a copy of `file`: each 5 bytes are an offset (u32, modulo the length)
/// and a byte XORed in there; a final shorter chunk truncates the file at its offset.
fn corrupt(file: &[u8], edits: &[u8]) -> Vec<u8> {
    let mut out = file.to_vec();
    let mut chunks = edits.chunks_exact(5);
    for c in &mut chunks {
        if out.is_empty() {
            break;
        }
        let at = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize % out.len();
        out[at] ^= c[4].max(1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() && !out.is_empty() {
        let mut at = [0u8; 4];
        at[..rest.len()].copy_from_slice(rest);
        out.truncate(u32::from_le_bytes(at) as usize % out.len());
    }
    out
}

/// The manifest reader. First byte: 0 — the rest is the whole file; 1 — the rest is the body
/// and its checksum is appended (so the decoder past the checksum is reached); else — edits
/// ([`corrupt`]) of a real manifest's body, checksum fixed after.
pub fn manifest(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let file = match mode {
        0 => rest.to_vec(),
        1 => with_checksum(rest.to_vec()),
        _ => {
            let real = &written().manifest;
            with_checksum(corrupt(&real[..real.len() - 8], rest))
        }
    };
    if let Ok(m) = Manifest::decode(&file) {
        let _ = m.files(sextant_node::archive::FileEntry { name: "MANIFEST".into(), len: 0, xxh3: 0 });
        for s in &m.segments {
            let _ = (m.dedup.is_applied(s.id as u128), m.dedup.is_aborted(s.id as u128));
        }
    }
}

fn with_checksum(mut body: Vec<u8>) -> Vec<u8> {
    let digest = xxhash_rust::xxh3::xxh3_64(&body);
    body.extend_from_slice(&digest.to_le_bytes());
    body
}

/// The Raft log files of formats 1 and 2 committed as fixtures: every kind of record (entries,
/// a vote, committed and purged marks, a truncation, a dropped group), for [`raft_log`] to edit.
const RAFT_LOG_V1: &[u8] = include_bytes!("../../node/src/persist/fixtures/raft-log-v1/00000000000000000001.sxwl");
const RAFT_LOG_V2: &[u8] = include_bytes!("../../node/src/persist/fixtures/raft-log-v2/00000000000000000001.sxwl");

/// The groups [`raft_log`] reads back: the fixture's (3 and 7) and every group a record made
/// from the input can name (one byte).
const RAFT_LOG_GROUPS: std::ops::RangeInclusive<u64> = 0..=255;

/// Records of the Raft log made from `data`, each with a valid checksum (seeded with `seed`, as
/// the file's format has it), so that the readers of their bodies are reached: per record its
/// kind (u8), its group (u8), its body's length (u16 LE) and the body (cut short at the end of
/// the input). Not written by the log's own writer, which takes only the kinds it knows.
fn raft_log_records(mut data: &[u8], seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while let [kind, group, l0, l1, rest @ ..] = data {
        let body = &rest[..usize::from(u16::from_le_bytes([*l0, *l1])).min(rest.len())];
        let start = out.len();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.push(*kind);
        out.extend_from_slice(&u64::from(*group).to_le_bytes());
        let mut sum = xxhash_rust::xxh3::Xxh3::with_seed(seed);
        sum.update(&out[start + 4..]);
        sum.update(body);
        out.extend_from_slice(&sum.digest().to_le_bytes());
        out.extend_from_slice(body);
        data = &rest[body.len()..];
    }
    out
}

/// The Raft log as a node opens it at startup (`LogDb::open`), then every group read as
/// openraft reads it: its state, vote, committed mark and entries. First byte: 0 — the rest is
/// the whole file; 1 and 3 — the rest as records with valid checksums ([`raft_log_records`])
/// after a valid header of format 1 and 2; 2 and else — edits ([`corrupt`]) of the format 1
/// and 2 fixtures.
pub fn raft_log(data: &[u8]) {
    let _ = raft_log_entries(data);
}

/// [`raft_log`]: how many entries read back, `None` when the log did not open.
pub fn raft_log_entries(data: &[u8]) -> Option<usize> {
    use openraft::storage::RaftLogStorage;
    use openraft::RaftLogReader;
    use sextant_node::log_store::LogDb;
    let (&mode, rest) = data.split_first()?;
    let file = match mode {
        0 => rest.to_vec(),
        // The fixtures' 16-byte headers (file 1), then the records.
        1 => [&RAFT_LOG_V1[..16], &raft_log_records(rest, 0)].concat(),
        3 => [&RAFT_LOG_V2[..16], &raft_log_records(rest, 1)].concat(),
        2 => corrupt(RAFT_LOG_V1, rest),
        _ => corrupt(RAFT_LOG_V2, rest),
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("00000000000000000001.sxwl"), file).expect("log file written");
    let metrics = std::sync::Arc::new(sextant_node::metrics::NodeMetrics::default());
    let db = LogDb::open_with(dir.path(), metrics, false).ok()?;
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().expect("runtime"));
    runtime.block_on(async {
        let mut entries = 0;
        for group in RAFT_LOG_GROUPS {
            let mut log = db.group(group);
            let _ = log.get_log_state().await;
            let _ = log.read_vote().await;
            let _ = log.read_committed().await;
            entries += log.try_get_log_entries(..).await.map_or(0, |e| e.len());
        }
        Some(entries)
    })
}

/// The segment reader turns a panic of parquet's page decoders into an error (they index a
/// corrupted page unchecked): such panics are not findings, every other one still is (the
/// hook before, libFuzzer's, aborts).
fn tolerate_parquet_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        let verbose = std::env::var_os("SEXTANT_FUZZ_VERBOSE").is_some();
        std::panic::set_hook(Box::new(move |info| {
            let file = info.location().map(|l| l.file()).unwrap_or_default();
            if !(file.contains("/parquet-") || file.contains("/arrow-")) {
                previous(info)
            } else if verbose {
                eprintln!("parquet panic: {info}\n{}", std::backtrace::Backtrace::force_capture());
            }
        }));
    });
}

/// The segment reader: a real segment (logs, spans or events: first byte modulo 3) with
/// [`corrupt`] edits, or, when the first byte is 0xff, the rest as the whole file. Opened,
/// then read whole, scanned and searched as queries do.
pub fn segment(data: &[u8]) {
    tolerate_parquet_panics();
    let Some((&mode, rest)) = data.split_first() else { return };
    let (meta, real) = &written().segments[mode as usize % 3];
    let file = if mode == 0xff { Bytes::copy_from_slice(rest) } else { Bytes::from(corrupt(real, rest)) };
    let mut meta = meta.clone();
    meta.file.len = file.len() as u64;
    let Ok(segment) = Segment::from_bytes(meta, file) else { return };
    let _ = segment.read(None);
    let _ = segment.column_bytes();
    let table = segment.meta.table;
    let filter = match table {
        Table::Logs => Filter { log_query: LogQuery::parse("request user region:eu-1").ok(), ..Default::default() },
        Table::Spans => Filter { services: vec!["api".into()], ..Default::default() },
        _ => Filter { events: vec!["signup".into()], ..Default::default() },
    };
    let scan = Scan {
        table,
        project: "p".into(),
        from_ns: NOW_NS,
        to_ns: i64::MAX,
        filter,
        columns: Vec::new(),
        dictionaries: Vec::new(),
        stored_ids: false,
    };
    let _ = segment.row_groups_by_time(&scan);
    let _ = segment.scan(&scan, &|b| b == 9);
    // The service map's read: ids as stored, parent references kept through the row mask.
    let _ = segment.scan(&Scan { stored_ids: true, ..scan.clone() }, &|b| b == 9);
    if matches!(table, Table::Spans | Table::Logs) {
        let _ = segment.trace("p", &format!("{:032x}", 3));
    }
    if table == Table::Events {
        // What a shard's open reads to rebuild its user numbers, and a per-user query's scan.
        let _ = segment.each_user(|_, _| {});
        let columns = vec![user_number::USER.into(), "time_ns".into()];
        let dictionaries = sextant_node::segment::EVENT_DICTIONARIES.to_vec();
        let _ = segment.scan(&Scan { columns, dictionaries, ..scan }, &|b| b == 9);
    }
}
