//! Overload control at small scale: a `sextant dev` with tiny budgets, driven past them by
//! concurrent clients, sheds with 503 or 429 and `Retry-After` instead of queueing; every
//! acknowledged write is readable, every refused one stored nothing, admitted latency and
//! memory stay bounded (docs/RELIABILITY.md, "Overload").

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

/// What one request got: its status, `Retry-After`, error code and latency.
struct Answer {
    status: u16,
    retry_after: Option<String>,
    code: Option<String>,
    took: Duration,
}

async fn answer(resp: reqwest::Response, started: Instant) -> Answer {
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().map(str::to_owned);
    Answer { status, retry_after, code, took: started.elapsed() }
}

/// Peak resident memory of a process (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn p99(mut took: Vec<Duration>) -> Duration {
    took.sort();
    took[(took.len() * 99 / 100).min(took.len() - 1)]
}

const WRITERS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_past_a_shards_queue_get_503_with_retry_after_and_every_acknowledged_write_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let flags = [
        "--shards",
        "1",
        "--max-pending-writes",
        "2",
        "--max-pending-write-mib",
        "1",
        "--ingest-rps",
        "100000",
        "--api-rps",
        "100000",
    ];
    let dev = Dev::start_with(dir.path(), &flags, &[]).await;
    let key = dev.api_key().to_owned();
    // Waves of concurrent writers until the shard has shed some (it does within a wave or two).
    let mut answers: Vec<(String, Answer)> = Vec::new();
    for wave in 0..20 {
        let sends = (0..WRITERS).map(|w| {
            let (url, key) = (dev.url.clone(), key.clone());
            async move {
                let prefix = format!("w{wave}-{w}");
                let started = Instant::now();
                let resp = post_spans(&url, &key, &spans_batch(&prefix, 20, 5)).await;
                (prefix, answer(resp, started).await)
            }
        });
        answers.extend(futures::future::join_all(sends).await);
        if wave >= 2 && answers.iter().any(|(_, a)| a.status == 503) {
            break;
        }
    }
    let (ok, refused): (Vec<_>, Vec<_>) = answers.iter().partition(|(_, a)| a.status == 200);
    assert!(!refused.is_empty(), "a queue of 2 writes never filled under {WRITERS} concurrent writers");
    assert!(!ok.is_empty(), "nothing was admitted");
    for (prefix, a) in &refused {
        assert_eq!(a.status, 503, "{prefix}: only 503 is expected here");
        assert_eq!(a.code.as_deref(), Some("overloaded"), "{prefix}");
        assert_eq!(a.retry_after.as_deref(), Some("1"), "{prefix}: 503 carries Retry-After");
    }
    let shed = metric(&dev.internal_url, "sextant_node_writes_shed_total{reason=\"pending_writes\"}").await;
    assert!(shed.is_some_and(|n| n >= 1.0), "the node counts what it shed: {shed:?}");

    let token = dev.token().await;
    for (prefix, _) in &ok {
        let trace = get_trace(&dev.url, &token, &format!("{prefix}-t19")).await;
        assert_eq!(trace.map(|t| t["spans"].as_array().unwrap().len()), Some(5), "{prefix} was acknowledged");
    }
    for (prefix, _) in &refused {
        assert!(get_trace(&dev.url, &token, &format!("{prefix}-t0")).await.is_none(), "{prefix} was refused");
    }
    let admitted = p99(ok.iter().map(|(_, a)| a.took).collect());
    let rss = peak_rss(dev.proc.pid());
    eprintln!(
        "admitted {}, refused {}, admitted p99 {admitted:?}, peak RSS {} MiB",
        ok.len(),
        refused.len(),
        rss >> 20
    );
    assert!(admitted < Duration::from_secs(5), "admitted p99 {admitted:?}");
    assert!(rss < 1 << 30, "peak RSS {} MiB", rss >> 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_project_flooding_past_its_share_gets_429_while_another_project_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let flags = ["--shards", "1", "--tenant-inflight-mib", "1", "--analytics-rps", "100000", "--api-rps", "100000"];
    let dev = Dev::start_with(dir.path(), &flags, &[]).await;
    let jwt = dev.token().await;
    let resp = http()
        .post(format!("{}/projects", dev.url))
        .bearer_auth(&jwt)
        .json(&json!({"name": "quiet"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let quiet = resp.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_owned();
    let loud = dev.creds["ingest_token"].as_str().unwrap().to_owned();

    // About 400 KB of events per request: four in flight pass the 1 MiB share.
    let events = |prefix: &str, n: usize| {
        let now = jiff::Timestamp::now().as_millisecond();
        let events: Vec<Value> = (0..n)
            .map(|i| {
                json!({"event": "flood", "distinct_id": format!("{prefix}-u{i}"), "timestamp": now,
                       "uuid": uuid::Uuid::new_v4().to_string(), "properties": {"pad": "x".repeat(400)}})
            })
            .collect();
        json!({ "events": events })
    };
    let send = |token: String, body: Value| {
        let url = dev.url.clone();
        async move {
            let started = Instant::now();
            let resp = http()
                .post(format!("{url}/v1/batch"))
                .header("X-Analytics-Token", token)
                .json(&body)
                .send()
                .await
                .unwrap();
            answer(resp, started).await
        }
    };
    let mut loud_answers = Vec::new();
    let mut quiet_answers = Vec::new();
    for wave in 0..20 {
        let flood =
            futures::future::join_all((0..WRITERS).map(|w| send(loud.clone(), events(&format!("l{wave}-{w}"), 800))));
        let calm = async {
            let mut out = Vec::new();
            for i in 0..3 {
                out.push(send(quiet.clone(), events(&format!("q{wave}-{i}"), 5)).await);
            }
            out
        };
        let (f, c) = tokio::join!(flood, calm);
        loud_answers.extend(f);
        quiet_answers.extend(c);
        if loud_answers.iter().any(|a| a.status == 429) {
            break;
        }
    }
    let limited: Vec<&Answer> = loud_answers.iter().filter(|a| a.status == 429).collect();
    eprintln!(
        "flooding project: {} requests, {} limited; quiet project: {} requests",
        loud_answers.len(),
        limited.len(),
        quiet_answers.len()
    );
    assert!(!limited.is_empty(), "the flooding project was never limited");
    for a in &limited {
        assert_eq!(a.code.as_deref(), Some("rate_limited"));
        assert_eq!(a.retry_after.as_deref(), Some("1"));
    }
    let other: Vec<(u16, Option<&str>)> =
        loud_answers.iter().filter(|a| !matches!(a.status, 200 | 429)).map(|a| (a.status, a.code.as_deref())).collect();
    assert!(other.is_empty(), "only 200 and 429 for the flooding project, also got {other:?}");
    assert!(loud_answers.iter().any(|a| a.status == 200), "the flooding project keeps its share");
    let statuses: Vec<u16> = quiet_answers.iter().map(|a| a.status).collect();
    assert!(statuses.iter().all(|s| *s == 200), "the quiet project was served throughout: {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_past_the_routers_places_and_queue_get_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let flags = ["--shards", "2", "--max-concurrent-reads", "1", "--read-queue", "0", "--api-rps", "100000"];
    let dev = Dev::start_with(dir.path(), &flags, &[]).await;
    assert_eq!(post_spans(&dev.url, dev.api_key(), &spans_batch("r", 50, 4)).await.status(), 200);
    let token = dev.token().await;
    let mut answers = Vec::new();
    for _ in 0..20 {
        let reads = (0..16).map(|_| {
            let (url, token) = (dev.url.clone(), token.clone());
            async move {
                let started = Instant::now();
                let resp =
                    http().get(format!("{url}/api/v1/traces?limit=100")).bearer_auth(&token).send().await.unwrap();
                answer(resp, started).await
            }
        });
        answers.extend(futures::future::join_all(reads).await);
        if answers.iter().any(|a| a.status == 503) {
            break;
        }
    }
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.status != 200).collect();
    eprintln!("reads: {}, refused {}", answers.len(), refused.len());
    assert!(!refused.is_empty(), "one place and no queue never refused 16 concurrent reads");
    assert!(answers.iter().any(|a| a.status == 200));
    for a in refused {
        assert_eq!(a.status, 503);
        assert_eq!(a.code.as_deref(), Some("overloaded"));
        assert_eq!(a.retry_after.as_deref(), Some("1"));
        assert!(a.took < Duration::from_secs(2), "refused at once, not after waiting: {:?}", a.took);
    }
}

/// A node whose shard buffers together pass `--buffer-memory-mib` flushes the largest one at
/// once, long before its own size bound (256 MiB) or age (5 minutes), and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_past_its_buffer_budget_flushes_its_largest_buffer_early() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let flags = ["--shards", "2", "--buffer-memory-mib", "24", "--ingest-rps", "100000", "--api-rps", "100000"];
    let dev = Dev::start_with(dir.path(), &flags, &[]).await;
    let key = dev.api_key().to_owned();
    let buffered = || metric(&dev.internal_url, "sextant_node_memory_bytes{component=\"buffers\"}");
    let flushes = || metric(&dev.internal_url, "sextant_node_flush_seconds_count");
    let mut sent = 0;
    // Until the flusher (it looks every half second) sees more than the budget buffered.
    while flushes().await == Some(0.0) {
        let resp = post_spans(&dev.url, &key, &spans_batch(&format!("b{sent}"), 200, 5)).await;
        assert_eq!(resp.status(), 200);
        sent += 1;
        assert!(sent < 400, "400k spans and no flush");
    }
    let over = buffered().await.unwrap();
    wait_for("the buffers back within the budget", Duration::from_secs(30), || async {
        buffered().await.filter(|&b| b <= 24.0 * 1024.0 * 1024.0)
    })
    .await;
    eprintln!("{sent} batches sent, {:.1} MiB buffered at the first flush", over / 1048576.0);
    let early = metric(&dev.internal_url, "sextant_node_early_flushes_total").await;
    assert!(early.is_some_and(|n| n >= 1.0), "the flush is counted as early: {early:?}");
    let token = dev.token().await;
    for batch in [0, sent / 2, sent - 1] {
        let trace = get_trace(&dev.url, &token, &format!("b{batch}-t199")).await;
        assert_eq!(trace.map(|t| t["spans"].as_array().unwrap().len()), Some(5), "batch {batch}");
    }
}
