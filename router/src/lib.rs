//! The Sextant router: stateless HTTP front end that authenticates, validates, partitions
//! and forwards to storage shard leaders, then merges what they answer.
//!
//! The modules in the order a request walks them:
//! - [`http`]: the edge. Connections, the route tables and their middleware, request bodies,
//!   query strings, lists, and the one place errors become responses.
//! - [`identity`]: who is asking. Credentials, sessions and rate limits; the endpoints of
//!   accounts, members, projects and API keys.
//! - [`ingest`]: writes. Validate, partition rows into one sub-batch per shard, commit all of
//!   them or none.
//! - [`query`]: reads. Parameters, a plan scattered to every shard, the partials merged into
//!   one answer.
//! - [`cluster`]: the storage cluster as the router sees it. Leaders, calls that follow them,
//!   and the cached meta view.
//! - [`admin`]: the operator's API, on the internal port.

pub mod admin;
pub mod alerts;
pub mod billing;
pub mod cluster;
pub mod dashboard;
pub mod http;
pub mod identity;
pub mod ingest;
pub mod query;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use sextant_model::meta::{default_plans, MetaCommand, MetaCommandResult};
use sextant_model::Clock;

use crate::http::error::ApiError;

pub use cluster::{Cluster, InProcessNode};

#[derive(Clone, Debug)]
pub struct RouterConfig {
    pub listen: SocketAddr,
    /// `/metrics` and `/admin/v1` (and the probes): an address only the cluster reaches.
    pub internal_listen: SocketAddr,
    /// OTLP/gRPC (docs/API.md, "OTLP"); `None` serves no OTLP/gRPC.
    pub otlp_grpc_listen: Option<SocketAddr>,
    /// gRPC addresses of storage nodes to learn the topology from.
    pub nodes: Vec<String>,
    pub cluster_secret: String,
    /// HS256 key of access tokens; identical on every router.
    pub jwt_secret: Vec<u8>,
    pub dashboard_origins: Vec<String>,
    /// `Secure` on the refresh cookie; off only where the API is served over plain HTTP to
    /// a browser on the same machine (dev mode).
    pub secure_cookies: bool,
    pub rate_limits: identity::rate_limit::RateLimitConfig,
    /// Proxies in front of the routers that append to `X-Forwarded-For` (0: clients connect
    /// directly); decides which address `/auth/*` limits count.
    pub trusted_proxy_hops: usize,
    /// Enables `/admin/v1` for holders of this token (the operator).
    pub admin_token: Option<admin::AdminToken>,
    /// Connection cap, client timeouts and the request-body budget.
    pub server: http::connection::ServerLimits,
    /// Where time is read: token expiry, rate limits, default query ranges, heartbeats.
    pub clock: Clock,
    /// The payment provider (docs/API.md, "Billing providers").
    pub billing: billing::BillingConfig,
    /// Where webhooks may be sent (docs/API.md, "Webhooks").
    pub webhook_targets: webhooks::guard::TargetPolicy,
    /// How often alert rules are evaluated (by the router holding the evaluator lease).
    pub alert_interval: Duration,
    /// TLS on `listen` and `otlp_grpc_listen` (the internal port stays plain); `None`: plain.
    pub tls: Option<http::tls::TlsFiles>,
    /// Mutual TLS on calls to storage nodes; `None`: plain HTTP/2.
    pub internal_tls: Option<sextant_proto::internal_tls::InternalTlsFiles>,
    /// A storage node running in this process (`sextant dev`), called without a connection.
    pub in_process_node: Option<InProcessNode>,
}

pub struct AppState {
    pub config: RouterConfig,
    pub cluster: Arc<Cluster>,
    pub jwt: identity::auth::Jwt,
    pub metrics: http::metrics::RouterMetrics,
    pub registry: Registry,
    pub limits: identity::rate_limit::RateLimits,
    /// Random per process: this router's identity in meta heartbeats.
    pub router_id: String,
    /// Request-body bytes held at once, and body parsing off the async workers.
    pub bodies: http::body::Budget,
    pub clock: Clock,
    pub billing: billing::Billing,
    /// Orgs already warned this month of a soft quota crossed.
    pub soft_quota_warnings: ingest::quota::SoftWarnings,
    /// Webhook delivery: the guarded HTTP client and what was published.
    pub webhooks: webhooks::Webhooks,
    /// What this router accepted that its cached usage does not count yet.
    pub quota_pending: Arc<ingest::quota::Pending>,
    /// Each project's ingest bytes being parsed or committed, within its share.
    pub ingest_shares: ingest::admission::TenantShares,
    /// Reads running and waiting at once (`http::overload`).
    pub reads: http::overload::ReadSlots,
}

impl AppState {
    /// This router's view of meta, or 503 `unavailable` before it first loaded.
    pub fn meta(&self) -> Result<Arc<cluster::MetaCache>, ApiError> {
        self.cluster.meta_cache().ok_or_else(|| ApiError::Unavailable("metadata is not loaded yet".into()))
    }
}

pub struct RunningRouter {
    pub addr: SocketAddr,
    pub internal_addr: SocketAddr,
    /// Where OTLP/gRPC is served, if it is.
    pub otlp_grpc_addr: Option<SocketAddr>,
    pub state: Arc<AppState>,
    server: tokio::task::JoinHandle<()>,
    internal: tokio::task::JoinHandle<()>,
    otlp_grpc: Option<tokio::task::JoinHandle<()>>,
    /// Reads the TLS files again when they change.
    tls_reload: Option<tokio::task::JoinHandle<()>>,
    /// Reads the internal TLS files again when they change.
    internal_tls_reload: Option<tokio::task::JoinHandle<()>>,
    refresher: tokio::task::JoinHandle<()>,
    housekeeper: tokio::task::JoinHandle<()>,
    webhook_worker: tokio::task::JoinHandle<()>,
    /// Provider events of the sandbox and the subscription lifecycle.
    billing_lifecycle: tokio::task::JoinHandle<()>,
    alert_evaluator: tokio::task::JoinHandle<()>,
}

impl RunningRouter {
    pub fn abort(self) {
        for reload in [&self.tls_reload, &self.internal_tls_reload].into_iter().flatten() {
            reload.abort();
        }
        self.server.abort();
        self.internal.abort();
        if let Some(otlp) = &self.otlp_grpc {
            otlp.abort();
        }
        self.refresher.abort();
        self.housekeeper.abort();
        self.webhook_worker.abort();
        self.billing_lifecycle.abort();
        self.alert_evaluator.abort();
    }

    /// Stops serving and tells meta this router is gone, so the others take over its share
    /// of the rate limits now rather than when its heartbeat expires.
    pub async fn shutdown(self) {
        self.housekeeper.abort();
        self.webhook_worker.abort();
        self.billing_lifecycle.abort();
        self.alert_evaluator.abort();
        self.server.abort();
        self.internal.abort();
        if let Some(otlp) = &self.otlp_grpc {
            otlp.abort();
        }
        if let Some(reload) = &self.tls_reload {
            reload.abort();
        }
        // The evaluator is stopped above: no round of this router follows the release.
        match tokio::time::timeout(Duration::from_secs(3), alerts::release(&self.state)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release the alert evaluator lease"),
            Err(_) => tracing::warn!("releasing the alert evaluator lease timed out"),
        }
        let leave = MetaCommand::RouterLeft { router_id: self.state.router_id.clone() };
        match tokio::time::timeout(Duration::from_secs(3), self.state.cluster.meta_write::<MetaCommandResult>(&leave))
            .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not leave the router set"),
            Err(_) => tracing::warn!("leaving the router set timed out"),
        }
        self.refresher.abort();
        if let Some(reload) = &self.internal_tls_reload {
            reload.abort();
        }
    }

    /// Waits until the router serves: topology known, meta loaded, every group led.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.state.cluster.ready() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }
}

/// Starts serving. `registry` may already hold other components' metrics (the embedded mode
/// shares one registry with the node).
pub async fn start(config: RouterConfig, mut registry: Registry) -> anyhow::Result<RunningRouter> {
    anyhow::ensure!(config.jwt_secret.len() >= 32, "the JWT signing key must have at least 32 bytes");
    // Bad certificate files stop the start here, before anything is bound.
    let tls = config.tls.clone().map(http::tls::Tls::load).transpose()?;
    let internal_tls = config.internal_tls.as_ref().map(sextant_proto::internal_tls::InternalTls::load).transpose()?;
    let cluster = Cluster::new(
        config.nodes.clone(),
        &config.cluster_secret,
        internal_tls.clone(),
        config.in_process_node.clone(),
    )
    .map_err(anyhow::Error::msg)?;
    let metrics = http::metrics::RouterMetrics::default();
    metrics.register(&mut registry);
    let parsers = std::thread::available_parallelism().map_or(2, |n| n.get());
    // Bound first: the sandbox's payment pages link to the address actually served.
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let billing = billing::Billing::new(&config.billing, addr, config.clock.clone())?;
    let webhooks = webhooks::Webhooks::new(config.webhook_targets);
    let state_limits = config.server.clone();
    let state = Arc::new(AppState {
        billing,
        bodies: http::body::Budget::new(config.server.body_budget_bytes, parsers),
        jwt: identity::auth::Jwt::new(&config.jwt_secret, config.clock.clone()),
        clock: config.clock.clone(),
        cluster: cluster.clone(),
        limits: identity::rate_limit::RateLimits::new(config.rate_limits, config.clock.clone()),
        router_id: uuid::Uuid::new_v4().to_string(),
        config,
        metrics,
        registry,
        soft_quota_warnings: Default::default(),
        webhooks,
        quota_pending: Default::default(),
        ingest_shares: ingest::admission::TenantShares::new(state_limits.tenant_inflight_bytes),
        reads: http::overload::ReadSlots::new(state_limits.max_concurrent_reads, state_limits.read_queue),
    });
    let refresher = cluster.spawn_refresh(Duration::from_secs(1));
    let housekeeper = spawn_housekeeping(state.clone());
    let webhook_worker = webhooks::worker::spawn(state.clone());
    let billing_lifecycle = billing::lifecycle::spawn(state.clone());
    let alert_evaluator = alerts::spawn_evaluator(state.clone());
    let internal_listener = tokio::net::TcpListener::bind(state.config.internal_listen).await?;
    let internal_addr = internal_listener.local_addr()?;
    let refused = state.metrics.refused_connections.clone();
    let server = tokio::spawn(http::connection::serve(
        listener,
        http::router(state.clone()),
        state.config.server.clone(),
        tls.as_ref().map(|t| t.acceptor.clone()),
        move || {
            refused.inc();
        },
    ));
    let refused = state.metrics.refused_connections.clone();
    let internal = tokio::spawn(http::connection::serve(
        internal_listener,
        http::internal_router(state.clone()),
        state.config.server.clone(),
        None,
        move || {
            refused.inc();
        },
    ));
    let (otlp_grpc_addr, otlp_grpc) = match state.config.otlp_grpc_listen {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at).await?;
            let refused = state.metrics.refused_connections.clone();
            let otlp_addr = listener.local_addr()?;
            let task = tokio::spawn(http::connection::serve(
                listener,
                ingest::otlp::grpc::router(state.clone()),
                state.config.server.clone(),
                tls.as_ref().map(|t| t.acceptor.clone()),
                move || {
                    refused.inc();
                },
            ));
            (Some(otlp_addr), Some(task))
        }
        None => (None, None),
    };
    let tls_reload = tls.as_ref().map(http::tls::Tls::spawn_reload);
    let internal_tls_reload = internal_tls.as_ref().map(sextant_proto::internal_tls::InternalTls::spawn_reload);
    tracing::info!(%addr, %internal_addr, ?otlp_grpc_addr, tls = tls.is_some(), "router listening");
    Ok(RunningRouter {
        addr,
        internal_addr,
        otlp_grpc_addr,
        state,
        server,
        internal,
        otlp_grpc,
        tls_reload,
        internal_tls_reload,
        refresher,
        housekeeper,
        webhook_worker,
        billing_lifecycle,
        alert_evaluator,
    })
}

/// Heartbeats into meta (so every router knows how many share the rate limits) and forgets
/// idle rate-limit keys.
fn spawn_housekeeping(state: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEARTBEAT_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = state.cluster.heartbeat(&state.router_id, state.clock.now_millis()).await {
                tracing::warn!(error = %e, "router heartbeat failed");
            }
            state.limits.retain_recent();
            if let Some(cache) = state.cluster.meta_cache() {
                state.metrics.live_routers.set(cache.live_routers(state.clock.now_millis()) as i64);
                // A cluster bootstrapped before the plan catalog existed gets it here.
                if cache.plans.is_empty() {
                    let seed = MetaCommand::SeedPlans { plans: default_plans() };
                    if let Err(e) = state.cluster.meta_change(&seed).await {
                        tracing::warn!(error = %e, "seeding the plan catalog failed");
                    }
                }
            }
        }
    })
}

/// Well below `ROUTER_LIVE_MS`, so one lost heartbeat does not change the limit shares.
const HEARTBEAT_PERIOD: Duration = Duration::from_secs(3);
