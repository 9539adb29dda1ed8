//! The body budget charges a parsed body `PARSE_EXPANSION` times its JSON text. This measures
//! the memory that parsing really takes (peak bytes allocated over the text's length) for
//! typical and adversarial bodies of every ingest kind, and fails if the estimate is short.

mod measure;

use sextant_model::analytics::{BatchBody, ReplayBody};
use sextant_model::ingest::{LogsBody, SpansBody};
use sextant_router::http::body::{parse_json, PARSE_EXPANSION};

use measure::{one_at_a_time, peak};

/// Peak bytes allocated while parsing `json` as `T`, over `json.len()`.
fn expansion<T: serde::de::DeserializeOwned>(json: &str) -> f64 {
    let _one = one_at_a_time();
    let mut parsed: Option<T> = None;
    let peak = peak(|| parsed = Some(parse_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e:?}"))));
    drop(parsed);
    peak as f64 / json.len() as f64
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(",")
}

fn spans(attributes: usize) -> String {
    let attrs = join((0..attributes).map(|a| format!("\"a{a}\":{a}")));
    let span = |i: usize| {
        format!(
            r#"{{"trace_id":"{i:032x}","span_id":"{i:016x}","parent_span_id":"{:016x}","service_name":"checkout","operation":"GET /api/cart","timestamp":1795342530123,"duration_ms":12.5,"status":"ok","attributes":{{{attrs}}}}}"#,
            i + 1
        )
    };
    format!(r#"{{"spans":[{}]}}"#, join((0..1000).map(span)))
}

fn events(keys: usize, value: &str) -> String {
    let props = join((0..keys).map(|k| format!("\"p{k}\":\"{value}\"")));
    let event = |i: usize| {
        format!(r#"{{"event":"signup","distinct_id":"user-{i}","uuid":"{i:032x}","properties":{{{props}}}}}"#)
    };
    format!(r#"{{"events":[{}]}}"#, join((0..1000).map(event)))
}

fn assert_within(what: &str, x: f64) {
    eprintln!("{what}: parsed takes {x:.2}x its JSON text");
    assert!(x <= PARSE_EXPANSION as f64, "{what}: {x:.2}x exceeds the budget's {PARSE_EXPANSION}x");
}

#[test]
fn typical_bodies_take_no_more_than_the_budget_charges() {
    assert_within("spans, 5 attributes", expansion::<SpansBody>(&spans(5)));
    let logs = format!(
        r#"{{"logs":[{}]}}"#,
        join((0..1000).map(|i| format!(
            r#"{{"timestamp":1795342530123,"level":"error","service":"api","message":"request {i} failed: upstream timed out after 30 s","trace_id":"{i:032x}","attributes":{{"http.status_code":504,"region":"eu"}}}}"#
        )))
    );
    assert_within("logs", expansion::<LogsBody>(&logs));
    assert_within("events, 10 properties", expansion::<BatchBody>(&events(10, "some value")));
    let replay = format!(
        r#"{{"session_id":"s1","events":[{}]}}"#,
        join((0..500).map(|i| format!(
            r#"{{"type":3,"timestamp":{},"data":{{"source":1,"positions":[{{"x":{i},"y":20,"id":7,"timeOffset":-10}}]}}}}"#,
            1795342530123u64 + i as u64
        )))
    );
    assert_within("replay events", expansion::<ReplayBody>(&replay));
}

#[test]
fn adversarial_bodies_take_no_more_than_the_budget_charges() {
    // The most attributes an object may have, each as short as JSON allows.
    assert_within("spans, 128 one-digit attributes", expansion::<SpansBody>(&spans(128)));
    // Attribute arrays of one-digit numbers, far longer than an array may be.
    let ones = join((0..5000).map(|_| "1".to_owned()));
    let arrays = spans(0).replace(r#""attributes":{}"#, &format!(r#""attributes":{{"a":[{ones}],"b":[{ones}]}}"#));
    assert_within("spans, long attribute arrays", expansion::<SpansBody>(&arrays));
    // Properties of many empty strings, up to what passes validation.
    assert_within("events, 1000 empty properties", expansion::<BatchBody>(&events(1000, "")));
    // Deeply nested rrweb data: the tree of a JSON value at its densest.
    let nested = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    let replay = format!(
        r#"{{"session_id":"s1","events":[{}]}}"#,
        join((0..500).map(|_| format!(
            r#"{{"type":2,"timestamp":1795342530123,"data":{{"a":[{}]}}}}"#,
            join((0..20).map(|_| nested.clone()))
        )))
    );
    assert_within("replay, nested arrays", expansion::<ReplayBody>(&replay));
    let tiny_objects = format!(
        r#"{{"session_id":"s1","events":[{}]}}"#,
        join((0..500).map(|_| format!(
            r#"{{"type":2,"timestamp":1795342530123,"data":{{"a":[{}]}}}}"#,
            join((0..2000).map(|_| "{}".to_owned()))
        )))
    );
    assert_within("replay, empty objects", expansion::<ReplayBody>(&tiny_objects));
}
