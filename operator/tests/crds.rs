//! The committed CRD YAML is what the code generates, and every sample resource is valid
//! against its CRD's schema (strictly: unknown fields are errors, as `kubectl --validate=strict`).

use std::path::PathBuf;

use crate::common;

use crate::common::{errors, repo};
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
    let root_rules = &v["schema"]["openAPIV3Schema"]["x-kubernetes-validations"];
    assert_eq!(root_rules[0]["rule"], "size(self.metadata.name) <= 40", "{root_rules}");
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

/// What the API server demands of a CRD schema before accepting it: structural (every node
/// typed, no references or type-bearing combinators, properties and additionalProperties not
/// mixed) and every `default` valid against its own node.
#[test]
fn crd_schemas_are_structural_and_their_defaults_valid() {
    fn walk(kind: &str, path: &str, node: &Value, problems: &mut Vec<String>, defaults: &mut usize) {
        let Some(obj) = node.as_object() else { return problems.push(format!("{kind} {path}: not an object")) };
        let typed = obj.contains_key("type")
            || obj.get("x-kubernetes-int-or-string") == Some(&json!(true))
            || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        if !typed {
            problems.push(format!("{kind} {path}: no type"));
        }
        for banned in ["$ref", "oneOf", "anyOf", "allOf", "not", "definitions", "$schema"] {
            if obj.contains_key(banned) {
                problems.push(format!("{kind} {path}: uses {banned}"));
            }
        }
        if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
            problems.push(format!("{kind} {path}: both properties and additionalProperties"));
        }
        if let Some(default) = obj.get("default") {
            *defaults += 1;
            let errs: Vec<String> = match jsonschema::validator_for(&common::strict(node.clone())) {
                Ok(v) => v.iter_errors(default).map(|e| e.to_string()).collect(),
                Err(e) => vec![e.to_string()],
            };
            if !errs.is_empty() {
                problems.push(format!("{kind} {path}: default {default} invalid: {}", errs.join("; ")));
            }
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                walk(kind, &format!("{path}.{name}"), child, problems, defaults);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child) = obj.get(key).filter(|c| c.is_object()) {
                walk(kind, &format!("{path}[{key}]"), child, problems, defaults);
            }
        }
    }
    let (mut problems, mut defaults) = (vec![], 0);
    for crd in custom_resource_definitions() {
        for version in &crd.spec.versions {
            let schema =
                serde_json::to_value(version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap()).unwrap();
            walk(&crd.spec.names.kind, "", &schema, &mut problems, &mut defaults);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(defaults >= 15, "only {defaults} defaults checked: the walk misses parts of the schemas");
}
