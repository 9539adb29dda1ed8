//! Failover under steady writes (issue 26, docs/RELIABILITY.md "Failover"): three nodes with
//! replication factor 3 and a router. A shard leader frozen with SIGSTOP or killed with
//! SIGKILL is routed around: acknowledgements resume within 3 s, and every acknowledged batch
//! is readable afterwards, also those acknowledged while the frozen leader woke up. A follower
//! whose Raft log fsyncs take 200 ms does not slow acknowledgements down.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use futures::StreamExt;
use serde_json::Value;

const WRITERS: usize = 4;
/// Each writer sends at most one batch per period: steady load that leaves the two cores
/// room for the nodes' timers.
const PACE: Duration = Duration::from_millis(25);
const TRACES_PER_BATCH: usize = 4;
const SPANS_PER_TRACE: usize = 2;
/// How long the fault lasts: twice the bound, so that a cluster that only recovers when the
/// leader comes back fails.
const FAULT: Duration = Duration::from_secs(6);
/// Issue 26's bound on the longest time without an acknowledged write after a leader freezes
/// or dies.
const BOUND: Duration = Duration::from_secs(3);
/// What a busy 2-core machine adds to it (docs/RELIABILITY.md, "Failover": the gaps measured
/// were 1.3 to 1.9 s with the machine loaded by other builds).
const MARGIN: Duration = Duration::from_millis(500);

/// One batch a writer sent.
struct Write {
    prefix: String,
    sent: Instant,
    done: Instant,
    acked: bool,
}

#[derive(Default)]
struct Ledger {
    writes: Vec<Write>,
}

impl Ledger {
    fn acked(&self) -> usize {
        self.writes.iter().filter(|w| w.acked).count()
    }

    /// The longest time between two acknowledgements (or from the last one to `to`) among
    /// those from the last acknowledgement before `from` on.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut acks: Vec<Instant> = self.writes.iter().filter(|w| w.acked).map(|w| w.done).collect();
        acks.sort();
        let start = acks.iter().rposition(|t| *t < from).unwrap_or(0);
        let mut times: Vec<Instant> = acks[start..].iter().copied().filter(|t| *t <= to).collect();
        times.push(to);
        times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
    }

    /// Latencies of the batches sent and acknowledged in `[from, to)`, sorted.
    fn latencies(&self, from: Instant, to: Instant) -> Vec<Duration> {
        let mut l: Vec<Duration> =
            self.writes.iter().filter(|w| w.acked && w.sent >= from && w.sent < to).map(|w| w.done - w.sent).collect();
        l.sort();
        l
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    assert!(!sorted.is_empty(), "no acknowledged write to measure");
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

struct Writers {
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    fn start(url: &str, key: &str) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let tasks = (0..WRITERS)
            .map(|id| tokio::spawn(writer(url.to_owned(), key.to_owned(), id, stop.clone(), ledger.clone())))
            .collect();
        Writers { stop, ledger, tasks }
    }

    fn acked(&self) -> usize {
        self.ledger.lock().unwrap().acked()
    }

    /// Waits until `more` batches beyond those acknowledged so far are.
    async fn progress(&self, more: usize, what: &str) {
        let base = self.acked();
        wait_for(what, Duration::from_secs(120), || async move { (self.acked() >= base + more).then_some(()) }).await;
    }

    async fn stop(self) -> Ledger {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(self.ledger).ok().unwrap().into_inner().unwrap()
    }
}

async fn writer(url: String, key: String, id: usize, stop: Arc<AtomicBool>, ledger: Arc<Mutex<Ledger>>) {
    let client = http();
    let mut tick = tokio::time::interval(PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0.. {
        tick.tick().await;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let prefix = format!("w{id}-b{n}");
        let body = spans_batch(&prefix, TRACES_PER_BATCH, SPANS_PER_TRACE);
        let sent = Instant::now();
        let resp = client.post(format!("{url}/api/v1/ingest/spans")).header("X-API-Key", &key).json(&body).send().await;
        let acked = match resp {
            Ok(r) if r.status() == 200 => true,
            Ok(r) => {
                // While a leader fails over only "try again later" is acceptable.
                assert_eq!(
                    r.status(),
                    503,
                    "unexpected status during failover: {}",
                    r.text().await.unwrap_or_default()
                );
                false
            }
            Err(_) => false,
        };
        ledger.lock().unwrap().writes.push(Write { prefix, sent, done: Instant::now(), acked });
    }
}

/// Every acknowledged batch is readable, each trace with exactly its spans.
async fn assert_all_acknowledged_readable(cluster: &Cluster, ledger: &Ledger) {
    let token = cluster.token().await;
    let expected: BTreeSet<String> = (0..SPANS_PER_TRACE).map(|s| format!("s{s}")).collect();
    let traces: Vec<String> = ledger
        .writes
        .iter()
        .filter(|w| w.acked)
        .flat_map(|w| (0..TRACES_PER_BATCH).map(move |t| format!("{}-t{t}", w.prefix)))
        .collect();
    let url = cluster.url.clone();
    let reads = futures::stream::iter(traces.iter().cloned())
        .map(|trace| {
            let (url, token) = (url.clone(), token.clone());
            async move { (get_trace(&url, &token, &trace).await, trace) }
        })
        .buffer_unordered(16);
    futures::pin_mut!(reads);
    let mut checked = 0;
    while let Some((found, trace)) = reads.next().await {
        let found: Value = found.unwrap_or_else(|| panic!("acknowledged trace {trace} is missing"));
        let ids: BTreeSet<String> =
            found["spans"].as_array().unwrap().iter().map(|s| s["span_id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(found["spans"].as_array().unwrap().len(), SPANS_PER_TRACE, "trace {trace}: lost or duplicated");
        assert_eq!(ids, expected, "trace {trace}");
        checked += 1;
    }
    assert_eq!(checked, traces.len());
}

fn signal(cluster: &Cluster, i: usize, sig: libc::c_int) {
    let pid = cluster.nodes[i].as_ref().expect("the node runs").pid();
    // SAFETY: a plain kill(2) on a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0, "kill({pid}, {sig})");
}

/// `(state, term)` of `group` on every node that answers, by node index.
async fn claims(cluster: &Cluster, group: u64) -> Vec<(usize, String, u64)> {
    let mut out = Vec::new();
    for i in 0..cluster.nodes.len() {
        if let Some(g) = cluster.group_status(i, group).await {
            out.push((i, g["state"].as_str().unwrap_or("").to_owned(), g["term"].as_u64().unwrap_or(0)));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_leader_is_routed_around_and_steps_down_when_it_wakes() {
    let dir = tempfile::tempdir().unwrap();
    // Two shards, four traces a batch: nearly every batch needs both shard leaders.
    let cluster = Cluster::start(dir.path(), 3, 2, &[]).await;
    let writers = Writers::start(&cluster.url, cluster.creds["api_key"].as_str().unwrap());
    writers.progress(100, "ingest to start").await;

    let leader = cluster.leader_of(1).await;
    let term = cluster.group_status(leader, 1).await.unwrap()["term"].as_u64().unwrap();
    let frozen = Instant::now();
    signal(&cluster, leader, libc::SIGSTOP);
    tokio::time::sleep(FAULT).await;
    let gap_frozen = writers.ledger.lock().unwrap().longest_gap(frozen, Instant::now());
    signal(&cluster, leader, libc::SIGCONT);
    let woke = Instant::now();
    writers.progress(100, "ingest after the leader woke").await;

    // The old leader stepped down: one leader, in a newer term, and it is another node.
    let now_leading = wait_for("the woken leader to step down", Duration::from_secs(30), || async {
        let c = claims(&cluster, 1).await;
        let leaders: Vec<_> = c.iter().filter(|(_, state, _)| state == "Leader").collect();
        (c.len() == 3 && leaders.len() == 1 && c.iter().all(|(_, _, t)| *t == leaders[0].2)).then(|| leaders[0].clone())
    })
    .await;
    assert!(now_leading.2 > term, "no election while the leader was frozen: {now_leading:?}, term was {term}");
    assert_ne!(now_leading.0, leader, "the frozen node leads again");

    let ledger = writers.stop().await;
    let gap = ledger.longest_gap(frozen, Instant::now());
    eprintln!(
        "SIGSTOP of node {} for {FAULT:?}: longest gap without an acknowledgement {gap_frozen:?} while frozen, \
         {gap:?} in all; {} batches acknowledged, {} not",
        Cluster::node_id(leader),
        ledger.acked(),
        ledger.writes.len() - ledger.acked()
    );
    assert!(gap_frozen <= BOUND + MARGIN, "no write acknowledged for {gap_frozen:?} while the leader was frozen");
    assert!(gap <= BOUND + MARGIN, "no write acknowledged for {gap:?} around the leader's wake-up");
    let after_wake = ledger.writes.iter().filter(|w| w.acked && w.done >= woke).count();
    assert!(after_wake > 0);
    cluster.wait_converged().await;
    assert_all_acknowledged_readable(&cluster, &ledger).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_leader_is_routed_around_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, 2, &[]).await;
    let writers = Writers::start(&cluster.url, cluster.creds["api_key"].as_str().unwrap());
    writers.progress(100, "ingest to start").await;

    let leader = cluster.leader_of(1).await;
    let killed = Instant::now();
    cluster.kill_node(leader);
    tokio::time::sleep(FAULT).await;
    let gap = writers.ledger.lock().unwrap().longest_gap(killed, Instant::now());
    cluster.start_node(leader);
    writers.progress(100, "ingest after the node restarted").await;

    let ledger = writers.stop().await;
    eprintln!(
        "SIGKILL of node {}: longest gap without an acknowledgement {gap:?}; {} batches acknowledged, {} not",
        Cluster::node_id(leader),
        ledger.acked(),
        ledger.writes.len() - ledger.acked()
    );
    assert!(gap <= BOUND + MARGIN, "no write acknowledged for {gap:?} after the leader died");
    cluster.wait_converged().await;
    assert_all_acknowledged_readable(&cluster, &ledger).await;
}

/// The slow node's Raft log fsyncs, from its metrics.
async fn fsyncs(cluster: &Cluster, i: usize) -> f64 {
    wait_for("the node's metrics", Duration::from_secs(30), || cluster.metric(i, "sextant_node_raft_log_fsyncs_total"))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_with_a_slow_disk_does_not_slow_acknowledgements() {
    const SLOW_FSYNC_MS: u64 = 600;
    const WINDOW: Duration = Duration::from_secs(10);
    let dir = tempfile::tempdir().unwrap();
    // One shard: every write goes to one group, whose leader the slow node is not.
    let mut cluster = Cluster::start(dir.path(), 3, 1, &[]).await;
    let writers = Writers::start(&cluster.url, cluster.creds["api_key"].as_str().unwrap());
    writers.progress(100, "ingest to start").await;

    let base_from = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let base = writers.ledger.lock().unwrap().latencies(base_from, Instant::now());

    let leader = cluster.leader_of(1).await;
    let slow = (0..3).find(|&i| i != leader).unwrap();
    cluster.kill_node(slow);
    cluster.start_node_with_env(slow, &[("SEXTANT_FAILPOINT_FSYNC_DELAY_MS", &SLOW_FSYNC_MS.to_string())]);
    wait_for("the slow node to follow the leader", Duration::from_secs(60), || async {
        let g = cluster.group_status(slow, 1).await?;
        (g["state"] == "Follower" && g["leader"].as_u64().is_some()).then_some(())
    })
    .await;
    assert_eq!(cluster.leader_of(1).await, leader, "the leader changed; the test needs it to stay");
    writers.progress(50, "ingest with the slow follower").await;

    let slow_from = Instant::now();
    let fsyncs_before = fsyncs(&cluster, slow).await;
    tokio::time::sleep(WINDOW).await;
    let fsyncs_during = fsyncs(&cluster, slow).await - fsyncs_before;
    let with_slow = writers.ledger.lock().unwrap().latencies(slow_from, Instant::now());
    let applied = |g: Option<Value>| g.and_then(|g| g["last_applied"].as_u64()).unwrap_or(0);
    let lag = applied(cluster.group_status(leader, 1).await) - applied(cluster.group_status(slow, 1).await);
    assert_eq!(cluster.leader_of(1).await, leader, "the leader changed while measuring");
    let ledger = writers.stop().await;

    let (b50, b99) = (percentile(&base, 0.5), percentile(&base, 0.99));
    let (s50, s99) = (percentile(&with_slow, 0.5), percentile(&with_slow, 0.99));
    eprintln!(
        "write latency, {} batches: p50 {b50:?} p99 {b99:?}; with node {} fsyncing in {SLOW_FSYNC_MS} ms \
         ({fsyncs_during} fsyncs in {WINDOW:?}, {lag} entries behind the leader), {} batches: p50 {s50:?} \
         p99 {s99:?}",
        base.len(),
        Cluster::node_id(slow),
        with_slow.len()
    );
    // The failpoint works: at most one fsync per delay.
    assert!(
        fsyncs_during <= (WINDOW.as_millis() as f64 / SLOW_FSYNC_MS as f64) + 1.0,
        "{fsyncs_during} fsyncs in {WINDOW:?}: the slow disk is not slow"
    );
    // Waiting for the slow follower would put 600 ms into every acknowledgement; the p99 of a
    // busy machine varies by a few hundred ms between windows (docs/BENCHMARKS.md, "Failover").
    assert!(s50 <= b50 * 2 + Duration::from_millis(50), "p50 {s50:?} with a slow follower, {b50:?} without");
    assert!(s99 <= b99 * 2 + Duration::from_millis(200), "p99 {s99:?} with a slow follower, {b99:?} without");
    // Acknowledgements that waited for the slow disk would take 600 ms each: at most this many
    // from the closed-loop writers, a quarter more as margin. A busy CI machine acknowledged
    // 209 batches in a window without the slow follower (p50 142 ms): well above that floor,
    // where one for 200 ms could not tell waiting from a slow machine. Not a share of the
    // first window's count: this machine's speed moves between windows (docs/BENCHMARKS.md,
    // "Failover").
    let waiting = WRITERS as u128 * WINDOW.as_millis() / u128::from(SLOW_FSYNC_MS);
    assert!(
        with_slow.len() as u128 > waiting + waiting / 4,
        "{} writes acknowledged with the slow follower ({} without): acknowledgements wait for it",
        with_slow.len(),
        base.len()
    );
    assert_all_acknowledged_readable(&cluster, &ledger).await;
}
