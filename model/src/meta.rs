//! Records of the meta group (group 0) and the commands and queries that change and read them.
//! The node applies commands deterministically (every time in a command comes from the router
//! that proposed it, never from the applying node's clock); routers cache a [`MetaView`].
//!
//! One serde schema serves the Raft log (commands as JSON), the meta snapshot and meta RPC
//! (docs/ARCHITECTURE.md, "Persisted formats"): a new field gets `#[serde(default)]`, nothing is
//! renamed (an old name stays readable with `#[serde(alias)]`), no enum variant is removed.

use serde::{Deserialize, Serialize};

use crate::cohort::Cohort;
use crate::ids::{OrgId, ProjectId, UserId};

/// A refresh token stays valid this long after its last use.
pub const REFRESH_TTL_MS: i64 = 30 * 24 * 3600 * 1000;
/// The token a family just rotated away from is still accepted this long, for a client whose
/// refresh response was lost and who retries with the old cookie.
pub const REFRESH_GRACE_MS: i64 = 10_000;
/// At most this many extra tokens are handed out from the previous one within the window.
pub const MAX_REFRESH_ALTERNATES: usize = 4;
pub const INVITE_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
pub const TRIAL_MS: i64 = 14 * 24 * 3600 * 1000;
/// A router that has not heartbeated for this long no longer counts towards limit shares.
pub const ROUTER_LIVE_MS: i64 = 15_000;
/// Revoked sessions and removed users are remembered this long: longer than any access token
/// issued before the revocation lives (15 minutes).
pub const TOMBSTONE_MS: i64 = 3600 * 1000;
pub const MAX_PROJECTS_PER_ORG: usize = 100;
pub const MAX_KEYS_PER_PROJECT: usize = 100;
pub const MAX_PENDING_INVITES_PER_ORG: usize = 100;
pub const MAX_SESSIONS_PER_USER: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Owner,
    Admin,
    Member,
}

impl Role {
    /// Owners and admins manage members and API keys.
    pub fn manages_org(self) -> bool {
        matches!(self, Role::Owner | Role::Admin)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Org {
    pub id: OrgId,
    pub name: String,
    pub plan: String,
    pub default_project: ProjectId,
    pub created_at_ms: i64,
    /// Set for the org of a Tenant resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<ManagedBy>,
    /// The Tenant resource's key (its Kubernetes UID) in the admin API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A Tenant's owner email, invited by `InviteTenantOwner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_email: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
}

/// The end of an org's sign-up trial of its plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrgTrial {
    pub org_id: OrgId,
    pub ends_at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct User {
    pub id: UserId,
    pub org_id: OrgId,
    /// Lower-cased; unique across the cluster.
    pub email: String,
    pub name: String,
    pub role: Role,
    /// Argon2id PHC string.
    pub password_hash: String,
    pub created_at_ms: i64,
}

impl User {
    pub fn member(&self) -> Member {
        Member {
            id: self.id,
            org_id: self.org_id,
            email: self.email.clone(),
            name: self.name.clone(),
            role: self.role,
            created_at_ms: self.created_at_ms,
        }
    }
}

/// A user as routers see it: everything but the password hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Member {
    pub id: UserId,
    pub org_id: OrgId,
    pub email: String,
    pub name: String,
    pub role: Role,
    pub created_at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Project {
    pub id: ProjectId,
    pub org_id: OrgId,
    pub name: String,
    pub created_at_ms: i64,
    /// Set for the project of a Project resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<ManagedBy>,
    /// The Project resource's key in the admin API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    /// `sxk_…`: observability ingest.
    ApiKey,
    /// `sxp_…`: analytics ingest.
    IngestToken,
}

/// A project credential. Only the SHA-256 of its secret part is stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Credential {
    /// Public identifier, embedded in the credential itself.
    pub id: String,
    pub kind: CredentialKind,
    pub project_id: ProjectId,
    pub name: String,
    /// Hex SHA-256 of the secret part.
    pub secret_sha256: String,
    pub created_at_ms: i64,
    pub revoked: bool,
    /// Set for a credential the admin API issued for a managed project (its project's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<ManagedBy>,
}

/// One sign-in: a chain of refresh tokens, each replacing the one before. Only the current
/// token and the one it replaced are kept, as SHA-256 hashes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RefreshFamily {
    /// Public part of every refresh token of the family (and the `sid` claim of access tokens).
    pub id: String,
    pub user_id: UserId,
    pub org_id: OrgId,
    pub current_sha256: String,
    pub previous_sha256: Option<String>,
    /// Tokens issued from `previous_sha256` within the grace window (two tabs refreshing at
    /// once, a retried request): as valid as the current one until the next rotation.
    #[serde(default)]
    pub alternates_sha256: Vec<String>,
    pub rotated_at_ms: i64,
    pub expires_at_ms: i64,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

impl RefreshFamily {
    pub fn new(id: String, user_id: UserId, org_id: OrgId, sha256: String, now_ms: i64) -> Self {
        Self {
            id,
            user_id,
            org_id,
            current_sha256: sha256,
            previous_sha256: None,
            alternates_sha256: Vec::new(),
            rotated_at_ms: now_ms,
            expires_at_ms: now_ms + REFRESH_TTL_MS,
            created_at_ms: now_ms,
            revoked_at_ms: None,
        }
    }
}

/// An invitation to join an org; the token is single use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Invite {
    pub id: String,
    pub org_id: OrgId,
    pub email: String,
    pub role: Role,
    pub token_sha256: String,
    pub invited_by: UserId,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

/// Per-plan replacements of the routers' default request rates (requests per second,
/// cluster-wide). `None` keeps the default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateLimitOverrides {
    pub ingest_rps: Option<u32>,
    pub analytics_rps: Option<u32>,
    pub api_rps: Option<u32>,
}

/// A catalog entry (docs/API.md, "Admin API"). Unlimited is `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub name: String,
    pub monthly_bytes: Option<u64>,
    pub monthly_events: Option<u64>,
    pub retention_days: Option<u32>,
    pub features: Vec<String>,
    pub rate_limits: RateLimitOverrides,
    /// Set by a Plan resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<ManagedBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<PlanPrice>,
}

/// The catalog a new cluster starts with (docs/API.md, "Data retention" lists it). It is
/// written into meta once; from then on meta (and Plan resources) are the source of truth.
pub fn default_plans() -> Vec<Plan> {
    const GB: u64 = 1_000_000_000;
    let plan = |name: &str, gb: Option<u64>, events: Option<u64>, days: Option<u32>, retention: bool| Plan {
        name: name.into(),
        monthly_bytes: gb.map(|g| g * GB),
        monthly_events: events,
        retention_days: days,
        features: if retention { vec!["retention".into()] } else { vec![] },
        rate_limits: RateLimitOverrides::default(),
        managed_by: None,
        display_name: None,
        price: None,
    };
    // What `POST /billing/subscribe` charges per month; free and enterprise are not bought
    // there.
    let priced = |mut p: Plan, cents: u64| {
        p.price = Some(PlanPrice { amount_cents: cents, currency: "usd".into(), interval: "month".into() });
        p
    };
    vec![
        plan("free", Some(1), Some(1_000_000), Some(7), false),
        priced(plan("pro", Some(10), Some(10_000_000), Some(30), false), 2_900),
        priced(plan("growth", Some(10), Some(50_000_000), Some(90), true), 9_900),
        priced(plan("business", Some(100), Some(500_000_000), Some(365), true), 49_900),
        plan("enterprise", None, None, None, true),
    ]
}

/// Overrides for one org, or one project of it (docs/API.md, "Admin API", `PUT /quotas`). A
/// project's quota wins over its org's, which wins over the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quota {
    pub id: String,
    pub org_id: OrgId,
    pub project_id: Option<ProjectId>,
    pub rate_limits: RateLimitOverrides,
    /// Set by a Quota resource, whose key is `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<ManagedBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_events: Option<u64>,
    /// Hard refuses ingest over the limit; soft only reports it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hard: bool,
}

/// A router's latest heartbeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouterSeen {
    pub id: String,
    pub at_ms: i64,
}

// ---- Objects managed by Kubernetes resources (the operator, through the admin API) ----

/// The Kubernetes resource an object is managed by (docs/API.md, "Admin API", `managed_by`).
/// Such an object is read-only through the public API (409).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ManagedBy {
    /// `sextant.dev/v1alpha1`.
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanPrice {
    pub amount_cents: u64,
    /// ISO 4217.
    pub currency: String,
    /// `month` or `year` ([`crate::admin::BillingInterval`]).
    pub interval: String,
}

/// What an alert rule looks at; every field narrows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// An analytics event name, for `event_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
}

impl AlertFilter {
    /// Its fields' names as JSON writes them.
    pub const FIELDS: [&'static str; 6] = ["service", "operation", "level", "query", "hostname", "event"];

    /// Reads a filter of a request body, refusing unknown fields: a misspelt one would
    /// otherwise leave a rule watching everything. Stored rules are read leniently.
    pub fn deserialize_strict<'de, D: serde::Deserializer<'de>>(d: D) -> Result<AlertFilter, D::Error> {
        use serde::de::Error;
        let fields = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        if let Some(unknown) = fields.keys().find(|k| !Self::FIELDS.contains(&k.as_str())) {
            return Err(D::Error::unknown_field(unknown, &Self::FIELDS));
        }
        serde_json::from_value(serde_json::Value::Object(fields)).map_err(D::Error::custom)
    }
}

/// An alert rule of a project (docs/API.md, "Admin API"). Built by meta.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertRule {
    pub id: String,
    pub project_id: ProjectId,
    pub name: String,
    pub metric: String,
    pub filter: AlertFilter,
    pub comparison: String,
    pub threshold: f64,
    pub window_minutes: u32,
    pub enabled: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub managed_by: Option<ManagedBy>,
    /// Key of the AlertRule resource, for managed rules.
    #[serde(default)]
    pub key: Option<String>,
    /// How long the condition must hold before the rule fires (0: at the first evaluation).
    #[serde(default)]
    pub for_seconds: u32,
    /// Id of the project's webhook its transitions are meant for (`None`: every webhook
    /// subscribed to the alert events).
    #[serde(default)]
    pub webhook_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// Creates the first org, owner, project and credentials and the partition table, once.
    /// Applying it to an already bootstrapped cluster changes nothing.
    Bootstrap {
        org: Org,
        user: User,
        project: Project,
        credentials: Vec<Credential>,
        partitions: Vec<u64>,
    },
    /// Adds the plans the catalog does not have yet; existing entries are kept as they are.
    SeedPlans {
        plans: Vec<Plan>,
    },
    /// A new org with its owner, default project, credentials and first session, all or nothing.
    Signup {
        org: Org,
        user: User,
        project: Project,
        credentials: Vec<Credential>,
        session: RefreshFamily,
        trial_ends_at_ms: Option<i64>,
    },
    /// A password sign-in.
    StartSession {
        session: RefreshFamily,
    },
    /// Replaces the family's current refresh token (hash `presented_sha256`) by `new_sha256`.
    RotateSession {
        family: String,
        presented_sha256: String,
        new_sha256: String,
        now_ms: i64,
    },
    /// Sign-out with one of the family's live refresh tokens: the family can no longer
    /// refresh and its access tokens stop working. Knowing the family id (the `sid` of an
    /// access token) is not enough.
    EndSession {
        family: String,
        presented_sha256: String,
        now_ms: i64,
    },
    Invite {
        invite: Invite,
    },
    /// Turns an invitation into a user of the inviting org with a first session.
    AcceptInvite {
        invite_id: String,
        token_sha256: String,
        user_id: UserId,
        name: String,
        password_hash: String,
        session: RefreshFamily,
        now_ms: i64,
    },
    /// Removes a user from `org_id` and revokes every session of theirs.
    RemoveMember {
        org_id: OrgId,
        user_id: UserId,
        now_ms: i64,
    },
    CreateProject {
        project: Project,
        credentials: Vec<Credential>,
    },
    /// Adds a credential to a project of `org_id`.
    CreateCredential {
        org_id: OrgId,
        credential: Credential,
    },
    /// Revokes a credential of a project of `org_id`.
    RevokeCredential {
        org_id: OrgId,
        id: String,
        kind: CredentialKind,
    },
    /// A router is alive; also where expired sessions, invites and tombstones are dropped.
    RouterHeartbeat {
        router_id: String,
        at_ms: i64,
    },
    /// Withdraws a pending invitation of `org_id`.
    RevokeInvite {
        org_id: OrgId,
        invite_id: String,
    },
    /// Adds or replaces a catalog entry (a Plan resource).
    PutPlan {
        plan: Plan,
    },
    /// Adds or replaces an override (a Quota resource).
    PutQuota {
        quota: Quota,
    },
    DeleteQuota {
        id: String,
    },
    /// A router is shutting down: it stops counting towards limit shares at once.
    RouterLeft {
        router_id: String,
    },
    // ---- Admin API (objects managed by Kubernetes resources), keyed by the resource's UID so
    // that the operator's retries are harmless. Kept contiguous. ----
    /// Creates the org of a Tenant (with `org`'s id, default project slot and creation time)
    /// or updates its name, plan, owner email and suspension. Answers `Keyed` with the org id.
    PutTenant {
        key: String,
        org: Org,
        owner_email: String,
        suspended: bool,
        managed_by: ManagedBy,
    },
    /// Deletes a tenant's org, its users and sessions, and the projects not managed by Project
    /// resources (with their data). Refused while a managed project of it remains; an unknown
    /// or already deleted key is done.
    DeleteTenant {
        key: String,
        now_ms: i64,
    },
    /// Creates the project of a Project resource in the org of tenant `tenant_key`, or renames
    /// it. Answers `Keyed` with the project id.
    PutManagedProject {
        key: String,
        tenant_key: String,
        project: Project,
        managed_by: ManagedBy,
    },
    /// Adds `credentials` to the project of `key` and deletes the ones earlier calls added.
    IssueManagedCredentials {
        key: String,
        credentials: Vec<Credential>,
    },
    /// Marks the project of `key` deleted: its credentials, quotas and rules go now, its data
    /// with the storage nodes' next retention pass. Unknown or deleted keys are done.
    DeleteManagedProject {
        key: String,
        now_ms: i64,
    },
    /// Adds or replaces a catalog entry from a Plan resource (rate limits already set on the
    /// entry are kept).
    PutManagedPlan {
        plan: Plan,
        display_name: Option<String>,
        price: Option<PlanPrice>,
        managed_by: ManagedBy,
    },
    /// A Plan resource is gone: a default catalog entry returns to its default, another one is
    /// removed (refused while an org is on it). Entries not managed by a resource stay.
    DeleteManagedPlan {
        name: String,
    },
    /// Exactly one of `tenant_key` and `project_key`.
    PutManagedQuota {
        key: String,
        tenant_key: Option<String>,
        project_key: Option<String>,
        monthly_bytes: Option<u64>,
        monthly_events: Option<u64>,
        ingest_rps: Option<u32>,
        hard: bool,
        managed_by: ManagedBy,
    },
    DeleteManagedQuota {
        key: String,
    },
    /// Creates (with `id`) or updates the rule of an AlertRule resource. Answers `Keyed` with
    /// the rule id.
    PutManagedAlertRule {
        key: String,
        project_key: String,
        id: String,
        name: String,
        metric: String,
        filter: AlertFilter,
        comparison: String,
        threshold: f64,
        window_minutes: u32,
        enabled: bool,
        now_ms: i64,
        managed_by: ManagedBy,
        #[serde(default)]
        for_seconds: u32,
        #[serde(default)]
        webhook_id: Option<String>,
    },
    DeleteManagedAlertRule {
        key: String,
    },
    /// An owner invitation for the owner email of tenant `key` (org, email and role are set by
    /// meta): how the first person gets into an org made by a Tenant resource. Replaces the
    /// earlier pending invitations of that email. Answers `Keyed` with the org id.
    InviteTenantOwner {
        key: String,
        invite: Invite,
    },
    /// Stores a cohort definition of a project of `org_id` (at most
    /// [`crate::cohort::MAX_COHORTS_PER_PROJECT`] per project).
    CreateCohort {
        org_id: OrgId,
        cohort: Cohort,
    },
    // ---- storage membership, replica placement and drains (docs/ARCHITECTURE.md) ----
    /// A storage node announces itself, at every start. An unknown id is recorded as joining
    /// (or, for a node of the static initial member set, as a member); a known id only updates
    /// its address, so a restart never undoes a drain.
    RegisterNode {
        id: u64,
        address: String,
        member: bool,
        replication_factor: u32,
        /// The node's incarnation (docs/RELIABILITY.md, "Replacing a node"): recorded for an
        /// unknown id; for a known id with another incarnation, recorded as a restart on an empty
        /// data directory that waits to be replaced. 0: a node of a release before incarnations.
        #[serde(default)]
        incarnation: u64,
        /// The node's failure zone (`crate::zone`), `None` when it has none. A node registers
        /// again when its zone changes; replicas are then spread over zones.
        #[serde(default)]
        zone: Option<String>,
    },
    /// The complete member set, by address (the operator's placement request): listed nodes
    /// become members, the others are drained; replicas are placed and rebalanced.
    SetMembers {
        addresses: Vec<String>,
    },
    /// Moves every replica off one node.
    DrainNode {
        address: String,
    },
    /// A group's leader reports the voters of its committed membership `log_index`; older
    /// reports than the one recorded are ignored.
    ReportReplicas {
        group: u64,
        voters: Vec<u64>,
        log_index: u64,
    },
    /// A data group's leader reports the group's cumulative usage counters (docs/API.md,
    /// "Usage") as of its log entry `applied_index`; a report older than the one recorded is
    /// ignored, so repeats and reorderings never count twice.
    ReportUsage {
        group: u64,
        applied_index: u64,
        usage: Vec<crate::usage::UsageRecord>,
    },
    // ---- webhooks (docs/API.md, "Webhooks") ----
    /// Enqueues one delivery per enabled webhook of the event's org (and project, if it names
    /// one) subscribed to `event.name`. A second publish of the same `event.id` enqueues
    /// nothing.
    PublishSystemEvent {
        event: crate::webhook::SystemEvent,
    },
    /// Adds a webhook to a project of `org_id` (at most
    /// [`crate::webhook::MAX_WEBHOOKS_PER_PROJECT`]); a retried command keeps the first.
    CreateWebhook {
        webhook: crate::webhook::Webhook,
    },
    /// Deletes a webhook of a project of `org_id`, with its deliveries.
    DeleteWebhook {
        org_id: OrgId,
        project_id: ProjectId,
        id: String,
    },
    /// Makes `secret` the signing secret; the current one keeps signing until `now_ms` +
    /// [`crate::webhook::ROTATION_OVERLAP_MS`], and an older one stops at once.
    RotateWebhookSecret {
        org_id: OrgId,
        project_id: ProjectId,
        id: String,
        secret: crate::webhook::SigningSecret,
        now_ms: i64,
    },
    /// Ingested customer events: each enabled webhook of the project subscribed to some of
    /// their names gets one delivery with those events. Idempotent on `batch_id`.
    PublishCustomerEvents {
        batch_id: String,
        org_id: OrgId,
        project_id: ProjectId,
        at_ms: i64,
        events: Vec<crate::webhook::CustomerEvent>,
    },
    /// Gives `worker` up to `max` due deliveries (pending, due at `now_ms`, not leased or
    /// their lease lapsed) until `now_ms` + `lease_ms`. Answers `Leased`; a repeat with the
    /// same `token` answers the deliveries it already holds.
    LeaseDeliveries {
        worker: String,
        token: String,
        now_ms: i64,
        lease_ms: i64,
        max: u32,
    },
    /// The result of an attempt of a delivery leased with `token`: recorded, and the lease
    /// released. An attempt under a lapsed lease is recorded but changes nothing else.
    RecordDeliveryAttempt {
        delivery_id: String,
        token: String,
        attempt: crate::webhook::Attempt,
        outcome: crate::webhook::AttemptOutcome,
    },
    // ---- alerts (docs/API.md, "Alerts") ----
    /// Adds an alert rule to a project of `org_id` (at most
    /// [`crate::alert::MAX_RULES_PER_PROJECT`]); a retried command keeps the first.
    CreateAlertRule {
        org_id: OrgId,
        rule: AlertRule,
    },
    /// Deletes a rule of a project of `org_id`; refused (`Managed`) for a rule of an
    /// AlertRule resource.
    DeleteAlertRule {
        org_id: OrgId,
        project_id: ProjectId,
        id: String,
    },
    /// Takes or renews the evaluator lease until `now_ms + ttl_ms`. Answers `Lease`: renewed
    /// with the same token for its holder, a new token for another router once it expired;
    /// `Refused(LeaseHeld)` while another router holds it.
    AcquireAlertLease {
        holder: String,
        now_ms: i64,
        ttl_ms: i64,
    },
    /// One evaluation round's values, recorded only while `holder` with `token` is the lease's
    /// latest holder, expired or not (`Refused(LeaseHeld)` once another router took it). Each
    /// observation moves its rule's state (crate::alert::AlertStatus::observe) if the rule is
    /// still at the observed `seq`.
    RecordAlertObservations {
        holder: String,
        token: u64,
        now_ms: i64,
        observations: Vec<crate::alert::AlertObservation>,
    },
    // ---- subscriptions (docs/API.md, "Billing"); each keyed so that a retry, a second
    // router doing the same step, or a replayed provider event changes nothing ----
    /// A payment page was handed to `org_id` for `plan` (idempotent on `checkout_id`).
    StartCheckout {
        org_id: OrgId,
        checkout_id: String,
        plan: String,
        provider: String,
        now_ms: i64,
    },
    /// A verified provider event; applied once per `event_id`, and a subscription event older
    /// (by `created_ms`) than the newest applied is ignored.
    ApplyProviderEvent {
        event_id: String,
        created_ms: i64,
        provider: String,
        change: crate::subscription::ProviderChange,
        now_ms: i64,
    },
    /// The owner turned auto-renew off: the plan is kept to the end of the period.
    CancelSubscription {
        org_id: OrgId,
        now_ms: i64,
    },
    /// The owner unlinked card `card_id`; auto-renew goes off with it.
    RemovePaymentMethod {
        org_id: OrgId,
        card_id: String,
        now_ms: i64,
    },
    /// The renewal charge of the period beginning `period_start_ms`; applied only while the
    /// subscription's current period ends there (a duplicate is a no-op).
    RecordRenewal {
        org_id: OrgId,
        period_start_ms: i64,
        payment: crate::subscription::Payment,
        now_ms: i64,
    },
    /// The trial ending at `ends_at_ms` is over: the org falls back to the free plan. A no-op
    /// unless that trial is still recorded and over at `now_ms`.
    EndTrial {
        org_id: OrgId,
        ends_at_ms: i64,
        now_ms: i64,
    },
    /// The subscription whose period ends at `period_end_ms` is no longer in force at
    /// `now_ms`: it ends and the org moves to the free plan. A no-op otherwise.
    EndSubscription {
        org_id: OrgId,
        period_end_ms: i64,
        now_ms: i64,
    },
    /// Enqueues a `webhook.test` delivery (message id from `event_id`) to a webhook of a
    /// project of `org_id`.
    SendTestEvent {
        org_id: OrgId,
        project_id: ProjectId,
        webhook_id: String,
        event_id: String,
        at_ms: i64,
    },
    /// The evaluator lease's holder is stopping: the lease expires now, so another router takes
    /// it at its next round rather than when it would have run out. Only `holder` releases it.
    ReleaseAlertLease {
        holder: String,
    },
    /// Replaces a node that restarted on an empty data directory (docs/RELIABILITY.md,
    /// "Replacing a node"): every group's leader removes the old incarnation, then adds the new
    /// one back as a learner and promotes it once caught up.
    ReplaceNode {
        id: u64,
    },
    /// Moves every replica off a node given by id (a dead node that cannot drain itself).
    RemoveNode {
        id: u64,
    },
}

/// Why meta refused a command. Decided by the state machine so that concurrent requests on
/// different routers cannot both pass a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    EmailTaken,
    NameTaken,
    /// Unknown, or belongs to another org: the two are indistinguishable on purpose.
    NotFound,
    LimitReached,
    OwnerProtected,
    /// Unknown, expired or revoked refresh token.
    InvalidSession,
    /// An already rotated refresh token came back: the family is now revoked.
    SessionReused,
    InvalidInvite,
    /// The object is managed by a Kubernetes resource: read-only through the public API.
    Managed,
    /// A tenant still has projects managed by Project resources.
    ProjectsRemain,
    /// The key belongs to a deleted project or tenant.
    Deleted,
    /// A plan that orgs are on cannot be removed.
    PlanInUse,
    /// A membership change would leave fewer members than the replication factor.
    TooFewNodes,
    /// A placement names an address no storage node has registered.
    UnknownNode,
    /// Another router holds the alert evaluator lease, or the presented one lapsed.
    LeaseHeld,
    /// A replacement names a node that has not restarted on an empty data directory.
    NotReplaceable,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetaCommandResult {
    Bootstrapped {
        created: bool,
    },
    Done,
    /// The session's user, as meta knows them now.
    Session {
        user: Member,
    },
    Refused(Refusal),
    /// The id of the object a keyed admin command created or updated.
    Keyed {
        id: String,
    },
    /// Deliveries leased to a webhook worker.
    Leased {
        deliveries: Vec<crate::webhook::LeasedDelivery>,
    },
    /// The alert evaluator lease, as [`MetaCommand::AcquireAlertLease`] left it.
    Lease {
        token: u64,
        expires_at_ms: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetaQuery {
    /// Everything a router caches: partition table, projects and credential hashes.
    View,
    UserByEmail {
        email: String,
    },
    /// Members and pending invitations of an org.
    OrgMembers {
        org_id: OrgId,
    },
    /// The cohorts of a project (a `Vec<Cohort>`, oldest first).
    Cohorts {
        project_id: ProjectId,
    },
    /// Storage nodes, desired and current replica placement: a [`ClusterView`].
    Cluster,
    /// Usage of these projects per month, summed over data groups (a
    /// `Vec<crate::usage::UsageRecord>`, by project and month).
    Usage {
        project_ids: Vec<String>,
    },
    /// The webhooks of a project, without secrets (a `Vec<WebhookInfo>`, oldest first).
    Webhooks {
        project_id: ProjectId,
    },
    /// The deliveries of a webhook of a project, newest first (a `Vec<Delivery>`; empty for
    /// a webhook of another project).
    WebhookDeliveries {
        project_id: ProjectId,
        webhook_id: String,
    },
    /// How many deliveries a worker could lease at `now_ms` (a `u64`): read before leasing so
    /// that idle workers write nothing to the log.
    DueDeliveries {
        now_ms: i64,
    },
    /// Alert rules with their state (a `Vec<crate::alert::AlertEntry>`, oldest first): of one
    /// project, or of every project for the evaluator. `history: false` leaves transitions out.
    Alerts {
        project_id: Option<ProjectId>,
        #[serde(default)]
        history: bool,
    },
    /// The billing account of an org with its payment history (an
    /// `Option<crate::subscription::BillingAccount>`).
    BillingAccount {
        org_id: OrgId,
    },
}

/// Answer to [`MetaQuery::OrgMembers`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgMembers {
    pub members: Vec<Member>,
    pub invites: Vec<Invite>,
}

/// What routers cache from meta, refreshed every second.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetaView {
    /// Grows with every applied command.
    #[serde(default)]
    pub version: u64,
    pub partitions: Vec<u64>,
    pub orgs: Vec<Org>,
    pub projects: Vec<Project>,
    pub credentials: Vec<Credential>,
    #[serde(default)]
    pub members: Vec<Member>,
    /// Users removed recently enough that their access tokens could still be unexpired.
    #[serde(default)]
    pub removed_users: Vec<UserId>,
    /// Session families revoked recently enough that their access tokens could still be
    /// unexpired.
    #[serde(default)]
    pub revoked_sessions: Vec<String>,
    #[serde(default)]
    pub routers: Vec<RouterSeen>,
    #[serde(default)]
    pub plans: Vec<Plan>,
    #[serde(default)]
    pub quotas: Vec<Quota>,
    #[serde(default)]
    pub trials: Vec<OrgTrial>,
    #[serde(default)]
    pub alert_rules: Vec<AlertRule>,
    /// Deleted projects: storage nodes drop their data, routers refuse them.
    #[serde(default)]
    pub deleted_projects: Vec<ProjectId>,
    /// Usage per project in the two newest months reported (docs/API.md, "Usage"), summed
    /// over data groups: what routers read usage and quotas from.
    #[serde(default)]
    pub usage: Vec<crate::usage::UsageRecord>,
    /// Enabled webhooks (no secrets): what the ingest path matches event names against.
    #[serde(default)]
    pub webhooks: Vec<crate::webhook::WebhookInfo>,
    /// Billing accounts without their histories: plans in force and what the lifecycle acts on.
    #[serde(default)]
    pub billing: Vec<crate::subscription::BillingAccount>,
    /// The log index each data group's counters in `usage` are at: a router takes what it
    /// committed itself above these as not yet counted (docs/API.md, "Quotas").
    #[serde(default)]
    pub usage_indexes: Vec<crate::usage::ReportedIndex>,
}

/// A storage node as meta records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeRole {
    /// Registered, not (yet) in the member set: holds no replicas.
    Joining,
    /// In the member set: replicas may be placed on it.
    Member,
    /// Being emptied: every replica moves elsewhere.
    Draining,
}

/// A storage node's place as the admin API reports it (the operator's `MembershipState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// Not a member yet, or a member still receiving the replicas placed on it.
    Joining,
    /// A member holding exactly the replicas placed on it.
    Active,
    /// Replicas are being moved away.
    Draining,
    /// Holds no replicas; safe to stop and remove.
    Drained,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterNodeView {
    pub id: u64,
    pub address: String,
    pub role: NodeRole,
    pub state: NodeState,
    /// The incarnation meta accepts for this id (0: registered before incarnations existed).
    #[serde(default)]
    pub incarnation: u64,
    /// A node that started on an empty data directory under this id announced this
    /// incarnation: it does not take part in Raft until it is replaced.
    #[serde(default)]
    pub needs_replacement: Option<u64>,
    /// A replacement in progress.
    #[serde(default)]
    pub replacing: Option<NodeReplacement>,
    /// The zone the node registered with (`None`: none, counted as one "unknown" zone).
    #[serde(default)]
    pub zone: Option<String>,
}

/// A node id being handed to a new incarnation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReplacement {
    pub incarnation: u64,
    /// Groups whose leader has not yet removed the old incarnation from the membership.
    pub groups: Vec<u64>,
}

/// Answer to [`MetaQuery::Cluster`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub replication_factor: u32,
    pub nodes: Vec<ClusterNodeView>,
    /// Group -> the nodes its replicas should be on.
    pub desired: std::collections::BTreeMap<u64, Vec<u64>>,
    /// Group -> the voters of its last committed membership, as its leader reported them.
    pub replicas: std::collections::BTreeMap<u64, Vec<u64>>,
    /// Distinct zones among the members (nodes without a zone count as one).
    #[serde(default)]
    pub zones: u32,
    /// Groups whose reported replicas break the zone rule (docs/ARCHITECTURE.md, "Zones").
    #[serde(default)]
    pub misplaced: Vec<u64>,
}

impl ClusterView {
    pub fn address_of(&self, id: u64) -> Option<&str> {
        self.nodes.iter().find(|n| n.id == id).map(|n| n.address.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_matches_the_contract() {
        let plans = default_plans();
        let get = |n: &str| plans.iter().find(|p| p.name == n).unwrap();
        assert_eq!(get("free").monthly_bytes, Some(1_000_000_000));
        assert_eq!(get("pro").monthly_events, Some(10_000_000));
        assert!(!get("pro").features.contains(&"retention".to_string()));
        assert!(get("growth").features.contains(&"retention".to_string()));
        assert_eq!(get("business").retention_days, Some(365));
        assert_eq!(get("enterprise").monthly_bytes, None);
    }

    #[test]
    fn a_request_filter_with_a_misspelt_field_is_refused_and_a_full_one_read_whole() {
        #[derive(Debug, Deserialize)]
        struct Body {
            #[serde(deserialize_with = "AlertFilter::deserialize_strict")]
            filter: AlertFilter,
        }
        let full = AlertFilter {
            service: Some("checkout".into()),
            operation: Some("POST /pay".into()),
            level: Some("ERROR".into()),
            query: Some("timeout".into()),
            hostname: Some("web-1".into()),
            event: Some("signup".into()),
        };
        let written = serde_json::json!({ "filter": full });
        let keys: Vec<&str> = written["filter"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), AlertFilter::FIELDS.len());
        assert!(keys.iter().all(|k| AlertFilter::FIELDS.contains(k)));
        assert_eq!(serde_json::from_value::<Body>(written).unwrap().filter, full);

        let typo = serde_json::from_str::<Body>(r#"{"filter": {"services": "checkout"}}"#).unwrap_err();
        assert!(typo.to_string().contains("unknown field `services`"), "{typo}");
        // Stored rules are read as they are.
        let stored: AlertFilter = serde_json::from_str(r#"{"service": "a", "later": 1}"#).unwrap();
        assert_eq!(stored.service.as_deref(), Some("a"));
    }
}
