//! Helpers for end-to-end tests: real `sextant` processes on ephemeral loopback ports, each in
//! its own temporary directory, killed when the test ends.
#![allow(dead_code)]

pub mod nemesis;

use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_sextant");

/// A child process that is killed (SIGKILL) when dropped.
pub struct Proc {
    child: Child,
}

impl Proc {
    pub fn spawn(args: &[&str], log: &Path, envs: &[(&str, &str)]) -> Proc {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
        let child = Command::new(BIN)
            .args(args)
            .envs(envs.iter().copied())
            .env("SEXTANT_LOG", "info,openraft=warn")
            // Many processes run at once: OTLP/gRPC on a port of their own (a test that uses it
            // passes --otlp-grpc-listen).
            .env("SEXTANT_OTLP_GRPC_LISTEN", "127.0.0.1:0")
            // Many nodes on one disk: none reserves room for its restart unless a test asks.
            .env("SEXTANT_DISK_RESERVE_MIB", "0")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn sextant");
        Proc { child }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn exited(&mut self) -> bool {
        self.exit_status().is_some()
    }

    /// How the process ended, once it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port free now, for a process the test starts later. Taken below the kernel's ephemeral
/// range (`ip_local_port_range`, from 32768 by default): a port the kernel hands out for
/// `:0` is also what it picks for outgoing connections, so between this probe and the child's
/// bind any of the test's many connections could take it, and the child would fail to start.
/// Each test runs in its own process; the pid spreads processes over the range, and a lock
/// on a file per port, held until the process ends, keeps two test processes from both
/// finding a port free before either's child has bound it.
pub fn free_port() -> u16 {
    use std::os::unix::io::AsRawFd;
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let locks = std::env::temp_dir().join("sextant-test-ports");
    std::fs::create_dir_all(&locks).unwrap();
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..COUNT {
        let port = FIRST + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(104_729)) % COUNT;
        let lock = std::fs::File::create(locks.join(port.to_string())).unwrap();
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            HELD.lock().unwrap().push(lock);
            return port as u16;
        }
    }
    panic!("no free port below the ephemeral range");
}

/// Polls `f` until it yields a value or `timeout` passes.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the router at `url` is ready and has written the credentials of the cluster it
/// bootstrapped. On failure the panic message carries what the logs in `dir` say went wrong
/// (the end of a CI log shows it).
pub async fn wait_bootstrap(url: &str, dir: &Path, router: &mut Proc) -> Value {
    if let Some(creds) = ready_with_credentials(url, dir, router, Duration::from_secs(120)).await {
        return creds;
    }
    let how = if router.exited() { "the router exited" } else { "timed out" };
    let readyz = match http().get(format!("{url}/readyz")).send().await {
        Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
        Err(e) => e.to_string(),
    };
    panic!(
        "the cluster did not bootstrap ({how}); /readyz: {readyz}\nwarnings and errors logged:\n{}\nthe routers' last lines:\n{}",
        log_problems(dir),
        log_lines(dir, |name| name.starts_with("router"), |_| true, 12)
    );
}

/// The credentials in `dir` once the server at `url` (process `proc`) is ready and has written
/// them; None when `proc` exits or `timeout` passes first.
async fn ready_with_credentials(url: &str, dir: &Path, proc: &mut Proc, timeout: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + timeout;
    let creds_path = dir.join("credentials.json");
    while tokio::time::Instant::now() < deadline && !proc.exited() {
        if ready(url).await {
            if let Some(creds) = read_credentials(&creds_path) {
                return Some(creds);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Storage node 1 alone on `grpc` (two shards, replication factor 1), its data in
/// `dir/node1` and its log in `dir/node1.log`.
pub fn spawn_lone_node(dir: &Path, grpc: &str, envs: &[(&str, &str)]) -> Proc {
    let data = dir.join("node1");
    let peers = format!("1={grpc}");
    let args = [
        "node",
        "--id",
        "1",
        "--listen",
        grpc,
        "--data-dir",
        data.to_str().unwrap(),
        "--peers",
        &peers,
        "--shards",
        "2",
        "--replication-factor",
        "1",
    ];
    Proc::spawn(&args, &dir.join("node1.log"), envs)
}

/// Routers started by [`spawn_routers`], with each one's public and `--internal-listen` URL.
pub struct RouterProcs {
    pub procs: Vec<Proc>,
    pub urls: Vec<String>,
    pub internal: Vec<String>,
}

/// Spawns `count` routers in front of `nodes`, each on fresh ports and with `extra_args`; the
/// first bootstraps a new cluster and writes its credentials to `creds`. Router `i` logs to
/// `dir/router{i}.log`.
pub fn spawn_routers(
    dir: &Path,
    nodes: &str,
    count: usize,
    extra_args: &[&str],
    creds: &Path,
    envs: &[(&str, &str)],
) -> RouterProcs {
    let mut routers = RouterProcs { procs: vec![], urls: vec![], internal: vec![] };
    for i in 0..count {
        let listen = format!("127.0.0.1:{}", free_port());
        let internal = format!("127.0.0.1:{}", free_port());
        let mut args = vec!["router", "--listen", &listen, "--internal-listen", &internal, "--nodes", nodes];
        args.extend_from_slice(extra_args);
        if i == 0 {
            args.extend(["--bootstrap-credentials", creds.to_str().unwrap()]);
        }
        routers.procs.push(Proc::spawn(&args, &dir.join(format!("router{i}.log")), envs));
        routers.urls.push(format!("http://{listen}"));
        routers.internal.push(format!("http://{internal}"));
    }
    routers
}

/// The bootstrap credentials at `creds` once every router in `urls` is ready.
pub async fn wait_routers_serve(urls: &[String], creds: &Path) -> Value {
    let urls = urls.to_vec();
    let creds = creds.to_owned();
    wait_for("every router to serve", Duration::from_secs(90), || {
        let (urls, creds) = (urls.clone(), creds.clone());
        async move {
            for u in &urls {
                if !ready(u).await {
                    return None;
                }
            }
            read_credentials(&creds)
        }
    })
    .await
}

/// A manual clock set to the wall-clock time now.
pub fn manual_clock_at_now() -> sextant_model::ManualClock {
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    sextant_model::ManualClock::at_millis(now_ms as i64)
}

/// A storage node alone in this process (one shard, replication factor 1) on an ephemeral
/// port, its data in `dir/node`.
pub async fn start_in_process_node(
    dir: &Path,
    cluster_secret: &str,
    snapshot_every: u64,
) -> sextant_node::host::RunningNode {
    sextant_node::host::NodeHost::start(
        sextant_node::host::NodeConfig {
            id: 1,
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.join("node"),
            peers: std::collections::BTreeMap::from([(1, "127.0.0.1:0".to_string())]),
            shards: 1,
            replication_factor: 1,
            cluster_secret: cluster_secret.to_owned(),
            snapshot_every,
            join: false,
            clock: sextant_model::Clock::system(),
            query_memory_bytes: sextant_node::host::DEFAULT_QUERY_MEMORY_BYTES,
            buffer_memory_bytes: sextant_node::host::DEFAULT_BUFFER_MEMORY_BYTES,
            zone: Default::default(),
            internal_tls: None,
        },
        std::sync::Arc::new(sextant_node::NodeMetrics::default()),
    )
    .await
    .unwrap()
}

/// The configuration of a router in this process in front of `node`: ephemeral ports, no TLS,
/// default limits and billing, webhooks to any target; a test overrides what it needs.
pub fn in_process_router_config(
    node: String,
    cluster_secret: &str,
    jwt_secret: &[u8],
    clock: sextant_model::Clock,
) -> sextant_router::RouterConfig {
    sextant_router::RouterConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        internal_listen: "127.0.0.1:0".parse().unwrap(),
        otlp_grpc_listen: None,
        nodes: vec![node],
        cluster_secret: cluster_secret.to_owned(),
        jwt_secret: jwt_secret.to_vec(),
        dashboard_origins: vec![],
        secure_cookies: false,
        rate_limits: Default::default(),
        trusted_proxy_hops: 0,
        admin_token: None,
        server: Default::default(),
        clock,
        billing: Default::default(),
        alert_interval: Duration::from_secs(30),
        tls: None,
        internal_tls: None,
        in_process_node: None,
        webhook_targets: sextant_router::webhooks::guard::TargetPolicy::dev(),
    }
}

/// Starts a router in this process and waits until it is ready.
pub async fn start_in_process_router(config: sextant_router::RouterConfig) -> sextant_router::RunningRouter {
    let router = sextant_router::start(config, Default::default()).await.unwrap();
    assert!(router.wait_ready(Duration::from_secs(60)).await, "the router did not become ready");
    router
}

/// Held by a test's cluster: when the test panics, prints what its processes logged as
/// warnings and errors, then the panic message again, last, where the end of a CI log shows it.
pub struct LogsOnPanic(PathBuf);

static LAST_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

impl LogsOnPanic {
    pub fn new(dir: &Path) -> LogsOnPanic {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(info.to_string());
                previous(info)
            }));
        });
        LogsOnPanic(dir.to_owned())
    }
}

impl Drop for LogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("\nwarnings and errors the processes logged:\n{}", log_problems(&self.0));
            if let Some(message) = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).take() {
                eprintln!("the test failed: {message}");
            }
        }
    }
}

/// The last WARN/ERROR lines of every `*.log` in `dir`, a few per file.
pub fn log_problems(dir: &Path) -> String {
    log_lines(dir, |_| true, |l| l.contains("WARN") || l.contains("ERROR") || l.contains("Error"), 4)
}

/// The last `n` lines that `keep` selects of each log in `dir` whose file name `name` accepts,
/// each cut to 1000 characters and prefixed with its file's name.
fn log_lines(dir: &Path, name: impl Fn(&str) -> bool, keep: impl Fn(&str) -> bool, n: usize) -> String {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "log")).collect()
        })
        .unwrap_or_default();
    logs.retain(|p| p.file_name().is_some_and(|f| name(&f.to_string_lossy())));
    logs.sort();
    let mut out = String::new();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let kept: Vec<&str> = text.lines().filter(|l| keep(l)).collect();
        for line in &kept[kept.len().saturating_sub(n)..] {
            let line: String = line.chars().take(1000).collect();
            out.push_str(&format!("{}: {line}\n", log.file_name().unwrap().to_string_lossy()));
        }
    }
    out
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
}

pub async fn ready(url: &str) -> bool {
    matches!(http().get(format!("{url}/readyz")).send().await, Ok(r) if r.status().is_success())
}

pub fn read_credentials(path: &Path) -> Option<Value> {
    std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

/// `sextant dev` on a data directory.
pub struct Dev {
    pub proc: Proc,
    /// The public API.
    pub url: String,
    /// `--internal-listen`: `/metrics` and `/admin/v1`.
    pub internal_url: String,
    pub dir: PathBuf,
    pub creds: Value,
}

impl Dev {
    pub async fn start(dir: &Path) -> Dev {
        Self::start_with(dir, &[], &[]).await
    }

    /// `sextant dev` with extra flags and environment.
    pub async fn start_with(dir: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Dev {
        for _ in 0..3 {
            let listen = format!("127.0.0.1:{}", free_port());
            let internal = format!("127.0.0.1:{}", free_port());
            let mut args =
                vec!["dev", "--data-dir", dir.to_str().unwrap(), "--listen", &listen, "--internal-listen", &internal];
            args.extend_from_slice(extra);
            let mut proc = Proc::spawn(&args, &dir.join("dev.log"), envs);
            let url = format!("http://{listen}");
            if let Some(creds) = ready_with_credentials(&url, dir, &mut proc, Duration::from_secs(90)).await {
                return Dev { proc, url, internal_url: format!("http://{internal}"), dir: dir.to_owned(), creds };
            }
            // A port taken between probe and bind, most likely: try other ones.
        }
        panic!("sextant dev did not start; see {}", dir.join("dev.log").display());
    }

    pub fn api_key(&self) -> &str {
        self.creds["api_key"].as_str().unwrap()
    }

    pub async fn token(&self) -> String {
        login(&self.url, self.creds["email"].as_str().unwrap(), self.creds["password"].as_str().unwrap()).await
    }
}

pub async fn login(url: &str, email: &str, password: &str) -> String {
    let resp = http()
        .post(format!("{url}/auth/login"))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "login failed");
    resp.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned()
}

pub fn span(trace: &str, span: &str, parent: Option<&str>, ts_ms: i64) -> Value {
    json!({
        "trace_id": trace, "span_id": span, "parent_span_id": parent,
        "service_name": "checkout", "operation": "POST /api/checkout",
        "timestamp": ts_ms, "duration_ms": 12.5, "status": "ok",
        "attributes": {"http.status_code": 200, "region": "eu"},
    })
}

/// Spans of `traces` traces with `per_trace` spans each, ids prefixed by `prefix`.
pub fn spans_batch(prefix: &str, traces: usize, per_trace: usize) -> Value {
    let now = jiff::Timestamp::now().as_millisecond();
    let mut spans = Vec::new();
    for t in 0..traces {
        let trace = format!("{prefix}-t{t}");
        for s in 0..per_trace {
            let parent = (s > 0).then(|| format!("s0"));
            spans.push(span(&trace, &format!("s{s}"), parent.as_deref(), now + s as i64));
        }
    }
    json!({ "spans": spans })
}

pub async fn post_spans(url: &str, key: &str, body: &Value) -> reqwest::Response {
    http().post(format!("{url}/api/v1/ingest/spans")).header("X-API-Key", key).json(body).send().await.unwrap()
}

/// The spans of a trace, or None on 404.
/// `GET url+path` with a bearer token: the status and the JSON body (null when there is none).
pub async fn get_json(url: &str, token: &str, path: &str) -> (u16, Value) {
    let resp = http().get(format!("{url}{path}")).bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

pub async fn get_trace(url: &str, token: &str, trace: &str) -> Option<Value> {
    let resp = http().get(format!("{url}/api/v1/traces/{trace}")).bearer_auth(token).send().await.unwrap();
    match resp.status().as_u16() {
        200 => Some(resp.json().await.unwrap()),
        404 => None,
        s => panic!("GET trace {trace}: unexpected status {s}: {}", resp.text().await.unwrap_or_default()),
    }
}

/// [`get_trace`] that retries 503 ("retry later") for up to a minute, as a client does: on a
/// starved machine a leader's read barrier can miss its quorum for a moment.
pub async fn get_trace_when_served(url: &str, token: &str, trace: &str) -> Option<Value> {
    wait_for(&format!("trace {trace} to be served"), Duration::from_secs(60), || async {
        let resp = http().get(format!("{url}/api/v1/traces/{trace}")).bearer_auth(token).send().await.unwrap();
        match resp.status().as_u16() {
            200 => Some(Some(resp.json().await.unwrap())),
            404 => Some(None),
            503 => None,
            s => panic!("GET trace {trace}: unexpected status {s}: {}", resp.text().await.unwrap_or_default()),
        }
    })
    .await
}

/// A real cluster: `n` storage nodes (each its own process, ports and data directory) and one
/// router that bootstraps the first org, project and credentials.
pub struct Cluster {
    _logs: LogsOnPanic,
    pub dir: PathBuf,
    pub secret: String,
    pub shards: u32,
    /// Extra flags for every `sextant node`.
    pub node_args: Vec<String>,
    pub node_ports: Vec<(u16, u16)>,
    pub nodes: Vec<Option<Proc>>,
    pub router: Proc,
    pub url: String,
    /// The router's `--internal-listen`: `/metrics` and `/admin/v1`.
    pub internal_url: String,
    pub creds: Value,
}

impl Cluster {
    pub async fn start(dir: &Path, n: usize, shards: u32, node_args: &[&str]) -> Cluster {
        let secret = "test-cluster-secret-0123456789abcdef".to_owned();
        let node_ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let router_port = free_port();
        let internal_port = free_port();
        let nodes = node_ports.iter().map(|(grpc, _)| format!("127.0.0.1:{grpc}")).collect::<Vec<_>>().join(",");
        let creds_path = dir.join("credentials.json");
        let router = Proc::spawn(
            &[
                "router",
                "--listen",
                &format!("127.0.0.1:{router_port}"),
                "--internal-listen",
                &format!("127.0.0.1:{internal_port}"),
                "--nodes",
                &nodes,
                "--bootstrap-credentials",
                creds_path.to_str().unwrap(),
                // The tests verify with many concurrent reads and load data sets quickly; the
                // limits are tested elsewhere.
                "--api-rps",
                "100000",
                "--ingest-rps",
                "100000",
            ],
            &dir.join("router.log"),
            &[
                ("SEXTANT_CLUSTER_SECRET", &secret),
                ("SEXTANT_JWT_SECRET", "test-jwt-secret-0123456789abcdef0123456789"),
            ],
        );
        let mut cluster = Cluster {
            _logs: LogsOnPanic::new(dir),
            dir: dir.to_owned(),
            secret,
            shards,
            node_args: node_args.iter().map(|a| a.to_string()).collect(),
            node_ports,
            nodes: (0..n).map(|_| None).collect(),
            router,
            url: format!("http://127.0.0.1:{router_port}"),
            internal_url: format!("http://127.0.0.1:{internal_port}"),
            creds: Value::Null,
        };
        for i in 0..n {
            cluster.start_node(i);
        }
        cluster.creds = wait_bootstrap(&cluster.url, dir, &mut cluster.router).await;
        cluster
    }

    pub async fn token(&self) -> String {
        login(&self.url, self.creds["email"].as_str().unwrap(), self.creds["password"].as_str().unwrap()).await
    }

    pub fn node_id(i: usize) -> u64 {
        i as u64 + 1
    }

    pub fn start_node(&mut self, i: usize) {
        self.start_node_with_env(i, &[]);
    }

    /// [`Cluster::start_node`] with extra environment (a failpoint, say).
    pub fn start_node_with_env(&mut self, i: usize, envs: &[(&str, &str)]) {
        let peers = self
            .node_ports
            .iter()
            .enumerate()
            .map(|(j, (grpc, _))| format!("{}=127.0.0.1:{grpc}", Self::node_id(j)))
            .collect::<Vec<_>>()
            .join(",");
        let (grpc, http) = self.node_ports[i];
        let data = self.dir.join(format!("node{}", Self::node_id(i)));
        let mut args: Vec<String> = [
            "node",
            "--id",
            &Self::node_id(i).to_string(),
            "--listen",
            &format!("127.0.0.1:{grpc}"),
            "--http-listen",
            &format!("127.0.0.1:{http}"),
            "--data-dir",
            data.to_str().unwrap(),
            "--peers",
            &peers,
            "--shards",
            &self.shards.to_string(),
            "--replication-factor",
            "3",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(self.node_args.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut env = vec![("SEXTANT_CLUSTER_SECRET", self.secret.as_str())];
        env.extend_from_slice(envs);
        let proc = Proc::spawn(&args, &self.dir.join(format!("node{}.log", Self::node_id(i))), &env);
        self.nodes[i] = Some(proc);
    }

    /// SIGKILL: no shutdown hook runs, unsynced writes are lost.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].take() {
            p.kill();
        }
    }

    /// The node's `/status`, or None when it does not answer.
    pub async fn status(&self, i: usize) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}/status", self.node_ports[i].1);
        let resp = http().get(url).timeout(Duration::from_secs(2)).send().await.ok()?;
        resp.json().await.ok()
    }

    /// A counter or gauge from node `i`'s Prometheus metrics ([`metric`]).
    pub async fn metric(&self, i: usize, series: &str) -> Option<f64> {
        metric(&format!("http://127.0.0.1:{}", self.node_ports[i].1), series).await
    }

    /// `group`'s state as node `i` sees it.
    pub async fn group_status(&self, i: usize, group: u64) -> Option<Value> {
        let status = self.status(i).await?;
        status["groups"].as_array()?.iter().find(|g| g["group"] == group).cloned()
    }

    /// Index (not id) of the node leading `group`, once one is agreed on by a live node.
    pub async fn leader_of(&self, group: u64) -> usize {
        wait_for("a leader", Duration::from_secs(60), || async move {
            for i in 0..self.nodes.len() {
                if self.nodes[i].is_none() {
                    continue;
                }
                if let Some(g) = self.group_status(i, group).await {
                    if g["state"] == "Leader" {
                        return Some(i);
                    }
                }
            }
            None
        })
        .await
    }

    /// Waits until every running replica of every group has applied the same log index.
    /// Waits until every live replica of every group has applied what the most advanced one
    /// had applied when this was called. (Not "all equal": with writers, router heartbeats and
    /// placement reports going on, the groups' logs keep growing.)
    pub async fn wait_converged(&self) {
        let applied = |group: u64| async move {
            let mut indexes = Vec::new();
            for i in (0..self.nodes.len()).filter(|&i| self.nodes[i].is_some()) {
                indexes.push(self.group_status(i, group).await?["last_applied"].as_u64()?);
            }
            Some(indexes)
        };
        let mut targets = Vec::new();
        for group in 0..=self.shards as u64 {
            let indexes = wait_for("replica status", Duration::from_secs(60), || applied(group)).await;
            targets.push(indexes.into_iter().max().unwrap_or(0));
        }
        wait_for("replicas to converge", Duration::from_secs(120), || {
            let targets = targets.clone();
            async move {
                for (group, target) in targets.into_iter().enumerate() {
                    if applied(group as u64).await?.into_iter().any(|a| a < target) {
                        return None;
                    }
                }
                Some(())
            }
        })
        .await
    }
}

/// A value of the Prometheus `/metrics` page under `base` (a router's internal URL, a node's
/// HTTP URL): the sum of the series named `series`, or, when it names labels
/// (`name{label="v"`), of the series whose line starts with it. `None` when there is none.
pub async fn metric(base: &str, series: &str) -> Option<f64> {
    let text = http().get(format!("{base}/metrics")).send().await.ok()?.text().await.ok()?;
    let values: Vec<f64> = text
        .lines()
        .filter(
            |l| if series.contains('{') { l.starts_with(series) } else { l.split([' ', '{']).next() == Some(series) },
        )
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Runs SQL in chdb (`tests/chdb_oracle.py`) over `rows` loaded into `table` (its
/// `TABLE.json`; `None`: the analytics events table): `{name: rows}`.
pub fn clickhouse_over(
    dir: &Path,
    table: Option<&Value>,
    rows: &[Value],
    queries: &std::collections::BTreeMap<String, String>,
) -> std::collections::HashMap<String, Value> {
    let data = dir.join("rows.ndjson");
    let lines: Vec<String> = rows.iter().map(Value::to_string).collect();
    std::fs::write(&data, lines.join("\n")).unwrap();
    let qfile = dir.join("queries.json");
    std::fs::write(&qfile, serde_json::to_vec(queries).unwrap()).unwrap();
    let mut args = vec![data.into_os_string(), qfile.into_os_string()];
    if let Some(table) = table {
        let tfile = dir.join("table.json");
        std::fs::write(&tfile, table.to_string()).unwrap();
        args.push(tfile.into_os_string());
    }
    serde_json::from_slice(&python("tests/chdb_oracle.py", &args, "the ClickHouse oracle")).unwrap()
}

/// Runs the workspace's Python script `script` with `args` (`SEXTANT_PYTHON`, or `python3`):
/// its standard output; panics, with its output, if it fails (`what` names it).
pub fn python(script: &str, args: &[impl AsRef<std::ffi::OsStr>], what: &str) -> Vec<u8> {
    let python = std::env::var("SEXTANT_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}; scripts/test.sh installs what the tests need"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// splitmix64: a seeded, dependency-free generator for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
