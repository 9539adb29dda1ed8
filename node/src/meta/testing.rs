//! What the meta tests share: a signed-up state, operator resources, and reading a query as
//! the router does.

pub(super) use sextant_model::cohort::{Cohort, MAX_COHORTS_PER_PROJECT};
pub(super) use sextant_model::meta::MetaCommandResult::{Done, Refused};
pub(super) use sextant_model::meta::{
    Credential, CredentialKind, Invite, MetaCommand, MetaCommandResult, MetaQuery, MetaView, Org, OrgMembers, Plan,
    Project, Quota, RefreshFamily, Refusal, Role, User, MAX_REFRESH_ALTERNATES, REFRESH_GRACE_MS, REFRESH_TTL_MS,
    TOMBSTONE_MS,
};
pub(super) use sextant_model::{OrgId, ProjectId, UserId};

pub(super) use super::MetaState;
pub(super) use crate::state_machine::GroupState;

/// `command` after a trip through the Raft log's encoding (docs/ARCHITECTURE.md, "Persisted
/// formats").
pub(super) fn through_the_log(command: &MetaCommand) -> MetaCommand {
    use crate::types::{Command, Entry};
    let entry = Entry {
        log_id: crate::types::LogId::new(openraft::CommittedLeaderId::new(1, 1), 1),
        payload: openraft::EntryPayload::Normal(Command::Meta(command.clone())),
    };
    match crate::persist::decode_entry(crate::persist::encode_entry(&entry).unwrap().into()).unwrap().payload {
        openraft::EntryPayload::Normal(Command::Meta(decoded)) => decoded,
        _ => panic!("a meta command came back as something else"),
    }
}

/// Answers a query as a router reads it: the JSON of the answer, decoded as `T`.
pub(super) fn read<T: serde::de::DeserializeOwned>(s: &MetaState, query: &MetaQuery) -> T {
    serde_json::from_value(serde_json::to_value(s.query(query)).unwrap()).unwrap()
}

pub(super) const T0: i64 = 1_800_000_000_000;

pub(super) fn state_with_user() -> (MetaState, User) {
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
        org: Org {
            id: org,
            name: "Acme".into(),
            plan: "pro".into(),
            default_project: project,
            created_at_ms: T0,
            managed_by: None,
            key: None,
            owner_email: None,
            suspended: false,
        },
        user: user.clone(),
        project: Project {
            id: project,
            org_id: org,
            name: "default".into(),
            created_at_ms: T0,
            managed_by: None,
            key: None,
        },
        credentials: vec![],
        session: RefreshFamily::new("fam".into(), user.id, org, "h0".into(), T0),
        trial_ends_at_ms: Some(T0 + 1),
    });
    assert_eq!(r, Done);
    (s, user)
}

pub(super) fn managed(kind: &str, uid: &str) -> sextant_model::meta::ManagedBy {
    sextant_model::meta::ManagedBy {
        api_version: "sextant.dev/v1alpha1".into(),
        kind: kind.into(),
        namespace: Some("telemetry".into()),
        name: uid.into(),
        uid: uid.into(),
    }
}

pub(super) fn put_tenant(s: &mut MetaState, key: &str, name: &str, plan: &str, suspended: bool) -> MetaCommandResult {
    s.execute(MetaCommand::PutTenant {
        key: key.into(),
        org: Org {
            id: OrgId::random(),
            name: name.into(),
            plan: plan.into(),
            default_project: ProjectId::random(),
            created_at_ms: T0,
            managed_by: None,
            key: None,
            owner_email: None,
            suspended: false,
        },
        owner_email: "ops@acme.test".into(),
        suspended,
        managed_by: managed("Tenant", key),
    })
}

pub(super) fn put_project(s: &mut MetaState, key: &str, tenant: &str, name: &str) -> MetaCommandResult {
    s.execute(MetaCommand::PutManagedProject {
        key: key.into(),
        tenant_key: tenant.into(),
        project: Project {
            id: ProjectId::random(),
            org_id: OrgId::random(),
            name: name.into(),
            created_at_ms: T0,
            managed_by: None,
            key: None,
        },
        managed_by: managed("Project", key),
    })
}

pub(super) fn id_of(r: MetaCommandResult) -> String {
    match r {
        MetaCommandResult::Keyed { id } => id,
        other => panic!("expected an id, got {other:?}"),
    }
}

pub(super) fn view(s: &MetaState) -> MetaView {
    read(s, &MetaQuery::View)
}
