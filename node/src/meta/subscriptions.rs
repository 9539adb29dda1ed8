//! Subscriptions (docs/API.md, "Billing"): each org's billing account, changed by the owner
//! (checkout, cancel, unlinking the card), by provider events, and by the routers' periodic
//! lifecycle (renewal, end of trial, end of a subscription). Every command is keyed or
//! conditional on the state it was decided from, so a retry, a replayed event or a second
//! router taking the same step changes nothing.

use sextant_model::meta::{MetaCommandResult, Refusal};
use sextant_model::subscription::{
    BillingAccount, CheckoutRecord, CheckoutState, Payment, PaymentStatus, ProviderChange, Subscription,
    SubscriptionStatus, FREE_PLAN, GRACE_MS, MAX_CHECKOUTS, MAX_PAYMENTS, MAX_SEEN_EVENTS,
};
use sextant_model::OrgId;

use super::MetaState;
use MetaCommandResult::{Done, Refused};

/// Keeps the newest `max` of `v`.
fn bound<T>(v: &mut Vec<T>, max: usize) {
    if v.len() > max {
        v.drain(..v.len() - max);
    }
}

/// Adds `payment`, or updates the one with its id (a paid report wins over a failed one).
fn record_payment(account: &mut BillingAccount, mut payment: Payment) -> bool {
    if payment.plan.is_empty() {
        payment.plan = account.subscription.as_ref().map(|s| s.plan.clone()).unwrap_or_default();
    }
    if let Some(p) = account.payments.iter_mut().find(|p| p.id == payment.id) {
        if payment.status == PaymentStatus::Paid && p.status != PaymentStatus::Paid {
            *p = payment;
            return true;
        }
        return false;
    }
    account.payments.push(payment);
    bound(&mut account.payments, MAX_PAYMENTS);
    true
}

/// The status a live subscription has with auto-renew `on`.
fn running(auto_renew: bool) -> SubscriptionStatus {
    if auto_renew {
        SubscriptionStatus::Active
    } else {
        SubscriptionStatus::Canceled
    }
}

impl MetaState {
    fn account_of_subscription(&self, subscription_id: &str) -> Option<OrgId> {
        self.billing
            .accounts
            .values()
            .find(|a| a.subscription.as_ref().is_some_and(|s| s.id == subscription_id))
            .map(|a| a.org_id)
    }

    fn account_of_checkout(&self, checkout_id: &str) -> Option<OrgId> {
        self.billing.accounts.values().find(|a| a.checkouts.iter().any(|c| c.id == checkout_id)).map(|a| a.org_id)
    }

    /// The org an event is about: the one it names, else the one holding its checkout,
    /// subscription or customer.
    fn org_of_change(&self, change: &ProviderChange) -> Option<OrgId> {
        let known = |o: &Option<OrgId>| o.filter(|o| self.tenancy.orgs.contains_key(o));
        match change {
            ProviderChange::CheckoutCompleted { org_id, checkout_id, .. }
            | ProviderChange::CheckoutExpired { org_id, checkout_id } => {
                known(org_id).or_else(|| self.account_of_checkout(checkout_id))
            }
            ProviderChange::Invoice { subscription_id, customer_id, .. } => {
                subscription_id.as_deref().and_then(|s| self.account_of_subscription(s)).or_else(|| {
                    let customer = customer_id.as_deref()?;
                    self.billing
                        .accounts
                        .values()
                        .find(|a| a.customer_id.as_deref() == Some(customer))
                        .map(|a| a.org_id)
                })
            }
            ProviderChange::SubscriptionUpdated { subscription_id, .. }
            | ProviderChange::SubscriptionDeleted { subscription_id } => self.account_of_subscription(subscription_id),
        }
    }

    /// Moves the org to the free plan (not an org of a Tenant resource: its resource decides).
    fn downgrade(&mut self, org_id: OrgId) {
        if let Some(org) = self.tenancy.orgs.get_mut(&org_id) {
            if org.managed_by.is_none() {
                org.plan = FREE_PLAN.to_owned();
            }
        }
    }

    pub(super) fn start_checkout(
        &mut self,
        org_id: OrgId,
        checkout_id: String,
        plan: String,
        provider: String,
        now_ms: i64,
    ) -> MetaCommandResult {
        if !self.tenancy.orgs.contains_key(&org_id) {
            return Refused(Refusal::NotFound);
        }
        let account = self.billing.accounts.entry(org_id).or_insert_with(|| BillingAccount::new(org_id));
        if account.checkouts.iter().any(|c| c.id == checkout_id) {
            return Done;
        }
        account.provider = provider;
        account.checkouts.push(CheckoutRecord {
            id: checkout_id,
            plan,
            state: CheckoutState::Open,
            created_at_ms: now_ms,
        });
        bound(&mut account.checkouts, MAX_CHECKOUTS);
        Done
    }

    /// A provider event. Refused `NotFound` when it concerns no org known here (yet): an event
    /// that arrived before the checkout it follows, which the provider delivers again later.
    pub(super) fn apply_provider_event(
        &mut self,
        event_id: String,
        created_ms: i64,
        provider: String,
        change: ProviderChange,
        now_ms: i64,
    ) -> MetaCommandResult {
        let Some(org_id) = self.org_of_change(&change) else { return Refused(Refusal::NotFound) };
        let account = self.billing.accounts.entry(org_id).or_insert_with(|| BillingAccount::new(org_id));
        if account.seen_events.contains(&event_id) {
            return Done;
        }
        account.seen_events.push(event_id);
        bound(&mut account.seen_events, MAX_SEEN_EVENTS);
        let mut ended = false;
        match change {
            ProviderChange::CheckoutCompleted {
                checkout_id,
                plan,
                customer_id,
                subscription_id,
                period,
                auto_renew,
                card,
                ..
            } => {
                let plan = match account.checkouts.iter_mut().find(|c| c.id == checkout_id) {
                    Some(c) => {
                        c.state = CheckoutState::Completed;
                        c.plan.clone()
                    }
                    None => plan,
                };
                account.provider = provider;
                account.customer_id = customer_id.or(account.customer_id.take());
                if card.is_some() {
                    account.card = card;
                }
                let same = account.subscription.as_ref().is_some_and(|s| s.id == subscription_id);
                if !same {
                    let (start, end) = period.unwrap_or((created_ms, created_ms));
                    account.subscription = Some(Subscription {
                        id: subscription_id,
                        plan,
                        status: running(auto_renew),
                        auto_renew,
                        current_period_start_ms: start,
                        current_period_end_ms: end,
                        grace_until_ms: None,
                        ended_at_ms: None,
                        provider_updated_ms: created_ms,
                    });
                }
            }
            ProviderChange::CheckoutExpired { checkout_id, .. } => {
                if let Some(c) =
                    account.checkouts.iter_mut().find(|c| c.id == checkout_id && c.state == CheckoutState::Open)
                {
                    c.state = CheckoutState::Expired;
                }
            }
            ProviderChange::Invoice { subscription_id, payment, .. } => {
                let this = |s: &Subscription| subscription_id.as_deref().is_none_or(|id| id == s.id);
                let (status, start, end) = (payment.status, payment.period_start_ms, payment.period_end_ms);
                record_payment(account, payment);
                if let Some(s) = account.subscription.as_mut().filter(|s| this(s) && s.ended_at_ms.is_none()) {
                    match status {
                        PaymentStatus::Paid if end >= s.current_period_end_ms => {
                            // The period paid for; a paid renewal also settles a past-due one.
                            s.current_period_start_ms = start;
                            s.current_period_end_ms = end;
                            s.grace_until_ms = None;
                            s.status = running(s.auto_renew);
                        }
                        PaymentStatus::Failed
                            if start >= s.current_period_end_ms && s.status != SubscriptionStatus::PastDue =>
                        {
                            s.status = SubscriptionStatus::PastDue;
                            s.grace_until_ms = Some(created_ms.max(s.current_period_end_ms).saturating_add(GRACE_MS));
                        }
                        _ => {}
                    }
                }
            }
            ProviderChange::SubscriptionUpdated { subscription_id, status, auto_renew, period, card } => {
                if card.is_some() {
                    account.card = card;
                }
                if let Some(s) = account.subscription.as_mut().filter(|s| s.id == subscription_id) {
                    if created_ms >= s.provider_updated_ms && s.ended_at_ms.is_none() {
                        s.provider_updated_ms = created_ms;
                        s.auto_renew = auto_renew;
                        if let Some((start, end)) = period.filter(|(_, end)| *end >= s.current_period_end_ms) {
                            s.current_period_start_ms = start;
                            s.current_period_end_ms = end;
                        }
                        match status {
                            SubscriptionStatus::PastDue => {
                                if s.status != SubscriptionStatus::PastDue {
                                    s.grace_until_ms =
                                        Some(created_ms.max(s.current_period_end_ms).saturating_add(GRACE_MS));
                                }
                                s.status = SubscriptionStatus::PastDue;
                            }
                            SubscriptionStatus::Canceled if !auto_renew && s.status != SubscriptionStatus::PastDue => {
                                s.status = SubscriptionStatus::Canceled;
                            }
                            SubscriptionStatus::Canceled => {}
                            SubscriptionStatus::Active | SubscriptionStatus::Trialing => {
                                s.grace_until_ms = None;
                                s.status = running(auto_renew);
                            }
                        }
                    }
                }
            }
            ProviderChange::SubscriptionDeleted { subscription_id } => {
                if let Some(s) =
                    account.subscription.as_mut().filter(|s| s.id == subscription_id && s.ended_at_ms.is_none())
                {
                    s.ended_at_ms = Some(now_ms);
                    s.auto_renew = false;
                    s.status = SubscriptionStatus::Canceled;
                    ended = true;
                }
            }
        }
        if ended {
            self.downgrade(org_id);
        }
        Done
    }

    pub(super) fn cancel_subscription(&mut self, org_id: OrgId, now_ms: i64) -> MetaCommandResult {
        let live =
            self.billing.accounts.get_mut(&org_id).and_then(|a| a.subscription.as_mut()).filter(|s| s.in_force(now_ms));
        let Some(s) = live else { return Refused(Refusal::NotFound) };
        s.auto_renew = false;
        if s.status != SubscriptionStatus::PastDue {
            s.status = SubscriptionStatus::Canceled;
        }
        Done
    }

    pub(super) fn remove_payment_method(&mut self, org_id: OrgId, card_id: &str, now_ms: i64) -> MetaCommandResult {
        let Some(account) = self.billing.accounts.get_mut(&org_id) else { return Refused(Refusal::NotFound) };
        match &account.card {
            Some(c) if c.id == card_id => account.card = None,
            // Already unlinked (a retry).
            None => return Done,
            Some(_) => return Refused(Refusal::NotFound),
        }
        if let Some(s) = account.subscription.as_mut().filter(|s| s.in_force(now_ms)) {
            s.auto_renew = false;
            if s.status == SubscriptionStatus::Active {
                s.status = SubscriptionStatus::Canceled;
            }
        }
        Done
    }

    pub(super) fn record_renewal(
        &mut self,
        org_id: OrgId,
        period_start_ms: i64,
        payment: Payment,
        now_ms: i64,
    ) -> MetaCommandResult {
        let Some(account) = self.billing.accounts.get_mut(&org_id) else { return Refused(Refusal::NotFound) };
        let due = account.subscription.as_ref().is_some_and(|s| {
            s.ended_at_ms.is_none()
                && s.auto_renew
                && s.status == SubscriptionStatus::Active
                && s.current_period_end_ms == period_start_ms
        });
        if !due || account.payments.iter().any(|p| p.id == payment.id) {
            return Done;
        }
        let (status, start, end) = (payment.status, payment.period_start_ms, payment.period_end_ms);
        record_payment(account, payment);
        let s = account.subscription.as_mut().expect("checked above");
        match status {
            PaymentStatus::Paid => {
                s.current_period_start_ms = start;
                s.current_period_end_ms = end.max(start);
            }
            PaymentStatus::Failed => {
                s.status = SubscriptionStatus::PastDue;
                s.grace_until_ms = Some(now_ms.max(period_start_ms).saturating_add(GRACE_MS));
            }
        }
        Done
    }

    pub(super) fn end_trial(&mut self, org_id: OrgId, ends_at_ms: i64, now_ms: i64) -> MetaCommandResult {
        if self.tenancy.trials.get(&org_id) != Some(&ends_at_ms) || now_ms < ends_at_ms {
            return Done;
        }
        self.tenancy.trials.remove(&org_id);
        self.downgrade(org_id);
        Done
    }

    pub(super) fn end_subscription(&mut self, org_id: OrgId, period_end_ms: i64, now_ms: i64) -> MetaCommandResult {
        let over = self
            .billing
            .accounts
            .get_mut(&org_id)
            .and_then(|a| a.subscription.as_mut())
            .filter(|s| s.ended_at_ms.is_none() && s.current_period_end_ms == period_end_ms && !s.in_force(now_ms));
        let Some(s) = over else { return Done };
        s.ended_at_ms = Some(now_ms);
        s.auto_renew = false;
        s.status = SubscriptionStatus::Canceled;
        self.downgrade(org_id);
        Done
    }
}

#[cfg(test)]
mod tests {
    use sextant_model::subscription::{effective_plan, Card, Due};

    use crate::meta::testing::*;

    use super::*;

    const DAY: i64 = 86_400_000;

    fn card(id: &str) -> Card {
        Card { id: id.into(), brand: "visa".into(), last4: "4242".into(), exp_month: 12, exp_year: 2030 }
    }

    fn payment(id: &str, status: PaymentStatus, start: i64, end: i64) -> Payment {
        Payment {
            id: id.into(),
            plan: String::new(),
            amount_cents: 9_900,
            currency: "usd".into(),
            status,
            period_start_ms: start,
            period_end_ms: end,
            created_at_ms: start,
        }
    }

    fn event(s: &mut MetaState, id: &str, created: i64, change: ProviderChange) -> MetaCommandResult {
        let command = MetaCommand::ApplyProviderEvent {
            event_id: id.into(),
            created_ms: created,
            provider: "sandbox".into(),
            change,
            now_ms: created,
        };
        s.execute(through_the_log(&command))
    }

    /// An org that paid for `growth` at T0 for 30 days, auto-renewing with a card.
    fn subscribed() -> (MetaState, OrgId) {
        let (mut s, owner) = state_with_user();
        let org = owner.org_id;
        let start = MetaCommand::StartCheckout {
            org_id: org,
            checkout_id: "cs_1".into(),
            plan: "growth".into(),
            provider: "sandbox".into(),
            now_ms: T0,
        };
        assert_eq!(s.execute(through_the_log(&start)), Done);
        let completed = ProviderChange::CheckoutCompleted {
            org_id: Some(org),
            checkout_id: "cs_1".into(),
            plan: "ignored: the checkout's plan wins".into(),
            customer_id: Some("cus_1".into()),
            subscription_id: "sub_1".into(),
            period: Some((T0, T0 + 30 * DAY)),
            auto_renew: true,
            card: Some(card("pm_1")),
        };
        assert_eq!(event(&mut s, "evt_1", T0, completed), Done);
        let paid = ProviderChange::Invoice {
            subscription_id: Some("sub_1".into()),
            customer_id: Some("cus_1".into()),
            payment: payment("in_1", PaymentStatus::Paid, T0, T0 + 30 * DAY),
        };
        assert_eq!(event(&mut s, "evt_2", T0, paid), Done);
        (s, org)
    }

    fn account(s: &MetaState, org: OrgId) -> BillingAccount {
        read::<Option<BillingAccount>>(s, &MetaQuery::BillingAccount { org_id: org }).unwrap()
    }

    fn plan_at(s: &MetaState, org: OrgId, now: i64) -> String {
        let v = view(s);
        let o = v.orgs.iter().find(|o| o.id == org).unwrap();
        let trial = v.trials.iter().find(|t| t.org_id == org).map(|t| t.ends_at_ms);
        effective_plan(o, trial, v.billing.iter().find(|a| a.org_id == org), now).to_owned()
    }

    #[test]
    fn a_completed_checkout_makes_an_active_subscription_once() {
        let (mut s, org) = subscribed();
        let a = account(&s, org);
        let sub = a.subscription.clone().unwrap();
        assert_eq!((sub.plan.as_str(), sub.status, sub.auto_renew), ("growth", SubscriptionStatus::Active, true));
        assert_eq!(a.checkouts[0].state, CheckoutState::Completed);
        assert_eq!(a.card, Some(card("pm_1")));
        assert_eq!(a.payments.len(), 1);
        assert_eq!(a.payments[0].plan, "growth", "a payment names the plan it paid for");
        assert_eq!(plan_at(&s, org, T0 + DAY), "growth");
        // The view carries no history.
        let v = view(&s);
        assert!(v.billing[0].payments.is_empty() && v.billing[0].seen_events.is_empty());

        // The same event again, and the same invoice under another event id: nothing changes.
        let again = ProviderChange::Invoice {
            subscription_id: Some("sub_1".into()),
            customer_id: None,
            payment: payment("in_1", PaymentStatus::Paid, T0, T0 + 30 * DAY),
        };
        assert_eq!(event(&mut s, "evt_2", T0, again.clone()), Done);
        assert_eq!(event(&mut s, "evt_2b", T0, again), Done);
        assert_eq!(account(&s, org).payments.len(), 1);
        assert_eq!(account(&s, org).subscription, Some(sub));
    }

    #[test]
    fn an_event_for_an_unknown_subscription_is_refused_so_the_provider_retries_it() {
        let (mut s, _) = subscribed();
        let orphan = ProviderChange::Invoice {
            subscription_id: Some("sub_other".into()),
            customer_id: Some("cus_other".into()),
            payment: payment("in_9", PaymentStatus::Paid, T0, T0 + DAY),
        };
        assert_eq!(event(&mut s, "evt_9", T0, orphan), Refused(Refusal::NotFound));
    }

    #[test]
    fn an_older_subscription_event_arriving_late_changes_nothing() {
        let (mut s, org) = subscribed();
        let update = |auto_renew, status| ProviderChange::SubscriptionUpdated {
            subscription_id: "sub_1".into(),
            status,
            auto_renew,
            period: Some((T0, T0 + 30 * DAY)),
            card: None,
        };
        assert_eq!(event(&mut s, "evt_new", T0 + 20, update(false, SubscriptionStatus::Canceled)), Done);
        assert_eq!(event(&mut s, "evt_old", T0 + 10, update(true, SubscriptionStatus::Active)), Done);
        let sub = account(&s, org).subscription.unwrap();
        assert_eq!((sub.auto_renew, sub.status), (false, SubscriptionStatus::Canceled));
    }

    #[test]
    fn cancel_keeps_the_plan_to_the_period_end_then_free() {
        let (mut s, org) = subscribed();
        assert_eq!(s.execute(MetaCommand::CancelSubscription { org_id: org, now_ms: T0 + DAY }), Done);
        let sub = account(&s, org).subscription.unwrap();
        assert_eq!((sub.status, sub.auto_renew), (SubscriptionStatus::Canceled, false));
        let end = T0 + 30 * DAY;
        assert_eq!(plan_at(&s, org, end - 1), "growth");
        assert_eq!(sub.due(end), Some(Due::End { period_end_ms: end }));
        // Too early, or for another period: nothing.
        assert_eq!(s.execute(MetaCommand::EndSubscription { org_id: org, period_end_ms: end, now_ms: end - 1 }), Done);
        assert_eq!(s.execute(MetaCommand::EndSubscription { org_id: org, period_end_ms: T0, now_ms: end }), Done);
        assert_eq!(account(&s, org).subscription.unwrap().ended_at_ms, None);
        for _ in 0..2 {
            assert_eq!(s.execute(MetaCommand::EndSubscription { org_id: org, period_end_ms: end, now_ms: end }), Done);
        }
        assert_eq!(account(&s, org).subscription.unwrap().ended_at_ms, Some(end));
        assert_eq!(s.tenancy.orgs[&org].plan, "free");
        assert_eq!(plan_at(&s, org, end), "free");
        assert_eq!(
            s.execute(MetaCommand::CancelSubscription { org_id: org, now_ms: end }),
            Refused(Refusal::NotFound),
            "nothing left to cancel"
        );
    }

    #[test]
    fn a_renewal_is_recorded_once_per_period_and_a_failure_gives_a_grace_period() {
        let (mut s, org) = subscribed();
        let end = T0 + 30 * DAY;
        let renew = |id: &str, status| MetaCommand::RecordRenewal {
            org_id: org,
            period_start_ms: end,
            payment: payment(id, status, end, end + 30 * DAY),
            now_ms: end,
        };
        // Two routers charge the same period: one payment, one period forward.
        assert_eq!(s.execute(through_the_log(&renew("in_r1", PaymentStatus::Paid))), Done);
        assert_eq!(s.execute(renew("in_r1", PaymentStatus::Paid)), Done);
        let a = account(&s, org);
        assert_eq!(a.payments.len(), 2);
        assert_eq!(a.subscription.as_ref().unwrap().current_period_end_ms, end + 30 * DAY);
        // The old period's renewal arriving late is a no-op.
        assert_eq!(s.execute(renew("in_r2", PaymentStatus::Failed)), Done);
        assert_eq!(account(&s, org).payments.len(), 2);

        // The next renewal fails: past due for GRACE_MS, then free.
        let end2 = end + 30 * DAY;
        let failed = MetaCommand::RecordRenewal {
            org_id: org,
            period_start_ms: end2,
            payment: payment("in_r3", PaymentStatus::Failed, end2, end2 + 30 * DAY),
            now_ms: end2,
        };
        assert_eq!(s.execute(failed), Done);
        let sub = account(&s, org).subscription.unwrap();
        assert_eq!((sub.status, sub.grace_until_ms), (SubscriptionStatus::PastDue, Some(end2 + GRACE_MS)));
        assert_eq!(sub.due(end2 + 1), None);
        assert_eq!(plan_at(&s, org, end2 + GRACE_MS - 1), "growth");
        assert_eq!(sub.due(end2 + GRACE_MS), Some(Due::End { period_end_ms: end2 }));
        let end_it = MetaCommand::EndSubscription { org_id: org, period_end_ms: end2, now_ms: end2 + GRACE_MS };
        assert_eq!(s.execute(end_it), Done);
        assert_eq!(plan_at(&s, org, end2 + GRACE_MS), "free");
        assert_eq!(account(&s, org).payments.iter().filter(|p| p.status == PaymentStatus::Failed).count(), 1);
    }

    #[test]
    fn unlinking_the_card_turns_auto_renew_off() {
        let (mut s, org) = subscribed();
        let remove = |id: &str| MetaCommand::RemovePaymentMethod { org_id: org, card_id: id.into(), now_ms: T0 + DAY };
        assert_eq!(s.execute(remove("pm_other")), Refused(Refusal::NotFound));
        assert_eq!(s.execute(remove("pm_1")), Done);
        assert_eq!(s.execute(remove("pm_1")), Done, "a retry");
        let a = account(&s, org);
        assert_eq!(a.card, None);
        let sub = a.subscription.unwrap();
        assert_eq!((sub.auto_renew, sub.status), (false, SubscriptionStatus::Canceled));
    }

    #[test]
    fn the_trial_ends_into_free_unless_a_subscription_is_in_force() {
        let (mut s, owner) = state_with_user();
        let org = owner.org_id;
        let end = T0 + 1; // state_with_user's trial
        assert_eq!(plan_at(&s, org, end - 1), "pro");
        assert_eq!(plan_at(&s, org, end), "free", "at once, before the lifecycle runs");
        assert_eq!(s.execute(MetaCommand::EndTrial { org_id: org, ends_at_ms: end, now_ms: end - 1 }), Done);
        assert!(s.tenancy.trials.contains_key(&org), "not over yet");
        assert_eq!(s.execute(MetaCommand::EndTrial { org_id: org, ends_at_ms: end, now_ms: end }), Done);
        assert!(!s.tenancy.trials.contains_key(&org));
        assert_eq!(s.tenancy.orgs[&org].plan, "free");
        assert_eq!(plan_at(&s, org, end), "free");

        let (mut s, org) = subscribed();
        assert_eq!(s.execute(MetaCommand::EndTrial { org_id: org, ends_at_ms: T0 + 1, now_ms: T0 + DAY }), Done);
        assert_eq!(plan_at(&s, org, T0 + DAY), "growth");
    }

    #[test]
    fn a_deleted_subscription_downgrades_and_the_account_survives_a_snapshot() {
        let (mut s, org) = subscribed();
        let before = account(&s, org);
        let mut restored = MetaState::default();
        let mut buf = Vec::new();
        s.snapshot_writer()(&mut buf).unwrap();
        restored.restore(&mut buf.as_slice()).unwrap();
        assert_eq!(account(&restored, org), before);

        let deleted = ProviderChange::SubscriptionDeleted { subscription_id: "sub_1".into() };
        assert_eq!(event(&mut s, "evt_del", T0 + 30 * DAY, deleted), Done);
        assert_eq!(plan_at(&s, org, T0 + 30 * DAY), "free");
        assert_eq!(s.tenancy.orgs[&org].plan, "free");
    }

    #[test]
    fn a_failed_invoice_event_marks_past_due_and_a_later_payment_settles_it() {
        let (mut s, org) = subscribed();
        let end = T0 + 30 * DAY;
        let failed = ProviderChange::Invoice {
            subscription_id: Some("sub_1".into()),
            customer_id: None,
            payment: payment("in_f", PaymentStatus::Failed, end, end + 30 * DAY),
        };
        assert_eq!(event(&mut s, "evt_f", end + 60_000, failed), Done);
        let sub = account(&s, org).subscription.unwrap();
        assert_eq!((sub.status, sub.grace_until_ms), (SubscriptionStatus::PastDue, Some(end + 60_000 + GRACE_MS)));
        let paid = ProviderChange::Invoice {
            subscription_id: Some("sub_1".into()),
            customer_id: None,
            payment: payment("in_f", PaymentStatus::Paid, end, end + 30 * DAY),
        };
        assert_eq!(event(&mut s, "evt_p", end + DAY, paid), Done);
        let a = account(&s, org);
        let sub = a.subscription.unwrap();
        assert_eq!((sub.status, sub.current_period_end_ms), (SubscriptionStatus::Active, end + 30 * DAY));
        assert_eq!(a.payments.iter().find(|p| p.id == "in_f").unwrap().status, PaymentStatus::Paid);
    }
}
