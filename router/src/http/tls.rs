//! TLS on the router's public ports (`--tls-cert`, `--tls-key`): a PEM certificate chain and
//! key, read again whenever the files change so that a renewed certificate (a Kubernetes
//! Secret updated by cert-manager, say) is served without a restart (`sextant_proto::tls`,
//! shared with internal gRPC's mutual TLS). TLS 1.2 and 1.3 only; ALPN offers `h2` and
//! `http/1.1`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use sextant_proto::tls::{certified_key, provider, Reloading};
pub use sextant_proto::tls::{Reload, TlsError};

/// Where the certificate and its key are, and how often they are checked for a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server certificate first, then its intermediates.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    pub reload_every: Duration,
}

/// The certificate being served; replaced whole when the files change.
#[derive(Debug)]
pub struct ReloadingCert(Reloading<CertifiedKey>);

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }
}

/// A TLS acceptor for the router's public listeners, and what keeps its certificate fresh.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    files: TlsFiles,
    certs: Reloading<CertifiedKey>,
}

impl Tls {
    /// Reads the files now: a missing, malformed or mismatched file is an error at startup.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let certs = Reloading::load(vec![files.cert.clone(), files.key.clone()], |pems| {
            let [cert, key] = pems else { unreachable!("two files are read") };
            certified_key(cert, key)
        })?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(ReloadingCert(certs.clone())));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), files, certs })
    }

    /// Checks the files every `reload_every` and serves their certificate from the next
    /// handshake on once it loads.
    pub fn spawn_reload(&self) -> tokio::task::JoinHandle<()> {
        self.certs.spawn_reload(self.files.reload_every, "TLS certificate")
    }

    #[cfg(test)]
    fn reloader(&self) -> &Reloading<CertifiedKey> {
        &self.certs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::connection::{serve, ServerLimits};
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::CertificateDer;
    use std::net::SocketAddr;
    use std::path::Path;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A CA and a `localhost` certificate it signed, as PEM.
    struct Pki {
        ca: CertificateDer<'static>,
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
        Pki { ca: ca.der().clone(), cert_pem: leaf.pem(), key_pem: key.serialize_pem() }
    }

    fn write(dir: &Path, pki: &Pki) -> TlsFiles {
        let files =
            TlsFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key"), reload_every: Duration::from_millis(20) };
        // Replaced by rename, as the kubelet swaps a Secret's files.
        for (path, pem) in [(&files.cert, &pki.cert_pem), (&files.key, &pki.key_pem)] {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, pem).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
        files
    }

    async fn start(tls: &Tls) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "over tls" }));
        tokio::spawn(serve(listener, app, ServerLimits::default(), Some(tls.acceptor.clone()), || {}));
        addr
    }

    fn client(ca: &CertificateDer<'static>, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// `GET /` over TLS, trusting only `ca`: the answer, or why the handshake failed.
    async fn get(addr: SocketAddr, ca: &CertificateDer<'static>) -> Result<String, std::io::Error> {
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = client(ca, &[b"http/1.1"]).connect(name, tcp).await?;
        tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await?;
        let mut out = Vec::new();
        tls.read_to_end(&mut out).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    #[tokio::test]
    async fn https_succeeds_verified_against_the_ca_and_offers_h2() {
        let dir = tempfile::tempdir().unwrap();
        let ours = pki("ca one");
        let tls = Tls::load(write(dir.path(), &ours)).unwrap();
        let addr = start(&tls).await;
        let answer = get(addr, &ours.ca).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("over tls"), "{answer}");
        // A client of another CA refuses the certificate.
        assert!(get(addr, &pki("other").ca).await.is_err());
        // gRPC clients ask for h2 by ALPN.
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = client(&ours.ca, &[b"h2", b"http/1.1"]).connect(name, tcp).await.unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        // TLS 1.2 is still accepted (rustls has nothing older).
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ours.ca.clone()).unwrap();
        let tls12 = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = tokio_rustls::TlsConnector::from(Arc::new(tls12)).connect(name, tcp).await.unwrap();
        assert_eq!(stream.get_ref().1.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    }

    #[tokio::test]
    async fn plain_http_to_the_tls_port_gets_no_answer() {
        let dir = tempfile::tempdir().unwrap();
        let tls = Tls::load(write(dir.path(), &pki("ca"))).unwrap();
        let addr = start(&tls).await;
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out)).await.expect("closed");
        assert!(!String::from_utf8_lossy(&out).contains("HTTP/1.1"), "{out:?}");
    }

    #[tokio::test]
    async fn a_replaced_certificate_is_served_to_new_connections() {
        let dir = tempfile::tempdir().unwrap();
        let first = pki("first");
        let tls = Tls::load(write(dir.path(), &first)).unwrap();
        let _reload = tls.spawn_reload();
        let addr = start(&tls).await;
        assert!(get(addr, &first.ca).await.is_ok());
        let second = pki("second");
        write(dir.path(), &second);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while get(addr, &second.ca).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "the new certificate was never served");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(get(addr, &first.ca).await.is_err(), "the old certificate is still served");
    }

    #[tokio::test]
    async fn a_broken_replacement_keeps_the_previous_certificate_until_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let first = pki("first");
        let files = write(dir.path(), &first);
        let tls = Tls::load(files.clone()).unwrap();
        let reloader = tls.reloader();
        let addr = start(&tls).await;
        assert!(matches!(reloader.check(), Reload::Unchanged));
        // The key of another certificate: refused once, the first certificate stays.
        std::fs::write(&files.key, pki("x").key_pem).unwrap();
        assert!(matches!(reloader.check(), Reload::Rejected(TlsError::Mismatch { .. })));
        assert!(matches!(reloader.check(), Reload::Unchanged));
        assert!(get(addr, &first.ca).await.unwrap().ends_with("over tls"));
        std::fs::remove_file(&files.cert).unwrap();
        assert!(matches!(reloader.check(), Reload::Unreadable(TlsError::Read { .. })));
        let second = pki("second");
        write(dir.path(), &second);
        assert!(matches!(reloader.check(), Reload::Reloaded));
        assert!(get(addr, &second.ca).await.unwrap().ends_with("over tls"));
    }

    #[test]
    fn bad_files_are_named_in_the_startup_error() {
        let dir = tempfile::tempdir().unwrap();
        let files = write(dir.path(), &pki("ca"));
        let missing = TlsFiles { cert: dir.path().join("nope.crt"), ..files.clone() };
        let e = Tls::load(missing).err().unwrap();
        assert!(matches!(e, TlsError::Read { .. }) && e.to_string().contains("nope.crt"), "{e}");

        std::fs::write(dir.path().join("empty.crt"), "not a certificate\n").unwrap();
        let e = Tls::load(TlsFiles { cert: dir.path().join("empty.crt"), ..files.clone() }).err().unwrap();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");

        // The certificate where the key should be.
        let e = Tls::load(TlsFiles { key: files.cert.clone(), ..files.clone() }).err().unwrap();
        assert!(matches!(e, TlsError::NoKey { .. }), "{e}");

        std::fs::write(dir.path().join("other.key"), pki("other").key_pem).unwrap();
        let e = Tls::load(TlsFiles { key: dir.path().join("other.key"), ..files.clone() }).err().unwrap();
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
        assert!(e.to_string().contains("other.key") && e.to_string().contains("tls.crt"), "{e}");
    }
}
