//! The fault-injection harness of tests/nemesis.rs (issue 26): storage nodes, each in a network
//! namespace of its own behind one bridge, two routers on loopback, writers that record every
//! batch as acknowledged, failed or unknown, and a nemesis that kills, pauses, partitions and
//! fills disks. Everything it creates (processes, namespaces, the bridge, mounts) goes in Drop,
//! also on panic.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::common::*;

const SECRET: &str = "nemesis-cluster-secret-0123456789abcdef";
const JWT: &str = "nemesis-jwt-secret-0123456789abcdef0123456789";
const GRPC_PORT: u16 = 7000;
const HTTP_PORT: u16 = 7001;
/// The node whose data directory is a small tmpfs (the disk-full fault).
pub const DISK_NODE: usize = 0;
const DISK_MIB: u64 = 384;
const DISK_HIGH_WATER: u8 = 70;
/// The node failpoint that delays each fsync of the Raft log, and the delay the slow-fsync
/// fault sets.
const FSYNC_DELAY_ENV: &str = "SEXTANT_FAILPOINT_FSYNC_DELAY_MS";
const SLOW_FSYNC_MS: &str = "200";

/// Runs `ip` with `args`; the error carries what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn ip_ok(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("the nemesis harness could not set up its network: {e}");
    }
}

fn pid_alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

/// One network namespace per node (`sxn<tag>-<i>`, its `eth0` at `<subnet>.<i+1>`), each joined
/// by a veth pair to a bridge in the test's namespace (`sxb<tag>`, at `<subnet>.254`), where
/// the routers and the test run. A partition is a pair of blackhole routes in the two nodes'
/// namespaces: packets between them vanish, as on a cut link; the routers still reach both.
/// A node cut from the routers has a blackhole route to the bridge: it still reaches its peers.
pub struct Net {
    /// This process's id and a count of the clusters it made (names must not collide when
    /// `cargo test` runs two tests in one process).
    tag: u64,
    subnet: String,
    nodes: usize,
    cuts: BTreeSet<(usize, usize)>,
    isolated: BTreeSet<usize>,
}

impl Net {
    pub fn create(nodes: usize) -> Net {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            panic!(
                "the nemesis harness needs root: it puts every node in a network namespace (ip netns) and mounts a \
                 tmpfs; run the test as root (CI does)"
            );
        }
        Self::remove_stale();
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tag = std::process::id() as u64 * 10 + MADE.fetch_add(1, Ordering::Relaxed) % 10;
        let net = Net {
            tag,
            subnet: format!("10.{}.{}", 200 + (tag / 256) % 50, tag % 256),
            nodes,
            cuts: BTreeSet::new(),
            isolated: BTreeSet::new(),
        };
        let bridge = net.bridge();
        ip_ok(&["link", "add", &bridge, "type", "bridge"]);
        ip_ok(&["addr", "add", &format!("{}.254/24", net.subnet), "dev", &bridge]);
        ip_ok(&["link", "set", &bridge, "up"]);
        for i in 0..nodes {
            let (ns, veth) = (net.ns(i), format!("sxv{tag}x{i}"));
            ip_ok(&["netns", "add", &ns]);
            ip_ok(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
            ip_ok(&["link", "set", &veth, "master", &bridge]);
            ip_ok(&["link", "set", &veth, "up"]);
            ip_ok(&["-n", &ns, "addr", "add", &format!("{}/24", net.ip(i)), "dev", "eth0"]);
            ip_ok(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip_ok(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    /// Namespaces and bridges of earlier runs whose test process is gone (killed by a timeout
    /// before its Drop ran).
    fn remove_stale() {
        let list = Command::new("ip").args(["netns", "list"]).output().map(|o| o.stdout).unwrap_or_default();
        for line in String::from_utf8_lossy(&list).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let Some(tag) = name.strip_prefix("sxn").and_then(|r| r.split('-').next()?.parse::<u64>().ok()) else {
                continue;
            };
            if !pid_alive(&(tag / 10).to_string()) {
                let _ = ip(&["netns", "del", name]);
                let _ = ip(&["link", "del", &format!("sxb{tag}")]);
            }
        }
    }

    fn bridge(&self) -> String {
        format!("sxb{}", self.tag)
    }

    pub fn ns(&self, i: usize) -> String {
        format!("sxn{}-{i}", self.tag)
    }

    pub fn ip(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }

    /// Drops every packet between nodes `a` and `b`, both ways.
    pub fn cut(&mut self, a: usize, b: usize) {
        for (from, to) in [(a, b), (b, a)] {
            ip_ok(&["-n", &self.ns(from), "route", "add", "blackhole", &format!("{}/32", self.ip(to))]);
        }
        self.cuts.insert((a.min(b), a.max(b)));
    }

    /// Separates `side` from every other node.
    pub fn partition(&mut self, side: &[usize]) {
        for &a in side {
            for b in (0..self.nodes).filter(|b| !side.contains(b)) {
                self.cut(a, b);
            }
        }
    }

    /// Drops every packet between node `i` and the routers (and the test), not its peers.
    pub fn isolate(&mut self, i: usize) {
        ip_ok(&["-n", &self.ns(i), "route", "add", "blackhole", &format!("{}.254/32", self.subnet)]);
        self.isolated.insert(i);
    }

    pub fn heal(&mut self) {
        for (a, b) in std::mem::take(&mut self.cuts) {
            for (from, to) in [(a, b), (b, a)] {
                ip_ok(&["-n", &self.ns(from), "route", "del", "blackhole", &format!("{}/32", self.ip(to))]);
            }
        }
        for i in std::mem::take(&mut self.isolated) {
            ip_ok(&["-n", &self.ns(i), "route", "del", "blackhole", &format!("{}.254/32", self.subnet)]);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for i in 0..self.nodes {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// A size-limited tmpfs, unmounted (lazily) on drop.
pub struct Tmpfs {
    pub at: PathBuf,
}

impl Tmpfs {
    pub fn mount(at: &Path, size_mib: u64) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs", at.to_str().unwrap()])
            .output()
            .expect("running mount");
        assert!(out.status.success(), "mounting a tmpfs at {}: {}", at.display(), String::from_utf8_lossy(&out.stderr));
        Tmpfs { at: at.to_owned() }
    }

    /// (total, used) bytes, as df counts them.
    pub fn usage(&self) -> (u64, u64) {
        let path = std::ffi::CString::new(self.at.to_str().unwrap()).unwrap();
        // SAFETY: statvfs fills the struct it is given; the path is a valid C string.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut s) }, 0, "statvfs");
        let total = s.f_blocks as u64 * s.f_frsize as u64;
        (total, total - s.f_bfree as u64 * s.f_frsize as u64)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").args(["-l", self.at.to_str().unwrap()]).status();
    }
}

/// A `sextant node` in its namespace; killed on drop (a paused one too: SIGKILL needs no
/// SIGCONT).
pub struct NodeProc {
    child: Child,
}

impl NodeProc {
    fn spawn(ns: &str, args: &[String], log: &Path, envs: &[(&str, &str)]) -> NodeProc {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, BIN])
            .args(args)
            .env("SEXTANT_CLUSTER_SECRET", SECRET)
            .env("SEXTANT_LOG", "info,openraft=warn")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        // `ip netns exec` execs the node in its own process: killed with the test process even
        // when a timeout kills that one before any Drop runs.
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        NodeProc { child: cmd.spawn().expect("spawn ip netns exec sextant node") }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: a signal to our own child, which has not been reaped while we hold it.
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What to inject, and on which nodes (indexes).
#[derive(Clone, Debug)]
pub enum Fault {
    /// SIGKILL, then a restart on the same data directory.
    Kill(Vec<usize>),
    /// SIGSTOP, then SIGCONT.
    Pause(Vec<usize>),
    /// These nodes cut from all the others (the routers still reach everyone).
    Partition(Vec<usize>),
    /// These nodes cut from the routers (they still reach their peers).
    Isolate(Vec<usize>),
    /// [`DISK_NODE`]'s filesystem filled past its high-water mark, then freed.
    DiskFull,
    /// Restarted with every fsync of its Raft log delayed (`SEXTANT_FAILPOINT_FSYNC_DELAY_MS`),
    /// then restarted without.
    SlowFsync(usize),
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill(_) => "kill -9",
            Fault::Pause(_) => "SIGSTOP",
            Fault::Partition(_) => "partition",
            Fault::Isolate(_) => "cut from the routers",
            Fault::DiskFull => "disk full",
            Fault::SlowFsync(_) => "slow fsync",
        }
    }

    fn describe(&self) -> String {
        let ids = |v: &[usize]| v.iter().map(|i| (i + 1).to_string()).collect::<Vec<_>>().join("+");
        match self {
            Fault::Kill(v) | Fault::Pause(v) | Fault::Partition(v) | Fault::Isolate(v) => {
                format!("{} node {}", self.kind(), ids(v))
            }
            Fault::DiskFull => format!("disk full node {}", DISK_NODE + 1),
            Fault::SlowFsync(i) => format!("slow fsync node {}", i + 1),
        }
    }
}

/// One injected fault, measured.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    pub fault: Fault,
    pub held: Duration,
    /// From the heal to the acknowledgement of the first batch sent after it.
    pub recovery: Duration,
    /// The longest time without any acknowledgement, from the fault to the recovery.
    pub longest_gap: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Spans,
    Logs,
    Events,
}

/// Objects per batch of each kind.
const TRACES: usize = 3;
const SPANS_PER_TRACE: usize = 2;
const LOGS: usize = 4;
const EVENTS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Acked,
    /// An HTTP answer other than 200.
    Failed(u16),
    /// No answer (timeout, connection reset).
    Unknown,
}

#[derive(Clone, Debug)]
pub struct Write {
    pub id: String,
    pub kind: Kind,
    pub sent: Instant,
    pub done: Instant,
    pub outcome: Outcome,
    /// The start of a refusal's body.
    pub detail: String,
}

#[derive(Default)]
pub struct Ledger {
    pub writes: Vec<Write>,
}

/// The cluster under test: nodes in namespaces, two routers, the writers' ledger.
pub struct NemesisCluster {
    _logs: LogsOnPanic,
    pub dir: PathBuf,
    pub routers: RouterProcs,
    pub nodes: Vec<Option<NodeProc>>,
    paused: BTreeSet<usize>,
    disk: Tmpfs,
    pub net: Net,
    pub shards: u32,
    pub creds: Value,
    pub token: String,
    pub started_ms: i64,
}

impl NemesisCluster {
    pub async fn start(dir: &Path, n: usize, shards: u32) -> NemesisCluster {
        let net = Net::create(n);
        let disk = Tmpfs::mount(&dir.join(format!("node{}", DISK_NODE + 1)), DISK_MIB);
        let nodes_csv = (0..n).map(|i| format!("{}:{GRPC_PORT}", net.ip(i))).collect::<Vec<_>>().join(",");
        let creds_path = dir.join("credentials.json");
        let routers = spawn_routers(
            dir,
            &nodes_csv,
            2,
            &["--api-rps", "100000", "--ingest-rps", "100000", "--analytics-rps", "100000"],
            &creds_path,
            &[("SEXTANT_CLUSTER_SECRET", SECRET), ("SEXTANT_JWT_SECRET", JWT)],
        );
        let mut c = NemesisCluster {
            _logs: LogsOnPanic::new(dir),
            dir: dir.to_owned(),
            routers,
            nodes: (0..n).map(|_| None).collect(),
            paused: BTreeSet::new(),
            disk,
            net,
            shards,
            creds: Value::Null,
            token: String::new(),
            started_ms: jiff::Timestamp::now().as_millisecond(),
        };
        for i in 0..n {
            c.start_node(i);
        }
        c.creds = wait_bootstrap(&c.routers.urls[0].clone(), dir, &mut c.routers.procs[0]).await;
        wait_routers_serve(&c.routers.urls, &creds_path).await;
        c.token =
            login(&c.routers.urls[0], c.creds["email"].as_str().unwrap(), c.creds["password"].as_str().unwrap()).await;
        c.wait_all_ready().await;
        c
    }

    fn start_node(&mut self, i: usize) {
        self.start_node_with(i, &[]);
    }

    fn start_node_with(&mut self, i: usize, envs: &[(&str, &str)]) {
        let peers =
            (0..self.nodes.len()).map(|j| format!("{}={}:{GRPC_PORT}", j + 1, self.net.ip(j))).collect::<Vec<_>>();
        let mut args: Vec<String> = vec![
            "node".into(),
            "--id".into(),
            (i + 1).to_string(),
            "--listen".into(),
            format!("{}:{GRPC_PORT}", self.net.ip(i)),
            "--http-listen".into(),
            format!("{}:{HTTP_PORT}", self.net.ip(i)),
            "--data-dir".into(),
            self.dir.join(format!("node{}", i + 1)).join("data").to_str().unwrap().into(),
            "--peers".into(),
            peers.join(","),
            "--shards".into(),
            self.shards.to_string(),
            "--replication-factor".into(),
            "3".into(),
            // Flushes, log purges and snapshot installs happen during the run, not only after.
            "--snapshot-every".into(),
            "200".into(),
        ];
        if i == DISK_NODE {
            args.extend([
                "--disk-high-water".into(),
                DISK_HIGH_WATER.to_string(),
                "--disk-min-free-mib".into(),
                "0".into(),
            ]);
        }
        let log = self.dir.join(format!("node{}.log", i + 1));
        self.nodes[i] = Some(NodeProc::spawn(&self.net.ns(i), &args, &log, envs));
    }

    pub fn node_url(&self, i: usize) -> String {
        format!("http://{}:{HTTP_PORT}", self.net.ip(i))
    }

    pub fn ingest_token(&self) -> String {
        self.creds["ingest_token"].as_str().unwrap().to_owned()
    }

    pub fn api_key(&self) -> String {
        self.creds["api_key"].as_str().unwrap().to_owned()
    }

    /// Node `i`'s `/status`, None when it does not answer within 2 s.
    pub async fn status(&self, i: usize) -> Option<Value> {
        let resp =
            http().get(format!("{}/status", self.node_url(i))).timeout(Duration::from_secs(2)).send().await.ok()?;
        resp.json().await.ok()
    }

    /// Every node answers `/readyz` 200 and sees a leader for every group.
    pub async fn wait_all_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut why = None;
            for i in 0..self.nodes.len() {
                let ready =
                    http().get(format!("{}/readyz", self.node_url(i))).timeout(Duration::from_secs(2)).send().await;
                let unled = self.status(i).await.map(|s| {
                    let groups = s["groups"].as_array().cloned().unwrap_or_default();
                    groups.iter().filter(|g| g["leader"].is_null()).map(|g| g["group"].clone()).collect::<Vec<_>>()
                });
                why = match (ready, unled) {
                    (Ok(r), Some(unled)) if r.status() == 200 && unled.is_empty() => continue,
                    (Ok(r), Some(unled)) => {
                        let status = r.status();
                        Some(format!(
                            "node {}: /readyz {status} {}, groups without a leader {unled:?}",
                            i + 1,
                            r.text().await.unwrap_or_default()
                        ))
                    }
                    (Err(e), _) => Some(format!("node {}: /readyz {e}", i + 1)),
                    (_, None) => Some(format!("node {}: no /status", i + 1)),
                };
                break;
            }
            let Some(why) = why else { return };
            assert!(Instant::now() < deadline, "a node stayed unready for 120 s: {why}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Each group's last applied index on node `i`.
    async fn applied(&self, i: usize) -> Option<BTreeMap<u64, u64>> {
        let status = self.status(i).await?;
        let groups = status["groups"].as_array()?;
        Some(groups.iter().map(|g| (g["group"].as_u64().unwrap(), g["last_applied"].as_u64().unwrap_or(0))).collect())
    }

    /// Waits until every replica of every group has applied what the most advanced one had
    /// applied when this was called.
    pub async fn wait_converged(&self) {
        let mut target: BTreeMap<u64, u64> = BTreeMap::new();
        for i in 0..self.nodes.len() {
            for (g, idx) in wait_for("a node's status", Duration::from_secs(60), || self.applied(i)).await {
                let t = target.entry(g).or_default();
                *t = (*t).max(idx);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            // (node, group, applied) of every replica still behind the target.
            let mut behind = vec![];
            for i in 0..self.nodes.len() {
                match self.applied(i).await {
                    Some(applied) => behind.extend(
                        applied
                            .iter()
                            .filter(|(g, a)| target.get(g).is_some_and(|t| *a < t))
                            .map(|(g, a)| (i + 1, *g, *a)),
                    ),
                    None => behind.push((i + 1, u64::MAX, 0)),
                }
            }
            if behind.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for every replica to apply the same log: target (group, index) {target:?}, \
                 behind (node, group, applied; group MAX: no status) {behind:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until no router replicates or aborts a batch: a batch whose writer gave up is
    /// carried to the end, and must not change what is read after this.
    pub async fn wait_commits_settled(&self) {
        wait_for("the routers to finish every batch", Duration::from_secs(60), || async {
            for url in &self.routers.internal {
                if metric(url, "sextant_router_commits_in_flight").await? != 0.0 {
                    return None;
                }
            }
            Some(())
        })
        .await
    }

    pub async fn inject(&mut self, fault: &Fault) {
        match fault {
            Fault::Kill(v) => {
                for &i in v {
                    drop(self.nodes[i].take());
                }
            }
            Fault::Pause(v) => {
                for &i in v {
                    self.nodes[i].as_ref().unwrap().signal(libc::SIGSTOP);
                    self.paused.insert(i);
                }
            }
            Fault::Partition(v) => self.net.partition(v),
            Fault::Isolate(v) => {
                for &i in v {
                    self.net.isolate(i);
                }
            }
            Fault::DiskFull => {
                // Past the high-water mark, with room left for what followers must still append.
                let (total, used) = self.disk.usage();
                let want = total / 100 * (DISK_HIGH_WATER as u64 + 10);
                let ballast = want.saturating_sub(used);
                std::fs::write(self.disk.at.join("ballast"), vec![0x5au8; ballast as usize]).unwrap();
            }
            Fault::SlowFsync(i) => {
                drop(self.nodes[*i].take());
                self.start_node_with(*i, &[(FSYNC_DELAY_ENV, SLOW_FSYNC_MS)]);
            }
        }
    }

    pub async fn heal(&mut self, fault: &Fault) {
        match fault {
            Fault::Kill(v) => {
                for &i in v {
                    self.start_node(i);
                }
            }
            Fault::Pause(v) => {
                for &i in v {
                    self.nodes[i].as_ref().unwrap().signal(libc::SIGCONT);
                    self.paused.remove(&i);
                }
            }
            Fault::Partition(_) | Fault::Isolate(_) => self.net.heal(),
            Fault::DiskFull => std::fs::remove_file(self.disk.at.join("ballast")).unwrap(),
            Fault::SlowFsync(i) => {
                drop(self.nodes[*i].take());
                self.start_node(*i);
            }
        }
    }
}

/// Writers posting spans, logs and analytics events in turn, each batch under a unique id.
pub struct Writers {
    pub ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    /// `count` writers, writer `w` through router `w % 2`, each at most one batch per `pace`.
    pub fn start(c: &NemesisCluster, count: usize, pace: Duration) -> Writers {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..count)
            .map(|w| {
                let url = c.routers.urls[w % c.routers.urls.len()].clone();
                let (key, token) = (c.api_key(), c.ingest_token());
                let (ledger, stop) = (ledger.clone(), stop.clone());
                // The second half give up after 1 s, less than a failover takes: their batches
                // left unknown, possibly stored later, must be found whole or not at all.
                let patience = if w >= count / 2 { Duration::from_secs(1) } else { Duration::from_secs(15) };
                tokio::spawn(async move {
                    let client = reqwest::Client::builder().timeout(patience).build().unwrap();
                    let mut tick = tokio::time::interval(pace);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    for n in 0usize.. {
                        tick.tick().await;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let kind = [Kind::Spans, Kind::Logs, Kind::Events][(n + w) % 3];
                        let id = format!("w{w}-{n}");
                        let sent = Instant::now();
                        let (outcome, detail) = post_batch(&client, &url, &key, &token, kind, &id).await;
                        let done = Instant::now();
                        ledger.lock().unwrap().writes.push(Write { id, kind, sent, done, outcome, detail });
                    }
                })
            })
            .collect();
        Writers { ledger, stop, tasks }
    }

    /// Time since the first batch was sent.
    pub fn elapsed(&self) -> Duration {
        self.ledger.lock().unwrap().writes.iter().map(|w| w.sent).min().map_or(Duration::ZERO, |t| t.elapsed())
    }

    pub fn acked(&self) -> usize {
        self.ledger.lock().unwrap().writes.iter().filter(|w| w.outcome == Outcome::Acked).count()
    }

    /// Waits until `more` further batches are acknowledged.
    pub async fn progress(&self, more: usize, what: &str) {
        let base = self.acked();
        wait_for(what, Duration::from_secs(120), || async { (self.acked() >= base + more).then_some(()) }).await
    }

    /// When the first batch sent at or after `t` was acknowledged.
    pub fn first_ack_sent_after(&self, t: Instant) -> Option<Instant> {
        let l = self.ledger.lock().unwrap();
        l.writes.iter().filter(|w| w.sent >= t && w.outcome == Outcome::Acked).map(|w| w.done).min()
    }

    /// The longest time without an acknowledgement within `[from, to]`.
    pub fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let l = self.ledger.lock().unwrap();
        let mut acks: Vec<Instant> = l
            .writes
            .iter()
            .filter(|w| w.outcome == Outcome::Acked && w.done >= from && w.done <= to)
            .map(|w| w.done)
            .collect();
        acks.push(from);
        acks.push(to);
        acks.sort();
        acks.windows(2).map(|p| p[1] - p[0]).max().unwrap_or_default()
    }

    pub async fn stop(self) -> Vec<Write> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(self.ledger).ok().unwrap().into_inner().unwrap().writes
    }
}

fn trace_id(batch: &str, t: usize) -> String {
    format!("{batch}-t{t}")
}

fn log_message(batch: &str, k: usize) -> String {
    format!("nemesis {batch} line {k}")
}

fn event_name(batch: &str) -> String {
    format!("nm-{batch}")
}

async fn post_batch(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    token: &str,
    kind: Kind,
    id: &str,
) -> (Outcome, String) {
    let now = jiff::Timestamp::now().as_millisecond();
    let req = match kind {
        Kind::Spans => {
            let spans: Vec<Value> = (0..TRACES)
                .flat_map(|t| {
                    (0..SPANS_PER_TRACE).map(move |s| {
                        json!({"trace_id": trace_id(id, t), "span_id": format!("s{s}"),
                            "parent_span_id": (s > 0).then_some("s0"), "service_name": "nemesis",
                            "operation": "write", "timestamp": now + s as i64, "duration_ms": 1.5, "status": "ok"})
                    })
                })
                .collect();
            client.post(format!("{url}/api/v1/ingest/spans")).header("X-API-Key", key).json(&json!({ "spans": spans }))
        }
        Kind::Logs => {
            let logs: Vec<Value> = (0..LOGS)
                .map(|k| json!({"timestamp": now, "level": "info", "service": "nemesis-logs", "message": log_message(id, k)}))
                .collect();
            client.post(format!("{url}/api/v1/ingest/logs")).header("X-API-Key", key).json(&json!({ "logs": logs }))
        }
        Kind::Events => {
            let events: Vec<Value> = (0..EVENTS)
                .map(|k| json!({"event": event_name(id), "distinct_id": format!("{id}-u{k}"), "uuid": format!("{id}-e{k}"), "timestamp": now}))
                .collect();
            client.post(format!("{url}/v1/batch")).json(&json!({"token": token, "events": events}))
        }
    };
    match req.send().await {
        Ok(r) if r.status() == 200 => (Outcome::Acked, String::new()),
        Ok(r) => {
            let status = r.status().as_u16();
            (Outcome::Failed(status), r.text().await.unwrap_or_default().chars().take(300).collect())
        }
        Err(e) => (Outcome::Unknown, e.to_string()),
    }
}

/// How the nemesis chooses faults.
pub struct Plan {
    pub seed: u64,
    /// Faults in this order, or (empty) random ones until `duration` has passed.
    pub script: Vec<(Fault, Duration)>,
    pub duration: Duration,
    /// Random faults may take two nodes at once (kill, pause) or a minority of two (partition).
    pub two_at_once: bool,
}

/// Runs the nemesis against `c` while `writers` write; returns the faults as measured.
pub async fn run_nemesis(c: &mut NemesisCluster, writers: &Writers, plan: &Plan) -> Vec<FaultRecord> {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let n = c.nodes.len();
    let mut records = Vec::new();
    let began = Instant::now();
    let mut script = plan.script.clone().into_iter();
    loop {
        let (fault, hold) = match script.next() {
            Some(f) => f,
            None if plan.script.is_empty() && began.elapsed() < plan.duration => {
                let width = if plan.two_at_once && rng.gen_bool(0.5) { 2 } else { 1 };
                let mut nodes: Vec<usize> = (0..n).collect();
                for k in 0..width {
                    let j = rng.gen_range(k..n);
                    nodes.swap(k, j);
                }
                nodes.truncate(width);
                let fault = match rng.gen_range(0..6) {
                    0 => Fault::Kill(nodes),
                    1 => Fault::Pause(nodes),
                    2 => Fault::Partition(nodes),
                    3 => Fault::Isolate(nodes),
                    4 => Fault::DiskFull,
                    _ => Fault::SlowFsync(nodes[0]),
                };
                (fault, Duration::from_millis(rng.gen_range(2_000..10_000)))
            }
            None => break,
        };
        eprintln!(
            "nemesis: at {:.1} s, {} for {:.1} s",
            writers.elapsed().as_secs_f64(),
            fault.describe(),
            hold.as_secs_f64()
        );
        let start = Instant::now();
        c.inject(&fault).await;
        tokio::time::sleep(hold).await;
        c.heal(&fault).await;
        let healed = Instant::now();
        let acked = wait_for(
            &format!("an acknowledged write after healing {}", fault.describe()),
            Duration::from_secs(120),
            || async { writers.first_ack_sent_after(healed) },
        )
        .await;
        let record = FaultRecord {
            held: healed - start,
            recovery: acked - healed,
            longest_gap: writers.longest_gap(start, acked),
            fault: fault.clone(),
        };
        eprintln!(
            "nemesis: healed; first acknowledgement {:.2} s after the heal, no acknowledgement for {:.2} s at most",
            record.recovery.as_secs_f64(),
            record.longest_gap.as_secs_f64()
        );
        records.push(record);
        c.wait_all_ready().await;
    }
    records
}

/// What the reads found for one batch.
#[derive(Debug, Default)]
struct Found {
    /// Objects of the batch present, and the most copies of any one.
    present: usize,
    max_copies: usize,
}

/// The checks' figures.
#[derive(Debug, Default)]
pub struct Verdict {
    pub acked: usize,
    pub failed: usize,
    pub unknown: usize,
    pub acked_objects: usize,
    /// Acknowledged objects not found.
    pub lost: usize,
    /// Objects found more than once.
    pub duplicated: usize,
    /// Unacknowledged batches found in part.
    pub torn: Vec<String>,
    /// Unacknowledged batches found whole / not at all.
    pub unacked_whole: usize,
    pub unacked_absent: usize,
    /// Objects found that no batch wrote.
    pub strays: usize,
    /// Non-200 answers by status, with the kind of batch and body of the first one.
    pub statuses: BTreeMap<u16, usize>,
    pub samples: BTreeMap<u16, String>,
    pub problems: Vec<String>,
}

async fn get_ok(url: &str, token: &str, path: &str, query: &[(&str, String)]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let resp = http().get(format!("{url}{path}")).bearer_auth(token).query(query).send().await;
        let last = match resp {
            Ok(r) if r.status() == 200 => return r.json().await.unwrap(),
            Ok(r) => format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        // A read right after a fault may meet a leader that lost its quorum: tried again until
        // the router finds the new one.
        assert!(Instant::now() < deadline, "GET {path} {query:?} kept failing: {last}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every page of a list endpoint.
async fn all_pages(url: &str, token: &str, path: &str, query: &[(&str, String)]) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = query.to_vec();
        q.push(("limit", "1000".into()));
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = get_ok(url, token, path, &q).await;
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return items,
        }
    }
}

impl NemesisCluster {
    /// From an hour before the cluster started to a day after: fixed, so that answers that
    /// depend on the range's length (rates) compare.
    fn range(&self) -> [(&'static str, String); 2] {
        [("from", (self.started_ms - 3_600_000).to_string()), ("to", (self.started_ms + 86_400_000).to_string())]
    }

    /// Reads back every batch through router `r` and checks the guarantees.
    pub async fn verify(&self, writes: &[Write], r: usize) -> Verdict {
        let url = &self.routers.urls[r];
        let range = self.range();
        let mut v = Verdict::default();
        // trace id -> span_count
        let traces: BTreeMap<String, u64> = all_pages(url, &self.token, "/api/v1/traces", &range)
            .await
            .iter()
            .map(|t| (t["trace_id"].as_str().unwrap().to_owned(), t["span_count"].as_u64().unwrap()))
            .collect();
        let mut lines: BTreeMap<String, usize> = BTreeMap::new();
        let mut q = range.to_vec();
        q.push(("service", "nemesis-logs".into()));
        for l in all_pages(url, &self.token, "/api/v1/logs/search", &q).await {
            *lines.entry(l["message"].as_str().unwrap().to_owned()).or_default() += 1;
        }
        let event_batches: Vec<&Write> = writes.iter().filter(|w| w.kind == Kind::Events).collect();
        let event_counts: BTreeMap<String, u64> = futures::stream::iter(event_batches)
            .map(|w| {
                let mut q = range.to_vec();
                q.push(("event", event_name(&w.id)));
                q.push(("interval", "month".into()));
                async move {
                    let body = get_ok(url, &self.token, "/api/events/timeseries", &q).await;
                    let n = body["points"].as_array().unwrap().iter().map(|p| p["count"].as_u64().unwrap()).sum();
                    (w.id.clone(), n)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let apm = get_ok(url, &self.token, "/api/v1/apm/endpoints", &range).await;
        let apm_spans: u64 = apm["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["service"] == "nemesis")
            .map(|e| e["count"].as_u64().unwrap())
            .sum();

        let origin = writes.iter().map(|w| w.sent).min().unwrap_or_else(Instant::now);
        let mut seen_traces = BTreeSet::new();
        let mut seen_lines = BTreeSet::new();
        let mut stored_spans = 0u64;
        for w in writes {
            let (objects, found) = match w.kind {
                Kind::Spans => {
                    let mut f = Found::default();
                    for t in 0..TRACES {
                        let id = trace_id(&w.id, t);
                        if let Some(&n) = traces.get(&id) {
                            seen_traces.insert(id.clone());
                            stored_spans += n;
                            // A trace is whole when it has its spans; more is a duplicate.
                            if n as usize != SPANS_PER_TRACE {
                                v.problems.push(format!("trace {id} has {n} spans, not {SPANS_PER_TRACE}"));
                            }
                            f.present += 1;
                            f.max_copies = f.max_copies.max((n as usize).div_ceil(SPANS_PER_TRACE));
                        }
                    }
                    (TRACES, f)
                }
                Kind::Logs => {
                    let mut f = Found::default();
                    for k in 0..LOGS {
                        let m = log_message(&w.id, k);
                        if let Some(&n) = lines.get(&m) {
                            seen_lines.insert(m);
                            f.present += 1;
                            f.max_copies = f.max_copies.max(n);
                        }
                    }
                    (LOGS, f)
                }
                Kind::Events => {
                    let n = event_counts[&w.id] as usize;
                    (EVENTS, Found { present: n.min(EVENTS), max_copies: n.div_ceil(EVENTS) })
                }
            };
            if found.max_copies > 1 {
                v.duplicated += 1;
                v.problems.push(format!("{:?} batch {} ({:?}) stored more than once", w.kind, w.id, w.outcome));
            }
            match w.outcome {
                Outcome::Acked => {
                    v.acked += 1;
                    v.acked_objects += objects;
                    if found.present < objects {
                        v.lost += objects - found.present;
                        v.problems.push(format!(
                            "acknowledged {:?} batch {}: {} of {objects} found",
                            w.kind, w.id, found.present
                        ));
                    }
                }
                other => {
                    if let Outcome::Failed(s) = other {
                        v.failed += 1;
                        *v.statuses.entry(s).or_default() += 1;
                        let at = (w.sent - origin).as_secs_f64();
                        v.samples.entry(s).or_insert_with(|| format!("{:?} sent at {at:.1} s: {}", w.kind, w.detail));
                    } else {
                        v.unknown += 1;
                    }
                    if found.present == 0 {
                        v.unacked_absent += 1;
                    } else if found.present == objects {
                        v.unacked_whole += 1;
                    } else {
                        v.torn.push(format!("{:?} batch {} ({other:?}): {} of {objects}", w.kind, w.id, found.present));
                    }
                }
            }
        }
        v.strays = traces.keys().filter(|t| !seen_traces.contains(*t)).count()
            + lines.keys().filter(|l| !seen_lines.contains(*l)).count();
        if v.strays > 0 {
            v.problems.push(format!("{} traces or log lines no batch wrote", v.strays));
        }
        if apm_spans != stored_spans {
            v.problems.push(format!("APM counts {apm_spans} spans, the trace list {stored_spans}"));
        }
        v
    }

    /// Counts and one trace, as a client sees them through router `r`: what must not change
    /// across the final heal.
    pub async fn snapshot_reads(&self, r: usize, trace: &str) -> Value {
        let url = &self.routers.urls[r];
        let range = self.range();
        let traces = all_pages(url, &self.token, "/api/v1/traces", &range).await;
        let spans: u64 = traces.iter().map(|t| t["span_count"].as_u64().unwrap()).sum();
        let mut q = range.to_vec();
        q.push(("service", "nemesis-logs".into()));
        let lines = all_pages(url, &self.token, "/api/v1/logs/search", &q).await.len();
        let mut q = range.to_vec();
        q.push(("interval", "month".into()));
        let events: u64 = get_ok(url, &self.token, "/api/events/timeseries", &q).await["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["count"].as_u64().unwrap())
            .sum();
        let apm = get_ok(url, &self.token, "/api/v1/apm/endpoints", &range).await;
        let trace = get_ok(url, &self.token, &format!("/api/v1/traces/{trace}"), &[]).await;
        json!({"traces": traces.len(), "spans": spans, "log_lines": lines, "events": events,
            "apm": apm["items"], "trace": trace})
    }
}

/// Prints the figures of a run.
pub fn report(records: &[FaultRecord], v: &Verdict) {
    let mut kinds: BTreeMap<&str, (usize, Vec<Duration>)> = BTreeMap::new();
    for r in records {
        let e = kinds.entry(r.fault.kind()).or_default();
        e.0 += 1;
        e.1.push(r.recovery);
    }
    eprintln!("\n== nemesis report ==");
    for r in records {
        eprintln!(
            "{:<22} held {:>5.1} s  recovery {:>5.2} s  longest without an ack {:>5.2} s",
            r.fault.describe(),
            r.held.as_secs_f64(),
            r.recovery.as_secs_f64(),
            r.longest_gap.as_secs_f64()
        );
    }
    for (kind, (n, mut rec)) in kinds {
        rec.sort();
        eprintln!(
            "{kind:<10} injected {n:>3}  recovery median {:.2} s  max {:.2} s",
            rec[rec.len() / 2].as_secs_f64(),
            rec.last().unwrap().as_secs_f64()
        );
    }
    eprintln!(
        "batches: {} acknowledged ({} objects), {} failed {:?}, {} unknown; unacknowledged found whole {}, absent {}",
        v.acked, v.acked_objects, v.failed, v.statuses, v.unknown, v.unacked_whole, v.unacked_absent
    );
    for (status, sample) in &v.samples {
        eprintln!("first {status}: {sample}");
    }
    eprintln!("lost {}, duplicated {}, torn {}, strays {}", v.lost, v.duplicated, v.torn.len(), v.strays);
}

impl NemesisCluster {
    /// One shard query answered by node `i` from its own replica of `group` (no leader read
    /// barrier), prost-encoded without `rows_scanned` (segment layouts differ between replicas).
    async fn replica_query(
        &self,
        i: usize,
        group: u64,
        plan: sextant_proto::query_request::Plan,
    ) -> Result<sextant_proto::QueryReply, String> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}:{GRPC_PORT}", self.net.ip(i)))
            .unwrap()
            .timeout(Duration::from_secs(30))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        let mut client =
            sextant_proto::storage_client::StorageClient::new(channel).max_decoding_message_size(256 << 20);
        let mut req = tonic::Request::new(sextant_proto::QueryRequest {
            group,
            project_id: self.creds["project_id"].as_str().unwrap().to_owned(),
            from_unix_nanos: (self.started_ms - 3_600_000) * 1_000_000,
            to_unix_nanos: (self.started_ms + 86_400_000) * 1_000_000,
            max_rows: 500_000_000,
            plan: Some(plan),
        });
        req.metadata_mut().insert(sextant_proto::CLUSTER_SECRET_HEADER, SECRET.parse().unwrap());
        req.metadata_mut().insert(sextant_node::service::REPLICA_READ_HEADER, "1".parse().unwrap());
        let mut reply = client.query(req).await.map_err(|e| e.to_string())?.into_inner();
        reply.rows_scanned = 0;
        if let Some(sextant_proto::query_reply::Partial::Apm(apm)) = &mut reply.partial {
            // Float sums and sketches depend on the order rows are added in; counts do not.
            for e in &mut apm.endpoints {
                e.sum_ms = 0.0;
                e.sketch.clear();
            }
        }
        Ok(reply)
    }

    /// Every replica of every data shard answers the same to a log search, a trace list, an
    /// event count and the APM counts. Returns the shards compared, with their replicas.
    pub async fn compare_replicas(&self) -> Vec<(u64, Vec<u64>)> {
        use sextant_proto::query_request::Plan;
        // Every data shard, as the nodes hosting it see its voters (five nodes host four shards
        // three times: no node has them all).
        let mut shards: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for i in 0..self.nodes.len() {
            let status = wait_for("a node's status", Duration::from_secs(30), || self.status(i)).await;
            for g in status["groups"].as_array().unwrap().iter().filter(|g| g["group"].as_u64().unwrap() != 0) {
                let voters = g["voters"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
                shards.entry(g["group"].as_u64().unwrap()).or_insert(voters);
            }
        }
        let mut compared = Vec::new();
        for (group, voters) in shards {
            let plans = [
                (
                    "log search",
                    Plan::Logs(sextant_proto::LogSearchPlan {
                        services: vec!["nemesis-logs".into()],
                        limit: 1_000_000,
                        ..Default::default()
                    }),
                ),
                ("trace list", Plan::Traces(sextant_proto::TraceListPlan { limit: 1_000_000, ..Default::default() })),
                (
                    "event count",
                    Plan::EventBuckets(sextant_proto::EventBucketsPlan {
                        bucket_starts: vec![(self.started_ms - 3_600_000) * 1_000_000],
                        ..Default::default()
                    }),
                ),
                ("APM counts", Plan::Apm(sextant_proto::ApmPlan::default())),
            ];
            for (what, plan) in plans {
                let mut answers = Vec::new();
                for &id in &voters {
                    let answer = self.replica_query(id as usize - 1, group, plan.clone()).await;
                    let answer = answer.unwrap_or_else(|e| panic!("node {id}, shard {group}, {what}: {e}"));
                    answers.push((id, answer));
                }
                let (first_id, first) = &answers[0];
                use sextant_proto::query_reply::Partial;
                let empty = match &first.partial {
                    Some(Partial::Logs(p)) => p.logs.is_empty(),
                    Some(Partial::Traces(p)) => p.traces.is_empty(),
                    Some(Partial::EventBuckets(p)) => p.buckets.iter().all(|b| b.count == 0),
                    Some(Partial::Apm(p)) => p.endpoints.is_empty(),
                    _ => true,
                };
                assert!(!empty, "shard {group}: the {what} of node {first_id} found nothing to compare: {first:?}");
                for (id, a) in &answers[1..] {
                    assert!(
                        a == first,
                        "shard {group}: node {id}'s replica answers the {what} otherwise than node {first_id}'s:\n{a:?}\n{first:?}"
                    );
                }
            }
            compared.push((group, voters));
        }
        compared
    }
}
