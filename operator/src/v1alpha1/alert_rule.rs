use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
pub use sextant_model::admin::{AlertMetric, Comparison};
pub use sextant_model::meta::AlertFilter;

/// An alert rule of a project, read-only through the public API.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "sextant.dev",
    version = "v1alpha1",
    kind = "AlertRule",
    namespaced,
    status = "AlertRuleStatus",
    derive = "PartialEq",
    category = "sextant",
    doc = "An alert rule of a project.",
    printcolumn(name = "Project", type_ = "string", json_path = ".spec.project"),
    printcolumn(name = "Metric", type_ = "string", json_path = ".spec.metric"),
    printcolumn(name = "Threshold", type_ = "number", json_path = ".spec.threshold"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AlertRuleSpec {
    /// A `Project` in this namespace.
    #[schemars(length(min = 1, max = 253))]
    pub project: String,
    /// Rule name; defaults to the resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub name: Option<String>,
    pub metric: AlertMetric,
    #[serde(default)]
    pub filter: AlertFilter,
    pub comparison: Comparison,
    pub threshold: f64,
    #[schemars(range(min = 1, max = 1440))]
    pub window_minutes: u32,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertRuleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Id of the rule in the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
}
