//! Metering end to end (docs/API.md, "Usage"): what `GET /api/v1/usage` reports is exactly
//! what the storage node committed, also after a kill -9 in the middle of a stream of ingest
//! with unflushed data and unreported counters: the Raft log replay counts nothing twice and
//! loses nothing.

use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

/// What the test got 200 for: JSON bytes of the bodies and the objects per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sent {
    bytes: u64,
    spans: u64,
    logs: u64,
    metric_samples: u64,
}

/// Request `n` of the stream: spans, logs or host metrics in turn, of varying sizes.
fn request(n: u64) -> (&'static str, Value, Sent) {
    let now = jiff::Timestamp::now().as_millisecond();
    let k = 1 + (n % 5) as usize;
    let (kind, body, mut sent) = match n % 3 {
        0 => {
            let spans: Vec<Value> =
                (0..k).map(|i| span(&format!("u{n}"), &format!("s{i}"), None, now + i as i64)).collect();
            ("spans", json!({ "spans": spans }), Sent { spans: k as u64, ..Default::default() })
        }
        1 => {
            let logs: Vec<Value> = (0..k)
                .map(|i| json!({"timestamp": now, "level": "info", "service": "api", "message": format!("m{n}-{i}")}))
                .collect();
            ("logs", json!({ "logs": logs }), Sent { logs: k as u64, ..Default::default() })
        }
        _ => {
            let metrics: Vec<Value> = (0..k)
                .map(|i| json!({"timestamp": now - i as i64, "hostname": format!("h{n}"), "cpu_percent": 1.5}))
                .collect();
            ("infrastructure", json!({ "metrics": metrics }), Sent { metric_samples: k as u64, ..Default::default() })
        }
    };
    sent.bytes = serde_json::to_vec(&body).unwrap().len() as u64;
    (kind, body, sent)
}

/// Sends requests `from..to` one at a time; every one must be acknowledged.
async fn stream(url: &str, key: &str, from: u64, to: u64, total: &mut Sent) {
    for n in from..to {
        let (kind, body, sent) = request(n);
        let bytes = serde_json::to_vec(&body).unwrap();
        let resp = http()
            .post(format!("{url}/api/v1/ingest/{kind}"))
            .header("X-API-Key", key)
            .header("Content-Type", "application/json")
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "request {n}");
        total.bytes += sent.bytes;
        total.spans += sent.spans;
        total.logs += sent.logs;
        total.metric_samples += sent.metric_samples;
    }
}

fn reported(usage: &Value) -> Sent {
    let n = |k: &str| usage[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {usage}"));
    Sent { bytes: n("bytes"), spans: n("spans"), logs: n("logs"), metric_samples: n("metric_samples") }
}

/// Waits until the usage endpoint reports `want` (meta hears from the shards every 2 s).
async fn usage_reaches(url: &str, token: &str, want: Sent) -> Value {
    wait_for("the usage to reach what was acknowledged", Duration::from_secs(60), || {
        let (url, token) = (url.to_owned(), token.to_owned());
        async move {
            let (status, usage) = get_json(&url, &token, "/api/v1/usage").await;
            (status == 200 && reported(&usage) == want).then_some(usage)
        }
    })
    .await
}

#[tokio::test]
async fn usage_equals_exactly_what_was_acknowledged_across_a_kill_9_mid_stream() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    // Checkpoints every few entries: the kill finds some counters in the manifest and the rest
    // only in the Raft log.
    let flags = ["--shards", "2", "--snapshot-every", "5", "--ingest-rps", "100000", "--api-rps", "100000"];
    let mut dev = Dev::start_with(dir.path(), &flags, &[]).await;
    let mut total = Sent::default();
    stream(&dev.url, dev.api_key(), 0, 20, &mut total).await;
    let token = dev.token().await;
    usage_reaches(&dev.url, &token, total).await;
    // More, then kill -9 right after the last acknowledgement: no flush, no report since.
    stream(&dev.url, dev.api_key(), 20, 47, &mut total).await;
    dev.proc.kill();
    drop(dev);

    let dev = Dev::start_with(dir.path(), &flags, &[]).await;
    let token = dev.token().await;
    usage_reaches(&dev.url, &token, total).await;
    // And the stream goes on from there.
    stream(&dev.url, dev.api_key(), 47, 60, &mut total).await;
    let usage = usage_reaches(&dev.url, &token, total).await;

    let project = dev.creds["project_id"].as_str().map(str::to_owned);
    let projects = usage["projects"].as_array().unwrap();
    let counted: Vec<&Value> = projects.iter().filter(|p| p["bytes"].as_u64() != Some(0)).collect();
    assert_eq!(counted.len(), 1, "one project ingested: {usage}");
    assert_eq!(reported(counted[0]), total);
    if let Some(p) = project {
        assert_eq!(counted[0]["project_id"], json!(p));
    }
    assert_eq!(usage["used_gb"].as_f64().unwrap(), total.bytes as f64 / 1e9);
    assert_eq!(usage["events_used"], json!(0));
    assert_eq!((usage["events"].clone(), usage["replay_events"].clone()), (json!(0), json!(0)));
    assert_eq!(usage["history"], json!([]));
    for key in ["plan", "in_trial", "trial_days_left", "limit_gb", "percentage", "events_limit"] {
        assert!(usage.get(key).is_some(), "{key} missing in {usage}");
    }
    let month_start =
        jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).first_of_month().unwrap().start_of_day().unwrap();
    assert_eq!(usage["period_start"], json!(month_start.timestamp().strftime("%Y-%m-%dT%H:%M:%S.000Z").to_string()));
}

/// Three storage nodes: the leader of a data group is killed -9 right after an
/// acknowledgement, the stream goes on through the new leader (whose counters are at another
/// log index), the killed node comes back replaying its log, and the other two restart in
/// turn so that leadership moves again; usage stays exactly what was acknowledged.
#[tokio::test]
async fn usage_stays_exact_when_a_data_leader_is_killed_and_its_replica_replays_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, 2, &["--snapshot-every", "5"]).await;
    let (url, key) = (cluster.url.clone(), cluster.creds["api_key"].as_str().unwrap().to_owned());
    let token = cluster.token().await;
    let mut total = Sent::default();
    stream(&url, &key, 0, 20, &mut total).await;
    usage_reaches(&url, &token, total).await;
    stream(&url, &key, 20, 40, &mut total).await;
    let killed = cluster.leader_of(1).await;
    cluster.kill_node(killed);
    // A new leader of every group (meta included) before writing on.
    for group in 0..=2 {
        cluster.leader_of(group).await;
    }
    stream(&url, &key, 40, 60, &mut total).await;
    usage_reaches(&url, &token, total).await;
    cluster.start_node(killed);
    cluster.wait_converged().await;
    // Leadership moves on as the other two restart, each replaying its own log.
    for other in (0..3).filter(|&i| i != killed) {
        cluster.kill_node(other);
        cluster.start_node(other);
        cluster.wait_converged().await;
    }
    stream(&url, &key, 60, 70, &mut total).await;
    usage_reaches(&url, &token, total).await;
}
