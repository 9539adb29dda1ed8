//! What a process refuses from its first moment: short cluster secrets, gRPC calls without
//! the secret.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
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
        let args = ["router", "--listen", &listen, "--nodes", "127.0.0.1:1"];
        let (code, stderr) = run_to_exit(&args, &[("SEXTANT_CLUSTER_SECRET", secret), ("SEXTANT_JWT_SECRET", JWT)]);
        assert!(code.is_some_and(|c| c != 0), "exit code {code:?} with a {}-byte secret", secret.len());
        assert!(stderr.contains("cluster secret (SEXTANT_CLUSTER_SECRET) must have at least 32 bytes"), "{stderr}");
    }
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
}
