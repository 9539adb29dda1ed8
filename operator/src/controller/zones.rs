//! SextantCluster → the `sextant.dev/zone` annotation of each of its node pods, from the zone
//! label of the Kubernetes node the pod was scheduled to (`crate::zones`). Pods are read by
//! name (no listing or watching of pods); a pod not scheduled yet is looked at again at the
//! next round, and a Node whose zone label changes is seen within [`RECHECK`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;

use super::{instrumented, Context, Error};
use crate::topology::Names;
use crate::v1alpha1::SextantCluster;
use crate::zones::{annotation_patch, node_zone};

/// How often the zones of a cluster's node pods are checked without a change to wake them.
pub const RECHECK: Duration = Duration::from_secs(30);

pub async fn reconcile(cluster: Arc<SextantCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("zones", cluster.clone(), ctx.clone(), reconcile_inner(cluster, ctx)).await
}

async fn reconcile_inner(cluster: Arc<SextantCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let names = Names::of(&cluster)?;
    let client = &ctx.client;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let Some(sts) = statefulsets.get_opt(&names.nodes()).await? else { return Ok(Action::requeue(RECHECK)) };
    // Pods past `replicas` still run while a scale-in removes them.
    let pods_up =
        sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0).max(sts.status.as_ref().map_or(0, |s| s.replicas));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
    let nodes: Api<Node> = Api::all(client.clone());
    let mut zones: BTreeMap<String, Option<String>> = BTreeMap::new();
    for ordinal in 0..pods_up {
        let name = names.pod(ordinal);
        let Some(pod) = pods.get_opt(&name).await? else { continue };
        let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
        let zone = match zones.get(&node_name) {
            Some(z) => z.clone(),
            None => {
                // A Node already gone: its pod is about to go too; its zone stays as it was.
                let Some(node) = nodes.get_opt(&node_name).await? else { continue };
                let zone = node_zone(&node);
                zones.insert(node_name, zone.clone());
                zone
            }
        };
        if let Some(patch) = annotation_patch(&pod, zone.as_deref()) {
            pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            tracing::info!(pod = %name, zone = zone.as_deref().unwrap_or(""), "node pod zone");
        }
    }
    Ok(Action::requeue(RECHECK))
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::{json, Value};

    use super::super::mock::*;
    use crate::topology::tests::cluster;

    const STS: &str = "/apis/apps/v1/namespaces/telemetry/statefulsets/obs-node";
    const PODS: &str = "/api/v1/namespaces/telemetry/pods";

    fn sts(replicas: i32, running: i32) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "obs-node", "namespace": "telemetry"},
               "spec": {"replicas": replicas, "serviceName": "obs-node", "selector": {}, "template": {}},
               "status": {"replicas": running}})
    }

    fn pod(ordinal: i32, node: Option<&str>, zone: Option<&str>) -> Value {
        let annotations = zone.map_or(json!({}), |z| json!({"sextant.dev/zone": z}));
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("obs-node-{ordinal}"), "namespace": "telemetry", "annotations": annotations},
               "spec": {"containers": [], "nodeName": node}})
    }

    fn node(name: &str, zone: Option<&str>) -> Value {
        let labels =
            zone.map_or(json!({"kubernetes.io/hostname": name}), |z| json!({"topology.kubernetes.io/zone": z}));
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
    }

    fn expect_zone(zone: Option<&'static str>) -> impl Fn(&Value) + Send + 'static {
        move |b: &Value| assert_eq!(b, &json!({"metadata": {"annotations": {"sextant.dev/zone": zone}}}))
    }

    #[tokio::test]
    async fn node_pods_get_the_zone_of_their_kubernetes_node_once() {
        let c = cluster(3, 3);
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let steps = vec![
            Step::get(STS).reply(200, sts(3, 3)),
            // Scheduled, not annotated yet: the Node's zone is copied onto it.
            Step::get(&format!("{PODS}/obs-node-0")).reply(200, pod(0, Some("worker-1"), None)),
            Step::get("/api/v1/nodes/worker-1").reply(200, node("worker-1", Some("eu-west-1a"))),
            Step::new(Method::PATCH, &format!("{PODS}/obs-node-0"))
                .expect_body(expect_zone(Some("eu-west-1a")))
                .reply(200, pod(0, Some("worker-1"), Some("eu-west-1a"))),
            // Same Kubernetes node, already right: neither read again nor patched.
            Step::get(&format!("{PODS}/obs-node-1")).reply(200, pod(1, Some("worker-1"), Some("eu-west-1a"))),
            // Not scheduled yet: nothing to do until the next round.
            Step::get(&format!("{PODS}/obs-node-2")).reply(200, pod(2, None, None)),
        ];
        let action = mock.run(steps, json!({}), super::reconcile(c.into(), ctx)).await.unwrap();
        assert_eq!(action, kube::runtime::controller::Action::requeue(super::RECHECK));
    }

    #[tokio::test]
    async fn a_changed_or_missing_zone_label_is_followed_and_pods_being_removed_count() {
        let c = cluster(1, 1);
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let steps = vec![
            // Scaling in from 3: pods 1 and 2 still run.
            Step::get(STS).reply(200, sts(1, 3)),
            Step::get(&format!("{PODS}/obs-node-0")).reply(200, pod(0, Some("worker-1"), Some("eu-west-1a"))),
            Step::get("/api/v1/nodes/worker-1").reply(200, node("worker-1", Some("eu-west-1b"))),
            Step::new(Method::PATCH, &format!("{PODS}/obs-node-0"))
                .expect_body(expect_zone(Some("eu-west-1b")))
                .reply(200, pod(0, Some("worker-1"), Some("eu-west-1b"))),
            Step::get(&format!("{PODS}/obs-node-1")).reply(200, pod(1, Some("worker-2"), Some("eu-west-1a"))),
            Step::get("/api/v1/nodes/worker-2").reply(200, node("worker-2", None)),
            Step::new(Method::PATCH, &format!("{PODS}/obs-node-1"))
                .expect_body(expect_zone(None))
                .reply(200, pod(1, Some("worker-2"), None)),
            Step::get(&format!("{PODS}/obs-node-2")).not_found(),
        ];
        mock.run(steps, json!({}), super::reconcile(c.into(), ctx)).await.unwrap();
    }

    #[tokio::test]
    async fn a_cluster_without_its_statefulset_waits() {
        let c = cluster(3, 3);
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let steps = vec![Step::get(STS).not_found()];
        mock.run(steps, json!({}), super::reconcile(c.into(), ctx)).await.unwrap();
    }
}
