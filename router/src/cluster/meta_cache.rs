//! The router's copy of the meta view (credentials, projects, orgs, plans, quotas, the
//! partition table), indexed the way requests look things up; refreshed every second and
//! after every change this router makes.

use std::collections::{HashMap, HashSet};

use sextant_model::meta::{
    AlertRule, Credential, Member, MetaView, Org, Plan, Project, Quota, RateLimitOverrides, ROUTER_LIVE_MS,
};
use sextant_model::subscription::{effective_plan, BillingAccount};
use sextant_model::usage::UsageCounts;
use sextant_model::{OrgId, ProjectId, UserId};

/// Meta records indexed the way requests look them up.
#[derive(Default)]
pub struct MetaCache {
    pub version: u64,
    /// The partition table: the data group of every hash partition (`model::partition`).
    pub partition_groups: Vec<u64>,
    pub credentials: HashMap<String, Credential>,
    pub projects: HashMap<ProjectId, Project>,
    pub orgs: HashMap<OrgId, Org>,
    pub members: HashMap<UserId, Member>,
    pub removed_users: HashSet<UserId>,
    pub revoked_sessions: HashSet<String>,
    pub plans: HashMap<String, Plan>,
    pub quotas: Vec<Quota>,
    /// Latest heartbeat of every router, in the routers' own clocks.
    pub routers: Vec<i64>,
    pub alert_rules: Vec<AlertRule>,
    /// Enabled webhooks, for matching ingested event names.
    pub webhooks: Vec<sextant_model::webhook::WebhookInfo>,
    pub deleted_projects: HashSet<ProjectId>,
    /// When each org's trial ends.
    pub trials: HashMap<OrgId, i64>,
    /// (project, month `YYYYMM`) -> usage, for the two newest months the storage nodes
    /// reported (docs/API.md, "Usage"): at most a few seconds behind what was committed.
    pub usage: HashMap<(ProjectId, u32), UsageCounts>,
    /// (org, month) -> the sum of [`Self::usage`] over the org's live projects, derived once
    /// per refresh so that a quota check does not walk every project.
    pub org_usage: HashMap<(OrgId, u32), UsageCounts>,
    /// Billing accounts (subscriptions, no history), by org.
    pub billing: HashMap<OrgId, BillingAccount>,
    /// Data group -> the log index its counters in [`Self::usage`] are at.
    pub usage_indexes: HashMap<u64, u64>,
}

impl From<MetaView> for MetaCache {
    fn from(v: MetaView) -> Self {
        let usage: HashMap<(ProjectId, u32), UsageCounts> =
            v.usage.into_iter().filter_map(|u| Some(((u.project_id.parse().ok()?, u.month), u.counts))).collect();
        let deleted_projects: HashSet<ProjectId> = v.deleted_projects.into_iter().collect();
        let org_of: HashMap<ProjectId, OrgId> = v.projects.iter().map(|p| (p.id, p.org_id)).collect();
        let mut org_usage: HashMap<(OrgId, u32), UsageCounts> = HashMap::new();
        for ((project, month), counts) in &usage {
            if let (Some(org), false) = (org_of.get(project), deleted_projects.contains(project)) {
                org_usage.entry((*org, *month)).or_default().add(counts);
            }
        }
        Self {
            version: v.version,
            partition_groups: v.partitions,
            credentials: v.credentials.into_iter().map(|c| (c.id.clone(), c)).collect(),
            projects: v.projects.into_iter().map(|p| (p.id, p)).collect(),
            orgs: v.orgs.into_iter().map(|o| (o.id, o)).collect(),
            members: v.members.into_iter().map(|m| (m.id, m)).collect(),
            removed_users: v.removed_users.into_iter().collect(),
            revoked_sessions: v.revoked_sessions.into_iter().collect(),
            plans: v.plans.into_iter().map(|p| (p.name.clone(), p)).collect(),
            quotas: v.quotas,
            routers: v.routers.into_iter().map(|r| r.at_ms).collect(),
            alert_rules: v.alert_rules,
            webhooks: v.webhooks,
            deleted_projects,
            trials: v.trials.into_iter().map(|t| (t.org_id, t.ends_at_ms)).collect(),
            usage,
            org_usage,
            billing: v.billing.into_iter().map(|a| (a.org_id, a)).collect(),
            usage_indexes: v.usage_indexes.into_iter().map(|r| (r.group, r.applied_index)).collect(),
        }
    }
}

impl MetaCache {
    /// The name of the plan `org` is on at `now` ([`effective_plan`]): what usage, quotas
    /// and plan features read.
    pub fn plan_name(&self, org: &OrgId, now_ms: i64) -> Option<&str> {
        let o = self.orgs.get(org)?;
        Some(effective_plan(o, self.trials.get(org).copied(), self.billing.get(org), now_ms))
    }

    /// The catalog entry of [`Self::plan_name`].
    pub fn plan_of(&self, org: &OrgId, now_ms: i64) -> Option<&Plan> {
        self.plans.get(self.plan_name(org, now_ms)?)
    }

    /// Routers that heartbeated within [`ROUTER_LIVE_MS`]; at least this one.
    pub fn live_routers(&self, now_ms: i64) -> usize {
        self.routers.iter().filter(|at| now_ms - **at < ROUTER_LIVE_MS).count().max(1)
    }

    /// Rate-limit overrides that apply to `org` (and `project` of it), strongest first: the
    /// project's quota, the org's quota, the plan the org is on at `now_ms`.
    pub fn rate_overrides(&self, org: &OrgId, project: Option<&ProjectId>, now_ms: i64) -> Vec<&RateLimitOverrides> {
        let mut layers = Vec::new();
        if let Some(p) = project {
            layers.extend(self.quotas.iter().filter(|q| q.project_id.as_ref() == Some(p)).map(|q| &q.rate_limits));
        }
        layers
            .extend(self.quotas.iter().filter(|q| q.org_id == *org && q.project_id.is_none()).map(|q| &q.rate_limits));
        if let Some(plan) = self.plan_of(org, now_ms) {
            layers.push(&plan.rate_limits);
        }
        layers
    }

    /// Whether `org` was suspended through its Tenant resource.
    pub fn suspended(&self, org: &OrgId) -> bool {
        self.orgs.get(org).is_some_and(|o| o.suspended)
    }

    /// The org of the Tenant resource `key`.
    pub fn tenant(&self, key: &str) -> Option<&Org> {
        self.orgs.values().find(|o| o.key.as_deref() == Some(key))
    }

    /// The project of the Project resource `key`.
    pub fn managed_project(&self, key: &str) -> Option<&Project> {
        self.projects.values().find(|p| p.key.as_deref() == Some(key))
    }

    /// The quota of the Quota resource `key`.
    pub fn managed_quota(&self, key: &str) -> Option<&Quota> {
        self.quotas.iter().find(|q| q.id == key && q.managed_by.is_some())
    }

    /// [`Self::rate_overrides`] of the org owning `project`.
    pub fn project_rate_overrides(&self, project: &ProjectId, now_ms: i64) -> Vec<&RateLimitOverrides> {
        match self.projects.get(project) {
            Some(p) => self.rate_overrides(&p.org_id, Some(project), now_ms),
            None => Vec::new(),
        }
    }
}
