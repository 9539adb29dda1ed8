//! Client side of internal gRPC: one lazily connected channel per peer address (over mutual
//! TLS when configured, `crate::internal_tls`), and the interceptor that attaches the cluster
//! secret to every call. A node running in the caller's process (`sextant dev`) is called
//! without a connection, and its writes without encoding them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::http;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};
use tower::Service;

use crate::internal_tls::InternalTls;
use crate::raft_client::RaftClient;
use crate::storage_client::StorageClient;
use crate::storage_server::Storage;
use crate::{CLUSTER_SECRET_HEADER, RELAY_HEADER};

/// Largest internal message: a Raft append of many sub-batches or a snapshot chunk.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

#[derive(Clone)]
pub struct SecretInterceptor {
    secret: AsciiMetadataValue,
    /// Asks the called replica to relay the call to its group's leader (`RELAY_HEADER`).
    relay: bool,
}

impl tonic::service::Interceptor for SecretInterceptor {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        req.metadata_mut().insert(CLUSTER_SECRET_HEADER, self.secret.clone());
        if self.relay {
            req.metadata_mut().insert(RELAY_HEADER, AsciiMetadataValue::from_static("1"));
        }
        Ok(req)
    }
}

pub type Authed = InterceptedService<Link, SecretInterceptor>;

/// How calls reach a node: a connection, or its services called in this process, which skips
/// HTTP/2 and the loopback socket and still passes the node's checks.
#[derive(Clone)]
pub enum Link {
    Net(Channel),
    InProcess(Routes),
}

impl Service<http::Request<Body>> for Link {
    type Response = http::Response<Body>;
    type Error = tower::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Link::Net(c) => c.poll_ready(cx).map_err(Into::into),
            Link::InProcess(r) => Service::<http::Request<Body>>::poll_ready(r, cx).map_err(never),
        }
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self {
            Link::Net(c) => {
                let call = c.call(req);
                Box::pin(async move { call.await.map_err(Into::into) })
            }
            Link::InProcess(r) => {
                let call = r.call(req);
                Box::pin(async move { call.await.map_err(never) })
            }
        }
    }
}

fn never(e: Infallible) -> tower::BoxError {
    match e {}
}

/// A node's storage service called as a function: no encoding, no HTTP/2, and no cluster
/// secret, which guards the network and not the process.
pub type LocalStorage = Arc<dyn Storage>;

/// A node running in the caller's process (`sextant dev`).
#[derive(Clone)]
pub struct InProcessNode {
    pub addr: String,
    /// Its gRPC services, for calls through a [`Link::InProcess`].
    pub services: Routes,
    /// Its storage service, for the ingest path's writes: they carry the payloads, which
    /// encoding the request would copy twice.
    pub storage: LocalStorage,
}

impl std::fmt::Debug for InProcessNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessNode").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// Channels to peers by address, shared by every caller in the process.
pub struct Channels {
    secret: SecretInterceptor,
    channels: Mutex<HashMap<String, Channel>>,
    /// Mutual TLS to every peer; `None`: plain HTTP/2.
    tls: Option<InternalTls>,
    /// A node in this process.
    in_process: Option<InProcessNode>,
}

/// Fewest bytes a cluster secret may have, as for the JWT key and the admin token.
pub const MIN_CLUSTER_SECRET_BYTES: usize = 32;

/// Refuses a cluster secret too short to authenticate anything (an empty one would let a
/// request without the header through) or one a gRPC header cannot carry.
pub fn check_cluster_secret(secret: &str) -> Result<(), String> {
    if secret.len() < MIN_CLUSTER_SECRET_BYTES {
        return Err(format!(
            "the cluster secret (SEXTANT_CLUSTER_SECRET) must have at least {MIN_CLUSTER_SECRET_BYTES} bytes, \
             this one has {}; generate one with `openssl rand -hex 32`",
            secret.len()
        ));
    }
    secret
        .parse::<AsciiMetadataValue>()
        .map(|_| ())
        .map_err(|_| "the cluster secret (SEXTANT_CLUSTER_SECRET) must be visible ASCII".to_string())
}

impl Channels {
    pub fn new(cluster_secret: &str) -> Result<Self, String> {
        check_cluster_secret(cluster_secret)?;
        let secret = cluster_secret.parse().map_err(|_| "the cluster secret must be visible ASCII".to_string())?;
        Ok(Self {
            secret: SecretInterceptor { secret, relay: false },
            channels: Mutex::new(HashMap::new()),
            tls: None,
            in_process: None,
        })
    }

    /// Calls to `node.addr` go to that node, running in this process.
    pub fn with_in_process(mut self, node: InProcessNode) -> Self {
        self.in_process = Some(node);
        self
    }

    /// Whether a node runs in this process.
    pub fn has_in_process(&self) -> bool {
        self.in_process.is_some()
    }

    /// The storage service of the node at `addr`, when that node runs in this process.
    pub fn local_storage(&self, addr: &str) -> Option<LocalStorage> {
        self.in_process.as_ref().filter(|node| node.addr == addr).map(|node| node.storage.clone())
    }

    /// Dials every peer over mutual TLS with `tls`, or plain HTTP/2 with `None` or while its
    /// mode still dials plain text.
    pub fn with_tls(mut self, tls: Option<InternalTls>) -> Self {
        self.tls = tls.filter(|t| t.mode().dials_tls());
        self
    }

    fn link(&self, addr: &str) -> Result<Link, Status> {
        match &self.in_process {
            Some(node) if node.addr == addr => Ok(Link::InProcess(node.services.clone())),
            _ => self.channel(addr).map(Link::Net),
        }
    }

    fn channel(&self, addr: &str) -> Result<Channel, Status> {
        let mut map = self.channels.lock().unwrap();
        if let Some(c) = map.get(addr) {
            return Ok(c.clone());
        }
        let uri = if addr.starts_with("http") { addr.to_owned() } else { format!("http://{addr}") };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| Status::invalid_argument(format!("bad peer address {addr}: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5));
        let channel = match &self.tls {
            Some(tls) => endpoint.connect_with_connector_lazy(tls.connector()),
            None => endpoint.connect_lazy(),
        };
        map.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }

    /// Drops a cached channel after a transport error so the next call reconnects.
    pub fn forget(&self, addr: &str) {
        self.channels.lock().unwrap().remove(addr);
    }

    pub fn raft(&self, addr: &str) -> Result<RaftClient<Authed>, Status> {
        Ok(RaftClient::with_interceptor(self.link(addr)?, self.secret.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    pub fn storage(&self, addr: &str) -> Result<StorageClient<Authed>, Status> {
        self.storage_with(addr, false)
    }

    /// Storage calls to the replica at `addr` that it relays to its group's leader.
    pub fn storage_relayed(&self, addr: &str) -> Result<StorageClient<Authed>, Status> {
        self.storage_with(addr, true)
    }

    fn storage_with(&self, addr: &str, relay: bool) -> Result<StorageClient<Authed>, Status> {
        let interceptor = SecretInterceptor { relay, ..self.secret.clone() };
        Ok(StorageClient::with_interceptor(self.link(addr)?, interceptor)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_secrets_shorter_than_32_bytes_are_refused() {
        for short in ["", "x", &"a".repeat(31)] {
            let err = check_cluster_secret(short).unwrap_err();
            assert!(err.contains("at least 32 bytes"), "{err}");
            assert!(Channels::new(short).is_err(), "a channel set with a {}-byte secret", short.len());
        }
        assert!(check_cluster_secret(&"a".repeat(32)).is_ok());
        assert!(Channels::new(&"a".repeat(32)).is_ok());
        assert!(check_cluster_secret(&format!("{}\n", "a".repeat(32))).is_err(), "a control character");
    }
}
