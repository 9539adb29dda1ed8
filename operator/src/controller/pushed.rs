//! What the controllers of resources pushed to a cluster's admin API share (Tenant, Project,
//! Plan, Quota, AlertRule): finalizers so the cluster-side objects (and a project's data) go
//! before the resource does, Ready conditions, and finding the cluster a resource belongs to.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::Resource;

use super::{Context, Error};
use crate::admin::{AdminError, ClusterAdmin, Deletion};
use crate::conditions::{self, Desired};
use crate::tenancy::{self, Cleanup, Referent};
use crate::v1alpha1::{Project, Tenant};

/// Resources pushed to the cluster are re-pushed now and then, so a cluster restored from an
/// older backup converges again.
pub(super) const RESYNC: Duration = Duration::from_secs(300);
pub(super) const RETRY: Duration = Duration::from_secs(30);

pub(super) fn namespace<K: Resource>(obj: &K) -> Result<String, Error> {
    obj.meta().namespace.clone().ok_or_else(|| Error::Waiting("namespaced resource without a namespace".into()))
}

pub(super) fn ready(
    now: k8s_openapi::jiff::Timestamp,
    previous: &[Condition],
    generation: Option<i64>,
    d: Desired,
) -> Vec<Condition> {
    conditions::rebuild(previous, vec![d], generation, now)
}

pub(super) fn synced() -> Desired {
    Desired::new(conditions::READY, true, "Synced", "pushed to the cluster")
}

pub(super) fn finalizer_error(e: kube::runtime::finalizer::Error<Error>) -> Error {
    Error::Finalizer(Box::new(e))
}

pub(super) fn deletion(result: Deletion, what: &str) -> Result<Action, Error> {
    match result {
        Deletion::Done => Ok(Action::await_change()),
        Deletion::InProgress => Err(Error::Waiting(format!("the cluster is still deleting {what}"))),
    }
}

/// The admin API of the cluster a namespaced resource lives in. `None` when the namespace has
/// no cluster any more: then there is nothing left to clean up on the cluster side.
pub(super) async fn admin_in(
    ctx: &Context,
    namespace: &str,
    cluster: Option<&str>,
) -> Result<Option<Arc<dyn ClusterAdmin>>, Error> {
    match ctx.cluster_in(namespace, cluster).await? {
        Some(c) if c.metadata.deletion_timestamp.is_none() => Ok(Some(ctx.admin_of(&c).await?)),
        _ => Ok(None),
    }
}

/// The admin API a push goes to; without a cluster in the namespace the resource waits.
pub(super) async fn push_target(
    ctx: &Context,
    namespace: &str,
    cluster: Option<&str>,
) -> Result<Arc<dyn ClusterAdmin>, Error> {
    admin_in(ctx, namespace, cluster)
        .await?
        .ok_or_else(|| Error::Waiting(format!("no SextantCluster in namespace {namespace}")))
}

/// What an attempt to push leaves: the Ready condition to write, when to look again, and the
/// push error, returned only once the status is written so the failure is visible.
pub(super) struct Outcome {
    pub ready: Desired,
    action: Action,
    failure: Option<AdminError>,
    pushed: bool,
}

impl Outcome {
    pub(super) fn wait(d: Desired) -> Self {
        Outcome { ready: d, action: Action::requeue(RETRY), failure: None, pushed: false }
    }

    /// `on_pushed` records what the cluster answered into the status.
    pub(super) fn of<T>(pushed: Result<T, AdminError>, on_pushed: impl FnOnce(T)) -> Self {
        match pushed {
            Ok(answer) => {
                on_pushed(answer);
                Outcome { ready: synced(), action: Action::requeue(RESYNC), failure: None, pushed: true }
            }
            Err(e) => {
                Outcome { ready: push_failed(&e), action: Action::await_change(), failure: Some(e), pushed: false }
            }
        }
    }

    /// Whether the cluster took the push.
    pub(super) fn pushed(&self) -> bool {
        self.pushed
    }

    /// Once pushed, looks again after `every` (when that is sooner than the resync).
    pub(super) fn again_after(mut self, every: Duration) -> Self {
        if self.pushed {
            self.action = Action::requeue(every.min(RESYNC));
        }
        self
    }

    /// After the status is written: the next action, or the push error.
    pub(super) fn finish(self) -> Result<Action, Error> {
        match self.failure {
            Some(e) => Err(e.into()),
            None => Ok(self.action),
        }
    }
}

/// Cleanup of a resource that is one keyed object in its cluster: deleted there by `delete`,
/// unless the cluster is gone too.
pub(super) async fn delete_keyed<K: Resource>(
    ctx: &Context,
    namespace: &str,
    cluster: Option<&str>,
    obj: &K,
    kind: &'static str,
    what: &str,
    delete: for<'a> fn(&'a dyn ClusterAdmin, &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>>,
) -> Result<Action, Error> {
    let Cleanup::Delete { key } = tenancy::cleanup_keyed(obj, kind)? else {
        return Ok(Action::await_change());
    };
    match admin_in(ctx, namespace, cluster).await? {
        Some(admin) => deletion(delete(admin.as_ref(), &key).await?, what),
        None => Ok(Action::await_change()),
    }
}

pub(super) async fn tenant_cluster(ctx: &Context, namespace: &str, tenant: &str) -> Result<Option<String>, Error> {
    let tenants: Api<Tenant> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(tenants.get_opt(tenant).await?.and_then(|t| t.spec.cluster))
}

pub(super) fn push_failed(e: &crate::admin::AdminError) -> Desired {
    Desired::new(conditions::READY, false, "PushFailed", e.to_string())
}

pub(super) async fn referent_tenant(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<(Option<Referent>, Option<String>), Error> {
    let t = Api::<Tenant>::namespaced(ctx.client.clone(), ns).get_opt(name).await?;
    let cluster = t.as_ref().and_then(|t| t.spec.cluster.clone());
    Ok((
        t.as_ref().and_then(|t| Referent::of(t, &t.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default())),
        cluster,
    ))
}

pub(super) async fn referent_project(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<(Option<Referent>, Option<String>), Error> {
    let p = Api::<Project>::namespaced(ctx.client.clone(), ns).get_opt(name).await?;
    let referent =
        p.as_ref().and_then(|p| Referent::of(p, &p.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default()));
    let cluster = match &p {
        Some(p) => tenant_cluster(ctx, ns, &p.spec.tenant).await?,
        None => None,
    };
    Ok((referent, cluster))
}

#[cfg(test)]
pub(crate) mod fixtures {
    use serde_json::{json, Value};

    use crate::controller::mock::*;
    use crate::tenancy::FINALIZER;
    use crate::topology::tests::cluster;
    use crate::v1alpha1::{Project, ProjectSpec};

    pub(crate) const NS: &str = "/apis/sextant.dev/v1alpha1/namespaces/telemetry";
    pub(crate) const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/telemetry/events";

    pub(crate) fn project(finalized: bool, deleting: bool) -> Project {
        let mut p = Project::new("shop", ProjectSpec { tenant: "acme".into(), name: "Shop".into() });
        p.metadata.namespace = Some("telemetry".into());
        p.metadata.uid = Some("project-uid".into());
        p.metadata.generation = Some(1);
        if finalized {
            p.metadata.finalizers = Some(vec![FINALIZER.into()]);
        }
        if deleting {
            p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(fixed_now()));
        }
        p
    }

    pub(crate) fn tenant(ready: bool, deleting: bool) -> Value {
        let mut t = json!({
            "apiVersion": "sextant.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "namespace": "telemetry", "uid": "tenant-uid", "generation": 1,
                         "finalizers": [FINALIZER]},
            "spec": {"displayName": "Acme", "plan": "pro", "ownerEmail": "ops@acme.test"},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "reason": "Synced", "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
        });
        if deleting {
            t["metadata"]["deletionTimestamp"] = json!("2026-11-22T00:00:00Z");
        }
        t
    }

    pub(crate) fn clusters() -> Value {
        json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "SextantClusterList", "metadata": {},
               "items": [serde_json::to_value(cluster(3, 3)).unwrap()]})
    }

    pub(crate) fn internal_secret() -> Step {
        Step::get("/api/v1/namespaces/telemetry/secrets/obs-internal").reply(
            200,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "obs-internal"}, "data": {"admin-token": "dG9rZW4="}}),
        )
    }

    pub(crate) fn ready_project() -> Value {
        let mut p = serde_json::to_value(project(true, false)).unwrap();
        p["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Synced", "message": "",
                                              "lastTransitionTime": "2026-11-01T00:00:00Z"}]});
        p
    }
}
