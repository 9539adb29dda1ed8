use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// An organization in a Sextant cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sextant.dev",
    version = "v1alpha1",
    kind = "Tenant",
    namespaced,
    status = "TenantStatus",
    derive = "PartialEq",
    category = "sextant",
    doc = "An organization of a Sextant cluster.",
    printcolumn(name = "Plan", type_ = "string", json_path = ".spec.plan"),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspended"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(TENANT_CLUSTER_FIXED).message("cluster is immutable (it cannot be added or removed either)"))]
pub struct TenantSpec {
    #[schemars(length(min = 1, max = 200))]
    pub display_name: String,
    /// Name of a cluster-scoped `Plan`.
    #[schemars(length(min = 1, max = 63))]
    pub plan: String,
    /// The organization's first owner.
    #[schemars(email)]
    pub owner_email: String,
    /// A suspended tenant's ingest is refused; its data is kept.
    #[serde(default)]
    pub suspended: bool,
    /// `SextantCluster` in this namespace; may be omitted when the namespace has exactly one.
    /// Fixed at creation, including whether it is set (a rule on `spec`, as a field's own
    /// `self == oldSelf` does not run when the field is added or removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// Transition rule of a Tenant's `spec`: `cluster` keeps its presence and its value.
pub const TENANT_CLUSTER_FIXED: &str =
    "has(self.cluster) == has(oldSelf.cluster) && (!has(self.cluster) || self.cluster == oldSelf.cluster)";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Organization id in the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org_id: Option<String>,
    /// Projects that still reference this tenant.
    #[serde(default)]
    pub projects: i32,
}
