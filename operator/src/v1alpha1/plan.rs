use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
pub use sextant_model::admin::{BillingInterval, PlanFeature};

/// A catalog entry: what an organization on this plan may use.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "sextant.dev",
    version = "v1alpha1",
    kind = "Plan",
    status = "PlanStatus",
    derive = "PartialEq",
    category = "sextant",
    doc = "A plan of the catalog (cluster-scoped): quotas, retention, features and price.",
    printcolumn(name = "GB/month", type_ = "integer", json_path = ".spec.quotas.gbPerMonth"),
    printcolumn(name = "Events/month", type_ = "integer", json_path = ".spec.quotas.eventsPerMonth"),
    printcolumn(name = "Retention", type_ = "integer", json_path = ".spec.retentionDays"),
    printcolumn(name = "Tenants", type_ = "integer", json_path = ".status.usage.organizations"),
    printcolumn(name = "At limit", type_ = "integer", json_path = ".status.usage.organizationsAtLimit"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default)]
    pub quotas: PlanQuotas,
    #[schemars(range(min = 1, max = 3650))]
    pub retention_days: u32,
    /// Feature flags, e.g. `retention` (retention analytics).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<PlanFeature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
}

/// Absent limits are unlimited.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanQuotas {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gb_per_month: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_per_month: Option<u64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    pub amount_cents: u64,
    /// ISO 4217 code.
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub currency: String,
    #[serde(default)]
    pub interval: BillingInterval,
}

/// Conditions, and this month's usage of the organizations on the plan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<PlanUsageStatus>,
}

/// Summed over every SextantCluster, read every minute.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanUsageStatus {
    /// The calendar month (UTC), `YYYY-MM`.
    pub period: String,
    /// Organizations on the plan.
    pub organizations: u64,
    /// Those whose usage this month reached the plan's byte or event limit.
    pub organizations_at_limit: u64,
    pub used_bytes: u64,
    pub used_events: u64,
    /// When the clusters were asked.
    pub observed_at: Time,
}
