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
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Value", type_ = "number", json_path = ".status.lastValue"),
    printcolumn(name = "Last Transition", type_ = "date", json_path = ".status.lastTransitionTime"),
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
    /// Seconds the condition must hold before the rule fires (0: at the first evaluation).
    #[serde(default)]
    #[schemars(range(max = 86400))]
    pub for_seconds: u32,
    /// Where the rule's `system.alert_triggered` / `system.alert_resolved` events go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<AlertNotify>,
}

/// A notification target of an alert rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertNotify {
    /// Id of a webhook of the rule's project (`POST /api/webhooks`).
    #[schemars(length(min = 1, max = 64))]
    pub webhook_id: String,
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
    /// `ok`, `pending`, `firing` or `no_data`, as of the last reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The metric's value at the last evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_value: Option<f64>,
    /// When the rule last changed state (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}
