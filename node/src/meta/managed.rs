//! Objects the Kubernetes operator manages through the admin API (docs/API.md, "Admin API"):
//! tenants (orgs), their projects and credentials, plans, quotas and alert rules, each keyed
//! by its resource. The objects are the plain records with `managed_by` set; the keys of deleted
//! tenants and projects are kept as tombstones so that a late retry of the operator never
//! brings them back.

use std::collections::BTreeMap;

use sextant_model::meta::{
    default_plans, AlertFilter, AlertRule, Credential, Invite, ManagedBy, MetaCommandResult, Org, Plan, PlanPrice,
    Project, Quota, RateLimitOverrides, Refusal, Role, MAX_PROJECTS_PER_ORG,
};
use sextant_model::{OrgId, ProjectId};

use super::MetaState;
use MetaCommandResult::{Done, Refused};

#[derive(Clone, Debug, Default)]
pub(super) struct Managed {
    /// Keys of deleted Tenant resources, with when they were deleted.
    pub(super) deleted_tenants: BTreeMap<String, i64>,
    /// Keys of deleted Project resources, with when they were deleted.
    pub(super) deleted_projects: BTreeMap<String, i64>,
    /// Alert rules by id; managed ones also carry their resource key.
    pub(super) alert_rules: BTreeMap<String, AlertRule>,
}

/// `PutManagedQuota`'s fields.
pub(super) struct QuotaSpec {
    pub(super) key: String,
    pub(super) tenant_key: Option<String>,
    pub(super) project_key: Option<String>,
    pub(super) monthly_bytes: Option<u64>,
    pub(super) monthly_events: Option<u64>,
    pub(super) ingest_rps: Option<u32>,
    pub(super) hard: bool,
    pub(super) managed_by: ManagedBy,
}

/// `PutManagedAlertRule`'s fields.
pub(super) struct AlertRuleSpec {
    pub(super) key: String,
    pub(super) project_key: String,
    pub(super) id: String,
    pub(super) name: String,
    pub(super) metric: String,
    pub(super) filter: AlertFilter,
    pub(super) comparison: String,
    pub(super) threshold: f64,
    pub(super) window_minutes: u32,
    pub(super) enabled: bool,
    pub(super) now_ms: i64,
    pub(super) managed_by: ManagedBy,
    pub(super) for_seconds: u32,
    pub(super) webhook_id: Option<String>,
}

impl MetaState {
    /// The org of a tenant key that was not deleted.
    fn live_tenant(&self, key: &str) -> Option<OrgId> {
        self.tenancy.orgs.values().find(|o| o.key.as_deref() == Some(key)).map(|o| o.id)
    }

    /// The project of a managed project key that was not deleted.
    fn live_managed_project(&self, key: &str) -> Option<&Project> {
        self.tenancy.projects.values().find(|p| p.key.as_deref() == Some(key))
    }

    pub(super) fn put_tenant(
        &mut self,
        key: String,
        org: Org,
        owner_email: String,
        suspended: bool,
        managed_by: ManagedBy,
    ) -> MetaCommandResult {
        if self.managed.deleted_tenants.contains_key(&key) {
            return Refused(Refusal::Deleted);
        }
        if let Some(id) = self.live_tenant(&key) {
            let existing = self.tenancy.orgs.get_mut(&id).expect("a live tenant has its org");
            existing.owner_email = Some(owner_email);
            existing.suspended = suspended;
            existing.managed_by = Some(managed_by);
            existing.name = org.name;
            existing.plan = org.plan;
            return MetaCommandResult::Keyed { id: id.to_string() };
        }
        if self.tenancy.orgs.contains_key(&org.id) {
            return Refused(Refusal::NameTaken);
        }
        let id = org.id;
        let org =
            Org { managed_by: Some(managed_by), key: Some(key), owner_email: Some(owner_email), suspended, ..org };
        self.tenancy.orgs.insert(id, org);
        MetaCommandResult::Keyed { id: id.to_string() }
    }

    pub(super) fn delete_tenant(&mut self, key: &str, now_ms: i64) -> MetaCommandResult {
        let Some(org_id) = self.live_tenant(key) else {
            return Done;
        };
        let managed_remain = self.tenancy.projects.values().any(|p| p.org_id == org_id && p.key.is_some());
        if managed_remain {
            return Refused(Refusal::ProjectsRemain);
        }
        for id in self.tenancy.projects_of(org_id) {
            self.delete_project(id, now_ms);
        }
        for user_id in self.accounts.users_of(org_id) {
            self.accounts.remove_user(user_id, now_ms);
            self.sessions.revoke_user(user_id, now_ms);
        }
        self.accounts.invites.retain(|_, i| i.org_id != org_id);
        let quotas: Vec<String> =
            self.billing.quotas.values().filter(|q| q.org_id == org_id).map(|q| q.id.clone()).collect();
        for id in quotas {
            self.billing.quotas.remove(&id);
        }
        self.tenancy.trials.remove(&org_id);
        self.tenancy.orgs.remove(&org_id);
        self.managed.deleted_tenants.insert(key.to_owned(), now_ms);
        Done
    }

    pub(super) fn put_managed_project(
        &mut self,
        key: String,
        tenant_key: &str,
        project: Project,
        managed_by: ManagedBy,
    ) -> MetaCommandResult {
        let Some(org_id) = self.live_tenant(tenant_key) else {
            return Refused(Refusal::NotFound);
        };
        if self.managed.deleted_projects.contains_key(&key) {
            return Refused(Refusal::Deleted);
        }
        let existing = self.live_managed_project(&key).map(|p| (p.id, p.org_id));
        if existing.is_some_and(|(_, org)| org != org_id) {
            // A project does not move between orgs: its data and credentials would follow.
            return Refused(Refusal::NotFound);
        }
        let id = existing.map_or(project.id, |(id, _)| id);
        let tenancy = &mut self.tenancy;
        let name_taken = tenancy
            .projects
            .values()
            .any(|p| p.org_id == org_id && p.id != id && p.name.to_lowercase() == project.name.to_lowercase());
        if name_taken {
            return Refused(Refusal::NameTaken);
        }
        match tenancy.projects.get_mut(&id) {
            Some(p) => {
                p.name = project.name;
                p.managed_by = Some(managed_by);
            }
            None => {
                if tenancy.projects.values().filter(|p| p.org_id == org_id).count() >= MAX_PROJECTS_PER_ORG {
                    return Refused(Refusal::LimitReached);
                }
                if tenancy.projects.contains_key(&project.id) || tenancy.deleted_projects.contains_key(&project.id) {
                    return Refused(Refusal::NameTaken);
                }
                let project = Project { id, org_id, managed_by: Some(managed_by), key: Some(key), ..project };
                tenancy.projects.insert(id, project);
            }
        }
        // An org made by a tenant starts without projects: its first one becomes the default.
        self.tenancy.default_if_missing(org_id, id);
        MetaCommandResult::Keyed { id: id.to_string() }
    }

    /// Replaces the credentials issued earlier for the project of `key`.
    pub(super) fn issue_managed_credentials(&mut self, key: String, credentials: Vec<Credential>) -> MetaCommandResult {
        let Some((project_id, managed_by)) = self.live_managed_project(&key).map(|p| (p.id, p.managed_by.clone()))
        else {
            return Refused(Refusal::NotFound);
        };
        if credentials.iter().any(|c| c.project_id != project_id) {
            return Refused(Refusal::NotFound);
        }
        self.tenancy.credentials.retain(|_, c| !(c.project_id == project_id && c.managed_by.is_some()));
        for c in credentials {
            self.tenancy.credentials.insert(c.id.clone(), Credential { managed_by: managed_by.clone(), ..c });
        }
        Done
    }

    pub(super) fn delete_managed_project(&mut self, key: &str, now_ms: i64) -> MetaCommandResult {
        if let Some(id) = self.live_managed_project(key).map(|p| p.id) {
            self.delete_project(id, now_ms);
        }
        Done
    }

    /// Deletes a project: gone from the catalog with its credentials, quotas and alert rules;
    /// remembered in `deleted_projects` so storage nodes drop its data.
    fn delete_project(&mut self, id: ProjectId, now_ms: i64) {
        let tenancy = &mut self.tenancy;
        let Some(project) = tenancy.projects.remove(&id) else {
            return;
        };
        tenancy.credentials.retain(|_, c| c.project_id != id);
        self.billing.quotas.retain(|_, q| q.project_id != Some(id));
        self.managed.alert_rules.retain(|_, r| r.project_id != id);
        if let Some(key) = &project.key {
            self.managed.deleted_projects.insert(key.clone(), now_ms);
        }
        tenancy.deleted_projects.insert(id, now_ms);
        // The org's default moves to another of its projects, if it has one.
        if let Some(org) = tenancy.orgs.get_mut(&project.org_id) {
            if org.default_project == id {
                if let Some(next) = tenancy.projects.values().filter(|p| p.org_id == project.org_id).map(|p| p.id).min()
                {
                    org.default_project = next;
                }
            }
        }
    }

    /// Adds or replaces a plan; rate limits already set on the entry are kept.
    pub(super) fn put_managed_plan(
        &mut self,
        mut plan: Plan,
        display_name: Option<String>,
        price: Option<PlanPrice>,
        managed_by: ManagedBy,
    ) -> MetaCommandResult {
        if let Some(existing) = self.billing.plans.get(&plan.name) {
            plan.rate_limits = existing.rate_limits.clone();
        }
        let plan = Plan { managed_by: Some(managed_by), display_name, price, ..plan };
        self.billing.plans.insert(plan.name.clone(), plan);
        Done
    }

    /// A default plan returns to its default; a custom one is removed unless an org uses it.
    pub(super) fn delete_managed_plan(&mut self, name: String) -> MetaCommandResult {
        if !self.billing.plans.get(&name).is_some_and(|p| p.managed_by.is_some()) {
            return Done;
        }
        match default_plans().into_iter().find(|p| p.name == name) {
            Some(default) => {
                let rate_limits = self.billing.plans.get(&name).map(|p| p.rate_limits.clone()).unwrap_or_default();
                self.billing.plans.insert(name.clone(), Plan { rate_limits, ..default });
            }
            None => {
                if self.tenancy.orgs.values().any(|o| o.plan == name) {
                    return Refused(Refusal::PlanInUse);
                }
                self.billing.plans.remove(&name);
            }
        }
        Done
    }

    pub(super) fn put_managed_quota(&mut self, spec: QuotaSpec) -> MetaCommandResult {
        let QuotaSpec { key, tenant_key, project_key, monthly_bytes, monthly_events, ingest_rps, hard, managed_by } =
            spec;
        let target = match (tenant_key, project_key) {
            (Some(t), None) => self.live_tenant(&t).map(|org| (org, None)),
            (None, Some(p)) => self.live_managed_project(&p).map(|p| (p.org_id, Some(p.id))),
            _ => None,
        };
        let Some((org_id, project_id)) = target else {
            return Refused(Refusal::NotFound);
        };
        if self.billing.quotas.get(&key).is_some_and(|q| q.managed_by.is_none()) {
            return Refused(Refusal::Managed);
        }
        let rate_limits = RateLimitOverrides { ingest_rps, analytics_rps: ingest_rps, api_rps: None };
        let quota = Quota {
            id: key.clone(),
            org_id,
            project_id,
            rate_limits,
            managed_by: Some(managed_by),
            monthly_bytes,
            monthly_events,
            hard,
        };
        self.billing.quotas.insert(key, quota);
        Done
    }

    pub(super) fn delete_managed_quota(&mut self, key: &str) -> MetaCommandResult {
        if self.billing.quotas.get(key).is_some_and(|q| q.managed_by.is_some()) {
            self.billing.quotas.remove(key);
        }
        Done
    }

    /// Adds or updates the rule of `key`; it keeps its id and creation time across updates.
    pub(super) fn put_managed_alert_rule(&mut self, spec: AlertRuleSpec) -> MetaCommandResult {
        let Some(project_id) = self.live_managed_project(&spec.project_key).map(|p| p.id) else {
            return Refused(Refusal::NotFound);
        };
        let key = spec.key;
        let existing = self.managed.alert_rules.values().find(|r| r.key.as_deref() == Some(key.as_str())).cloned();
        let (id, created_at_ms) = match &existing {
            Some(r) => (r.id.clone(), r.created_at_ms),
            None => (spec.id, spec.now_ms),
        };
        let rule = AlertRule {
            id: id.clone(),
            project_id,
            name: spec.name,
            metric: spec.metric,
            filter: spec.filter,
            comparison: spec.comparison,
            threshold: spec.threshold,
            window_minutes: spec.window_minutes,
            enabled: spec.enabled,
            created_at_ms,
            updated_at_ms: spec.now_ms,
            managed_by: Some(spec.managed_by),
            key: Some(key),
            for_seconds: spec.for_seconds,
            webhook_id: spec.webhook_id,
        };
        self.managed.alert_rules.insert(id.clone(), rule);
        MetaCommandResult::Keyed { id }
    }

    pub(super) fn delete_managed_alert_rule(&mut self, key: &str) -> MetaCommandResult {
        self.managed.alert_rules.retain(|_, r| r.key.as_deref() != Some(key));
        Done
    }

    /// Invites the tenant's owner email into its org as owner, replacing an earlier invitation.
    pub(super) fn invite_tenant_owner(&mut self, key: &str, invite: Invite) -> MetaCommandResult {
        let Some(org) = self.live_tenant(key).and_then(|id| self.tenancy.orgs.get(&id)) else {
            return Refused(Refusal::NotFound);
        };
        let (org_id, email) = (org.id, org.owner_email.clone().unwrap_or_default());
        if self.accounts.email_taken(&email) {
            return Refused(Refusal::EmailTaken);
        }
        self.accounts.invites.retain(|_, i| !(i.org_id == org_id && i.email == email));
        self.accounts.invites.insert(invite.id.clone(), Invite { org_id, email, role: Role::Owner, ..invite });
        MetaCommandResult::Keyed { id: org_id.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

    fn credential(id: &str, kind: CredentialKind, project: ProjectId) -> Credential {
        Credential {
            id: id.into(),
            kind,
            project_id: project,
            name: "kubernetes".into(),
            secret_sha256: format!("h-{id}"),
            created_at_ms: T0,
            revoked: false,
            managed_by: None,
        }
    }

    #[test]
    fn tenants_are_keyed_and_updates_keep_the_org() {
        let mut s = MetaState::default();
        let org = id_of(put_tenant(&mut s, "t-uid", "Acme", "pro", false));
        // A retry (another random id proposed) and an update land on the same org.
        assert_eq!(id_of(put_tenant(&mut s, "t-uid", "Acme", "pro", false)), org);
        assert_eq!(id_of(put_tenant(&mut s, "t-uid", "Acme Corp", "business", true)), org);
        let org_id: OrgId = org.parse().unwrap();
        assert_eq!(
            (s.tenancy.orgs[&org_id].name.as_str(), s.tenancy.orgs[&org_id].plan.as_str()),
            ("Acme Corp", "business")
        );
        let v = view(&s);
        assert_eq!(v.orgs.len(), 1);
        assert!(v.orgs[0].suspended);
        assert_eq!(v.orgs[0].managed_by.as_ref().unwrap().kind, "Tenant");
        assert_eq!(v.orgs[0].key.as_deref(), Some("t-uid"));
        // Deleted: gone, and the key never makes another org.
        assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "t-uid".into(), now_ms: T0 }), Done);
        assert!(s.tenancy.orgs.is_empty());
        assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "t-uid".into(), now_ms: T0 }), Done, "idempotent");
        assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "unknown".into(), now_ms: T0 }), Done);
        assert_eq!(put_tenant(&mut s, "t-uid", "Acme", "pro", false), Refused(Refusal::Deleted));
        assert!(view(&s).orgs.iter().all(|o| o.managed_by.is_none()));
    }

    #[test]
    fn managed_projects_belong_to_their_tenant_and_the_first_is_the_default() {
        let mut s = MetaState::default();
        let org: OrgId = id_of(put_tenant(&mut s, "t", "Acme", "pro", false)).parse().unwrap();
        assert_eq!(put_project(&mut s, "p", "no-such-tenant", "Shop"), Refused(Refusal::NotFound));
        let shop: ProjectId = id_of(put_project(&mut s, "p", "t", "Shop")).parse().unwrap();
        assert_eq!(s.tenancy.projects[&shop].org_id, org, "meta puts the tenant's org, not the proposed one");
        assert_eq!(s.tenancy.orgs[&org].default_project, shop);
        assert_eq!(id_of(put_project(&mut s, "p", "t", "Shop")).parse::<ProjectId>().unwrap(), shop, "retry");
        assert_eq!(id_of(put_project(&mut s, "p", "t", "Store")).parse::<ProjectId>().unwrap(), shop, "rename");
        assert_eq!(s.tenancy.projects[&shop].name, "Store");
        let blog: ProjectId = id_of(put_project(&mut s, "p2", "t", "Blog")).parse().unwrap();
        assert_eq!(s.tenancy.orgs[&org].default_project, shop, "the default stays");
        assert_eq!(put_project(&mut s, "p2", "t", "store"), Refused(Refusal::NameTaken));
        assert_eq!(s.tenancy.projects[&blog].name, "Blog");
        let v = view(&s);
        assert_eq!(v.projects.iter().filter(|p| p.managed_by.is_some()).count(), 2);
        // A tenant with managed projects left is not deleted.
        assert_eq!(
            s.execute(MetaCommand::DeleteTenant { key: "t".into(), now_ms: T0 }),
            Refused(Refusal::ProjectsRemain)
        );
        assert!(s.tenancy.orgs.contains_key(&org));
    }

    #[test]
    fn issuing_credentials_replaces_the_earlier_pair_and_the_public_api_cannot_revoke_them() {
        let mut s = MetaState::default();
        let org: OrgId = id_of(put_tenant(&mut s, "t", "Acme", "pro", false)).parse().unwrap();
        let p: ProjectId = id_of(put_project(&mut s, "p", "t", "Shop")).parse().unwrap();
        let issue = |s: &mut MetaState, a: &str, b: &str| {
            s.execute(MetaCommand::IssueManagedCredentials {
                key: "p".into(),
                credentials: vec![
                    credential(a, CredentialKind::IngestToken, p),
                    credential(b, CredentialKind::ApiKey, p),
                ],
            })
        };
        assert_eq!(issue(&mut s, "a1", "b1"), Done);
        assert_eq!(issue(&mut s, "a2", "b2"), Done);
        let ids: Vec<&String> = s.tenancy.credentials.keys().collect();
        assert_eq!(ids, ["a2", "b2"], "one valid pair after a retry");
        assert_eq!(view(&s).credentials.iter().filter(|c| c.managed_by.is_some()).count(), 2);
        let revoke = MetaCommand::RevokeCredential { org_id: org, id: "b2".into(), kind: CredentialKind::ApiKey };
        assert_eq!(s.execute(revoke), Refused(Refusal::Managed));
        assert!(!s.tenancy.credentials["b2"].revoked);
        // Credentials of another project cannot be slipped in.
        let foreign = MetaCommand::IssueManagedCredentials {
            key: "p".into(),
            credentials: vec![credential("x", CredentialKind::ApiKey, ProjectId::random())],
        };
        assert_eq!(s.execute(foreign), Refused(Refusal::NotFound));
        let unknown = MetaCommand::IssueManagedCredentials { key: "nope".into(), credentials: vec![] };
        assert_eq!(s.execute(unknown), Refused(Refusal::NotFound));
    }

    #[test]
    fn deleting_a_project_removes_its_credentials_quotas_and_rules_and_records_it_for_storage() {
        let mut s = MetaState::default();
        let org: OrgId = id_of(put_tenant(&mut s, "t", "Acme", "pro", false)).parse().unwrap();
        let p: ProjectId = id_of(put_project(&mut s, "p", "t", "Shop")).parse().unwrap();
        let other: ProjectId = id_of(put_project(&mut s, "p2", "t", "Blog")).parse().unwrap();
        s.execute(MetaCommand::IssueManagedCredentials {
            key: "p".into(),
            credentials: vec![credential("k", CredentialKind::ApiKey, p)],
        });
        let quota = MetaCommand::PutManagedQuota {
            key: "q".into(),
            tenant_key: None,
            project_key: Some("p".into()),
            monthly_bytes: Some(1),
            monthly_events: None,
            ingest_rps: Some(5),
            hard: true,
            managed_by: managed("Quota", "q"),
        };
        assert_eq!(s.execute(quota), Done);
        let rule = alert_rule("r", "p", "errors");
        assert!(matches!(s.execute(rule), MetaCommandResult::Keyed { .. }));
        let delete = || MetaCommand::DeleteManagedProject { key: "p".into(), now_ms: T0 + 5 };
        assert_eq!(s.execute(delete()), Done);
        assert!(!s.tenancy.projects.contains_key(&p));
        assert!(s.tenancy.credentials.is_empty());
        assert!(s.billing.quotas.is_empty());
        assert!(s.managed.alert_rules.is_empty());
        assert_eq!(s.tenancy.orgs[&org].default_project, other, "the default moves to a remaining project");
        let v = view(&s);
        assert_eq!(v.deleted_projects, vec![p]);
        assert_eq!(v.projects.iter().filter(|p| p.managed_by.is_some()).count(), 1);
        assert_eq!(s.execute(delete()), Done, "idempotent");
        assert_eq!(s.execute(MetaCommand::DeleteManagedProject { key: "nope".into(), now_ms: T0 }), Done);
        // The key never comes back as a new project (a late retry of the operator's apply).
        assert_eq!(put_project(&mut s, "p", "t", "Shop"), Refused(Refusal::Deleted));
        assert_eq!(view(&s).deleted_projects, vec![p]);
    }

    #[test]
    fn deleting_a_tenant_takes_its_other_projects_users_and_sessions() {
        let (mut s, owner) = state_with_user();
        // A tenant whose org also has a project made through the public API and a user.
        let org: OrgId = id_of(put_tenant(&mut s, "t", "Acme", "pro", false)).parse().unwrap();
        let managed_project: ProjectId = id_of(put_project(&mut s, "p", "t", "Shop")).parse().unwrap();
        let public = Project {
            id: ProjectId::random(),
            org_id: org,
            name: "Side".into(),
            created_at_ms: T0,
            managed_by: None,
            key: None,
        };
        assert_eq!(s.execute(MetaCommand::CreateProject { project: public.clone(), credentials: vec![] }), Done);
        let member = User { id: UserId::random(), org_id: org, email: "bob@acme.test".into(), ..owner.clone() };
        s.accounts.users.insert(member.id, member.clone());
        s.sessions.add(RefreshFamily::new("bob".into(), member.id, org, "h".into(), T0));
        assert_eq!(
            s.execute(MetaCommand::DeleteTenant { key: "t".into(), now_ms: T0 }),
            Refused(Refusal::ProjectsRemain)
        );
        s.execute(MetaCommand::DeleteManagedProject { key: "p".into(), now_ms: T0 });
        assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "t".into(), now_ms: T0 }), Done);
        assert!(!s.tenancy.orgs.contains_key(&org));
        assert!(!s.accounts.users.contains_key(&member.id));
        assert!(s.sessions.families["bob"].revoked_at_ms.is_some());
        let deleted: Vec<ProjectId> = view(&s).deleted_projects;
        assert!(deleted.contains(&managed_project) && deleted.contains(&public.id));
        // The other org is untouched.
        assert!(s.tenancy.orgs.contains_key(&owner.org_id));
        assert!(s.accounts.users.contains_key(&owner.id));
    }

    #[test]
    fn managed_plans_keep_rate_limits_and_deleting_them_restores_or_removes() {
        let (mut s, _) = state_with_user();
        s.execute(MetaCommand::SeedPlans { plans: sextant_model::meta::default_plans() });
        let mut pro = s.billing.plans["pro"].clone();
        pro.rate_limits.ingest_rps = Some(9);
        s.execute(MetaCommand::PutPlan { plan: pro });
        let put = |name: &str, gb: u64| MetaCommand::PutManagedPlan {
            plan: Plan {
                name: name.into(),
                monthly_bytes: Some(gb),
                monthly_events: None,
                retention_days: Some(3),
                features: vec![],
                rate_limits: Default::default(),
                managed_by: None,
                display_name: None,
                price: None,
            },
            display_name: Some("Pro".into()),
            price: None,
            managed_by: managed("Plan", name),
        };
        assert_eq!(s.execute(put("pro", 5)), Done);
        assert_eq!(s.billing.plans["pro"].monthly_bytes, Some(5));
        assert_eq!(
            s.billing.plans["pro"].rate_limits.ingest_rps,
            Some(9),
            "rate limits are not the resource's business"
        );
        assert_eq!(s.execute(put("pro", 5)), Done, "no-op");
        assert_eq!(view(&s).plans.iter().filter(|p| p.managed_by.is_some()).count(), 1);
        assert_eq!(s.execute(MetaCommand::DeleteManagedPlan { name: "pro".into() }), Done);
        let default_pro = sextant_model::meta::default_plans().into_iter().find(|p| p.name == "pro").unwrap();
        assert_eq!(
            s.billing.plans["pro"].monthly_bytes, default_pro.monthly_bytes,
            "a default entry returns to its default"
        );
        assert_eq!(s.billing.plans["pro"].rate_limits.ingest_rps, Some(9));
        assert!(view(&s).plans.iter().all(|p| p.managed_by.is_none()));
        // A custom plan in use stays until its orgs move.
        assert_eq!(s.execute(put("gold", 50)), Done);
        id_of(put_tenant(&mut s, "t", "Acme", "gold", false));
        assert_eq!(s.execute(MetaCommand::DeleteManagedPlan { name: "gold".into() }), Refused(Refusal::PlanInUse));
        id_of(put_tenant(&mut s, "t", "Acme", "pro", false));
        assert_eq!(s.execute(MetaCommand::DeleteManagedPlan { name: "gold".into() }), Done);
        assert!(!s.billing.plans.contains_key("gold"));
        // Entries no resource manages are never removed by the admin API.
        assert_eq!(s.execute(MetaCommand::DeleteManagedPlan { name: "free".into() }), Done);
        assert!(s.billing.plans.contains_key("free"));
    }

    #[test]
    fn managed_quotas_set_rate_limits_and_are_read_only_for_the_public_commands() {
        let mut s = MetaState::default();
        let org: OrgId = id_of(put_tenant(&mut s, "t", "Acme", "pro", false)).parse().unwrap();
        let quota = |tenant: Option<&str>, rps: u32| MetaCommand::PutManagedQuota {
            key: "q".into(),
            tenant_key: tenant.map(Into::into),
            project_key: None,
            monthly_bytes: None,
            monthly_events: Some(10),
            ingest_rps: Some(rps),
            hard: false,
            managed_by: managed("Quota", "q"),
        };
        assert_eq!(s.execute(quota(Some("nope"), 5)), Refused(Refusal::NotFound));
        assert_eq!(s.execute(quota(None, 5)), Refused(Refusal::NotFound), "one target is needed");
        assert_eq!(s.execute(quota(Some("t"), 5)), Done);
        assert_eq!(s.execute(quota(Some("t"), 7)), Done);
        assert_eq!(s.billing.quotas["q"].org_id, org);
        assert_eq!(s.billing.quotas["q"].rate_limits.ingest_rps, Some(7));
        assert_eq!(s.billing.quotas["q"].monthly_events, Some(10));
        assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q".into() }), Refused(Refusal::Managed));
        assert_eq!(s.execute(MetaCommand::DeleteManagedQuota { key: "q".into() }), Done);
        assert!(s.billing.quotas.is_empty());
        assert_eq!(s.execute(MetaCommand::DeleteManagedQuota { key: "q".into() }), Done, "idempotent");
    }

    fn alert_rule(key: &str, project_key: &str, name: &str) -> MetaCommand {
        MetaCommand::PutManagedAlertRule {
            key: key.into(),
            project_key: project_key.into(),
            id: format!("id-{name}"),
            name: name.into(),
            metric: "error_rate".into(),
            filter: sextant_model::meta::AlertFilter { service: Some("api".into()), ..Default::default() },
            comparison: ">".into(),
            threshold: 0.05,
            window_minutes: 5,
            enabled: true,
            now_ms: T0,
            managed_by: managed("AlertRule", key),
            for_seconds: 60,
            webhook_id: None,
        }
    }

    #[test]
    fn managed_alert_rules_keep_their_id_across_updates() {
        let mut s = MetaState::default();
        id_of(put_tenant(&mut s, "t", "Acme", "pro", false));
        assert_eq!(s.execute(alert_rule("r", "nope", "errors")), Refused(Refusal::NotFound));
        let p: ProjectId = id_of(put_project(&mut s, "p", "t", "Shop")).parse().unwrap();
        let id = id_of(s.execute(alert_rule("r", "p", "errors")));
        assert_eq!(id_of(s.execute(alert_rule("r", "p", "renamed"))), id);
        let v = view(&s);
        assert_eq!(v.alert_rules.len(), 1);
        assert_eq!((v.alert_rules[0].name.as_str(), v.alert_rules[0].project_id), ("renamed", p));
        assert_eq!(v.alert_rules[0].managed_by.as_ref().unwrap().kind, "AlertRule");
        assert_eq!(s.execute(MetaCommand::DeleteManagedAlertRule { key: "r".into() }), Done);
        assert_eq!(s.execute(MetaCommand::DeleteManagedAlertRule { key: "r".into() }), Done);
        assert!(view(&s).alert_rules.is_empty());
    }

    #[test]
    fn a_tenant_owner_is_invited_into_the_tenant_org_as_owner() {
        let mut s = MetaState::default();
        let org: OrgId = id_of(put_tenant(&mut s, "t", "Acme", "pro", false)).parse().unwrap();
        let invite = |id: &str| Invite {
            id: id.into(),
            org_id: OrgId::random(),
            email: "ignored@example.com".into(),
            role: Role::Member,
            token_sha256: format!("tok-{id}"),
            invited_by: UserId::random(),
            created_at_ms: T0,
            expires_at_ms: T0 + 1000,
        };
        let ask = |key: &str, id: &str| MetaCommand::InviteTenantOwner { key: key.into(), invite: invite(id) };
        assert_eq!(s.execute(ask("nope", "i0")), Refused(Refusal::NotFound));
        assert_eq!(id_of(s.execute(ask("t", "i1"))).parse::<OrgId>().unwrap(), org);
        assert_eq!(id_of(s.execute(ask("t", "i2"))).parse::<OrgId>().unwrap(), org);
        assert_eq!(s.accounts.invites.keys().collect::<Vec<_>>(), ["i2"], "the newer invitation replaces the older");
        let i = &s.accounts.invites["i2"];
        assert_eq!((i.org_id, i.email.as_str(), i.role), (org, "ops@acme.test", Role::Owner));
        let accepted = s.execute(MetaCommand::AcceptInvite {
            invite_id: "i2".into(),
            token_sha256: "tok-i2".into(),
            user_id: UserId::random(),
            name: "Ops".into(),
            password_hash: "x".into(),
            session: RefreshFamily::new("f".into(), UserId::random(), OrgId::random(), "h".into(), T0),
            now_ms: T0 + 1,
        });
        assert!(
            matches!(accepted, MetaCommandResult::Session { user } if user.org_id == org && user.role == Role::Owner)
        );
        assert_eq!(s.execute(ask("t", "i3")), Refused(Refusal::EmailTaken), "the owner exists now");
    }

    /// The admin commands go through the Raft log like every other.
    #[test]
    fn admin_commands_survive_the_log_encoding() {
        let commands = vec![
            MetaCommand::PutManagedQuota {
                key: "q".into(),
                tenant_key: Some("t".into()),
                project_key: None,
                monthly_bytes: None,
                monthly_events: Some(3),
                ingest_rps: None,
                hard: true,
                managed_by: managed("Quota", "q"),
            },
            alert_rule("r", "p", "errors"),
            MetaCommand::DeleteTenant { key: "t".into(), now_ms: 1 },
        ];
        for c in commands {
            assert_eq!(through_the_log(&c), c);
        }
    }
}
