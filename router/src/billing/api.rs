//! The billing endpoints (docs/API.md, "Billing"): status, subscribe, cancel, history, the
//! payment method, and the provider's webhook. Reads come from the cached meta view (history
//! from meta itself); every change is a meta command. Changes are the owner's; with no provider
//! configured they answer 503 `billing_not_configured` while the reads still answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, RawQuery, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use sextant_model::meta::{MetaCommand, MetaQuery};
use sextant_model::subscription::{status_view, BillingAccount, PaymentStatus};
use sextant_model::usage::{month_of_millis, month_start_millis, next_month, resolve_limits};
use sextant_model::OrgId;

use super::lifecycle::{self, provider_unavailable};
use super::{idempotency_key, webhook, BillingError, CheckoutRequest, Interval, PlanPrice, SharedProvider};
use crate::cluster::MetaCache;
use crate::http::error::{expect_done, ApiError};
use crate::http::listing::{Listed, Page};
use crate::identity::account::time_json;
use crate::identity::auth::Session;
use crate::identity::usage::GB;
use crate::AppState;

/// Largest provider webhook body read (Stripe's events are a few KiB).
pub const MAX_WEBHOOK_BODY: usize = 256 * 1024;
/// Largest `POST /billing/subscribe` body.
const MAX_SUBSCRIBE_BODY: usize = 4 * 1024;

/// The billing endpoints, for the JWT part of the route table (the webhook is authenticated
/// by its signature instead, with a body limit of its own).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/billing/status", get(status))
        .route("/billing/subscribe", post(subscribe))
        .route("/billing/cancel", post(cancel))
        .route("/billing/history", get(history))
        .route("/billing/payment-method", get(payment_method).delete(delete_payment_method))
        .merge(
            Router::new()
                .route("/billing/provider/webhook", post(provider_webhook))
                .layer(DefaultBodyLimit::max(MAX_WEBHOOK_BODY)),
        )
}

fn provider(app: &AppState) -> Result<&SharedProvider, ApiError> {
    app.billing.provider.as_ref().ok_or(ApiError::BillingNotConfigured)
}

/// A change of the org's subscription: its owner only, and not for an org of a Tenant
/// resource (its plan is the resource's).
fn require_owner_of_unmanaged(session: &Session, cache: &MetaCache) -> Result<(), ApiError> {
    session.require_owner()?;
    if cache.orgs.get(&session.claims.org).is_some_and(|o| o.managed_by.is_some()) {
        return Err(ApiError::Conflict(
            "managed_by_resource",
            "this organization's plan is set by its Tenant resource; change that resource instead",
        ));
    }
    Ok(())
}

/// The limits of the plan in force (with the org's `Quota` overrides, as usage reports them).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LimitsJson {
    /// `null`: unlimited.
    pub monthly_gb: Option<f64>,
    pub monthly_bytes: Option<u64>,
    pub monthly_events: Option<u64>,
    pub retention_days: Option<u32>,
    pub features: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageJson {
    pub used_gb: f64,
    pub used_bytes: u64,
    pub events_used: u64,
    /// Percent of `limits.monthly_gb` used; `null` when unlimited.
    pub percentage: Option<f64>,
    pub period_start: String,
    pub period_end: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CardJson {
    pub brand: String,
    pub last4: String,
    pub exp_month: u32,
    pub exp_year: u32,
    pub auto_renew: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StatusResponse {
    pub plan: String,
    /// `trialing`, `active`, `canceled` (auto-renew off, plan kept to `current_period_end`) or
    /// `past_due` (a renewal failed; plan kept to `grace_until`).
    pub status: &'static str,
    pub auto_renew: bool,
    pub current_period_start: Option<String>,
    /// End of the paid period or of the trial; `null` on a plan not paid for.
    pub current_period_end: Option<String>,
    pub grace_until: Option<String>,
    /// `stripe`, `sandbox`, or `null` when none is configured.
    pub provider: Option<&'static str>,
    pub limits: LimitsJson,
    pub usage: UsageJson,
    pub payment_method: Option<CardJson>,
}

fn status_of(app: &AppState, cache: &MetaCache, org_id: OrgId) -> Result<StatusResponse, ApiError> {
    let now = app.clock.now_millis();
    let org = cache.orgs.get(&org_id).ok_or_else(|| ApiError::NotFound("no such organization".into()))?;
    let account = cache.billing.get(&org_id);
    let v = status_view(org, cache.trials.get(&org_id).copied(), account, now);
    let plan = cache.plans.get(&v.plan);
    let limits = resolve_limits(plan, &cache.quotas, org_id, None);
    let month = month_of_millis(now);
    let used = cache.org_usage.get(&(org_id, month)).copied().unwrap_or_default();
    let monthly_bytes = limits.bytes.map(|l| l.limit);
    Ok(StatusResponse {
        status: v.status.as_str(),
        auto_renew: v.auto_renew,
        current_period_start: v.current_period_start_ms.map(time_json),
        current_period_end: v.current_period_end_ms.map(time_json),
        grace_until: v.grace_until_ms.map(time_json),
        provider: app.billing.provider.as_ref().map(|p| p.name()),
        limits: LimitsJson {
            monthly_gb: monthly_bytes.map(|b| b as f64 / GB),
            monthly_bytes,
            monthly_events: limits.events.map(|l| l.limit),
            retention_days: plan.and_then(|p| p.retention_days),
            features: plan.map(|p| p.features.clone()).unwrap_or_default(),
        },
        usage: UsageJson {
            used_gb: used.bytes as f64 / GB,
            used_bytes: used.bytes,
            events_used: used.events,
            percentage: monthly_bytes.map(|l| if l == 0 { 100.0 } else { used.bytes as f64 * 100.0 / l as f64 }),
            period_start: time_json(month_start_millis(month)),
            period_end: time_json(month_start_millis(next_month(month))),
        },
        payment_method: account.and_then(card_json),
        plan: v.plan,
    })
}

fn card_json(a: &BillingAccount) -> Option<CardJson> {
    let c = a.card.as_ref()?;
    Some(CardJson {
        brand: c.brand.clone(),
        last4: c.last4.clone(),
        exp_month: c.exp_month,
        exp_year: c.exp_year,
        auto_renew: a.subscription.as_ref().is_some_and(|s| s.auto_renew && s.ended_at_ms.is_none()),
    })
}

/// `GET /billing/status`.
#[utoipa::path(
    get, path = "/billing/status", tag = "billing", summary = "The plan in force, its period, limits and usage",
    responses((status = 200, description = "The subscription (or trial) and this month's usage against the plan's limits.", body = StatusResponse), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn status(State(app): State<Arc<AppState>>, session: Session) -> Result<Json<StatusResponse>, ApiError> {
    let cache = app.meta()?;
    Ok(Json(status_of(&app, &cache, session.claims.org)?))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SubscribeRequest {
    pub plan: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SubscribeResponse {
    pub payment_url: String,
    pub checkout_id: String,
}

/// `POST /billing/subscribe {plan}`: a payment page for `plan`; the plan starts when the
/// provider reports the payment.
#[utoipa::path(
    post, path = "/billing/subscribe", tag = "billing", summary = "A payment page for a plan (owner only)",
    request_body(content = SubscribeRequest, example = json!({"plan": "growth"})),
    responses(
        (status = 200, description = "Send the customer to `payment_url`; the plan starts once the payment is reported.", body = SubscribeResponse),
        (status = 409, description = "`subscription_active`: an auto-renewing subscription exists; `managed_by_resource`: a Tenant resource sets the plan.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn subscribe(
    State(app): State<Arc<AppState>>,
    session: Session,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<SubscribeResponse>, ApiError> {
    let req: SubscribeRequest = crate::http::body::json(&headers, body, MAX_SUBSCRIBE_BODY)?;
    let cache = app.meta()?;
    require_owner_of_unmanaged(&session, &cache)?;
    let provider = provider(&app)?.clone();
    let org_id = session.claims.org;
    let plan = cache.plans.get(&req.plan).ok_or_else(|| {
        ApiError::BadRequest(
            "invalid_plan",
            format!("no plan named {:?} in the catalog", req.plan.chars().take(64).collect::<String>()),
        )
    })?;
    let price = plan.price.as_ref().filter(|p| p.amount_cents > 0).ok_or_else(|| {
        ApiError::BadRequest("plan_not_purchasable", format!("plan {} has no price to subscribe at", plan.name))
    })?;
    let now = app.clock.now_millis();
    let current = cache.billing.get(&org_id).and_then(|a| a.subscription.as_ref()).filter(|s| s.in_force(now));
    if current.is_some_and(|s| s.auto_renew) {
        return Err(ApiError::Conflict(
            "subscription_active",
            "the organization already has an auto-renewing subscription; cancel it first",
        ));
    }
    let customer_email = cache.members.get(&session.user.id).map(|m| m.email.clone());
    let base = app
        .config
        .dashboard_origins
        .first()
        .cloned()
        .or_else(|| app.config.billing.public_url.clone())
        .unwrap_or_default();
    let base = base.trim_end_matches('/');
    let attempt_id = uuid::Uuid::new_v4().to_string();
    let checkout_req = CheckoutRequest {
        org_id: org_id.to_string(),
        price: PlanPrice {
            plan: plan.name.clone(),
            amount_cents: i64::try_from(price.amount_cents).unwrap_or(i64::MAX),
            currency: price.currency.to_ascii_lowercase(),
            interval: if price.interval == "year" { Interval::Year } else { Interval::Month },
        },
        customer_id: cache.billing.get(&org_id).and_then(|a| a.customer_id.clone()),
        customer_email,
        success_url: format!("{base}/?billing=success"),
        cancel_url: format!("{base}/?billing=canceled"),
        attempt_id,
        metadata: BTreeMap::new(),
    };
    drop(cache);
    let checkout = provider.create_checkout(&checkout_req).await.map_err(|e| billing_error(&e))?;
    let command = MetaCommand::StartCheckout {
        org_id,
        checkout_id: checkout.checkout_id.clone(),
        plan: checkout_req.price.plan.clone(),
        provider: provider.name().to_owned(),
        now_ms: now,
    };
    expect_done(app.cluster.meta_change(&command).await?, "start checkout")?;
    Ok(Json(SubscribeResponse { payment_url: checkout.payment_url, checkout_id: checkout.checkout_id }))
}

/// A provider's refusal as the client sees it: a bad request stays ours (500), the rest is the
/// provider being unavailable.
fn billing_error(e: &BillingError) -> ApiError {
    match e {
        BillingError::Card { message, .. } => ApiError::BadRequest("card_declined", message.clone()),
        BillingError::InvalidRequest { .. } | BillingError::Authentication | BillingError::Decode(_) => {
            ApiError::Internal(format!("payment provider: {e}"))
        }
        _ => provider_unavailable(e),
    }
}

/// `POST /billing/cancel`: auto-renew off; the plan stays until `current_period_end`, then
/// the org moves to `free`. Cancelling again answers the same status.
#[utoipa::path(
    post, path = "/billing/cancel", tag = "billing", summary = "Turn auto-renew off (owner only)",
    responses(
        (status = 200, description = "The status: `canceled`, the plan kept until `current_period_end`.", body = StatusResponse),
        (status = 409, description = "`managed_by_resource`: a Tenant resource sets the plan.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn cancel(State(app): State<Arc<AppState>>, session: Session) -> Result<Json<StatusResponse>, ApiError> {
    let cache = app.meta()?;
    require_owner_of_unmanaged(&session, &cache)?;
    let provider = provider(&app)?.clone();
    let org_id = session.claims.org;
    let now = app.clock.now_millis();
    let sub = cache
        .billing
        .get(&org_id)
        .and_then(|a| a.subscription.clone())
        .filter(|s| s.in_force(now))
        .ok_or_else(|| ApiError::NotFound("the organization has no subscription to cancel".into()))?;
    drop(cache);
    if sub.auto_renew {
        // One operation per period: a retry reuses it, a cancel in a later period is new.
        let operation = idempotency_key("cancel", &[&org_id.to_string(), &sub.current_period_end_ms.to_string()]);
        match provider.cancel_at_period_end(&sub.id, &operation).await {
            // Unknown to the provider (a sandbox restarted): nothing there will renew it.
            Ok(_) | Err(BillingError::NotFound(_)) => {}
            Err(e) => return Err(billing_error(&e)),
        }
        let command = MetaCommand::CancelSubscription { org_id, now_ms: now };
        expect_done(app.cluster.meta_change(&command).await?, "cancel subscription")?;
    }
    Ok(Json(status_of(&app, &*app.meta()?, org_id)?))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PaymentJson {
    pub id: String,
    pub plan: String,
    pub amount_cents: i64,
    pub currency: String,
    /// `paid` or `failed`.
    pub status: &'static str,
    pub period_start: String,
    pub period_end: String,
    pub created_at: String,
}

/// `GET /billing/history`: payments, newest first, as a list (`limit`, `cursor`).
#[utoipa::path(
    get, path = "/billing/history", tag = "billing", summary = "Payments, newest first",
    params(crate::http::listing::Paging),
    responses((status = 200, description = "Paid and failed charges, newest first.", body = Listed<PaymentJson>), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn history(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(query): RawQuery,
) -> Result<Json<Listed<PaymentJson>>, ApiError> {
    let page = Page::from_query(query.as_deref())?;
    let account: Option<BillingAccount> =
        app.cluster.meta_read(&MetaQuery::BillingAccount { org_id: session.claims.org }).await?;
    let payments = account.map(|a| a.payments).unwrap_or_default();
    // Sort key: newest first, as a string that sorts ascending.
    let mut keyed: Vec<(String, PaymentJson)> = payments
        .into_iter()
        .map(|p| {
            let key = format!("{:020}:{}", i64::MAX.saturating_sub(p.created_at_ms.max(0)), p.id);
            let json = PaymentJson {
                status: match p.status {
                    PaymentStatus::Paid => "paid",
                    PaymentStatus::Failed => "failed",
                },
                period_start: time_json(p.period_start_ms),
                period_end: time_json(p.period_end_ms),
                created_at: time_json(p.created_at_ms),
                id: p.id,
                plan: p.plan,
                amount_cents: p.amount_cents,
                currency: p.currency,
            };
            (key, json)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Json(page.apply(keyed)))
}

/// `GET /billing/payment-method`: the card on file, or 404.
#[utoipa::path(
    get, path = "/billing/payment-method", tag = "billing", summary = "The linked card",
    responses((status = 200, description = "Brand, last four digits and expiry of the card renewals are charged to.", body = CardJson), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn payment_method(State(app): State<Arc<AppState>>, session: Session) -> Result<Json<CardJson>, ApiError> {
    let cache = app.meta()?;
    cache
        .billing
        .get(&session.claims.org)
        .and_then(card_json)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound("no payment method is linked".into()))
}

/// `DELETE /billing/payment-method`: unlinks the card at the provider and turns auto-renew
/// off; the plan stays until the end of the paid period.
#[utoipa::path(
    delete, path = "/billing/payment-method", tag = "billing", summary = "Unlink the card (owner only)",
    responses(
        (status = 200, description = "The card unlinked; auto-renew is off.", body = CardJson),
        (status = 409, description = "`managed_by_resource`: a Tenant resource sets the plan.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn delete_payment_method(
    State(app): State<Arc<AppState>>,
    session: Session,
) -> Result<Json<CardJson>, ApiError> {
    let cache = app.meta()?;
    require_owner_of_unmanaged(&session, &cache)?;
    let provider = provider(&app)?.clone();
    let org_id = session.claims.org;
    let card = cache
        .billing
        .get(&org_id)
        .and_then(|a| a.card.clone())
        .ok_or_else(|| ApiError::NotFound("no payment method is linked".into()))?;
    drop(cache);
    match provider.detach_payment_method(&card.id).await {
        Ok(_) | Err(BillingError::NotFound(_)) => {}
        Err(e) => return Err(billing_error(&e)),
    }
    let command = MetaCommand::RemovePaymentMethod { org_id, card_id: card.id.clone(), now_ms: app.clock.now_millis() };
    expect_done(app.cluster.meta_change(&command).await?, "remove payment method")?;
    Ok(Json(CardJson {
        brand: card.brand,
        last4: card.last4,
        exp_month: card.exp_month,
        exp_year: card.exp_year,
        auto_renew: false,
    }))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookAck {
    pub received: bool,
}

/// `POST /billing/provider/webhook`: a provider event, verified by its signature (forged,
/// stale or malformed: 400), applied once per event id.
#[utoipa::path(
    post, path = "/billing/provider/webhook", tag = "billing", summary = "Payment provider events (Stripe)",
    description = "Authenticated by the `Stripe-Signature` header, not a JWT. Each event id is applied once.",
    request_body(content = String, content_type = "application/json", description = "A Stripe event, as Stripe sends it."),
    responses(
        (status = 200, description = "Received (again, for an event already applied).", body = WebhookAck),
        (status = 409, description = "`billing_event_unmatched`: the event follows a checkout not known yet; the provider delivers it again.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(())
)]
pub async fn provider_webhook(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<WebhookAck>, ApiError> {
    let provider = provider(&app)?.clone();
    if body.len() > MAX_WEBHOOK_BODY {
        return Err(ApiError::PayloadTooLarge { limit: MAX_WEBHOOK_BODY });
    }
    let signature = headers.get(webhook::SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    let event = provider.parse_webhook(signature, &body).map_err(|e| {
        tracing::warn!(error = %e, "provider webhook refused");
        ApiError::BadRequest("invalid_signature", "the webhook's signature or body is not valid".into())
    })?;
    lifecycle::apply(&app, provider.as_ref(), event).await?;
    Ok(Json(WebhookAck { received: true }))
}
