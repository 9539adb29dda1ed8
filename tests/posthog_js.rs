//! posthog-js session recordings (docs/API.md, "Session recordings from posthog-js") against a
//! real `sextant dev`: posthog-js from npm records a page in headless Chromium and sends to
//! Sextant unchanged, the recording is read back through `/api/replays/{id}` and plays in
//! rrweb's `Replayer` (tests/browser/posthog_replay.mjs; scripts/test.sh installs Chromium and
//! the npm packages). Then the edges a client meets: the configuration it asks for, recordings
//! inside other capture batches and forms, and the limits.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use base64::Engine;
use serde_json::{json, Value};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// `node tests/browser/posthog_replay.mjs <args>`, its JSON answer.
fn driver(args: &[&str]) -> Value {
    let out = Command::new("node")
        .arg(browser_dir().join("posthog_replay.mjs"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    assert!(
        out.status.success(),
        "posthog_replay.mjs {} failed ({}): {}",
        args[0],
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("posthog_replay.mjs answered {:?}: {e}", String::from_utf8_lossy(&out.stdout)))
}

fn node_available() -> bool {
    Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[tokio::test]
async fn posthog_js_records_a_page_that_plays_back_in_rrweb() {
    if !node_available() {
        eprintln!("SKIPPED: node is not installed; scripts/test.sh installs what this test needs");
        return;
    }
    assert!(
        browser_dir().join("node_modules/posthog-js").is_dir() && browser_dir().join("node_modules/rrweb").is_dir(),
        "tests/browser/node_modules is missing: scripts/test.sh installs it (npm ci in tests/browser)"
    );
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start(dir.path()).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let jwt = dev.token().await;

    let sent = driver(&["record", &dev.url, &token]);
    let session_id = sent["session_id"].as_str().unwrap();
    let sent_events = sent["sent_events"].as_u64().unwrap();
    assert!(sent["compressed_events"].as_u64().unwrap() > 0, "posthog-js compressed nothing: {sent}");

    // Every rrweb event Sextant acknowledged, in timestamp order, expanded to plain rrweb.
    let path = format!("/api/replays/{session_id}");
    let recording = wait_for("the recording", Duration::from_secs(20), || async {
        let (status, body) = get_json(&dev.url, &jwt, &path).await;
        (status == 200 && body["events"].as_array().is_some_and(|e| e.len() as u64 == sent_events)).then_some(body)
    })
    .await;
    assert_eq!(recording["session_id"], session_id);
    assert_eq!(recording["distinct_id"], sent["distinct_id"]);
    let events = recording["events"].as_array().unwrap();
    let times: Vec<i64> = events.iter().map(|e| e["timestamp"].as_i64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "not in timestamp order: {times:?}");
    assert_eq!(events[0]["type"], 4, "a recording starts with its meta event");
    let full = events.iter().find(|e| e["type"] == 2).expect("a full snapshot");
    assert!(full["data"]["node"].is_object(), "the full snapshot is expanded: {}", full["data"]);
    assert!(events.iter().all(|e| e.get("cv").is_none() && !e["data"]["adds"].is_string()));
    let (status, list) = get_json(&dev.url, &jwt, "/api/replays").await;
    assert_eq!(status, 200, "{list}");
    let listed = list["items"].as_array().unwrap().iter().find(|s| s["session_id"] == session_id).unwrap();
    assert_eq!(listed["event_count"].as_u64(), Some(sent_events));

    // The replay: every event given to rrweb's Replayer plays, and the page it rebuilds has
    // what was typed and added.
    let file = dir.path().join("recording.json");
    std::fs::write(&file, serde_json::to_vec(&recording).unwrap()).unwrap();
    let played = driver(&["play", file.to_str().unwrap()]);
    assert_eq!(played["errors"], json!([]), "{played}");
    assert_eq!(played["given"].as_u64(), Some(sent_events));
    assert_eq!(played["cast"].as_u64(), Some(sent_events), "{played}");
    let marker = sent["marker"].as_str().unwrap();
    assert_eq!(played["input_value"], marker, "{played}");
    assert_eq!(played["items"], json!([marker]), "{played}");
    assert_eq!(played["title"], "recorded page");
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// gzip bytes one per character, as posthog-js compresses parts of rrweb events.
fn latin1_gzip(v: &Value) -> String {
    gzip(v.to_string().as_bytes()).into_iter().map(char::from).collect()
}

fn snapshot(session: &str, token: &str, events: Value) -> Value {
    json!({"event": "$snapshot", "properties": {
        "$session_id": session, "$window_id": "w1", "distinct_id": "u1", "token": token, "$snapshot_data": events,
    }})
}

async fn post(url: &str, path: &str, body: Vec<u8>) -> (u16, Value) {
    let resp =
        http().post(format!("{url}{path}")).header("content-type", "text/plain").body(body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn replay_of(dev: &Dev, jwt: &str, session: &str, n: usize) -> Value {
    let path = format!("/api/replays/{session}");
    wait_for("the replay", Duration::from_secs(20), || async {
        let (status, body) = get_json(&dev.url, jwt, &path).await;
        (status == 200 && body["events"].as_array().is_some_and(|e| e.len() == n)).then_some(body)
    })
    .await
}

#[tokio::test]
async fn posthog_configuration_turns_recording_on_for_a_known_token_only() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start(dir.path()).await;
    let token = dev.creds["ingest_token"].as_str().unwrap();

    let resp =
        http().get(format!("{}/array/{token}/config", dev.url)).header("origin", "http://page").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], "*");
    let config: Value = resp.json().await.unwrap();
    assert_eq!(config["sessionRecording"]["endpoint"], "/s/");
    assert_eq!(config["hasFeatureFlags"], false);
    assert!(config["supportedCompression"].as_array().unwrap().contains(&json!("gzip-js")));

    // /flags as posthog-js posts it (gzip, text/plain), /decide as older versions did (a form).
    let flags = serde_json::to_vec(&json!({"token": token, "distinct_id": "u1"})).unwrap();
    let (status, answer) = post(&dev.url, "/flags/?v=2", gzip(&flags)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!((&answer["flags"], &answer["sessionRecording"]["endpoint"]), (&json!({}), &json!("/s/")));
    let form = format!("data={}", base64::engine::general_purpose::STANDARD.encode(&flags));
    let (status, answer) = post(&dev.url, "/decide/?v=3", form.into_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["featureFlags"], json!({}));

    for (status, what) in [
        (http().get(format!("{}/array/sxp_nope/config", dev.url)).send().await.unwrap().status(), "config"),
        (
            http()
                .post(format!("{}/flags/?v=2", dev.url))
                .body(r#"{"token":"sxp_nope"}"#)
                .send()
                .await
                .unwrap()
                .status(),
            "flags",
        ),
        (http().get(format!("{}/decide/", dev.url)).send().await.unwrap().status(), "decide without a token"),
    ] {
        assert_eq!(status, 401, "{what}");
    }
}

#[tokio::test]
async fn snapshots_in_any_capture_body_become_replay_events_within_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start(dir.path()).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let jwt = dev.token().await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;

    // A /batch/ with a pageview and a compressed full snapshot, gzip: the pageview is a product
    // event, the snapshot a replay event, expanded.
    let full = json!({"node": {"type": 0, "id": 1, "childNodes": []}, "initialOffset": {"left": 0, "top": 0}});
    let batch = json!({"api_key": token, "batch": [
        {"event": "$pageview", "distinct_id": "u1", "properties": {}, "timestamp": now},
        snapshot("s-batch", &token, json!([
            {"type": 4, "data": {"href": "http://page/", "width": 1, "height": 1}, "timestamp": now + 1},
            {"type": 2, "cv": "2024-10", "data": latin1_gzip(&full), "timestamp": now + 2},
        ])),
    ]});
    let (status, answer) = post(&dev.url, "/batch/", gzip(batch.to_string().as_bytes())).await;
    assert_eq!((status, &answer["accepted"]), (200, &json!(1)), "{answer}");
    let replay = replay_of(&dev, &jwt, "s-batch", 2).await;
    assert_eq!(replay["events"][1]["data"], full);
    assert_eq!(replay["events"][1]["window_id"], "w1");

    // /e/ with a base64 form; the SDK's own retry stores nothing twice.
    let one =
        snapshot("s-form", &token, json!([{"type": 3, "data": {"source": 2, "type": 2, "id": 1}, "timestamp": now}]));
    let form = format!("data={}", base64::engine::general_purpose::STANDARD.encode(one.to_string()));
    for _ in 0..2 {
        assert_eq!(post(&dev.url, "/e/?compression=base64", form.clone().into_bytes()).await.0, 200);
    }
    replay_of(&dev, &jwt, "s-form", 1).await;

    // Older posthog-js: LZ-string's base64 form in a `data=` field, `?compression=lz64`. The
    // body is a pageview and a snapshot of session s-lz64 (two rrweb events), compressed by
    // lz-string 1.5.0's compressToBase64 and percent-encoded.
    let lz64 = "data=NobwRApgbhB2AuYBcYAkAHAhgc2gSwgHcwAaMAEzwGd49YBjeAfT3OTAFcBaAGwC9SYdACcA9ugjDaEKshABfMrQC2M%2BJmXp2AJgAM2gGxcAjMa6GAKsd1JdNuwC0wi8NDiIUqKrEzoqAC1FEMhFxSWlZJHAvGSo8UVgWNhQqXj4DABZBSho6RiT2bn5BLx8%2FQOZyTHVkUDB4AE8JZAyyKpqosH9hCAAzdn94eHQkAHpRrFxRwUJWeH9kYzJ%2FCDxsQcXFerxVGg0tJGMAdgBOAFYDOyurl3qmiGQAZjbqzDkwKlEOYXoHpG0lPdkACwKxNkodmp9otThdrldjPIALryZFAA%3D";
    let path = format!("/e/?compression=lz64&api_key={token}");
    let (status, answer) = post(&dev.url, &path, lz64.as_bytes().to_vec()).await;
    assert_eq!((status, &answer["accepted"]), (200, &json!(1)), "{answer}");
    let replay = replay_of(&dev, &jwt, "s-lz64", 2).await;
    assert_eq!(replay["distinct_id"], "u-lz");
    let (status, answer) = post(&dev.url, &path, b"data=%25%25%25".to_vec()).await;
    assert_eq!(status, 400, "{answer}");

    // Limits: 500 rrweb events a request, what posthog-js compressed expands to 10 MB at most.
    let many: Vec<Value> = (0..501).map(|i| json!({"type": 3, "data": {"source": 1}, "timestamp": now + i})).collect();
    let (status, answer) =
        post(&dev.url, "/s/", json!([snapshot("s-many", &token, json!(many))]).to_string().into_bytes()).await;
    assert_eq!(status, 413, "{answer}");
    let bomb = json!({"text": "x".repeat(11 * 1024 * 1024)});
    let body = json!([snapshot(
        "s-bomb",
        &token,
        json!([{"type": 2, "cv": "2024-10", "data": latin1_gzip(&bomb), "timestamp": now}])
    )]);
    let (status, answer) = post(&dev.url, "/s/", gzip(body.to_string().as_bytes())).await;
    assert_eq!(status, 413, "{answer}");
    let (status, answer) = post(&dev.url, "/s/", vec![b' '; 10 * 1024 * 1024 + 1]).await;
    assert_eq!(status, 413, "{answer}");
    // A snapshot without its session is refused, with the field named.
    let (status, answer) = post(
        &dev.url,
        "/s/",
        json!([{"event": "$snapshot", "properties": {"token": token, "$snapshot_data": []}}]).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("properties.$session_id"), "{answer}");
    for session in ["s-many", "s-bomb"] {
        let (status, _) = get_json(&dev.url, &jwt, &format!("/api/replays/{session}")).await;
        assert_eq!(status, 404, "{session} was refused whole");
    }
}
