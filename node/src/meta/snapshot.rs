//! The persisted form of the meta state: one JSON object, the layout snapshots have had since
//! before meta was split into aggregates. Fields are only ever added, with `#[serde(default)]`,
//! so that older snapshots still restore; `fixtures/snapshot-before-split.json` is the check.
//! The maps of separate managed-object records that snapshots had before those objects became
//! plain records with `managed_by` are still read, and folded in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sextant_model::cohort::Cohort;
use sextant_model::meta::{
    AlertRule, Credential, Invite, ManagedBy, Org, Plan, PlanPrice, Project, Quota, RefreshFamily, User,
};
use sextant_model::{OrgId, ProjectId, UserId};

use super::accounts::Accounts;
use super::alerts::Alerts;
use super::billing::Billing;
use super::cohorts::Cohorts;
use super::managed::Managed;
use super::membership::ClusterState;
use super::routers::Routers;
use super::sessions::Sessions;
use super::tenancy::Tenancy;
use super::usage::Metering;
use super::webhooks::Webhooks;
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
    #[serde(default, skip_serializing)]
    tenants: BTreeMap<String, OldTenant>,
    #[serde(default, skip_serializing)]
    managed_projects: BTreeMap<String, OldProject>,
    #[serde(default, skip_serializing)]
    managed_credentials: BTreeMap<String, OldCredential>,
    #[serde(default, skip_serializing)]
    managed_plans: BTreeMap<String, OldPlan>,
    #[serde(default, skip_serializing)]
    managed_quotas: BTreeMap<String, OldQuota>,
    /// Keys of deleted Tenant and Project resources, with when.
    #[serde(default)]
    deleted_tenant_keys: BTreeMap<String, i64>,
    #[serde(default)]
    deleted_project_keys: BTreeMap<String, i64>,
    #[serde(default)]
    alert_rules: BTreeMap<String, AlertRule>,
    #[serde(default)]
    deleted_projects: BTreeMap<ProjectId, i64>,
    #[serde(default)]
    cohorts: BTreeMap<String, Cohort>,
    #[serde(default)]
    cluster: ClusterState,
    #[serde(default)]
    metering: Metering,
    /// Billing accounts by org (subscriptions, cards, payments).
    #[serde(default)]
    billing_accounts: BTreeMap<OrgId, sextant_model::subscription::BillingAccount>,
    #[serde(default)]
    webhooks: BTreeMap<String, sextant_model::webhook::Webhook>,
    /// Webhook id -> delivery id -> delivery.
    #[serde(default)]
    webhook_deliveries: BTreeMap<String, BTreeMap<String, sextant_model::webhook::Delivery>>,
    /// Ids of published webhook events -> when.
    #[serde(default)]
    published_events: BTreeMap<String, i64>,
    #[serde(default)]
    alerts: Alerts,
}

// What older snapshots kept beside the plain records, read only to be folded into them.
#[derive(Deserialize)]
struct OldTenant {
    org_id: OrgId,
    owner_email: String,
    suspended: bool,
    managed_by: ManagedBy,
    #[serde(default)]
    deleted_at_ms: Option<i64>,
}

#[derive(Deserialize)]
struct OldProject {
    project_id: ProjectId,
    managed_by: ManagedBy,
    #[serde(default)]
    deleted_at_ms: Option<i64>,
}

#[derive(Deserialize)]
struct OldCredential {
    project_key: String,
}

#[derive(Deserialize)]
struct OldPlan {
    display_name: Option<String>,
    price: Option<PlanPrice>,
    managed_by: ManagedBy,
}

#[derive(Deserialize)]
struct OldQuota {
    monthly_bytes: Option<u64>,
    monthly_events: Option<u64>,
    hard: bool,
    managed_by: ManagedBy,
}

impl MetaSnapshot {
    /// Moves what the old managed-object maps held into the records they described.
    fn fold_old_managed_records(&mut self) {
        for (key, t) in std::mem::take(&mut self.tenants) {
            match (t.deleted_at_ms, self.orgs.get_mut(&t.org_id)) {
                (Some(at), _) => {
                    self.deleted_tenant_keys.insert(key, at);
                }
                (None, Some(org)) => {
                    org.managed_by = Some(t.managed_by);
                    org.key = Some(key);
                    org.owner_email = Some(t.owner_email);
                    org.suspended = t.suspended;
                }
                (None, None) => {}
            }
        }
        for (key, p) in std::mem::take(&mut self.managed_projects) {
            match (p.deleted_at_ms, self.projects.get_mut(&p.project_id)) {
                (Some(at), _) => {
                    self.deleted_project_keys.insert(key, at);
                }
                (None, Some(project)) => {
                    project.managed_by = Some(p.managed_by);
                    project.key = Some(key);
                }
                (None, None) => {}
            }
        }
        for (id, c) in std::mem::take(&mut self.managed_credentials) {
            let managed_by = self.projects.values().find(|p| p.key.as_ref() == Some(&c.project_key));
            if let (Some(credential), Some(project)) = (self.credentials.get_mut(&id), managed_by) {
                credential.managed_by = project.managed_by.clone();
            }
        }
        for (name, p) in std::mem::take(&mut self.managed_plans) {
            if let Some(plan) = self.plans.get_mut(&name) {
                plan.managed_by = Some(p.managed_by);
                plan.display_name = p.display_name;
                plan.price = p.price;
            }
        }
        for (key, q) in std::mem::take(&mut self.managed_quotas) {
            if let Some(quota) = self.quotas.get_mut(&key) {
                quota.managed_by = Some(q.managed_by);
                quota.monthly_bytes = q.monthly_bytes;
                quota.monthly_events = q.monthly_events;
                quota.hard = q.hard;
            }
        }
    }
}

impl From<MetaState> for MetaSnapshot {
    fn from(s: MetaState) -> Self {
        let MetaState {
            webhooks,
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
            metering,
            alerts,
        } = s;
        Self {
            webhooks: webhooks.hooks,
            webhook_deliveries: webhooks.deliveries,
            published_events: webhooks.published,
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
            billing_accounts: billing.accounts,
            trials: tenancy.trials,
            routers: routers.last_seen,
            version,
            tenants: BTreeMap::new(),
            managed_projects: BTreeMap::new(),
            managed_credentials: BTreeMap::new(),
            managed_plans: BTreeMap::new(),
            managed_quotas: BTreeMap::new(),
            deleted_tenant_keys: managed.deleted_tenants,
            deleted_project_keys: managed.deleted_projects,
            alert_rules: managed.alert_rules,
            deleted_projects: tenancy.deleted_projects,
            cohorts: cohorts.by_id,
            cluster,
            metering,
            alerts,
        }
    }
}

impl From<MetaSnapshot> for MetaState {
    fn from(mut s: MetaSnapshot) -> Self {
        s.fold_old_managed_records();
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
            billing: Billing { plans: s.plans, quotas: s.quotas, accounts: s.billing_accounts },
            managed: Managed {
                deleted_tenants: s.deleted_tenant_keys,
                deleted_projects: s.deleted_project_keys,
                alert_rules: s.alert_rules,
            },
            routers: Routers { last_seen: s.routers },
            cohorts: Cohorts { by_id: s.cohorts },
            cluster: s.cluster,
            webhooks: Webhooks { hooks: s.webhooks, deliveries: s.webhook_deliveries, published: s.published_events },
            metering: s.metering,
            alerts: s.alerts,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

    /// Snapshots written before the admin commands existed still restore.
    #[test]
    fn snapshots_without_the_admin_state_restore() {
        let (mut s, _) = state_with_user();
        id_of(put_tenant(&mut s, "t", "Acme", "pro", false));
        let mut old = serde_json::to_value(&s).unwrap();
        for field in ["deleted_tenant_keys", "deleted_project_keys", "alert_rules", "deleted_projects"] {
            assert!(old.as_object_mut().unwrap().remove(field).is_some(), "{field}");
        }
        let mut restored = MetaState::default();
        restored.restore(&mut serde_json::to_vec(&old).unwrap().as_slice()).unwrap();
        assert_eq!(restored.tenancy.orgs.len(), 2);
        assert!(restored.managed.deleted_tenants.is_empty() && restored.tenancy.deleted_projects.is_empty());
    }

    /// A snapshot written by the meta state machine before it was split into aggregates
    /// (every map non-empty) restores to the same catalog, its managed-object maps folded into
    /// the records, and is written back in a form that restores to the same.
    #[test]
    fn a_snapshot_written_before_the_split_restores_unchanged() {
        let bytes: &[u8] = include_bytes!("fixtures/snapshot-before-split.json");
        let mut s = MetaState::default();
        s.restore(&mut &bytes[..]).unwrap();
        let id = |n: u16| format!("00000000-0000-4000-8000-000000000{n:03}");
        let v = view(&s);
        assert_eq!((v.version, v.partitions.as_slice()), (30, &[1, 2][..]));
        let orgs: Vec<(String, &str, &str)> =
            v.orgs.iter().map(|o| (o.id.to_string(), o.name.as_str(), o.plan.as_str())).collect();
        assert_eq!(orgs, [(id(1), "o", "enterprise"), (id(110), "Acme", "pro"), (id(120), "Globex", "gold")]);
        assert_eq!(v.orgs[2].default_project.to_string(), id(121));
        let members: Vec<(String, &str, Role)> =
            v.members.iter().map(|m| (m.org_id.to_string(), m.email.as_str(), m.role)).collect();
        assert_eq!(
            members,
            [
                (id(1), "a@b.co", Role::Owner),
                (id(110), "ada@acme.test", Role::Owner),
                (id(110), "bob@acme.test", Role::Member)
            ]
        );
        let user: User = read(&s, &MetaQuery::UserByEmail { email: "Ada@acme.test".into() });
        assert_eq!((user.id.to_string(), user.password_hash.as_str()), (id(111), "ph-ada"));
        let projects: Vec<(String, &str)> = v.projects.iter().map(|p| (p.id.to_string(), p.name.as_str())).collect();
        assert_eq!(projects, [(id(3), "default"), (id(112), "web"), (id(113), "mobile"), (id(121), "shop")]);
        let credentials: Vec<(&str, String, bool, &str)> = v
            .credentials
            .iter()
            .map(|c| (c.id.as_str(), c.project_id.to_string(), c.revoked, c.secret_sha256.as_str()))
            .collect();
        assert_eq!(
            credentials,
            [
                ("k", id(3), false, "s"),
                ("k-mobile", id(113), true, "h-k-mobile"),
                ("k-web", id(112), false, "h-k-web"),
                ("m-api", id(121), false, "h-m-api"),
                ("m-ingest", id(121), false, "h-m-ingest"),
            ]
        );
        let plans: Vec<&str> = v.plans.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(plans, ["business", "enterprise", "free", "gold", "growth", "pro"]);
        let gold = v.plans.iter().find(|p| p.name == "gold").unwrap();
        assert_eq!(
            (gold.monthly_bytes, gold.retention_days, gold.features.as_slice()),
            (Some(1 << 40), Some(90), &["sso".to_string()][..])
        );
        assert_eq!(v.plans.iter().find(|p| p.name == "free").unwrap().rate_limits.ingest_rps, Some(7));
        let quotas: Vec<(&str, String, Option<u32>, Option<u32>)> = v
            .quotas
            .iter()
            .map(|q| (q.id.as_str(), q.org_id.to_string(), q.rate_limits.ingest_rps, q.rate_limits.api_rps))
            .collect();
        assert_eq!(quotas, [("q-acme", id(110), Some(50), Some(5)), ("quota-uid", id(120), Some(100), None)]);
        assert_eq!(v.trials.len(), 1);
        assert_eq!((v.trials[0].org_id.to_string(), v.trials[0].ends_at_ms), (id(110), T0 + 14 * 86_400_000));
        assert_eq!(v.removed_users.iter().map(ToString::to_string).collect::<Vec<_>>(), [id(115)]);
        assert_eq!(v.revoked_sessions, ["fam-eve"]);
        assert_eq!((v.routers[0].id.as_str(), v.routers[0].at_ms), ("router-a", T0 + 6));
        let tenants: Vec<(&str, String, &str)> = v
            .orgs
            .iter()
            .filter_map(|o| Some((o.key.as_deref()?, o.id.to_string(), o.owner_email.as_deref()?)))
            .collect();
        assert_eq!(tenants, [("tenant-uid", id(120), "ops@globex.test")]);
        assert_eq!(v.orgs[2].managed_by.as_ref().unwrap().kind, "Tenant");
        let managed_projects: Vec<&str> = v.projects.iter().filter_map(|p| p.key.as_deref()).collect();
        assert_eq!(managed_projects, ["project-uid"], "the deleted one is not in the view");
        assert!(s.managed.deleted_projects.contains_key("project2-uid"), "its key stays a tombstone");
        let managed_credentials: Vec<&str> =
            v.credentials.iter().filter(|c| c.managed_by.is_some()).map(|c| c.id.as_str()).collect();
        assert_eq!(managed_credentials, ["m-api", "m-ingest"]);
        let managed_plans: Vec<&Plan> = v.plans.iter().filter(|p| p.managed_by.is_some()).collect();
        assert_eq!((managed_plans.len(), managed_plans[0].price.as_ref().unwrap().amount_cents), (1, 9900));
        assert_eq!(managed_plans[0].display_name.as_deref(), Some("Gold"));
        let managed_quotas: Vec<(&str, bool, Option<u64>)> = v
            .quotas
            .iter()
            .filter(|q| q.managed_by.is_some())
            .map(|q| (q.id.as_str(), q.hard, q.monthly_bytes))
            .collect();
        assert_eq!(managed_quotas, [("quota-uid", true, Some(1 << 30))]);
        assert_eq!((v.alert_rules[0].id.as_str(), v.alert_rules[0].project_id.to_string()), ("rule-1", id(121)));
        assert_eq!(v.deleted_projects.iter().map(ToString::to_string).collect::<Vec<_>>(), [id(122)]);
        let acme: OrgMembers = read(&s, &MetaQuery::OrgMembers { org_id: id(110).parse().unwrap() });
        assert_eq!(acme.members.len(), 2);
        assert_eq!(acme.invites.iter().map(|i| i.email.as_str()).collect::<Vec<_>>(), ["dan@acme.test"]);
        let globex: OrgMembers = read(&s, &MetaQuery::OrgMembers { org_id: id(120).parse().unwrap() });
        assert_eq!((globex.invites[0].email.as_str(), globex.invites[0].role), ("ops@globex.test", Role::Owner));
        let cohorts: Vec<Cohort> = read(&s, &MetaQuery::Cohorts { project_id: id(112).parse().unwrap() });
        assert_eq!(cohorts.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["buyers"]);
        let cluster: sextant_model::meta::ClusterView = read(&s, &MetaQuery::Cluster);
        assert_eq!((cluster.replication_factor, cluster.nodes.len()), (3, 4));
        assert_eq!(cluster.replicas[&1], [1, 2, 3]);
        let mut written = Vec::new();
        s.snapshot_writer()(&mut written).unwrap();
        let mut again = MetaState::default();
        again.restore(&mut written.as_slice()).unwrap();
        assert_eq!(view(&again), v);
        assert_eq!(again.managed.deleted_projects, s.managed.deleted_projects);
        let mut rewritten = Vec::new();
        again.snapshot_writer()(&mut rewritten).unwrap();
        assert!(rewritten == written, "writing a restored snapshot changes nothing");
    }
}
