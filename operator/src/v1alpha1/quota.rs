use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::CommonStatus;
pub use sextant_model::admin::Enforcement;

/// Overrides of a tenant's or a project's plan limits.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sextant.dev",
    version = "v1alpha1",
    kind = "Quota",
    namespaced,
    status = "CommonStatus",
    derive = "PartialEq",
    category = "sextant",
    doc = "Per-tenant or per-project overrides of plan limits.",
    printcolumn(name = "Tenant", type_ = "string", json_path = ".spec.tenant"),
    printcolumn(name = "Project", type_ = "string", json_path = ".spec.project"),
    printcolumn(name = "Enforcement", type_ = "string", json_path = ".spec.enforcement"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = "has(self.tenant) != has(self.project)")]
#[serde(rename_all = "camelCase")]
pub struct QuotaSpec {
    /// A `Tenant` in this namespace (exactly one of tenant and project).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// A `Project` in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gb_per_month: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_per_month: Option<u64>,
    /// Ingest requests per second (per API key or project token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest_requests_per_second: Option<u32>,
    #[serde(default)]
    pub enforcement: Enforcement,
}
