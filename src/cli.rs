//! Command line: `dev` (everything in one process), `node`, `router`, `operator`, `crds`, `loadgen`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use prometheus_client::registry::Registry;
use rand::RngCore;
use sextant_model::Clock;
use sextant_node::{NodeConfig, NodeHost, NodeMetrics};
use sextant_router::admin::AdminToken;
use sextant_router::identity::bootstrap::{bootstrap, write_credentials, Credentials};
use sextant_router::identity::rate_limit::RateLimitConfig;
use sextant_router::RouterConfig;

#[derive(Parser)]
#[command(name = "sextant", version, about = "Self-hosted observability and product analytics.")]
pub struct Cli {
    /// Log format: `text` or `json`.
    #[arg(long, global = true, default_value = "text", env = "SEXTANT_LOG_FORMAT")]
    pub log_format: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run everything in one process (meta group, data shards and router) with data in a local
    /// directory. Prints the login, API key and ingest token on start.
    Dev(DevArgs),
    /// Run a storage node: replicas of the meta group and of data shards, served over gRPC.
    Node(NodeArgs),
    /// Run a stateless router: the public HTTP API in front of the storage nodes.
    Router(RouterArgs),
    /// Run the Kubernetes operator: reconciles the sextant.dev resources (see docs/KUBERNETES.md).
    Operator(sextant_operator::OperatorArgs),
    /// Print the operator's CustomResourceDefinitions as YAML (`sextant crds | kubectl apply -f -`).
    Crds,
    /// Send realistic ingest load to a router and report throughput and latency.
    Loadgen(crate::loadgen::LoadgenArgs),
    /// Write generated objects straight into one shard's storage engine and report bytes on
    /// disk per object and trace lookup latency (see docs/BENCHMARKS.md).
    BenchStorage(crate::storage_bench::StorageBenchArgs),
}

#[derive(clap::Args)]
pub struct DevArgs {
    /// Where data, keys and credentials.json are kept.
    #[arg(long, default_value = "./sextant-data")]
    pub data_dir: PathBuf,
    /// HTTP address of the public API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// HTTP address of `/metrics` and the admin API `/admin/v1` (never on the public one).
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub internal_listen: SocketAddr,
    /// Address of OTLP/gRPC (OTLP/HTTP is served on `--listen`).
    #[arg(long, env = "SEXTANT_OTLP_GRPC_LISTEN", default_value = "127.0.0.1:4317")]
    pub otlp_grpc_listen: SocketAddr,
    /// Number of data shards (fixed when the data directory is created).
    #[arg(long, default_value_t = 4)]
    pub shards: u32,
    /// A data shard flushes its buffer into segments every this many Raft entries (and by
    /// size and age regardless).
    #[arg(long, default_value_t = DEFAULT_SNAPSHOT_EVERY)]
    pub snapshot_every: u64,
    /// MiB the queries running at once may hold in their per-user and per-group tables
    /// [default: a quarter of the process's cgroup memory limit, at most 4096].
    #[arg(long)]
    pub query_memory_mib: Option<u64>,
    #[command(flatten)]
    pub disk: DiskArgs,
    #[command(flatten)]
    pub writes: WriteQueueArgs,
    /// Enables the admin API (`/admin/v1`) for this bearer token (≥ 32 characters).
    #[arg(long, env = "SEXTANT_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Another origin allowed to call /api and /auth from a browser, with credentials (e.g. a
    /// dashboard dev server at http://localhost:3000); repeatable. The router's own origin
    /// always is.
    #[arg(long, value_delimiter = ',')]
    pub dashboard_origin: Vec<String>,
    #[command(flatten)]
    pub limits: RateLimitArgs,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// What one router accepts from its clients (docs/API.md, "Connections and request bodies").
#[derive(clap::Args)]
pub struct ServerArgs {
    /// Open client connections per router; more are closed at once.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Seconds from a request's first byte (or a new connection) to the end of its header.
    #[arg(long, default_value_t = 10)]
    pub header_read_timeout: u64,
    /// Longest silence, in seconds, while a request body is being sent (408 after it).
    #[arg(long, default_value_t = 60)]
    pub body_read_timeout: u64,
    /// Seconds a keep-alive connection may wait for its next request.
    #[arg(long, default_value_t = 75)]
    pub idle_timeout: u64,
    /// Seconds a read (`GET` of the API) may take before 504 `query_timeout`.
    #[arg(long, default_value_t = 60)]
    pub read_timeout: u64,
    /// Rows one read may scan, over all shards, as estimated from segment metadata before it
    /// scans (422 `query_too_large` above it).
    #[arg(long, default_value_t = 500_000_000)]
    pub query_max_rows: u64,
    /// MiB of compressed column data one read may scan, estimated likewise.
    #[arg(long, default_value_t = 8192)]
    pub query_max_mib: u64,
    /// MiB of request bodies a router holds at once (raw, decoded and parsed); requests
    /// beyond it get 503 with `Retry-After`.
    #[arg(long, default_value_t = 512)]
    pub body_budget_mib: usize,
    /// MiB of ingest bodies (as received) one project may have being parsed or committed
    /// through a router at once; its requests beyond it get 429 with `Retry-After` while other
    /// projects' go on.
    #[arg(long, default_value_t = 64)]
    pub tenant_inflight_mib: u64,
    /// Reads (`GET` of the API) a router runs at once.
    #[arg(long, default_value_t = 64)]
    pub max_concurrent_reads: usize,
    /// Reads that may wait (at most 2 s) for one of those places; more get 503 `overloaded`
    /// with `Retry-After` at once.
    #[arg(long, default_value_t = 256)]
    pub read_queue: usize,
    /// Who takes payments: `sandbox` (simulated, on a page this router serves) or `stripe`.
    /// Default: `sandbox` in `sextant dev`; none in `sextant router`, whose billing changes then
    /// answer 503 `billing_not_configured` (status and history still answer).
    #[arg(long, value_enum)]
    pub billing_provider: Option<BillingProviderArg>,
    /// File holding the Stripe secret key (`sk_…`); required with `--billing-provider stripe`.
    #[arg(long)]
    pub stripe_secret_key_file: Option<PathBuf>,
    /// File holding the Stripe webhook signing secret (`whsec_…`); required with
    /// `--billing-provider stripe`.
    #[arg(long)]
    pub stripe_webhook_secret_file: Option<PathBuf>,
    /// Seconds between evaluations of the alert rules (1 to 30), by whichever router holds the
    /// evaluator lease.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=30))]
    pub alert_interval: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BillingProviderArg {
    Sandbox,
    Stripe,
}

impl ServerArgs {
    fn alert_interval(&self) -> Duration {
        Duration::from_secs(self.alert_interval)
    }

    /// The provider (`default` when no flag names one) and its secrets, read from their
    /// files (never from flags or logs).
    fn billing(&self, default: Option<BillingProviderArg>) -> anyhow::Result<sextant_router::billing::BillingConfig> {
        use sextant_router::billing::{stripe::StripeConfig, BillingConfig, ProviderConfig, Secret};
        let provider = match self.billing_provider.or(default) {
            None => {
                anyhow::ensure!(
                    self.stripe_secret_key_file.is_none() && self.stripe_webhook_secret_file.is_none(),
                    "the Stripe secret files need --billing-provider stripe"
                );
                ProviderConfig::Disabled
            }
            Some(BillingProviderArg::Sandbox) => {
                anyhow::ensure!(
                    self.stripe_secret_key_file.is_none() && self.stripe_webhook_secret_file.is_none(),
                    "the Stripe secret files need --billing-provider stripe"
                );
                ProviderConfig::Sandbox
            }
            Some(BillingProviderArg::Stripe) => {
                let key = self
                    .stripe_secret_key_file
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("--billing-provider stripe needs --stripe-secret-key-file"))?;
                let webhook = self
                    .stripe_webhook_secret_file
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("--billing-provider stripe needs --stripe-webhook-secret-file"))?;
                ProviderConfig::Stripe(StripeConfig::new(Secret::from_file(key)?, Secret::from_file(webhook)?))
            }
        };
        Ok(BillingConfig { provider, public_url: None, lifecycle_period: None })
    }

    fn limits(&self) -> anyhow::Result<sextant_router::http::connection::ServerLimits> {
        for (name, v) in [
            ("--max-connections", self.max_connections as u64),
            ("--header-read-timeout", self.header_read_timeout),
            ("--body-read-timeout", self.body_read_timeout),
            ("--idle-timeout", self.idle_timeout),
            ("--read-timeout", self.read_timeout),
            ("--body-budget-mib", self.body_budget_mib as u64),
            ("--query-max-rows", self.query_max_rows),
            ("--query-max-mib", self.query_max_mib),
            ("--tenant-inflight-mib", self.tenant_inflight_mib),
            ("--max-concurrent-reads", self.max_concurrent_reads as u64),
        ] {
            anyhow::ensure!(v >= 1, "{name} must be at least 1");
        }
        let body_budget_bytes = self
            .body_budget_mib
            .checked_mul(1 << 20)
            .ok_or_else(|| anyhow::anyhow!("--body-budget-mib is too large"))?;
        Ok(sextant_router::http::connection::ServerLimits {
            max_connections: self.max_connections,
            header_read_timeout: Duration::from_secs(self.header_read_timeout),
            body_read_timeout: Duration::from_secs(self.body_read_timeout),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            read_timeout: Duration::from_secs(self.read_timeout),
            body_budget_bytes,
            tenant_inflight_bytes: self
                .tenant_inflight_mib
                .checked_mul(1 << 20)
                .ok_or_else(|| anyhow::anyhow!("--tenant-inflight-mib is too large"))?,
            max_concurrent_reads: self.max_concurrent_reads,
            read_queue: self.read_queue,
            query_budget: sextant_router::query::scatter::QueryBudget {
                rows: self.query_max_rows,
                bytes: self
                    .query_max_mib
                    .checked_mul(1 << 20)
                    .ok_or_else(|| anyhow::anyhow!("--query-max-mib is too large"))?,
            },
        })
    }
}

/// When a node stops taking writes for disk space.
#[derive(clap::Args)]
pub struct DiskArgs {
    /// Writes are refused (503 `disk_full`, reads go on) while the data directory's filesystem
    /// is more than this percent used, or has less than --disk-min-free-mib available.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub disk_high_water: u8,
    /// MiB that must stay available on the data directory's filesystem for writes to be taken.
    #[arg(long, default_value_t = 1024)]
    pub disk_min_free_mib: u64,
    /// MiB kept in a file (`reserve`) for the node's own restart after its disk filled up
    /// (default: 1 % of the filesystem, at most 1024; 0: none).
    #[arg(long, env = "SEXTANT_DISK_RESERVE_MIB")]
    pub disk_reserve_mib: Option<u64>,
}

impl DiskArgs {
    pub fn high_water(&self) -> sextant_node::disk::HighWater {
        sextant_node::disk::HighWater {
            max_used_percent: self.disk_high_water,
            min_free_bytes: self.disk_min_free_mib.saturating_mul(1 << 20),
        }
    }

    /// Applies these flags to a started node.
    pub fn apply(&self, host: &sextant_node::host::NodeHost) {
        host.disk.set_high_water(self.high_water());
        host.reserve.set_size(self.disk_reserve_mib.map(|m| m.saturating_mul(1 << 20)));
    }
}

/// How much a node lets each shard have in flight between its gRPC writes and Raft's apply,
/// and applied but not flushed (docs/API.md, "Overload"); past it, writes get 503
/// `overloaded` with `Retry-After`.
#[derive(clap::Args)]
pub struct WriteQueueArgs {
    /// Batches a shard leader has proposed and not yet applied.
    #[arg(long, default_value_t = 512)]
    pub max_pending_writes: u32,
    /// MiB of those batches (encoded rows).
    #[arg(long, default_value_t = 32)]
    pub max_pending_write_mib: u64,
    /// MiB of rows a shard holds applied and not yet written to segments.
    #[arg(long, default_value_t = 768)]
    pub max_unflushed_mib: u64,
    /// MiB of rows all shards of this node may hold applied and not yet written, together;
    /// past it the largest buffer is flushed early [default: a quarter of the container's
    /// memory limit, at most 2048].
    #[arg(long)]
    pub buffer_memory_mib: Option<u64>,
    /// Milliseconds a shard's recent writes may take from proposal to apply (a moving
    /// average); while they take longer, only a few more are taken at once.
    #[arg(long, default_value_t = 500)]
    pub max_write_delay_ms: u64,
}

impl WriteQueueArgs {
    pub fn limits(&self) -> anyhow::Result<sextant_node::admission::WriteLimits> {
        for (name, v) in [
            ("--max-pending-writes", u64::from(self.max_pending_writes)),
            ("--max-pending-write-mib", self.max_pending_write_mib),
            ("--max-unflushed-mib", self.max_unflushed_mib),
            ("--max-write-delay-ms", self.max_write_delay_ms),
        ] {
            anyhow::ensure!(v >= 1, "{name} must be at least 1");
        }
        Ok(sextant_node::admission::WriteLimits {
            max_pending_writes: self.max_pending_writes,
            max_pending_bytes: self.max_pending_write_mib.saturating_mul(1 << 20),
            max_unflushed_bytes: self.max_unflushed_mib.saturating_mul(1 << 20),
            max_queue_delay: Duration::from_millis(self.max_write_delay_ms),
        })
    }

    /// `--buffer-memory-mib`, or the default for this process's memory limit.
    pub fn buffer_memory_bytes(&self) -> u64 {
        let bytes = self
            .buffer_memory_mib
            .map_or_else(sextant_node::host::default_buffer_memory_bytes, |m| m.saturating_mul(1 << 20));
        tracing::info!(buffer_memory_mib = bytes >> 20, "shard buffer budget");
        bytes
    }
}

/// Cluster-wide request rates (docs/API.md, "Rate limits"); each router enforces its share. Plans
/// may override the first three.
#[derive(clap::Args)]
pub struct RateLimitArgs {
    /// Observability ingest requests per second per API key.
    #[arg(long, default_value_t = 500)]
    pub ingest_rps: u32,
    /// Analytics `/v1/*` requests per second per project token.
    #[arg(long, default_value_t = 500)]
    pub analytics_rps: u32,
    /// JWT API requests per second per user.
    #[arg(long, default_value_t = 30)]
    pub api_rps: u32,
    /// `/auth/*` requests per second per client IP.
    #[arg(long, default_value_t = 5)]
    pub auth_rps: u32,
}

impl RateLimitArgs {
    fn config(&self) -> anyhow::Result<RateLimitConfig> {
        for (name, v) in [
            ("--ingest-rps", self.ingest_rps),
            ("--analytics-rps", self.analytics_rps),
            ("--api-rps", self.api_rps),
            ("--auth-rps", self.auth_rps),
        ] {
            anyhow::ensure!(v >= 1, "{name} must be at least 1");
        }
        Ok(RateLimitConfig {
            ingest_rps: self.ingest_rps,
            analytics_rps: self.analytics_rps,
            api_rps: self.api_rps,
            auth_rps: self.auth_rps,
        })
    }
}

const DEFAULT_SNAPSHOT_EVERY: u64 = 5000;

/// `--query-memory-mib`, or the default for this process's memory limit.
fn query_memory_bytes(mib: Option<u64>) -> u64 {
    let bytes = mib.map_or_else(sextant_node::host::default_query_memory_bytes, |m| m.saturating_mul(1 << 20));
    tracing::info!(query_memory_mib = bytes >> 20, "query memory budget");
    bytes
}

#[derive(clap::Args)]
pub struct NodeArgs {
    /// This node's id (≥ 1); must appear in --peers.
    #[arg(long)]
    pub id: u64,
    /// gRPC address to bind.
    #[arg(long)]
    pub listen: SocketAddr,
    /// HTTP address for /healthz, /readyz, /status and /metrics.
    #[arg(long)]
    pub http_listen: Option<SocketAddr>,
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Every node of the cluster as `id=host:port`, comma separated, identical on all nodes.
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    #[arg(long, default_value_t = 4)]
    pub shards: u32,
    #[arg(long, default_value_t = 3)]
    pub replication_factor: usize,
    /// Shared secret of internal traffic (node <-> node, router -> node).
    #[arg(long, env = "SEXTANT_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: String,
    #[command(flatten)]
    pub internal_tls: InternalTlsArgs,
    /// A data shard snapshots its state and truncates its Raft log every this many entries.
    #[arg(long, default_value_t = DEFAULT_SNAPSHOT_EVERY)]
    pub snapshot_every: u64,
    /// MiB the queries running at once on this node may hold in their per-user and per-group
    /// tables (a query past it is 422 `query_too_large`) [default: a quarter of the container's
    /// memory limit, at most 4096].
    #[arg(long)]
    pub query_memory_mib: Option<u64>,
    #[command(flatten)]
    pub disk: DiskArgs,
    #[command(flatten)]
    pub writes: WriteQueueArgs,
    /// Join the running cluster reached through --peers (which must list this node too): start
    /// without replicas and get them once the admin API's placement includes this node.
    #[arg(long)]
    pub join: bool,
    /// This node's failure zone (e.g. `eu-west-1a`); replicas of a group go to distinct zones
    /// while there are enough of them.
    #[arg(long, env = "SEXTANT_ZONE", conflicts_with = "zone_file")]
    pub zone: Option<String>,
    /// A file holding this node's zone, read again every half second (on Kubernetes the
    /// operator's downward-API file); missing or empty: no zone yet.
    #[arg(long, env = "SEXTANT_ZONE_FILE")]
    pub zone_file: Option<PathBuf>,
}

impl NodeArgs {
    fn zone_source(&self) -> anyhow::Result<sextant_node::zone::ZoneSource> {
        use sextant_node::zone::ZoneSource;
        Ok(match (&self.zone, &self.zone_file) {
            (Some(zone), _) => match sextant_model::zone::parse_zone(zone).context("--zone")? {
                Some(zone) => ZoneSource::Fixed(zone),
                None => ZoneSource::None,
            },
            (None, Some(path)) => ZoneSource::File(path.clone()),
            (None, None) => ZoneSource::None,
        })
    }
}

/// Mutual TLS on internal gRPC (router -> node, node <-> node): every side presents a
/// certificate of the cluster CA and verifies its peers' against it.
#[derive(clap::Args)]
pub struct InternalTlsArgs {
    /// Directory holding `tls.crt`, `tls.key` and `ca.crt` (a mounted Kubernetes TLS Secret):
    /// the same as the three file flags.
    #[arg(
        long,
        env = "SEXTANT_INTERNAL_TLS_DIR",
        conflicts_with_all = ["internal_tls_cert", "internal_tls_key", "internal_tls_ca"]
    )]
    pub internal_tls_dir: Option<PathBuf>,
    /// PEM certificate chain this process presents on internal gRPC, signed by the cluster CA;
    /// with it, plain-text and unverified peers are refused.
    #[arg(long, requires_all = ["internal_tls_key", "internal_tls_ca"])]
    pub internal_tls_cert: Option<PathBuf>,
    /// PEM private key of --internal-tls-cert.
    #[arg(long, requires_all = ["internal_tls_cert", "internal_tls_ca"])]
    pub internal_tls_key: Option<PathBuf>,
    /// PEM certificate(s) of the cluster CA that peers' certificates must chain to.
    #[arg(long, requires_all = ["internal_tls_cert", "internal_tls_key"])]
    pub internal_tls_ca: Option<PathBuf>,
    /// Seconds between checks of the internal TLS files; changed ones are used from the next
    /// connection on.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub internal_tls_reload_seconds: u64,
    /// `require`: serve and dial mutual TLS only. While a running cluster switches to it, in
    /// three rolling restarts: `accept` (serve TLS and plain text, dial plain text), then
    /// `dial` (serve both, dial TLS), then `require`.
    #[arg(long, env = "SEXTANT_INTERNAL_TLS_MODE", default_value = "require")]
    pub internal_tls_mode: sextant_proto::internal_tls::TlsMode,
}

impl InternalTlsArgs {
    fn files(&self) -> Option<sextant_proto::internal_tls::InternalTlsFiles> {
        let every = Duration::from_secs(self.internal_tls_reload_seconds);
        if let Some(dir) = &self.internal_tls_dir {
            let files = sextant_proto::internal_tls::InternalTlsFiles::in_dir(dir, every);
            return Some(sextant_proto::internal_tls::InternalTlsFiles { mode: self.internal_tls_mode, ..files });
        }
        Some(sextant_proto::internal_tls::InternalTlsFiles {
            cert: self.internal_tls_cert.clone()?,
            key: self.internal_tls_key.clone()?,
            ca: self.internal_tls_ca.clone()?,
            reload_every: every,
            mode: self.internal_tls_mode,
        })
    }
}

#[derive(clap::Args)]
pub struct RouterArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// HTTP address of `/metrics` and the admin API `/admin/v1` (never on the public one):
    /// loopback by default; in a cluster, an address only the operator and Prometheus reach.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub internal_listen: SocketAddr,
    /// Address of OTLP/gRPC (OTLP/HTTP is served on `--listen`).
    #[arg(long, env = "SEXTANT_OTLP_GRPC_LISTEN", default_value = "0.0.0.0:4317")]
    pub otlp_grpc_listen: SocketAddr,
    /// gRPC addresses of storage nodes (any subset; the rest is discovered).
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,
    #[arg(long, env = "SEXTANT_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: String,
    #[command(flatten)]
    pub internal_tls: InternalTlsArgs,
    /// Signing key of access tokens (≥ 32 bytes), identical on every router.
    #[arg(long, env = "SEXTANT_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: String,
    /// Origins allowed to call /api and /auth from a browser.
    #[arg(long, value_delimiter = ',')]
    pub dashboard_origin: Vec<String>,
    /// On a new cluster, create the first owner, org, project and keys and write them here.
    #[arg(long)]
    pub bootstrap_credentials: Option<PathBuf>,
    /// Leave `Secure` off the refresh cookie: only for a browser reaching this router over
    /// plain HTTP on the same machine.
    #[arg(long)]
    pub insecure_cookies: bool,
    /// Send webhooks to loopback, private and shared (CGNAT) addresses too. Link-local and
    /// metadata addresses stay refused.
    #[arg(long, env = "SEXTANT_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: bool,
    /// Send webhooks to plain `http://` URLs too.
    #[arg(long, env = "SEXTANT_WEBHOOK_ALLOW_HTTP")]
    pub webhook_allow_http: bool,
    /// Number of proxies in front of the routers that append to X-Forwarded-For (an ingress
    /// is one); 0 when clients connect directly.
    #[arg(long, default_value_t = 0)]
    pub trusted_proxy_hops: usize,
    /// Enables the admin API (`/admin/v1`, used by the operator) for this bearer token
    /// (≥ 32 characters).
    #[arg(long, env = "SEXTANT_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// PEM certificate chain (server certificate first): serve --listen and --otlp-grpc-listen
    /// over TLS (1.2 and 1.3). The internal port stays plain HTTP.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Seconds between checks of the TLS files; a changed certificate is served from the next
    /// connection on.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub tls_reload_seconds: u64,
    #[command(flatten)]
    pub limits: RateLimitArgs,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// The log filter: `SEXTANT_LOG`, else `RUST_LOG` (what a Kubernetes pod template may set: the
/// operator keeps `SEXTANT_*` for itself), else `info,openraft=warn`.
fn log_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_env("SEXTANT_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_env("RUST_LOG"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"))
}

pub fn init_logging(format: &str) {
    let filter = log_filter();
    // Colours only on a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A log line that cannot be written (its file on a full disk) is dropped: reporting that
    // on stderr too would panic the task that logged.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .log_internal_errors(false);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Dev(args) => {
            private_files();
            dev(args).await
        }
        Command::Node(args) => {
            private_files();
            node(args).await
        }
        Command::Router(args) => router(args).await,
        Command::Operator(args) => Ok(sextant_operator::run(args).await?),
        Command::Crds => {
            print!("{}", sextant_operator::crds_yaml()?);
            Ok(())
        }
        Command::Loadgen(args) => crate::loadgen::run(args).await,
        Command::BenchStorage(args) => tokio::task::spawn_blocking(move || crate::storage_bench::run(args)).await?,
    }
}

/// From here on, files and directories this process creates are its user's only (0600, 0700):
/// the data directory holds every tenant's data and credential hashes.
fn private_files() {
    // SAFETY: umask only replaces the process's file mode creation mask.
    #[cfg(unix)]
    unsafe {
        libc::umask(0o077);
    }
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Reads a secret file, creating it (mode 0600) on first use.
fn persistent_secret(path: &Path) -> anyhow::Result<String> {
    if let Ok(s) = std::fs::read_to_string(path) {
        return Ok(s.trim().to_owned());
    }
    let secret = random_hex(32);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    std::io::Write::write_all(&mut opts.open(path)?, secret.as_bytes())?;
    Ok(secret)
}

async fn dev(args: DevArgs) -> anyhow::Result<()> {
    sextant_node::durable::create_private_dir(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let jwt_secret = persistent_secret(&args.data_dir.join("jwt.key"))?;
    // Internal traffic never leaves this process's loopback port; a fresh secret per start.
    let cluster_secret = random_hex(32);
    let shards = read_or_record_shards(&args.data_dir, args.shards)?;
    let clock = Clock::system();
    let mut registry = Registry::default();
    let metrics = Arc::new(NodeMetrics::default());
    metrics.register(&mut registry);
    let node = NodeHost::start(
        NodeConfig {
            id: 1,
            listen: "127.0.0.1:0".parse()?,
            data_dir: args.data_dir.join("node"),
            peers: BTreeMap::from([(1, "127.0.0.1:0".to_string())]),
            shards,
            replication_factor: 1,
            cluster_secret: cluster_secret.clone(),
            snapshot_every: args.snapshot_every,
            join: false,
            clock: clock.clone(),
            query_memory_bytes: query_memory_bytes(args.query_memory_mib),
            buffer_memory_bytes: args.writes.buffer_memory_bytes(),
            zone: Default::default(),
            // One process: internal traffic stays on loopback.
            internal_tls: None,
        },
        metrics,
    )
    .await?;
    args.disk.apply(&node.host);
    node.host.writes.set_limits(args.writes.limits()?);
    let router = sextant_router::start(
        RouterConfig {
            listen: args.listen,
            internal_listen: args.internal_listen,
            otlp_grpc_listen: Some(args.otlp_grpc_listen),
            nodes: vec![node.addr.to_string()],
            cluster_secret,
            jwt_secret: jwt_secret.into_bytes(),
            dashboard_origins: std::iter::once(format!("http://{}", args.listen))
                .chain(args.dashboard_origin)
                .collect(),
            // Dev mode serves plain HTTP: a Secure cookie would never come back.
            secure_cookies: false,
            rate_limits: args.limits.config()?,
            trusted_proxy_hops: 0,
            admin_token: admin_token(args.admin_token.as_deref())?,
            server: args.server.limits()?,
            clock,
            billing: args.server.billing(Some(BillingProviderArg::Sandbox))?,
            alert_interval: args.server.alert_interval(),
            // Dev mode serves plain HTTP (see `sextant router --tls-cert`).
            tls: None,
            internal_tls: None,
            in_process_node: Some(sextant_router::InProcessNode {
                addr: node.addr.to_string(),
                services: node.services.clone(),
                storage: node.storage.clone(),
            }),
            // A laptop: receivers on loopback and the local network, over plain HTTP.
            webhook_targets: sextant_router::webhooks::guard::TargetPolicy::dev(),
        },
        registry,
    )
    .await?;
    anyhow::ensure!(router.wait_ready(Duration::from_secs(60)).await, "storage did not become ready within 60 s");
    let url = format!("http://{}", router.addr);
    let creds_path = args.data_dir.join("credentials.json");
    let fresh = bootstrap(&router.state.cluster, &url, "enterprise", router.state.clock.now_millis()).await?;
    let creds = match fresh {
        Some(creds) => {
            write_credentials(&creds_path, &creds)?;
            Some(creds)
        }
        None => std::fs::read(&creds_path).ok().and_then(|b| serde_json::from_slice::<Credentials>(&b).ok()),
    };
    print_banner(&url, router.internal_addr, router.otlp_grpc_addr, creds.as_ref(), &creds_path);
    until_stopped(&node).await?;
    tracing::info!("shutting down");
    router.shutdown().await;
    node.shutdown().await;
    Ok(())
}

/// Exit status of a process whose storage node stopped on an error: a supervisor restarts it.
const EXIT_STORAGE_STOPPED: i32 = 75;

/// Returns on Ctrl-C or SIGTERM; exits the process with [`EXIT_STORAGE_STOPPED`] if a Raft
/// group of `node` stopped on an error that starting it again in-process does not mend
/// (`RunningNode::supervise`; docs/RELIABILITY.md, "Disk").
async fn until_stopped(node: &sextant_node::host::RunningNode) -> anyhow::Result<()> {
    tokio::select! {
        r = shutdown_signal() => r,
        reason = node.supervise() => {
            tracing::error!(
                %reason,
                "storage stopped on an error: exiting so that a restart recovers it (what was acknowledged is on disk)"
            );
            std::process::exit(EXIT_STORAGE_STOPPED);
        }
    }
}

/// Ctrl-C, or SIGTERM (how Kubernetes stops a pod).
async fn shutdown_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        Ok(tokio::signal::ctrl_c().await?)
    }
}

/// The shard count is fixed by the first start; later `--shards` values must agree.
fn read_or_record_shards(data_dir: &Path, requested: u32) -> anyhow::Result<u32> {
    anyhow::ensure!((1..=256).contains(&requested), "--shards must be between 1 and 256");
    let path = data_dir.join("shards");
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let existing: u32 = s.trim().parse().context("reading the recorded shard count")?;
            if existing != requested {
                tracing::warn!(existing, requested, "keeping the shard count this data directory was created with");
            }
            Ok(existing)
        }
        Err(_) => {
            std::fs::write(&path, requested.to_string())?;
            Ok(requested)
        }
    }
}

fn admin_token(token: Option<&str>) -> anyhow::Result<Option<AdminToken>> {
    token.map(|t| AdminToken::new(t).map_err(anyhow::Error::msg)).transpose()
}

fn print_banner(url: &str, internal: SocketAddr, otlp: Option<SocketAddr>, creds: Option<&Credentials>, path: &Path) {
    println!("\nSextant is running (embedded mode): {url}");
    println!("  internal      http://{internal}   (/metrics; /admin/v1 with --admin-token)");
    if let Some(otlp) = otlp {
        println!("  OTLP          gRPC http://{otlp}, HTTP {url}/v1/{{traces,logs,metrics}} (with an API key)");
    }
    match creds {
        Some(c) => {
            println!("  login         {} / {}", c.email, c.password);
            println!("  project       {}", c.project_id);
            println!("  API key       {}   (observability: X-API-Key)", c.api_key);
            println!("  ingest token  {}   (product analytics)", c.ingest_token);
            println!("  saved in      {}", path.display());
        }
        None => {
            println!("  credentials file {} is missing; the data directory was bootstrapped earlier", path.display())
        }
    }
    println!("Try:\n  curl -s -X POST {url}/api/v1/ingest/spans -H 'X-API-Key: <API key>' -H 'Content-Type: application/json' \\\n    -d '{{\"spans\":[{{\"trace_id\":\"t1\",\"span_id\":\"s1\",\"service_name\":\"api\",\"operation\":\"GET /\",\"timestamp\":'$(date +%s000)',\"duration_ms\":12}}]}}'");
    println!("Press Ctrl-C to stop.\n");
}

fn parse_peers(peers: &[String]) -> anyhow::Result<BTreeMap<u64, String>> {
    peers
        .iter()
        .map(|p| {
            let (id, addr) = p.split_once('=').with_context(|| format!("peer `{p}` is not id=host:port"))?;
            Ok((id.trim().parse().with_context(|| format!("peer id in `{p}`"))?, addr.trim().to_owned()))
        })
        .collect()
}

async fn node(args: NodeArgs) -> anyhow::Result<()> {
    let zone = args.zone_source()?;
    let mut registry = Registry::default();
    let metrics = Arc::new(NodeMetrics::default());
    metrics.register(&mut registry);
    let node = NodeHost::start(
        NodeConfig {
            id: args.id,
            listen: args.listen,
            data_dir: args.data_dir,
            peers: parse_peers(&args.peers)?,
            shards: args.shards,
            replication_factor: args.replication_factor,
            cluster_secret: args.cluster_secret,
            snapshot_every: args.snapshot_every,
            join: args.join,
            clock: Clock::system(),
            query_memory_bytes: query_memory_bytes(args.query_memory_mib),
            buffer_memory_bytes: args.writes.buffer_memory_bytes(),
            zone,
            internal_tls: args.internal_tls.files(),
        },
        metrics,
    )
    .await?;
    args.disk.apply(&node.host);
    node.host.writes.set_limits(args.writes.limits()?);
    if let Some(http) = args.http_listen {
        let state = Arc::new(sextant_node::http::NodeHttp { host: node.host.clone(), registry: Arc::new(registry) });
        let listener = tokio::net::TcpListener::bind(http).await?;
        tokio::spawn(async move { axum::serve(listener, sextant_node::http::router(state)).await });
    }
    until_stopped(&node).await?;
    node.shutdown().await;
    Ok(())
}

async fn router(args: RouterArgs) -> anyhow::Result<()> {
    let billing = args.server.billing(None)?;
    anyhow::ensure!(
        !matches!(billing.provider, sextant_router::billing::ProviderConfig::Stripe(_))
            || !args.dashboard_origin.is_empty(),
        "--billing-provider stripe needs a --dashboard-origin: where Stripe's payment page sends the customer back"
    );
    let router = sextant_router::start(
        RouterConfig {
            listen: args.listen,
            internal_listen: args.internal_listen,
            otlp_grpc_listen: Some(args.otlp_grpc_listen),
            nodes: args.nodes,
            cluster_secret: args.cluster_secret,
            jwt_secret: args.jwt_secret.into_bytes(),
            dashboard_origins: args.dashboard_origin,
            secure_cookies: !args.insecure_cookies,
            rate_limits: args.limits.config()?,
            trusted_proxy_hops: args.trusted_proxy_hops,
            admin_token: admin_token(args.admin_token.as_deref())?,
            server: args.server.limits()?,
            clock: Clock::system(),
            billing,
            alert_interval: args.server.alert_interval(),
            internal_tls: args.internal_tls.files(),
            in_process_node: None,
            tls: match (args.tls_cert, args.tls_key) {
                (Some(cert), Some(key)) => Some(sextant_router::http::tls::TlsFiles {
                    cert,
                    key,
                    reload_every: Duration::from_secs(args.tls_reload_seconds),
                }),
                _ => None,
            },
            webhook_targets: sextant_router::webhooks::guard::TargetPolicy {
                allow_private: args.webhook_allow_private,
                allow_http: args.webhook_allow_http,
            },
        },
        Registry::default(),
    )
    .await?;
    if let Some(path) = args.bootstrap_credentials {
        while !router.wait_ready(Duration::from_secs(5)).await {
            tracing::info!("waiting for the storage cluster before bootstrapping");
        }
        let scheme = if router.state.config.tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", router.addr);
        let fresh = bootstrap(&router.state.cluster, &url, "enterprise", router.state.clock.now_millis()).await?;
        if let Some(creds) = fresh {
            write_credentials(&path, &creds)?;
            tracing::info!(path = %path.display(), "cluster bootstrapped; credentials written");
        }
    }
    shutdown_signal().await?;
    router.shutdown().await;
    Ok(())
}
