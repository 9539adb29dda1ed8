//! Validation of resources against the operator's CRD schemas, shared by the tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub mod pod_security;

use serde_json::{json, Value};
use sextant_operator::manifests::custom_resource_definitions;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `openAPIV3Schema` of a kind, as a strict JSON Schema.
pub fn schema_of(kind: &str) -> Value {
    let crd = custom_resource_definitions()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let version = crd.spec.versions.iter().find(|v| v.name == "v1alpha1").expect("v1alpha1");
    let mut schema =
        serde_json::to_value(version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("schema"))
            .unwrap();
    // The API server adds these to every kind; the CRD schema leaves them out.
    let props = schema["properties"].as_object_mut().expect("root properties");
    props.insert("apiVersion".into(), json!({"type": "string"}));
    props.insert("kind".into(), json!({"type": "string"}));
    props.insert("metadata".into(), json!({"type": "object"}));
    strict(schema)
}

/// OpenAPI v3 structural schema → JSON Schema: `nullable` becomes a null type, int-or-string
/// accepts both, and objects with declared properties refuse others (the API server would
/// silently prune them, hiding typos in samples).
pub fn strict(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        for key in ["properties"] {
            if let Some(props) = obj.get_mut(key).and_then(Value::as_object_mut) {
                for v in props.values_mut() {
                    *v = strict(v.take());
                }
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(v) = obj.get_mut(key).filter(|v| v.is_object()) {
                *v = strict(v.take());
            }
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(list) = obj.get_mut(key).and_then(Value::as_array_mut) {
                for v in list.iter_mut() {
                    *v = strict(v.take());
                }
            }
        }
        if obj.remove("x-kubernetes-int-or-string") == Some(json!(true)) {
            obj.remove("type");
            obj.insert("type".into(), json!(["integer", "string"]));
        }
        if obj.remove("nullable") == Some(json!(true)) {
            if let Some(t) = obj.get("type").and_then(Value::as_str).map(str::to_owned) {
                obj.insert("type".into(), json!([t, "null"]));
            }
        }
        let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        if obj.contains_key("properties") && !obj.contains_key("additionalProperties") && !preserve {
            obj.insert("additionalProperties".into(), json!(false));
        }
    }
    schema
}

pub fn errors(kind: &str, doc: &Value) -> Vec<String> {
    let validator =
        jsonschema::options().should_validate_formats(true).build(&schema_of(kind)).expect("schema compiles");
    validator.iter_errors(doc).map(|e| format!("{}: {e}", e.instance_path())).collect()
}
