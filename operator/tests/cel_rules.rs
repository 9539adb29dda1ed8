//! The CRDs' CEL rules (`x-kubernetes-validations`) evaluated against old and new objects, as
//! the API server does on an update: a rule on a field runs only where the field is present,
//! and a transition rule (`oldSelf`) only where it is present in both objects.

use crate::common;

use serde_json::{json, Value};
use sextant_operator::manifests::custom_resource_definitions;

/// The `openAPIV3Schema` of a kind, as committed (with its CEL rules).
fn schema(kind: &str) -> Value {
    let crd = custom_resource_definitions().into_iter().find(|c| c.spec.names.kind == kind).unwrap();
    let version = crd.spec.versions.iter().find(|v| v.storage).expect("a storage version");
    serde_json::to_value(version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap()).unwrap()
}

/// The messages of the rules `new` breaks, as an update from `old` (a create without it).
fn refused(kind: &str, new: &Value, old: Option<&Value>) -> Vec<String> {
    match kube_cel::validate(&schema(kind), new, old) {
        Ok(()) => vec![],
        Err(errors) => errors.iter().map(|e| e.to_string()).collect(),
    }
}

fn cluster(storage: Value) -> Value {
    json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "SextantCluster",
           "metadata": {"name": "obs", "namespace": "telemetry"}, "spec": {"storage": storage}})
}

fn tenant(cluster: Option<&str>) -> Value {
    let mut t = json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "Tenant",
                       "metadata": {"name": "acme", "namespace": "telemetry"},
                       "spec": {"displayName": "Acme", "plan": "pro", "ownerEmail": "o@acme.test"}});
    if let Some(c) = cluster {
        t["spec"]["cluster"] = json!(c);
    }
    t
}

#[test]
fn a_field_rule_alone_does_not_see_the_field_being_added() {
    // Why the rules sit on the parent: this is what `storageClassName` had before.
    let schema = json!({"type": "object", "properties": {"x": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}});
    assert!(kube_cel::validate(&schema, &json!({"x": "gp3"}), Some(&json!({}))).is_ok());
    assert!(kube_cel::validate(&schema, &json!({}), Some(&json!({"x": "gp3"}))).is_ok());
    assert!(kube_cel::validate(&schema, &json!({"x": "b"}), Some(&json!({"x": "a"}))).is_err());
}

#[test]
fn storage_class_cannot_be_added_removed_or_changed() {
    let without = cluster(json!({"nodes": 3}));
    let gp3 = cluster(json!({"nodes": 3, "storageClassName": "gp3"}));
    let io2 = cluster(json!({"nodes": 3, "storageClassName": "io2"}));
    for (new, old, what) in [(&gp3, &without, "added"), (&without, &gp3, "removed"), (&io2, &gp3, "changed")] {
        let errs = refused("SextantCluster", new, Some(old));
        assert!(errs.iter().any(|e| e.contains("storageClassName is immutable")), "{what}: {errs:?}");
    }
    // Creating with or without it, and keeping it, are fine; so is scaling.
    assert!(refused("SextantCluster", &gp3, None).is_empty());
    assert!(refused("SextantCluster", &gp3, Some(&gp3)).is_empty());
    assert!(refused("SextantCluster", &cluster(json!({"nodes": 5})), Some(&without)).is_empty());
}

#[test]
fn volume_size_may_grow_but_not_shrink() {
    let size = |s: Value| cluster(json!({"nodes": 3, "volumeSize": s}));
    let grow = refused("SextantCluster", &size(json!("20Gi")), Some(&size(json!("10Gi"))));
    assert!(grow.is_empty(), "{grow:?}");
    let shrink = refused("SextantCluster", &size(json!("5Gi")), Some(&size(json!("10Gi"))));
    assert!(shrink.iter().any(|e| e.contains("volumeSize cannot shrink")), "{shrink:?}");
    // Compared as quantities, not as text: the same size written otherwise, or a plain number.
    assert!(refused("SextantCluster", &size(json!("10737418240")), Some(&size(json!("10Gi")))).is_empty());
    assert!(refused("SextantCluster", &size(json!(20_000_000_000u64)), Some(&size(json!("10Gi")))).is_empty());
    assert!(!refused("SextantCluster", &size(json!("1G")), Some(&size(json!("1Gi")))).is_empty());
    // Absent means the default (10Gi) on both sides.
    assert!(refused("SextantCluster", &cluster(json!({"nodes": 3})), Some(&size(json!("10Gi")))).is_empty());
    assert!(!refused("SextantCluster", &size(json!("1Gi")), Some(&cluster(json!({"nodes": 3})))).is_empty());
}

#[test]
fn shards_and_replication_factor_stay_fixed() {
    let base = cluster(json!({"nodes": 3, "shards": 4, "replicationFactor": 3}));
    let errs =
        refused("SextantCluster", &cluster(json!({"nodes": 3, "shards": 8, "replicationFactor": 3})), Some(&base));
    assert!(errs.iter().any(|e| e.contains("shards is immutable")), "{errs:?}");
    let errs =
        refused("SextantCluster", &cluster(json!({"nodes": 3, "shards": 4, "replicationFactor": 5})), Some(&base));
    assert!(errs.iter().any(|e| e.contains("replicationFactor is immutable")), "{errs:?}");
}

#[test]
fn tenant_cluster_cannot_be_added_removed_or_changed() {
    let (none, obs, other) = (tenant(None), tenant(Some("obs")), tenant(Some("other")));
    for (new, old, what) in [(&obs, &none, "added"), (&none, &obs, "removed"), (&other, &obs, "changed")] {
        let errs = refused("Tenant", new, Some(old));
        assert!(errs.iter().any(|e| e.contains("cluster is immutable")), "{what}: {errs:?}");
    }
    assert!(refused("Tenant", &obs, Some(&obs)).is_empty());
    assert!(refused("Tenant", &none, Some(&none)).is_empty());
    let mut suspended = none.clone();
    suspended["spec"]["suspended"] = json!(true);
    assert!(refused("Tenant", &suspended, Some(&none)).is_empty());
}

#[test]
fn every_sample_passes_the_rules_as_a_create_and_as_an_unchanged_update() {
    let dir = common::repo().join("crds/examples");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_saphyr::from_multiple::<Value>(&text).unwrap().into_iter().filter(|d| !d.is_null()) {
            let kind = doc["kind"].as_str().unwrap().to_owned();
            assert!(refused(&kind, &doc, None).is_empty(), "{}", path.display());
            assert!(refused(&kind, &doc, Some(&doc)).is_empty(), "{}", path.display());
        }
    }
}
