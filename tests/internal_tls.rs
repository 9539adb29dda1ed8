//! Mutual TLS on internal gRPC (`--internal-tls-dir`): three node processes and a router, each
//! with its own certificate of a CA made in the test (rcgen), ingest and read; a node's gRPC
//! port refuses plain-text clients, clients without a certificate and clients whose
//! certificate another CA signed, even with the right cluster secret; a router's certificate
//! cannot call a node's Raft, and one of the CA that names no role cannot call anything; a
//! node's certificate replaced on disk is served to new connections without a restart.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sextant_model::peer::PeerRole;
use sextant_proto::client::Channels;
use sextant_proto::internal_tls::{InternalTls, InternalTlsFiles};
use sextant_proto::{ClusterInfoRequest, RaftRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "internal-tls-cluster-secret-0123456789";
const JWT: &str = "internal-tls-jwt-secret-0123456789abcdef";

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf for `localhost` and 127.0.0.1, usable as server and as client, naming `role`:
    /// (cert, key) PEM.
    fn leaf(&self, name: &str, role: Option<PeerRole>) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ];
        params.subject_alt_names.extend(role.map(|r| SanType::URI(r.uri().try_into().unwrap())));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Writes `tls.crt`, `tls.key` and `ca.crt` into `dir` as the kubelet updates a Secret: each
/// file replaced by a rename.
fn install(dir: &Path, (cert, key): &(String, String), ca_pem: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for (name, pem) in [("ca.crt", ca_pem), ("tls.key", key.as_str()), ("tls.crt", cert.as_str())] {
        let tmp = dir.join(format!("{name}.new"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    dir.to_owned()
}

/// `ClusterInfo` through a channel set that dials with `tls` (plain with `None`).
async fn cluster_info(addr: &str, tls: Option<InternalTls>) -> Result<u64, tonic::Status> {
    let channels = Channels::new(SECRET).unwrap().with_tls(tls);
    let mut client = channels.storage(addr)?;
    match tokio::time::timeout(Duration::from_secs(10), client.cluster_info(ClusterInfoRequest {})).await {
        Ok(reply) => Ok(reply?.into_inner().node_id),
        Err(_) => Err(tonic::Status::deadline_exceeded("no answer in 10 s")),
    }
}

/// An empty Raft vote request dialled with `tls`: past the interceptors, the service refuses it
/// as malformed.
async fn raft_vote(addr: &str, tls: InternalTls) -> tonic::Status {
    let channels = Channels::new(SECRET).unwrap().with_tls(Some(tls));
    let mut client = channels.raft(addr).unwrap();
    let vote = client.vote(RaftRequest { group: 999_999, body: Vec::new().into() });
    match tokio::time::timeout(Duration::from_secs(10), vote).await {
        Ok(reply) => reply.expect_err("a vote for an unknown group was answered"),
        Err(_) => tonic::Status::deadline_exceeded("no answer in 10 s"),
    }
}

/// The certificate a TLS server at `addr` presents to a client with a valid certificate.
async fn served_certificate(addr: &str, ca_pem: &str, client: &(String, String)) -> CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    let chain = vec![CertificateDer::from_pem_slice(client.0.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(client.1.as_bytes()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].clone().into_owned()
}

/// A TLS client that trusts the CA but has no certificate of its own: what the server says
/// after the HTTP/2 preface (nothing, or a TLS alert as an error).
async fn without_client_certificate(addr: &str, ca_pem: &str) -> Result<Vec<u8>, std::io::Error> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await?;
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out)).await.expect("the server hung up")?;
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutual_tls_cluster_serves_refuses_strangers_and_takes_a_renewed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let _logs = LogsOnPanic::new(dir);
    let ca = Ca::new("sextant test cluster CA");
    let ca_pem = ca.pem();

    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let addrs: Vec<String> = ports.iter().map(|(grpc, _)| format!("127.0.0.1:{grpc}")).collect();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let id = i + 1;
        let leaf = ca.leaf(&format!("node {id}"), Some(PeerRole::Node));
        let tls_dir = install(&dir.join(format!("node{id}-tls")), &leaf, &ca_pem);
        let flags = ["--internal-tls-dir", tls_dir.to_str().unwrap(), "--internal-tls-reload-seconds", "1"];
        nodes.push(spawn_node(dir, &ports, i, &flags));
    }
    let router_leaf = ca.leaf("router", Some(PeerRole::Router));
    let router_tls = install(&dir.join("router-tls"), &router_leaf, &ca_pem);
    let creds_path = dir.join("credentials.json");
    let routers = spawn_routers(
        dir,
        &addrs.join(","),
        1,
        &["--internal-tls-dir", router_tls.to_str().unwrap()],
        &creds_path,
        &[("SEXTANT_CLUSTER_SECRET", SECRET), ("SEXTANT_JWT_SECRET", JWT)],
    );
    let url = routers.urls[0].clone();
    let creds = wait_routers_serve(&routers.urls, &creds_path).await;

    // Router -> node and node <-> node (Raft, forwarding) all run over mutual TLS.
    let key = creds["api_key"].as_str().unwrap();
    let token = login(&url, creds["email"].as_str().unwrap(), creds["password"].as_str().unwrap()).await;
    let resp = post_spans(&url, key, &spans_batch("mtls", 4, 3)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    for t in 0..4 {
        let trace = format!("mtls-t{t}");
        let found = wait_for("the ingested trace", Duration::from_secs(30), || {
            let (url, token, trace) = (url.clone(), token.clone(), trace.clone());
            async move { get_trace(&url, &token, &trace).await }
        })
        .await;
        assert_eq!(found["spans"].as_array().map(Vec::len), Some(3), "{found}");
    }

    // A client of the cluster CA with the secret is served: the control for what follows.
    let with = |dir: &Path| InternalTls::load(&InternalTlsFiles::in_dir(dir, Duration::from_secs(1))).unwrap();
    let member = with(&install(&dir.join("member-tls"), &ca.leaf("member", Some(PeerRole::Router)), &ca_pem));
    assert_eq!(cluster_info(&addrs[0], Some(member.clone())).await.unwrap(), 1);

    // Raft is for nodes: a router's certificate is refused, a node's gets through to the service.
    assert_eq!(raft_vote(&addrs[0], member.clone()).await.code(), tonic::Code::PermissionDenied);
    let peer = with(&install(&dir.join("peer-tls"), &ca.leaf("peer", Some(PeerRole::Node)), &ca_pem));
    let past = raft_vote(&addrs[0], peer).await;
    assert!(![tonic::Code::PermissionDenied, tonic::Code::Unauthenticated].contains(&past.code()), "{past:?}");

    // A certificate of the cluster CA that names no role (another workload's): refused.
    let roleless = with(&install(&dir.join("roleless-tls"), &ca.leaf("other workload", None), &ca_pem));
    let refused = cluster_info(&addrs[0], Some(roleless)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

    // Plain text, with the right cluster secret: refused.
    let plain = cluster_info(&addrs[0], None).await;
    assert!(plain.is_err(), "a plain-text client was served: {plain:?}");

    // A certificate another CA signed, trusting the right CA (so the node, not the client,
    // decides): refused.
    let rogue = Ca::new("another CA");
    let stranger = with(&install(&dir.join("stranger-tls"), &rogue.leaf("stranger", Some(PeerRole::Router)), &ca_pem));
    let refused = cluster_info(&addrs[0], Some(stranger)).await;
    assert!(refused.is_err(), "a client of another CA was served: {refused:?}");

    // No client certificate at all: the node answers no HTTP/2 (an alert, or it hangs up).
    if let Ok(bytes) = without_client_certificate(&addrs[0], &ca_pem).await {
        assert!(bytes.is_empty(), "the node answered a client without a certificate: {bytes:?}");
    }

    // Node 1's certificate renewed on disk: new connections get the new one, no restart.
    let before = served_certificate(&addrs[0], &ca_pem, &router_leaf).await;
    let renewed = ca.leaf("node 1 renewed", Some(PeerRole::Node));
    install(&dir.join("node1-tls"), &renewed, &ca_pem);
    let renewed_der = {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(renewed.0.as_bytes()).unwrap().into_owned()
    };
    assert_ne!(before, renewed_der);
    wait_for("node 1 to serve its renewed certificate", Duration::from_secs(30), || {
        let (addr, ca_pem, leaf, want) = (addrs[0].clone(), ca_pem.clone(), router_leaf.clone(), renewed_der.clone());
        async move { (served_certificate(&addr, &ca_pem, &leaf).await == want).then_some(()) }
    })
    .await;
    assert!(nodes.iter_mut().all(|n| !n.exited()), "a node restarted or died");
    assert_eq!(cluster_info(&addrs[0], Some(member)).await.unwrap(), 1);

    // The cluster keeps serving after the renewal.
    let resp = post_spans(&url, key, &spans_batch("renewed", 2, 2)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    for t in 0..2 {
        let trace = format!("renewed-t{t}");
        wait_for("a trace ingested after the renewal", Duration::from_secs(30), || {
            let (url, token, trace) = (url.clone(), token.clone(), trace.clone());
            async move { get_trace(&url, &token, &trace).await }
        })
        .await;
    }
}

#[tokio::test]
async fn a_node_with_unreadable_internal_tls_files_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let ca = Ca::new("ca");
    let tls_dir = install(&dir.join("tls"), &ca.leaf("node", Some(PeerRole::Node)), &ca.pem());
    // The key of another certificate.
    std::fs::write(tls_dir.join("tls.key"), ca.leaf("other", Some(PeerRole::Node)).1).unwrap();
    let grpc = format!("127.0.0.1:{}", free_port());
    let data = dir.join("node1");
    let args = [
        "node",
        "--id",
        "1",
        "--listen",
        &grpc,
        "--data-dir",
        data.to_str().unwrap(),
        "--peers",
        &format!("1={grpc}"),
        "--internal-tls-dir",
        tls_dir.to_str().unwrap(),
    ];
    let mut node = Proc::spawn(&args, &dir.join("node1.log"), &[("SEXTANT_CLUSTER_SECRET", SECRET)]);
    wait_for("the node to exit", Duration::from_secs(30), || {
        let exited = node.exited();
        async move { exited.then_some(()) }
    })
    .await;
    let log = std::fs::read_to_string(dir.join("node1.log")).unwrap();
    assert!(log.contains("does not belong to certificate"), "{log}");
}

/// `sextant node` `i` of a three-node cluster on `ports`, with `extra` flags.
fn spawn_node(dir: &Path, ports: &[(u16, u16)], i: usize, extra: &[&str]) -> Proc {
    let peers =
        ports.iter().enumerate().map(|(j, (grpc, _))| format!("{}=127.0.0.1:{grpc}", j + 1)).collect::<Vec<_>>();
    let (grpc, http) = ports[i];
    let (id, listen, http_listen) = ((i + 1).to_string(), format!("127.0.0.1:{grpc}"), format!("127.0.0.1:{http}"));
    let data = dir.join(format!("node{id}"));
    let mut args = vec!["node", "--id", &id, "--listen", &listen, "--http-listen", &http_listen];
    let peers = peers.join(",");
    args.extend(["--data-dir", data.to_str().unwrap(), "--peers", &peers, "--shards", "2"]);
    args.extend(["--replication-factor", "3"]);
    args.extend_from_slice(extra);
    Proc::spawn(&args, &dir.join(format!("node{id}.log")), &[("SEXTANT_CLUSTER_SECRET", SECRET)])
}

/// A running plain-text cluster switches to mutual TLS as the operator rolls it: every node
/// restarted in `accept`, then in `dial` (and the router moved to a TLS one), then in
/// `require`, one at a time under steady ingest. Every acknowledged batch is read back, and at
/// the end the nodes refuse plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_cluster_switches_to_mutual_tls_one_restart_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let _logs = LogsOnPanic::new(dir);
    let ca = Ca::new("sextant switch CA");
    let ca_pem = ca.pem();
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let addrs: Vec<String> = ports.iter().map(|(grpc, _)| format!("127.0.0.1:{grpc}")).collect();
    let mut nodes: Vec<Proc> = (0..3).map(|i| spawn_node(dir, &ports, i, &[])).collect();
    let creds_path = dir.join("credentials.json");
    let envs = [("SEXTANT_CLUSTER_SECRET", SECRET), ("SEXTANT_JWT_SECRET", JWT)];
    let limits = ["--api-rps", "100000", "--ingest-rps", "100000"];
    let mut routers = spawn_routers(dir, &addrs.join(","), 1, &limits, &creds_path, &envs);
    let creds = wait_routers_serve(&routers.urls, &creds_path).await;
    let key = creds["api_key"].as_str().unwrap().to_owned();

    let url = Arc::new(std::sync::RwLock::new(routers.urls[0].clone()));
    let acked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (url, acked, stop, key) = (url.clone(), acked.clone(), stop.clone(), key.clone());
        tokio::spawn(async move {
            for n in 0.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let prefix = format!("b{n}");
                let target = url.read().unwrap().clone();
                let resp = http()
                    .post(format!("{target}/api/v1/ingest/spans"))
                    .header("X-API-Key", &key)
                    .json(&spans_batch(&prefix, 2, 2))
                    .send()
                    .await;
                if resp.is_ok_and(|r| r.status() == 200) {
                    acked.lock().unwrap().extend([format!("{prefix}-t0"), format!("{prefix}-t1")]);
                }
            }
        })
    };
    let progress = |what: &'static str| {
        let acked = acked.clone();
        let base = acked.lock().unwrap().len();
        wait_for(what, Duration::from_secs(60), move || {
            let n = acked.lock().unwrap().len();
            async move { (n >= base + 10).then_some(()) }
        })
    };
    progress("ingest to start").await;

    let tls_dir = |name: &str, role| install(&dir.join(name), &ca.leaf(name, Some(role)), &ca_pem);
    for mode in ["accept", "dial", "require"] {
        for i in 0..3 {
            nodes[i].kill();
            let tls = tls_dir(&format!("node{}-tls", i + 1), PeerRole::Node);
            let flags = ["--internal-tls-dir", tls.to_str().unwrap(), "--internal-tls-mode", mode];
            nodes[i] = spawn_node(dir, &ports, i, &flags);
            let http_url = format!("http://127.0.0.1:{}", ports[i].1);
            wait_for("the restarted node to be ready", Duration::from_secs(60), || {
                let http_url = http_url.clone();
                async move { ready(&http_url).await.then_some(()) }
            })
            .await;
            progress("ingest after a node restarted").await;
        }
        if mode == "dial" {
            // The router dials mutual TLS before any node requires it.
            let tls = tls_dir("router-tls", PeerRole::Router);
            let mut flags = vec!["--internal-tls-dir", tls.to_str().unwrap(), "--internal-tls-mode", "dial"];
            flags.extend(limits);
            let next = spawn_routers(dir, &addrs.join(","), 1, &flags, &dir.join("unused.json"), &envs);
            wait_routers_serve(&next.urls, &creds_path).await;
            *url.write().unwrap() = next.urls[0].clone();
            routers.procs[0].kill();
            routers = next;
            progress("ingest through the TLS router").await;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();

    // Plain text is refused now; the router's certificate is served.
    assert!(cluster_info(&addrs[0], None).await.is_err(), "a plain-text client was served after the switch");
    let member =
        InternalTls::load(&InternalTlsFiles::in_dir(&tls_dir("member-tls", PeerRole::Router), Duration::from_secs(1)));
    assert_eq!(cluster_info(&addrs[0], Some(member.unwrap())).await.unwrap(), 1);

    let url = routers.urls[0].clone();
    let token = login(&url, creds["email"].as_str().unwrap(), creds["password"].as_str().unwrap()).await;
    // Each `progress` above already required ten acknowledgements after its step.
    let acked = acked.lock().unwrap().clone();
    for trace in &acked {
        let found = get_trace_when_served(&url, &token, trace).await;
        let found = found.unwrap_or_else(|| panic!("acknowledged trace {trace} is missing"));
        assert_eq!(found["spans"].as_array().map(Vec::len), Some(2), "{trace}: {found}");
    }
    assert!(nodes.iter_mut().all(|n| !n.exited()), "a node died");
}
