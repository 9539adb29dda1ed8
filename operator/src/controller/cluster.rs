//! `SextantCluster` → Secret, ConfigMap, ServiceAccounts, Services, node StatefulSet, router
//! Deployment, PDB, NetworkPolicies, and the scaling steps of docs/ARCHITECTURE.md, "Membership, placement and drains".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;

use super::{apply, instrumented, volume_expansion, write_status, Context, Error};
use crate::admin::{DrainRequest, PlacementRequest};
use crate::conditions::{self, Desired};
use crate::scaling::{self, Notice, Observed, ScalingAction, ScalingPlan, StatefulSetState};
use crate::topology::{self, Names, Owned};
use crate::v1alpha1::{
    ClusterPhase, MembershipState, NodeMembership, ScalingStep, SextantCluster, SextantClusterStatus,
};

pub async fn reconcile(cluster: Arc<SextantCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("sextantcluster", cluster.clone(), ctx.clone(), reconcile_inner(cluster, ctx)).await
}

async fn reconcile_inner(cluster: Arc<SextantCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let names = Names::of(&cluster)?;
    let client = &ctx.client;
    let api: Api<SextantCluster> = Api::namespaced(client.clone(), &names.namespace);
    let previous = cluster.status.clone().unwrap_or_default();
    let generation = cluster.metadata.generation;
    let now = (ctx.clock)();

    if cluster.spec.cluster_operation.reconciliation_paused {
        let mut status = previous.clone();
        conditions::merge(
            &mut status.conditions,
            Desired::new(
                conditions::PROGRESSING,
                false,
                "ReconciliationPaused",
                "spec.clusterOperation.reconciliationPaused is set",
            ),
            generation,
            now,
        );
        status.phase = Some(ClusterPhase::Paused);
        status.observed_generation = generation;
        write_status(&api, &cluster, cluster.status.as_ref(), &status).await?;
        return Ok(Action::await_change());
    }

    // Generated once: an existing Secret is never rewritten (create fails with 409 instead).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &names.namespace);
    let secret = match secrets.get_opt(&names.secret()).await? {
        Some(s) => s,
        None => {
            let fresh = topology::internal_secret(&cluster, || (ctx.secrets)())?;
            match secrets.create(&PostParams::default(), &fresh).await {
                Ok(created) => {
                    ctx.event(cluster.as_ref(), false, "SecretCreated", format!("generated {}", names.secret())).await;
                    created
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    return Err(Error::Waiting(format!("{} was created concurrently", names.secret())))
                }
                Err(e) => return Err(e.into()),
            }
        }
    };

    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let sts = statefulsets.get_opt(&names.nodes()).await?;
    let sts_state = sts.as_ref().map(|s| StatefulSetState {
        replicas: s.spec.as_ref().and_then(|x| x.replicas).unwrap_or(1),
        current: s.status.as_ref().map_or(0, |x| x.replicas),
        ready: s.status.as_ref().and_then(|x| x.ready_replicas).unwrap_or(0),
    });
    // Volume expansion and claim-template drift (controller/volume_expansion.rs).
    let storage_volumes =
        volume_expansion::prepare(&ctx, &cluster, &names, sts.as_ref(), previous.scaling.is_some()).await?;

    // Membership is asked only of a cluster that can answer; an unreachable admin API leaves
    // it unknown, which stops scaling steps but nothing else.
    let admin = ctx.connect(&cluster, &secret)?;
    let membership = if sts_state.is_some_and(|s| s.ready > 0) {
        match admin.nodes().await {
            Ok(list) => Some(
                list.nodes
                    .iter()
                    .filter_map(|n| Some((names.ordinal_of(&n.address)?, n.state)))
                    .collect::<BTreeMap<i32, MembershipState>>(),
            ),
            Err(e) => {
                tracing::warn!(cluster = %names.cluster, error = %e, "membership unknown");
                None
            }
        }
    } else {
        None
    };

    let mut volumes = std::collections::BTreeSet::new();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &names.namespace);
    if let Some(op) = previous.scaling.as_ref().filter(|op| op.step == ScalingStep::DeleteVolume) {
        if let Some(node) = op.node {
            if pvcs.get_opt(&names.volume(node)).await?.is_some() {
                volumes.insert(node);
            }
        }
    }

    let observed = Observed { statefulset: sts_state, membership: membership.clone(), volumes };
    // 0 is never a recorded size (nodes >= 1): it is a status written before any node existed,
    // e.g. while paused, and must not turn the first start into a scale-out from zero.
    let recorded = cluster.status.as_ref().map(|s| s.storage_nodes).filter(|n| *n > 0);
    let spec = &cluster.spec.storage;
    let plan = if cluster.spec.cluster_operation.stopped {
        scaling::hold(spec.nodes, recorded, previous.scaling.as_ref(), &observed)
    } else {
        scaling::plan(spec.nodes, spec.replication_factor, recorded, previous.scaling.as_ref(), &observed)
    };

    let mut ready_routers = 0;
    // A new revision being rolled out (image or resources changed) is progress too.
    let mut rolling_out = sts
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .is_some_and(|st| st.update_revision.is_some() && st.update_revision != st.current_revision);
    let operator_namespace = client.default_namespace();
    for object in topology::owned_objects(&cluster, plan.statefulset_replicas, plan.peer_nodes, operator_namespace)? {
        match object {
            Owned::ConfigMap(o) => drop(apply(client, &names.namespace, &o).await?),
            Owned::ServiceAccount(o) => drop(apply(client, &names.namespace, &o).await?),
            Owned::NetworkPolicy(o) => drop(apply(client, &names.namespace, &o).await?),
            Owned::Service(o) => drop(apply(client, &names.namespace, &o).await?),
            Owned::StatefulSet(o) => {
                if let Some(o) = storage_volumes.statefulset(o) {
                    drop(apply(client, &names.namespace, &o).await?);
                }
            }
            Owned::Deployment(o) => {
                let applied = apply(client, &names.namespace, &o).await?;
                let st = applied.status.unwrap_or_default();
                ready_routers = st.ready_replicas.unwrap_or(0);
                rolling_out |= st.updated_replicas.unwrap_or(0) < st.replicas.unwrap_or(0);
            }
            Owned::PodDisruptionBudget(o) => drop(apply(client, &names.namespace, &o).await?),
        }
    }
    if !cluster.spec.network_policy.enabled {
        // Turned off after being on: remove what an earlier reconcile applied.
        let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &names.namespace);
        for name in [names.nodes(), names.routers()] {
            match policies.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    for action in &plan.actions {
        match *action {
            ScalingAction::PlaceReplicas { nodes } => {
                let nodes = (0..nodes).map(|i| names.node_address(i)).collect();
                admin.place_replicas(&PlacementRequest { nodes }).await?;
            }
            ScalingAction::Drain { ordinal } => {
                admin.drain(&DrainRequest { address: names.node_address(ordinal) }).await?;
            }
            ScalingAction::DeleteVolume { ordinal } => {
                match pvcs.delete(&names.volume(ordinal), &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }

    let was_blocked = conditions::is_true(&previous.conditions, conditions::BLOCKED);
    for notice in &plan.notices {
        let (warning, reason, note) = match notice {
            Notice::Started { from, to } => {
                (false, "ScalingStarted", format!("scaling storage from {from} to {to} nodes"))
            }
            Notice::Blocked { message } if !was_blocked => (true, "ScaleInBlocked", message.clone()),
            Notice::Blocked { .. } => continue,
            Notice::NodeRemoved { ordinal } => {
                (false, "NodeRemoved", format!("node {ordinal} drained, removed and its volume deleted"))
            }
            Notice::Completed { nodes } => (false, "ScalingCompleted", format!("storage has {nodes} nodes")),
        };
        ctx.event(cluster.as_ref(), warning, reason, note).await;
    }

    let ready_nodes = sts_state.map_or(0, |s| s.ready);
    let readiness = Readiness { nodes: ready_nodes, routers: ready_routers, rolling_out };
    let mut status = cluster_status(&cluster, &names, &previous, &plan, readiness, membership.as_ref(), now);
    storage_volumes.merge_into(&previous.conditions, &mut status, generation, now);
    write_status(&api, &cluster, cluster.status.as_ref(), &status).await?;

    // Scaling steps wait on pods and on meta: look again soon rather than only on changes.
    Ok(if status.scaling.is_some() || storage_volumes.in_progress() {
        Action::requeue(Duration::from_secs(10))
    } else {
        Action::requeue(Duration::from_secs(300))
    })
}

/// What the workloads report.
struct Readiness {
    nodes: i32,
    routers: i32,
    rolling_out: bool,
}

fn cluster_status(
    cluster: &SextantCluster,
    names: &Names,
    previous: &SextantClusterStatus,
    plan: &ScalingPlan,
    readiness: Readiness,
    membership: Option<&BTreeMap<i32, MembershipState>>,
    now: k8s_openapi::jiff::Timestamp,
) -> SextantClusterStatus {
    let Readiness { nodes: ready_nodes, routers: ready_routers, rolling_out } = readiness;
    let stopped = cluster.spec.cluster_operation.stopped;
    let members = plan.member_nodes;
    let available = !stopped && ready_routers > 0 && ready_nodes > members / 2;
    let mut desired = vec![
        if stopped {
            Desired::new(conditions::AVAILABLE, false, "Stopped", "spec.clusterOperation.stopped is set")
        } else if available {
            Desired::new(
                conditions::AVAILABLE,
                true,
                "QuorumReady",
                format!("{ready_nodes}/{members} nodes and {ready_routers} routers ready"),
            )
        } else {
            Desired::new(
                conditions::AVAILABLE,
                false,
                "NotReady",
                format!("{ready_nodes}/{members} nodes and {ready_routers} routers ready"),
            )
        },
        match &plan.operation {
            Some(op) => Desired::new(
                conditions::PROGRESSING,
                true,
                "Scaling",
                format!(
                    "{} → {} nodes: {:?}{}",
                    op.from,
                    op.to,
                    op.step,
                    op.node.map(|n| format!(" node {n}")).unwrap_or_default()
                ),
            ),
            None if rolling_out => Desired::new(
                conditions::PROGRESSING,
                true,
                "RollingOut",
                "a new revision of nodes or routers is rolling out",
            ),
            None => Desired::new(conditions::PROGRESSING, false, "Stable", ""),
        },
        if !stopped && ready_nodes < members {
            Desired::new(conditions::DEGRADED, true, "NodesNotReady", format!("{ready_nodes}/{members} nodes ready"))
        } else {
            Desired::new(conditions::DEGRADED, false, "AllNodesReady", "")
        },
    ];
    desired.push(match &plan.blocked {
        Some(message) => Desired::new(conditions::BLOCKED, true, "ScaleInRefused", message.clone()),
        None => Desired::new(conditions::BLOCKED, false, "NotBlocked", ""),
    });
    let phase = if stopped {
        ClusterPhase::Stopped
    } else if plan.blocked.is_some() {
        ClusterPhase::Blocked
    } else if plan.operation.is_some() {
        ClusterPhase::Scaling
    } else if available {
        ClusterPhase::Running
    } else {
        ClusterPhase::Pending
    };
    let nodes = match membership {
        Some(m) => m.iter().map(|(o, s)| NodeMembership { ordinal: *o, pod: names.pod(*o), state: *s }).collect(),
        None => previous.nodes.clone(),
    };
    SextantClusterStatus {
        observed_generation: cluster.metadata.generation,
        conditions: conditions::rebuild(&previous.conditions, desired, cluster.metadata.generation, now),
        phase: Some(phase),
        storage_nodes: members,
        ready_nodes,
        ready_routers,
        selector: Some(topology::node_selector_string(names)),
        nodes,
        scaling: plan.operation.clone(),
        secret_name: Some(names.secret()),
        router_url: Some(names.router_url(cluster.spec.routers.service.http_port, cluster.spec.tls.is_some())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use crate::admin::fake::Call;
    use crate::admin::ClusterNode;
    use crate::topology::tests::cluster;
    use crate::v1alpha1::{ScalingOperation, SextantClusterStatus};
    use http::Method;
    use serde_json::json;

    fn secret_json() -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "obs-internal", "namespace": "telemetry"},
               "data": {"admin-token": "dG9rZW4=", "cluster-secret": "Yw==", "jwt-signing-key": "ag=="}})
    }

    fn sts_json(replicas: i32, ready: i32) -> serde_json::Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "obs-node", "namespace": "telemetry"},
               "spec": {"replicas": replicas, "serviceName": "obs-node", "selector": {}, "template": {}},
               "status": {"replicas": replicas, "readyReplicas": ready}})
    }

    fn applies(deployment_ready: i32) -> Vec<Step> {
        let ns = "/namespaces/telemetry";
        vec![
            Step::apply(&format!("/api/v1{ns}/configmaps/obs-config")),
            Step::apply(&format!("/api/v1{ns}/serviceaccounts/obs-node")),
            Step::apply(&format!("/api/v1{ns}/serviceaccounts/obs-router")),
            Step::apply(&format!("/api/v1{ns}/services/obs-node")),
            Step::apply(&format!("/apis/apps/v1{ns}/statefulsets/obs-node")),
            Step::apply(&format!("/apis/apps/v1{ns}/deployments/obs-router")).reply(
                200,
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "obs-router"},
                                   "status": {"readyReplicas": deployment_ready}}),
            ),
            Step::apply(&format!("/api/v1{ns}/services/obs-router")),
            Step::apply(&format!("/api/v1{ns}/services/obs-router-internal")),
            Step::apply(&format!("/apis/policy/v1{ns}/poddisruptionbudgets/obs-node")),
            Step::apply(&format!("/apis/networking.k8s.io/v1{ns}/networkpolicies/obs-node")),
            Step::apply(&format!("/apis/networking.k8s.io/v1{ns}/networkpolicies/obs-router")),
        ]
    }

    /// Positions of the StatefulSet and the router Deployment in [`applies`].
    const STS_AT: usize = 4;
    const ROUTERS_AT: usize = 5;

    const SECRET: &str = "/api/v1/namespaces/telemetry/secrets/obs-internal";
    const STS: &str = "/apis/apps/v1/namespaces/telemetry/statefulsets/obs-node";
    const STATUS: &str = "/apis/sextant.dev/v1alpha1/namespaces/telemetry/sextantclusters/obs/status";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/telemetry/events";

    fn settled(c: &mut crate::v1alpha1::SextantCluster, nodes: i32) {
        // The status a previous reconcile wrote for a healthy cluster of `nodes`.
        let plan = crate::scaling::plan(nodes, 3, Some(nodes), None, &Default::default());
        let names = crate::topology::Names::of(c).unwrap();
        let membership = (0..nodes).map(|i| (i, crate::v1alpha1::MembershipState::Active)).collect();
        c.status = Some(super::cluster_status(
            c,
            &names,
            &SextantClusterStatus::default(),
            &plan,
            super::Readiness { nodes, routers: 2, rolling_out: false },
            Some(&membership),
            fixed_now(),
        ));
    }

    fn active_nodes(n: i32) -> Vec<ClusterNode> {
        (0..n)
            .map(|i| ClusterNode {
                id: i as u64 + 1,
                address: format!("obs-node-{i}.obs-node.telemetry.svc:7000"),
                state: crate::v1alpha1::MembershipState::Active,
            })
            .collect()
    }

    #[tokio::test]
    async fn create_generates_the_secret_and_applies_every_object() {
        let c = cluster(3, 3);
        let mut steps = vec![
            Step::get(SECRET).not_found(),
            Step::new(Method::POST, "/api/v1/namespaces/telemetry/secrets")
                .expect_body(|b| {
                    assert_eq!(b["stringData"]["admin-token"], "secret-3");
                    assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "SextantCluster");
                })
                .reply(201, secret_json()),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "SecretCreated")),
            Step::get(STS).not_found(),
        ];
        steps.extend(applies(0));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(b["status"]["storageNodes"], 3);
            assert_eq!(b["status"]["phase"], "Pending");
            assert_eq!(b["status"]["observedGeneration"], 1);
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let action = mock
            .run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(300)));
        assert_eq!(admin.calls(), vec![Call::Connect("http://obs-router-internal.telemetry.svc:9090".into())]);
    }

    #[tokio::test]
    async fn statefulset_carries_the_peers_and_the_owner() {
        let c = cluster(3, 3);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).not_found()];
        let mut objs = applies(0);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| {
            assert_eq!(b["spec"]["replicas"], 3);
            assert_eq!(b["metadata"]["ownerReferences"][0]["name"], "obs");
        });
        objs[0] = Step::apply("/api/v1/namespaces/telemetry/configmaps/obs-config").expect_body(|b| {
            assert_eq!(b["data"]["peers"], "1=obs-node-0.obs-node.telemetry.svc:7000,2=obs-node-1.obs-node.telemetry.svc:7000,3=obs-node-2.obs-node.telemetry.svc:7000");
        });
        steps.extend(objs);
        steps.push(Step::new(Method::PATCH, STATUS));
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn disabling_the_network_policy_deletes_the_applied_policies() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.network_policy.enabled = false;
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        let mut objs = applies(2);
        // Neither NetworkPolicy (the last two) is applied.
        objs.truncate(objs.len() - 2);
        steps.extend(objs);
        let ns = "/apis/networking.k8s.io/v1/namespaces/telemetry/networkpolicies";
        steps.push(
            Step::new(Method::DELETE, &format!("{ns}/obs-node"))
                .reply(200, json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})),
        );
        // Already gone (deleted by hand): not an error.
        steps.push(Step::new(Method::DELETE, &format!("{ns}/obs-router")).not_found());
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn no_op_when_everything_is_as_recorded() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        steps.extend(applies(2));
        // No status write: nothing changed.
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(admin.calls().contains(&Call::Nodes));
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::Drain(_) | Call::PlaceReplicas(_))));
    }

    #[tokio::test]
    async fn update_applies_the_new_spec_and_records_the_generation() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.routers.replicas = 4;
        c.spec.image = "ghcr.io/sextant-dev/sextant:0.2.0".into();
        c.metadata.generation = Some(2);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| {
            assert_eq!(b["spec"]["template"]["spec"]["containers"][0]["image"], "ghcr.io/sextant-dev/sextant:0.2.0");
            assert_eq!(b["spec"]["replicas"], 3);
        });
        objs[ROUTERS_AT] = Step::apply("/apis/apps/v1/namespaces/telemetry/deployments/obs-router")
            .expect_body(|b| assert_eq!(b["spec"]["replicas"], 4))
            .reply(
                200,
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "obs-router"},
                               "status": {"readyReplicas": 2}}),
            );
        steps.extend(objs);
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(b["status"]["observedGeneration"], 2);
            assert!(b["status"]["conditions"].as_array().unwrap().iter().all(|c| c["observedGeneration"] == 2));
            assert_eq!(b["status"]["phase"], "Running");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_rollout_in_progress_is_reported_as_progressing() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        let mut sts = sts_json(3, 3);
        sts["status"]["currentRevision"] = json!("obs-node-1");
        sts["status"]["updateRevision"] = json!("obs-node-2");
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts)];
        steps.extend(applies(2));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let p = b["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Progressing")
                .unwrap()
                .clone();
            assert_eq!((p["status"].as_str(), p["reason"].as_str()), (Some("True"), Some("RollingOut")));
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn scale_out_grows_the_statefulset_and_records_the_step() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.storage.nodes = 5;
        c.metadata.generation = Some(2);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| assert_eq!(b["spec"]["replicas"], 5));
        steps.extend(objs);
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "ScalingStarted")));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(b["status"]["scaling"], json!({"from": 3, "to": 5, "step": "GrowStatefulSet"}));
            assert_eq!(b["status"]["phase"], "Scaling");
            assert_eq!(b["status"]["storageNodes"], 3);
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        let action = mock
            .run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn scale_in_below_replication_factor_is_blocked_with_an_event() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.storage.nodes = 2;
        c.metadata.generation = Some(2);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| assert_eq!(b["spec"]["replicas"], 3));
        steps.extend(objs);
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| {
            assert_eq!(b["reason"], "ScaleInBlocked");
            assert_eq!(b["type"], "Warning");
        }));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let blocked =
                b["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Blocked").unwrap().clone();
            assert_eq!(blocked["status"], "True");
            assert_eq!(blocked["reason"], "ScaleInRefused");
            assert_eq!(blocked["observedGeneration"], 2);
            assert_eq!(b["status"]["phase"], "Blocked");
            assert!(b["status"].get("scaling").is_none());
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::Drain(_))));
    }

    #[tokio::test]
    async fn scale_in_deletes_the_volume_after_the_pod_is_gone() {
        let mut c = cluster(3, 3);
        settled(&mut c, 4);
        let status = c.status.as_mut().unwrap();
        status.scaling =
            Some(ScalingOperation { from: 4, to: 3, step: crate::v1alpha1::ScalingStep::Shrink, node: Some(3) });
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        steps.extend(applies(2));
        steps.push(
            Step::new(Method::DELETE, "/api/v1/namespaces/telemetry/persistentvolumeclaims/data-obs-node-3").reply(
                200,
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-obs-node-3"}}),
            ),
        );
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(b["status"]["scaling"]["step"], "DeleteVolume");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_refused_pod_template_applies_nothing_and_says_why() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.storage.pod.env =
            vec![k8s_openapi::api::core::v1::EnvVar { name: "SEXTANT_PEERS".into(), ..Default::default() }];
        let c = std::sync::Arc::new(c);
        let steps = vec![
            Step::get(SECRET).reply(200, secret_json()),
            Step::get(STS).reply(200, sts_json(3, 3)),
            // No apply at all: the Warning Event names the field.
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!(b["reason"], "ReconcileFailed");
                let note = b["note"].as_str().unwrap();
                assert!(note.contains("storage.pod") && note.contains("SEXTANT_PEERS"), "{note}");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        let err = mock.run(steps, serde_json::to_value(c.as_ref()).unwrap(), super::reconcile(c.clone(), ctx)).await;
        assert!(matches!(err, Err(super::Error::Topology(_))), "{err:?}");
    }

    #[tokio::test]
    async fn api_error_fails_the_reconcile_and_backs_off() {
        let c = std::sync::Arc::new(cluster(3, 3));
        let steps = vec![
            Step::get(SECRET).reply(500, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcd timeout", "reason": "InternalError", "code": 500})),
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!(b["reason"], "ReconcileFailed");
                assert_eq!(b["type"], "Warning");
            }),
        ];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let err = mock.run(steps, json!({}), super::reconcile(c.clone(), ctx.clone())).await.unwrap_err();
        assert!(matches!(err, super::Error::Kube(_)), "{err}");
        let first = super::super::error_policy(c.clone(), &err, ctx.clone());
        let second = super::super::error_policy(c.clone(), &err, ctx.clone());
        assert_eq!(first, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(5)));
        assert_eq!(second, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn cluster_created_paused_starts_at_full_size_when_resumed() {
        let mut c = cluster(3, 3);
        // What the paused reconcile wrote: no node count yet.
        c.status = Some(SextantClusterStatus {
            observed_generation: Some(1),
            phase: Some(crate::v1alpha1::ClusterPhase::Paused),
            ..SextantClusterStatus::default()
        });
        c.metadata.generation = Some(2);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).not_found()];
        let mut objs = applies(0);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| assert_eq!(b["spec"]["replicas"], 3));
        steps.extend(objs);
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert!(b["status"].get("scaling").is_none(), "{b}");
            assert_eq!(b["status"]["storageNodes"], 3);
        }));
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn paused_cluster_only_reports_it() {
        let mut c = cluster(3, 3);
        c.spec.cluster_operation.reconciliation_paused = true;
        let steps = vec![Step::new(Method::PATCH, STATUS).expect_body(|b| assert_eq!(b["status"]["phase"], "Paused"))];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let action = mock
            .run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert_eq!(action, kube::runtime::controller::Action::await_change());
        assert!(admin.calls().is_empty());
    }

    fn with_claim_template(size: &str) -> serde_json::Value {
        let mut sts = sts_json(3, 3);
        sts["spec"]["volumeClaimTemplates"] =
            json!([{"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": size}}}}]);
        sts
    }

    fn data_pvc(n: i32, requested: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": format!("data-obs-node-{n}")},
               "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": requested}}},
               "status": {"capacity": {"storage": "10Gi"}}})
    }

    const PVCS: &str = "/api/v1/namespaces/telemetry/persistentvolumeclaims";

    #[tokio::test]
    async fn a_grown_volume_size_recreates_the_statefulset_instead_of_applying_it() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.storage.volume_size = k8s_openapi::apimachinery::pkg::api::resource::Quantity("20Gi".into());
        c.metadata.generation = Some(2);
        let mut steps =
            vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, with_claim_template("10Gi"))];
        for n in 0..3 {
            steps.push(Step::get(&format!("{PVCS}/data-obs-node-{n}")).reply(200, data_pvc(n, "10Gi")));
        }
        // The default class Kubernetes wrote into the PVCs decides.
        steps.push(Step::get("/apis/storage.k8s.io/v1/storageclasses/standard").reply(
            200,
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
                   "provisioner": "csi.example.com", "allowVolumeExpansion": true}),
        ));
        for n in 0..3 {
            steps.push(Step::new(Method::PATCH, &format!("{PVCS}/data-obs-node-{n}")).reply(200, data_pvc(n, "20Gi")));
        }
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "VolumeExpansionStarted")));
        steps.push(
            Step::new(Method::DELETE, STS)
                .expect_body(|b| assert_eq!(b["propagationPolicy"], "Orphan"))
                .reply(200, sts_json(3, 3)),
        );
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "StatefulSetRecreated")));
        // Everything else is applied; the StatefulSet is not (it is being recreated).
        let mut objs = applies(2);
        objs.remove(STS_AT);
        steps.extend(objs);
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let c = b["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "VolumeExpansion").unwrap();
            assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("True"), Some("Expanding")), "{c}");
            assert!(c["message"].as_str().unwrap().starts_with("0/3 volumes at 20Gi"), "{c}");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        let action = mock
            .run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn a_volume_size_the_statefulset_cannot_take_is_reported_not_applied() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.storage.volume_size = k8s_openapi::apimachinery::pkg::api::resource::Quantity("5Gi".into());
        c.metadata.generation = Some(2);
        let mut steps =
            vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, with_claim_template("10Gi"))];
        for n in 0..3 {
            steps.push(Step::get(&format!("{PVCS}/data-obs-node-{n}")).reply(200, data_pvc(n, "10Gi")));
        }
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "ShrinkRefused")));
        let mut objs = applies(2);
        // Applied with the live claim template, which the API server accepts.
        objs[STS_AT] = Step::apply(STS).expect_body(|b| {
            assert_eq!(b["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"], "10Gi");
        });
        steps.extend(objs);
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let c = b["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "VolumeExpansion").unwrap();
            assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("ShrinkRefused")), "{c}");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        let action = mock
            .run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(300)));
    }
}
