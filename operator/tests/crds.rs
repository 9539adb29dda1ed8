//! The committed CRD YAML is what the code generates, and every sample resource is valid
//! against its CRD's schema (strictly: unknown fields are errors, as `kubectl --validate=strict`).

use std::path::PathBuf;

mod common;

use common::{errors, repo};
use serde_json::{json, Value};
use sextant_operator::manifests::{crds_yaml, custom_resource_definitions};

const COMMITTED: [&str; 2] = ["crds/sextant.dev.yaml", "charts/sextant/crds/sextant.dev.yaml"];

#[test]
fn committed_crds_are_up_to_date() {
    let generated = crds_yaml().expect("CRDs serialize");
    let update = std::env::var_os("SEXTANT_UPDATE_CRDS").is_some();
    for file in COMMITTED {
        let path = repo().join(file);
        if update {
            std::fs::write(&path, &generated).expect("writing the CRDs");
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{file} is stale; regenerate it with\n  SEXTANT_UPDATE_CRDS=1 cargo nextest run -p sextant-operator -E 'test(committed_crds_are_up_to_date)'\nor\n  cargo run -q -- crds > {file}"
        );
    }
}

fn examples() -> Vec<(PathBuf, Value)> {
    let mut out = vec![];
    let dir = repo().join("crds/examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("crds/examples exists").map(|e| e.unwrap().path()).collect();
    files.sort();
    for path in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.extend(docs.into_iter().map(|d| (path.clone(), d)));
    }
    out
}

#[test]
fn every_sample_is_valid_against_its_crd() {
    let samples = examples();
    for (path, doc) in &samples {
        assert_eq!(doc["apiVersion"], "sextant.dev/v1alpha1", "{}", path.display());
        let kind = doc["kind"].as_str().expect("kind");
        let errs = errors(kind, doc);
        assert!(errs.is_empty(), "{} ({kind}) is invalid:\n{}", path.display(), errs.join("\n"));
    }
    let mut kinds: Vec<&str> = samples.iter().filter_map(|(_, d)| d["kind"].as_str()).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds, ["AlertRule", "Plan", "Project", "Quota", "SextantCluster", "Tenant"], "one sample per kind");
}

#[test]
fn samples_deserialize_into_the_typed_resources() {
    use sextant_operator::v1alpha1::*;
    for (path, doc) in examples() {
        let kind = doc["kind"].as_str().unwrap().to_owned();
        let result = match kind.as_str() {
            "SextantCluster" => serde_json::from_value::<SextantCluster>(doc).map(drop),
            "Tenant" => serde_json::from_value::<Tenant>(doc).map(drop),
            "Project" => serde_json::from_value::<Project>(doc).map(drop),
            "Plan" => serde_json::from_value::<Plan>(doc).map(drop),
            "Quota" => serde_json::from_value::<Quota>(doc).map(drop),
            "AlertRule" => serde_json::from_value::<AlertRule>(doc).map(drop),
            other => panic!("unexpected kind {other}"),
        };
        result.unwrap_or_else(|e| panic!("{} ({kind}): {e}", path.display()));
    }
}

fn sample(kind: &str) -> Value {
    examples().into_iter().map(|(_, d)| d).find(|d| d["kind"] == kind).unwrap()
}

/// The validation above is not vacuous: broken samples are refused, each for its reason.
#[test]
fn invalid_resources_are_refused() {
    let mut rule = sample("AlertRule");
    rule["spec"]["windowMinutes"] = json!(1441);
    assert!(!errors("AlertRule", &rule).is_empty(), "window above 1440");
    let mut rule = sample("AlertRule");
    rule["spec"]["windowMinutes"] = json!(0);
    assert!(!errors("AlertRule", &rule).is_empty(), "window of 0");
    let mut rule = sample("AlertRule");
    rule["spec"]["metric"] = json!("bogus_metric");
    assert!(!errors("AlertRule", &rule).is_empty(), "unknown metric");
    let mut rule = sample("AlertRule");
    rule["spec"]["comparison"] = json!("==");
    assert!(!errors("AlertRule", &rule).is_empty(), "unknown comparison");
    let mut cluster = sample("SextantCluster");
    cluster["spec"]["storage"]["replicas"] = json!(3);
    assert!(!errors("SextantCluster", &cluster).is_empty(), "unknown field");
    let mut cluster = sample("SextantCluster");
    cluster["spec"]["storage"]["nodes"] = json!(0);
    assert!(!errors("SextantCluster", &cluster).is_empty(), "zero nodes");
    let mut tenant = sample("Tenant");
    tenant["spec"].as_object_mut().unwrap().remove("plan");
    assert!(!errors("Tenant", &tenant).is_empty(), "missing plan");
    let mut quota = sample("Quota");
    quota["spec"]["enforcement"] = json!("Maybe");
    assert!(!errors("Quota", &quota).is_empty(), "unknown enforcement");
}

#[test]
fn cluster_crd_has_scale_subresource_immutable_fields_and_printer_columns() {
    let crd = custom_resource_definitions().into_iter().find(|c| c.spec.names.kind == "SextantCluster").unwrap();
    let v = serde_json::to_value(&crd.spec.versions[0]).unwrap();
    assert_eq!(v["subresources"]["scale"]["specReplicasPath"], ".spec.storage.nodes");
    assert_eq!(v["subresources"]["scale"]["statusReplicasPath"], ".status.storageNodes");
    assert!(v["subresources"]["status"].is_object());
    let rf = &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["storage"]["properties"]
        ["replicationFactor"];
    assert_eq!(rf["x-kubernetes-validations"][0]["rule"], "self == oldSelf", "{rf}");
    let columns: Vec<&str> =
        v["additionalPrinterColumns"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(columns, ["Nodes", "Ready", "Routers", "Phase", "Age"]);
    let plan = custom_resource_definitions().into_iter().find(|c| c.spec.names.kind == "Plan").unwrap();
    assert_eq!(plan.spec.scope, "Cluster");
    for crd in custom_resource_definitions() {
        assert_eq!(crd.spec.group, "sextant.dev");
        let status =
            &serde_json::to_value(&crd.spec.versions[0]).unwrap()["schema"]["openAPIV3Schema"]["properties"]["status"];
        assert!(status["properties"]["conditions"].is_object(), "{} status has conditions", crd.spec.names.kind);
        assert!(
            status["properties"]["observedGeneration"].is_object(),
            "{} status has observedGeneration",
            crd.spec.names.kind
        );
    }
}
