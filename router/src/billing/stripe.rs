//! The Stripe adapter: Stripe's HTTP API (<https://docs.stripe.com/api>) over HTTPS.
//!
//! Requests are form-encoded with Stripe's bracket syntax (`line_items[0][price_data][currency]`),
//! authenticated with `Authorization: Bearer sk_…`, and pinned to one `Stripe-Version` so a
//! change of the account's default version cannot change the shapes read here. Every `POST`
//! carries an `Idempotency-Key` derived from the operation and its objects, so a retry (ours,
//! or the caller's after a crash) is answered with the first result rather than done twice.
//! 409 (the same key in flight), 429, 5xx and network failures are retried with exponential backoff, honouring
//! `Retry-After` and `Stripe-Should-Retry`; other errors map `{"error": {type, code, message}}`
//! onto [`BillingError`].

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sextant_model::Clock;

use super::{
    idempotency_key, webhook, BillingError, Checkout, CheckoutRequest, Invoice, PaymentMethod, PaymentProvider,
    ProviderEvent, Secret, Subscription, WebhookError,
};

/// The API version the shapes below are read in. 2024-06-20 still carries
/// `current_period_*` on the subscription and `subscription` on the invoice.
pub const STRIPE_VERSION: &str = "2024-06-20";

#[derive(Clone, Debug)]
pub struct StripeConfig {
    /// `https://api.stripe.com` in production; a local fake in tests.
    pub api_base: String,
    pub secret_key: Secret,
    pub webhook_secret: Secret,
    /// Per attempt, connect to last byte.
    pub timeout: Duration,
    /// Attempts after the first, on 429, 5xx and network errors.
    pub max_retries: u32,
    /// First backoff; doubles per retry, capped at `max_backoff`. `Retry-After` wins when the
    /// server sends one (capped at `max_backoff` too).
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub webhook_tolerance: Duration,
    /// The product name shown on the payment page: "{product_name} {plan}".
    pub product_name: String,
}

impl StripeConfig {
    pub fn new(secret_key: Secret, webhook_secret: Secret) -> Self {
        StripeConfig {
            api_base: "https://api.stripe.com".into(),
            secret_key,
            webhook_secret,
            timeout: Duration::from_secs(30),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            webhook_tolerance: webhook::DEFAULT_TOLERANCE,
            product_name: "Sextant".into(),
        }
    }
}

pub struct StripeProvider {
    config: StripeConfig,
    http: reqwest::Client,
    clock: Clock,
}

impl std::fmt::Debug for StripeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeProvider").field("config", &self.config).finish_non_exhaustive()
    }
}

impl StripeProvider {
    pub fn new(config: StripeConfig, clock: Clock) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("sextant/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(StripeProvider { config, http, clock })
    }

    /// One API call with its retries. `form` is the body of a `POST`, or the query of a `GET`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        form: &[(String, String)],
        idempotency: Option<&str>,
    ) -> Result<T, BillingError> {
        let url = format!("{}{}", self.config.api_base.trim_end_matches('/'), path);
        let encoded = serde_urlencoded::to_string(form).map_err(|e| BillingError::Decode(e.to_string()))?;
        let mut attempt = 0u32;
        loop {
            let mut req = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(self.config.secret_key.expose())
                .header("Stripe-Version", STRIPE_VERSION);
            if method == Method::GET {
                if !encoded.is_empty() {
                    req = req.query(form);
                }
            } else {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(encoded.clone());
            }
            if let Some(key) = idempotency {
                req = req.header("Idempotency-Key", key);
            }
            let (retry, err, retry_after) = match req.send().await {
                Err(e) => {
                    // Network errors and timeouts: the request may or may not have been done;
                    // the idempotency key makes the retry safe.
                    (true, BillingError::Transport(without_url(&e)), None)
                }
                Ok(resp) => {
                    let status = resp.status();
                    let should_retry =
                        resp.headers().get("stripe-should-retry").and_then(|v| v.to_str().ok()).map(|v| v == "true");
                    let retry_after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let body = resp.bytes().await.map_err(|e| BillingError::Transport(without_url(&e)));
                    if status.is_success() {
                        let body = body?;
                        return serde_json::from_slice(&body).map_err(|e| BillingError::Decode(format!("{path}: {e}")));
                    }
                    let err = api_error(status, body.as_deref().unwrap_or_default());
                    // 409: another request with this idempotency key is still in flight
                    // (`idempotency_key_in_use`); its answer will be ours once it finishes.
                    let retry = should_retry.unwrap_or(
                        status == StatusCode::TOO_MANY_REQUESTS
                            || status == StatusCode::CONFLICT
                            || status.is_server_error(),
                    );
                    (retry, err, retry_after)
                }
            };
            if !retry || attempt >= self.config.max_retries {
                return Err(err);
            }
            let backoff =
                retry_after.unwrap_or_else(|| self.config.initial_backoff.saturating_mul(1 << attempt.min(16)));
            let backoff = backoff.min(self.config.max_backoff);
            tracing::warn!(path, attempt, backoff_ms = backoff.as_millis() as u64, error = %err, "retrying Stripe call");
            tokio::time::sleep(backoff).await;
            attempt += 1;
        }
    }

    async fn checkout(&self, req: &CheckoutRequest) -> Result<Checkout, BillingError> {
        let form = checkout_form(req, &self.config.product_name);
        let key = idempotency_key("checkout", &[&req.org_id, &req.price.plan, &req.attempt_id]);
        let s: StripeCheckoutSession = self.call(Method::POST, "/v1/checkout/sessions", &form, Some(&key)).await?;
        let payment_url = s.url.ok_or_else(|| BillingError::Decode("checkout session without url".into()))?;
        Ok(Checkout { payment_url, checkout_id: s.id })
    }

    async fn cancel(&self, subscription_id: &str, operation_id: &str) -> Result<Subscription, BillingError> {
        let form = vec![("cancel_at_period_end".to_owned(), "true".to_owned())];
        let key = idempotency_key("cancel_at_period_end", &[subscription_id, operation_id]);
        let path = format!("/v1/subscriptions/{}", path_segment(subscription_id)?);
        let s: StripeSubscription = self.call(Method::POST, &path, &form, Some(&key)).await?;
        Ok(s.into())
    }

    async fn get_subscription(&self, subscription_id: &str) -> Result<Subscription, BillingError> {
        let path = format!("/v1/subscriptions/{}", path_segment(subscription_id)?);
        let s: StripeSubscription = self.call(Method::GET, &path, &[], None).await?;
        Ok(s.into())
    }

    async fn list_invoices(&self, customer_id: &str) -> Result<Vec<Invoice>, BillingError> {
        // Newest first, following `has_more`; a bound on pages keeps a runaway list finite.
        let mut out = Vec::new();
        let mut starting_after: Option<String> = None;
        for _ in 0..50 {
            let mut q = vec![("customer".to_owned(), customer_id.to_owned()), ("limit".to_owned(), "100".to_owned())];
            if let Some(after) = &starting_after {
                q.push(("starting_after".to_owned(), after.clone()));
            }
            let page: StripeList<StripeInvoice> = self.call(Method::GET, "/v1/invoices", &q, None).await?;
            starting_after = page.data.last().map(|i| i.id.clone());
            out.extend(page.data.into_iter().map(Invoice::from));
            if !page.has_more || starting_after.is_none() {
                break;
            }
        }
        Ok(out)
    }

    async fn get_payment_method(&self, id: &str) -> Result<PaymentMethod, BillingError> {
        let path = format!("/v1/payment_methods/{}", path_segment(id)?);
        let pm: StripePaymentMethod = self.call(Method::GET, &path, &[], None).await?;
        pm.try_into()
    }

    async fn detach(&self, id: &str) -> Result<PaymentMethod, BillingError> {
        let path = format!("/v1/payment_methods/{}/detach", path_segment(id)?);
        let key = idempotency_key("detach_payment_method", &[id]);
        let pm: StripePaymentMethod = self.call(Method::POST, &path, &[], Some(&key)).await?;
        pm.try_into()
    }
}

impl PaymentProvider for StripeProvider {
    fn name(&self) -> &'static str {
        "stripe"
    }

    fn create_checkout<'a>(&'a self, req: &'a CheckoutRequest) -> BoxFuture<'a, Result<Checkout, BillingError>> {
        Box::pin(self.checkout(req))
    }

    fn cancel_at_period_end<'a>(
        &'a self,
        subscription_id: &'a str,
        operation_id: &'a str,
    ) -> BoxFuture<'a, Result<Subscription, BillingError>> {
        Box::pin(self.cancel(subscription_id, operation_id))
    }

    fn subscription<'a>(&'a self, subscription_id: &'a str) -> BoxFuture<'a, Result<Subscription, BillingError>> {
        Box::pin(self.get_subscription(subscription_id))
    }

    fn invoices<'a>(&'a self, customer_id: &'a str) -> BoxFuture<'a, Result<Vec<Invoice>, BillingError>> {
        Box::pin(self.list_invoices(customer_id))
    }

    fn payment_method<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<PaymentMethod, BillingError>> {
        Box::pin(self.get_payment_method(id))
    }

    fn detach_payment_method<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<PaymentMethod, BillingError>> {
        Box::pin(self.detach(id))
    }

    fn parse_webhook(&self, signature_header: Option<&str>, payload: &[u8]) -> Result<ProviderEvent, WebhookError> {
        webhook::verify_and_parse(
            &self.config.webhook_secret,
            signature_header,
            payload,
            &self.clock,
            self.config.webhook_tolerance,
        )
    }
}

/// The Checkout Session's form: one line item whose price is built inline from the plan's
/// (`price_data`), so the catalog stays the single source of prices.
pub fn checkout_form(req: &CheckoutRequest, product_name: &str) -> Vec<(String, String)> {
    let mut f: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: &str| f.push((k.to_owned(), v.to_owned()));
    put("mode", "subscription");
    put("success_url", &req.success_url);
    put("cancel_url", &req.cancel_url);
    put("client_reference_id", &req.org_id);
    match (&req.customer_id, &req.customer_email) {
        (Some(c), _) => put("customer", c),
        (None, Some(email)) => put("customer_email", email),
        (None, None) => {}
    }
    put("line_items[0][quantity]", "1");
    put("line_items[0][price_data][currency]", &req.price.currency.to_ascii_lowercase());
    put("line_items[0][price_data][unit_amount]", &req.price.amount_cents.to_string());
    put("line_items[0][price_data][recurring][interval]", req.price.interval.as_str());
    put("line_items[0][price_data][product_data][name]", &format!("{product_name} {}", req.price.plan));
    // On the session (checkout events) and on the subscription (its own events), so every
    // event names the org and plan without a lookup.
    let mut metadata = req.metadata.clone();
    metadata.insert("org_id".into(), req.org_id.clone());
    metadata.insert("plan".into(), req.price.plan.clone());
    for (k, v) in &metadata {
        put(&format!("metadata[{k}]"), v);
    }
    for (k, v) in &metadata {
        put(&format!("subscription_data[metadata][{k}]"), v);
    }
    f
}

/// An id placed in a URL path: Stripe ids are `[A-Za-z0-9_]`; anything else is refused rather
/// than escaped, so an id can never change which endpoint is called.
fn path_segment(id: &str) -> Result<&str, BillingError> {
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(id)
    } else {
        Err(BillingError::InvalidRequest {
            code: "invalid_id".into(),
            param: None,
            message: "not a Stripe object id".into(),
        })
    }
}

/// reqwest's errors print the URL; ours has no secret in it, but keep logs to the cause.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    };
    let mut msg = format!("{kind}: {e}");
    if let Some(url) = e.url() {
        msg = msg.replace(url.as_str(), "<stripe>");
    }
    msg
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    error: Option<ErrorDetail>,
}

#[derive(Deserialize, Default)]
struct ErrorDetail {
    #[serde(rename = "type", default)]
    error_type: String,
    code: Option<String>,
    decline_code: Option<String>,
    message: Option<String>,
    param: Option<String>,
}

fn api_error(status: StatusCode, body: &[u8]) -> BillingError {
    let detail = serde_json::from_slice::<ErrorBody>(body).ok().and_then(|b| b.error).unwrap_or_default();
    let message = detail.message.clone().unwrap_or_else(|| format!("HTTP {}", status.as_u16()));
    let code = detail.code.clone().unwrap_or_default();
    match (status.as_u16(), detail.error_type.as_str()) {
        (_, "card_error") => BillingError::Card { code, decline_code: detail.decline_code, message },
        (401, _) => BillingError::Authentication,
        (404, _) => BillingError::NotFound(message),
        (429, _) => BillingError::RateLimited,
        (s, "invalid_request_error") if s < 500 && s != 409 => {
            BillingError::InvalidRequest { code, param: detail.param, message }
        }
        (s, t) => BillingError::Provider {
            status: s,
            error_type: if t.is_empty() { "unknown".into() } else { t.into() },
            message,
        },
    }
}

/// A field Stripe sends as an id, or as the object when expanded.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Expandable {
    Id(String),
    Object { id: String },
}

impl Expandable {
    pub(crate) fn into_id(self) -> String {
        match self {
            Expandable::Id(id) | Expandable::Object { id } => id,
        }
    }
}

#[derive(Deserialize)]
struct StripeList<T> {
    data: Vec<T>,
    #[serde(default)]
    has_more: bool,
}

#[derive(Deserialize)]
pub(crate) struct StripeCheckoutSession {
    pub id: String,
    pub url: Option<String>,
    pub client_reference_id: Option<String>,
    pub customer: Option<Expandable>,
    pub subscription: Option<Expandable>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
pub(crate) struct StripeSubscription {
    id: String,
    customer: Option<Expandable>,
    status: String,
    #[serde(default)]
    cancel_at_period_end: bool,
    current_period_start: Option<i64>,
    current_period_end: Option<i64>,
    default_payment_method: Option<Expandable>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

impl From<StripeSubscription> for Subscription {
    fn from(s: StripeSubscription) -> Self {
        Subscription {
            id: s.id,
            customer_id: s.customer.map(Expandable::into_id),
            status: s.status,
            cancel_at_period_end: s.cancel_at_period_end,
            current_period_start: s.current_period_start,
            current_period_end: s.current_period_end,
            default_payment_method: s.default_payment_method.map(Expandable::into_id),
            metadata: s.metadata,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct StripeInvoice {
    id: String,
    customer: Option<Expandable>,
    subscription: Option<Expandable>,
    #[serde(default)]
    amount_paid: i64,
    #[serde(default)]
    amount_due: i64,
    currency: String,
    status: Option<String>,
    period_start: i64,
    period_end: i64,
    created: i64,
    lines: Option<StripeList<StripeInvoiceLine>>,
}

#[derive(Deserialize)]
struct StripeInvoiceLine {
    period: Option<StripePeriod>,
}

#[derive(Deserialize)]
struct StripePeriod {
    start: i64,
    end: i64,
}

impl From<StripeInvoice> for Invoice {
    fn from(i: StripeInvoice) -> Self {
        // A subscription invoice's own period_start/period_end is the window usage was
        // collected in (for the first invoice, a single instant); the service period paid for
        // is its lines'.
        let lines = i.lines.map(|l| l.data).unwrap_or_default();
        let periods: Vec<&StripePeriod> = lines.iter().filter_map(|l| l.period.as_ref()).collect();
        let (period_start, period_end) =
            match (periods.iter().map(|p| p.start).min(), periods.iter().map(|p| p.end).max()) {
                (Some(s), Some(e)) => (s, e),
                _ => (i.period_start, i.period_end),
            };
        Invoice {
            id: i.id,
            customer_id: i.customer.map(Expandable::into_id),
            subscription_id: i.subscription.map(Expandable::into_id),
            amount_paid: i.amount_paid,
            amount_due: i.amount_due,
            currency: i.currency,
            status: i.status.unwrap_or_else(|| "draft".into()),
            period_start,
            period_end,
            created: i.created,
        }
    }
}

#[derive(Deserialize)]
struct StripePaymentMethod {
    id: String,
    card: Option<StripeCard>,
}

#[derive(Deserialize)]
struct StripeCard {
    brand: String,
    last4: String,
    exp_month: u32,
    exp_year: u32,
}

impl TryFrom<StripePaymentMethod> for PaymentMethod {
    type Error = BillingError;

    fn try_from(pm: StripePaymentMethod) -> Result<Self, BillingError> {
        let card = pm.card.ok_or_else(|| BillingError::Decode(format!("payment method {} is not a card", pm.id)))?;
        Ok(PaymentMethod {
            id: pm.id,
            brand: card.brand,
            last4: card.last4,
            exp_month: card.exp_month,
            exp_year: card.exp_year,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_error_bodies_map_to_typed_errors() {
        let card = br#"{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}"#;
        assert_eq!(
            api_error(StatusCode::PAYMENT_REQUIRED, card),
            BillingError::Card {
                code: "card_declined".into(),
                decline_code: Some("insufficient_funds".into()),
                message: "Your card has insufficient funds.".into()
            }
        );
        let invalid = br#"{"error":{"type":"invalid_request_error","code":"parameter_missing","param":"line_items","message":"Missing line_items"}}"#;
        assert!(matches!(
            api_error(StatusCode::BAD_REQUEST, invalid),
            BillingError::InvalidRequest { ref param, .. } if param.as_deref() == Some("line_items")
        ));
        assert_eq!(api_error(StatusCode::UNAUTHORIZED, b"{}"), BillingError::Authentication);
        assert!(matches!(
            api_error(
                StatusCode::NOT_FOUND,
                br#"{"error":{"type":"invalid_request_error","message":"No such payment_method"}}"#
            ),
            BillingError::NotFound(_)
        ));
        assert!(matches!(
            api_error(StatusCode::CONFLICT, br#"{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}"#),
            BillingError::Provider { status: 409, .. }
        ));
        assert!(matches!(api_error(StatusCode::BAD_GATEWAY, b"<html>"), BillingError::Provider { status: 502, .. }));
    }

    #[test]
    fn ids_that_could_change_the_path_are_refused() {
        assert!(path_segment("sub_1Abc").is_ok());
        for bad in ["", "sub_1/../../v1/charges", "pm 1", "pm_1?x=1"] {
            assert!(path_segment(bad).is_err(), "{bad}");
        }
    }
}
