//! TLS files shared by the router's public ports and internal gRPC: PEM files read with a size
//! bound, and [`Reloading`], which builds something from them (a certificate to serve, a whole
//! mutual-TLS configuration) and builds it again when they change, as a renewed Kubernetes
//! Secret does, keeping the last good one while the new files do not load. Crypto is ring's.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;

/// Certificate files larger than this are refused (a chain is a few KiB).
pub const MAX_PEM_BYTES: u64 = 1 << 20;

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
    #[error("TLS CA {path}: {detail}")]
    BadCa { path: PathBuf, detail: String },
}

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// One file's bytes, with its path for error messages.
pub struct Pem {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

impl Pem {
    pub fn read(path: &Path) -> Result<Self, TlsError> {
        use std::io::Read;
        let file = std::fs::File::open(path).map_err(|source| TlsError::Read { path: path.into(), source })?;
        let mut bytes = Vec::new();
        file.take(MAX_PEM_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| TlsError::Read { path: path.into(), source })?;
        if bytes.len() as u64 > MAX_PEM_BYTES {
            return Err(TlsError::TooLarge { path: path.into() });
        }
        Ok(Self { path: path.into(), bytes })
    }

    /// Every certificate in the file, in order; at least one.
    pub fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        let certs = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::BadCertificate { path: self.path.clone(), detail: e.to_string() })?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate { path: self.path.clone() });
        }
        Ok(certs)
    }
}

/// A certificate chain (leaf first) and its private key (PKCS#8, PKCS#1 or SEC1), checked to
/// belong together.
pub fn certified_key(cert: &Pem, key: &Pem) -> Result<CertifiedKey, TlsError> {
    let chain = cert.certificates()?;
    let der = PrivateKeyDer::from_pem_slice(&key.bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey { path: key.path.clone() },
        e => TlsError::BadKey { path: key.path.clone(), detail: e.to_string() },
    })?;
    let signer = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsError::BadKey { path: key.path.clone(), detail: e.to_string() })?;
    let certified = CertifiedKey::new(chain, signer);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(_)) => {
            Err(TlsError::Mismatch { cert: cert.path.clone(), key: key.path.clone() })
        }
        Err(e) => Err(TlsError::BadCertificate { path: cert.path.clone(), detail: e.to_string() }),
    }
}

/// The CA certificates of a bundle (several during a CA rotation), as trust anchors.
pub fn roots(ca: &Pem) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in ca.certificates()? {
        roots.add(cert).map_err(|e| TlsError::BadCa { path: ca.path.clone(), detail: e.to_string() })?;
    }
    Ok(roots)
}

/// What one look at the files found.
#[derive(Debug)]
pub enum Reload {
    Unchanged,
    Reloaded,
    /// Changed but not loadable (a key written before its certificate, a broken file): logged
    /// once, the previous value stays until the files change again.
    Rejected(TlsError),
    /// Missing for a moment while the files are replaced: tried again next time.
    Unreadable(TlsError),
}

type Build<T> = dyn Fn(&[Pem]) -> Result<T, TlsError> + Send + Sync;

struct Shared<T> {
    paths: Vec<PathBuf>,
    build: Box<Build<T>>,
    current: RwLock<Arc<T>>,
    /// The files' bytes last looked at, loaded or not.
    seen: Mutex<Vec<Vec<u8>>>,
}

/// A value built from files, rebuilt when they change (see [`Reloading::spawn_reload`]).
pub struct Reloading<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Reloading<T> {
    fn clone(&self) -> Self {
        Self { shared: self.shared.clone() }
    }
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading").field("paths", &self.shared.paths).finish_non_exhaustive()
    }
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<Pem>, TlsError> {
    paths.iter().map(|p| Pem::read(p)).collect()
}

impl<T: Send + Sync + 'static> Reloading<T> {
    /// Reads the files now and builds from them (`build` gets them in the order of `paths`): a
    /// missing, malformed or mismatched file is an error at startup.
    pub fn load(
        paths: Vec<PathBuf>,
        build: impl Fn(&[Pem]) -> Result<T, TlsError> + Send + Sync + 'static,
    ) -> Result<Self, TlsError> {
        let pems = read_all(&paths)?;
        let value = build(&pems)?;
        let seen = pems.into_iter().map(|p| p.bytes).collect();
        Ok(Self {
            shared: Arc::new(Shared {
                paths,
                build: Box::new(build),
                current: RwLock::new(Arc::new(value)),
                seen: Mutex::new(seen),
            }),
        })
    }

    pub fn current(&self) -> Arc<T> {
        self.shared.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the files and, when they changed, builds from them and serves the result.
    pub fn check(&self) -> Reload {
        let pems = match read_all(&self.shared.paths) {
            Ok(p) => p,
            Err(e) => return Reload::Unreadable(e),
        };
        {
            let mut seen = self.shared.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.iter().eq(pems.iter().map(|p| &p.bytes)) {
                return Reload::Unchanged;
            }
            *seen = pems.iter().map(|p| p.bytes.clone()).collect();
        }
        match (self.shared.build)(&pems) {
            Ok(value) => {
                *self.shared.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(value);
                Reload::Reloaded
            }
            Err(e) => Reload::Rejected(e),
        }
    }

    /// Checks the files every `every`; `what` names them in the log.
    pub fn spawn_reload(&self, every: Duration, what: &'static str) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let checker = me.clone();
                match tokio::task::spawn_blocking(move || checker.check()).await {
                    Ok(Reload::Unchanged) => {}
                    Ok(Reload::Reloaded) => tracing::info!(files = ?me.shared.paths, "{what} reloaded"),
                    Ok(Reload::Rejected(e)) => {
                        tracing::warn!(error = %e, "changed {what} not loaded; keeping the previous one")
                    }
                    Ok(Reload::Unreadable(e)) => tracing::debug!(error = %e, "{what} not readable"),
                    Err(e) => {
                        tracing::warn!(error = %e, "{what} reload task failed");
                        return;
                    }
                }
            }
        })
    }
}
