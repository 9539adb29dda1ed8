use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::CommonStatus;
pub use sextant_model::admin::{BillingInterval, PlanFeature};

/// A catalog entry: what an organization on this plan may use.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "sextant.dev",
    version = "v1alpha1",
    kind = "Plan",
    status = "CommonStatus",
    derive = "PartialEq",
    category = "sextant",
    doc = "A plan of the catalog (cluster-scoped): quotas, retention, features and price.",
    printcolumn(name = "GB/month", type_ = "integer", json_path = ".spec.quotas.gbPerMonth"),
    printcolumn(name = "Events/month", type_ = "integer", json_path = ".spec.quotas.eventsPerMonth"),
    printcolumn(name = "Retention", type_ = "integer", json_path = ".spec.retentionDays"),
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
