//! Subscriptions (docs/API.md, "Billing"): what an org pays for, the period it has paid, and
//! the one answer to "which plan is this org on now" that usage, quotas and feature gates read.
//!
//! Meta holds one [`BillingAccount`] per org that ever started a checkout; every change to it
//! is a meta command, applied in log order, so routers and restarts agree. Times are Unix
//! milliseconds taken from the command (the proposing router's clock or the provider's event),
//! never from the applying node.

use serde::{Deserialize, Serialize};

use crate::meta::{Org, Plan};
use crate::OrgId;

/// The plan an org falls back to when its trial or its paid subscription ends.
pub const FREE_PLAN: &str = "free";
/// How long a subscription whose renewal charge failed keeps its plan (`past_due`) before it
/// is downgraded to [`FREE_PLAN`].
pub const GRACE_MS: i64 = 7 * 24 * 3600 * 1000;
/// Provider event ids remembered per org, to apply each once.
pub const MAX_SEEN_EVENTS: usize = 256;
/// Payments kept per org for the history.
pub const MAX_PAYMENTS: usize = 240;
/// Checkouts remembered per org (open, completed or expired).
pub const MAX_CHECKOUTS: usize = 20;
/// The plan feature that opens retention analytics (`GET /api/retention`).
pub const FEATURE_RETENTION: &str = "retention";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubscriptionStatus {
    /// The sign-up trial (never stored on a subscription; reported for an org in its trial).
    Trialing,
    /// Paid through the current period; renews at its end when auto-renew is on.
    Active,
    /// Auto-renew is off: the plan is kept until the end of the current period.
    Canceled,
    /// A renewal charge failed: the plan is kept until `grace_until_ms`.
    PastDue,
}

impl SubscriptionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionStatus::Trialing => "trialing",
            SubscriptionStatus::Active => "active",
            SubscriptionStatus::Canceled => "canceled",
            SubscriptionStatus::PastDue => "past_due",
        }
    }
}

/// The card renewals are charged to: never its number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Card {
    /// The provider's payment method id (to unlink it).
    pub id: String,
    pub brand: String,
    pub last4: String,
    pub exp_month: u32,
    pub exp_year: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    Paid,
    Failed,
}

/// One charge (or failed attempt) of a period, for the history. Keyed by `id`, the provider's
/// invoice id: a repeated report of the same invoice updates it, never adds a second one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub id: String,
    pub plan: String,
    pub amount_cents: i64,
    pub currency: String,
    pub status: PaymentStatus,
    pub period_start_ms: i64,
    pub period_end_ms: i64,
    pub created_at_ms: i64,
}

/// A paid plan and its period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// The provider's subscription id.
    pub id: String,
    pub plan: String,
    pub status: SubscriptionStatus,
    pub auto_renew: bool,
    pub current_period_start_ms: i64,
    pub current_period_end_ms: i64,
    /// Set while `past_due`: when the plan is withdrawn unless a payment arrives first.
    #[serde(default)]
    pub grace_until_ms: Option<i64>,
    /// Set once the subscription has ended and the org was moved to [`FREE_PLAN`].
    #[serde(default)]
    pub ended_at_ms: Option<i64>,
    /// Provider time (ms) of the newest subscription event applied: an older one arriving later
    /// changes nothing.
    #[serde(default)]
    pub provider_updated_ms: i64,
}

impl Subscription {
    /// Whether the subscription gives its plan at `now`. An auto-renewing one whose renewal has
    /// not been recorded yet keeps it for [`GRACE_MS`] after its period (the renewal is being
    /// charged, or the provider's event is on its way).
    pub fn in_force(&self, now_ms: i64) -> bool {
        if self.ended_at_ms.is_some() {
            return false;
        }
        match self.status {
            SubscriptionStatus::Active | SubscriptionStatus::Trialing => {
                let slack = if self.auto_renew { GRACE_MS } else { 0 };
                now_ms < self.current_period_end_ms.saturating_add(slack)
            }
            SubscriptionStatus::Canceled => now_ms < self.current_period_end_ms,
            SubscriptionStatus::PastDue => now_ms < self.grace_until_ms.unwrap_or(self.current_period_end_ms),
        }
    }

    /// What the lifecycle should do about this subscription at `now`.
    pub fn due(&self, now_ms: i64) -> Option<Due> {
        if self.ended_at_ms.is_some() {
            return None;
        }
        if !self.in_force(now_ms) {
            return Some(Due::End { period_end_ms: self.current_period_end_ms });
        }
        let renewing = matches!(self.status, SubscriptionStatus::Active | SubscriptionStatus::Trialing);
        (renewing && self.auto_renew && now_ms >= self.current_period_end_ms)
            .then_some(Due::Renew { period_start_ms: self.current_period_end_ms })
    }
}

/// A step of the periodic lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Charge the period that begins at `period_start_ms`.
    Renew { period_start_ms: i64 },
    /// The plan is no longer paid for: downgrade to [`FREE_PLAN`].
    End { period_end_ms: i64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckoutState {
    Open,
    Completed,
    Expired,
}

/// A payment page handed to the org (`POST /billing/subscribe`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckoutRecord {
    pub id: String,
    pub plan: String,
    pub state: CheckoutState,
    pub created_at_ms: i64,
}

/// Everything billing knows of one org.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BillingAccount {
    pub org_id: OrgId,
    /// `stripe` or `sandbox`: who holds the customer.
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub customer_id: Option<String>,
    #[serde(default)]
    pub subscription: Option<Subscription>,
    #[serde(default)]
    pub card: Option<Card>,
    /// Oldest first, at most [`MAX_CHECKOUTS`].
    #[serde(default)]
    pub checkouts: Vec<CheckoutRecord>,
    /// Oldest first, at most [`MAX_PAYMENTS`].
    #[serde(default)]
    pub payments: Vec<Payment>,
    /// Provider event ids applied, oldest first, at most [`MAX_SEEN_EVENTS`].
    #[serde(default)]
    pub seen_events: Vec<String>,
}

impl BillingAccount {
    pub fn new(org_id: OrgId) -> Self {
        BillingAccount {
            org_id,
            provider: String::new(),
            customer_id: None,
            subscription: None,
            card: None,
            checkouts: Vec::new(),
            payments: Vec::new(),
            seen_events: Vec::new(),
        }
    }

    /// The account without its history: what every router caches.
    pub fn summary(&self) -> BillingAccount {
        BillingAccount { checkouts: Vec::new(), payments: Vec::new(), seen_events: Vec::new(), ..self.clone() }
    }
}

/// A provider event, in provider-neutral terms, as meta applies it. The router reads it from a
/// verified webhook (Stripe) or the sandbox, and fills in what the event only references (the
/// card of a subscription).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ProviderChange {
    /// A checkout was paid: the org now has `subscription`.
    CheckoutCompleted {
        org_id: Option<OrgId>,
        checkout_id: String,
        plan: String,
        customer_id: Option<String>,
        subscription_id: String,
        /// The subscription's period and renewal, when the router could read them.
        period: Option<(i64, i64)>,
        auto_renew: bool,
        card: Option<Card>,
    },
    /// A checkout ended unpaid (declined or abandoned).
    CheckoutExpired { org_id: Option<OrgId>, checkout_id: String },
    /// An invoice of `subscription_id` was paid or its charge failed.
    Invoice { subscription_id: Option<String>, customer_id: Option<String>, payment: Payment },
    /// The subscription's state at the provider.
    SubscriptionUpdated {
        subscription_id: String,
        status: SubscriptionStatus,
        auto_renew: bool,
        period: Option<(i64, i64)>,
        card: Option<Card>,
    },
    /// The subscription ended at the provider.
    SubscriptionDeleted { subscription_id: String },
}

/// Which plan `org` is on at `now`: the plan of a subscription in force; else, after its
/// trial or a subscription has ended, [`FREE_PLAN`]; else the org's own plan (its trial plan, or
/// the one it was created with). An org of a Tenant resource is on the resource's plan.
pub fn effective_plan<'a>(
    org: &'a Org,
    trial_ends_at_ms: Option<i64>,
    account: Option<&'a BillingAccount>,
    now_ms: i64,
) -> &'a str {
    if org.managed_by.is_some() {
        return &org.plan;
    }
    let subscription = account.and_then(|a| a.subscription.as_ref());
    if let Some(s) = subscription.filter(|s| s.in_force(now_ms)) {
        return &s.plan;
    }
    let trial_over = trial_ends_at_ms.is_some_and(|end| now_ms >= end);
    if trial_over || subscription.is_some() {
        FREE_PLAN
    } else {
        &org.plan
    }
}

/// Whether `plan` includes `feature` (catalog data: [`Plan::features`]).
pub fn has_feature(plan: Option<&Plan>, feature: &str) -> bool {
    plan.is_some_and(|p| p.features.iter().any(|f| f == feature))
}

/// What `GET /billing/status` reports of the subscription (besides limits and usage).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusView {
    pub plan: String,
    pub status: SubscriptionStatus,
    pub auto_renew: bool,
    pub current_period_start_ms: Option<i64>,
    pub current_period_end_ms: Option<i64>,
    pub grace_until_ms: Option<i64>,
}

/// The status of `org` at `now`, consistent with [`effective_plan`].
pub fn status_view(
    org: &Org,
    trial_ends_at_ms: Option<i64>,
    account: Option<&BillingAccount>,
    now_ms: i64,
) -> StatusView {
    let plan = effective_plan(org, trial_ends_at_ms, account, now_ms).to_owned();
    let subscription = account.and_then(|a| a.subscription.as_ref()).filter(|s| s.in_force(now_ms));
    if let (Some(s), None) = (subscription, &org.managed_by) {
        return StatusView {
            plan,
            status: s.status,
            auto_renew: s.auto_renew,
            current_period_start_ms: Some(s.current_period_start_ms),
            current_period_end_ms: Some(s.current_period_end_ms),
            grace_until_ms: s.grace_until_ms,
        };
    }
    match trial_ends_at_ms.filter(|end| now_ms < *end && org.managed_by.is_none()) {
        Some(end) => StatusView {
            plan,
            status: SubscriptionStatus::Trialing,
            auto_renew: false,
            current_period_start_ms: Some(org.created_at_ms),
            current_period_end_ms: Some(end),
            grace_until_ms: None,
        },
        None => StatusView {
            plan,
            status: SubscriptionStatus::Active,
            auto_renew: false,
            current_period_start_ms: None,
            current_period_end_ms: None,
            grace_until_ms: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProjectId;

    const DAY: i64 = 86_400_000;

    fn org(plan: &str) -> Org {
        Org {
            id: OrgId::random(),
            name: "o".into(),
            plan: plan.into(),
            default_project: ProjectId::random(),
            created_at_ms: 0,
            managed_by: None,
            key: None,
            owner_email: None,
            suspended: false,
        }
    }

    fn account(org: &Org, status: SubscriptionStatus, auto_renew: bool, end: i64) -> BillingAccount {
        let mut a = BillingAccount::new(org.id);
        a.subscription = Some(Subscription {
            id: "sub_1".into(),
            plan: "growth".into(),
            status,
            auto_renew,
            current_period_start_ms: end - 30 * DAY,
            current_period_end_ms: end,
            grace_until_ms: (status == SubscriptionStatus::PastDue).then_some(end + GRACE_MS),
            ended_at_ms: None,
            provider_updated_ms: 0,
        });
        a
    }

    #[test]
    fn a_trial_gives_its_plan_until_it_ends_then_free() {
        let o = org("pro");
        assert_eq!(effective_plan(&o, Some(14 * DAY), None, 14 * DAY - 1), "pro");
        assert_eq!(effective_plan(&o, Some(14 * DAY), None, 14 * DAY), FREE_PLAN);
        let v = status_view(&o, Some(14 * DAY), None, DAY);
        assert_eq!((v.status, v.current_period_end_ms), (SubscriptionStatus::Trialing, Some(14 * DAY)));
        let v = status_view(&o, Some(14 * DAY), None, 15 * DAY);
        assert_eq!((v.plan.as_str(), v.status, v.current_period_end_ms), ("free", SubscriptionStatus::Active, None));
        assert_eq!(effective_plan(&org("enterprise"), None, None, i64::MAX), "enterprise", "no trial, no change");
    }

    #[test]
    fn a_subscription_outlasts_the_trial_and_ends_by_its_status() {
        let o = org("pro");
        let end = 40 * DAY;
        let active = account(&o, SubscriptionStatus::Active, true, end);
        assert_eq!(effective_plan(&o, Some(14 * DAY), Some(&active), 20 * DAY), "growth");
        assert_eq!(effective_plan(&o, Some(14 * DAY), Some(&active), end + GRACE_MS - 1), "growth", "renewing");
        assert_eq!(effective_plan(&o, Some(14 * DAY), Some(&active), end + GRACE_MS), FREE_PLAN);
        assert_eq!(active.subscription.as_ref().unwrap().due(end - 1), None);
        assert_eq!(active.subscription.as_ref().unwrap().due(end), Some(Due::Renew { period_start_ms: end }));

        let canceled = account(&o, SubscriptionStatus::Canceled, false, end);
        assert_eq!(effective_plan(&o, None, Some(&canceled), end - 1), "growth");
        assert_eq!(effective_plan(&o, None, Some(&canceled), end), FREE_PLAN, "no trial, but a subscription ended");
        assert_eq!(canceled.subscription.as_ref().unwrap().due(end), Some(Due::End { period_end_ms: end }));

        let past_due = account(&o, SubscriptionStatus::PastDue, true, end);
        assert_eq!(effective_plan(&o, None, Some(&past_due), end + GRACE_MS - 1), "growth");
        assert_eq!(past_due.subscription.as_ref().unwrap().due(end + 1), None, "in grace: nothing to charge");
        assert_eq!(effective_plan(&o, None, Some(&past_due), end + GRACE_MS), FREE_PLAN);
        let v = status_view(&o, None, Some(&past_due), end + 1);
        assert_eq!((v.status, v.grace_until_ms), (SubscriptionStatus::PastDue, Some(end + GRACE_MS)));
    }

    #[test]
    fn a_tenant_resource_decides_its_orgs_plan() {
        let mut o = org("business");
        o.managed_by = Some(crate::meta::ManagedBy {
            api_version: "sextant.dev/v1alpha1".into(),
            kind: "Tenant".into(),
            namespace: None,
            name: "t".into(),
            uid: "u".into(),
        });
        let a = account(&o, SubscriptionStatus::Canceled, false, DAY);
        assert_eq!(effective_plan(&o, Some(DAY), Some(&a), 100 * DAY), "business");
    }
}
