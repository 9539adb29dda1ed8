//! The `sextant.dev/v1alpha1` custom resources (docs/KUBERNETES.md).

// `printcolumn(type_ = …)` repeated per column reads as a duplicated attribute to clippy.
#![allow(clippy::duplicated_attributes)]

mod alert_rule;
mod cluster;
mod plan;
mod project;
mod quota;
mod tenant;

pub use alert_rule::*;
pub use cluster::*;
pub use plan::*;
pub use project::*;
pub use quota::*;
pub use tenant::*;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "sextant.dev";

/// The status every tenancy and catalog resource carries: conditions plus the generation they
/// describe.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommonStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
