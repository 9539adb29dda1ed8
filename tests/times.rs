//! Time parameters at the extremes (issue 19, section 4) against `sextant dev`: every read
//! endpoint answers 400 in the contract's error shape for an instant outside 1970..2262 or a
//! duration that would overflow, never a 500, a panic or an answer over all history; ingest
//! refuses epoch milliseconds past 2262 naming the field.

use crate::common::*;
use base64::Engine;
use serde_json::{json, Value};

/// Read endpoints and the instant parameters each takes.
const INSTANT_PARAMS: &[(&str, &[&str])] = &[
    ("/api/v1/traces", &["from", "to"]),
    ("/api/v1/logs/search", &["from", "to"]),
    ("/api/v1/apm/endpoints", &["from", "to"]),
    ("/api/v1/service-map", &["from", "to"]),
    ("/api/v1/errors", &["from", "to"]),
    ("/api/v1/errors/0123456789abcdef", &["from", "to"]),
    ("/api/v1/infrastructure/hosts", &["from", "to"]),
    ("/api/v1/infrastructure/hosts/h1/metrics", &["from", "to"]),
    ("/api/replays", &["from", "to"]),
    ("/api/replays/s1", &["from", "to"]),
    ("/api/events/timeseries", &["from", "to"]),
    ("/api/users/active", &["to"]),
    ("/api/funnel?steps=a,b", &["to"]),
    ("/api/retention?start_event=a&return_event=b", &["from", "to"]),
    ("/api/cohorts", &["to"]),
    ("/api/cohorts/c1", &["to"]),
    ("/api/cohorts/c1/users", &["to"]),
];

/// Instants outside the accepted range, as a client could write them.
fn bad_instants() -> Vec<String> {
    vec![
        "1677-09-21T00:12:44Z".into(),
        "2262-04-11T23:47:15Z".into(),
        "2262-01-01T00:00:00Z".into(),
        "1969-12-31T23:59:59.999Z".into(),
        i64::MIN.to_string(),
        i64::MAX.to_string(),
        // i64::MAX nanoseconds, and one past it, written as milliseconds.
        (i64::MAX / 1_000_000).to_string(),
        (i64::MAX / 1_000_000 + 1).to_string(),
        "9300000000000".into(),
        "7000000000000000".into(),
        "-1".into(),
        "99999999999999999999999".into(),
        "1e300".into(),
        "NaN".into(),
    ]
}

fn encode(v: &str) -> String {
    v.replace('+', "%2B").replace(':', "%3A")
}

fn with(path: &str, query: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{query}")
}

/// A 400 with `code` whose message names `field`, in the contract's error body.
fn assert_400(what: &str, status: u16, body: &Value, code: &str, field: &str) {
    assert_eq!(status, 400, "{what}: {body}");
    assert_eq!(body["error"]["code"], code, "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("`{field}`")) || code == "invalid_cursor", "{what}: {body}");
}

#[tokio::test]
async fn every_time_parameter_at_the_extremes_answers_400() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000"], &[]).await;
    let token = dev.token().await;
    let get = |path: String| {
        let (url, token) = (dev.url.clone(), token.clone());
        async move { get_json(&url, &token, &path).await }
    };

    // Controls: with instants in range, no endpoint answers 400, so the 400s below are the times'.
    let now = jiff::Timestamp::now().as_millisecond();
    for (path, params) in INSTANT_PARAMS {
        let q =
            if params.contains(&"from") { format!("from={}&to={now}", now - 3_600_000) } else { format!("to={now}") };
        let (status, body) = get(with(path, &q)).await;
        assert!([200, 404].contains(&status), "{path}?{q}: {status} {body}");
    }

    for (path, params) in INSTANT_PARAMS {
        for param in *params {
            for v in bad_instants() {
                let q = format!("{param}={}", encode(&v));
                let (status, body) = get(with(path, &q)).await;
                assert_400(&format!("{path} {q}"), status, &body, "invalid_parameter", param);
            }
        }
    }

    // The review's examples.
    let (s, body) = get("/api/users/active?period=366d&to=1677-09-21T00:12:44Z".into()).await;
    assert_400("active users before 1970", s, &body, "invalid_parameter", "to");
    let (s, body) = get("/api/funnel?steps=a,b&to=1677-09-21T00:12:44Z".into()).await;
    assert_400("funnel before 1970", s, &body, "invalid_parameter", "to");
    for path in [
        "/api/v1/traces",
        "/api/v1/logs/search",
        "/api/v1/apm/endpoints",
        "/api/v1/service-map",
        "/api/v1/errors",
        "/api/replays",
    ] {
        let (s, body) = get(format!("{path}?from=1677-09-21T00:12:44Z&to=2262-04-11T23:47:15Z")).await;
        assert_400(&format!("{path} over all history"), s, &body, "invalid_parameter", "from");
    }

    // Durations that overflow i64 nanoseconds once multiplied by their unit.
    let durations: &[(&str, &str)] = &[
        ("/api/users/active", "period"),
        ("/api/funnel?steps=a,b", "range"),
        ("/api/funnel?steps=a,b", "window"),
        ("/api/v1/infrastructure/hosts/h1/metrics", "step"),
        ("/api/v1/traces", "min_duration_ms"),
        ("/api/retention?start_event=a&return_event=b", "periods"),
    ];
    for (path, param) in durations {
        for v in [i64::MAX.to_string(), i64::MIN.to_string(), format!("{}d", i64::MAX), format!("{}w", i64::MAX / 2)] {
            let q = format!("{param}={}", encode(&v));
            let (status, body) = get(with(path, &q)).await;
            assert_400(&format!("{path} {q}"), status, &body, "invalid_parameter", param);
        }
    }
    // The largest step that fits in i64 nanoseconds is one point, not an overflow.
    let (s, body) = get("/api/v1/infrastructure/hosts/h1/metrics?step=9223372036".into()).await;
    assert_eq!(s, 200, "{body}");

    // Cursors carry times too.
    for path in ["/api/v1/traces", "/api/v1/logs/search", "/api/replays"] {
        for t in [i64::MAX, i64::MIN, -1] {
            let cursor = match path {
                "/api/v1/logs/search" => format!("{t}:1:ab:0"),
                _ => format!("{t}:abc"),
            };
            let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(cursor);
            let (s, body) = get(format!("{path}?cursor={cursor}")).await;
            assert_400(&format!("{path} cursor at {t}"), s, &body, "invalid_cursor", "cursor");
        }
    }

    let log = std::fs::read_to_string(dir.path().join("dev.log")).unwrap_or_default();
    assert!(!log.contains("panicked"), "the server panicked:\n{}", log_problems(dir.path()));
}

#[tokio::test]
async fn ingest_refuses_epoch_milliseconds_past_2262_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000"], &[]).await;
    let post = |path: &str, headers: (&str, String), body: Value| {
        let req = http().post(format!("{}{path}", dev.url)).header(headers.0, headers.1).json(&body);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let refused = |what: &str, status: u16, body: &Value| {
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["error"]["code"], "validation_failed", "{what}: {body}");
        let errors = body["error"]["details"]["errors"].as_array().unwrap_or_else(|| panic!("{what}: {body}"));
        assert_eq!(errors.len(), 1, "{what}: {body}");
        assert_eq!((errors[0]["index"].as_u64(), errors[0]["field"].as_str()), (Some(0), Some("timestamp")), "{body}");
    };
    let key = ("X-API-Key", dev.api_key().to_owned());
    // Stored as 1680-02-24 when the product wrapped; 7e15 as 2245.
    for ts in [json!(9_300_000_000_000i64), json!(7e15), json!(i64::MAX), json!(-1), json!("2262-04-11T23:47:15Z")] {
        let mut one = span("t1", "s1", None, 0);
        one["timestamp"] = ts.clone();
        let (s, body) = post("/api/v1/ingest/spans", key.clone(), json!({"spans": [one]})).await;
        refused(&format!("span at {ts}"), s, &body);
        let log = json!({"timestamp": ts, "level": "info", "service": "api", "message": "m"});
        let (s, body) = post("/api/v1/ingest/logs", key.clone(), json!({"logs": [log]})).await;
        refused(&format!("log at {ts}"), s, &body);
        let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
        let event = json!({"event": "e", "distinct_id": "u", "timestamp": ts});
        let (s, body) = post("/v1/batch", ("X-Analytics-Token", token), json!({"events": [event]})).await;
        refused(&format!("event at {ts}"), s, &body);
    }
    // The same span at the last accepted millisecond is stored.
    let (s, body) =
        post("/api/v1/ingest/spans", key.clone(), json!({"spans": [span("t1", "s1", None, 9_214_646_399_999)]})).await;
    assert_eq!(s, 200, "{body}");
}
