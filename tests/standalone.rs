//! The embedded default (`sextant dev`): a round trip through the public API, restarts, and
//! every kind of bad input refused with the contract's error and nothing stored.

use std::io::Write;

use crate::common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn round_trip_survives_kill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;

    // credentials.json is private to its owner.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("credentials.json")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let body = spans_batch("rt", 3, 4);
    let resp = post_spans(&dev.url, dev.api_key(), &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap(), json!({"status": "ok", "accepted": 12}));

    let logs = json!({"logs": [{"timestamp": "2026-11-22T10:00:00Z", "level": "error", "service": "api", "message": "boom", "trace_id": "rt-t0"}]});
    let resp = http()
        .post(format!("{}/api/v1/ingest/logs", dev.url))
        .header("X-API-Key", dev.api_key())
        .json(&logs)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let metrics = json!({"metrics": [{"timestamp": 1795342530123i64, "hostname": "web-1", "cpu_percent": 12.5, "memory_used_bytes": 1024, "memory_total_bytes": 4096}]});
    let resp = http()
        .post(format!("{}/api/v1/ingest/infrastructure", dev.url))
        .header("X-API-Key", dev.api_key())
        .json(&metrics)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    let token = dev.token().await;
    let trace = get_trace(&dev.url, &token, "rt-t1").await.expect("trace stored");
    assert_eq!(trace["trace_id"], "rt-t1");
    assert_eq!(trace["spans"].as_array().unwrap().len(), 4);
    assert_eq!(trace["services"], json!(["checkout"]));
    assert_eq!(trace["spans"][0]["span_id"], "s0");
    assert_eq!(trace["spans"][0]["parent_span_id"], Value::Null);
    assert_eq!(trace["spans"][1]["attributes"], json!({"http.status_code": 200, "region": "eu"}));
    assert!(trace["start_time"].as_str().unwrap().ends_with('Z'));

    // kill -9, then start again on the same directory: same credentials, same data.
    let creds = dev.creds.clone();
    let Dev { mut proc, .. } = dev;
    proc.kill();
    let dev = Dev::start(dir.path()).await;
    assert_eq!(dev.creds, creds);
    let token = dev.token().await;
    let trace = get_trace(&dev.url, &token, "rt-t2").await.expect("trace survives restart");
    assert_eq!(trace["spans"].as_array().unwrap().len(), 4);
    assert!(get_trace(&dev.url, &token, "never-sent").await.is_none());
}

async fn expect_error(resp: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(resp.status().as_u16(), status);
    assert!(resp.headers().contains_key("x-request-id"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    body
}

#[tokio::test]
async fn bad_input_gets_the_right_status_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;
    let url = format!("{}/api/v1/ingest/spans", dev.url);
    let key = dev.api_key().to_owned();
    let post = |body: Vec<u8>| {
        http().post(&url).header("X-API-Key", &key).header("Content-Type", "application/json").body(body).send()
    };

    expect_error(post(b"{\"spans\": [".to_vec()).await.unwrap(), 400, "invalid_json").await;

    let missing = json!({"spans": [{"trace_id": "bad-missing", "span_id": "s", "service_name": "a", "timestamp": 1, "duration_ms": 1}]});
    let body = expect_error(post(serde_json::to_vec(&missing).unwrap()).await.unwrap(), 400, "validation_failed").await;
    assert!(
        body["error"]["message"].as_str().unwrap().contains("operation") || body.to_string().contains("operation"),
        "{body}"
    );

    let mut wrong = spans_batch("bad-type", 2, 1);
    wrong["spans"][1]["duration_ms"] = json!("fast");
    let body = expect_error(post(serde_json::to_vec(&wrong).unwrap()).await.unwrap(), 400, "validation_failed").await;
    assert_eq!(body["error"]["details"]["errors"][0]["index"], 1);
    assert_eq!(body["error"]["details"]["errors"][0]["field"], "duration_ms");

    let mut invalid = spans_batch("bad-values", 3, 1);
    invalid["spans"][2]["duration_ms"] = json!(-5);
    invalid["spans"][2]["status"] = json!("maybe");
    let body = expect_error(post(serde_json::to_vec(&invalid).unwrap()).await.unwrap(), 400, "validation_failed").await;
    let errors = body["error"]["details"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2);
    assert!(errors.iter().all(|e| e["index"] == 2));

    let too_many = spans_batch("bad-count", 1001, 1);
    expect_error(post(serde_json::to_vec(&too_many).unwrap()).await.unwrap(), 400, "batch_too_large").await;

    // 11 MB: 500 spans with a big attribute each.
    let mut huge = spans_batch("bad-size", 500, 1);
    for s in huge["spans"].as_array_mut().unwrap() {
        s["attributes"]["blob"] = json!("x".repeat(22_000));
    }
    let bytes = serde_json::to_vec(&huge).unwrap();
    assert!(bytes.len() > 11_000_000);
    expect_error(post(bytes).await.unwrap(), 413, "payload_too_large").await;

    // A gzip bomb is measured after decompression.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&serde_json::to_vec(&huge).unwrap()).unwrap();
    let resp = http()
        .post(&url)
        .header("X-API-Key", &key)
        .header("Content-Type", "application/json")
        .header("Content-Encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    expect_error(resp, 413, "payload_too_large").await;

    let ok = spans_batch("bad-auth", 1, 1);
    let resp = http().post(&url).json(&ok).send().await.unwrap();
    expect_error(resp, 401, "unauthorized").await;
    let forged = format!("{}x", &key[..key.len() - 1]);
    let resp = http().post(&url).header("X-API-Key", forged).json(&ok).send().await.unwrap();
    expect_error(resp, 401, "unauthorized").await;
    let resp = http().post(&url).header("X-API-Key", "sxk_nothing").json(&ok).send().await.unwrap();
    expect_error(resp, 401, "unauthorized").await;
    let resp = http()
        .post(&url)
        .header("X-API-Key", &key)
        .header("Content-Type", "text/plain")
        .body(serde_json::to_vec(&ok).unwrap())
        .send()
        .await
        .unwrap();
    expect_error(resp, 415, "unsupported_media_type").await;

    // Nothing of any refused request is readable.
    let token = dev.token().await;
    for trace in
        ["bad-missing", "bad-type-t0", "bad-values-t0", "bad-count-t0", "bad-count-t1000", "bad-size-t0", "bad-auth-t0"]
    {
        assert!(get_trace(&dev.url, &token, trace).await.is_none(), "{trace} was stored");
    }

    // The same objects, valid and gzip-compressed, are accepted; the request id is echoed.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&serde_json::to_vec(&ok).unwrap()).unwrap();
    let resp = http()
        .post(&url)
        .header("X-API-Key", &key)
        .header("Content-Type", "application/json")
        .header("Content-Encoding", "gzip")
        .header("X-Request-Id", "req-123")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "req-123");
    assert!(get_trace(&dev.url, &token, "bad-auth-t0").await.is_some());
}

#[tokio::test]
async fn reads_need_a_valid_access_token() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;
    let trace_url = format!("{}/api/v1/traces/anything", dev.url);
    let resp = http().get(&trace_url).send().await.unwrap();
    expect_error(resp, 401, "unauthorized").await;
    let resp = http().get(&trace_url).bearer_auth("not.a.jwt").send().await.unwrap();
    expect_error(resp, 401, "unauthorized").await;
    let resp = http().get(&trace_url).bearer_auth(dev.api_key()).send().await.unwrap();
    expect_error(resp, 401, "unauthorized").await;

    let resp = http()
        .post(format!("{}/auth/login", dev.url))
        .json(&json!({"email": "admin@sextant.local", "password": "wrong-password"}))
        .send()
        .await
        .unwrap();
    let wrong_password = expect_error(resp, 401, "unauthorized").await;
    let resp = http()
        .post(format!("{}/auth/login", dev.url))
        .json(&json!({"email": "nobody@example.com", "password": "wrong-password"}))
        .send()
        .await
        .unwrap();
    let unknown_user = expect_error(resp, 401, "unauthorized").await;
    assert_eq!(wrong_password, unknown_user, "login must not reveal which emails exist");

    // A foreign project id is a 404, never a 403.
    let token = dev.token().await;
    let resp = http().get(&trace_url).bearer_auth(&token).header("X-Project-Id", uuid_like()).send().await.unwrap();
    expect_error(resp, 404, "not_found").await;
}

fn uuid_like() -> String {
    "00000000-0000-4000-8000-000000000000".into()
}

/// The workload the image's build profiles itself with (scripts/pgo_train.py) still runs
/// against this API: a read it makes that answers anything but 200 stops the image's build.
#[test]
fn the_image_build_profiling_workload_still_runs_against_the_api() {
    let out = python("scripts/pgo_train.py", &[BIN, "--quick"], "the profiling workload");
    assert!(String::from_utf8_lossy(&out).contains("pgo_train: done"));
}
