//! Dynamic storage membership with real processes, driven through the admin API as the
//! operator drives it: nodes join a running cluster, the placement moves replicas onto them
//! (learner, snapshot install, promotion), drains move every replica off a node before it is
//! stopped, and no acknowledged span is lost or duplicated on the way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use sextant_operator::admin::{AdminConnector, AdminEndpoint, AdminError, HttpConnector};
use sextant_operator::replacement::{self, IdentityState, Policy, ReplacementDecision};

const SECRET: &str = "test-cluster-secret-0123456789abcdef";
const JWT: &str = "test-jwt-secret-0123456789abcdef0123456789";
const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef0123456789";
const MOVE_TIMEOUT: Duration = Duration::from_secs(240);

/// A cluster whose membership changes: node `i` (index) has id `i + 1`; the first `initial`
/// nodes form the cluster from static peers, later ones start with `--join`.
struct Scaled {
    _logs: LogsOnPanic,
    dir: PathBuf,
    shards: u32,
    snapshot_every: u32,
    initial: usize,
    ports: Vec<(u16, u16)>,
    nodes: Vec<Option<Proc>>,
    router: Proc,
    url: String,
    /// The router's `--internal-listen`, where the admin API is.
    internal_url: String,
    creds: Value,
}

impl Scaled {
    async fn start(dir: &Path, n: usize, shards: u32, snapshot_every: u32) -> Scaled {
        let mut c = Self::start_some(dir, n, n, shards, snapshot_every);
        c.wait_bootstrapped().await;
        c
    }

    /// `n` static members of which only the first `started` are started.
    fn start_some(dir: &Path, n: usize, started: usize, shards: u32, snapshot_every: u32) -> Scaled {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let router_port = free_port();
        let seeds = ports.iter().map(|(g, _)| format!("127.0.0.1:{g}")).collect::<Vec<_>>().join(",");
        let creds_path = dir.join("credentials.json");
        let listen = format!("127.0.0.1:{router_port}");
        let internal = format!("127.0.0.1:{}", free_port());
        let router = Proc::spawn(
            &[
                "router",
                "--listen",
                &listen,
                "--internal-listen",
                &internal,
                "--nodes",
                &seeds,
                "--bootstrap-credentials",
                creds_path.to_str().unwrap(),
                "--api-rps",
                "100000",
                "--ingest-rps",
                "100000",
            ],
            &dir.join("router.log"),
            &[("SEXTANT_CLUSTER_SECRET", SECRET), ("SEXTANT_JWT_SECRET", JWT), ("SEXTANT_ADMIN_TOKEN", ADMIN_TOKEN)],
        );
        let mut c = Scaled {
            _logs: LogsOnPanic::new(dir),
            dir: dir.to_owned(),
            shards,
            snapshot_every,
            initial: n,
            ports,
            nodes: (0..n).map(|_| None).collect(),
            router,
            url: format!("http://{listen}"),
            internal_url: format!("http://{internal}"),
            creds: Value::Null,
        };
        for i in 0..started {
            c.spawn_node(i);
        }
        c
    }

    async fn wait_bootstrapped(&mut self) {
        self.creds = wait_bootstrap(&self.url, &self.dir, &mut self.router).await;
    }

    fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i].0)
    }

    /// `join`: `--join` (registers as joining); otherwise, past the initial nodes, the node is
    /// started as the operator starts a scale-out pod: every node so far in `--peers`, no flag.
    fn spawn_node_as(&mut self, i: usize, join: bool) {
        let known = if i >= self.initial { self.ports.len() } else { self.initial };
        let peers = (0..known).map(|j| format!("{}={}", j + 1, self.addr(j))).collect::<Vec<_>>().join(",");
        let (grpc, http) = self.ports[i];
        let data = self.dir.join(format!("node{}", i + 1));
        let mut args: Vec<String> = vec![
            "node".into(),
            "--id".into(),
            (i + 1).to_string(),
            "--listen".into(),
            format!("127.0.0.1:{grpc}"),
            "--http-listen".into(),
            format!("127.0.0.1:{http}"),
            "--data-dir".into(),
            data.to_str().unwrap().into(),
            "--peers".into(),
            peers,
            "--shards".into(),
            self.shards.to_string(),
            "--replication-factor".into(),
            "3".into(),
            "--snapshot-every".into(),
            self.snapshot_every.to_string(),
            // These tests are about membership, not about the shared test machine's free space.
            "--disk-high-water".into(),
            "100".into(),
            "--disk-min-free-mib".into(),
            "0".into(),
        ];
        if join {
            args.push("--join".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = self.dir.join(format!("node{}.log", i + 1));
        self.nodes[i] = Some(Proc::spawn(&args, &log, &[("SEXTANT_CLUSTER_SECRET", SECRET)]));
    }

    fn spawn_node(&mut self, i: usize) {
        self.spawn_node_as(i, i >= self.initial);
    }

    /// Starts a new node with `--join`; returns its index once meta lists it as joining.
    async fn join_node(&mut self) -> usize {
        self.add_node(true).await
    }

    /// Starts a new node (see [`Self::spawn_node_as`]); returns its index once meta lists it as
    /// joining: known, but holding nothing yet.
    async fn add_node(&mut self, join: bool) -> usize {
        self.ports.push((free_port(), free_port()));
        self.nodes.push(None);
        let i = self.ports.len() - 1;
        self.spawn_node_as(i, join);
        let id = i as u64 + 1;
        let me = &*self;
        wait_for("the new node to register", Duration::from_secs(60), || async move {
            let nodes = me.admin_nodes().await?;
            nodes.iter().any(|n| n["id"] == id && n["state"] == "Joining").then_some(())
        })
        .await;
        i
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].take() {
            p.kill();
        }
    }

    /// Waits until meta and shards 1..=`shards` each have a leader.
    async fn wait_every_group_led(&self, shards: u64) {
        let all: BTreeSet<u64> = (0..=shards).collect();
        wait_for("meta and every shard to have a leader", Duration::from_secs(60), || async {
            let mut leaders = BTreeSet::new();
            for i in 0..self.nodes.len() {
                let s = self.status(i).await?;
                let led = s["groups"].as_array()?.iter().filter(|g| g["state"] == "Leader");
                leaders.extend(led.filter_map(|g| g["group"].as_u64()));
            }
            (leaders == all).then_some(())
        })
        .await;
    }

    /// Writes a batch of spans and reads every one of them back.
    async fn ingest_and_read_back(&self, prefix: &str) -> Result<(), String> {
        let acked = post_acked(&self.url, &self.api_key(), prefix).await;
        check_all_readable(&self.url, &self.token().await, &acked).await
    }

    async fn admin_nodes(&self) -> Option<Vec<Value>> {
        let resp = http()
            .get(format!("{}/admin/v1/cluster/nodes", self.internal_url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .ok()?;
        if resp.status() != 200 {
            return None;
        }
        resp.json::<Value>().await.ok()?["nodes"].as_array().cloned()
    }

    async fn admin_post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = http()
            .post(format!("{}/admin/v1/cluster/{path}", self.internal_url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Places groups on `nodes`. A node that has just started may not have registered yet: the
    /// operator requeues on `unknown_node`, and so does this, for a bounded time.
    async fn place(&self, nodes: &[usize]) {
        let addrs: Vec<String> = nodes.iter().map(|i| self.addr(*i)).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self.admin_post("placement", json!({ "nodes": addrs })).await;
            if status == 409 && body["error"]["code"] == "unknown_node" && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(status, 202, "placement refused: {body}");
            return;
        }
    }

    async fn drain(&self, i: usize) {
        let (status, body) = self.admin_post("drain", json!({ "address": self.addr(i) })).await;
        assert_eq!(status, 202, "drain refused: {body}");
    }

    /// Waits until meta reports node `i` in `state`.
    async fn wait_state(&self, i: usize, state: &str) {
        let id = i as u64 + 1;
        wait_for(&format!("node {id} to be {state}"), MOVE_TIMEOUT, || async move {
            let nodes = self.admin_nodes().await?;
            nodes.iter().any(|n| n["id"] == id && n["state"] == state).then_some(())
        })
        .await
    }

    async fn status(&self, i: usize) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}/status", self.ports[i].1);
        http().get(url).timeout(Duration::from_secs(2)).send().await.ok()?.json().await.ok()
    }

    /// Groups node `i` hosts a replica of.
    async fn hosted(&self, i: usize) -> Option<BTreeSet<u64>> {
        let s = self.status(i).await?;
        Some(s["groups"].as_array()?.iter().filter_map(|g| g["group"].as_u64()).collect())
    }

    async fn metric(&self, i: usize, name: &str) -> f64 {
        metric(&format!("http://127.0.0.1:{}", self.ports[i].1), name).await.unwrap_or(0.0)
    }

    fn api_key(&self) -> String {
        self.creds["api_key"].as_str().unwrap().to_owned()
    }

    async fn token(&self) -> String {
        login(&self.url, self.creds["email"].as_str().unwrap(), self.creds["password"].as_str().unwrap()).await
    }
}

const TRACES_PER_BATCH: usize = 10;
const SPANS_PER_TRACE: usize = 4;

/// Posts one batch; the trace ids it stored when acknowledged.
async fn post_batch(url: &str, key: &str, prefix: &str) -> Result<Vec<String>, u16> {
    let body = spans_batch(prefix, TRACES_PER_BATCH, SPANS_PER_TRACE);
    match http().post(format!("{url}/api/v1/ingest/spans")).header("X-API-Key", key).json(&body).send().await {
        Ok(r) if r.status() == 200 => Ok((0..TRACES_PER_BATCH).map(|t| format!("{prefix}-t{t}")).collect()),
        Ok(r) => Err(r.status().as_u16()),
        Err(_) => Err(0),
    }
}

/// Posts batches until one is acknowledged; only "try again later" may come back meanwhile
/// (a leader election after a kill). Unacknowledged batches are not expected to be readable.
async fn post_acked(url: &str, key: &str, prefix: &str) -> Vec<String> {
    for attempt in 0..10 {
        match post_batch(url, key, &format!("{prefix}-a{attempt}")).await {
            Ok(traces) => return traces,
            Err(status) => assert!(status == 503 || status == 0, "{prefix}: unexpected status {status}"),
        }
    }
    panic!("{prefix}: no batch acknowledged in 10 attempts");
}

/// Every trace in `acked` is readable with exactly its spans, once each. Reads every trace and
/// then reports all that are wrong in one short error (the end of a CI log shows it; a panic
/// would be followed by its backtrace).
async fn check_all_readable(url: &str, token: &str, acked: &[String]) -> Result<(), String> {
    let expected: BTreeSet<String> = (0..SPANS_PER_TRACE).map(|s| format!("s{s}")).collect();
    let reads = futures::stream::iter(acked.iter().cloned())
        .map(|trace| async move { (get_trace_when_served(url, token, &trace).await, trace) })
        .buffer_unordered(16);
    futures::pin_mut!(reads);
    let (mut missing, mut wrong) = (Vec::new(), Vec::new());
    while let Some((found, trace)) = reads.next().await {
        let Some(found) = found else {
            missing.push(trace);
            continue;
        };
        let mut ids: Vec<String> =
            found["spans"].as_array().unwrap().iter().map(|s| s["span_id"].as_str().unwrap().to_owned()).collect();
        ids.sort();
        if ids.len() != SPANS_PER_TRACE || ids.iter().cloned().collect::<BTreeSet<_>>() != expected {
            wrong.push(format!("{trace}: {ids:?}"));
        }
    }
    if missing.is_empty() && wrong.is_empty() {
        return Ok(());
    }
    missing.sort();
    Err(format!(
        "of {} acknowledged traces, {} are missing (first: {:?}) and {} have wrong spans (first: {:?})",
        acked.len(),
        missing.len(),
        &missing[..missing.len().min(12)],
        wrong.len(),
        &wrong[..wrong.len().min(4)]
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_joined_node_gets_replicas_by_snapshot_and_a_drain_empties_it() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start(dir.path(), 3, 2, 16).await;
    let key = c.api_key();
    let mut acked = Vec::new();
    // Enough entries per shard that snapshots were taken and the logs purged: a new replica
    // can only catch up by installing a snapshot.
    for b in 0..60 {
        acked.extend(post_batch(&c.url, &key, &format!("pre-b{b}")).await.expect("ingest before scaling"));
    }

    // The admin API needs the token, and refuses placements it cannot honour.
    let anon = http().get(format!("{}/admin/v1/cluster/nodes", c.internal_url)).send().await.unwrap();
    assert_eq!(anon.status(), 401);
    let (status, body) = c.admin_post("placement", json!({"nodes": [c.addr(0), c.addr(1)]})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("too_few_nodes")), "{body}");
    let (status, body) =
        c.admin_post("placement", json!({"nodes": [c.addr(0), c.addr(1), c.addr(2), "10.0.0.1:1"]})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("unknown_node")), "{body}");
    let (status, body) = c.admin_post("drain", json!({"address": c.addr(2)})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("too_few_nodes")), "{body}");
    let nodes = c.admin_nodes().await.unwrap();
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["state"] == "Active"), "{nodes:?}");

    let new = c.join_node().await;
    assert_eq!(c.hosted(new).await.unwrap(), BTreeSet::new(), "a joining node holds nothing");
    c.place(&[0, 1, 2, new]).await;
    for i in 0..=new {
        c.wait_state(i, "Active").await;
    }
    // 3 groups x 3 replicas over 4 nodes: the new node holds two of them.
    let hosted = c.hosted(new).await.unwrap();
    assert_eq!(hosted.len(), 2, "{hosted:?}");
    assert!(c.metric(new, "sextant_node_snapshots_installed_total").await >= 1.0, "no snapshot was installed");
    for b in 0..10 {
        acked.extend(post_acked(&c.url, &key, &format!("mid-b{b}")).await);
    }
    let token = c.token().await;
    check_all_readable(&c.url, &token, &acked).await?;

    c.drain(new).await;
    c.wait_state(new, "Drained").await;
    wait_for("the drained node to delete its replicas", Duration::from_secs(60), || async {
        c.hosted(new).await.filter(|h| h.is_empty())
    })
    .await;
    c.kill(new);
    for b in 0..10 {
        acked.extend(post_acked(&c.url, &key, &format!("post-b{b}")).await);
    }
    check_all_readable(&c.url, &token, &acked).await?;
    let nodes = c.admin_nodes().await.unwrap();
    assert!(nodes.iter().filter(|n| n["id"] != new as u64 + 1).all(|n| n["state"] == "Active"), "{nodes:?}");
    Ok(())
}

/// A node that died for good is removed by id (`POST /admin/v1/cluster/remove`, what
/// `spec.storage.failedNodes.remove` makes the operator send): while it stays down, every
/// replica it held moves to the other nodes, it ends `Drained`, and losing one more node then
/// leaves every group its majority. No acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_node_removed_by_id_hands_its_replicas_to_the_others() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start(dir.path(), 4, 2, 16).await;
    c.wait_every_group_led(2).await;
    let key = c.api_key();
    let mut acked = Vec::new();
    for b in 0..20 {
        acked.extend(post_acked(&c.url, &key, &format!("before-b{b}")).await);
    }
    let dead = 3;
    let held = c.hosted(dead).await.unwrap();
    assert!(!held.is_empty(), "node 4 holds no replica: the test lost its point");
    c.kill(dead);
    for b in 0..10 {
        acked.extend(post_acked(&c.url, &key, &format!("down-b{b}")).await);
    }

    let (status, body) = c.admin_post("remove", json!({"id": dead as u64 + 1})).await;
    assert_eq!(status, 202, "removal refused: {body}");
    c.wait_state(dead, "Drained").await;
    // Every group: three voters, all among the live nodes, each of them hosting it.
    wait_for("every group to have three live voters", MOVE_TIMEOUT, || async {
        for group in 0..=2u64 {
            let mut hosts = 0;
            for i in (0..4).filter(|&i| i != dead) {
                let s = c.status(i).await?;
                let g = s["groups"].as_array()?.iter().find(|g| g["group"] == group).cloned();
                let Some(g) = g else { continue };
                let voters: Vec<u64> = g["voters"].as_array()?.iter().filter_map(Value::as_u64).collect();
                if voters.len() != 3 || voters.contains(&(dead as u64 + 1)) {
                    return None;
                }
                hosts += 1;
            }
            (hosts == 3).then_some(())?;
        }
        Some(())
    })
    .await;

    // One more node lost: every group keeps two of its three voters.
    c.kill(0);
    for b in 0..10 {
        acked.extend(post_acked(&c.url, &key, &format!("after-b{b}")).await);
    }
    check_all_readable(&c.url, &c.token().await, &acked).await
}

/// A static member that starts after the others formed the groups they can form still forms
/// the ones only it initializes (it is the first replica of group 2 of 0..=2), while joining the
/// others, whose membership its peers report.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_static_member_starting_late_still_forms_its_groups() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start_some(dir.path(), 3, 2, 2, 16);
    wait_for("nodes 1 and 2 to elect leaders", Duration::from_secs(60), || async {
        let s = c.status(0).await?;
        let led = s["groups"].as_array()?.iter().filter(|g| g["leader"].as_u64().is_some()).count();
        (led >= 2).then_some(())
    })
    .await;
    c.spawn_node(2);
    c.wait_bootstrapped().await;
    let key = c.api_key();
    let mut acked = Vec::new();
    for b in 0..5 {
        acked.extend(post_acked(&c.url, &key, &format!("late-b{b}")).await);
    }
    let token = c.token().await;
    check_all_readable(&c.url, &token, &acked).await?;
    for i in 0..3 {
        c.wait_state(i, "Active").await;
        assert_eq!(c.hosted(i).await.unwrap(), BTreeSet::from([0, 1, 2]), "node {}", i + 1);
    }
    Ok(())
}

/// Node 5 of 5 starts after nodes 1 and 2 formed groups, none of which counts it, and before
/// nodes 3 and 4: it is still an initial member (its peers' record says so, not the groups it
/// happens to see) and forms group 4, which only it initializes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_member_that_sees_only_groups_without_it_still_forms_its_own() -> Result<(), String> {
    const SHARDS: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start_some(dir.path(), 5, 2, SHARDS as u32, 16);
    wait_for("nodes 1 and 2 to elect a leader of meta", Duration::from_secs(60), || async {
        let s = c.status(0).await?;
        s["groups"].as_array()?.iter().any(|g| g["group"] == 0 && g["leader"].as_u64().is_some()).then_some(())
    })
    .await;
    c.spawn_node(4);
    wait_for("node 5 to start", Duration::from_secs(60), || c.status(4)).await;
    let log = std::fs::read_to_string(dir.path().join("node5.log")).unwrap_or_default();
    assert!(!log.contains("not an initial member"), "node 5 took itself for an added node:\n{log}");
    c.spawn_node(2);
    c.spawn_node(3);
    c.wait_bootstrapped().await;

    c.wait_every_group_led(SHARDS).await;
    c.ingest_and_read_back("late-five").await?;
    assert_eq!(c.hosted(4).await.unwrap(), BTreeSet::from([2, 3, 4]));
    Ok(())
}

/// A scale-in drained node 5 of 5; a scale-out then reuses its ordinal on an empty volume,
/// without `--join`, while the only peer it reaches does not host group 4, which the static
/// placement has node 5 initialize. The peer reports the id as drained: node 5 forms nothing
/// (before, it formed a second group 4), and takes replicas once placed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drained_member_back_on_an_empty_volume_forms_no_group() -> Result<(), String> {
    const SHARDS: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start(dir.path(), 5, SHARDS as u32, 16).await;
    c.wait_every_group_led(SHARDS).await;
    let key = c.api_key();
    let acked = post_acked(&c.url, &key, "before-drain").await;
    let (five, ids) = (4, [1, 2, 3, 4, 5]);
    let own = (0..=SHARDS).find(|g| sextant_node::host::placement(*g, &ids, 3)[0] == 5).unwrap();

    // Every node a member first: meta refuses a drain that would leave fewer members than
    // the replication factor, and a node may not have registered yet.
    for i in 0..5 {
        c.wait_state(i, "Active").await;
    }
    c.drain(five).await;
    c.wait_state(five, "Drained").await;
    wait_for("node 5 to delete its replicas", MOVE_TIMEOUT, || async { c.hosted(five).await.filter(|h| h.is_empty()) })
        .await;
    let holders = wait_for(&format!("group {own} to have its voters off node 5"), MOVE_TIMEOUT, || async {
        for i in 0..4 {
            let s = c.status(i).await?;
            let Some(g) = s["groups"].as_array()?.iter().find(|g| g["group"] == own && g["state"] == "Leader") else {
                continue;
            };
            let voters = g["voters"].as_array()?.iter().filter_map(|v| Some(v.as_u64()? as usize - 1));
            let voters: Vec<usize> = voters.collect();
            return (voters.len() == 3 && !voters.contains(&five)).then_some(voters);
        }
        None
    })
    .await;
    let keeper = (0..4).find(|i| !holders.contains(i)).unwrap();
    wait_for("the keeper to know node 5 as drained", Duration::from_secs(60), || async {
        let s = c.status(keeper).await?;
        s["retired_members"].as_array()?.contains(&json!(5)).then_some(())
    })
    .await;

    c.kill(five);
    std::fs::remove_dir_all(dir.path().join("node5")).unwrap();
    for i in &holders {
        c.kill(*i);
    }
    c.spawn_node(five);
    wait_for("node 5 to start", Duration::from_secs(60), || c.status(five)).await;
    assert_eq!(c.hosted(five).await.unwrap(), BTreeSet::new(), "node 5 formed a group it no longer owns");
    let log = std::fs::read_to_string(dir.path().join("node5.log")).unwrap_or_default();
    assert!(log.contains("not an initial member"), "{log}");

    for i in holders {
        c.spawn_node(i);
    }
    c.wait_every_group_led(SHARDS).await;
    let token = c.token().await;
    check_all_readable(&c.url, &token, &acked).await?;
    // As the operator does: placement once the pod is ready, meta knowing its new incarnation.
    wait_for("node 5 to be ready", Duration::from_secs(60), || async {
        c.readyz(five).await.filter(|(s, _)| *s == 200)
    })
    .await;
    c.place(&[0, 1, 2, 3, 4]).await;
    c.wait_state(five, "Active").await;
    assert!(c.hosted(five).await.is_some_and(|h| !h.is_empty()), "node 5 got no replica back");
    c.ingest_and_read_back("placed-again").await
}

/// The first replica of meta (and of shard 5) starts last, on an empty disk, after its peers
/// elected leaders in every group they can form, two of them with it as a voter: it is deferred
/// until meta confirms its id, yet only it can initialize meta. It forms meta and shard 5 while
/// it waits, the cluster bootstraps, and it then takes its static placement.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_whose_meta_initializer_starts_last_still_bootstraps() -> Result<(), String> {
    const NODES: usize = 5;
    const SHARDS: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start_some(dir.path(), NODES, 0, SHARDS as u32, 16);
    let ids: Vec<u64> = (1..=NODES as u64).collect();
    let first = |group: u64| sextant_node::host::placement(group, &ids, 3)[0];
    let late = first(0);
    let late_i = late as usize - 1;
    let without_late: BTreeSet<u64> = (1..=SHARDS).filter(|g| first(*g) != late).collect();
    assert_eq!(without_late, BTreeSet::from([1, 2, 3, 4]), "placement changed: pick the groups again");
    for i in (0..NODES).filter(|i| *i != late_i) {
        c.spawn_node(i);
    }

    let started: Vec<usize> = (0..NODES).filter(|i| *i != late_i).collect();
    let led = wait_for("the other nodes to elect leaders", Duration::from_secs(90), || async {
        let mut led = BTreeMap::new();
        for &i in &started {
            for g in c.status(i).await?["groups"].as_array()? {
                if g["state"] == "Leader" {
                    let voters: BTreeSet<u64> = g["voters"].as_array()?.iter().filter_map(Value::as_u64).collect();
                    led.insert(g["group"].as_u64()?, voters);
                }
            }
        }
        led.keys().copied().collect::<BTreeSet<u64>>().is_superset(&without_late).then_some(led)
    })
    .await;
    assert!(!led.contains_key(&0), "meta formed without its initializer: {led:?}");
    assert!(led.values().any(|v| v.contains(&late)), "no running group counts node {late}: {led:?}");

    c.spawn_node(late_i);
    c.wait_bootstrapped().await;
    let log = std::fs::read_to_string(dir.path().join(format!("node{late}.log"))).unwrap_or_default();
    assert!(
        log.contains("waiting for meta to confirm this node id"),
        "node {late} was not deferred: the test lost its point"
    );

    c.wait_every_group_led(SHARDS).await;
    c.ingest_and_read_back("late-meta").await?;
    c.wait_state(late_i, "Active").await;
    let placed: BTreeSet<u64> =
        (0..=SHARDS).filter(|g| sextant_node::host::placement(*g, &ids, 3).contains(&late)).collect();
    wait_for("the late node to host its static placement", Duration::from_secs(60), || async {
        c.hosted(late_i).await.filter(|h| *h == placed)
    })
    .await;
    Ok(())
}

/// Progress lives in meta and in each group's membership, not in a task: kill -9 a node in
/// the middle of a rebalance (it hosts the meta group and leads some groups) and restart it;
/// the moves finish and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebalance_interrupted_by_a_crash_resumes() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start(dir.path(), 3, 4, 16).await;
    let key = c.api_key();
    let mut acked = Vec::new();
    for b in 0..40 {
        acked.extend(post_batch(&c.url, &key, &format!("pre-b{b}")).await.expect("ingest before scaling"));
    }
    let new = c.join_node().await;
    c.place(&[0, 1, 2, new]).await;
    // The first replica has arrived: moves are under way (5 groups, 4 of them move).
    wait_for("the first replica on the new node", MOVE_TIMEOUT, || async {
        c.hosted(new).await.filter(|h| !h.is_empty())
    })
    .await;
    let victim = (0..3).find(|i| *i != new).unwrap();
    c.kill(victim);
    for b in 0..5 {
        acked.extend(post_acked(&c.url, &key, &format!("crash-b{b}")).await);
    }
    c.spawn_node(victim);
    for i in 0..=new {
        c.wait_state(i, "Active").await;
    }
    assert!(c.hosted(new).await.unwrap().len() >= 3, "the new node did not get its share");
    for b in 0..5 {
        acked.extend(post_acked(&c.url, &key, &format!("post-b{b}")).await);
    }
    let token = c.token().await;
    check_all_readable(&c.url, &token, &acked).await
}

/// Acknowledged trace ids of a writer that keeps ingesting until told to stop.
#[derive(Default)]
struct Ledger {
    acked: Vec<String>,
    acked_batches: usize,
    failed_batches: usize,
    /// Answers other than "try again later", reported when the test ends.
    unexpected: Vec<u16>,
}

async fn writer(url: String, key: String, id: usize, stop: Arc<AtomicBool>, ledger: Arc<Mutex<Ledger>>) {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let prefix = format!("w{id}-b{n}");
        n += 1;
        let result = post_batch(&url, &key, &prefix).await;
        let mut ledger = ledger.lock().unwrap();
        match result {
            Ok(traces) => {
                ledger.acked.extend(traces);
                ledger.acked_batches += 1;
            }
            // Only "try again later" is acceptable while replicas move (0: the request timed out).
            Err(status) => {
                ledger.failed_batches += 1;
                if status != 503 && status != 0 {
                    ledger.unexpected.push(status);
                }
            }
        }
    }
}

async fn ingest_progress(ledger: &Arc<Mutex<Ledger>>, more: usize, what: &str) {
    let base = ledger.lock().unwrap().acked_batches;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        {
            let l = ledger.lock().unwrap();
            if l.acked_batches >= base + more {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {} batches acknowledged ({base} before), {} failed, unexpected answers {:?}",
                l.acked_batches,
                l.failed_batches,
                l.unexpected
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 7: 3 -> 5 -> 3 storage nodes under sustained ingest, every step through the admin API
/// the way the operator takes it (grow, place, then drain and stop the highest node, one at a
/// time); every acknowledged span is readable at the end, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_to_five_to_three_nodes_under_ingest_loses_nothing() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start(dir.path(), 3, 2, 16).await;
    let key = c.api_key();
    let stop = Arc::new(AtomicBool::new(false));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let writers: Vec<_> =
        (0..2).map(|id| tokio::spawn(writer(c.url.clone(), key.clone(), id, stop.clone(), ledger.clone()))).collect();
    ingest_progress(&ledger, 20, "ingest to start").await;

    let four = c.join_node().await;
    // As a scale-out pod of the operator starts: the peers list, no --join; it finds the running
    // cluster and joins it rather than forming groups of its own.
    let five = c.add_node(false).await;
    assert_eq!(c.hosted(five).await.unwrap(), BTreeSet::new(), "a new node holds nothing before placement");
    c.place(&[0, 1, 2, four, five]).await;
    for i in 0..5 {
        c.wait_state(i, "Active").await;
    }
    let mut installed = 0.0;
    for i in [four, five] {
        assert!(!c.hosted(i).await.unwrap().is_empty(), "node {} got no replica", i + 1);
        installed += c.metric(i, "sextant_node_snapshots_installed_total").await;
    }
    // The data shards' logs were purged long ago: their new replicas started from snapshots
    // (a node may have received only the meta group, whose log is still whole).
    assert!(installed >= 1.0, "no new replica was built from a snapshot");
    ingest_progress(&ledger, 10, "ingest on five nodes").await;

    for i in [five, four] {
        c.drain(i).await;
        c.wait_state(i, "Drained").await;
        c.kill(i);
        ingest_progress(&ledger, 10, "ingest after a node left").await;
    }
    for i in 0..3 {
        c.wait_state(i, "Active").await;
    }

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let ledger = Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap();
    eprintln!("acknowledged batches {}, failed batches {}", ledger.acked_batches, ledger.failed_batches);
    if !ledger.unexpected.is_empty() {
        return Err(format!("ingest answered {:?} while replicas moved (only 503 may come back)", ledger.unexpected));
    }
    let token = c.token().await;
    check_all_readable(&c.url, &token, &ledger.acked).await
}

/// Issue 3: a replica built by snapshot installation answers queries exactly as the replicas
/// it was copied from. A 3-node cluster holds flushed segments and buffered rows; three new
/// nodes take every replica (learner, snapshot, promotion), the old nodes are drained and
/// killed, and the trace list, a trace and a log search are byte-for-byte what they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_installed_from_snapshots_answer_byte_for_byte_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start(dir.path(), 3, 2, 16).await;
    let key = c.api_key();
    let base = jiff::Timestamp::now().as_millisecond() - 60_000;
    // Flushed segments (snapshots every 16 entries) and, from the last batches, buffered rows.
    for b in 0..40 {
        post_batch(&c.url, &key, &format!("snap-b{b}")).await.expect("ingest spans");
        let logs: Vec<Value> = (0..10)
            .map(|i| {
                let n = b * 10 + i;
                json!({"timestamp": base + n as i64 * 10, "level": if n % 3 == 0 { "error" } else { "info" },
                    "service": "checkout", "message": format!("payment timeout order-{n} retry {}", n % 5),
                    "trace_id": format!("snap-b{b}-t{i}"), "attributes": {"region": "eu"}})
            })
            .collect();
        let resp = http()
            .post(format!("{}/api/v1/ingest/logs", c.url))
            .header("X-API-Key", &key)
            .json(&json!({ "logs": logs }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let token = c.token().await;
    let from = base - 3_600_000;
    let to = jiff::Timestamp::now().as_millisecond() + 3_600_000;
    let queries = [
        format!("/api/v1/traces?from={from}&to={to}&limit=1000"),
        format!("/api/v1/traces?from={from}&to={to}&limit=7&service=checkout"),
        "/api/v1/traces/snap-b3-t4".to_owned(),
        "/api/v1/traces/snap-b39-t9".to_owned(),
        format!("/api/v1/logs/search?q=timeout&from={from}&to={to}&limit=1000"),
        format!("/api/v1/logs/search?q=retry+-order-7+level:error&from={from}&to={to}&limit=50"),
    ];
    let router_url = c.url.clone();
    let fetch = |path: String| {
        let (url, token) = (router_url.clone(), token.clone());
        async move {
            let resp = http().get(format!("{url}{path}")).bearer_auth(&token).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            resp.bytes().await.unwrap()
        }
    };
    let mut before = Vec::new();
    for q in &queries {
        before.push(fetch(q.clone()).await);
    }
    assert!(before[0].len() > 1000 && before[4].len() > 1000, "the queries return too little to compare");

    let new: Vec<usize> = vec![c.join_node().await, c.join_node().await, c.join_node().await];
    c.place(&new).await;
    for &i in &new {
        c.wait_state(i, "Active").await;
    }
    for i in 0..3 {
        c.wait_state(i, "Drained").await;
    }
    for &i in &new {
        assert_eq!(c.hosted(i).await.unwrap().len(), 3, "node {} holds every group", i + 1);
        assert!(c.metric(i, "sextant_node_snapshots_installed_total").await >= 1.0, "node {} installed none", i + 1);
    }
    for i in 0..3 {
        c.kill(i);
    }
    // Only the new replicas are left; the router finds their leaders.
    wait_for("the router to follow the new leaders", Duration::from_secs(120), || async {
        ready(&c.url).await.then_some(())
    })
    .await;
    for (q, expected) in queries.iter().zip(&before) {
        let after = fetch(q.clone()).await;
        assert!(
            after == *expected,
            "{q} differs after the move:\nbefore {}\nafter  {}",
            String::from_utf8_lossy(expected),
            String::from_utf8_lossy(&after)
        );
    }
}

impl Scaled {
    async fn readyz(&self, i: usize) -> Option<(u16, Value)> {
        let url = format!("http://127.0.0.1:{}/readyz", self.ports[i].1);
        let resp = http().get(url).timeout(Duration::from_secs(2)).send().await.ok()?;
        let status = resp.status().as_u16();
        Some((status, resp.json().await.ok()?))
    }

    async fn identity(&self, i: usize) -> Option<Value> {
        let resp = http()
            .get(format!("{}/admin/v1/cluster/identities", self.internal_url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .ok()?;
        let body: Value = resp.json().await.ok()?;
        body["nodes"].as_array()?.iter().find(|n| n["id"] == i as u64 + 1).cloned()
    }
}

/// Raft amnesia: node 3 loses its data directory and restarts under its old id. It serves no
/// Raft RPC (with one other node down, the cluster cannot commit: its vote would have been the
/// missing one), says it needs replacement, and the writes acknowledged meanwhile stay. The
/// replacement, decided by the operator's planner and sent through its `HttpClusterAdmin` as the
/// operator's reconcile does, removes the old incarnation from every group and adds the new one
/// back by snapshot; it then votes again (a write commits with node 1 stopped) and holds every
/// trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_restarted_on_a_wiped_disk_does_not_vote_until_replaced() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Scaled::start(dir.path(), 3, 2, 16).await;
    let key = c.api_key();
    let mut acked = Vec::new();
    for b in 0..40 {
        acked.extend(post_batch(&c.url, &key, &format!("pre-b{b}")).await.expect("ingest before the wipe"));
    }
    let (victim, other) = (2, 1);
    wait_for("node 3 to be confirmed", Duration::from_secs(60), || async {
        c.identity(victim).await.filter(|n| n["incarnation"] != "0000000000000000")
    })
    .await;
    let old = c.identity(victim).await.unwrap()["incarnation"].clone();
    c.kill(victim);
    std::fs::remove_dir_all(dir.path().join("node3")).unwrap();
    for b in 0..5 {
        acked.extend(post_acked(&c.url, &key, &format!("gone-b{b}")).await);
    }

    c.spawn_node(victim);
    let (status, ready) = wait_for("node 3 to report that it needs replacement", Duration::from_secs(60), || async {
        c.readyz(victim).await.filter(|(_, r)| r["status"] == "needs replacement")
    })
    .await;
    assert_eq!(status, 503, "{ready}");
    let new = c.status(victim).await.unwrap()["incarnation"].clone();
    assert_ne!(new, old);
    let id = c.identity(victim).await.unwrap();
    assert_eq!((&id["incarnation"], &id["needs_replacement"]), (&old, &new), "{id}");
    assert_eq!(c.hosted(victim).await.unwrap(), BTreeSet::new(), "an amnesiac node hosts nothing");

    // Node 2 down: 1 of 3 voters remain unless node 3 votes. It must not.
    c.kill(other);
    let refused = tokio::time::timeout(Duration::from_secs(20), post_batch(&c.url, &key, "no-quorum")).await;
    assert!(!matches!(refused, Ok(Ok(_))), "a write committed without a quorum of real voters");
    c.spawn_node(other);
    wait_for("node 2 to be ready", Duration::from_secs(60), || async {
        c.readyz(other).await.filter(|(s, _)| *s == 200)
    })
    .await;
    for b in 0..5 {
        acked.extend(post_acked(&c.url, &key, &format!("back-b{b}")).await);
    }

    let (status, body) = c.admin_post("replace", json!({"id": 1})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("not_replaceable")), "{body}");
    let (status, body) = c.admin_post("remove", json!({"id": 99})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("unknown_node")), "{body}");
    let (status, body) = c.admin_post("remove", json!({"id": victim + 1})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("too_few_nodes")), "{body}");
    let admin =
        HttpConnector::new().unwrap().connect(AdminEndpoint { url: c.internal_url.clone(), token: ADMIN_TOKEN.into() });
    // What the operator reads for `status.zones`: meta and both shards, no zones here.
    let groups = admin.groups().await.unwrap();
    assert_eq!((groups.zones, groups.groups.len()), (1, 3), "{groups:?}");
    let plan = || async {
        let ids = admin.identities().await.unwrap();
        let states: Vec<IdentityState> = ids.nodes.iter().map(IdentityState::from).collect();
        replacement::plan(Some(&states), 3, false, &Policy { automatic: true, ..Policy::default() })
    };
    assert_eq!(plan().await, ReplacementDecision::Replace { id: victim as u64 + 1 });
    admin.replace_node(victim as u64 + 1).await.unwrap();
    // An operator that crashed before recording anything sends it again: nothing changes.
    admin.replace_node(victim as u64 + 1).await.unwrap();
    wait_for("the replacement to finish", MOVE_TIMEOUT, || async {
        c.identity(victim).await.filter(|n| n["incarnation"] == new && n["replacing"].is_null())
    })
    .await;
    assert_eq!(plan().await, ReplacementDecision::Idle);
    let done = admin.replace_node(victim as u64 + 1).await.unwrap_err();
    assert!(matches!(&done, AdminError::Status { status: 409, body } if body.contains("not_replaceable")), "{done}");
    c.wait_state(victim, "Active").await;
    wait_for("node 3 to be ready", MOVE_TIMEOUT, || async { c.readyz(victim).await.filter(|(s, _)| *s == 200) }).await;
    wait_for("node 3 to vote in every group", MOVE_TIMEOUT, || async {
        let s = c.status(victim).await?;
        let groups = s["groups"].as_array()?;
        let voting = groups.iter().filter(|g| g["voters"].as_array().is_some_and(|v| v.contains(&json!(3)))).count();
        (voting == 3).then_some(())
    })
    .await;
    assert!(c.metric(victim, "sextant_node_snapshots_installed_total").await >= 1.0, "no snapshot was installed");

    // Node 3 is a voter again: with node 1 stopped, writes commit on nodes 2 and 3.
    c.kill(0);
    for b in 0..5 {
        acked.extend(post_acked(&c.url, &key, &format!("replaced-b{b}")).await);
    }
    let token = c.token().await;
    check_all_readable(&c.url, &token, &acked).await
}
