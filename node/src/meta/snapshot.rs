//! The persisted form of the meta state: one JSON object, the layout snapshots have had since
//! before meta was split into aggregates. Fields are only ever added, with `#[serde(default)]`,
//! so that older snapshots still restore; `fixtures/snapshot-before-split.json` is the check.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sextant_model::cohort::Cohort;
use sextant_model::meta::{
    AlertRule, Credential, Invite, ManagedCredential, ManagedOrg, ManagedPlan, ManagedProject, ManagedQuota, Org, Plan,
    Project, Quota, RefreshFamily, User,
};
use sextant_model::{OrgId, ProjectId, UserId};

use super::accounts::Accounts;
use super::billing::Billing;
use super::cohorts::Cohorts;
use super::managed::Managed;
use super::membership::ClusterState;
use super::routers::Routers;
use super::sessions::Sessions;
use super::tenancy::Tenancy;
use super::MetaState;

#[derive(Serialize, Deserialize)]
pub(super) struct MetaSnapshot {
    orgs: BTreeMap<OrgId, Org>,
    users: BTreeMap<UserId, User>,
    projects: BTreeMap<ProjectId, Project>,
    credentials: BTreeMap<String, Credential>,
    /// Data group of each hash partition.
    partitions: Vec<u64>,
    #[serde(default)]
    sessions: BTreeMap<String, RefreshFamily>,
    #[serde(default)]
    invites: BTreeMap<String, Invite>,
    #[serde(default)]
    removed_users: BTreeMap<UserId, i64>,
    #[serde(default)]
    plans: BTreeMap<String, Plan>,
    #[serde(default)]
    quotas: BTreeMap<String, Quota>,
    #[serde(default)]
    trials: BTreeMap<OrgId, i64>,
    #[serde(default)]
    routers: BTreeMap<String, i64>,
    #[serde(default)]
    version: u64,
    #[serde(default)]
    tenants: BTreeMap<String, ManagedOrg>,
    #[serde(default)]
    managed_projects: BTreeMap<String, ManagedProject>,
    #[serde(default)]
    managed_credentials: BTreeMap<String, ManagedCredential>,
    #[serde(default)]
    managed_plans: BTreeMap<String, ManagedPlan>,
    #[serde(default)]
    managed_quotas: BTreeMap<String, ManagedQuota>,
    #[serde(default)]
    alert_rules: BTreeMap<String, AlertRule>,
    #[serde(default)]
    deleted_projects: BTreeMap<ProjectId, i64>,
    #[serde(default)]
    cohorts: BTreeMap<String, Cohort>,
    #[serde(default)]
    cluster: ClusterState,
}

impl From<MetaState> for MetaSnapshot {
    fn from(s: MetaState) -> Self {
        let MetaState {
            version,
            partition_groups,
            tenancy,
            accounts,
            sessions,
            billing,
            managed,
            routers,
            cohorts,
            cluster,
        } = s;
        Self {
            orgs: tenancy.orgs,
            users: accounts.users,
            projects: tenancy.projects,
            credentials: tenancy.credentials,
            partitions: partition_groups,
            sessions: sessions.families,
            invites: accounts.invites,
            removed_users: accounts.removed_users,
            plans: billing.plans,
            quotas: billing.quotas,
            trials: tenancy.trials,
            routers: routers.last_seen,
            version,
            tenants: managed.tenants,
            managed_projects: managed.projects,
            managed_credentials: managed.credentials,
            managed_plans: managed.plans,
            managed_quotas: managed.quotas,
            alert_rules: managed.alert_rules,
            deleted_projects: tenancy.deleted_projects,
            cohorts: cohorts.by_id,
            cluster,
        }
    }
}

impl From<MetaSnapshot> for MetaState {
    fn from(s: MetaSnapshot) -> Self {
        MetaState {
            version: s.version,
            partition_groups: s.partitions,
            tenancy: Tenancy {
                orgs: s.orgs,
                projects: s.projects,
                credentials: s.credentials,
                trials: s.trials,
                deleted_projects: s.deleted_projects,
            },
            accounts: Accounts { users: s.users, removed_users: s.removed_users, invites: s.invites },
            sessions: Sessions { families: s.sessions },
            billing: Billing { plans: s.plans, quotas: s.quotas },
            managed: Managed {
                tenants: s.tenants,
                projects: s.managed_projects,
                credentials: s.managed_credentials,
                plans: s.managed_plans,
                quotas: s.managed_quotas,
                alert_rules: s.alert_rules,
            },
            routers: Routers { last_seen: s.routers },
            cohorts: Cohorts { by_id: s.cohorts },
            cluster: s.cluster,
        }
    }
}
