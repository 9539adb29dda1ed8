//! A real three-node cluster with replication factor 3 and a router: kill -9 a follower and
//! then the leader of a shard while clients ingest, restart them, and prove that every
//! acknowledged span is readable exactly once. Shards snapshot every few entries, so the
//! restarted follower has to catch up by installing a snapshot streamed from the leader.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use serde_json::Value;

const TRACES_PER_BATCH: usize = 10;
const SPANS_PER_TRACE: usize = 5;
const WRITERS: usize = 4;

/// Trace ids of acknowledged batches, and how many batches were refused or failed.
#[derive(Default)]
struct Ledger {
    acked: Vec<String>,
    acked_batches: usize,
    failed_batches: usize,
}

async fn writer(url: String, key: String, id: usize, stop: Arc<AtomicBool>, ledger: Arc<Mutex<Ledger>>) {
    let client = http();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let prefix = format!("w{id}-b{n}");
        n += 1;
        let body = spans_batch(&prefix, TRACES_PER_BATCH, SPANS_PER_TRACE);
        let resp = client.post(format!("{url}/api/v1/ingest/spans")).header("X-API-Key", &key).json(&body).send().await;
        let mut ledger = ledger.lock().unwrap();
        match resp {
            Ok(r) if r.status() == 200 => {
                ledger.acked.extend((0..TRACES_PER_BATCH).map(|t| format!("{prefix}-t{t}")));
                ledger.acked_batches += 1;
            }
            Ok(r) => {
                // Only "try again later" is acceptable while nodes die; anything else is a bug.
                assert_eq!(r.status(), 503, "unexpected status while nodes fail over");
                assert!(r.headers().contains_key("retry-after"));
                ledger.failed_batches += 1;
            }
            Err(_) => ledger.failed_batches += 1,
        }
    }
}

fn acked_so_far(ledger: &Mutex<Ledger>) -> usize {
    ledger.lock().unwrap().acked_batches
}

/// Waits until writers got `more` batches acknowledged beyond what they had.
async fn ingest_progress(ledger: &Arc<Mutex<Ledger>>, more: usize, what: &str) {
    let base = acked_so_far(ledger);
    wait_for(what, Duration::from_secs(120), || {
        let ledger = ledger.clone();
        async move { (acked_so_far(&ledger) >= base + more).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_spans_survive_follower_and_leader_kills() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, 2, &["--snapshot-every", "16"]).await;
    let key = cluster.creds["api_key"].as_str().unwrap().to_owned();

    let stop = Arc::new(AtomicBool::new(false));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| tokio::spawn(writer(cluster.url.clone(), key.clone(), id, stop.clone(), ledger.clone())))
        .collect();
    ingest_progress(&ledger, 20, "ingest to start").await;

    // Shard 1: kill a follower mid-ingest, keep ingesting, bring it back.
    let leader = cluster.leader_of(1).await;
    let follower = (0..3).find(|&i| i != leader).unwrap();
    cluster.kill_node(follower);
    ingest_progress(&ledger, 50, "ingest with a follower down").await;
    cluster.start_node(follower);
    ingest_progress(&ledger, 20, "ingest after the follower restarted").await;
    cluster.wait_converged().await;
    let installed = cluster.metric(follower, "sextant_node_snapshots_installed_total").await.unwrap_or(0.0);
    assert!(installed >= 1.0, "the restarted follower caught up without a snapshot: the test lost its point");

    // Now its leader: the survivors elect a new one and the router follows it.
    let leader = cluster.leader_of(1).await;
    cluster.kill_node(leader);
    ingest_progress(&ledger, 20, "ingest after the leader died").await;
    let new_leader = cluster.leader_of(1).await;
    assert_ne!(new_leader, leader);
    cluster.start_node(leader);
    ingest_progress(&ledger, 20, "ingest after the old leader restarted").await;

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    cluster.wait_converged().await;

    let ledger = Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap();
    eprintln!("acknowledged batches {}, failed batches {}", ledger.acked_batches, ledger.failed_batches);
    let token =
        login(&cluster.url, cluster.creds["email"].as_str().unwrap(), cluster.creds["password"].as_str().unwrap())
            .await;
    let expected: BTreeSet<String> = (0..SPANS_PER_TRACE).map(|s| format!("s{s}")).collect();
    let url = cluster.url.clone();
    let reads = futures::stream::iter(ledger.acked.iter().cloned())
        .map(|trace| {
            let url = url.clone();
            let token = token.clone();
            async move { (get_trace_when_served(&url, &token, &trace).await, trace) }
        })
        .buffer_unordered(16);
    futures::pin_mut!(reads);
    let mut checked = 0;
    while let Some((found, trace)) = reads.next().await {
        let found: Value = found.unwrap_or_else(|| panic!("acknowledged trace {trace} is missing"));
        let ids: Vec<&str> =
            found["spans"].as_array().unwrap().iter().map(|s| s["span_id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), SPANS_PER_TRACE, "trace {trace} has {} spans: duplicates or losses", ids.len());
        assert_eq!(ids.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(), expected, "trace {trace}");
        checked += 1;
    }
    drop(reads);
    assert_eq!(checked, ledger.acked.len());

    // Every replica holds everything: with any single node down the data is still all there.
    cluster.kill_node(new_leader);
    for trace in ledger.acked.iter().step_by(7) {
        let found = wait_for("a read after failover", Duration::from_secs(60), || {
            let (url, token, trace) = (cluster.url.clone(), token.clone(), trace.clone());
            async move {
                let resp = http().get(format!("{url}/api/v1/traces/{trace}")).bearer_auth(&token).send().await.ok()?;
                (resp.status() == 200).then_some(())?;
                resp.json::<Value>().await.ok()
            }
        })
        .await;
        assert_eq!(found["spans"].as_array().unwrap().len(), SPANS_PER_TRACE, "trace {trace}");
    }
}

/// A follower killed (by failpoint) while it installs a leader's snapshot, after receiving it
/// and before its state holds it, starts again, catches up and keeps every acknowledged span.
/// openraft purged its log up to the snapshot before the install was durable, and it could not
/// start again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_killed_while_installing_a_snapshot_starts_again_and_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, 1, &["--snapshot-every", "16"]).await;
    let key = cluster.creds["api_key"].as_str().unwrap().to_owned();
    let mut acked = Vec::new();
    let mut ingest = async |cluster: &Cluster, from: usize, batches: usize| {
        for b in from..from + batches {
            let prefix = format!("b{b}");
            let body = spans_batch(&prefix, 2, SPANS_PER_TRACE);
            wait_for("a batch acknowledged", Duration::from_secs(60), || async {
                (post_spans(&cluster.url, &key, &body).await.status() == 200).then_some(())
            })
            .await;
            acked.extend([format!("{prefix}-t0"), format!("{prefix}-t1")]);
        }
    };
    ingest(&cluster, 0, 10).await;
    let leader = cluster.leader_of(1).await;
    let follower = (0..3).find(|&i| i != leader).unwrap();
    cluster.kill_node(follower);
    ingest(&cluster, 10, 60).await;

    cluster.start_node_with_env(follower, &[("SEXTANT_FAILPOINT", "install-before-state")]);
    let mut node = cluster.nodes[follower].take().unwrap();
    wait_for("the follower to reach the failpoint while installing", Duration::from_secs(120), || {
        std::future::ready(node.exited().then_some(()))
    })
    .await;
    cluster.start_node(follower);
    ingest(&cluster, 70, 10).await;
    cluster.wait_converged().await;
    let installed = cluster.metric(follower, "sextant_node_snapshots_installed_total").await.unwrap_or(0.0);
    assert!(installed >= 1.0, "the follower caught up without installing a snapshot");

    // With one other node down, the restarted follower is half the quorum that serves reads.
    cluster.kill_node((0..3).find(|&i| i != follower).unwrap());
    let token = cluster.token().await;
    for trace in &acked {
        let found = get_trace_when_served(&cluster.url, &token, trace).await;
        let found = found.unwrap_or_else(|| panic!("acknowledged trace {trace} is missing"));
        assert_eq!(found["spans"].as_array().unwrap().len(), SPANS_PER_TRACE, "trace {trace}");
    }
}
