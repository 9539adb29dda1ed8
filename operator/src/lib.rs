//! The Sextant Kubernetes operator: custom resources (`sextant.dev/v1alpha1`), pure planning
//! functions from spec and observed state to actions, and the kube-rs controllers executing them.

pub mod admin;
pub mod conditions;
pub mod controller;
pub mod crd_install;
pub mod internal_tls;
pub mod leader;
pub mod manifests;
pub mod metrics;
pub mod replacement;
pub mod scaling;
pub mod tenancy;
pub mod topology;
pub mod uninstall;
pub mod v1alpha1;
pub mod volumes;
pub mod zones;

pub use manifests::crds_yaml;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use kube::runtime::events::Reporter;

/// `sextant operator` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Address of `/metrics` and `/healthz`.
    #[arg(long, default_value = "0.0.0.0:8080", env = "SEXTANT_OPERATOR_LISTEN")]
    pub listen: SocketAddr,
    /// Namespace of the leader-election Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    #[arg(long, default_value = "sextant-operator")]
    pub lease_name: String,
    /// This replica's identity in the Lease and in Events (the pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Reconcile without a Lease; only for a single replica.
    #[arg(long)]
    pub no_leader_election: bool,
    /// Apply this operator's CRDs at startup where missing, older or different (needs get,
    /// create and patch on its customresourcedefinitions).
    #[arg(long, env = "SEXTANT_MANAGE_CRDS")]
    pub manage_crds: bool,
    /// Namespace mode: watch and manage only these namespaces (repeat the flag or separate
    /// with commas); the chart then grants Roles in them. Unset: every namespace.
    #[arg(long = "watch-namespace", env = "SEXTANT_WATCH_NAMESPACES", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,
    #[command(flatten)]
    pub uninstall: uninstall::UninstallArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error(transparent)]
    Admin(#[from] admin::AdminError),
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    #[error(transparent)]
    Crds(#[from] crd_install::InstallError),
    #[error("metrics listener on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

/// Runs the operator until a shutdown signal (or the loss of leadership).
pub async fn run(args: OperatorArgs) -> Result<(), RunError> {
    let client = kube::Client::try_default().await?;
    if args.uninstall.uninstall {
        uninstall::run(&client, &args.uninstall, std::time::Duration::from_secs(2)).await?;
        return Ok(());
    }
    if args.manage_crds {
        // Before any controller watches them; every replica may do it (the same apply twice).
        crd_install::ensure(&client).await?;
    }
    let metrics = Arc::new(metrics::Metrics::default());
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| RunError::Listen(args.listen, e))?;
    let served = metrics.clone();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, metrics::router(served)).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    // Without a pod name, a random identity: two replicas must never share one (a pid is 1 in
    // every container).
    let identity = args.identity.clone().unwrap_or_else(|| {
        let mut suffix = [0u8; 6];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut suffix);
        format!("sextant-operator-{}", hex::encode(suffix))
    });
    let mut ctx = controller::Context::new(
        client.clone(),
        Arc::new(admin::HttpConnector::new()?),
        metrics.clone(),
        Reporter { controller: "sextant-operator".into(), instance: Some(identity.clone()) },
    );
    ctx.watch_namespaces = args.watch_namespaces.iter().filter(|ns| !ns.is_empty()).cloned().collect();
    let ctx = Arc::new(ctx);
    metrics.healthy.store(true, Ordering::Relaxed);
    tracing::info!(listen = %args.listen, watch_namespaces = ?ctx.watch_namespaces, "sextant operator started");
    if args.no_leader_election {
        controller::run_all(ctx).await;
        return Ok(());
    }
    leader::run_while_leader(
        client,
        &args.lease_namespace,
        &args.lease_name,
        identity,
        metrics,
        controller::run_all(ctx),
    )
    .await?;
    Ok(())
}
