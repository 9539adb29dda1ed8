//! Volume expansion and claim-template drift of a `SextantCluster` (`crate::volumes` decides):
//! reads the PVCs and the StorageClass only when the size changes, raises PVC requests,
//! recreates the node StatefulSet with orphan propagation, and keeps the live claim template in
//! every apply until then, so a StatefulSet apply is never refused for its immutable fields.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};

use super::{Context, Error};
use crate::conditions::{self, Desired};
use crate::topology::Names;
use crate::v1alpha1::{SextantCluster, SextantClusterStatus};
use crate::volumes::{
    self, ClaimTemplate, Expansion, Inputs, Volume, VolumePlan, STORAGE_SPEC_DRIFT, VOLUME_EXPANSION,
};

/// What [`prepare`] decided, used by the rest of the reconcile.
#[derive(Debug, Default)]
pub struct Prepared {
    plan: VolumePlan,
    /// The StatefulSet is being (or was just) deleted for its recreation: not applied this time.
    skip_statefulset: bool,
}

impl Prepared {
    /// The StatefulSet to apply, with the claim template it can take; `None`: do not apply it.
    pub fn statefulset(&self, mut sts: StatefulSet) -> Option<StatefulSet> {
        if self.skip_statefulset {
            return None;
        }
        if let Some(claim) = &self.plan.claim {
            let template = sts
                .spec
                .as_mut()
                .and_then(|s| s.volume_claim_templates.as_mut())
                .and_then(|t| t.iter_mut().find(|c| c.metadata.name.as_deref() == Some("data")))
                .and_then(|c| c.spec.as_mut());
            if let Some(spec) = template {
                spec.storage_class_name = claim.class.clone();
                if let Some(requests) = spec.resources.as_mut().and_then(|r| r.requests.as_mut()) {
                    requests.insert("storage".into(), Quantity(claim.size.clone()));
                }
            }
        }
        Some(sts)
    }

    /// Look again soon: volumes are growing or the StatefulSet is being recreated.
    pub fn in_progress(&self) -> bool {
        self.skip_statefulset || self.plan.expansion.as_ref().is_some_and(|c| c.status)
    }

    /// Sets `VolumeExpansion` and `StorageSpecDrift` into `status` (rebuilt without them), or
    /// keeps what `previous` had when there is nothing new to say.
    pub fn merge_into(
        &self,
        previous: &[Condition],
        status: &mut SextantClusterStatus,
        generation: Option<i64>,
        now: Timestamp,
    ) {
        for (type_, desired) in [(VOLUME_EXPANSION, &self.plan.expansion), (STORAGE_SPEC_DRIFT, &self.plan.drift)] {
            match desired {
                // A drift condition that was never True is not worth showing.
                Some(d) if d.type_ == STORAGE_SPEC_DRIFT && !d.status && !previous.iter().any(|c| c.type_ == type_) => {
                }
                Some(d) => conditions::merge(&mut status.conditions, d.clone(), generation, now),
                None => {
                    if let Some(c) = previous.iter().find(|c| c.type_ == type_) {
                        status.conditions.retain(|x| x.type_ != type_);
                        status.conditions.push(c.clone());
                        status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
                    }
                }
            }
        }
    }
}

/// Observes, decides and carries out the volume steps before the objects are applied.
pub async fn prepare(
    ctx: &Context,
    cluster: &SextantCluster,
    names: &Names,
    sts: Option<&StatefulSet>,
    scaling: bool,
) -> Result<Prepared, Error> {
    let previous: &[Condition] = cluster.status.as_ref().map_or(&[], |s| &s.conditions);
    let expanding = conditions::is_true(previous, VOLUME_EXPANSION);
    if sts.is_some_and(|s| s.metadata.deletion_timestamp.is_some()) {
        // Orphaned and going: applied anew once it is gone.
        return Ok(Prepared { plan: VolumePlan::default(), skip_statefulset: true });
    }
    let storage = &cluster.spec.storage;
    let size = storage.volume_size.0.as_str();
    let live = sts.and_then(ClaimTemplate::of);
    let mut observed = vec![];
    let mut expansion = None;
    if volumes::needs_volumes(size, live.as_ref(), expanding) {
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &names.namespace);
        let replicas = sts
            .and_then(|s| s.spec.as_ref()?.replicas)
            .or_else(|| cluster.status.as_ref().map(|s| s.storage_nodes))
            .unwrap_or(storage.nodes);
        for ordinal in 0..replicas {
            if let Some(pvc) = pvcs.get_opt(&names.volume(ordinal)).await? {
                observed.push(Volume::of(ordinal, &pvc));
            }
        }
        let growing = match (volumes::bytes(size), live.as_ref().and_then(|l| volumes::bytes(&l.size))) {
            (Some(want), Some(have)) => want > have,
            _ => false,
        };
        if growing {
            if let Some(class) = volumes::storage_class_of(&observed, live.as_ref()) {
                let classes: Api<StorageClass> = Api::all(ctx.client.clone());
                expansion = Some(match classes.get_opt(class).await? {
                    Some(sc) if sc.allow_volume_expansion == Some(true) => Expansion::Allowed,
                    Some(_) => Expansion::Refused(format!(
                        "StorageClass {class:?} does not allow volume expansion (allowVolumeExpansion is not true)"
                    )),
                    None => Expansion::Refused(format!("StorageClass {class:?} does not exist")),
                });
            }
        }
    }
    let plan = volumes::plan(&Inputs {
        size,
        class: storage.storage_class_name.as_deref(),
        live: live.as_ref(),
        volumes: &observed,
        expansion,
        scaling,
        expanding,
    });

    if !plan.grow.is_empty() {
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &names.namespace);
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": size}}}});
        for &ordinal in &plan.grow {
            pvcs.patch(&names.volume(ordinal), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        let note = format!("requested {size} for {} volume(s)", plan.grow.len());
        ctx.event(cluster, false, "VolumeExpansionStarted", note).await;
    }
    let mut skip_statefulset = false;
    if plan.recreate_statefulset {
        let statefulsets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &names.namespace);
        let orphan = DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..DeleteParams::default() };
        match statefulsets.delete(&names.nodes(), &orphan).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        skip_statefulset = true;
        let note = format!("recreating StatefulSet {} with {size} volumes; its pods keep running", names.nodes());
        ctx.event(cluster, false, "StatefulSetRecreated", note).await;
    }
    for desired in [&plan.expansion, &plan.drift].into_iter().flatten() {
        if desired.status && desired.type_ == STORAGE_SPEC_DRIFT || !desired.status && is_refusal(desired) {
            let already = previous.iter().any(|c| c.type_ == desired.type_ && c.reason == desired.reason);
            if !already {
                ctx.event(cluster, true, &desired.reason, desired.message.clone()).await;
            }
        }
    }
    Ok(Prepared { plan, skip_statefulset })
}

fn is_refusal(d: &Desired) -> bool {
    d.type_ == VOLUME_EXPANSION && matches!(d.reason.as_str(), "NotSupported" | "ShrinkRefused" | "InvalidSize")
}

#[cfg(test)]
mod tests {

    use http::Method;
    use serde_json::{json, Value};

    use super::super::mock::*;
    use super::*;
    use crate::topology::tests::cluster;

    const STS: &str = "/apis/apps/v1/namespaces/telemetry/statefulsets/obs-node";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/telemetry/events";
    const GP3: &str = "/apis/storage.k8s.io/v1/storageclasses/gp3";

    fn pvc_path(n: i32) -> String {
        format!("/api/v1/namespaces/telemetry/persistentvolumeclaims/data-obs-node-{n}")
    }

    fn sts(size: &str, replicas: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "obs-node", "namespace": "telemetry"},
            "spec": {"replicas": replicas, "serviceName": "obs-node", "selector": {}, "template": {},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                        "spec": {"storageClassName": "gp3", "resources": {"requests": {"storage": size}}}}]}
        }))
        .unwrap()
    }

    fn pvc(n: i32, requested: &str, capacity: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": format!("data-obs-node-{n}")},
               "spec": {"storageClassName": "gp3", "resources": {"requests": {"storage": requested}}},
               "status": {"capacity": {"storage": capacity}}})
    }

    fn class(allow: bool) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gp3"},
               "provisioner": "ebs.csi.aws.com", "allowVolumeExpansion": allow})
    }

    fn obs(size: &str) -> SextantCluster {
        let mut c = cluster(3, 3);
        c.spec.storage.volume_size = Quantity(size.into());
        c.spec.storage.storage_class_name = Some("gp3".into());
        c
    }

    fn expanding(c: &mut SextantCluster, message: &str) {
        let mut status = SextantClusterStatus { storage_nodes: 3, ..Default::default() };
        conditions::merge(
            &mut status.conditions,
            Desired::new(VOLUME_EXPANSION, true, "Expanding", message),
            Some(1),
            fixed_now(),
        );
        c.status = Some(status);
    }

    async fn run(steps: Vec<Step>, c: &SextantCluster, live: Option<StatefulSet>, scaling: bool) -> Prepared {
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let c2 = c.clone();
        mock.run(steps, json!({}), async move {
            let names = Names::of(&c2).unwrap();
            prepare(&ctx, &c2, &names, live.as_ref(), scaling).await
        })
        .await
        .unwrap()
    }

    fn condition(p: &Prepared) -> Desired {
        p.plan.expansion.clone().expect("a VolumeExpansion condition")
    }

    #[tokio::test]
    async fn an_unchanged_size_makes_no_request() {
        let p = run(vec![], &obs("10Gi"), Some(sts("10Gi", 3)), false).await;
        assert!(p.plan.expansion.is_none() && !p.in_progress());
        let applied = p.statefulset(sts("10Gi", 3)).unwrap();
        assert_eq!(ClaimTemplate::of(&applied).unwrap().size, "10Gi");
    }

    #[tokio::test]
    async fn growing_patches_each_claim_then_recreates_the_statefulset_as_an_orphan() {
        let mut steps = vec![
            Step::get(&pvc_path(0)).reply(200, pvc(0, "20Gi", "10Gi")),
            Step::get(&pvc_path(1)).reply(200, pvc(1, "10Gi", "10Gi")),
            Step::get(&pvc_path(2)).reply(200, pvc(2, "10Gi", "10Gi")),
            Step::get(GP3).reply(200, class(true)),
        ];
        for n in [1, 2] {
            steps.push(
                Step::new(Method::PATCH, &pvc_path(n))
                    .expect_body(|b| assert_eq!(b, &json!({"spec": {"resources": {"requests": {"storage": "20Gi"}}}})))
                    .reply(200, pvc(n, "20Gi", "10Gi")),
            );
        }
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "VolumeExpansionStarted")));
        steps.push(
            Step::new(Method::DELETE, STS)
                .expect_body(|b| assert_eq!(b["propagationPolicy"], "Orphan"))
                .reply(200, serde_json::to_value(sts("10Gi", 3)).unwrap()),
        );
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "StatefulSetRecreated")));
        let p = run(steps, &obs("20Gi"), Some(sts("10Gi", 3)), false).await;
        let c = condition(&p);
        assert_eq!((c.status, c.reason.as_str()), (true, "Expanding"));
        assert!(c.message.starts_with("0/3 volumes at 20Gi"), "{}", c.message);
        assert!(p.in_progress());
        assert!(p.statefulset(sts("20Gi", 3)).is_none(), "not applied while it is recreated");
    }

    #[tokio::test]
    async fn growing_while_scaling_keeps_the_statefulset_and_its_template() {
        let steps = vec![
            Step::get(&pvc_path(0)).reply(200, pvc(0, "10Gi", "10Gi")),
            Step::get(&pvc_path(1)).reply(200, pvc(1, "20Gi", "10Gi")),
            // A scaling pod's claim may not exist yet.
            Step::get(&pvc_path(2)).not_found(),
            Step::get(GP3).reply(200, class(true)),
            Step::new(Method::PATCH, &pvc_path(0)).reply(200, pvc(0, "20Gi", "10Gi")),
            Step::new(Method::POST, EVENTS),
        ];
        let p = run(steps, &obs("20Gi"), Some(sts("10Gi", 3)), true).await;
        assert!(condition(&p).message.contains("once scaling ends"));
        let applied = p.statefulset(sts("20Gi", 3)).expect("applied");
        assert_eq!(ClaimTemplate::of(&applied).unwrap().size, "10Gi", "the live template, which the API accepts");
    }

    #[tokio::test]
    async fn a_storage_class_without_expansion_changes_nothing_and_warns_once() {
        let steps = vec![
            Step::get(&pvc_path(0)).reply(200, pvc(0, "10Gi", "10Gi")),
            Step::get(&pvc_path(1)).reply(200, pvc(1, "10Gi", "10Gi")),
            Step::get(&pvc_path(2)).reply(200, pvc(2, "10Gi", "10Gi")),
            Step::get(GP3).reply(200, class(false)),
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!((b["reason"].as_str(), b["type"].as_str()), (Some("NotSupported"), Some("Warning")));
            }),
        ];
        let p = run(steps, &obs("20Gi"), Some(sts("10Gi", 3)), false).await;
        let c = condition(&p);
        assert_eq!((c.status, c.reason.as_str()), (false, "NotSupported"));
        assert!(c.message.contains("allowVolumeExpansion"), "{}", c.message);
        assert!(!p.in_progress());
        assert_eq!(ClaimTemplate::of(&p.statefulset(sts("20Gi", 3)).unwrap()).unwrap().size, "10Gi");
    }

    #[tokio::test]
    async fn a_smaller_size_is_refused_without_reading_the_storage_class() {
        let steps = vec![
            Step::get(&pvc_path(0)).reply(200, pvc(0, "10Gi", "10Gi")),
            Step::get(&pvc_path(1)).reply(200, pvc(1, "10Gi", "10Gi")),
            Step::get(&pvc_path(2)).reply(200, pvc(2, "10Gi", "10Gi")),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "ShrinkRefused")),
        ];
        let p = run(steps, &obs("5Gi"), Some(sts("10Gi", 3)), false).await;
        assert_eq!(condition(&p).reason, "ShrinkRefused");
        assert_eq!(ClaimTemplate::of(&p.statefulset(sts("5Gi", 3)).unwrap()).unwrap().size, "10Gi");
    }

    #[tokio::test]
    async fn another_storage_class_keeps_the_live_one_and_reports_drift() {
        let mut c = obs("10Gi");
        c.spec.storage.storage_class_name = Some("io2".into());
        let steps =
            vec![Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "StorageClassChanged"))];
        let p = run(steps, &c, Some(sts("10Gi", 3)), false).await;
        let applied = p.statefulset(sts("10Gi", 3)).unwrap();
        assert_eq!(ClaimTemplate::of(&applied).unwrap().class.as_deref(), Some("gp3"));
        let mut status = SextantClusterStatus::default();
        p.merge_into(&[], &mut status, Some(2), fixed_now());
        let drift = status.conditions.iter().find(|c| c.type_ == STORAGE_SPEC_DRIFT).unwrap();
        assert_eq!((drift.status.as_str(), drift.reason.as_str()), ("True", "StorageClassChanged"));
    }

    #[tokio::test]
    async fn a_statefulset_being_deleted_is_not_applied_and_conditions_are_kept() {
        let mut c = obs("20Gi");
        expanding(&mut c, "0/3 volumes at 20Gi; recreating the StatefulSet");
        let mut going = sts("10Gi", 3);
        going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(fixed_now()));
        let p = run(vec![], &c, Some(going), false).await;
        assert!(p.statefulset(sts("20Gi", 3)).is_none());
        assert!(p.in_progress());
        let mut status = SextantClusterStatus::default();
        p.merge_into(&c.status.as_ref().unwrap().conditions, &mut status, Some(2), fixed_now());
        assert_eq!(status.conditions, c.status.unwrap().conditions);
    }

    #[tokio::test]
    async fn after_the_recreation_progress_is_followed_to_the_end() {
        let mut c = obs("20Gi");
        expanding(&mut c, "0/3 volumes at 20Gi");
        let steps = vec![
            Step::get(&pvc_path(0)).reply(200, pvc(0, "20Gi", "20Gi")),
            Step::get(&pvc_path(1)).reply(200, pvc(1, "20Gi", "20Gi")),
            Step::get(&pvc_path(2)).reply(200, pvc(2, "20Gi", "10Gi")),
        ];
        // Created again with the new size, no StorageClass lookup and no patch.
        let p = run(steps, &c, Some(sts("20Gi", 3)), false).await;
        let d = condition(&p);
        assert_eq!((d.status, d.message.as_str()), (true, "2/3 volumes at 20Gi"));
        let steps = vec![
            Step::get(&pvc_path(0)).reply(200, pvc(0, "20Gi", "20Gi")),
            Step::get(&pvc_path(1)).reply(200, pvc(1, "20Gi", "20Gi")),
            Step::get(&pvc_path(2)).reply(200, pvc(2, "20Gi", "20Gi")),
        ];
        let p = run(steps, &c, Some(sts("20Gi", 3)), false).await;
        let d = condition(&p);
        assert_eq!((d.status, d.reason.as_str()), (false, "Expanded"));
        assert!(!p.in_progress());
    }
}
