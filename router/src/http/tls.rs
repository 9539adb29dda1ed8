//! TLS on the router's public ports (`--tls-cert`, `--tls-key`): a PEM certificate chain and
//! key, read again whenever the files change so that a renewed certificate (a Kubernetes
//! Secret updated by cert-manager, say) is served without a restart. TLS 1.2 and 1.3 only;
//! ALPN offers `h2` and `http/1.1`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use sha2::{Digest, Sha256};

/// Certificate files larger than this are refused (a chain is a few KiB).
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Where the certificate and its key are, and how often they are checked for a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server certificate first, then its intermediates.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    pub reload_every: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("TLS file {path} is larger than {MAX_PEM_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("TLS certificate {path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("TLS certificate {path}: {detail}")]
    BadCertificate { path: PathBuf, detail: String },
    #[error("TLS key {path}: no PEM private key in it")]
    NoKey { path: PathBuf },
    #[error("TLS key {path}: {detail}")]
    BadKey { path: PathBuf, detail: String },
    #[error("TLS key {key} does not belong to certificate {cert}")]
    Mismatch { cert: PathBuf, key: PathBuf },
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|source| TlsError::Read { path: path.into(), source })?;
    let mut out = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|source| TlsError::Read { path: path.into(), source })?;
    if out.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsError::TooLarge { path: path.into() });
    }
    Ok(out)
}

/// The two files' bytes and a digest of both, to notice a change.
struct Snapshot {
    cert: Vec<u8>,
    key: Vec<u8>,
    digest: [u8; 32],
}

impl Snapshot {
    fn read(files: &TlsFiles) -> Result<Self, TlsError> {
        let cert = read_bounded(&files.cert)?;
        let key = read_bounded(&files.key)?;
        let mut hasher = Sha256::new();
        hasher.update((cert.len() as u64).to_le_bytes());
        hasher.update(&cert);
        hasher.update(&key);
        Ok(Self { cert, key, digest: hasher.finalize().into() })
    }

    fn certified_key(&self, files: &TlsFiles) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::BadCertificate { path: files.cert.clone(), detail: e.to_string() })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate { path: files.cert.clone() });
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey { path: files.key.clone() },
            e => TlsError::BadKey { path: files.key.clone(), detail: e.to_string() },
        })?;
        let signer = provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| TlsError::BadKey { path: files.key.clone(), detail: e.to_string() })?;
        let certified = CertifiedKey::new(chain, signer);
        match certified.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(certified),
            Err(rustls::Error::InconsistentKeys(_)) => {
                Err(TlsError::Mismatch { cert: files.cert.clone(), key: files.key.clone() })
            }
            Err(e) => Err(TlsError::BadCertificate { path: files.cert.clone(), detail: e.to_string() }),
        }
    }
}

/// The certificate being served; replaced whole when the files change.
#[derive(Debug)]
pub struct ReloadingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// A TLS acceptor for the router's public listeners, and what keeps its certificate fresh.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    files: TlsFiles,
    resolver: Arc<ReloadingCert>,
    digest: [u8; 32],
}

impl Tls {
    /// Reads the files now: a missing, malformed or mismatched file is an error at startup.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let snapshot = Snapshot::read(&files)?;
        let key = snapshot.certified_key(&files)?;
        let resolver = Arc::new(ReloadingCert { current: RwLock::new(Arc::new(key)) });
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            files,
            resolver,
            digest: snapshot.digest,
        })
    }

    /// Checks the files every `reload_every` and serves their certificate from the next
    /// handshake on once it loads.
    pub fn spawn_reload(&self) -> tokio::task::JoinHandle<()> {
        let mut reloader = self.reloader();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(reloader.files.reload_every.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                match tokio::task::spawn_blocking(move || {
                    let outcome = reloader.check();
                    (reloader, outcome)
                })
                .await
                {
                    Ok((back, outcome)) => {
                        match &outcome {
                            Reload::Unchanged => {}
                            Reload::Reloaded => {
                                tracing::info!(cert = %back.files.cert.display(), "TLS certificate reloaded")
                            }
                            Reload::Rejected(e) => {
                                tracing::warn!(error = %e, "changed TLS files not loaded; serving the previous certificate")
                            }
                            Reload::Unreadable(e) => tracing::debug!(error = %e, "TLS files not readable"),
                        }
                        reloader = back;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS reload task failed");
                        return;
                    }
                }
            }
        })
    }

    fn reloader(&self) -> Reloader {
        Reloader { files: self.files.clone(), resolver: self.resolver.clone(), seen: self.digest }
    }
}

/// What one look at the files found.
#[derive(Debug)]
enum Reload {
    Unchanged,
    Reloaded,
    /// Changed but not loadable (a key written before its certificate, a broken file): logged
    /// once, the previous certificate stays until the files change again.
    Rejected(TlsError),
    /// Missing for a moment while the files are replaced: tried again next time.
    Unreadable(TlsError),
}

struct Reloader {
    files: TlsFiles,
    resolver: Arc<ReloadingCert>,
    /// Digest of the files last looked at, loaded or not.
    seen: [u8; 32],
}

impl Reloader {
    fn check(&mut self) -> Reload {
        let snapshot = match Snapshot::read(&self.files) {
            Ok(s) => s,
            Err(e) => return Reload::Unreadable(e),
        };
        if snapshot.digest == self.seen {
            return Reload::Unchanged;
        }
        self.seen = snapshot.digest;
        match snapshot.certified_key(&self.files) {
            Ok(key) => {
                *self.resolver.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
                Reload::Reloaded
            }
            Err(e) => Reload::Rejected(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::connection::{serve, ServerLimits};
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use std::net::SocketAddr;
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
        let mut reloader = tls.reloader();
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
