//! Crash safety of the segment engine at exact points: a `sextant dev` armed with a failpoint
//! aborts (like kill -9) in the middle of a flush or a compaction while clients ingest; after a
//! restart every acknowledged span is there exactly once.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

const TRACES: usize = 5;
const SPANS: usize = 4;

/// Ingests until the armed process dies; returns the trace ids of acknowledged batches.
async fn ingest_until_abort(dev: &mut Dev, hours_ago: i64) -> Vec<String> {
    let mut acked = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let base_ms = jiff::Timestamp::now().as_millisecond() - hours_ago * 3_600_000;
    for n in 0.. {
        assert!(tokio::time::Instant::now() < deadline, "the failpoint was never reached");
        let prefix = format!("b{n}");
        let mut body = spans_batch(&prefix, TRACES, SPANS);
        for s in body["spans"].as_array_mut().unwrap() {
            s["timestamp"] = serde_json::json!(base_ms + n);
        }
        let resp = http()
            .post(format!("{}/api/v1/ingest/spans", dev.url))
            .header("X-API-Key", dev.api_key())
            .json(&body)
            .send()
            .await;
        match resp {
            Ok(r) if r.status() == 200 => acked.extend((0..TRACES).map(|t| format!("{prefix}-t{t}"))),
            Ok(r) => panic!("unexpected status {} before the crash", r.status()),
            Err(_) => break,
        }
    }
    wait_for("the armed process to exit", Duration::from_secs(30), || {
        let exited = dev.proc.exited();
        async move { exited.then_some(()) }
    })
    .await;
    acked
}

async fn crash_and_recover(failpoint: &str, hours_ago: i64) {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--shards", "1", "--snapshot-every", "4", "--ingest-rps", "100000", "--api-rps", "100000"];
    let mut dev = Dev::start_with(dir.path(), &flags, &[("SEXTANT_FAILPOINT", failpoint)]).await;
    let acked = ingest_until_abort(&mut dev, hours_ago).await;
    assert!(!acked.is_empty(), "nothing was acknowledged before {failpoint}");
    let log = std::fs::read_to_string(dir.path().join("dev.log")).unwrap();
    assert!(log.contains(&format!("failpoint {failpoint}")), "the process died of something else:\n{log}");
    drop(dev);

    let dev = Dev::start_with(dir.path(), &flags, &[]).await;
    let token = dev.token().await;
    let expected: BTreeSet<String> = (0..SPANS).map(|s| format!("s{s}")).collect();
    for trace in &acked {
        let found: Value = get_trace(&dev.url, &token, trace)
            .await
            .unwrap_or_else(|| panic!("acknowledged trace {trace} lost at {failpoint}"));
        let ids: Vec<String> =
            found["spans"].as_array().unwrap().iter().map(|s| s["span_id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(ids.len(), SPANS, "trace {trace} after {failpoint}: duplicates or losses");
        assert_eq!(ids.into_iter().collect::<BTreeSet<_>>(), expected);
    }
}

#[tokio::test]
async fn kill_during_flush_before_the_manifest_loses_nothing() {
    crash_and_recover("flush-before-manifest", 0).await;
}

#[tokio::test]
async fn kill_during_flush_after_the_manifest_loses_nothing() {
    crash_and_recover("flush-after-manifest", 0).await;
}

// Spans three hours old: their hour is over, so two small segments are already merged.
#[tokio::test]
async fn kill_during_compaction_before_the_manifest_loses_nothing() {
    crash_and_recover("compaction-before-manifest", 3).await;
}

#[tokio::test]
async fn kill_during_compaction_after_the_manifest_loses_nothing() {
    crash_and_recover("compaction-after-manifest", 3).await;
}

/// A shard whose Raft stops on an error (an apply that fails once, by failpoint; openraft stops
/// a group for good on any storage error) is started again in the same process: the client's
/// batch is acknowledged once it retries, stored once, and the process keeps running.
#[tokio::test]
async fn a_group_stopped_by_an_error_is_started_again_in_the_same_process() {
    a_stopped_group_is_started_again("apply-ingest").await;
}

/// The same when the shard's Raft core panics (by failpoint, appending to its log): the core
/// reports no error then, only its metrics end.
#[tokio::test]
async fn a_group_whose_raft_core_panicked_is_started_again_in_the_same_process() {
    a_stopped_group_is_started_again("append-ingest-panics").await;
}

async fn a_stopped_group_is_started_again(failpoint: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = Dev::start_with(dir.path(), &["--shards", "1"], &[("SEXTANT_FAILPOINT_ONCE", failpoint)]).await;
    let body = spans_batch("first", 2, SPANS);
    wait_for("the first batch to be acknowledged", Duration::from_secs(30), || async {
        let resp = http().post(format!("{}/api/v1/ingest/spans", dev.url)).header("X-API-Key", dev.api_key());
        let status = resp.json(&body).timeout(Duration::from_secs(15)).send().await.ok()?.status();
        (status == 200).then_some(())
    })
    .await;
    assert!(!dev.proc.exited(), "the process exited");
    assert_eq!(metric(&dev.internal_url, "sextant_node_group_restarts_total").await, Some(1.0));
    assert_eq!(post_spans(&dev.url, dev.api_key(), &spans_batch("second", 2, SPANS)).await.status(), 200);
    let token = dev.token().await;
    for trace in ["first-t0", "first-t1", "second-t0"] {
        let got = get_trace(&dev.url, &token, trace).await.unwrap_or_else(|| panic!("{trace} lost"));
        assert_eq!(got["spans"].as_array().map(Vec::len), Some(SPANS), "{trace}: {got}");
    }
}
