use super::*;
use sextant_model::cohort::MAX_COHORTS_PER_PROJECT;
use sextant_model::meta::{
    Credential, CredentialKind, Invite, MetaCommandResult::Refused, Org, Plan, Project, Quota, RefreshFamily, Refusal,
    Role, MAX_REFRESH_ALTERNATES, REFRESH_GRACE_MS, REFRESH_TTL_MS, TOMBSTONE_MS,
};
use sextant_model::{OrgId, ProjectId, UserId};

/// Answers a query as a router reads it: the JSON of the answer, decoded as `T`.
fn read<T: serde::de::DeserializeOwned>(s: &MetaState, query: &MetaQuery) -> T {
    serde_json::from_value(serde_json::to_value(s.query(query)).unwrap()).unwrap()
}

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
    assert!(matches!(rotate(&mut s, "h0", "h1", T0 + 1), MetaCommandResult::Session { user: m } if m.id == user.id));
    assert!(matches!(rotate(&mut s, "h1", "h2", T0 + 60_000), MetaCommandResult::Session { .. }));
    // h0 is two rotations old: reuse, and the family dies with it.
    assert_eq!(rotate(&mut s, "h0", "hx", T0 + 60_001), Refused(Refusal::SessionReused));
    assert_eq!(rotate(&mut s, "h2", "h3", T0 + 60_002), Refused(Refusal::InvalidSession));
    let view: MetaView = read(&s, &MetaQuery::View);
    assert_eq!(view.revoked_sessions, vec!["fam".to_string()]);
}

#[test]
fn previous_token_is_accepted_only_within_the_grace_window() {
    let (mut s, _) = state_with_user();
    let ok = |r: MetaCommandResult| matches!(r, MetaCommandResult::Session { .. });
    assert!(ok(rotate(&mut s, "h0", "h1", T0)));
    // A second tab (or a retry) with h0: a token valid alongside h1, and h1 stays valid.
    assert!(ok(rotate(&mut s, "h0", "h1b", T0 + REFRESH_GRACE_MS)));
    assert_eq!(s.sessions.families["fam"].alternates_sha256, ["h1b"]);
    // Whichever of them the browser kept rotates; the other is then dropped.
    assert!(ok(rotate(&mut s, "h1b", "h2", T0 + REFRESH_GRACE_MS + 1)));
    assert!(s.sessions.families["fam"].alternates_sha256.is_empty());
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
    assert!(s.sessions.families["fam"].revoked_at_ms.is_none());
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

#[test]
fn plans_are_seeded_once_and_quotas_belong_to_an_org() {
    let (mut s, owner) = state_with_user();
    let mut plans = sextant_model::meta::default_plans();
    s.execute(MetaCommand::SeedPlans { plans: plans.clone() });
    plans[0].rate_limits.ingest_rps = Some(7);
    s.execute(MetaCommand::SeedPlans { plans: plans.clone() });
    assert_eq!(s.billing.plans["free"].rate_limits.ingest_rps, None, "seeding never overwrites");
    assert_eq!(s.execute(MetaCommand::PutPlan { plan: plans[0].clone() }), Done);
    assert_eq!(s.billing.plans["free"].rate_limits.ingest_rps, Some(7));

    let quota =
        |org, project| Quota { id: "q1".into(), org_id: org, project_id: project, rate_limits: Default::default() };
    assert_eq!(s.execute(MetaCommand::PutQuota { quota: quota(OrgId::random(), None) }), Refused(Refusal::NotFound));
    let foreign_project = Some(ProjectId::random());
    assert_eq!(
        s.execute(MetaCommand::PutQuota { quota: quota(owner.org_id, foreign_project) }),
        Refused(Refusal::NotFound)
    );
    let own_project = Some(s.tenancy.orgs[&owner.org_id].default_project);
    assert_eq!(s.execute(MetaCommand::PutQuota { quota: quota(owner.org_id, own_project) }), Done);
    let view: MetaView = read(&s, &MetaQuery::View);
    assert_eq!(view.quotas.len(), 1);
    assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q1".into() }), Done);
    assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q1".into() }), Refused(Refusal::NotFound));
}

/// Raft logs keep commands as bincode. A bootstrap entry written by the first release must
/// still decode, so `Org`, `User`, `Project` and `Credential` must not change shape.
#[test]
fn bootstrap_entries_of_existing_logs_keep_their_encoding() {
    let command = fixed_bootstrap(1);
    let bytes = bincode::serialize(&command).unwrap();
    // Computed with the definitions of commit 707a8cd (the first release of the log format).
    assert_eq!(xxhash_rust::xxh3::xxh3_64(&bytes), 12875645247056023660, "encoding changed ({} bytes)", bytes.len());
    assert_eq!(bincode::deserialize::<MetaCommand>(&bytes).unwrap(), command);
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
        org: Org { id: org, name: "o".into(), plan: "enterprise".into(), default_project: project, created_at_ms: 7 },
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
    }
}

// ---- admin commands (objects managed by Kubernetes resources) ----

fn managed(kind: &str, uid: &str) -> sextant_model::meta::ManagedBy {
    sextant_model::meta::ManagedBy {
        api_version: "sextant.dev/v1alpha1".into(),
        kind: kind.into(),
        namespace: Some("telemetry".into()),
        name: uid.into(),
        uid: uid.into(),
    }
}

fn put_tenant(s: &mut MetaState, key: &str, name: &str, plan: &str, suspended: bool) -> MetaCommandResult {
    s.execute(MetaCommand::PutTenant {
        key: key.into(),
        org: Org {
            id: OrgId::random(),
            name: name.into(),
            plan: plan.into(),
            default_project: ProjectId::random(),
            created_at_ms: T0,
        },
        owner_email: "ops@acme.test".into(),
        suspended,
        managed_by: managed("Tenant", key),
    })
}

fn put_project(s: &mut MetaState, key: &str, tenant: &str, name: &str) -> MetaCommandResult {
    s.execute(MetaCommand::PutManagedProject {
        key: key.into(),
        tenant_key: tenant.into(),
        project: Project { id: ProjectId::random(), org_id: OrgId::random(), name: name.into(), created_at_ms: T0 },
        managed_by: managed("Project", key),
    })
}

fn id_of(r: MetaCommandResult) -> String {
    match r {
        MetaCommandResult::Keyed { id } => id,
        other => panic!("expected an id, got {other:?}"),
    }
}

fn credential(id: &str, kind: CredentialKind, project: ProjectId) -> Credential {
    Credential {
        id: id.into(),
        kind,
        project_id: project,
        name: "kubernetes".into(),
        secret_sha256: format!("h-{id}"),
        created_at_ms: T0,
        revoked: false,
    }
}

fn view(s: &MetaState) -> MetaView {
    read(&s, &MetaQuery::View)
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
    assert!(v.managed_orgs[0].suspended);
    assert_eq!(v.managed_orgs[0].managed_by.kind, "Tenant");
    // Deleted: gone, and the key never makes another org.
    assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "t-uid".into(), now_ms: T0 }), Done);
    assert!(s.tenancy.orgs.is_empty());
    assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "t-uid".into(), now_ms: T0 }), Done, "idempotent");
    assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "unknown".into(), now_ms: T0 }), Done);
    assert_eq!(put_tenant(&mut s, "t-uid", "Acme", "pro", false), Refused(Refusal::Deleted));
    assert!(view(&s).managed_orgs.is_empty());
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
    assert_eq!(v.managed_projects.len(), 2);
    // A tenant with managed projects left is not deleted.
    assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "t".into(), now_ms: T0 }), Refused(Refusal::ProjectsRemain));
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
            credentials: vec![credential(a, CredentialKind::IngestToken, p), credential(b, CredentialKind::ApiKey, p)],
        })
    };
    assert_eq!(issue(&mut s, "a1", "b1"), Done);
    assert_eq!(issue(&mut s, "a2", "b2"), Done);
    let ids: Vec<&String> = s.tenancy.credentials.keys().collect();
    assert_eq!(ids, ["a2", "b2"], "one valid pair after a retry");
    assert_eq!(view(&s).managed_credentials.len(), 2);
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
    assert!(s.tenancy.credentials.is_empty() && s.managed.credentials.is_empty());
    assert!(s.billing.quotas.is_empty() && s.managed.quotas.is_empty());
    assert!(s.managed.alert_rules.is_empty());
    assert_eq!(s.tenancy.orgs[&org].default_project, other, "the default moves to a remaining project");
    let v = view(&s);
    assert_eq!(v.deleted_projects, vec![p]);
    assert_eq!(v.managed_projects.len(), 1);
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
    let public = Project { id: ProjectId::random(), org_id: org, name: "Side".into(), created_at_ms: T0 };
    assert_eq!(s.execute(MetaCommand::CreateProject { project: public.clone(), credentials: vec![] }), Done);
    let member = User { id: UserId::random(), org_id: org, email: "bob@acme.test".into(), ..owner.clone() };
    s.accounts.users.insert(member.id, member.clone());
    s.sessions.add(RefreshFamily::new("bob".into(), member.id, org, "h".into(), T0));
    assert_eq!(s.execute(MetaCommand::DeleteTenant { key: "t".into(), now_ms: T0 }), Refused(Refusal::ProjectsRemain));
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
        },
        display_name: Some("Pro".into()),
        price: None,
        managed_by: managed("Plan", name),
    };
    assert_eq!(s.execute(put("pro", 5)), Done);
    assert_eq!(s.billing.plans["pro"].monthly_bytes, Some(5));
    assert_eq!(s.billing.plans["pro"].rate_limits.ingest_rps, Some(9), "rate limits are not the resource's business");
    assert_eq!(s.execute(put("pro", 5)), Done, "no-op");
    assert_eq!(view(&s).managed_plans.len(), 1);
    assert_eq!(s.execute(MetaCommand::DeleteManagedPlan { name: "pro".into() }), Done);
    let default_pro = sextant_model::meta::default_plans().into_iter().find(|p| p.name == "pro").unwrap();
    assert_eq!(
        s.billing.plans["pro"].monthly_bytes, default_pro.monthly_bytes,
        "a default entry returns to its default"
    );
    assert_eq!(s.billing.plans["pro"].rate_limits.ingest_rps, Some(9));
    assert!(view(&s).managed_plans.is_empty());
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
    assert_eq!(s.managed.quotas["q"].monthly_events, Some(10));
    assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q".into() }), Refused(Refusal::Managed));
    assert_eq!(s.execute(MetaCommand::DeleteManagedQuota { key: "q".into() }), Done);
    assert!(s.billing.quotas.is_empty() && s.managed.quotas.is_empty());
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
    assert!(matches!(accepted, MetaCommandResult::Session { user } if user.org_id == org && user.role == Role::Owner));
    assert_eq!(s.execute(ask("t", "i3")), Refused(Refusal::EmailTaken), "the owner exists now");
}

/// Snapshots written before the admin commands existed still restore.
#[test]
fn snapshots_without_the_admin_state_restore() {
    let (mut s, _) = state_with_user();
    id_of(put_tenant(&mut s, "t", "Acme", "pro", false));
    let mut old = serde_json::to_value(&s).unwrap();
    for field in [
        "tenants",
        "managed_projects",
        "managed_credentials",
        "managed_plans",
        "managed_quotas",
        "alert_rules",
        "deleted_projects",
    ] {
        assert!(old.as_object_mut().unwrap().remove(field).is_some(), "{field}");
    }
    let mut restored = MetaState::default();
    restored.restore(&mut serde_json::to_vec(&old).unwrap().as_slice()).unwrap();
    assert_eq!(restored.tenancy.orgs.len(), 2);
    assert!(restored.managed.tenants.is_empty() && restored.tenancy.deleted_projects.is_empty());
}

/// The admin commands go through the Raft log as bincode like every other.
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
        let bytes = bincode::serialize(&c).unwrap();
        assert_eq!(bincode::deserialize::<MetaCommand>(&bytes).unwrap(), c);
    }
}

#[test]
fn heartbeats_prune_expired_state() {
    let (mut s, _) = state_with_user();
    s.execute(MetaCommand::EndSession { family: "fam".into(), presented_sha256: "h0".into(), now_ms: T0 });
    s.execute(MetaCommand::RouterHeartbeat { router_id: "r1".into(), at_ms: T0 });
    assert!(s.sessions.families.contains_key("fam"), "tombstone kept while access tokens may live");
    s.execute(MetaCommand::RouterHeartbeat { router_id: "r2".into(), at_ms: T0 + TOMBSTONE_MS });
    assert!(!s.sessions.families.contains_key("fam"));
    assert!(!s.routers.last_seen.contains_key("r1"));
    assert!(s.routers.last_seen.contains_key("r2"));
    s.execute(MetaCommand::RouterLeft { router_id: "r2".into() });
    assert!(s.routers.last_seen.is_empty());
}

#[test]
fn cohorts_belong_to_a_project_of_the_org_and_are_bounded() {
    use sextant_model::cohort::{Cohort, CountOp, Definition, Kind, Logic};
    let (mut s, owner) = state_with_user();
    let project = s.tenancy.orgs[&owner.org_id].default_project;
    let cohort = |id: String, project_id| Cohort {
        id,
        project_id,
        name: "buyers".into(),
        definition: Definition {
            logic: Logic::And,
            conditions: vec![sextant_model::cohort::Condition {
                kind: Kind::Did,
                event: "buy".into(),
                op: CountOp::Ge,
                count: 1,
                range: "7d".into(),
                range_ns: 7,
            }],
        },
        created_at_ms: T0,
    };
    let create = |org, c| MetaCommand::CreateCohort { org_id: org, cohort: c };
    assert_eq!(s.execute(create(OrgId::random(), cohort("c0".into(), project))), Refused(Refusal::NotFound));
    assert_eq!(s.execute(create(owner.org_id, cohort("c0".into(), ProjectId::random()))), Refused(Refusal::NotFound));
    for i in 0..MAX_COHORTS_PER_PROJECT {
        assert_eq!(s.execute(create(owner.org_id, cohort(format!("c{i:03}"), project))), Done);
    }
    assert_eq!(s.execute(create(owner.org_id, cohort("extra".into(), project))), Refused(Refusal::LimitReached));
    let listed: Vec<Cohort> = read(&s, &MetaQuery::Cohorts { project_id: project });
    assert_eq!(listed.len(), MAX_COHORTS_PER_PROJECT);
    assert_eq!(listed[0], cohort("c000".into(), project));
    let other: Vec<Cohort> = read(&s, &MetaQuery::Cohorts { project_id: ProjectId::random() });
    assert!(other.is_empty());
    // The command survives the log's encoding.
    let cmd = create(owner.org_id, cohort("c1".into(), project));
    assert_eq!(bincode::deserialize::<MetaCommand>(&bincode::serialize(&cmd).unwrap()).unwrap(), cmd);
}

/// A snapshot written by the meta state machine before it was split into aggregates
/// (every map non-empty) restores to the same catalog, and is written back byte for byte.
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
    assert_eq!((v.managed_orgs[0].key.as_str(), v.managed_orgs[0].org_id.to_string()), ("tenant-uid", id(120)));
    let managed_projects: Vec<&str> = v.managed_projects.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(managed_projects, ["project-uid"], "the deleted one is not in the view");
    assert_eq!(v.managed_credentials.len(), 2);
    assert_eq!(v.managed_plans[0].price.as_ref().unwrap().amount_cents, 9900);
    assert_eq!((v.managed_quotas[0].key.as_str(), v.managed_quotas[0].hard), ("quota-uid", true));
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
    assert!(written == bytes, "the snapshot format changed");
}
