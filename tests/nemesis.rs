//! Faults under load (issue 26): storage nodes, each in a network namespace of its own, and two
//! routers under sustained mixed ingest (spans, logs, analytics events) while a nemesis kills
//! nodes with SIGKILL, pauses them with SIGSTOP, partitions them from their peers or from the
//! routers and fills a node's disk. Every batch is recorded as acknowledged, failed or unknown;
//! afterwards every acknowledged object must be readable exactly once, every other batch whole
//! or not at all, and reads must not change across the final heal. Needs root (namespaces, tmpfs).
//!
//! The short run is part of the normal suite; the long ones run on demand (docs/RELIABILITY.md,
//! "Faults: the nemesis harness"):
//! `SEXTANT_NEMESIS_SECS=300 cargo nextest run --test e2e nemesis:: --run-ignored only --no-capture`

use std::time::Duration;

use crate::common::nemesis::*;

fn seed() -> u64 {
    let seed = std::env::var("SEXTANT_NEMESIS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("nemesis seed {seed} (SEXTANT_NEMESIS_SEED={seed} replays the same choices)");
    seed
}

enum Dir {
    Temp(tempfile::TempDir),
    Kept(std::path::PathBuf),
}

impl Dir {
    fn path(&self) -> &std::path::Path {
        match self {
            Dir::Temp(d) => d.path(),
            Dir::Kept(p) => p,
        }
    }
}

/// Nothing acknowledged lost, nothing stored twice, no unacknowledged batch stored in part.
fn assert_intact(verdict: &Verdict) {
    assert_eq!(verdict.lost, 0, "acknowledged objects lost: {:#?}", verdict.problems);
    assert_eq!(verdict.duplicated, 0, "batches stored twice: {:#?}", verdict.problems);
    assert!(verdict.torn.is_empty(), "unacknowledged batches stored in part: {:#?}", verdict.torn);
}

/// Runs the plan under ingest, then checks the data: what every test of this file does.
async fn survive(nodes: usize, shards: u32, writers: usize, mut plan: Plan) {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    // SEXTANT_NEMESIS_KEEP=1: the processes' logs and data stay for a look, pass or fail.
    let dir = if std::env::var_os("SEXTANT_NEMESIS_KEEP").is_some() {
        let kept = dir.keep();
        eprintln!("logs and data kept in {}", kept.display());
        Dir::Kept(kept)
    } else {
        Dir::Temp(dir)
    };
    let mut c = NemesisCluster::start(dir.path(), nodes, shards).await;
    let w = Writers::start(&c, writers, Duration::from_millis(100));
    w.progress(20, "ingest to start").await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(plan.seed ^ 0x5eed);
    for (fault, _) in plan.script.iter_mut() {
        let node = rng.gen_range(0..nodes);
        match fault {
            Fault::Kill(v) | Fault::Pause(v) | Fault::Partition(v) | Fault::Isolate(v) if v.is_empty() => v.push(node),
            _ => {}
        }
    }
    let records = run_nemesis(&mut c, &w, &plan).await;
    w.progress(10, "ingest after the last fault").await;
    let writes = w.stop().await;
    c.wait_commits_settled().await;

    // With writes stopped and one node cut off, then after the heal: the same answers through
    // both routers.
    let trace = writes
        .iter()
        .find(|w| w.kind == Kind::Spans && w.outcome == Outcome::Acked)
        .map(|w| format!("{}-t0", w.id))
        .expect("a batch of spans was acknowledged");
    let cut = Fault::Partition(vec![rng.gen_range(0..nodes)]);
    eprintln!("final reads with {cut:?}");
    c.inject(&cut).await;
    let before = [c.snapshot_reads(0, &trace).await, c.snapshot_reads(1, &trace).await];
    c.heal(&cut).await;
    c.wait_all_ready().await;
    c.wait_converged().await;
    let after = [c.snapshot_reads(0, &trace).await, c.snapshot_reads(1, &trace).await];
    let replicas = c.compare_replicas().await;
    eprintln!("every replica answers the same: shards and their nodes {replicas:?}");
    let verdict = c.verify(&writes, 1).await;
    report(&records, &verdict);

    assert_eq!(before[0], before[1], "the two routers answer differently while a node is cut off");
    assert_eq!(after[0], after[1], "the two routers answer differently after the heal");
    assert_eq!(before[0], after[0], "reads changed across the final heal");
    assert!(verdict.acked > 0, "nothing was acknowledged");
    assert_intact(&verdict);
    assert!(verdict.problems.is_empty(), "{:#?}", verdict.problems);
    let unexpected: Vec<_> = verdict.statuses.keys().filter(|s| ![429, 503, 504].contains(*s)).collect();
    assert!(unexpected.is_empty(), "answers other than 200, 429, 503 and 504 under faults: {:?}", verdict.statuses);
}

/// The normal suite's run: one kill -9 and restart, one SIGSTOP, one partition of a node from
/// its peers and one from the routers, 5 s each, on three nodes under ingest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_under_a_kill_a_pause_and_a_partition_lose_nothing() {
    let hold = Duration::from_secs(5);
    let plan = Plan {
        seed: seed(),
        script: vec![
            (Fault::Kill(vec![]), hold),
            (Fault::Pause(vec![]), hold),
            (Fault::Partition(vec![]), hold),
            (Fault::Isolate(vec![]), hold),
        ],
        duration: Duration::ZERO,
        two_at_once: false,
    };
    survive(3, 2, 4, plan).await;
}

/// A leader that its peers still hear but the routers cannot reach (a partition between the
/// routers and one node) is reached through another replica, which relays the call: nobody
/// elects a new leader, and acknowledgements go on without a gap of 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_the_routers_is_reached_through_its_peers() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = NemesisCluster::start(dir.path(), 3, 2).await;
    let leader_of = |s: serde_json::Value, group: u64| {
        s["groups"].as_array()?.iter().find(|g| g["group"] == group)?["leader"].as_u64()
    };
    // Shard 1's leader: nearly every batch has spans for both shards.
    let leader = leader_of(c.status(0).await.unwrap(), 1).expect("shard 1 has a leader");
    let cut = leader as usize - 1;
    let peers: Vec<usize> = (0..3).filter(|i| *i != cut).collect();
    let w = Writers::start(&c, 2, Duration::from_millis(100));
    w.progress(10, "ingest to start").await;

    let fault = Fault::Isolate(vec![cut]);
    let start = std::time::Instant::now();
    c.inject(&fault).await;
    w.progress(20, "acknowledgements while the leader is cut off from the routers").await;
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(start.elapsed())).await;
    let gap = w.longest_gap(start, std::time::Instant::now());
    let relayed = {
        let mut total = 0.0;
        for &i in &peers {
            total += crate::common::metric(&c.node_url(i), "sextant_node_relayed_calls_total").await.unwrap_or(0.0);
        }
        total
    };
    let still = leader_of(c.status(peers[0]).await.unwrap(), 1);
    eprintln!("node {leader} cut off for 8 s: longest gap {gap:?}, {relayed} calls relayed by its peers");
    c.heal(&fault).await;
    c.wait_all_ready().await;
    let writes = w.stop().await;
    c.wait_commits_settled().await;
    let verdict = c.verify(&writes, 0).await;

    assert!(gap < Duration::from_secs(3), "no acknowledgement for {gap:?} while node {leader} was cut off");
    assert!(relayed > 0.0, "no call was relayed by node {leader}'s peers");
    assert_eq!(still, Some(leader), "the peers elected another leader: the cut was not between routers and node");
    assert_intact(&verdict);
}

fn long_duration() -> Duration {
    let secs = std::env::var("SEXTANT_NEMESIS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    Duration::from_secs(secs)
}

/// Random faults for SEXTANT_NEMESIS_SECS (default 300) on three nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long: SEXTANT_NEMESIS_SECS=300 cargo nextest run --test e2e nemesis:: --run-ignored only"]
async fn three_nodes_under_random_faults_for_minutes_lose_nothing() {
    let plan = Plan { seed: seed(), script: vec![], duration: long_duration(), two_at_once: false };
    survive(3, 2, 4, plan).await;
}

/// Random faults on five nodes, two nodes at a time in half of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long: SEXTANT_NEMESIS_SECS=300 cargo nextest run --test e2e nemesis:: --run-ignored only"]
async fn five_nodes_under_random_faults_two_at_a_time_lose_nothing() {
    let plan = Plan { seed: seed(), script: vec![], duration: long_duration(), two_at_once: true };
    survive(5, 4, 4, plan).await;
}
