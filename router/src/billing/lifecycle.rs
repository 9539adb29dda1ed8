//! What moves subscriptions along without a request: provider events (the sandbox's channel;
//! Stripe's arrive as webhooks, `api::webhook`) and the periodic lifecycle every router runs:
//! trials that ended fall back to `free`, auto-renewing subscriptions are charged for their next
//! period, and subscriptions no longer paid for end. Each step is a meta command conditional on
//! the state it was decided from, so several routers running it at once do each step once.

use std::sync::Arc;
use std::time::Duration;

use sextant_model::meta::{MetaCommand, MetaCommandResult, Refusal};
use sextant_model::subscription::{
    BillingAccount, Card, Due, Payment, PaymentStatus, ProviderChange, SubscriptionStatus,
};
use sextant_model::OrgId;

use super::{
    idempotency_key, BillingError, EventKind, Interval, Invoice, PaymentProvider, PlanPrice, ProviderEvent,
    RenewalRequest, Subscription,
};
use crate::cluster::MetaCache;
use crate::http::error::ApiError;
use crate::AppState;

/// How often each router runs the lifecycle unless configured otherwise.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(30);

fn ms(secs: i64) -> i64 {
    secs.saturating_mul(1000)
}

fn payment_of(invoice: &Invoice, plan: &str) -> Payment {
    Payment {
        id: invoice.id.clone(),
        plan: plan.to_owned(),
        amount_cents: if invoice.status == "paid" { invoice.amount_paid } else { invoice.amount_due },
        currency: invoice.currency.clone(),
        status: if invoice.status == "paid" { PaymentStatus::Paid } else { PaymentStatus::Failed },
        period_start_ms: ms(invoice.period_start),
        period_end_ms: ms(invoice.period_end),
        created_at_ms: ms(invoice.created),
    }
}

/// A provider's status word as billing reads it.
fn status_of(s: &Subscription) -> SubscriptionStatus {
    match s.status.as_str() {
        "past_due" | "unpaid" => SubscriptionStatus::PastDue,
        "canceled" | "incomplete_expired" => SubscriptionStatus::Canceled,
        _ if s.cancel_at_period_end => SubscriptionStatus::Canceled,
        _ => SubscriptionStatus::Active,
    }
}

fn period_of(s: &Subscription) -> Option<(i64, i64)> {
    Some((ms(s.current_period_start?), ms(s.current_period_end?)))
}

/// The card of `s`, read from the provider (its events only name it).
async fn card_of(provider: &dyn PaymentProvider, s: &Subscription) -> Result<Option<Card>, BillingError> {
    let Some(pm) = &s.default_payment_method else { return Ok(None) };
    let pm = provider.payment_method(pm).await?;
    Ok(Some(Card { id: pm.id, brand: pm.brand, last4: pm.last4, exp_month: pm.exp_month, exp_year: pm.exp_year }))
}

/// The meta change an event makes, with what it only references read from the provider.
/// `None`: an event billing does not act on.
pub async fn change_of(
    provider: &dyn PaymentProvider,
    kind: EventKind,
) -> Result<Option<ProviderChange>, BillingError> {
    let org = |o: Option<String>| o.and_then(|o| o.parse::<OrgId>().ok());
    Ok(Some(match kind {
        EventKind::CheckoutCompleted { checkout_id, org_id, customer_id, subscription_id, metadata } => {
            let Some(subscription_id) = subscription_id else { return Ok(None) };
            let s = provider.subscription(&subscription_id).await?;
            ProviderChange::CheckoutCompleted {
                org_id: org(org_id.or_else(|| metadata.get("org_id").cloned())),
                checkout_id,
                plan: metadata.get("plan").cloned().unwrap_or_default(),
                customer_id: customer_id.or_else(|| s.customer_id.clone()),
                subscription_id,
                period: period_of(&s),
                auto_renew: !s.cancel_at_period_end,
                card: card_of(provider, &s).await?,
            }
        }
        EventKind::CheckoutExpired { checkout_id, org_id, metadata } => ProviderChange::CheckoutExpired {
            org_id: org(org_id.or_else(|| metadata.get("org_id").cloned())),
            checkout_id,
        },
        EventKind::InvoicePaid(i) | EventKind::InvoicePaymentFailed(i) => ProviderChange::Invoice {
            subscription_id: i.subscription_id.clone(),
            customer_id: i.customer_id.clone(),
            payment: payment_of(&i, ""),
        },
        EventKind::SubscriptionUpdated(s) => ProviderChange::SubscriptionUpdated {
            subscription_id: s.id.clone(),
            status: status_of(&s),
            auto_renew: !s.cancel_at_period_end && status_of(&s) != SubscriptionStatus::Canceled,
            period: period_of(&s),
            card: card_of(provider, &s).await?,
        },
        EventKind::SubscriptionDeleted(s) => ProviderChange::SubscriptionDeleted { subscription_id: s.id },
        EventKind::Other { .. } => return Ok(None),
    }))
}

/// Applies one provider event through meta. An event about nothing meta knows yet (it came
/// before the checkout it follows) is refused with 409, so the provider delivers it again.
pub async fn apply(app: &AppState, provider: &dyn PaymentProvider, event: ProviderEvent) -> Result<(), ApiError> {
    let change = change_of(provider, event.kind).await.map_err(|e| provider_unavailable(&e))?;
    let Some(change) = change else { return Ok(()) };
    let command = MetaCommand::ApplyProviderEvent {
        event_id: event.id,
        created_ms: ms(event.created),
        provider: provider.name().to_owned(),
        change,
        now_ms: app.clock.now_millis(),
    };
    match app.cluster.meta_change(&command).await? {
        MetaCommandResult::Done => Ok(()),
        MetaCommandResult::Refused(Refusal::NotFound) => Err(ApiError::Conflict(
            "billing_event_unmatched",
            "the event concerns no subscription or checkout known yet; deliver it again later",
        )),
        other => Err(ApiError::Internal(format!("unexpected meta answer to a provider event: {other:?}"))),
    }
}

/// A provider call that failed: logged here, answered 503 without its detail.
pub fn provider_unavailable(e: &BillingError) -> ApiError {
    tracing::warn!(error = %e, "payment provider call failed");
    ApiError::Unavailable("the payment provider did not answer; retry".into())
}

/// The charge for the period after `account`'s current one: its plan's catalog price, the
/// same length as the period paid.
fn renewal_request(cache: &MetaCache, account: &BillingAccount, period_start_ms: i64) -> Option<RenewalRequest> {
    let s = account.subscription.as_ref()?;
    let price = cache.plans.get(&s.plan)?.price.as_ref()?;
    let length = (s.current_period_end_ms - s.current_period_start_ms).max(86_400_000);
    let org = account.org_id.to_string();
    let start_secs = period_start_ms.div_euclid(1000);
    Some(RenewalRequest {
        org_id: org.clone(),
        subscription_id: s.id.clone(),
        customer_id: account.customer_id.clone(),
        card: account.card.as_ref().map(|c| (c.id.clone(), c.exp_month, c.exp_year)),
        price: PlanPrice {
            plan: s.plan.clone(),
            amount_cents: i64::try_from(price.amount_cents).unwrap_or(i64::MAX),
            currency: price.currency.clone(),
            interval: if price.interval == "year" { Interval::Year } else { Interval::Month },
        },
        period_start: start_secs,
        period_end: (period_start_ms.saturating_add(length)).div_euclid(1000),
        idempotency_key: idempotency_key("renewal", &[&org, &s.id, &start_secs.to_string()]),
    })
}

/// One pass of the lifecycle at the clock's time. Returns the number of meta commands sent.
pub async fn run_once(app: &AppState) -> usize {
    let Some(cache) = app.cluster.meta_cache() else { return 0 };
    let now = app.clock.now_millis();
    let mut commands = Vec::new();
    for (org, end) in &cache.trials {
        if now >= *end {
            commands.push(MetaCommand::EndTrial { org_id: *org, ends_at_ms: *end, now_ms: now });
        }
    }
    for account in cache.billing.values() {
        let Some(s) = &account.subscription else { continue };
        match s.due(now) {
            None => {}
            Some(Due::End { period_end_ms }) => {
                commands.push(MetaCommand::EndSubscription { org_id: account.org_id, period_end_ms, now_ms: now });
            }
            Some(Due::Renew { period_start_ms }) => {
                let Some(provider) = app.billing.provider.as_ref() else { continue };
                let Some(req) = renewal_request(&cache, account, period_start_ms) else {
                    tracing::warn!(org = %account.org_id, plan = %s.plan, "the plan has no price to renew at");
                    continue;
                };
                let invoice = match provider.charge_renewal(&req).await {
                    Ok(invoice) => invoice,
                    Err(BillingError::Unsupported(_)) => continue,
                    // A declined card is a failed payment of this period.
                    Err(BillingError::Card { .. }) => Invoice {
                        id: format!("in_failed_{}", req.idempotency_key.rsplit('-').next().unwrap_or_default()),
                        customer_id: req.customer_id.clone(),
                        subscription_id: Some(req.subscription_id.clone()),
                        amount_paid: 0,
                        amount_due: req.price.amount_cents,
                        currency: req.price.currency.clone(),
                        status: "open".into(),
                        period_start: req.period_start,
                        period_end: req.period_end,
                        created: app.clock.now_secs(),
                    },
                    Err(e) => {
                        // Tried again at the next pass.
                        tracing::warn!(org = %account.org_id, error = %e, "renewal charge failed");
                        continue;
                    }
                };
                commands.push(MetaCommand::RecordRenewal {
                    org_id: account.org_id,
                    period_start_ms,
                    payment: payment_of(&invoice, &s.plan),
                    now_ms: now,
                });
            }
        }
    }
    drop(cache);
    let sent = commands.len();
    for c in commands {
        if let Err(e) = app.cluster.meta_change(&c).await {
            tracing::warn!(error = %e, "subscription lifecycle step failed; retried at the next pass");
        }
    }
    sent
}

/// The sandbox's events and the periodic lifecycle, in one task, until the router stops.
pub fn spawn(app: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::join!(consume_sandbox_events(&app), periodic(&app));
    })
}

async fn periodic(app: &AppState) {
    let period = app.config.billing.lifecycle_period.unwrap_or(DEFAULT_PERIOD);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        run_once(app).await;
    }
}

async fn consume_sandbox_events(app: &AppState) {
    let (Some(mut events), Some(sandbox)) = (app.billing.take_sandbox_events(), app.billing.sandbox().cloned()) else {
        return;
    };
    while let Some(event) = events.recv().await {
        // Meta may be between leaders: the event waits and is tried again.
        let mut backoff = Duration::from_millis(50);
        loop {
            match apply(app, sandbox.as_ref(), event.clone()).await {
                Ok(()) => break,
                Err(e @ (ApiError::Unavailable(_) | ApiError::StorageUnavailable(_))) => {
                    tracing::warn!(error = %e, event = %event.id, "sandbox billing event not applied yet");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    tracing::warn!(error = %e, event = %event.id, "sandbox billing event dropped");
                    break;
                }
            }
        }
    }
}
