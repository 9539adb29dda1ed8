//! Orgs, their projects and the projects' credential hashes (docs/API.md, "Projects and
//! project tokens" and "API keys"), plus sign-up trials and the record of deleted projects.

use std::collections::BTreeMap;

use sextant_model::meta::{
    Credential, CredentialKind, MetaCommandResult, Org, Project, Refusal, User, MAX_KEYS_PER_PROJECT,
    MAX_PROJECTS_PER_ORG,
};
use sextant_model::{OrgId, ProjectId};

use super::MetaState;
use MetaCommandResult::{Done, Refused};

#[derive(Clone, Debug, Default)]
pub(super) struct Tenancy {
    pub(super) orgs: BTreeMap<OrgId, Org>,
    pub(super) projects: BTreeMap<ProjectId, Project>,
    /// Credential hashes by credential id.
    pub(super) credentials: BTreeMap<String, Credential>,
    /// Ends of sign-up trials, by org.
    pub(super) trials: BTreeMap<OrgId, i64>,
    /// Deleted projects and when: their data is dropped by the storage nodes.
    pub(super) deleted_projects: BTreeMap<ProjectId, i64>,
}

impl Tenancy {
    /// Stores a project and its first credentials.
    pub(super) fn add_project(&mut self, project: Project, credentials: Vec<Credential>) {
        self.projects.insert(project.id, project);
        for c in credentials {
            self.credentials.insert(c.id.clone(), c);
        }
    }

    /// Makes `id` the org's default project if its default is gone (deleted, or, for an org
    /// made by a tenant, never made).
    pub(super) fn default_if_missing(&mut self, org_id: OrgId, id: ProjectId) {
        if let Some(org) = self.orgs.get_mut(&org_id) {
            if !self.projects.contains_key(&org.default_project) {
                org.default_project = id;
            }
        }
    }

    pub(super) fn project_of_org(&self, id: ProjectId, org_id: OrgId) -> bool {
        self.projects.get(&id).is_some_and(|p| p.org_id == org_id)
    }

    pub(super) fn projects_of(&self, org_id: OrgId) -> Vec<ProjectId> {
        self.projects.values().filter(|p| p.org_id == org_id).map(|p| p.id).collect()
    }

    fn credential_of_org(&self, id: &str, org: OrgId) -> Option<&Credential> {
        self.credentials.get(id).filter(|c| self.project_of_org(c.project_id, org))
    }

    pub(super) fn create_project(&mut self, project: Project, credentials: Vec<Credential>) -> MetaCommandResult {
        if !self.orgs.contains_key(&project.org_id) {
            return Refused(Refusal::NotFound);
        }
        let siblings: Vec<&Project> = self.projects.values().filter(|p| p.org_id == project.org_id).collect();
        if siblings.iter().any(|p| p.name.to_lowercase() == project.name.to_lowercase()) {
            return Refused(Refusal::NameTaken);
        }
        if siblings.len() >= MAX_PROJECTS_PER_ORG {
            return Refused(Refusal::LimitReached);
        }
        let (id, org_id) = (project.id, project.org_id);
        self.add_project(project, credentials);
        self.default_if_missing(org_id, id);
        Done
    }

    pub(super) fn create_credential(&mut self, org_id: OrgId, credential: Credential) -> MetaCommandResult {
        if !self.project_of_org(credential.project_id, org_id) {
            return Refused(Refusal::NotFound);
        }
        let existing = self
            .credentials
            .values()
            .filter(|c| c.project_id == credential.project_id && c.kind == credential.kind && !c.revoked)
            .count();
        if existing >= MAX_KEYS_PER_PROJECT {
            return Refused(Refusal::LimitReached);
        }
        self.credentials.insert(credential.id.clone(), credential);
        Done
    }
}

impl MetaState {
    /// The first org, user and project of a cluster, made by the first router to start.
    pub(super) fn bootstrap(
        &mut self,
        org: Org,
        user: User,
        project: Project,
        credentials: Vec<Credential>,
        partition_groups: Vec<u64>,
    ) -> MetaCommandResult {
        if !self.tenancy.orgs.is_empty() {
            // The same command again (a retry whose first attempt committed, its answer
            // lost) created the org all the same: its router must still print the
            // credentials, which exist nowhere else.
            return MetaCommandResult::Bootstrapped { created: self.tenancy.orgs.contains_key(&org.id) };
        }
        self.tenancy.orgs.insert(org.id, org);
        self.accounts.users.insert(user.id, user);
        self.tenancy.add_project(project, credentials);
        self.partition_groups = partition_groups;
        MetaCommandResult::Bootstrapped { created: true }
    }

    /// Credentials issued for a managed project are revoked by reissuing them, not here.
    pub(super) fn revoke_credential(&mut self, org_id: OrgId, id: &str, kind: CredentialKind) -> MetaCommandResult {
        match self.tenancy.credential_of_org(id, org_id) {
            Some(c) if c.kind == kind && !c.revoked => {}
            _ => return Refused(Refusal::NotFound),
        }
        if self.managed.credentials.contains_key(id) {
            return Refused(Refusal::Managed);
        }
        if let Some(c) = self.tenancy.credentials.get_mut(id) {
            c.revoked = true;
        }
        Done
    }
}
