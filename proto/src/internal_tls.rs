//! Mutual TLS on internal gRPC (router -> node, node <-> node): every side presents a
//! certificate the cluster CA signed and verifies the peer's against that CA; a client also
//! checks that the node's certificate names the host it dialled, and a server what the
//! client's certificate lets it call ([`PeerRole`], [`check_role`]). TLS 1.3 only, ALPN `h2`.
//! The certificate, key and CA are read again when they change ([`crate::tls::Reloading`]):
//! new connections use the new ones, open ones keep theirs. The cluster secret is still
//! required on every call.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::client::ResolvesClientCert;
use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ServerConfig, SignatureScheme};
use sextant_model::peer::PeerRole;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::http::Uri;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::tls::{certified_key, provider, roots, Pem, Reloading, TlsError};

/// A handshake not done by then is dropped (a peer that connects and sends nothing).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once on one server; more connections wait to be accepted.
const MAX_HANDSHAKES: usize = 256;
/// The first byte of a TLS handshake record (a ClientHello); plain HTTP/2 starts with `P`.
const TLS_HANDSHAKE_RECORD: u8 = 22;

/// How far a process has gone to mutual TLS. A running cluster switches in three rolling
/// restarts, so that every pair of processes always shares a way to talk: all to `accept`,
/// then all to `dial`, then all to `require` (and back the same way to turn it off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// Serves mutual TLS and plain text; dials plain text.
    Accept,
    /// Serves mutual TLS and plain text; dials mutual TLS.
    Dial,
    /// Serves and dials mutual TLS only.
    #[default]
    Require,
}

impl TlsMode {
    pub const ALL: [TlsMode; 3] = [TlsMode::Accept, TlsMode::Dial, TlsMode::Require];

    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Accept => "accept",
            TlsMode::Dial => "dial",
            TlsMode::Require => "require",
        }
    }

    fn serves_plain(self) -> bool {
        self != TlsMode::Require
    }

    pub fn dials_tls(self) -> bool {
        self != TlsMode::Accept
    }
}

impl std::str::FromStr for TlsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| format!("{s:?} is not accept, dial or require"))
    }
}

/// The files of one component's identity, as a `kubernetes.io/tls` Secret with a `ca.crt`
/// holds them, and how far the process has gone to mutual TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InternalTlsFiles {
    /// PEM: this component's certificate first, then any intermediates.
    pub cert: PathBuf,
    /// PEM: its private key.
    pub key: PathBuf,
    /// PEM: the CA certificate(s) peers' certificates must chain to.
    pub ca: PathBuf,
    pub reload_every: Duration,
    pub mode: TlsMode,
}

impl InternalTlsFiles {
    /// `tls.crt`, `tls.key` and `ca.crt` in `dir`.
    pub fn in_dir(dir: &Path, reload_every: Duration) -> Self {
        let (cert, key, ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
        Self { cert, key, ca, reload_every, mode: TlsMode::Require }
    }
}

/// The one certificate this side presents, as server and as client.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl ResolvesClientCert for Fixed {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

struct Configs {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

fn build(pems: &[Pem]) -> Result<Configs, TlsError> {
    let [cert, key, ca] = pems else { unreachable!("three files are read") };
    let identity = Arc::new(certified_key(cert, key)?);
    let roots = Arc::new(roots(ca)?);
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| TlsError::BadCa { path: ca.path.clone(), detail: e.to_string() })?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("ring supports TLS 1.3")
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(Fixed(identity.clone())));
    server.alpn_protocols = vec![b"h2".to_vec()];
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("ring supports TLS 1.3")
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(Fixed(identity)));
    client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Configs { server: Arc::new(server), client: Arc::new(client) })
}

/// This component's internal TLS identity and trust, kept fresh from its files.
#[derive(Clone)]
pub struct InternalTls {
    configs: Reloading<Configs>,
    reload_every: Duration,
    mode: TlsMode,
}

impl std::fmt::Debug for InternalTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalTls").field("files", &self.configs).finish()
    }
}

impl InternalTls {
    /// Reads the files now: a missing, malformed or mismatched file is an error at startup.
    pub fn load(files: &InternalTlsFiles) -> Result<Self, TlsError> {
        let paths = vec![files.cert.clone(), files.key.clone(), files.ca.clone()];
        Ok(Self { configs: Reloading::load(paths, build)?, reload_every: files.reload_every, mode: files.mode })
    }

    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Checks the files every `reload_every` (see [`Reloading::spawn_reload`]).
    pub fn spawn_reload(&self) -> tokio::task::JoinHandle<()> {
        self.configs.spawn_reload(self.reload_every, "internal TLS certificate")
    }

    /// A look at the files now, as [`Self::spawn_reload`] takes periodically.
    pub fn check(&self) -> crate::tls::Reload {
        self.configs.check()
    }

    /// Connections to `listener` that completed a mutual-TLS handshake, for
    /// `Server::serve_with_incoming`, and the accept loop that feeds them (to be polled as
    /// long as the server runs). A peer whose certificate the CA did not sign is disconnected
    /// during the handshake and never reaches the server; so is a peer that is not TLS, unless
    /// the mode still serves plain text (told apart by the first byte: a TLS record's is 22).
    pub fn incoming(
        &self,
        listener: TcpListener,
    ) -> (tokio_stream::wrappers::ReceiverStream<Result<ServerConn, std::io::Error>>, impl Future<Output = ()>) {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let configs = self.configs.clone();
        let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let mode = self.mode;
        let accept = async move {
            loop {
                let Ok(permit) = handshakes.clone().acquire_owned().await else { return };
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, say: wait rather than spin.
                        tracing::warn!(error = %e, "internal gRPC accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                // As for plain connections: no Nagle delay on small replies.
                let _ = tcp.set_nodelay(true);
                let acceptor = tokio_rustls::TlsAcceptor::from(configs.current().server.clone());
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    if mode.serves_plain() {
                        let mut first = [0u8; 1];
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await {
                            Ok(Ok(1)) if first[0] != TLS_HANDSHAKE_RECORD => {
                                let peer = InternalPeer { tcp: tcp.connect_info(), tls: false, role: None };
                                let _ = tx.send(Ok(ServerConn { stream: Stream::Plain(tcp), peer })).await;
                                return;
                            }
                            Ok(Ok(1)) => {}
                            _ => return,
                        }
                    }
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let (tcp, role) = (stream.get_ref().0.connect_info(), role_of(&stream));
                            let peer = InternalPeer { tcp, tls: true, role };
                            let stream = Stream::Tls(Box::new(stream));
                            let _ = tx.send(Ok(ServerConn { stream, peer })).await;
                        }
                        Ok(Err(e)) => tracing::info!(%peer, error = %e, "internal TLS handshake refused"),
                        Err(_) => tracing::info!(%peer, "internal TLS handshake timed out"),
                    }
                });
            }
        };
        (tokio_stream::wrappers::ReceiverStream::new(rx), accept)
    }

    /// Dials peers for `Endpoint::connect_with_connector_lazy`.
    pub fn connector(&self) -> Connector {
        Connector { configs: self.configs.clone() }
    }
}

/// Who is at the other end of a connection past its handshake; each request carries it in its
/// extensions.
#[derive(Clone, Debug)]
pub struct InternalPeer {
    pub tcp: TcpConnectInfo,
    /// False for plain text, served while the mode allows it.
    pub tls: bool,
    /// The role the client's certificate names, if any.
    pub role: Option<PeerRole>,
}

fn role_of(stream: &tokio_rustls::server::TlsStream<TcpStream>) -> Option<PeerRole> {
    let der = stream.get_ref().1.peer_certificates()?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|name| match name {
        x509_parser::extensions::GeneralName::URI(uri) => PeerRole::from_uri(uri),
        _ => None,
    })
}

/// Refuses a call made over mutual TLS by a client whose certificate names none of `allowed`
/// (a router calling Raft, or a certificate of another workload the same CA signed). Plain-text
/// connections (internal TLS off, or not yet required) pass: the cluster secret guards them.
pub fn check_role(extensions: &tonic::Extensions, allowed: &[PeerRole]) -> Result<(), tonic::Status> {
    match extensions.get::<InternalPeer>() {
        Some(peer) if peer.tls && !peer.role.is_some_and(|r| allowed.contains(&r)) => {
            Err(tonic::Status::permission_denied(format!(
                "the client certificate's role ({:?}) may not call this service",
                peer.role
            )))
        }
        _ => Ok(()),
    }
}

/// A server-side connection past its TLS handshake, or a plain one the mode still serves.
pub struct ServerConn {
    stream: Stream,
    peer: InternalPeer,
}

enum Stream {
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    Plain(TcpStream),
}

impl Connected for ServerConn {
    type ConnectInfo = InternalPeer;

    fn connect_info(&self) -> InternalPeer {
        self.peer.clone()
    }
}

macro_rules! on_stream {
    ($self:ident, $s:ident => $e:expr) => {
        match &mut $self.stream {
            Stream::Tls($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
            Stream::Plain($s) => {
                let $s = Pin::new($s);
                $e
            }
        }
    };
}

impl AsyncRead for ServerConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for ServerConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        on_stream!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self, s => s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        on_stream!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Plain(s) => s.is_write_vectored(),
        }
    }
}

/// Client side: TCP to the URI's host and port, then a TLS handshake that verifies the node's
/// certificate against the CA and the host name (or IP address) dialled.
#[derive(Clone)]
pub struct Connector {
    configs: Reloading<Configs>,
}

type Dialled = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

impl tower::Service<Uri> for Connector {
    type Response = Dialled;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Dialled>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = self.configs.current().client.clone();
        Box::pin(async move {
            let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what}: {uri}"));
            let host = uri.host().ok_or_else(|| invalid("no host in the peer address"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().ok_or_else(|| invalid("no port in the peer address"))?;
            let name = ServerName::try_from(host.to_owned()).map_err(|_| invalid("not a DNS name or IP address"))?;
            let tcp = TcpStream::connect((host, port)).await?;
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(TokioIo::new(tls))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Channels;
    use crate::raft_server::{Raft, RaftServer};
    use crate::tls::Reload;
    use crate::{RaftReply, RaftRequest};
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};
    use tonic::{Request, Response, Status};

    const SECRET: &str = "internal-tls-unit-test-secret-0123456789";

    struct Ca(CertifiedIssuer<'static, KeyPair>);

    impl Ca {
        fn new(name: &str) -> Ca {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
        }

        /// `tls.crt`, `tls.key` and `ca.crt` (of `trust`) for 127.0.0.1, written into `dir`.
        fn issue(&self, dir: &Path, trust: &Ca) -> InternalTlsFiles {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.subject_alt_names = vec![SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())];
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.0).unwrap();
            std::fs::create_dir_all(dir).unwrap();
            let files = InternalTlsFiles::in_dir(dir, Duration::from_millis(20));
            for (path, pem) in
                [(&files.ca, trust.0.pem()), (&files.key, key.serialize_pem()), (&files.cert, cert.pem())]
            {
                let tmp = path.with_extension("new");
                std::fs::write(&tmp, pem).unwrap();
                std::fs::rename(&tmp, path).unwrap();
            }
            files
        }
    }

    /// Answers every Raft call with the group it was asked about.
    struct Echo;

    #[tonic::async_trait]
    impl Raft for Echo {
        async fn append_entries(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
            Ok(Response::new(RaftReply { body: req.into_inner().group.to_le_bytes().to_vec().into() }))
        }
        async fn vote(&self, _: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
            Err(Status::unimplemented("vote"))
        }
        async fn install_snapshot(&self, _: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
            Err(Status::unimplemented("install_snapshot"))
        }
    }

    async fn serve(tls: &InternalTls) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (incoming, accept) = tls.incoming(listener);
        tokio::spawn(async move {
            let server = tonic::transport::Server::builder().add_service(RaftServer::new(Echo));
            tokio::select! {
                _ = server.serve_with_incoming(incoming) => {}
                () = accept => {}
            }
        });
        addr
    }

    async fn call(addr: &str, tls: Option<InternalTls>) -> Result<u64, Status> {
        let channels = Channels::new(SECRET).unwrap().with_tls(tls);
        let mut client = channels.raft(addr)?;
        let call = client.append_entries(RaftRequest { group: 7, body: Default::default() });
        let reply = tokio::time::timeout(Duration::from_secs(10), call).await.expect("an answer or an error")?;
        Ok(u64::from_le_bytes(reply.into_inner().body[..].try_into().unwrap()))
    }

    #[tokio::test]
    async fn peers_of_the_cluster_ca_talk_and_everyone_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("cluster");
        let server = InternalTls::load(&ca.issue(&dir.path().join("server"), &ca)).unwrap();
        let addr = serve(&server).await;
        let member = InternalTls::load(&ca.issue(&dir.path().join("member"), &ca)).unwrap();
        assert_eq!(call(&addr, Some(member)).await.unwrap(), 7);

        assert!(call(&addr, None).await.is_err(), "a plain-text client was served");
        // Signed by another CA, trusting the cluster's: the server refuses it.
        let rogue = Ca::new("rogue");
        let stranger = InternalTls::load(&rogue.issue(&dir.path().join("stranger"), &ca)).unwrap();
        assert!(call(&addr, Some(stranger)).await.is_err(), "a client of another CA was served");
        // Trusting another CA: the client refuses the server.
        let misled = InternalTls::load(&ca.issue(&dir.path().join("misled"), &rogue)).unwrap();
        assert!(call(&addr, Some(misled)).await.is_err(), "a server of another CA was trusted");
    }

    /// While a cluster switches, a server in `accept` or `dial` serves plain text and mutual
    /// TLS on one port (a stranger's certificate is still refused); a client dials TLS only
    /// from `dial` on.
    #[tokio::test]
    async fn the_switch_modes_serve_both_and_dial_as_named() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("cluster");
        let rogue = Ca::new("rogue");
        for mode in [TlsMode::Accept, TlsMode::Dial] {
            let server = InternalTls::load(&InternalTlsFiles { mode, ..ca.issue(&dir.path().join("s"), &ca) }).unwrap();
            let addr = serve(&server).await;
            assert_eq!(call(&addr, None).await.unwrap(), 7, "{mode:?}: plain text");
            let member = InternalTls::load(&ca.issue(&dir.path().join("m"), &ca)).unwrap();
            assert_eq!(call(&addr, Some(member)).await.unwrap(), 7, "{mode:?}: mutual TLS");
            let stranger = InternalTls::load(&rogue.issue(&dir.path().join("x"), &ca)).unwrap();
            assert!(call(&addr, Some(stranger)).await.is_err(), "{mode:?}: a client of another CA was served");
        }
        // A client in `accept` dials plain text: a server that requires TLS refuses it.
        let server = InternalTls::load(&ca.issue(&dir.path().join("r"), &ca)).unwrap();
        let addr = serve(&server).await;
        let accepting =
            InternalTls::load(&InternalTlsFiles { mode: TlsMode::Accept, ..ca.issue(&dir.path().join("a"), &ca) })
                .unwrap();
        assert!(call(&addr, Some(accepting)).await.is_err(), "an accept-mode client dialled TLS");
        let dialling =
            InternalTls::load(&InternalTlsFiles { mode: TlsMode::Dial, ..ca.issue(&dir.path().join("d"), &ca) })
                .unwrap();
        assert_eq!(call(&addr, Some(dialling)).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_renewed_certificate_and_ca_are_used_from_the_next_connection() {
        let dir = tempfile::tempdir().unwrap();
        let old = Ca::new("old");
        let files = old.issue(&dir.path().join("server"), &old);
        let server = InternalTls::load(&files).unwrap();
        let addr = serve(&server).await;
        let old_member = InternalTls::load(&old.issue(&dir.path().join("old"), &old)).unwrap();
        assert_eq!(call(&addr, Some(old_member.clone())).await.unwrap(), 7);

        // A new CA and a certificate of it, in place of the old ones.
        let new = Ca::new("new");
        new.issue(&dir.path().join("server"), &new);
        assert!(matches!(server.check(), Reload::Reloaded));
        assert!(matches!(server.check(), Reload::Unchanged));
        let new_member = InternalTls::load(&new.issue(&dir.path().join("new"), &new)).unwrap();
        assert_eq!(call(&addr, Some(new_member)).await.unwrap(), 7);
        assert!(call(&addr, Some(old_member)).await.is_err(), "the old CA is still trusted");
    }

    #[tokio::test]
    async fn a_broken_renewal_keeps_the_previous_files_until_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("cluster");
        let files = ca.issue(&dir.path().join("server"), &ca);
        let server = InternalTls::load(&files).unwrap();
        let addr = serve(&server).await;
        let member = InternalTls::load(&ca.issue(&dir.path().join("member"), &ca)).unwrap();
        // The key of another certificate: refused once, the served identity stays.
        let other = ca.issue(&dir.path().join("other"), &ca);
        std::fs::copy(&other.key, &files.key).unwrap();
        assert!(matches!(server.check(), Reload::Rejected(TlsError::Mismatch { .. })));
        assert!(matches!(server.check(), Reload::Unchanged));
        assert_eq!(call(&addr, Some(member.clone())).await.unwrap(), 7);
        std::fs::remove_file(&files.ca).unwrap();
        assert!(matches!(server.check(), Reload::Unreadable(TlsError::Read { .. })));
        ca.issue(&dir.path().join("server"), &ca);
        assert!(matches!(server.check(), Reload::Reloaded));
        assert_eq!(call(&addr, Some(member)).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn spawned_reload_picks_up_a_renewal() {
        let dir = tempfile::tempdir().unwrap();
        let old = Ca::new("old");
        let server = InternalTls::load(&old.issue(&dir.path().join("server"), &old)).unwrap();
        let _reload = server.spawn_reload();
        let addr = serve(&server).await;
        let new = Ca::new("new");
        new.issue(&dir.path().join("server"), &new);
        let new_member = InternalTls::load(&new.issue(&dir.path().join("new"), &new)).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while call(&addr, Some(new_member.clone())).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "the renewed files were never used");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
