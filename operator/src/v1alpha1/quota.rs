use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
pub use sextant_model::admin::Enforcement;

/// Overrides of a tenant's or a project's plan limits.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sextant.dev",
    version = "v1alpha1",
    kind = "Quota",
    namespaced,
    status = "QuotaStatus",
    derive = "PartialEq",
    category = "sextant",
    doc = "Per-tenant or per-project overrides of plan limits.",
    printcolumn(name = "Tenant", type_ = "string", json_path = ".spec.tenant"),
    printcolumn(name = "Project", type_ = "string", json_path = ".spec.project"),
    printcolumn(name = "Enforcement", type_ = "string", json_path = ".spec.enforcement"),
    printcolumn(name = "Used %", type_ = "integer", json_path = ".status.usage.percentage"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = "has(self.tenant) != has(self.project)")]
#[x_kube(validation = Rule::new("!(has(self.gbPerMonth) && has(self.bytesPerMonth))").message("at most one of gbPerMonth and bytesPerMonth"))]
#[serde(rename_all = "camelCase")]
pub struct QuotaSpec {
    /// A `Tenant` in this namespace (exactly one of tenant and project).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// A `Project` in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Monthly byte limit in whole GB (10^9 bytes); at most one of this and `bytesPerMonth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gb_per_month: Option<u64>,
    /// Monthly byte limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_month: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_per_month: Option<u64>,
    /// Ingest requests per second (per API key or project token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest_requests_per_second: Option<u32>,
    #[serde(default)]
    pub enforcement: Enforcement,
}

/// Conditions, and this month's usage against the quota's limits.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<QuotaUsageStatus>,
}

/// The usage the quota is measured against (its project's, or its tenant's), read from the
/// cluster every minute; the cluster's own view is a few seconds behind ingest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUsageStatus {
    /// The calendar month (UTC), `YYYY-MM`.
    pub period: String,
    pub used_bytes: u64,
    /// The quota's byte limit; absent where it sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    pub used_events: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_events: Option<u64>,
    /// Whole percent of the most used of the quota's limits; absent when it sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<u64>,
    /// When the cluster was asked.
    pub observed_at: Time,
}
