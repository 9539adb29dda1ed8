//! Users and invitations: sign-up, members joining and leaving an org (docs/API.md,
//! "Sign-up, sign-in and sign-out" and "Members and invitations").

use std::collections::BTreeMap;

use sextant_model::meta::{
    Credential, Invite, Member, MetaCommandResult, Org, OrgMembers, Project, RefreshFamily, Refusal, Role, User,
    MAX_PENDING_INVITES_PER_ORG, TOMBSTONE_MS,
};
use sextant_model::{OrgId, UserId};

use super::{same_hash, MetaState};
use MetaCommandResult::{Done, Refused};

#[derive(Clone, Debug, Default)]
pub(super) struct Accounts {
    pub(super) users: BTreeMap<UserId, User>,
    /// Removed users and when, until their last access token has expired.
    pub(super) removed_users: BTreeMap<UserId, i64>,
    /// Pending invitations by id.
    pub(super) invites: BTreeMap<String, Invite>,
}

impl Accounts {
    pub(super) fn email_taken(&self, email: &str) -> bool {
        self.users.values().any(|u| u.email == email)
    }

    /// Removes a user, remembered until their access tokens have expired.
    pub(super) fn remove_user(&mut self, user_id: UserId, now_ms: i64) {
        self.users.remove(&user_id);
        self.removed_users.insert(user_id, now_ms);
    }

    pub(super) fn users_of(&self, org_id: OrgId) -> Vec<UserId> {
        self.users.values().filter(|u| u.org_id == org_id).map(|u| u.id).collect()
    }

    pub(super) fn invite(&mut self, invite: Invite) -> MetaCommandResult {
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

    pub(super) fn revoke_invite(&mut self, org_id: OrgId, invite_id: &str) -> MetaCommandResult {
        if self.invites.get(invite_id).is_none_or(|i| i.org_id != org_id) {
            return Refused(Refusal::NotFound);
        }
        self.invites.remove(invite_id);
        Done
    }

    pub(super) fn user_by_email(&self, email: &str) -> Option<User> {
        let email = email.to_lowercase();
        self.users.values().find(|u| u.email == email).cloned()
    }

    pub(super) fn org_members(&self, org_id: OrgId) -> OrgMembers {
        OrgMembers {
            members: self.users.values().filter(|u| u.org_id == org_id).map(User::member).collect::<Vec<Member>>(),
            invites: self.invites.values().filter(|i| i.org_id == org_id).cloned().collect(),
        }
    }

    pub(super) fn prune(&mut self, now_ms: i64) {
        self.invites.retain(|_, i| i.expires_at_ms > now_ms);
        self.removed_users.retain(|_, at| now_ms - *at < TOMBSTONE_MS);
    }
}

/// The account an accepted invitation creates.
pub(super) struct Joiner {
    pub(super) user_id: UserId,
    pub(super) name: String,
    pub(super) password_hash: String,
    pub(super) session: RefreshFamily,
}

impl MetaState {
    pub(super) fn signup(
        &mut self,
        org: Org,
        user: User,
        project: Project,
        credentials: Vec<Credential>,
        session: RefreshFamily,
        trial_ends_at_ms: Option<i64>,
    ) -> MetaCommandResult {
        if self.accounts.email_taken(&user.email) {
            return Refused(Refusal::EmailTaken);
        }
        if let Some(end) = trial_ends_at_ms {
            self.tenancy.trials.insert(org.id, end);
        }
        self.tenancy.orgs.insert(org.id, org);
        self.accounts.users.insert(user.id, user);
        self.tenancy.add_project(project, credentials);
        self.sessions.add(session);
        Done
    }

    /// Makes the invited person a member of the invitation's org, signed in.
    pub(super) fn accept_invite(
        &mut self,
        invite_id: &str,
        token_sha256: &str,
        joiner: Joiner,
        now_ms: i64,
    ) -> MetaCommandResult {
        let Joiner { user_id, name, password_hash, session } = joiner;
        let valid = self
            .accounts
            .invites
            .get(invite_id)
            .filter(|i| same_hash(&i.token_sha256, token_sha256) && i.expires_at_ms > now_ms)
            .filter(|i| self.tenancy.orgs.contains_key(&i.org_id));
        let Some(invite) = valid.cloned() else {
            return Refused(Refusal::InvalidInvite);
        };
        if self.accounts.email_taken(&invite.email) {
            return Refused(Refusal::EmailTaken);
        }
        // Single use: gone whatever happens next.
        self.accounts.invites.remove(invite_id);
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
        self.accounts.users.insert(user.id, user);
        self.sessions.add(RefreshFamily { user_id, org_id: invite.org_id, ..session });
        MetaCommandResult::Session { user: member }
    }

    pub(super) fn remove_member(&mut self, org_id: OrgId, user_id: UserId, now_ms: i64) -> MetaCommandResult {
        match self.accounts.users.get(&user_id) {
            Some(u) if u.org_id == org_id => {
                if u.role == Role::Owner {
                    return Refused(Refusal::OwnerProtected);
                }
            }
            _ => return Refused(Refusal::NotFound),
        }
        self.accounts.remove_user(user_id, now_ms);
        self.sessions.revoke_user(user_id, now_ms);
        Done
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

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
                managed_by: None,
                key: None,
                owner_email: None,
                suspended: false,
            },
            user: User { id: UserId::random(), org_id: org, ..user },
            project: Project {
                id: ProjectId::random(),
                org_id: org,
                name: "default".into(),
                created_at_ms: T0,
                managed_by: None,
                key: None,
            },
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
        assert_eq!(s.sessions.families["fb"].user_id, user.id);
        assert_eq!(s.execute(accept("tok", T0 + 2)), Refused(Refusal::InvalidInvite), "used twice");
        assert_eq!(s.execute(withdraw(owner.org_id)), Refused(Refusal::NotFound), "used invitations are gone");
        let second = Invite { id: "inv2".into(), email: "carol@example.com".into(), ..invite };
        s.execute(MetaCommand::Invite { invite: second });
        assert_eq!(s.execute(MetaCommand::RevokeInvite { org_id: owner.org_id, invite_id: "inv2".into() }), Done);
        assert!(!s.accounts.invites.contains_key("inv2"));
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
        assert!(s.sessions.families["fb"].revoked_at_ms.is_some());
        let view: MetaView = read(&s, &MetaQuery::View);
        assert_eq!(view.removed_users, vec![user.id]);
    }
}
