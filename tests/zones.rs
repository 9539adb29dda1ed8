//! Zone-aware replica placement with real processes: six nodes in zones a, a, b, b, c, c
//! (replication factor 3), whose static initial placement puts two replicas of every group in
//! one zone. Meta moves them, one group at a time, until every group spans the three zones; a
//! zone that changes in a node's zone file is registered again and repaired the same way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

const SECRET: &str = "test-cluster-secret-0123456789abcdef";
const JWT: &str = "test-jwt-secret-0123456789abcdef0123456789";
const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef0123456789";
const SHARDS: u64 = 4;
const REPAIR_TIMEOUT: Duration = Duration::from_secs(240);

struct Zoned {
    _logs: LogsOnPanic,
    dir: PathBuf,
    /// `Some(zone)`: the node runs with `--zone zone`; `None`: with its zone file.
    flags: Vec<Option<String>>,
    ports: Vec<(u16, u16)>,
    nodes: Vec<Option<Proc>>,
    router: Proc,
    url: String,
    internal_url: String,
    creds: Value,
}

impl Zoned {
    fn zone_file(dir: &Path, i: usize) -> PathBuf {
        dir.join(format!("zone{}", i + 1))
    }

    async fn start(dir: &Path, flags: &[Option<&str>]) -> Zoned {
        let n = flags.len();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let (listen, internal) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
        let seeds = ports.iter().map(|(g, _)| format!("127.0.0.1:{g}")).collect::<Vec<_>>().join(",");
        let creds_path = dir.join("credentials.json");
        let args = [
            "router",
            "--listen",
            &listen,
            "--internal-listen",
            &internal,
            "--nodes",
            &seeds,
            "--bootstrap-credentials",
            creds_path.to_str().unwrap(),
        ];
        let env =
            [("SEXTANT_CLUSTER_SECRET", SECRET), ("SEXTANT_JWT_SECRET", JWT), ("SEXTANT_ADMIN_TOKEN", ADMIN_TOKEN)];
        let router = Proc::spawn(&args, &dir.join("router.log"), &env);
        let url = format!("http://{listen}");
        let mut c = Zoned {
            _logs: LogsOnPanic::new(dir),
            dir: dir.to_owned(),
            flags: flags.iter().map(|f| f.map(str::to_owned)).collect(),
            ports,
            nodes: (0..n).map(|_| None).collect(),
            router,
            url,
            internal_url: format!("http://{internal}"),
            creds: Value::Null,
        };
        for i in 0..n {
            c.spawn_node(i);
        }
        let url = c.url.clone();
        c.creds = wait_bootstrap(&url, dir, &mut c.router).await;
        c
    }

    fn spawn_node(&mut self, i: usize) {
        let peers = self.ports.iter().enumerate().map(|(j, (g, _))| format!("{}=127.0.0.1:{g}", j + 1));
        let peers = peers.collect::<Vec<_>>().join(",");
        let (grpc, http) = self.ports[i];
        let data = self.dir.join(format!("node{}", i + 1));
        let zone_file = Self::zone_file(&self.dir, i);
        let zone = match &self.flags[i] {
            Some(z) => ["--zone", z.as_str()],
            None => ["--zone-file", zone_file.to_str().unwrap()],
        };
        let args = [
            "node",
            "--id",
            &(i + 1).to_string(),
            "--listen",
            &format!("127.0.0.1:{grpc}"),
            "--http-listen",
            &format!("127.0.0.1:{http}"),
            "--data-dir",
            data.to_str().unwrap(),
            "--peers",
            &peers,
            "--shards",
            &SHARDS.to_string(),
            "--replication-factor",
            "3",
            zone[0],
            zone[1],
            // About placement, not about the shared test machine's free space.
            "--disk-high-water",
            "100",
            "--disk-min-free-mib",
            "0",
        ];
        let log = self.dir.join(format!("node{}.log", i + 1));
        self.nodes[i] = Some(Proc::spawn(&args, &log, &[("SEXTANT_CLUSTER_SECRET", SECRET)]));
    }

    fn kill_node(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].take() {
            p.kill();
        }
    }

    async fn admin(&self, path: &str) -> Option<Value> {
        let resp = http()
            .get(format!("{}/admin/v1/cluster/{path}", self.internal_url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .ok()?;
        (resp.status() == 200).then_some(())?;
        resp.json().await.ok()
    }

    /// Waits until meta knows every node's zone as `zones` gives it.
    async fn wait_zones(&self, zones: &[&str]) {
        let want: Vec<Value> = zones.iter().map(|z| Value::from(*z)).collect();
        wait_for("every node's zone in meta", REPAIR_TIMEOUT, || async {
            let nodes = self.admin("nodes").await?;
            let got: Vec<Value> = nodes["nodes"].as_array()?.iter().map(|n| n["zone"].clone()).collect();
            (got == want).then_some(())
        })
        .await
    }

    /// Waits until every group's reported voters, and each node's own view of them, span three
    /// zones; returns the groups' replicas.
    async fn wait_spread(&self, zones: &[&str]) -> Vec<Vec<u64>> {
        wait_for("every group to span three zones", REPAIR_TIMEOUT, || async {
            let body = self.admin("groups").await?;
            let groups = body["groups"].as_array()?;
            if body["zones"] != 3 || groups.len() != SHARDS as usize + 1 {
                return None;
            }
            let mut placed = Vec::new();
            for g in groups {
                let replicas: Vec<u64> = g["replicas"].as_array()?.iter().filter_map(Value::as_u64).collect();
                let spanned: BTreeSet<&str> = replicas.iter().map(|id| zones[*id as usize - 1]).collect();
                if replicas.len() != 3
                    || spanned.len() != 3
                    || g["zone_spread"] != true
                    || g["desired"] != g["replicas"]
                {
                    return None;
                }
                let named: BTreeSet<&str> = g["zones"].as_array()?.iter().filter_map(Value::as_str).collect();
                assert_eq!(named, spanned, "the zones shown for group {}", g["group"]);
                // The group's own membership agrees with meta, on every node hosting it.
                for i in 0..self.ports.len() {
                    let status = self.node_status(i).await?;
                    let hosted = status["groups"].as_array()?.iter().find(|s| s["group"] == g["group"]);
                    if let Some(s) = hosted.filter(|s| s["state"] == "Leader") {
                        let voters: BTreeSet<u64> = s["voters"].as_array()?.iter().filter_map(Value::as_u64).collect();
                        if voters != replicas.iter().copied().collect() {
                            return None;
                        }
                    }
                }
                placed.push(replicas);
            }
            Some(placed)
        })
        .await
    }

    async fn node_status(&self, i: usize) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}/status", self.ports[i].1);
        http().get(url).timeout(Duration::from_secs(2)).send().await.ok()?.json().await.ok()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_group_ends_up_spanning_three_zones_and_follows_a_zone_change() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut zones = vec!["a", "a", "b", "b", "c", "c"];
    // Nodes 1 to 3 have `--zone`, 4 to 6 a zone file; node 6's zone appears after it started
    // (on Kubernetes: the operator's annotation).
    let flags: Vec<Option<&str>> = zones.iter().enumerate().map(|(i, z)| (i < 3).then_some(*z)).collect();
    for (i, z) in zones.iter().enumerate().take(5).skip(3) {
        std::fs::write(Zoned::zone_file(dir, i), z).unwrap();
    }
    let mut c = Zoned::start(dir, &flags).await;
    let key = c.creds["api_key"].as_str().unwrap().to_owned();
    let token = login(&c.url, c.creds["email"].as_str().unwrap(), c.creds["password"].as_str().unwrap()).await;
    let resp = post_spans(&c.url, &key, &spans_batch("before-zones", 20, 3)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());

    std::fs::write(Zoned::zone_file(dir, 5), "c\n").unwrap();
    c.wait_zones(&zones).await;
    let status = c.node_status(5).await.unwrap();
    assert_eq!(status["zone"], "c", "the node shows the zone it read");
    c.wait_spread(&zones).await;

    // Node 4 moves from zone b to zone a: groups holding it and an a-node are repaired.
    zones[3] = "a";
    std::fs::write(Zoned::zone_file(dir, 3), "a").unwrap();
    c.wait_zones(&zones).await;
    c.wait_spread(&zones).await;

    let anonymous = http().get(format!("{}/admin/v1/cluster/groups", c.internal_url)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "the admin token guards the group view");

    // A restart whose zone file is empty (a new pod before its annotation arrives) keeps the
    // zone meta has instead of clearing it.
    c.kill_node(4);
    std::fs::write(Zoned::zone_file(dir, 4), "").unwrap();
    c.spawn_node(4);
    wait_for("node 5 to register again", REPAIR_TIMEOUT, || async {
        let ready = http().get(format!("http://127.0.0.1:{}/readyz", c.ports[4].1)).send().await.ok()?;
        (ready.status() == 200).then_some(())
    })
    .await;
    c.wait_zones(&zones).await;
    assert_eq!(c.node_status(4).await.unwrap()["zone"], Value::Null, "the node itself read no zone");

    // Every acknowledged span is still there after the moves.
    for t in 0..20 {
        let trace = c.wait_trace(&token, &format!("before-zones-t{t}")).await;
        assert_eq!(trace["spans"].as_array().map(Vec::len), Some(3), "trace {t}: {trace}");
    }
    drop(tmp);
}

impl Zoned {
    async fn wait_trace(&self, token: &str, trace: &str) -> Value {
        wait_for(&format!("trace {trace}"), Duration::from_secs(30), || get_trace(&self.url, token, trace)).await
    }
}

#[tokio::test]
async fn a_node_refuses_a_malformed_zone_or_two_zone_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let grpc = format!("127.0.0.1:{}", free_port());
    let peers = format!("1={grpc}");
    let data = dir.join("node1");
    let zone_file = dir.join("zone");
    let base = ["node", "--id", "1", "--listen", &grpc, "--data-dir", data.to_str().unwrap(), "--peers", &peers];
    for (extra, expected) in [
        (vec!["--zone", "eu/west"], "a zone name has only"),
        (vec!["--zone", "a", "--zone-file", zone_file.to_str().unwrap()], "cannot be used with"),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let log = dir.join("node.log");
        std::fs::write(&log, "").unwrap();
        let mut node = Proc::spawn(&args, &log, &[("SEXTANT_CLUSTER_SECRET", SECRET)]);
        wait_for("the node to exit", Duration::from_secs(30), || {
            let exited = node.exited();
            async move { exited.then_some(()) }
        })
        .await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(expected), "{extra:?}: {text}");
        assert!(!data.join("incarnation").exists(), "{extra:?} started on the data directory");
    }
}
