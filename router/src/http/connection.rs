//! Connections to the router's ports: at most so many open at once, and the timeouts that
//! production proxies apply (a header must arrive in time, an idle keep-alive connection is
//! closed), so that slow or silent clients cannot hold the router's sockets and memory.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::ServiceExt;

/// What one router accepts from its clients. Defaults follow common proxy settings: nginx's
/// 60 s body and 75 s keep-alive timeouts, HAProxy's 10 s `http-request` timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Open connections per listener; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// From a request's first byte to the end of its header.
    pub header_read_timeout: Duration,
    /// Longest silence while a body is being sent.
    pub body_read_timeout: Duration,
    /// A keep-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Longest time a read (a `GET` of the API) may take.
    pub read_timeout: Duration,
    /// Bytes of request bodies held at once, raw, decoded and parsed.
    pub body_budget_bytes: usize,
    /// What one read may cost, estimated before it scans (docs/API.md, "Reads: time range,
    /// partial answers and limits").
    pub query_budget: crate::query::scatter::QueryBudget,
    /// Body bytes (as received) one project may have being parsed or committed through this
    /// router at once (429 past it; docs/API.md, "Overload").
    pub tenant_inflight_bytes: u64,
    /// Reads (`GET` of the API) running at once on this router.
    pub max_concurrent_reads: usize,
    /// Reads waiting for one of those places; more are 503 `overloaded` at once.
    pub read_queue: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(75),
            read_timeout: Duration::from_secs(60),
            body_budget_bytes: 512 << 20,
            query_budget: Default::default(),
            tenant_inflight_bytes: 64 << 20,
            max_concurrent_reads: 64,
            read_queue: 256,
        }
    }
}

/// Serves `app` on `listener` until the task is dropped, over TLS when `tls` is given.
/// `refused` counts connections closed because the cap was reached.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ServerLimits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    refused: impl Fn() + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or a connection reset before accept: wait, then go on.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused();
            drop(stream);
            continue;
        };
        // Replies are small and written once: without TCP_NODELAY a client that delays its
        // ACKs can hold the last segment back ~40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let app = app.clone();
        let limits = limits.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, peer, app, &limits).await,
                // The handshake is part of the header: it must end within the header timeout.
                Some(tls) => match tokio::time::timeout(limits.header_read_timeout, tls.accept(stream)).await {
                    Ok(Ok(stream)) => serve_connection(stream, peer, app, &limits).await,
                    Ok(Err(e)) => tracing::debug!(error = %e, %peer, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake not finished in time; closing"),
                },
            }
            drop(slot);
        });
    }
}

async fn serve_connection<S>(stream: S, peer: SocketAddr, app: axum::Router, limits: &ServerLimits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked { inner: stream, activity: activity.clone() });
    let service_activity = activity.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let guard = service_activity.begin_request();
        let app = app.clone();
        async move {
            let resp = app.oneshot(req.map(axum::body::Body::new)).await;
            drop(guard);
            Ok::<_, Infallible>(resp.unwrap_or_else(|never| match never {}))
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let wake = match activity.deadline(limits) {
            Deadline::Busy => Instant::now() + limits.header_read_timeout.min(limits.idle_timeout),
            Deadline::At(at, _) => at,
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
                return;
            }
            _ = tokio::time::sleep_until(wake) => {}
        }
        match activity.deadline(limits) {
            Deadline::At(at, why) if at <= Instant::now() => match why {
                // Half a header after the timeout: the client is too slow or hostile; cut.
                Expiry::Header => {
                    tracing::debug!(%peer, "request header not received in time; closing");
                    return;
                }
                Expiry::Idle if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                // Still open after the graceful close began: the client holds it; cut.
                Expiry::Idle => return,
            },
            _ => {}
        }
    }
}

/// What the connection is waiting for, and until when.
enum Deadline {
    /// A request is being served: no client timeout applies (reads have their own).
    Busy,
    At(Instant, Expiry),
}

enum Expiry {
    Header,
    Idle,
}

/// A connection's reads and requests, as milliseconds since the process's first connection.
struct Activity {
    in_flight: AtomicUsize,
    /// When the connection last became idle (no request in flight).
    idle_since: AtomicU64,
    /// First byte read while idle: a request's header is arriving. 0: none.
    header_since: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`], never 0 (0 means "not set").
fn now_ms() -> u64 {
    (Instant::now().duration_since(epoch()).as_millis() as u64).max(1)
}

fn at_ms(ms: u64) -> Instant {
    epoch() + Duration::from_millis(ms)
}

impl Activity {
    /// A new connection must send its first header within the header timeout.
    fn new() -> Self {
        let now = now_ms();
        Self { in_flight: AtomicUsize::new(0), idle_since: AtomicU64::new(now), header_since: AtomicU64::new(now) }
    }

    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 && self.header_since.load(Ordering::Relaxed) == 0 {
            self.header_since.store(now_ms(), Ordering::Relaxed);
        }
    }

    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.header_since.store(0, Ordering::Relaxed);
        RequestGuard(self.clone())
    }

    fn deadline(&self, limits: &ServerLimits) -> Deadline {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Deadline::Busy;
        }
        match self.header_since.load(Ordering::Relaxed) {
            0 => Deadline::At(at_ms(self.idle_since.load(Ordering::Relaxed)) + limits.idle_timeout, Expiry::Idle),
            since => Deadline::At(at_ms(since) + limits.header_read_timeout, Expiry::Header),
        }
    }
}

struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle_since.store(now_ms(), Ordering::Relaxed);
        }
    }
}

/// A stream that tells its [`Activity`] when bytes arrive.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn start(limits: ServerLimits) -> (SocketAddr, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let refused = Arc::new(AtomicUsize::new(0));
        let count = refused.clone();
        let task = tokio::spawn(serve(listener, app, limits, None, move || {
            count.fetch_add(1, Ordering::Relaxed);
        }));
        (addr, refused, task)
    }

    fn quick() -> ServerLimits {
        ServerLimits {
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(600),
            ..ServerLimits::default()
        }
    }

    /// Reads until the server closes the connection; returns what it sent and how long it took.
    async fn until_closed(stream: &mut TcpStream) -> (String, Duration) {
        let started = Instant::now();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await.expect("closed");
        (String::from_utf8_lossy(&out).into_owned(), started.elapsed())
    }

    #[tokio::test]
    async fn a_half_sent_header_is_cut_off_after_the_header_timeout() {
        let (addr, _, _task) = start(quick()).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let (sent, took) = until_closed(&mut stream).await;
        assert_eq!(sent, "", "no answer to half a request");
        assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(5), "closed after {took:?}");
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
        let (addr, _, _task) = start(quick()).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut first = [0u8; 256];
        let n = stream.read(&mut first).await.unwrap();
        assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
        // Idle longer than the header timeout: the idle timeout, not the header's, applies.
        let (_, took) = until_closed(&mut stream).await;
        assert!(took >= Duration::from_millis(550) && took < Duration::from_secs(5), "closed after {took:?}");
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_and_counted() {
        let (addr, refused, _task) = start(ServerLimits { max_connections: 2, ..ServerLimits::default() }).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
            let mut buf = [0u8; 256];
            assert!(s.read(&mut buf).await.unwrap() > 0);
            held.push(s);
        }
        let mut third = TcpStream::connect(addr).await.unwrap();
        let _ = third.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let (sent, _) = until_closed(&mut third).await;
        assert_eq!(sent, "");
        assert_eq!(refused.load(Ordering::Relaxed), 1);
        // A slot frees when a connection closes.
        drop(held.pop());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
            let (sent, _) = until_closed(&mut s).await;
            if sent.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(Instant::now() < deadline, "no slot came free");
            tokio::task::yield_now().await;
        }
    }
}
