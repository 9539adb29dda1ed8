//! `sextant router --tls-cert --tls-key` against a real node: HTTPS and OTLP/gRPC over TLS,
//! verified against a CA made in the test (rcgen); the internal port stays plain HTTP; a
//! replaced certificate is served without a restart; bad files stop the start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

/// A CA and a `localhost` certificate it signed.
struct Pki {
    ca_der: CertificateDer<'static>,
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn pki(name: &str) -> Pki {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
    Pki { ca_der: ca.der().clone(), ca_pem: ca.pem(), cert_pem: leaf.pem(), key_pem: key.serialize_pem() }
}

/// Writes the certificate and key as the kubelet updates a Secret: each replaced by a rename.
fn install(dir: &Path, pki: &Pki) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    for (path, pem) in [(&cert, &pki.cert_pem), (&key, &pki.key_pem)] {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    (cert, key)
}

/// A client that trusts only `ca` and opens a new connection per request.
fn https(ca_pem: &str, addr: SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .resolve("localhost", addr)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

struct TlsRouter {
    _logs: LogsOnPanic,
    _node: Proc,
    router: Proc,
    addr: SocketAddr,
    internal: String,
    grpc: SocketAddr,
    creds: Value,
}

async fn start(dir: &Path, cert: &Path, key: &Path) -> TlsRouter {
    let logs = LogsOnPanic::new(dir);
    let secret = "test-cluster-secret-0123456789abcdef";
    let (node_grpc, node_http) = (free_port(), free_port());
    let data = dir.join("node1");
    let node = Proc::spawn(
        &[
            "node",
            "--id",
            "1",
            "--listen",
            &format!("127.0.0.1:{node_grpc}"),
            "--http-listen",
            &format!("127.0.0.1:{node_http}"),
            "--data-dir",
            data.to_str().unwrap(),
            "--peers",
            &format!("1=127.0.0.1:{node_grpc}"),
            "--shards",
            "1",
            "--replication-factor",
            "1",
        ],
        &dir.join("node1.log"),
        &[("SEXTANT_CLUSTER_SECRET", secret)],
    );
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let internal = format!("127.0.0.1:{}", free_port());
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let creds_path = dir.join("credentials.json");
    let router = Proc::spawn(
        &[
            "router",
            "--listen",
            &addr.to_string(),
            "--internal-listen",
            &internal,
            "--otlp-grpc-listen",
            &grpc.to_string(),
            "--nodes",
            &format!("127.0.0.1:{node_grpc}"),
            "--bootstrap-credentials",
            creds_path.to_str().unwrap(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-reload-seconds",
            "1",
        ],
        &dir.join("router.log"),
        &[("SEXTANT_CLUSTER_SECRET", secret), ("SEXTANT_JWT_SECRET", "test-jwt-secret-0123456789abcdef0123456789")],
    );
    // Readiness on the internal port, which stays plain HTTP.
    let internal = format!("http://{internal}");
    let mut tls = TlsRouter { _logs: logs, _node: node, router, addr, internal, grpc, creds: Value::Null };
    tls.creds = wait_bootstrap(&tls.internal, dir, &mut tls.router).await;
    tls
}

fn span_request(service: &str) -> ExportTraceServiceRequest {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                    key: "service.name".into(),
                    value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                        value: Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                            service.into(),
                        )),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![0x7c; 16],
                    span_id: vec![0x01; 8],
                    name: "GET /tls".into(),
                    start_time_unix_nano: now,
                    end_time_unix_nano: now + 1_000_000,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// An OTLP/gRPC client whose connections are TLS, trusting only `ca`, ALPN `h2`.
async fn grpc_over_tls(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
) -> TraceServiceClient<tonic::transport::Channel> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
        .unwrap();
    TraceServiceClient::new(channel)
}

#[tokio::test]
async fn a_tls_router_serves_https_and_otlp_grpc_and_reloads_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first = pki("first CA");
    let (cert, key) = install(dir.path(), &first);
    let tls = start(dir.path(), &cert, &key).await;

    // HTTPS, verified against the test's CA.
    let resp = https(&first.ca_pem, tls.addr).get(format!("https://localhost:{}/readyz", tls.addr.port())).send().await;
    assert_eq!(resp.expect("HTTPS to the public port").status(), 200);
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = http().get(format!("http://{}/readyz", tls.addr)).send().await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    // The internal port stays plain HTTP.
    let metrics = http().get(format!("{}/metrics", tls.internal)).send().await.unwrap();
    assert_eq!(metrics.status(), 200);

    // OTLP/gRPC over TLS, with the bootstrapped API key.
    let mut client = grpc_over_tls(tls.grpc, &first.ca_der).await;
    let mut request = tonic::Request::new(span_request("tls-svc"));
    let key_header = format!("Bearer {}", tls.creds["api_key"].as_str().unwrap());
    request.metadata_mut().insert("authorization", key_header.parse().unwrap());
    let answer = client.export(request).await.expect("export over TLS").into_inner();
    assert_eq!(answer.partial_success, None);

    // A new certificate from another CA: new connections get it, no restart.
    let second = pki("second CA");
    install(dir.path(), &second);
    let url = format!("https://localhost:{}/readyz", tls.addr.port());
    wait_for("the renewed certificate", Duration::from_secs(30), || async {
        https(&second.ca_pem, tls.addr).get(&url).send().await.ok().filter(|r| r.status() == 200)
    })
    .await;
    assert!(https(&first.ca_pem, tls.addr).get(&url).send().await.is_err(), "the old certificate is still served");
    let mut client = grpc_over_tls(tls.grpc, &second.ca_der).await;
    let mut request = tonic::Request::new(span_request("tls-svc"));
    request.metadata_mut().insert("authorization", key_header.parse().unwrap());
    client.export(request).await.expect("export over TLS with the renewed certificate");
}

#[tokio::test]
async fn a_router_with_a_bad_certificate_file_does_not_start_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let good = pki("ca");
    let (_, key) = install(dir.path(), &good);
    let bad = dir.path().join("broken.crt");
    std::fs::write(&bad, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").unwrap();
    let log = dir.path().join("router.log");
    let mut router = Proc::spawn(
        &[
            "router",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--internal-listen",
            &format!("127.0.0.1:{}", free_port()),
            "--nodes",
            "127.0.0.1:1",
            "--tls-cert",
            bad.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &log,
        &[
            ("SEXTANT_CLUSTER_SECRET", "test-cluster-secret-0123456789abcdef"),
            ("SEXTANT_JWT_SECRET", "test-jwt-secret-0123456789abcdef0123456789"),
        ],
    );
    wait_for("the router to exit", Duration::from_secs(30), || {
        let exited = router.exited();
        async move { exited.then_some(()) }
    })
    .await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("TLS certificate") && logged.contains("broken.crt"), "{logged}");
}
