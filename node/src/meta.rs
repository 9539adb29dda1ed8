//! The meta group's state: organizations, users, sessions, invitations, projects, credential
//! hashes, plans, router heartbeats and the partition table. Small, so it is snapshotted
//! whole as JSON. Every rule that concurrent requests could race on (unique emails, limits,
//! refresh-token rotation) is decided here, in log order.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use sextant_model::meta::{
    Credential, Invite, Member, MetaCommand, MetaCommandResult, MetaQuery, MetaView, Org, OrgMembers, OrgTrial, Plan,
    Project, Quota, RefreshFamily, Refusal, Role, RouterSeen, User, MAX_KEYS_PER_PROJECT, MAX_PENDING_INVITES_PER_ORG,
    MAX_PROJECTS_PER_ORG, MAX_REFRESH_ALTERNATES, MAX_SESSIONS_PER_USER, REFRESH_GRACE_MS, REFRESH_TTL_MS,
    ROUTER_LIVE_MS, TOMBSTONE_MS,
};
use sextant_model::{OrgId, ProjectId, UserId};
use subtle::ConstantTimeEq;

use crate::state_machine::GroupState;
use crate::types::{Command, CommandResponse};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MetaState {
    orgs: BTreeMap<OrgId, Org>,
    users: BTreeMap<UserId, User>,
    projects: BTreeMap<ProjectId, Project>,
    credentials: BTreeMap<String, Credential>,
    partitions: Vec<u64>,
    #[serde(default)]
    sessions: BTreeMap<String, RefreshFamily>,
    #[serde(default)]
    invites: BTreeMap<String, Invite>,
    /// Removed users and when, until their last access token has expired.
    #[serde(default)]
    removed_users: BTreeMap<UserId, i64>,
    #[serde(default)]
    plans: BTreeMap<String, Plan>,
    #[serde(default)]
    quotas: BTreeMap<String, Quota>,
    /// Ends of sign-up trials, by org.
    #[serde(default)]
    trials: BTreeMap<OrgId, i64>,
    #[serde(default)]
    routers: BTreeMap<String, i64>,
    /// Number of commands applied, so routers can tell a newer view from an older one.
    #[serde(default)]
    version: u64,
    /// Storage nodes and replica placement.
    #[serde(default)]
    cluster: crate::membership::ClusterState,
}

fn same_hash(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

use MetaCommandResult::{Done, Refused};

impl MetaState {
    fn email_taken(&self, email: &str) -> bool {
        self.users.values().any(|u| u.email == email)
    }

    fn revoke_family(family: &mut RefreshFamily, now_ms: i64) {
        if family.revoked_at_ms.is_none() {
            family.revoked_at_ms = Some(now_ms);
        }
    }

    /// Stores a new session, dropping the user's oldest ones beyond the per-user bound.
    fn add_session(&mut self, session: RefreshFamily) {
        let user = session.user_id;
        self.sessions.insert(session.id.clone(), session);
        let mut live: Vec<(i64, String)> = self
            .sessions
            .values()
            .filter(|s| s.user_id == user && s.revoked_at_ms.is_none())
            .map(|s| (s.created_at_ms, s.id.clone()))
            .collect();
        if live.len() > MAX_SESSIONS_PER_USER {
            live.sort();
            let now = live.last().map_or(0, |l| l.0);
            for (_, id) in &live[..live.len() - MAX_SESSIONS_PER_USER] {
                if let Some(s) = self.sessions.get_mut(id) {
                    Self::revoke_family(s, now);
                }
            }
        }
    }

    fn credential_of_org(&self, id: &str, org: OrgId) -> Option<&Credential> {
        self.credentials.get(id).filter(|c| self.projects.get(&c.project_id).is_some_and(|p| p.org_id == org))
    }

    fn execute(&mut self, command: MetaCommand) -> MetaCommandResult {
        self.version += 1;
        match command {
            MetaCommand::Bootstrap { org, user, project, credentials, partitions } => {
                if !self.orgs.is_empty() {
                    return MetaCommandResult::Bootstrapped { created: false };
                }
                self.orgs.insert(org.id, org);
                self.users.insert(user.id, user);
                self.projects.insert(project.id, project);
                for c in credentials {
                    self.credentials.insert(c.id.clone(), c);
                }
                self.partitions = partitions;
                MetaCommandResult::Bootstrapped { created: true }
            }
            MetaCommand::SeedPlans { plans } => {
                for plan in plans {
                    self.plans.entry(plan.name.clone()).or_insert(plan);
                }
                Done
            }
            MetaCommand::Signup { org, user, project, credentials, session, trial_ends_at_ms } => {
                if self.email_taken(&user.email) {
                    return Refused(Refusal::EmailTaken);
                }
                if let Some(end) = trial_ends_at_ms {
                    self.trials.insert(org.id, end);
                }
                self.orgs.insert(org.id, org);
                self.users.insert(user.id, user);
                self.projects.insert(project.id, project);
                for c in credentials {
                    self.credentials.insert(c.id.clone(), c);
                }
                self.add_session(session);
                Done
            }
            MetaCommand::StartSession { session } => {
                match self.users.get(&session.user_id) {
                    Some(u) if u.org_id == session.org_id => {}
                    _ => return Refused(Refusal::InvalidSession),
                }
                self.add_session(session);
                Done
            }
            MetaCommand::RotateSession { family, presented_sha256, new_sha256, now_ms } => {
                self.rotate(&family, &presented_sha256, new_sha256, now_ms)
            }
            MetaCommand::EndSession { family, presented_sha256, now_ms } => {
                let Some(f) = self.sessions.get_mut(&family) else {
                    return Refused(Refusal::InvalidSession);
                };
                let live = same_hash(&f.current_sha256, &presented_sha256)
                    || f.alternates_sha256.iter().any(|a| same_hash(a, &presented_sha256))
                    || f.previous_sha256.as_deref().is_some_and(|p| same_hash(p, &presented_sha256));
                if !live {
                    return Refused(Refusal::InvalidSession);
                }
                Self::revoke_family(f, now_ms);
                Done
            }
            MetaCommand::Invite { invite } => {
                if self.email_taken(&invite.email) {
                    return Refused(Refusal::EmailTaken);
                }
                let pending = self
                    .invites
                    .values()
                    .filter(|i| i.org_id == invite.org_id && i.expires_at_ms > invite.created_at_ms)
                    .count();
                if pending >= MAX_PENDING_INVITES_PER_ORG {
                    return Refused(Refusal::LimitReached);
                }
                self.invites.insert(invite.id.clone(), invite);
                Done
            }
            MetaCommand::AcceptInvite { invite_id, token_sha256, user_id, name, password_hash, session, now_ms } => {
                let valid = self
                    .invites
                    .get(&invite_id)
                    .filter(|i| same_hash(&i.token_sha256, &token_sha256) && i.expires_at_ms > now_ms)
                    .filter(|i| self.orgs.contains_key(&i.org_id));
                let Some(invite) = valid.cloned() else {
                    return Refused(Refusal::InvalidInvite);
                };
                if self.email_taken(&invite.email) {
                    return Refused(Refusal::EmailTaken);
                }
                // Single use: gone whatever happens next.
                self.invites.remove(&invite_id);
                let user = User {
                    id: user_id,
                    org_id: invite.org_id,
                    email: invite.email,
                    name,
                    role: invite.role,
                    password_hash,
                    created_at_ms: now_ms,
                };
                let member = user.member();
                self.users.insert(user.id, user);
                self.add_session(RefreshFamily { user_id, org_id: invite.org_id, ..session });
                MetaCommandResult::Session { user: member }
            }
            MetaCommand::RemoveMember { org_id, user_id, now_ms } => {
                match self.users.get(&user_id) {
                    Some(u) if u.org_id == org_id => {
                        if u.role == Role::Owner {
                            return Refused(Refusal::OwnerProtected);
                        }
                    }
                    _ => return Refused(Refusal::NotFound),
                }
                self.users.remove(&user_id);
                self.removed_users.insert(user_id, now_ms);
                for s in self.sessions.values_mut().filter(|s| s.user_id == user_id) {
                    Self::revoke_family(s, now_ms);
                }
                Done
            }
            MetaCommand::CreateProject { project, credentials } => {
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
                self.projects.insert(project.id, project);
                for c in credentials {
                    self.credentials.insert(c.id.clone(), c);
                }
                Done
            }
            MetaCommand::CreateCredential { org_id, credential } => {
                if self.projects.get(&credential.project_id).is_none_or(|p| p.org_id != org_id) {
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
            MetaCommand::RevokeCredential { org_id, id, kind } => {
                match self.credential_of_org(&id, org_id) {
                    Some(c) if c.kind == kind && !c.revoked => {}
                    _ => return Refused(Refusal::NotFound),
                }
                if let Some(c) = self.credentials.get_mut(&id) {
                    c.revoked = true;
                }
                Done
            }
            MetaCommand::RevokeInvite { org_id, invite_id } => {
                if self.invites.get(&invite_id).is_none_or(|i| i.org_id != org_id) {
                    return Refused(Refusal::NotFound);
                }
                self.invites.remove(&invite_id);
                Done
            }
            MetaCommand::PutPlan { plan } => {
                self.plans.insert(plan.name.clone(), plan);
                Done
            }
            MetaCommand::PutQuota { quota } => {
                let project_ok =
                    quota.project_id.is_none_or(|p| self.projects.get(&p).is_some_and(|p| p.org_id == quota.org_id));
                if !self.orgs.contains_key(&quota.org_id) || !project_ok {
                    return Refused(Refusal::NotFound);
                }
                self.quotas.insert(quota.id.clone(), quota);
                Done
            }
            MetaCommand::DeleteQuota { id } => match self.quotas.remove(&id) {
                Some(_) => Done,
                None => Refused(Refusal::NotFound),
            },
            MetaCommand::RouterLeft { router_id } => {
                self.routers.remove(&router_id);
                Done
            }
            MetaCommand::RouterHeartbeat { router_id, at_ms } => {
                self.routers.insert(router_id, at_ms);
                self.prune(at_ms);
                Done
            }
            MetaCommand::RegisterNode { id, address, member, replication_factor } => {
                self.cluster.register(id, address, member, replication_factor)
            }
            MetaCommand::SetMembers { addresses } => self.cluster.set_members(&addresses),
            MetaCommand::DrainNode { address } => self.cluster.drain(&address),
            MetaCommand::ReportReplicas { group, voters, log_index } => self.cluster.report(group, voters, log_index),
        }
    }

    /// Rotation with reuse detection. The current token, or one handed out alongside it,
    /// rotates. The token replaced last is accepted again within the grace window (a retry
    /// whose answer was lost, or two tabs refreshing at once) and gets a token valid alongside
    /// the current one. Any other old token means two parties hold the family's tokens, so
    /// the whole family is revoked.
    fn rotate(&mut self, family: &str, presented: &str, new_sha256: String, now_ms: i64) -> MetaCommandResult {
        let Some(f) = self.sessions.get_mut(family) else {
            return Refused(Refusal::InvalidSession);
        };
        if f.revoked_at_ms.is_some() || f.expires_at_ms <= now_ms {
            return Refused(Refusal::InvalidSession);
        }
        let is_current = same_hash(&f.current_sha256, presented);
        let is_alternate = f.alternates_sha256.iter().any(|a| same_hash(a, presented));
        let is_previous = f.previous_sha256.as_deref().is_some_and(|p| same_hash(p, presented));
        if is_current || is_alternate {
            f.previous_sha256 = Some(presented.to_owned());
            f.current_sha256 = new_sha256;
            f.alternates_sha256.clear();
            f.rotated_at_ms = now_ms;
        } else if is_previous && now_ms - f.rotated_at_ms <= REFRESH_GRACE_MS {
            if f.alternates_sha256.len() >= MAX_REFRESH_ALTERNATES {
                // Not reuse by a second party, just too many retries: refuse this one only.
                return Refused(Refusal::InvalidSession);
            }
            f.alternates_sha256.push(new_sha256);
        } else {
            Self::revoke_family(f, now_ms);
            return Refused(Refusal::SessionReused);
        }
        f.expires_at_ms = now_ms + REFRESH_TTL_MS;
        let (user_id, org_id) = (f.user_id, f.org_id);
        match self.users.get(&user_id).filter(|u| u.org_id == org_id) {
            Some(u) => MetaCommandResult::Session { user: u.member() },
            None => Refused(Refusal::InvalidSession),
        }
    }

    /// Drops what can no longer matter at `now_ms`.
    fn prune(&mut self, now_ms: i64) {
        self.sessions.retain(|_, s| match s.revoked_at_ms {
            Some(at) => now_ms - at < TOMBSTONE_MS,
            None => s.expires_at_ms > now_ms,
        });
        self.invites.retain(|_, i| i.expires_at_ms > now_ms);
        self.removed_users.retain(|_, at| now_ms - *at < TOMBSTONE_MS);
        self.routers.retain(|_, at| now_ms - *at < 4 * ROUTER_LIVE_MS);
    }

    pub fn query(&self, query: &MetaQuery) -> serde_json::Value {
        match query {
            MetaQuery::View => serde_json::to_value(MetaView {
                version: self.version,
                partitions: self.partitions.clone(),
                orgs: self.orgs.values().cloned().collect(),
                projects: self.projects.values().cloned().collect(),
                credentials: self.credentials.values().cloned().collect(),
                members: self.users.values().map(User::member).collect(),
                removed_users: self.removed_users.keys().copied().collect(),
                revoked_sessions: self
                    .sessions
                    .values()
                    .filter(|s| s.revoked_at_ms.is_some())
                    .map(|s| s.id.clone())
                    .collect(),
                routers: self.routers.iter().map(|(id, at)| RouterSeen { id: id.clone(), at_ms: *at }).collect(),
                plans: self.plans.values().cloned().collect(),
                quotas: self.quotas.values().cloned().collect(),
                trials: self.trials.iter().map(|(o, end)| OrgTrial { org_id: *o, ends_at_ms: *end }).collect(),
            }),
            MetaQuery::UserByEmail { email } => {
                let email = email.to_lowercase();
                serde_json::to_value(self.users.values().find(|u| u.email == email))
            }
            MetaQuery::OrgMembers { org_id } => serde_json::to_value(OrgMembers {
                members: self.users.values().filter(|u| u.org_id == *org_id).map(User::member).collect::<Vec<Member>>(),
                invites: self.invites.values().filter(|i| i.org_id == *org_id).cloned().collect(),
            }),
            MetaQuery::Cluster => serde_json::to_value(self.cluster.view()),
        }
        .unwrap_or(serde_json::Value::Null)
    }
}

impl GroupState for MetaState {
    fn apply(&mut self, _index: u64, command: Command) -> CommandResponse {
        match command {
            Command::Meta(cmd) => {
                let result = self.execute(cmd);
                CommandResponse::Meta(serde_json::to_vec(&result).unwrap_or_default())
            }
            _ => CommandResponse::Rejected("data command sent to the meta group".into()),
        }
    }

    fn snapshot_writer(&self) -> Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync> {
        let copy = self.clone();
        Box::new(move |w: &mut dyn Write| serde_json::to_writer(w, &copy).map_err(io::Error::other))
    }

    fn restore(&mut self, input: &mut dyn Read) -> io::Result<()> {
        *self = serde_json::from_reader(input).map_err(io::Error::other)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::meta::CredentialKind;

    const T0: i64 = 1_800_000_000_000;

    fn state_with_user() -> (MetaState, User) {
        let mut s = MetaState::default();
        let org = OrgId::random();
        let project = ProjectId::random();
        let user = User {
            id: UserId::random(),
            org_id: org,
            email: "ada@example.com".into(),
            name: "Ada".into(),
            role: Role::Owner,
            password_hash: "x".into(),
            created_at_ms: T0,
        };
        let r = s.execute(MetaCommand::Signup {
            org: Org { id: org, name: "Acme".into(), plan: "pro".into(), default_project: project, created_at_ms: T0 },
            user: user.clone(),
            project: Project { id: project, org_id: org, name: "default".into(), created_at_ms: T0 },
            credentials: vec![],
            session: RefreshFamily::new("fam".into(), user.id, org, "h0".into(), T0),
            trial_ends_at_ms: Some(T0 + 1),
        });
        assert_eq!(r, Done);
        (s, user)
    }

    fn rotate(s: &mut MetaState, presented: &str, new: &str, now: i64) -> MetaCommandResult {
        s.execute(MetaCommand::RotateSession {
            family: "fam".into(),
            presented_sha256: presented.into(),
            new_sha256: new.into(),
            now_ms: now,
        })
    }

    #[test]
    fn rotation_chain_and_reuse_revokes_the_family() {
        let (mut s, user) = state_with_user();
        assert!(
            matches!(rotate(&mut s, "h0", "h1", T0 + 1), MetaCommandResult::Session { user: m } if m.id == user.id)
        );
        assert!(matches!(rotate(&mut s, "h1", "h2", T0 + 60_000), MetaCommandResult::Session { .. }));
        // h0 is two rotations old: reuse, and the family dies with it.
        assert_eq!(rotate(&mut s, "h0", "hx", T0 + 60_001), Refused(Refusal::SessionReused));
        assert_eq!(rotate(&mut s, "h2", "h3", T0 + 60_002), Refused(Refusal::InvalidSession));
        let view: MetaView = serde_json::from_value(s.query(&MetaQuery::View)).unwrap();
        assert_eq!(view.revoked_sessions, vec!["fam".to_string()]);
    }

    #[test]
    fn previous_token_is_accepted_only_within_the_grace_window() {
        let (mut s, _) = state_with_user();
        let ok = |r: MetaCommandResult| matches!(r, MetaCommandResult::Session { .. });
        assert!(ok(rotate(&mut s, "h0", "h1", T0)));
        // A second tab (or a retry) with h0: a token valid alongside h1, and h1 stays valid.
        assert!(ok(rotate(&mut s, "h0", "h1b", T0 + REFRESH_GRACE_MS)));
        assert_eq!(s.sessions["fam"].alternates_sha256, ["h1b"]);
        // Whichever of them the browser kept rotates; the other is then dropped.
        assert!(ok(rotate(&mut s, "h1b", "h2", T0 + REFRESH_GRACE_MS + 1)));
        assert!(s.sessions["fam"].alternates_sha256.is_empty());
        // h1b is now previous, but the window since the last rotation has passed.
        let late = T0 + 2 * REFRESH_GRACE_MS + 2;
        assert_eq!(rotate(&mut s, "h1b", "h3", late), Refused(Refusal::SessionReused));
    }

    #[test]
    fn a_sibling_of_the_current_token_rotates_and_retries_are_bounded() {
        let (mut s, _) = state_with_user();
        let ok = |r: MetaCommandResult| matches!(r, MetaCommandResult::Session { .. });
        assert!(ok(rotate(&mut s, "h0", "h1", T0)));
        for i in 0..MAX_REFRESH_ALTERNATES {
            assert!(ok(rotate(&mut s, "h0", &format!("a{i}"), T0 + 1)));
        }
        // One retry too many is refused without killing the session.
        assert_eq!(rotate(&mut s, "h0", "ax", T0 + 2), Refused(Refusal::InvalidSession));
        assert!(ok(rotate(&mut s, "h1", "h2", T0 + 3)));
        // After that rotation the dropped siblings count as reuse.
        assert_eq!(rotate(&mut s, "a0", "h3", T0 + 4), Refused(Refusal::SessionReused));
    }

    #[test]
    fn unknown_expired_and_ended_sessions_do_not_rotate() {
        let (mut s, _) = state_with_user();
        let r = s.execute(MetaCommand::RotateSession {
            family: "nope".into(),
            presented_sha256: "h0".into(),
            new_sha256: "h1".into(),
            now_ms: T0,
        });
        assert_eq!(r, Refused(Refusal::InvalidSession));
        assert_eq!(rotate(&mut s, "h0", "h1", T0 + REFRESH_TTL_MS), Refused(Refusal::InvalidSession));
        let (mut s, _) = state_with_user();
        let end =
            |token: &str| MetaCommand::EndSession { family: "fam".into(), presented_sha256: token.into(), now_ms: T0 };
        // The family id alone (an access token's `sid`) cannot end someone's session.
        assert_eq!(s.execute(end("guess")), Refused(Refusal::InvalidSession));
        assert!(s.sessions["fam"].revoked_at_ms.is_none());
        assert_eq!(s.execute(end("h0")), Done);
        assert_eq!(rotate(&mut s, "h0", "h1", T0 + 1), Refused(Refusal::InvalidSession));
    }

    #[test]
    fn duplicate_signup_stores_nothing() {
        let (mut s, user) = state_with_user();
        let before = serde_json::to_value(&s).unwrap();
        let org = OrgId::random();
        let r = s.execute(MetaCommand::Signup {
            org: Org {
                id: org,
                name: "Other".into(),
                plan: "pro".into(),
                default_project: ProjectId::random(),
                created_at_ms: T0,
            },
            user: User { id: UserId::random(), org_id: org, ..user },
            project: Project { id: ProjectId::random(), org_id: org, name: "default".into(), created_at_ms: T0 },
            credentials: vec![],
            session: RefreshFamily::new("fam2".into(), UserId::random(), org, "h".into(), T0),
            trial_ends_at_ms: None,
        });
        assert_eq!(r, Refused(Refusal::EmailTaken));
        let mut after = serde_json::to_value(&s).unwrap();
        // Only the count of applied commands moved.
        assert_eq!(after["version"], before["version"].as_u64().unwrap() + 1);
        after["version"] = before["version"].clone();
        assert_eq!(after, before);
    }

    #[test]
    fn invites_are_single_use_and_expire() {
        let (mut s, owner) = state_with_user();
        let invite = Invite {
            id: "inv".into(),
            org_id: owner.org_id,
            email: "bob@example.com".into(),
            role: Role::Member,
            token_sha256: "tok".into(),
            invited_by: owner.id,
            created_at_ms: T0,
            expires_at_ms: T0 + 1000,
        };
        assert_eq!(s.execute(MetaCommand::Invite { invite: invite.clone() }), Done);
        // Another org cannot withdraw it (nor learn that it exists).
        let withdraw = |org| MetaCommand::RevokeInvite { org_id: org, invite_id: "inv".into() };
        assert_eq!(s.execute(withdraw(OrgId::random())), Refused(Refusal::NotFound));
        let accept = |token: &str, now: i64| MetaCommand::AcceptInvite {
            invite_id: "inv".into(),
            token_sha256: token.into(),
            user_id: UserId::random(),
            name: "Bob".into(),
            password_hash: "x".into(),
            session: RefreshFamily::new("fb".into(), UserId::random(), OrgId::random(), "h".into(), now),
            now_ms: now,
        };
        assert_eq!(s.execute(accept("wrong", T0 + 1)), Refused(Refusal::InvalidInvite));
        assert_eq!(s.execute(accept("tok", T0 + 1000)), Refused(Refusal::InvalidInvite), "expired");
        let MetaCommandResult::Session { user } = s.execute(accept("tok", T0 + 1)) else { panic!("not accepted") };
        assert_eq!((user.org_id, user.role, user.email.as_str()), (owner.org_id, Role::Member, "bob@example.com"));
        // The session belongs to the new user and org whatever the router put in it.
        assert_eq!(s.sessions["fb"].user_id, user.id);
        assert_eq!(s.execute(accept("tok", T0 + 2)), Refused(Refusal::InvalidInvite), "used twice");
        assert_eq!(s.execute(withdraw(owner.org_id)), Refused(Refusal::NotFound), "used invitations are gone");
        let second = Invite { id: "inv2".into(), email: "carol@example.com".into(), ..invite };
        s.execute(MetaCommand::Invite { invite: second });
        assert_eq!(s.execute(MetaCommand::RevokeInvite { org_id: owner.org_id, invite_id: "inv2".into() }), Done);
        assert!(!s.invites.contains_key("inv2"));
        // Removal revokes the member's sessions; owners cannot be removed.
        assert_eq!(
            s.execute(MetaCommand::RemoveMember { org_id: owner.org_id, user_id: owner.id, now_ms: T0 }),
            Refused(Refusal::OwnerProtected)
        );
        assert_eq!(
            s.execute(MetaCommand::RemoveMember { org_id: OrgId::random(), user_id: user.id, now_ms: T0 }),
            Refused(Refusal::NotFound)
        );
        assert_eq!(s.execute(MetaCommand::RemoveMember { org_id: owner.org_id, user_id: user.id, now_ms: T0 }), Done);
        assert!(s.sessions["fb"].revoked_at_ms.is_some());
        let view: MetaView = serde_json::from_value(s.query(&MetaQuery::View)).unwrap();
        assert_eq!(view.removed_users, vec![user.id]);
    }

    #[test]
    fn credentials_of_another_org_are_not_found() {
        let (mut s, owner) = state_with_user();
        let project = s.orgs[&owner.org_id].default_project;
        let cred = Credential {
            id: "k1".into(),
            kind: CredentialKind::ApiKey,
            project_id: project,
            name: "ci".into(),
            secret_sha256: "h".into(),
            created_at_ms: T0,
            revoked: false,
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
        assert!(s.credentials["k1"].revoked);
        assert_eq!(s.execute(revoke(owner.org_id)), Refused(Refusal::NotFound), "already revoked");
    }

    #[test]
    fn plans_are_seeded_once_and_quotas_belong_to_an_org() {
        let (mut s, owner) = state_with_user();
        let mut plans = sextant_model::meta::default_plans();
        s.execute(MetaCommand::SeedPlans { plans: plans.clone() });
        plans[0].rate_limits.ingest_rps = Some(7);
        s.execute(MetaCommand::SeedPlans { plans: plans.clone() });
        assert_eq!(s.plans["free"].rate_limits.ingest_rps, None, "seeding never overwrites");
        assert_eq!(s.execute(MetaCommand::PutPlan { plan: plans[0].clone() }), Done);
        assert_eq!(s.plans["free"].rate_limits.ingest_rps, Some(7));

        let quota =
            |org, project| Quota { id: "q1".into(), org_id: org, project_id: project, rate_limits: Default::default() };
        assert_eq!(
            s.execute(MetaCommand::PutQuota { quota: quota(OrgId::random(), None) }),
            Refused(Refusal::NotFound)
        );
        let foreign_project = Some(ProjectId::random());
        assert_eq!(
            s.execute(MetaCommand::PutQuota { quota: quota(owner.org_id, foreign_project) }),
            Refused(Refusal::NotFound)
        );
        let own_project = Some(s.orgs[&owner.org_id].default_project);
        assert_eq!(s.execute(MetaCommand::PutQuota { quota: quota(owner.org_id, own_project) }), Done);
        let view: MetaView = serde_json::from_value(s.query(&MetaQuery::View)).unwrap();
        assert_eq!(view.quotas.len(), 1);
        assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q1".into() }), Done);
        assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q1".into() }), Refused(Refusal::NotFound));
    }

    /// Raft logs keep commands as bincode. A bootstrap entry written by the first release must
    /// still decode, so `Org`, `User`, `Project` and `Credential` must not change shape.
    #[test]
    fn bootstrap_entries_of_existing_logs_keep_their_encoding() {
        let id = |n: u8| format!("00000000-0000-4000-8000-0000000000{n:02}");
        let (org, user, project): (OrgId, UserId, ProjectId) =
            (id(1).parse().unwrap(), id(2).parse().unwrap(), id(3).parse().unwrap());
        let command = MetaCommand::Bootstrap {
            org: Org {
                id: org,
                name: "o".into(),
                plan: "enterprise".into(),
                default_project: project,
                created_at_ms: 7,
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
            project: Project { id: project, org_id: org, name: "default".into(), created_at_ms: 7 },
            credentials: vec![Credential {
                id: "k".into(),
                kind: sextant_model::meta::CredentialKind::ApiKey,
                project_id: project,
                name: "default".into(),
                secret_sha256: "s".into(),
                created_at_ms: 7,
                revoked: false,
            }],
            partitions: vec![1, 2],
        };
        let bytes = bincode::serialize(&command).unwrap();
        // Computed with the definitions of commit 707a8cd (the first release of the log format).
        assert_eq!(
            xxhash_rust::xxh3::xxh3_64(&bytes),
            12875645247056023660,
            "encoding changed ({} bytes)",
            bytes.len()
        );
        assert_eq!(bincode::deserialize::<MetaCommand>(&bytes).unwrap(), command);
    }

    #[test]
    fn heartbeats_prune_expired_state() {
        let (mut s, _) = state_with_user();
        s.execute(MetaCommand::EndSession { family: "fam".into(), presented_sha256: "h0".into(), now_ms: T0 });
        s.execute(MetaCommand::RouterHeartbeat { router_id: "r1".into(), at_ms: T0 });
        assert!(s.sessions.contains_key("fam"), "tombstone kept while access tokens may live");
        s.execute(MetaCommand::RouterHeartbeat { router_id: "r2".into(), at_ms: T0 + TOMBSTONE_MS });
        assert!(!s.sessions.contains_key("fam"));
        assert!(!s.routers.contains_key("r1"));
        assert!(s.routers.contains_key("r2"));
        s.execute(MetaCommand::RouterLeft { router_id: "r2".into() });
        assert!(s.routers.is_empty());
    }
}
