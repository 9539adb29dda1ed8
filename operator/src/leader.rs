//! Leader election through a `coordination.k8s.io` Lease, so two operator replicas never
//! reconcile at the same time.

use std::future::Future;
use std::sync::Arc;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};

use crate::metrics::Metrics;

/// Seconds a holder keeps the Lease without renewing it; a crashed leader is replaced after this.
const LEASE_SECONDS: u64 = 15;
const GRACE_SECONDS: u64 = 5;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader election: {0}")]
    Lease(#[from] LeaseManagerError),
    #[error("leader election stopped")]
    Stopped,
    /// Exiting is the safe answer: a restarted pod rejoins the election from scratch, and no
    /// half-cancelled reconcile keeps writing next to the new leader.
    #[error("lost the Lease to another replica")]
    Lost,
}

/// Runs `work` while this replica holds the Lease `name` in `namespace`. Returns when `work`
/// ends (shutdown) or with [`LeaderError::Lost`] when the Lease is lost.
pub async fn run_while_leader<Fut>(
    client: Client,
    namespace: &str,
    name: &str,
    identity: String,
    metrics: Arc<Metrics>,
    work: Fut,
) -> Result<(), LeaderError>
where
    Fut: Future<Output = ()>,
{
    let manager = LeaseManagerBuilder::new(client, name)
        .with_namespace(namespace)
        .with_identity(identity.clone())
        .with_duration(LEASE_SECONDS)
        .with_grace(GRACE_SECONDS)
        .with_field_manager(crate::controller::FIELD_MANAGER)
        .build()
        .await?;
    let (mut leader, task) = manager.watch().await;
    tracing::info!(%identity, lease = name, namespace, "waiting for leadership");
    while !*leader.borrow_and_update() {
        leader.changed().await.map_err(|_| LeaderError::Stopped)?;
    }
    tracing::info!(%identity, "leading");
    metrics.set_leader(true);
    let lost = async {
        loop {
            if leader.changed().await.is_err() || !*leader.borrow_and_update() {
                return;
            }
        }
    };
    let outcome = tokio::select! {
        _ = work => Ok(()),
        _ = lost => Err(LeaderError::Lost),
    };
    metrics.set_leader(false);
    // Dropping the receiver makes the manager release the Lease, so a successor need not wait.
    drop(leader);
    if let Ok(Err(e)) = task.await {
        tracing::warn!(error = %e, "releasing the Lease failed");
    }
    outcome
}
