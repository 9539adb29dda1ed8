//! `SextantCluster` → Secret, ConfigMap, ServiceAccounts, Services, node StatefulSet, router
//! Deployment, PDB, NetworkPolicies, and the scaling steps of docs/ARCHITECTURE.md, "Membership, placement and drains".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;

use super::{apply, instrumented, volume_expansion, write_status, Context, Error};
use crate::admin::{AdminError, DrainRequest, NodeIdentities, PlacementRequest};
use crate::conditions::{self, Desired};
use crate::replacement::{self, IdentityState, Policy, Removal, RemovalCandidate, ReplacementDecision};
use crate::scaling::{self, Notice, Observed, ScalingAction, ScalingPlan, StatefulSetState, Timing};
use crate::topology::{self, Names, Owned};
use crate::v1alpha1::{
    ClusterPhase, InternalTlsMode, MembershipState, NodeMembership, NodeReplacementProgress, ReplacementPhase,
    ScalingStep, SextantCluster, SextantClusterStatus, ZoneSpread,
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
        ctx.metrics.observe_cluster(&names.namespace, &names.cluster, cluster.spec.storage.nodes, &status);
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
    // Internal TLS switches one rolling restart at a time (docs/KUBERNETES.md, "TLS"); the
    // routers' rollout is read only then.
    let tls_target = crate::internal_tls::target_mode(cluster.spec.internal_tls.enabled);
    let rolled_out = previous.internal_tls_mode.is_some_and(|m| m != tls_target)
        && sts.as_ref().is_some_and(statefulset_rolled_out)
        && Api::<Deployment>::namespaced(client.clone(), &names.namespace)
            .get_opt(&names.routers())
            .await?
            .as_ref()
            .is_some_and(deployment_rolled_out);
    let tls_mode = crate::internal_tls::next_mode(
        cluster.spec.internal_tls.enabled,
        previous.internal_tls_mode,
        sts.is_some(),
        rolled_out,
    );
    if previous.internal_tls_mode.is_some_and(|m| m != tls_mode) {
        let note = format!("node and router pods roll to internal TLS mode {tls_mode}");
        ctx.event(cluster.as_ref(), false, "InternalTlsSwitching", note).await;
    }
    // Before the pods that mount them.
    if tls_mode != InternalTlsMode::Off {
        super::internal_tls::ensure(&ctx, &cluster, &names).await?;
    }

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
    let mut ids = BTreeMap::new();
    let mut zones = BTreeMap::new();
    let membership = if sts_state.is_some_and(|s| s.ready > 0) {
        match admin.nodes().await {
            Ok(list) => Some(
                list.nodes
                    .iter()
                    .filter_map(|n| {
                        let ordinal = names.ordinal_of(&n.address)?;
                        ids.insert(ordinal, n.id);
                        zones.insert(ordinal, n.zone.clone());
                        Some((ordinal, n.state))
                    })
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
    let (identities, spread) = match membership {
        Some(_) => (
            answer(&names, "node identities unknown", admin.identities()).await,
            answer(&names, "zone spread unknown", admin.groups()).await,
        ),
        None => (None, None),
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

    let spec = &cluster.spec.storage;
    let timing = Timing {
        now,
        scale_out_timeout: Duration::from_secs(u64::try_from(spec.scale_out_timeout_seconds).unwrap_or(0)),
    };
    // Past the timeout, say which new pods are not ready and why.
    let mut not_ready = BTreeMap::new();
    if let Some(op) = previous.scaling.as_ref().filter(|op| op.step == ScalingStep::GrowStatefulSet && !op.cancelled) {
        if scaling::past_timeout(op, timing) {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
            for ordinal in op.from..op.to {
                let name = names.pod(ordinal);
                match pods.get_opt(&name).await? {
                    Some(pod) if pod_ready(&pod) => {}
                    Some(pod) => drop(not_ready.insert(ordinal, format!("{name} {}", why_not_ready(&pod)))),
                    None => drop(not_ready.insert(ordinal, format!("{name} does not exist"))),
                }
            }
        }
    }
    let failed = &spec.failed_nodes;
    let excluded: std::collections::BTreeSet<i32> = failed.remove.iter().copied().collect();
    let observed = Observed {
        statefulset: sts_state,
        membership: membership.clone(),
        volumes,
        not_ready,
        excluded: excluded.clone(),
    };
    // 0 is never a recorded size (nodes >= 1): it is a status written before any node existed,
    // e.g. while paused, and must not turn the first start into a scale-out from zero.
    let recorded = cluster.status.as_ref().map(|s| s.storage_nodes).filter(|n| *n > 0);

    // Nodes that restarted on an empty volume (docs/RELIABILITY.md, "Replacing a node").
    let states: Option<Vec<IdentityState>> =
        identities.as_ref().map(|i| i.nodes.iter().map(IdentityState::from).collect());
    let policy = Policy {
        automatic: failed.automatic_replacement,
        approved: failed.replace.iter().filter_map(|o| ids.get(o).copied()).collect(),
    };
    let rf = u32::try_from(spec.replication_factor).unwrap_or(1);
    let replacement = replacement::plan(states.as_deref(), rf, previous.scaling.is_some(), &policy);
    let replacing =
        states.iter().flatten().any(|n| n.replacing) || matches!(replacement, ReplacementDecision::Replace { .. });
    // No scaling starts while an id changes hands; one in progress goes on.
    let target = match recorded {
        Some(size) if replacing && previous.scaling.is_none() => size,
        _ => spec.nodes,
    };
    let plan = if cluster.spec.cluster_operation.stopped {
        scaling::hold(spec.nodes, recorded, previous.scaling.as_ref(), &observed)
    } else {
        scaling::plan(target, spec.replication_factor, recorded, previous.scaling.as_ref(), &observed, timing)
    };

    // Dead nodes listed for removal; a pod is looked at only while its node may be removed.
    let mut candidates = vec![];
    if let Some(m) = membership.as_ref() {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
        for &ordinal in &excluded {
            let state = m.get(&ordinal).copied();
            let pod_ready = match state {
                Some(MembershipState::Draining | MembershipState::Drained) | None => None,
                Some(_) => Some(pods.get_opt(&names.pod(ordinal)).await?.is_some_and(|p| pod_ready(&p))),
            };
            candidates.push(RemovalCandidate { ordinal, id: ids.get(&ordinal).copied(), state, pod_ready });
        }
    }
    let busy = previous.scaling.is_some() || plan.operation.is_some() || replacing;
    let removals =
        membership.as_ref().map(|m| replacement::plan_removals(&candidates, m, rf, busy)).unwrap_or_default();

    let mut ready_routers = 0;
    // A new revision being rolled out (image or resources changed) is progress too.
    let mut rolling_out = sts
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .is_some_and(|st| st.update_revision.is_some() && st.update_revision != st.current_revision);
    let operator_namespace = client.default_namespace();
    let objects =
        topology::owned_objects_in(&cluster, plan.statefulset_replicas, plan.peer_nodes, operator_namespace, tls_mode)?;
    for object in objects {
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
                let nodes = (0..nodes).filter(|i| !excluded.contains(i)).map(|i| names.node_address(i)).collect();
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

    if let ReplacementDecision::Replace { id } = replacement {
        idempotent(admin.replace_node(id).await, "not_replaceable")?;
        let pod = ordinal_of_id(&ids, id).map(|o| names.pod(o)).unwrap_or_else(|| format!("node {id}"));
        ctx.event(
            cluster.as_ref(),
            false,
            "NodeReplacementStarted",
            format!("replacing {pod} (node id {id}), which restarted on an empty volume"),
        )
        .await;
    }
    for removal in &removals {
        if let Removal::Remove { ordinal, id } = *removal {
            admin.remove_node(id).await?;
            ctx.event(
                cluster.as_ref(),
                false,
                "NodeRemovalStarted",
                format!("moving every replica off {} (node id {id})", names.pod(ordinal)),
            )
            .await;
        }
    }
    // Taken off the remove list: a member again once every node pod is ready and nothing else
    // runs (placement is idempotent).
    let restore =
        membership.as_ref().map(|m| replacement::to_restore(m, plan.member_nodes, &excluded)).unwrap_or_default();
    let all_ready = sts_state.is_some_and(|s| s.ready >= s.replicas && s.replicas == plan.statefulset_replicas);
    let restoring =
        !restore.is_empty() && all_ready && !busy && removals.iter().all(|r| matches!(r, Removal::Done { .. }));
    if restoring {
        let nodes = (0..plan.member_nodes).filter(|i| !excluded.contains(i)).map(|i| names.node_address(i)).collect();
        admin.place_replicas(&PlacementRequest { nodes }).await?;
    }
    let mut report = failed_nodes_report(&names, &replacement, identities.as_ref(), &ids, &removals);
    if identities.is_none() {
        report.keep(&previous);
    }
    if !restore.is_empty() {
        let pods = restore.iter().map(|o| names.pod(*o)).collect::<Vec<_>>().join(", ");
        let message = if restoring {
            format!("placing replicas on {pods} again")
        } else {
            format!("{pods} left the remove list; replicas return once every node pod is ready and nothing else runs")
        };
        report.add("Restoring", message);
    }
    let was_replacement_blocked =
        previous.conditions.iter().any(|c| c.type_ == conditions::NODE_REPLACEMENT && c.reason == "DataLost");
    if let (ReplacementDecision::Blocked { reason }, false) = (&replacement, was_replacement_blocked) {
        ctx.event(cluster.as_ref(), true, "NodeReplacementBlocked", reason.clone()).await;
    }

    let was_blocked = conditions::is_true(&previous.conditions, conditions::BLOCKED);
    let was_timed_out =
        previous.conditions.iter().any(|c| c.type_ == conditions::SCALING && c.reason == "ScaleOutTimedOut");
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
            Notice::TimedOut { message } if !was_timed_out => (true, "ScaleOutTimedOut", message.clone()),
            Notice::TimedOut { .. } => continue,
            Notice::Cancelled { from, to } => (
                false,
                "ScaleOutCancelled",
                format!("removing the nodes added by the scale-out {from} → {to}, back to {from}"),
            ),
        };
        ctx.event(cluster.as_ref(), warning, reason, note).await;
    }

    let ready_nodes = sts_state.map_or(0, |s| s.ready);
    let readiness = Readiness { nodes: ready_nodes, routers: ready_routers, rolling_out };
    let reported =
        Reported { membership: membership.as_ref(), zones: &zones, spread: spread.as_ref(), failed: &report };
    let mut status = cluster_status(&cluster, &names, &previous, &plan, readiness, reported, now);
    storage_volumes.merge_into(&previous.conditions, &mut status, generation, now);
    status.internal_tls_mode = Some(tls_mode);
    let switching_tls = tls_mode != tls_target;
    ctx.metrics.observe_cluster(&names.namespace, &names.cluster, cluster.spec.storage.nodes, &status);
    write_status(&api, &cluster, cluster.status.as_ref(), &status).await?;

    // Scaling steps and replacements wait on pods and on meta: look again soon rather than only
    // on changes.
    Ok(if status.scaling.is_some() || report.active || storage_volumes.in_progress() || switching_tls {
        Action::requeue(Duration::from_secs(10))
    } else {
        Action::requeue(Duration::from_secs(300))
    })
}

/// What the admin API answers, or `None`, logged as `unknown`, when it does not.
async fn answer<T>(
    names: &Names,
    unknown: &str,
    call: impl std::future::Future<Output = Result<T, AdminError>>,
) -> Option<T> {
    call.await.inspect_err(|e| tracing::warn!(cluster = %names.cluster, error = %e, "{unknown}")).ok()
}

fn ordinal_of_id(ids: &BTreeMap<i32, u64>, id: u64) -> Option<i32> {
    ids.iter().find(|(_, i)| **i == id).map(|(o, _)| *o)
}

/// A repeated call that meta answers with `409 code` (its work is already done) succeeded.
fn idempotent(result: Result<(), AdminError>, code: &str) -> Result<(), Error> {
    match result {
        Err(AdminError::Status { status: 409, body }) if body.contains(code) => {
            tracing::info!(%body, "already done");
            Ok(())
        }
        other => Ok(other?),
    }
}

fn pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `is Pending: 0/3 nodes are available: …`, bounded.
fn why_not_ready(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.unwrap_or_else(|| "Pending".into());
    let detail = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.status == "False" && c.message.is_some())
        .and_then(|c| c.message);
    let text = match detail {
        Some(d) => format!("is {phase}: {d}"),
        None => format!("is {phase}, not ready"),
    };
    text.chars().take(200).collect()
}

/// Replacements and removals, for status.
struct FailedNodesReport {
    progress: BTreeMap<i32, NodeReplacementProgress>,
    condition: Desired,
    /// Something runs or waits: reconcile again soon.
    active: bool,
}

impl FailedNodesReport {
    /// Identities were not read this time: what was reported last still holds, unless
    /// something else is reported now.
    fn keep(&mut self, previous: &SextantClusterStatus) {
        self.progress = previous.nodes.iter().filter_map(|n| Some((n.ordinal, n.replacement.clone()?))).collect();
        let last = previous.conditions.iter().find(|c| c.type_ == conditions::NODE_REPLACEMENT);
        if let (Some(c), false) = (last, self.active) {
            let status = c.status == "True";
            self.condition = Desired::new(conditions::NODE_REPLACEMENT, status, c.reason.clone(), c.message.clone());
            self.active = status;
        }
    }

    /// One more thing in progress, after those already reported.
    fn add(&mut self, reason: &str, message: String) {
        if self.active {
            self.condition.message = format!("{}; {message}", self.condition.message);
        } else {
            self.condition = Desired::new(conditions::NODE_REPLACEMENT, true, reason, message);
        }
        self.active = true;
    }
}

fn failed_nodes_report(
    names: &Names,
    decision: &ReplacementDecision,
    identities: Option<&NodeIdentities>,
    ids: &BTreeMap<i32, u64>,
    removals: &[Removal],
) -> FailedNodesReport {
    let mut progress = BTreeMap::new();
    for n in identities.map(|i| i.nodes.as_slice()).unwrap_or_default() {
        let Some(ordinal) = ordinal_of_id(ids, n.id) else { continue };
        let entry = match (&n.needs_replacement, &n.replacing) {
            (_, Some(r)) => {
                NodeReplacementProgress { phase: ReplacementPhase::Replacing, groups_left: r.groups_left.clone() }
            }
            (Some(_), None) => {
                NodeReplacementProgress { phase: ReplacementPhase::NeedsReplacement, groups_left: vec![] }
            }
            (None, None) => continue,
        };
        progress.insert(ordinal, entry);
    }
    let pod = |id: u64| ordinal_of_id(ids, id).map(|o| names.pod(o)).unwrap_or_else(|| format!("node id {id}"));
    let mut reasons: Vec<(&str, String)> = vec![];
    match decision {
        ReplacementDecision::Blocked { reason } => reasons.push(("DataLost", reason.clone())),
        ReplacementDecision::Replace { id } => reasons.push(("Replacing", format!("replacing {}", pod(*id)))),
        ReplacementDecision::Wait { reason } if !progress.is_empty() => reasons.push(("Waiting", reason.clone())),
        ReplacementDecision::NotApproved { ids } => reasons.push((
            "AwaitingApproval",
            format!(
                "{} restarted on an empty volume and does not vote; automaticReplacement is off: list its ordinal                  in spec.storage.failedNodes.replace",
                ids.iter().map(|i| pod(*i)).collect::<Vec<_>>().join(", ")
            ),
        )),
        ReplacementDecision::Wait { .. } | ReplacementDecision::Idle => {}
    }
    for r in removals {
        match r {
            Removal::Remove { ordinal, .. } | Removal::InProgress { ordinal } => {
                reasons.push(("Removing", format!("moving every replica off {}", names.pod(*ordinal))))
            }
            Removal::Refused { reason, .. } => reasons.push(("RemovalRefused", reason.clone())),
            Removal::Wait { ordinal, reason } => {
                reasons.push(("Removing", format!("{}: {reason}", names.pod(*ordinal))))
            }
            Removal::Done { .. } => {}
        }
    }
    let active = !reasons.is_empty();
    let condition = match reasons.first() {
        Some((reason, _)) => Desired::new(
            conditions::NODE_REPLACEMENT,
            true,
            *reason,
            reasons.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>().join("; "),
        ),
        None => Desired::new(conditions::NODE_REPLACEMENT, false, "NoneNeeded", ""),
    };
    FailedNodesReport { progress, condition, active }
}

/// What the workloads report.
struct Readiness {
    nodes: i32,
    routers: i32,
    rolling_out: bool,
}

/// What the cluster reports about its nodes.
struct Reported<'a> {
    membership: Option<&'a BTreeMap<i32, MembershipState>>,
    /// Each node's zone by ordinal, as it registered.
    zones: &'a BTreeMap<i32, Option<String>>,
    spread: Option<&'a crate::admin::ClusterGroups>,
    failed: &'a FailedNodesReport,
}

fn cluster_status(
    cluster: &SextantCluster,
    names: &Names,
    previous: &SextantClusterStatus,
    plan: &ScalingPlan,
    readiness: Readiness,
    reported: Reported<'_>,
    now: k8s_openapi::jiff::Timestamp,
) -> SextantClusterStatus {
    let Readiness { nodes: ready_nodes, routers: ready_routers, rolling_out } = readiness;
    let Reported { membership, zones, spread, failed: report } = reported;
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
    desired.push(match (&plan.timed_out, &plan.operation) {
        (Some(t), _) => Desired::new(conditions::SCALING, false, "ScaleOutTimedOut", t.message.clone()),
        (None, Some(op)) if op.cancelled => Desired::new(
            conditions::SCALING,
            true,
            "CancellingScaleOut",
            format!("removing added nodes back to {}: {:?} node {}", op.to, op.step, op.node.unwrap_or(op.to)),
        ),
        (None, Some(op)) => Desired::new(
            conditions::SCALING,
            true,
            if op.to > op.from { "ScalingOut" } else { "ScalingIn" },
            format!("{} → {} nodes: {:?}", op.from, op.to, op.step),
        ),
        (None, None) => Desired::new(conditions::SCALING, false, "Idle", ""),
    });
    desired.push(report.condition.clone());
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
        Some(m) => m
            .iter()
            .map(|(o, s)| NodeMembership {
                ordinal: *o,
                pod: names.pod(*o),
                state: *s,
                zone: zones.get(o).cloned().flatten(),
                replacement: report.progress.get(o).cloned(),
            })
            .collect(),
        None => previous.nodes.clone(),
    };
    let zones = match spread {
        Some(g) => Some(ZoneSpread {
            count: g.zones,
            misplaced_groups: g.groups.iter().filter(|g| !g.zone_spread).map(|g| g.group).collect(),
        }),
        None => previous.zones.clone(),
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
        zones,
        scaling: plan.operation.clone(),
        internal_tls_mode: previous.internal_tls_mode,
        secret_name: Some(names.secret()),
        router_url: Some(names.router_url(cluster.spec.routers.service.http_port, cluster.spec.tls.is_some())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use crate::admin::fake::Call;
    use crate::admin::ClusterNode;
    use crate::replacement::ReplacementDecision;
    use crate::topology::tests::cluster;
    use crate::v1alpha1::{ReplacementPhase, ScalingOperation, SextantClusterStatus};
    use http::Method;
    use kube::runtime::controller::Action;
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
        let timing =
            crate::scaling::Timing { now: fixed_now(), scale_out_timeout: std::time::Duration::from_secs(600) };
        let plan = crate::scaling::plan(nodes, 3, Some(nodes), None, &Default::default(), timing);
        let names = crate::topology::Names::of(c).unwrap();
        let report = super::failed_nodes_report(&names, &ReplacementDecision::Idle, None, &Default::default(), &[]);
        let membership = (0..nodes).map(|i| (i, crate::v1alpha1::MembershipState::Active)).collect();
        c.status = Some(super::cluster_status(
            c,
            &names,
            &SextantClusterStatus::default(),
            &plan,
            super::Readiness { nodes, routers: 2, rolling_out: false },
            super::Reported {
                membership: Some(&membership),
                zones: &Default::default(),
                spread: None,
                failed: &report,
            },
            fixed_now(),
        ));
        c.status.as_mut().unwrap().internal_tls_mode = Some(crate::v1alpha1::InternalTlsMode::Off);
    }

    /// Runs a reconcile of `c` against `steps`, with three active nodes behind the admin API.
    async fn reconcile_three_active(steps: Vec<Step>, c: &crate::v1alpha1::SextantCluster) -> Action {
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        let reconcile = super::reconcile(std::sync::Arc::new(c.clone()), ctx);
        mock.run(steps, serde_json::to_value(c).unwrap(), reconcile).await.unwrap()
    }

    fn active_nodes(n: i32) -> Vec<ClusterNode> {
        (0..n)
            .map(|i| {
                let address = format!("obs-node-{i}.obs-node.telemetry.svc:7000");
                serde_json::from_value(json!({"id": i + 1, "address": address, "state": "Active"})).unwrap()
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

    fn env_of(b: &serde_json::Value, name: &str) -> Option<String> {
        let env = b["spec"]["template"]["spec"]["containers"][0]["env"].as_array()?;
        env.iter().find(|e| e["name"] == name).and_then(|e| e["value"].as_str()).map(str::to_owned)
    }

    /// `spec.internalTls.enabled` turned on for a running, rolled-out cluster: the pods go to
    /// `accept` first (serve both, dial plain text), not straight to `require`, which would cut
    /// the restarted pods off from the others; the certificates exist before the pods mount them.
    #[tokio::test]
    async fn turning_internal_tls_on_rolls_the_pods_to_accept_first() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.internal_tls.enabled = true;
        c.metadata.generation = Some(2);
        let routers = c.spec.routers.replicas;
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "obs-node", "namespace": "telemetry", "generation": 4},
            "spec": {"replicas": 3, "serviceName": "obs-node", "selector": {}, "template": {}},
            "status": {"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "observedGeneration": 4,
                       "currentRevision": "r4", "updateRevision": "r4"}});
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "obs-router", "namespace": "telemetry", "generation": 2},
            "spec": {"replicas": routers, "selector": {}, "template": {}},
            "status": {"replicas": routers, "updatedReplicas": routers, "availableReplicas": routers,
                       "readyReplicas": routers, "observedGeneration": 2}});
        let secrets = "/api/v1/namespaces/telemetry/secrets";
        let mut steps = vec![
            Step::get(SECRET).reply(200, secret_json()),
            Step::get(STS).reply(200, sts),
            Step::get("/apis/apps/v1/namespaces/telemetry/deployments/obs-router").reply(200, deployment),
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!(b["reason"], "InternalTlsSwitching");
                assert_eq!(b["note"], "node and router pods roll to internal TLS mode accept");
            }),
            Step::get(&format!("{secrets}/obs-internal-ca")).not_found(),
            Step::new(Method::POST, secrets),
            Step::new(Method::POST, EVENTS),
            Step::get(&format!("{secrets}/obs-node-tls")).not_found(),
            Step::new(Method::POST, secrets),
            Step::get(&format!("{secrets}/obs-router-tls")).not_found(),
            Step::new(Method::POST, secrets),
            Step::new(Method::POST, EVENTS),
        ];
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| {
            assert_eq!(env_of(b, "SEXTANT_INTERNAL_TLS_MODE").as_deref(), Some("accept"));
            assert_eq!(env_of(b, "SEXTANT_INTERNAL_TLS_DIR").as_deref(), Some("/etc/sextant/internal-tls"));
        });
        objs[ROUTERS_AT] = Step::apply("/apis/apps/v1/namespaces/telemetry/deployments/obs-router")
            .expect_body(|b| assert_eq!(env_of(b, "SEXTANT_INTERNAL_TLS_MODE").as_deref(), Some("accept")))
            .reply(
                200,
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "obs-router"},
                               "status": {"readyReplicas": 2}}),
            );
        steps.extend(objs);
        steps.push(
            Step::new(Method::PATCH, STATUS).expect_body(|b| assert_eq!(b["status"]["internalTlsMode"], "accept")),
        );
        assert_eq!(reconcile_three_active(steps, &c).await, Action::requeue(std::time::Duration::from_secs(10)));
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
            assert_eq!(
                b["status"]["scaling"],
                json!({"from": 3, "to": 5, "step": "GrowStatefulSet", "startedAt": "2026-11-18T11:06:40Z"})
            );
            assert_eq!(b["status"]["phase"], "Scaling");
            assert_eq!(b["status"]["storageNodes"], 3);
        }));
        assert_eq!(reconcile_three_active(steps, &c).await, Action::requeue(std::time::Duration::from_secs(10)));
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
        status.scaling = Some(ScalingOperation {
            from: 4,
            to: 3,
            step: crate::v1alpha1::ScalingStep::Shrink,
            node: Some(3),
            started_at: None,
            cancelled: false,
        });
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

    fn identity(id: u64, needs_replacement: bool, replacing: Option<Vec<u64>>) -> crate::admin::NodeIdentity {
        serde_json::from_value(json!({
            "id": id,
            "incarnation": format!("{id:016x}"),
            "needs_replacement": needs_replacement.then_some("00000000000000ff"),
            "replacing": replacing.map(|g| json!({"incarnation": "00000000000000ff", "groups_left": g})),
        }))
        .unwrap()
    }

    fn condition(b: &serde_json::Value, type_: &str) -> serde_json::Value {
        b["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == type_).cloned().unwrap_or_default()
    }

    /// A settled cluster of three whose node 3 (`obs-node-2`) restarted on an empty volume.
    fn wiped_third(admin: &crate::admin::fake::FakeAdmin) {
        *admin.nodes.lock().unwrap() = active_nodes(3);
        *admin.identities.lock().unwrap() =
            vec![identity(1, false, None), identity(2, false, None), identity(3, true, None)];
    }

    fn ready_steps() -> Vec<Step> {
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        steps.extend(applies(2));
        steps
    }

    fn pod_json(ordinal: i32, ready: bool, phase: &str, message: Option<&str>) -> serde_json::Value {
        let mut conditions = vec![json!({"type": "Ready", "status": if ready { "True" } else { "False" }})];
        if let Some(m) = message {
            conditions
                .push(json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": m}));
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("obs-node-{ordinal}"), "namespace": "telemetry"},
               "status": {"phase": phase, "conditions": conditions}})
    }

    fn pod_path(ordinal: i32) -> String {
        format!("/api/v1/namespaces/telemetry/pods/obs-node-{ordinal}")
    }

    #[tokio::test]
    async fn a_node_on_an_empty_volume_is_replaced_automatically() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        let mut steps = ready_steps();
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| {
            assert_eq!(b["reason"], "NodeReplacementStarted");
            assert!(b["note"].as_str().unwrap().contains("obs-node-2"), "{b}");
        }));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let r = condition(b, "NodeReplacement");
            assert_eq!((r["status"].as_str(), r["reason"].as_str()), (Some("True"), Some("Replacing")), "{r}");
            assert_eq!(b["status"]["nodes"][2]["replacement"], json!({"phase": "NeedsReplacement"}));
            assert!(b["status"]["nodes"][1].get("replacement").is_none());
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        wiped_third(&admin);
        let action = mock
            .run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert_eq!(admin.calls().iter().filter(|c| matches!(c, Call::ReplaceNode(3))).count(), 1);
        assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn with_automatic_replacement_off_only_a_listed_node_is_replaced() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.storage.failed_nodes.automatic_replacement = false;
        let mut steps = ready_steps();
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let r = condition(b, "NodeReplacement");
            assert_eq!(r["reason"], "AwaitingApproval", "{r}");
            assert!(r["message"].as_str().unwrap().contains("obs-node-2"), "{r}");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        wiped_third(&admin);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::ReplaceNode(_))), "{:?}", admin.calls());

        // Listed by ordinal: replaced.
        c.spec.storage.failed_nodes.replace = vec![2];
        let mut steps = ready_steps();
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "NodeReplacementStarted")));
        steps.push(Step::new(Method::PATCH, STATUS));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        wiped_third(&admin);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(admin.calls().contains(&Call::ReplaceNode(3)));
    }

    #[tokio::test]
    async fn a_replacement_in_progress_is_not_sent_again_and_holds_a_scale_out() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        c.spec.storage.nodes = 5;
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(3, 3))];
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| assert_eq!(b["spec"]["replicas"], 3));
        steps.extend(objs);
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(b["status"]["nodes"][2]["replacement"], json!({"phase": "Replacing", "groupsLeft": [1, 4]}));
            assert_eq!(condition(b, "NodeReplacement")["reason"], "Waiting");
            assert!(b["status"].get("scaling").is_none(), "no scale-out while an id changes hands");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        *admin.identities.lock().unwrap() =
            vec![identity(1, false, None), identity(2, false, None), identity(3, false, Some(vec![1, 4]))];
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::ReplaceNode(_) | Call::PlaceReplicas(_))));
    }

    #[tokio::test]
    async fn losing_more_nodes_than_a_group_survives_blocks_replacement_with_a_warning() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        let mut steps = ready_steps();
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| {
            assert_eq!((b["reason"].as_str(), b["type"].as_str()), (Some("NodeReplacementBlocked"), Some("Warning")));
        }));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let r = condition(b, "NodeReplacement");
            assert_eq!(r["reason"], "DataLost");
            assert!(r["message"].as_str().unwrap().contains("restore from a backup"), "{r}");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(3);
        *admin.identities.lock().unwrap() =
            vec![identity(1, false, None), identity(2, true, None), identity(3, true, None)];
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::ReplaceNode(_))));
    }

    #[tokio::test]
    async fn a_listed_node_is_removed_by_id_only_while_its_pod_is_not_ready() {
        let mut c = cluster(4, 3);
        settled(&mut c, 4);
        c.spec.storage.failed_nodes.remove = vec![3];
        let sts = sts_json(4, 3);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts.clone())];
        steps.push(Step::get(&pod_path(3)).reply(200, pod_json(3, false, "Running", None)));
        steps.extend(applies(2));
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "NodeRemovalStarted")));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(condition(b, "NodeReplacement")["reason"], "Removing");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(4);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(admin.calls().contains(&Call::RemoveNode(4)));

        // A ready pod is a healthy node: refused, nothing sent.
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts)];
        steps.push(Step::get(&pod_path(3)).reply(200, pod_json(3, true, "Running", None)));
        steps.extend(applies(2));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let r = condition(b, "NodeReplacement");
            assert_eq!(r["reason"], "RemovalRefused");
            assert!(r["message"].as_str().unwrap().contains("healthy"), "{r}");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(4);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::RemoveNode(_))));
    }

    #[tokio::test]
    async fn a_node_taken_off_the_remove_list_gets_replicas_again_once_all_pods_are_ready() {
        let mut c = cluster(4, 3);
        settled(&mut c, 4);
        let drained_third = || {
            let mut nodes = active_nodes(4);
            nodes[2] = serde_json::from_value(
                json!({"id": 3, "address": "obs-node-2.obs-node.telemetry.svc:7000", "state": "Drained"}),
            )
            .unwrap();
            nodes
        };
        // A pod not ready yet: it waits.
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(4, 3))];
        steps.extend(applies(2));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let r = condition(b, "NodeReplacement");
            assert_eq!(r["reason"], "Restoring");
            assert!(r["message"].as_str().unwrap().contains("once every node pod is ready"), "{r}");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = drained_third();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::PlaceReplicas(_))));

        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(4, 4))];
        steps.extend(applies(2));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(condition(b, "NodeReplacement")["message"], "placing replicas on obs-node-2 again");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = drained_third();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        let all: Vec<String> = (0..4).map(|i| format!("obs-node-{i}.obs-node.telemetry.svc:7000")).collect();
        assert!(admin.calls().contains(&Call::PlaceReplicas(all)), "{:?}", admin.calls());

        // Still listed: it stays out.
        c.spec.storage.failed_nodes.remove = vec![2];
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(4, 4))];
        steps.extend(applies(2));
        steps.push(Step::new(Method::PATCH, STATUS));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = drained_third();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::PlaceReplicas(_) | Call::RemoveNode(_))));
    }

    #[tokio::test]
    async fn identities_that_cannot_be_read_keep_the_last_replacement_report() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        let written = std::sync::Arc::new(std::sync::Mutex::new(None));
        let keep = written.clone();
        let mut steps = ready_steps();
        steps.push(Step::new(Method::POST, EVENTS));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(move |b| *keep.lock().unwrap() = Some(b.clone())));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        wiped_third(&admin);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        let status = written.lock().unwrap().clone().unwrap()["status"].clone();
        c.status = Some(serde_json::from_value(status).unwrap());

        assert_eq!(
            c.status.as_ref().unwrap().nodes[2].replacement.as_ref().unwrap().phase,
            ReplacementPhase::NeedsReplacement
        );

        // The next reconcile reads membership but not identities: no status write (nothing
        // changed), nothing sent.
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        wiped_third(&admin);
        admin.identities_unavailable.store(true, std::sync::atomic::Ordering::SeqCst);
        mock.run(
            ready_steps(),
            serde_json::to_value(&c).unwrap(),
            super::reconcile(std::sync::Arc::new(c.clone()), ctx),
        )
        .await
        .unwrap();
        assert!(admin.calls().contains(&Call::Identities));
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::ReplaceNode(_))));
    }

    /// The zone each node registered with and the groups whose replicas break the zone rule
    /// reach the status.
    #[tokio::test]
    async fn zones_and_misplaced_groups_are_reported_in_the_status() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        let mut steps = ready_steps();
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(b["status"]["zones"], json!({"count": 2, "misplacedGroups": [2]}));
            assert_eq!(b["status"]["nodes"][0]["zone"], "eu-west-1a");
            assert!(b["status"]["nodes"][2].get("zone").is_none(), "{b}");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let mut nodes = active_nodes(3);
        nodes[0].zone = Some("eu-west-1a".into());
        nodes[1].zone = Some("eu-west-1b".into());
        *admin.nodes.lock().unwrap() = nodes;
        let group = |group: u64, zone_spread: bool| crate::admin::ClusterGroup {
            group,
            replicas: vec![1, 2, 3],
            desired: vec![1, 2, 3],
            zones: vec![Some("eu-west-1a".into()), Some("eu-west-1b".into()), None],
            zone_spread,
        };
        *admin.groups.lock().unwrap() =
            Some(crate::admin::ClusterGroups { zones: 2, groups: vec![group(1, true), group(2, false)] });
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(admin.calls().contains(&Call::Groups));
    }

    fn growing(c: &mut crate::v1alpha1::SextantCluster, started_seconds_ago: i64) {
        let started =
            fixed_now().checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(started_seconds_ago)).unwrap();
        c.status.as_mut().unwrap().scaling = Some(ScalingOperation {
            from: 3,
            to: 5,
            step: crate::v1alpha1::ScalingStep::GrowStatefulSet,
            node: None,
            started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(started)),
            cancelled: false,
        });
    }

    #[tokio::test]
    async fn a_scale_out_past_its_timeout_says_which_pod_is_pending() {
        let mut c = cluster(5, 3);
        settled(&mut c, 3);
        growing(&mut c, 601);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(5, 4))];
        steps.push(Step::get(&pod_path(3)).reply(200, pod_json(3, true, "Running", None)));
        steps.push(
            Step::get(&pod_path(4))
                .reply(200, pod_json(4, false, "Pending", Some("0/3 nodes are available: 3 Insufficient cpu."))),
        );
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| assert_eq!(b["spec"]["replicas"], 5));
        steps.extend(objs);
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| {
            assert_eq!((b["reason"].as_str(), b["type"].as_str()), (Some("ScaleOutTimedOut"), Some("Warning")));
        }));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            let s = condition(b, "Scaling");
            assert_eq!((s["status"].as_str(), s["reason"].as_str()), (Some("False"), Some("ScaleOutTimedOut")), "{s}");
            let m = s["message"].as_str().unwrap();
            assert!(m.contains("obs-node-4 is Pending: 0/3 nodes are available") && !m.contains("obs-node-3"), "{m}");
            assert!(m.contains("back to 3"), "{m}");
            assert_eq!(b["status"]["scaling"]["step"], "GrowStatefulSet", "it keeps waiting");
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.nodes.lock().unwrap() = active_nodes(4);
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn setting_nodes_back_cancels_a_scale_out_and_removes_what_it_added() {
        let mut c = cluster(3, 3);
        settled(&mut c, 3);
        growing(&mut c, 60);
        c.metadata.generation = Some(3);
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(5, 4))];
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| assert_eq!(b["spec"]["replicas"], 5));
        steps.extend(objs);
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "ScaleOutCancelled")));
        steps.push(Step::new(Method::PATCH, STATUS).expect_body(|b| {
            assert_eq!(
                b["status"]["scaling"],
                json!({"from": 5, "to": 3, "step": "Drain", "node": 4, "cancelled": true, "startedAt": "2026-11-18T11:06:40Z"})
            );
            assert_eq!(condition(b, "Scaling")["reason"], "CancellingScaleOut");
            assert_eq!(b["status"]["storageNodes"], 3);
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        // obs-node-3 registered, obs-node-4 never did.
        let mut nodes = active_nodes(3);
        nodes.push(
            serde_json::from_value(
                json!({"id": 4, "address": "obs-node-3.obs-node.telemetry.svc:7000", "state": "Joining"}),
            )
            .unwrap(),
        );
        *admin.nodes.lock().unwrap() = nodes;
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::reconcile(std::sync::Arc::new(c.clone()), ctx))
            .await
            .unwrap();
        assert!(
            !admin.calls().iter().any(|c| matches!(c, Call::Drain(_) | Call::PlaceReplicas(_))),
            "{:?}",
            admin.calls()
        );

        // Next reconcile: obs-node-4 never registered, so it goes without a drain.
        let mut c2 = c.clone();
        c2.status.as_mut().unwrap().scaling = Some(ScalingOperation {
            from: 5,
            to: 3,
            step: crate::v1alpha1::ScalingStep::Drain,
            node: Some(4),
            started_at: None,
            cancelled: true,
        });
        let mut steps = vec![Step::get(SECRET).reply(200, secret_json()), Step::get(STS).reply(200, sts_json(5, 4))];
        let mut objs = applies(2);
        objs[STS_AT] = Step::apply(STS).expect_body(|b| assert_eq!(b["spec"]["replicas"], 4));
        steps.extend(objs);
        steps.push(
            Step::new(Method::PATCH, STATUS).expect_body(|b| assert_eq!(b["status"]["scaling"]["step"], "Shrink")),
        );
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let mut nodes = active_nodes(3);
        nodes.push(
            serde_json::from_value(
                json!({"id": 4, "address": "obs-node-3.obs-node.telemetry.svc:7000", "state": "Joining"}),
            )
            .unwrap(),
        );
        *admin.nodes.lock().unwrap() = nodes;
        mock.run(steps, serde_json::to_value(&c2).unwrap(), super::reconcile(std::sync::Arc::new(c2.clone()), ctx))
            .await
            .unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::Drain(_))));
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
            let c =
                b["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "VolumeExpansion").unwrap();
            assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("True"), Some("Expanding")), "{c}");
            assert!(c["message"].as_str().unwrap().starts_with("0/3 volumes at 20Gi"), "{c}");
        }));
        assert_eq!(reconcile_three_active(steps, &c).await, Action::requeue(std::time::Duration::from_secs(10)));
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
            let c =
                b["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "VolumeExpansion").unwrap();
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

/// Every node pod runs the StatefulSet's latest template and is ready.
fn statefulset_rolled_out(s: &StatefulSet) -> bool {
    let replicas = s.spec.as_ref().and_then(|x| x.replicas).unwrap_or(1);
    s.status.as_ref().is_some_and(|st| {
        st.observed_generation >= s.metadata.generation
            && st.update_revision.is_some()
            && st.current_revision == st.update_revision
            && st.updated_replicas == Some(replicas)
            && st.ready_replicas == Some(replicas)
    })
}

/// Every router pod runs the Deployment's latest template and is available.
fn deployment_rolled_out(d: &Deployment) -> bool {
    let replicas = d.spec.as_ref().and_then(|x| x.replicas).unwrap_or(1);
    d.status.as_ref().is_some_and(|st| {
        st.observed_generation >= d.metadata.generation
            && st.updated_replicas == Some(replicas)
            && st.available_replicas == Some(replicas)
            && st.replicas == Some(replicas)
    })
}
