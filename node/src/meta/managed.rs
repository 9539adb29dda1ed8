//! Objects the Kubernetes operator manages through the admin API (docs/API.md, "Admin API"):
//! tenants (orgs), their projects and credentials, plans, quotas and alert rules, each keyed
//! by its resource. Deleted tenants and projects are kept as tombstones so that a late retry
//! of the operator never brings them back.

use std::collections::BTreeMap;

use sextant_model::meta::{
    default_plans, AlertFilter, AlertRule, Credential, Invite, ManagedBy, ManagedCredential, ManagedOrg, ManagedPlan,
    ManagedProject, ManagedQuota, MetaCommandResult, Org, Plan, PlanPrice, Project, Quota, RateLimitOverrides, Refusal,
    Role, MAX_PROJECTS_PER_ORG,
};
use sextant_model::{OrgId, ProjectId};

use super::MetaState;
use MetaCommandResult::{Done, Refused};

#[derive(Clone, Debug, Default)]
pub(super) struct Managed {
    /// Orgs of Tenant resources, by key (deleted ones kept as tombstones).
    pub(super) tenants: BTreeMap<String, ManagedOrg>,
    /// Projects of Project resources, by key (deleted ones kept as tombstones).
    pub(super) projects: BTreeMap<String, ManagedProject>,
    /// Credentials issued through the admin API, by credential id.
    pub(super) credentials: BTreeMap<String, ManagedCredential>,
    /// Plans by name.
    pub(super) plans: BTreeMap<String, ManagedPlan>,
    /// Quotas by key (the same id as their entry in the quota table).
    pub(super) quotas: BTreeMap<String, ManagedQuota>,
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
}

impl MetaState {
    /// The org of a tenant key that was not deleted.
    fn live_tenant(&self, key: &str) -> Option<OrgId> {
        self.managed.tenants.get(key).filter(|t| t.deleted_at_ms.is_none()).map(|t| t.org_id)
    }

    /// The project of a managed project key that was not deleted.
    fn live_managed_project(&self, key: &str) -> Option<ProjectId> {
        self.managed
            .projects
            .get(key)
            .filter(|p| p.deleted_at_ms.is_none() && self.tenancy.projects.contains_key(&p.project_id))
            .map(|p| p.project_id)
    }

    pub(super) fn put_tenant(
        &mut self,
        key: String,
        org: Org,
        owner_email: String,
        suspended: bool,
        managed_by: ManagedBy,
    ) -> MetaCommandResult {
        if let Some(t) = self.managed.tenants.get_mut(&key) {
            if t.deleted_at_ms.is_some() {
                return Refused(Refusal::Deleted);
            }
            let id = t.org_id;
            t.owner_email = owner_email;
            t.suspended = suspended;
            t.managed_by = managed_by;
            if let Some(existing) = self.tenancy.orgs.get_mut(&id) {
                existing.name = org.name;
                existing.plan = org.plan;
            }
            return MetaCommandResult::Keyed { id: id.to_string() };
        }
        if self.tenancy.orgs.contains_key(&org.id) {
            return Refused(Refusal::NameTaken);
        }
        let id = org.id;
        self.tenancy.orgs.insert(id, org);
        self.managed.tenants.insert(
            key.clone(),
            ManagedOrg { key, org_id: id, owner_email, suspended, managed_by, deleted_at_ms: None },
        );
        MetaCommandResult::Keyed { id: id.to_string() }
    }

    pub(super) fn delete_tenant(&mut self, key: &str, now_ms: i64) -> MetaCommandResult {
        let Some(org_id) = self.live_tenant(key) else {
            return Done;
        };
        let managed_remain = self.managed.projects.values().any(|p| {
            p.org_id == org_id && p.deleted_at_ms.is_none() && self.tenancy.projects.contains_key(&p.project_id)
        });
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
            self.managed.quotas.remove(&id);
        }
        self.tenancy.trials.remove(&org_id);
        self.tenancy.orgs.remove(&org_id);
        if let Some(t) = self.managed.tenants.get_mut(key) {
            t.deleted_at_ms = Some(now_ms);
        }
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
        let existing = self.managed.projects.get(&key).cloned();
        if let Some(m) = &existing {
            if m.deleted_at_ms.is_some() || !self.tenancy.projects.contains_key(&m.project_id) {
                return Refused(Refusal::Deleted);
            }
            if m.org_id != org_id {
                // A project does not move between orgs: its data and credentials would follow.
                return Refused(Refusal::NotFound);
            }
        }
        let id = existing.as_ref().map_or(project.id, |m| m.project_id);
        let tenancy = &mut self.tenancy;
        let name_taken = tenancy
            .projects
            .values()
            .any(|p| p.org_id == org_id && p.id != id && p.name.to_lowercase() == project.name.to_lowercase());
        if name_taken {
            return Refused(Refusal::NameTaken);
        }
        match tenancy.projects.get_mut(&id) {
            Some(p) => p.name = project.name,
            None => {
                if tenancy.projects.values().filter(|p| p.org_id == org_id).count() >= MAX_PROJECTS_PER_ORG {
                    return Refused(Refusal::LimitReached);
                }
                if tenancy.projects.contains_key(&project.id) || tenancy.deleted_projects.contains_key(&project.id) {
                    return Refused(Refusal::NameTaken);
                }
                tenancy.projects.insert(id, Project { id, org_id, ..project });
            }
        }
        self.managed
            .projects
            .insert(key.clone(), ManagedProject { key, project_id: id, org_id, managed_by, deleted_at_ms: None });
        // An org made by a tenant starts without projects: its first one becomes the default.
        self.tenancy.default_if_missing(org_id, id);
        MetaCommandResult::Keyed { id: id.to_string() }
    }

    /// Replaces the credentials issued earlier for the project of `key`.
    pub(super) fn issue_managed_credentials(&mut self, key: String, credentials: Vec<Credential>) -> MetaCommandResult {
        let Some(project_id) = self.live_managed_project(&key) else {
            return Refused(Refusal::NotFound);
        };
        if credentials.iter().any(|c| c.project_id != project_id) {
            return Refused(Refusal::NotFound);
        }
        let earlier: Vec<String> = self
            .managed
            .credentials
            .values()
            .filter(|m| m.project_key == key)
            .map(|m| m.credential_id.clone())
            .collect();
        for id in earlier {
            self.managed.credentials.remove(&id);
            self.tenancy.credentials.remove(&id);
        }
        for c in credentials {
            self.managed
                .credentials
                .insert(c.id.clone(), ManagedCredential { credential_id: c.id.clone(), project_key: key.clone() });
            self.tenancy.credentials.insert(c.id.clone(), c);
        }
        Done
    }

    pub(super) fn delete_managed_project(&mut self, key: &str, now_ms: i64) -> MetaCommandResult {
        if let Some(id) = self.live_managed_project(key) {
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
        let credentials = &tenancy.credentials;
        self.managed.credentials.retain(|cid, _| credentials.contains_key(cid));
        self.billing.quotas.retain(|_, q| q.project_id != Some(id));
        self.managed.quotas.retain(|_, q| q.project_id != Some(id));
        self.managed.alert_rules.retain(|_, r| r.project_id != id);
        for m in self.managed.projects.values_mut().filter(|m| m.project_id == id) {
            m.deleted_at_ms = Some(now_ms);
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
        let name = plan.name.clone();
        self.billing.plans.insert(name.clone(), plan);
        self.managed.plans.insert(name.clone(), ManagedPlan { name, display_name, price, managed_by });
        Done
    }

    /// A default plan returns to its default; a custom one is removed unless an org uses it.
    pub(super) fn delete_managed_plan(&mut self, name: String) -> MetaCommandResult {
        if !self.managed.plans.contains_key(&name) {
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
        self.managed.plans.remove(&name);
        Done
    }

    pub(super) fn put_managed_quota(&mut self, spec: QuotaSpec) -> MetaCommandResult {
        let QuotaSpec { key, tenant_key, project_key, monthly_bytes, monthly_events, ingest_rps, hard, managed_by } =
            spec;
        let target = match (tenant_key, project_key) {
            (Some(t), None) => self.live_tenant(&t).map(|org| (org, None)),
            (None, Some(p)) => {
                self.live_managed_project(&p).and_then(|id| Some((self.tenancy.projects.get(&id)?.org_id, Some(id))))
            }
            _ => None,
        };
        let Some((org_id, project_id)) = target else {
            return Refused(Refusal::NotFound);
        };
        if self.billing.quotas.contains_key(&key) && !self.managed.quotas.contains_key(&key) {
            return Refused(Refusal::Managed);
        }
        let rate_limits = RateLimitOverrides { ingest_rps, analytics_rps: ingest_rps, api_rps: None };
        self.billing.quotas.insert(key.clone(), Quota { id: key.clone(), org_id, project_id, rate_limits });
        self.managed.quotas.insert(
            key.clone(),
            ManagedQuota { key, org_id, project_id, monthly_bytes, monthly_events, ingest_rps, hard, managed_by },
        );
        Done
    }

    pub(super) fn delete_managed_quota(&mut self, key: &str) -> MetaCommandResult {
        if self.managed.quotas.remove(key).is_some() {
            self.billing.quotas.remove(key);
        }
        Done
    }

    /// Adds or updates the rule of `key`; it keeps its id and creation time across updates.
    pub(super) fn put_managed_alert_rule(&mut self, spec: AlertRuleSpec) -> MetaCommandResult {
        let Some(project_id) = self.live_managed_project(&spec.project_key) else {
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
        let Some(tenant) = self.managed.tenants.get(key).filter(|t| t.deleted_at_ms.is_none()) else {
            return Refused(Refusal::NotFound);
        };
        let (org_id, email) = (tenant.org_id, tenant.owner_email.clone());
        if self.accounts.email_taken(&email) {
            return Refused(Refusal::EmailTaken);
        }
        self.accounts.invites.retain(|_, i| !(i.org_id == org_id && i.email == email));
        self.accounts.invites.insert(invite.id.clone(), Invite { org_id, email, role: Role::Owner, ..invite });
        MetaCommandResult::Keyed { id: org_id.to_string() }
    }
}
