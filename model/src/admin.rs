//! The admin API's request and response bodies (docs/API.md, "Admin API"): one definition for
//! the router that serves `/admin/v1` and the operator that calls it. The router validates what
//! a type cannot say (names, keys, ranges); unknown fields and unknown enum values are refused
//! when a body is read.
//!
//! The enums are also fields of the operator's custom resources, so with the `schema` feature
//! they describe themselves as JSON Schema.

use serde::{Deserialize, Serialize};

use crate::meta::{AlertFilter, ManagedBy, NodeState};

/// `PUT /admin/v1/tenants/{key}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRequest {
    pub display_name: String,
    pub plan: String,
    pub owner_email: String,
    pub suspended: bool,
    pub managed_by: ManagedBy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantResponse {
    pub org_id: String,
}

/// `PUT /admin/v1/projects/{key}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectRequest {
    /// Key of the tenant (its Kubernetes UID).
    pub tenant_key: String,
    pub name: String,
    pub managed_by: ManagedBy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectResponse {
    pub project_id: String,
}

/// `POST /admin/v1/projects/{key}/credentials`: a new ingest token and API key; the ones issued
/// by earlier calls are revoked, so a retry after a lost response leaves one valid pair.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectCredentials {
    pub project_id: String,
    /// `sxp_…`
    pub ingest_token: String,
    /// `sxk_…`
    pub api_key: String,
}

impl std::fmt::Debug for ProjectCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectCredentials").field("project_id", &self.project_id).finish_non_exhaustive()
    }
}

/// `PUT /admin/v1/plans/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    pub display_name: Option<String>,
    /// `null`: unlimited.
    pub gb_per_month: Option<u64>,
    pub events_per_month: Option<u64>,
    pub retention_days: u32,
    pub features: Vec<PlanFeature>,
    pub price: Option<PlanPrice>,
    pub managed_by: ManagedBy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanPrice {
    pub amount_cents: u64,
    pub currency: String,
    pub interval: BillingInterval,
}

/// `PUT /admin/v1/quotas/{key}`; exactly one of `tenant_key` and `project_key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaRequest {
    pub tenant_key: Option<String>,
    pub project_key: Option<String>,
    /// Monthly byte limit in whole GB (10^9 bytes); at most one of this and `bytes_per_month`.
    pub gb_per_month: Option<u64>,
    /// Monthly byte limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_month: Option<u64>,
    pub events_per_month: Option<u64>,
    pub ingest_requests_per_second: Option<u32>,
    pub enforcement: Enforcement,
    pub managed_by: ManagedBy,
}

/// `GET /admin/v1/quotas/{key}/usage`: what the quota is measured against in the current
/// calendar month (UTC), from the cluster's roll-up of committed usage (a few seconds behind).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaUsage {
    /// `YYYY-MM`.
    pub period: String,
    pub period_start: String,
    /// Exclusive: when the next month begins.
    pub period_end: String,
    /// Of the quota's project, or of its organization's live projects.
    pub used_bytes: u64,
    /// The quota's own byte limit; `None` where it sets none.
    pub limit_bytes: Option<u64>,
    pub used_events: u64,
    pub limit_events: Option<u64>,
}

/// `GET /admin/v1/plans/{name}/usage`: the organizations on the plan this calendar month.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanUsage {
    /// `YYYY-MM`.
    pub period: String,
    pub period_start: String,
    pub period_end: String,
    pub organizations: u64,
    /// Organizations whose usage reached the plan's byte or event limit.
    pub organizations_at_limit: u64,
    /// Summed over the plan's organizations.
    pub used_bytes: u64,
    pub used_events: u64,
    /// `None`: unlimited.
    pub limit_bytes: Option<u64>,
    pub limit_events: Option<u64>,
}

/// `PUT /admin/v1/alert-rules/{key}`: an alert rule of one project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleRequest {
    pub project_key: String,
    pub name: String,
    pub metric: AlertMetric,
    #[serde(deserialize_with = "AlertFilter::deserialize_strict")]
    pub filter: AlertFilter,
    pub comparison: Comparison,
    pub threshold: f64,
    pub window_minutes: u32,
    pub enabled: bool,
    pub managed_by: ManagedBy,
    /// How long the condition must hold before the rule fires.
    #[serde(default)]
    pub for_seconds: u32,
    /// The project's webhook the rule's transitions are for (`None`: every subscribed one).
    #[serde(default)]
    pub webhook_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertRuleResponse {
    pub id: String,
    /// `ok`, `pending`, `firing` or `no_data`.
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub last_value: Option<f64>,
    /// RFC 3339 time of the newest transition.
    #[serde(default)]
    pub last_transition_at: Option<String>,
}

/// `GET /admin/v1/cluster/nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterNodes {
    pub nodes: Vec<ClusterNode>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterNode {
    /// Raft node id allocated by meta.
    pub id: u64,
    /// `NAME-node-N.NAME-node.NAMESPACE.svc:7000`.
    pub address: String,
    pub state: MembershipState,
    /// The node's failure zone, absent when it reported none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// `GET /admin/v1/cluster/groups`: where each Raft group's replicas are, and in which zones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterGroups {
    /// Distinct zones among the member nodes; nodes without a zone count as one.
    pub zones: u32,
    pub groups: Vec<ClusterGroup>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterGroup {
    pub group: u64,
    /// The voters of the group's last committed membership, as its leader reported them.
    pub replicas: Vec<u64>,
    /// Where placement wants them.
    pub desired: Vec<u64>,
    /// The zone of each of `replicas`, in the same order (`null`: the node has none).
    pub zones: Vec<Option<String>>,
    /// False while the replicas break the zone rule: two in one zone although there are
    /// enough zones for one each (or, with fewer zones, a zone with more than its share).
    pub zone_spread: bool,
}

/// `POST /admin/v1/cluster/placement`: the complete member set, by node address; meta places
/// replicas on new members and rebalances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementRequest {
    pub nodes: Vec<String>,
}

/// `POST /admin/v1/cluster/drain`: move every replica off one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    pub address: String,
}

/// `POST /admin/v1/cluster/replace` and `POST /admin/v1/cluster/remove`: one node, by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeIdRequest {
    pub id: u64,
}

/// `GET /admin/v1/cluster/identities`: which incarnation holds each node id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeIdentities {
    pub nodes: Vec<NodeIdentity>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeIdentity {
    pub id: u64,
    /// 16 hex digits; all zeros for an id registered before incarnations existed.
    pub incarnation: String,
    /// The incarnation of a node that restarted on an empty data directory under this id: it
    /// does not vote until replaced.
    pub needs_replacement: Option<String>,
    pub replacing: Option<NodeReplacementStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReplacementStatus {
    pub incarnation: String,
    /// Groups whose leader has not yet removed the old incarnation.
    pub groups_left: Vec<u64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanFeature {
    Retention,
    SessionReplay,
    Webhooks,
    Alerts,
}

impl PlanFeature {
    pub const ALL: [PlanFeature; 4] =
        [PlanFeature::Retention, PlanFeature::SessionReplay, PlanFeature::Webhooks, PlanFeature::Alerts];

    pub fn as_str(self) -> &'static str {
        match self {
            PlanFeature::Retention => "retention",
            PlanFeature::SessionReplay => "session_replay",
            PlanFeature::Webhooks => "webhooks",
            PlanFeature::Alerts => "alerts",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum BillingInterval {
    #[default]
    Month,
    Year,
}

impl BillingInterval {
    pub fn as_str(self) -> &'static str {
        match self {
            BillingInterval::Month => "month",
            BillingInterval::Year => "year",
        }
    }
}

/// `Hard` refuses ingest over the limit (402); `Soft` only reports it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Enforcement {
    #[default]
    Hard,
    Soft,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AlertMetric {
    ErrorRate,
    ErrorCount,
    SpanCount,
    P95LatencyMs,
    P99LatencyMs,
    LogCount,
    CpuPercent,
    MemoryUsedBytes,
    DiskUsedPercent,
    P50LatencyMs,
    /// Spans per second.
    RequestRate,
    /// Analytics events (of `filter.event`, or all).
    EventCount,
}

impl AlertMetric {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertMetric::ErrorRate => "error_rate",
            AlertMetric::ErrorCount => "error_count",
            AlertMetric::SpanCount => "span_count",
            AlertMetric::P95LatencyMs => "p95_latency_ms",
            AlertMetric::P99LatencyMs => "p99_latency_ms",
            AlertMetric::LogCount => "log_count",
            AlertMetric::CpuPercent => "cpu_percent",
            AlertMetric::MemoryUsedBytes => "memory_used_bytes",
            AlertMetric::DiskUsedPercent => "disk_used_percent",
            AlertMetric::P50LatencyMs => "p50_latency_ms",
            AlertMetric::RequestRate => "request_rate",
            AlertMetric::EventCount => "event_count",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Comparison {
    #[serde(rename = ">")]
    Greater,
    #[serde(rename = ">=")]
    GreaterOrEqual,
    #[serde(rename = "<")]
    Less,
    #[serde(rename = "<=")]
    LessOrEqual,
}

impl Comparison {
    pub fn as_str(self) -> &'static str {
        match self {
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
        }
    }
}

/// A storage node's place in the cluster, as meta reports it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum MembershipState {
    /// Pod exists, the node holds no replicas yet.
    Joining,
    /// Holds replicas.
    Active,
    /// Replicas are being moved away.
    Draining,
    /// Holds no replicas; safe to remove.
    Drained,
    /// Not reachable by meta.
    Unknown,
}

impl From<NodeState> for MembershipState {
    fn from(s: NodeState) -> Self {
        match s {
            NodeState::Joining => MembershipState::Joining,
            NodeState::Active => MembershipState::Active,
            NodeState::Draining => MembershipState::Draining,
            NodeState::Drained => MembershipState::Drained,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_names_on_the_wire_are_the_names_meta_stores() {
        for f in PlanFeature::ALL {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
        assert_eq!(serde_json::to_value(AlertMetric::P95LatencyMs).unwrap(), "p95_latency_ms");
        assert_eq!(serde_json::to_value(Comparison::GreaterOrEqual).unwrap(), ">=");
        assert_eq!(serde_json::to_value(BillingInterval::Year).unwrap(), BillingInterval::Year.as_str());
    }

    #[test]
    fn unknown_fields_and_values_are_refused_when_read() {
        let rule = |extra: &str| {
            format!(
                r#"{{"project_key":"p","name":"n","metric":"error_rate","filter":{{}},"comparison":">",
                "threshold":1,"window_minutes":5,"enabled":true,
                "managed_by":{{"api_version":"v","kind":"AlertRule","name":"n","uid":"u"}}{extra}}}"#
            )
        };
        assert!(serde_json::from_str::<AlertRuleRequest>(&rule("")).is_ok());
        assert!(serde_json::from_str::<AlertRuleRequest>(&rule(r#","surprise":1"#)).is_err());
        assert!(serde_json::from_str::<AlertRuleRequest>(&rule("").replace("error_rate", "vibes")).is_err());
    }
}
