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
        // Conflict detection between replicas rests on server-side apply, which only sees a
        // conflict between *different* field managers: one per replica, never the shared one.
        .with_field_manager(format!("{}-{identity}", crate::controller::FIELD_MANAGER))
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

#[cfg(test)]
mod tests {
    //! Against an in-memory Lease endpoint: the wiring (namespace, name, identity, per-replica
    //! field manager) and the order "hold the Lease → work → release". Conflict resolution
    //! between replicas is kube-lease-manager's, tested there against a real API server.

    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use http::{Method, Request, Response};
    use kube::client::Body;
    use kube::Client;
    use serde_json::{json, Value};

    use super::*;

    type Log = Arc<Mutex<Vec<(String, String, Value)>>>;

    /// Merge-patch semantics are enough here: `null` removes a field.
    fn merge(target: &mut Value, patch: &Value) {
        match (target.as_object_mut(), patch.as_object()) {
            (Some(t), Some(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            _ => *target = patch.clone(),
        }
    }

    async fn lease_endpoint(mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>, log: Log) {
        let mut lease: Option<Value> = None;
        let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"});
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let uri = request.uri().to_string();
            let bytes = request.into_body().collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            log.lock().unwrap().push((method.to_string(), uri, body.clone()));
            let (status, reply) = match (method, lease.as_mut()) {
                (Method::GET, Some(l)) => (200, l.clone()),
                (Method::GET, None) | (Method::PATCH, None) => (404, not_found.clone()),
                (Method::POST, _) => {
                    let mut created = body;
                    created["metadata"]["resourceVersion"] = json!("1");
                    lease = Some(created.clone());
                    (201, created)
                }
                (Method::PATCH, Some(l)) => {
                    merge(l, &json!({"spec": body["spec"].clone()}));
                    (200, l.clone())
                }
                _ => (405, not_found.clone()),
            };
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap();
            send.send_response(response);
        }
    }

    #[tokio::test]
    async fn works_only_while_holding_the_lease_and_releases_it_after() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let log = Log::default();
        tokio::spawn(lease_endpoint(handle, log.clone()));
        let metrics = Arc::new(Metrics::default());
        let seen = log.clone();
        let gauge = metrics.clone();
        let work = async move {
            let held = seen.lock().unwrap().iter().any(|(m, uri, body)| {
                m == "PATCH"
                    && uri.contains("fieldManager=sextant-operator-replica-a")
                    && body["spec"]["holderIdentity"] == "replica-a"
            });
            assert!(held, "work started before the Lease was taken: {:?}", seen.lock().unwrap());
            assert!(gauge.encode().contains("sextant_operator_leader 1"));
        };
        let client = Client::new(service, "default");
        tokio::time::timeout(
            Duration::from_secs(60),
            run_while_leader(client, "ops", "sextant-operator", "replica-a".into(), metrics.clone(), work),
        )
        .await
        .expect("leadership within a minute")
        .expect("no election error");

        let log = log.lock().unwrap();
        assert!(
            log.iter().all(|(_, uri, _)| uri.starts_with("/apis/coordination.k8s.io/v1/namespaces/ops/leases")),
            "{log:?}"
        );
        let release = log.iter().rev().find(|(m, _, _)| m == "PATCH").expect("a release");
        assert!(
            release.2["spec"].get("holderIdentity").is_some_and(Value::is_null),
            "last patch releases: {release:?}"
        );
        assert!(metrics.encode().contains("sextant_operator_leader 0"));
    }
}
