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

    /// Whether project `id` exists and is not deleted.
    pub(super) fn project_live(&self, id: ProjectId) -> bool {
        self.projects.contains_key(&id) && !self.deleted_projects.contains_key(&id)
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
        if self.tenancy.credentials.get(id).is_some_and(|c| c.managed_by.is_some()) {
            return Refused(Refusal::Managed);
        }
        if let Some(c) = self.tenancy.credentials.get_mut(id) {
            c.revoked = true;
        }
        Done
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

    #[test]
    fn credentials_of_another_org_are_not_found() {
        let (mut s, owner) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let cred = Credential {
            id: "k1".into(),
            kind: CredentialKind::ApiKey,
            project_id: project,
            name: "ci".into(),
            secret_sha256: "h".into(),
            created_at_ms: T0,
            revoked: false,
            managed_by: None,
        };
        let stranger = OrgId::random();
        assert_eq!(
            s.execute(MetaCommand::CreateCredential { org_id: stranger, credential: cred.clone() }),
            Refused(Refusal::NotFound)
        );
        assert_eq!(s.execute(MetaCommand::CreateCredential { org_id: owner.org_id, credential: cred }), Done);
        let revoke = |org| MetaCommand::RevokeCredential { org_id: org, id: "k1".into(), kind: CredentialKind::ApiKey };
        assert_eq!(s.execute(revoke(stranger)), Refused(Refusal::NotFound));
        assert_eq!(s.execute(revoke(owner.org_id)), Done);
        assert!(s.tenancy.credentials["k1"].revoked);
        assert_eq!(s.execute(revoke(owner.org_id)), Refused(Refusal::NotFound), "already revoked");
    }

    /// A bootstrap entry goes through the Raft log unchanged (the entries written by earlier
    /// releases are checked by the golden fixtures of `crate::persist`).
    #[test]
    fn bootstrap_entries_survive_the_log_encoding() {
        let command = fixed_bootstrap(1);
        assert_eq!(through_the_log(&command), command);
    }

    /// A router retries its bootstrap when the answer is lost (a leader change, a timeout):
    /// the retry must say "created" so that it prints the credentials; another router's
    /// bootstrap of an already bootstrapped cluster must not.
    #[test]
    fn a_retried_bootstrap_is_created_and_a_second_one_is_not() {
        let mut s = MetaState::default();
        let created = |r: MetaCommandResult| matches!(r, MetaCommandResult::Bootstrapped { created: true });
        assert!(created(s.execute(fixed_bootstrap(1))));
        assert!(created(s.execute(fixed_bootstrap(1))), "the retry of the same command");
        assert!(!created(s.execute(fixed_bootstrap(4))), "another router's bootstrap");
        assert_eq!(s.tenancy.orgs.len(), 1);
    }

    /// A bootstrap command with fixed ids: org `n`, user `n + 1`, project `n + 2`.
    fn fixed_bootstrap(n: u8) -> MetaCommand {
        let id = |n: u8| format!("00000000-0000-4000-8000-0000000000{n:02}");
        let (org, user, project): (OrgId, UserId, ProjectId) =
            (id(n).parse().unwrap(), id(n + 1).parse().unwrap(), id(n + 2).parse().unwrap());
        MetaCommand::Bootstrap {
            org: Org {
                id: org,
                name: "o".into(),
                plan: "enterprise".into(),
                default_project: project,
                created_at_ms: 7,
                managed_by: None,
                key: None,
                owner_email: None,
                suspended: false,
            },
            user: User {
                id: user,
                org_id: org,
                email: "a@b.co".into(),
                name: "A".into(),
                role: Role::Owner,
                password_hash: "h".into(),
                created_at_ms: 7,
            },
            project: Project {
                id: project,
                org_id: org,
                name: "default".into(),
                created_at_ms: 7,
                managed_by: None,
                key: None,
            },
            credentials: vec![Credential {
                id: "k".into(),
                kind: sextant_model::meta::CredentialKind::ApiKey,
                project_id: project,
                name: "default".into(),
                secret_sha256: "s".into(),
                created_at_ms: 7,
                revoked: false,
                managed_by: None,
            }],
            partitions: vec![1, 2],
        }
    }
}
