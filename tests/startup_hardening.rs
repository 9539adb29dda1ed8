//! What a process refuses or keeps private from its first moment: short cluster secrets, gRPC
//! calls without the secret, data files readable by other users, browser origins nobody listed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use sextant_proto::storage_client::StorageClient;
use sextant_proto::MetaRequest;

const SECRET: &str = "test-cluster-secret-0123456789abcdef";
const JWT: &str = "test-jwt-secret-0123456789abcdef0123456789";

/// Runs `sextant args` with `envs` until it exits (killed after 60 s): exit code and stderr.
fn run_to_exit(args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("SEXTANT_CLUSTER_SECRET")
        .env_remove("SEXTANT_LOG")
        .env_remove("RUST_LOG")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`sextant {}` still runs after 60 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), std::fs::read_to_string(&err_path).unwrap())
}

const SHORT_SECRETS: [&str; 2] = ["", "0123456789abcdef0123456789abcde"];

#[test]
fn the_log_filter_is_read_from_sextant_log_then_rust_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", free_port());
    // Without peers a node logs its memory budgets (INFO), then refuses to start.
    let args = ["node", "--id", "1", "--listen", &listen, "--data-dir", data.to_str().unwrap()];
    let secret = ("SEXTANT_CLUSTER_SECRET", SECRET);
    let (_, default) = run_to_exit(&args, &[secret]);
    assert!(default.contains(" INFO ") && default.contains("not in the peer list"), "{default}");
    // What a Kubernetes pod template sets (the operator refuses SEXTANT_* there).
    let (_, warn) = run_to_exit(&args, &[secret, ("RUST_LOG", "warn")]);
    assert!(!warn.contains(" INFO ") && warn.contains("not in the peer list"), "{warn}");
    let (_, both) = run_to_exit(&args, &[secret, ("RUST_LOG", "warn"), ("SEXTANT_LOG", "info")]);
    assert!(both.contains(" INFO "), "{both}");
}

#[test]
fn a_node_with_an_empty_or_short_cluster_secret_refuses_to_start() {
    assert_eq!(SHORT_SECRETS[1].len(), 31);
    for secret in SHORT_SECRETS {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let peers = format!("1={listen}");
        let args = ["node", "--id", "1", "--listen", &listen, "--data-dir", data.to_str().unwrap(), "--peers", &peers];
        let (code, stderr) = run_to_exit(&args, &[("SEXTANT_CLUSTER_SECRET", secret)]);
        assert!(code.is_some_and(|c| c != 0), "exit code {code:?} with a {}-byte secret", secret.len());
        assert!(stderr.contains("cluster secret (SEXTANT_CLUSTER_SECRET) must have at least 32 bytes"), "{stderr}");
        assert!(!data.exists(), "the node touched its data directory before refusing");
    }
}

#[test]
fn a_router_with_an_empty_or_short_cluster_secret_refuses_to_start() {
    for secret in SHORT_SECRETS {
        let listen = format!("127.0.0.1:{}", free_port());
        let internal = format!("127.0.0.1:{}", free_port());
        let args = ["router", "--listen", &listen, "--internal-listen", &internal, "--nodes", "127.0.0.1:1"];
        let (code, stderr) = run_to_exit(&args, &[("SEXTANT_CLUSTER_SECRET", secret), ("SEXTANT_JWT_SECRET", JWT)]);
        assert!(code.is_some_and(|c| c != 0), "exit code {code:?} with a {}-byte secret", secret.len());
        assert!(stderr.contains("cluster secret (SEXTANT_CLUSTER_SECRET) must have at least 32 bytes"), "{stderr}");
    }
}

/// Every file under `dir` is 0600 and every directory 0700 (`dir` included); `skip` names
/// top-level files the test itself wrote. Returns how many files were checked.
#[cfg(unix)]
fn assert_private(dir: &Path, skip: &[&str]) -> usize {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    let (mut stack, mut files) = (vec![dir.to_owned()], 0);
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if d == dir && skip.iter().any(|s| path.file_name().is_some_and(|n| n == *s)) {
                continue;
            }
            // A file may be replaced (compaction, rename) between listing and stat.
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let m = meta.permissions().mode() & 0o777;
            if meta.is_dir() {
                assert_eq!(m, 0o700, "directory {} is {m:o}", path.display());
                stack.push(path);
            } else {
                assert_eq!(m, 0o600, "file {} is {m:o}", path.display());
                files += 1;
            }
        }
    }
    files
}

#[cfg(unix)]
fn has_file(dir: &Path, pred: &dyn Fn(&str) -> bool) -> bool {
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if pred(&entry.file_name().to_string_lossy()) {
                return true;
            }
        }
    }
    false
}

#[cfg(unix)]
#[tokio::test]
async fn dev_keeps_its_data_directory_private_after_ingest_and_flush() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // An existing, world-readable data directory is narrowed at start.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // One shard flushing every two entries: spans reach segment files after a few batches.
    let extra = ["--shards", "1", "--snapshot-every", "2", "--ingest-rps", "10000", "--analytics-rps", "10000"];
    let dev = Dev::start_with(dir.path(), &extra, &[]).await;
    let event = serde_json::json!({
        "token": dev.creds["ingest_token"], "events": [{"event": "signup", "distinct_id": "u1"}],
    });
    let resp = http().post(format!("{}/v1/batch", dev.url)).json(&event).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut batch = 0;
    wait_for("a flushed segment file", Duration::from_secs(120), || {
        batch += 1;
        let (url, key, prefix) = (dev.url.clone(), dev.api_key().to_owned(), format!("b{batch}"));
        let root = dir.path().to_owned();
        async move {
            assert_eq!(post_spans(&url, &key, &spans_batch(&prefix, 4, 3)).await.status(), 200);
            has_file(&root, &|n: &str| n.ends_with(".parquet")).then_some(())
        }
    })
    .await;
    assert!(has_file(dir.path(), &|n: &str| n.ends_with(".sxwl")), "the Raft log is on disk");
    // dev.log is the test's own capture of the process output.
    let files = assert_private(dir.path(), &["dev.log"]);
    assert!(files >= 5, "only {files} files checked");
}

#[tokio::test]
async fn node_refuses_grpc_calls_without_the_cluster_secret() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", free_port());
    let peers = format!("1={listen}");
    let args = ["node", "--id", "1", "--listen", &listen, "--data-dir", data.to_str().unwrap(), "--peers", &peers];
    let _node = Proc::spawn(&args, &dir.path().join("node.log"), &[("SEXTANT_CLUSTER_SECRET", SECRET)]);
    let view = serde_json::to_vec(&sextant_model::meta::MetaQuery::View).unwrap();

    // With the secret, meta answers once the node has elected itself.
    let channels = sextant_proto::client::Channels::new(SECRET).unwrap();
    wait_for("meta to answer with the secret", Duration::from_secs(60), || {
        let (channels, listen, view) = (&channels, &listen, view.clone());
        async move {
            let mut client = channels.storage(listen).ok()?;
            client.meta_read(MetaRequest { json: view.into() }).await.ok()
        }
    })
    .await;

    let mut bare = StorageClient::connect(format!("http://{listen}")).await.unwrap();
    let status = bare.meta_read(MetaRequest { json: view.clone().into() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "MetaRead without the header: {status}");
    let status = bare.meta_write(MetaRequest { json: b"{}".to_vec().into() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "MetaWrite without the header: {status}");
    for wrong in ["", "test-cluster-secret-0123456789abcdeX"] {
        let mut req = tonic::Request::new(MetaRequest { json: view.clone().into() });
        req.metadata_mut().insert(sextant_proto::CLUSTER_SECRET_HEADER, wrong.parse().unwrap());
        let status = bare.meta_read(req).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "MetaRead with {wrong:?}: {status}");
    }

    // `sextant node` keeps its directory private too (the journal and meta's state).
    #[cfg(unix)]
    assert!(assert_private(&data, &[]) >= 2);
}

/// `sextant dev`'s router calls its node in process: nothing listens at the address the calls
/// name, and the node still checks the cluster secret.
#[tokio::test]
async fn a_node_called_in_process_answers_without_a_connection_and_checks_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_in_process_node(dir.path(), SECRET, 1000).await;
    // Port 1: nothing listens there, so only the in-process link can answer.
    let nowhere = "127.0.0.1:1";
    let view = serde_json::to_vec(&sextant_model::meta::MetaQuery::View).unwrap();
    let in_process = sextant_proto::client::InProcessNode {
        addr: nowhere.into(),
        services: node.services.clone(),
        storage: node.storage.clone(),
    };
    let channels = sextant_proto::client::Channels::new(SECRET).unwrap().with_in_process(in_process.clone());
    wait_for("meta to answer in process", Duration::from_secs(60), || {
        let (channels, view) = (&channels, view.clone());
        async move { channels.storage(nowhere).ok()?.meta_read(MetaRequest { json: view.into() }).await.ok() }
    })
    .await;
    let mut by_network = channels.storage(&format!("127.0.0.1:{}", free_port())).unwrap();
    let status = by_network.meta_read(MetaRequest { json: view.clone().into() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "another address goes over the network: {status}");

    let other = sextant_proto::client::Channels::new("another-cluster-secret-0123456789abcdef")
        .unwrap()
        .with_in_process(in_process);
    let status = other.storage(nowhere).unwrap().meta_read(MetaRequest { json: view.into() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "a wrong secret in process: {status}");
    node.shutdown().await;
}

/// The origin a CORS preflight for `POST /auth/login` from `origin` is allowed, if any.
async fn preflight_allows(url: &str, origin: &str) -> Option<String> {
    let resp = http()
        .request(reqwest::Method::OPTIONS, format!("{url}/auth/login"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "content-type")
        .send()
        .await
        .unwrap();
    let allowed = resp.headers().get("access-control-allow-origin")?.to_str().unwrap().to_owned();
    assert_eq!(resp.headers().get("access-control-allow-credentials").unwrap(), "true");
    Some(allowed)
}

#[tokio::test]
async fn dev_trusts_only_its_own_origin_and_the_ones_listed() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;
    assert_eq!(preflight_allows(&dev.url, &dev.url).await.as_deref(), Some(dev.url.as_str()));
    assert_eq!(preflight_allows(&dev.url, "http://localhost:3000").await, None, "an origin nobody listed");
    drop(dev);

    let dir = tempfile::tempdir().unwrap();
    let extra = ["--dashboard-origin", "http://localhost:3000", "--dashboard-origin", "https://dash.example"];
    let dev = Dev::start_with(dir.path(), &extra, &[]).await;
    for origin in ["http://localhost:3000", "https://dash.example", dev.url.as_str()] {
        assert_eq!(preflight_allows(&dev.url, origin).await.as_deref(), Some(origin));
    }
    assert_eq!(preflight_allows(&dev.url, "http://evil.example").await, None);
}
