//! The sandbox provider: payments without a payment company, for `sextant dev` and tests.
//!
//! A checkout's payment URL is a page on the router itself
//! (`{public_base}/billing/sandbox/checkout/{id}`) with a "Pay" and a "Decline" button. Paying
//! creates the customer, card, subscription and first invoice in memory and emits the events
//! Stripe would (`checkout.session.completed`, then `invoice.paid`); declining emits
//! `checkout.session.expired`, what Stripe sends for a session that was never paid. The events
//! go to the channel returned by [`SandboxProvider::new`], which the billing state machine
//! consumes exactly as it consumes verified Stripe webhooks.
//!
//! Its own state (open checkouts, the objects it made) is per process and lost on restart;
//! what billing needs to go on (subscription, period, card summary, payments) is in meta, and
//! renewals ([`PaymentProvider::charge_renewal`]) are charged from what meta sends, so a
//! restarted router keeps renewing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::future::BoxFuture;
use rand::RngCore;
use sextant_model::Clock;
use tokio::sync::mpsc;

use super::{
    idempotency_key, BillingError, Checkout, CheckoutRequest, EventKind, Interval, Invoice, PaymentMethod,
    PaymentProvider, ProviderEvent, RenewalRequest, Subscription, WebhookError,
};

/// Where the sandbox's payment pages are served.
pub const CHECKOUT_PATH: &str = "/billing/sandbox/checkout";

pub struct SandboxProvider {
    /// The router's public URL as the browser sees it (`http://localhost:8080`).
    public_base: String,
    clock: Clock,
    events: mpsc::UnboundedSender<ProviderEvent>,
    state: Mutex<State_>,
    /// Every renewal charge is declined, as with Stripe's declining test card.
    decline_renewals: AtomicBool,
}

#[derive(Default)]
struct State_ {
    checkouts: HashMap<String, SandboxCheckout>,
    /// Idempotency key → checkout id: the same subscribe attempt gets the same page.
    by_attempt: HashMap<String, String>,
    subscriptions: HashMap<String, Subscription>,
    invoices: Vec<Invoice>,
    payment_methods: HashMap<String, PaymentMethod>,
    /// Renewal invoices by idempotency key: a repeated charge answers the first outcome.
    renewals: HashMap<String, Invoice>,
}

struct SandboxCheckout {
    request: CheckoutRequest,
    outcome: Outcome,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    Open,
    Paid,
    Declined,
}

/// The card every sandbox payment uses: Stripe's test Visa.
const SANDBOX_BRAND: &str = "visa";
const SANDBOX_LAST4: &str = "4242";

impl SandboxProvider {
    /// The provider, and the receiving end of its events for the billing state machine.
    pub fn new(public_base: impl Into<String>, clock: Clock) -> (Self, mpsc::UnboundedReceiver<ProviderEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let p = SandboxProvider {
            public_base: public_base.into().trim_end_matches('/').to_owned(),
            clock,
            events: tx,
            state: Mutex::new(State_::default()),
            decline_renewals: AtomicBool::new(false),
        };
        (p, rx)
    }

    fn emit(&self, kind: EventKind) {
        let ev = ProviderEvent { id: random_id("evt_sbx"), created: self.clock.now_secs(), kind };
        // Sending fails only when the consumer is gone (the router is shutting down).
        if self.events.send(ev).is_err() {
            tracing::warn!("sandbox billing event dropped: no consumer");
        }
    }

    /// Makes every later renewal charge fail (or succeed again): the sandbox's declining card.
    pub fn set_decline_renewals(&self, decline: bool) {
        self.decline_renewals.store(decline, Ordering::SeqCst);
    }

    /// Where a checkout stands, for the page.
    pub fn outcome(&self, checkout_id: &str) -> Option<Outcome> {
        self.state.lock().unwrap().checkouts.get(checkout_id).map(|c| c.outcome)
    }

    /// The "Pay" button: completes an open checkout. Paying again is a no-op; paying a declined
    /// checkout is refused.
    pub fn pay(&self, checkout_id: &str) -> Result<Outcome, SandboxError> {
        let now = self.clock.now_secs();
        let mut events = Vec::new();
        {
            let mut st = self.state.lock().unwrap();
            let st = &mut *st;
            let c = st.checkouts.get_mut(checkout_id).ok_or(SandboxError::UnknownCheckout)?;
            match c.outcome {
                Outcome::Paid => return Ok(Outcome::Paid),
                Outcome::Declined => return Err(SandboxError::AlreadyDeclined),
                Outcome::Open => {}
            }
            c.outcome = Outcome::Paid;
            let req = &c.request;
            let customer = req
                .customer_id
                .clone()
                .unwrap_or_else(|| format!("cus_sbx_{}", &idempotency_key("customer", &[&req.org_id])[18..42]));
            let pm_id = random_id("pm_sbx");
            let year =
                jiff::Timestamp::from_second(now).map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).year()).unwrap_or(2030);
            let exp_year = u32::try_from(year).unwrap_or(2030) + 3;
            st.payment_methods.insert(
                pm_id.clone(),
                PaymentMethod {
                    id: pm_id.clone(),
                    brand: SANDBOX_BRAND.into(),
                    last4: SANDBOX_LAST4.into(),
                    exp_month: 12,
                    exp_year,
                },
            );
            let period_end = now + period_secs(req.price.interval);
            let mut metadata = req.metadata.clone();
            metadata.insert("org_id".into(), req.org_id.clone());
            metadata.insert("plan".into(), req.price.plan.clone());
            let sub = Subscription {
                id: random_id("sub_sbx"),
                customer_id: Some(customer.clone()),
                status: "active".into(),
                cancel_at_period_end: false,
                current_period_start: Some(now),
                current_period_end: Some(period_end),
                default_payment_method: Some(pm_id),
                metadata: metadata.clone(),
            };
            let invoice = Invoice {
                id: random_id("in_sbx"),
                customer_id: Some(customer.clone()),
                subscription_id: Some(sub.id.clone()),
                amount_paid: req.price.amount_cents,
                amount_due: req.price.amount_cents,
                currency: req.price.currency.to_ascii_lowercase(),
                status: "paid".into(),
                period_start: now,
                period_end,
                created: now,
            };
            events.push(EventKind::CheckoutCompleted {
                checkout_id: checkout_id.to_owned(),
                org_id: Some(req.org_id.clone()),
                customer_id: Some(customer),
                subscription_id: Some(sub.id.clone()),
                metadata,
            });
            events.push(EventKind::InvoicePaid(invoice.clone()));
            st.subscriptions.insert(sub.id.clone(), sub);
            st.invoices.push(invoice);
        }
        for e in events {
            self.emit(e);
        }
        Ok(Outcome::Paid)
    }

    /// The "Decline" button: the payment fails and the checkout ends unpaid.
    pub fn decline(&self, checkout_id: &str) -> Result<Outcome, SandboxError> {
        let event = {
            let mut st = self.state.lock().unwrap();
            let c = st.checkouts.get_mut(checkout_id).ok_or(SandboxError::UnknownCheckout)?;
            match c.outcome {
                Outcome::Declined => return Ok(Outcome::Declined),
                Outcome::Paid => return Err(SandboxError::AlreadyPaid),
                Outcome::Open => {}
            }
            c.outcome = Outcome::Declined;
            let mut metadata = c.request.metadata.clone();
            metadata.insert("org_id".into(), c.request.org_id.clone());
            metadata.insert("plan".into(), c.request.price.plan.clone());
            EventKind::CheckoutExpired {
                checkout_id: checkout_id.to_owned(),
                org_id: Some(c.request.org_id.clone()),
                metadata,
            }
        };
        self.emit(event);
        Ok(Outcome::Declined)
    }

    fn not_found(what: &str) -> BillingError {
        BillingError::NotFound(format!("no such sandbox {what}"))
    }
}

fn period_secs(interval: Interval) -> i64 {
    match interval {
        Interval::Month => 30 * 86_400,
        Interval::Year => 365 * 86_400,
    }
}

fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut b);
    format!("{prefix}_{}", hex::encode(b))
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error("no such checkout")]
    UnknownCheckout,
    #[error("this checkout was declined")]
    AlreadyDeclined,
    #[error("this checkout was paid")]
    AlreadyPaid,
}

impl PaymentProvider for SandboxProvider {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn create_checkout<'a>(&'a self, req: &'a CheckoutRequest) -> BoxFuture<'a, Result<Checkout, BillingError>> {
        Box::pin(async move {
            if req.price.amount_cents < 0 {
                return Err(BillingError::InvalidRequest {
                    code: "amount_too_small".into(),
                    param: Some("unit_amount".into()),
                    message: "a price cannot be negative".into(),
                });
            }
            let key = idempotency_key("checkout", &[&req.org_id, &req.price.plan, &req.attempt_id]);
            let mut st = self.state.lock().unwrap();
            let id = match st.by_attempt.get(&key) {
                Some(id) => id.clone(),
                None => {
                    let id = random_id("cs_sbx");
                    st.checkouts.insert(id.clone(), SandboxCheckout { request: req.clone(), outcome: Outcome::Open });
                    st.by_attempt.insert(key, id.clone());
                    id
                }
            };
            Ok(Checkout { payment_url: format!("{}{CHECKOUT_PATH}/{id}", self.public_base), checkout_id: id })
        })
    }

    fn cancel_at_period_end<'a>(
        &'a self,
        subscription_id: &'a str,
        _operation_id: &'a str,
    ) -> BoxFuture<'a, Result<Subscription, BillingError>> {
        Box::pin(async move {
            let sub = {
                let mut st = self.state.lock().unwrap();
                let sub = st.subscriptions.get_mut(subscription_id).ok_or_else(|| Self::not_found("subscription"))?;
                if sub.cancel_at_period_end {
                    return Ok(sub.clone());
                }
                sub.cancel_at_period_end = true;
                sub.clone()
            };
            self.emit(EventKind::SubscriptionUpdated(sub.clone()));
            Ok(sub)
        })
    }

    fn subscription<'a>(&'a self, subscription_id: &'a str) -> BoxFuture<'a, Result<Subscription, BillingError>> {
        Box::pin(async move {
            self.state
                .lock()
                .unwrap()
                .subscriptions
                .get(subscription_id)
                .cloned()
                .ok_or_else(|| Self::not_found("subscription"))
        })
    }

    fn invoices<'a>(&'a self, customer_id: &'a str) -> BoxFuture<'a, Result<Vec<Invoice>, BillingError>> {
        Box::pin(async move {
            let st = self.state.lock().unwrap();
            let mut v: Vec<Invoice> =
                st.invoices.iter().filter(|i| i.customer_id.as_deref() == Some(customer_id)).cloned().collect();
            v.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| b.id.cmp(&a.id)));
            Ok(v)
        })
    }

    fn payment_method<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<PaymentMethod, BillingError>> {
        Box::pin(async move {
            self.state.lock().unwrap().payment_methods.get(id).cloned().ok_or_else(|| Self::not_found("payment method"))
        })
    }

    fn detach_payment_method<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<PaymentMethod, BillingError>> {
        Box::pin(async move {
            let mut st = self.state.lock().unwrap();
            let pm = st.payment_methods.remove(id).ok_or_else(|| Self::not_found("payment method"))?;
            for sub in st.subscriptions.values_mut() {
                if sub.default_payment_method.as_deref() == Some(id) {
                    sub.default_payment_method = None;
                }
            }
            Ok(pm)
        })
    }

    /// Paid when a card is on file, unexpired at the period's start, and renewals are not set
    /// to decline; an unpaid (`open`) invoice otherwise. The invoice id follows from the
    /// idempotency key, so routers charging the same period report the same invoice.
    fn charge_renewal<'a>(&'a self, req: &'a RenewalRequest) -> BoxFuture<'a, Result<Invoice, BillingError>> {
        Box::pin(async move {
            let mut st = self.state.lock().unwrap();
            if let Some(done) = st.renewals.get(&req.idempotency_key) {
                return Ok(done.clone());
            }
            let start_month = jiff::Timestamp::from_second(req.period_start)
                .map(|t| {
                    let d = t.to_zoned(jiff::tz::TimeZone::UTC);
                    (i64::from(d.year()), i64::from(d.month()))
                })
                .map_err(|e| BillingError::InvalidRequest {
                    code: "invalid_period".into(),
                    param: None,
                    message: e.to_string(),
                })?;
            let card_valid =
                req.card.as_ref().is_some_and(|(_, month, year)| (i64::from(*year), i64::from(*month)) >= start_month);
            let paid = card_valid && !self.decline_renewals.load(Ordering::SeqCst);
            let tail = req.idempotency_key.rsplit('-').next().unwrap_or_default();
            let invoice = Invoice {
                id: format!("in_sbx_r{tail}"),
                customer_id: req.customer_id.clone(),
                subscription_id: Some(req.subscription_id.clone()),
                amount_paid: if paid { req.price.amount_cents } else { 0 },
                amount_due: req.price.amount_cents,
                currency: req.price.currency.to_ascii_lowercase(),
                status: if paid { "paid" } else { "open" }.into(),
                period_start: req.period_start,
                period_end: req.period_end,
                created: self.clock.now_secs(),
            };
            st.renewals.insert(req.idempotency_key.clone(), invoice.clone());
            st.invoices.push(invoice.clone());
            Ok(invoice)
        })
    }

    fn parse_webhook(&self, _signature_header: Option<&str>, _payload: &[u8]) -> Result<ProviderEvent, WebhookError> {
        // Its events come through the channel, never over HTTP: nothing from outside is taken
        // for a sandbox payment.
        Err(WebhookError::Unsupported)
    }
}

/// The sandbox's pages, with the provider as their state; the router merges them only when
/// the sandbox is the configured provider.
pub fn routes<S: Clone + Send + Sync + 'static>(sandbox: Arc<SandboxProvider>) -> Router<S> {
    Router::new()
        .route(&format!("{CHECKOUT_PATH}/{{id}}"), get(page))
        .route(&format!("{CHECKOUT_PATH}/{{id}}/pay"), post(pay))
        .route(&format!("{CHECKOUT_PATH}/{{id}}/decline"), post(decline))
        .with_state(sandbox)
}

/// `GET …/checkout/{id}`: the payment page.
pub async fn page(State(sandbox): State<Arc<SandboxProvider>>, Path(id): Path<String>) -> Response {
    let (plan, amount, currency, interval, org, outcome) = {
        let st = sandbox.state.lock().unwrap();
        let Some(c) = st.checkouts.get(&id) else {
            return (StatusCode::NOT_FOUND, html_page("Checkout not found", "<p>No such sandbox checkout.</p>"))
                .into_response();
        };
        let r = &c.request;
        (
            r.price.plan.clone(),
            r.price.amount_cents,
            r.price.currency.clone(),
            r.price.interval,
            r.org_id.clone(),
            c.outcome,
        )
    };
    let summary = format!(
        "<p>Plan <b>{}</b> for organization <code>{}</code>: {} {} per {}.</p>",
        escape(&plan),
        escape(&org),
        format_amount(amount),
        escape(&currency.to_ascii_uppercase()),
        interval.as_str()
    );
    let body = match outcome {
        Outcome::Open => {
            let base = format!("{CHECKOUT_PATH}/{}", escape(&id));
            format!(
                "{summary}<p>This is the sandbox payment provider: no card is charged.</p>\
                 <form method=\"post\" action=\"{base}/pay\"><button type=\"submit\" id=\"pay\">Pay</button></form>\
                 <form method=\"post\" action=\"{base}/decline\"><button type=\"submit\" id=\"decline\">Decline</button></form>"
            )
        }
        Outcome::Paid => format!("{summary}<p id=\"outcome\">Paid.</p>"),
        Outcome::Declined => format!("{summary}<p id=\"outcome\">Declined.</p>"),
    };
    html_page("Sandbox checkout", &body).into_response()
}

/// `POST …/checkout/{id}/pay`.
pub async fn pay(State(sandbox): State<Arc<SandboxProvider>>, Path(id): Path<String>) -> Response {
    finish(&sandbox, &id, sandbox.pay(&id))
}

/// `POST …/checkout/{id}/decline`.
pub async fn decline(State(sandbox): State<Arc<SandboxProvider>>, Path(id): Path<String>) -> Response {
    finish(&sandbox, &id, sandbox.decline(&id))
}

fn finish(sandbox: &SandboxProvider, id: &str, result: Result<Outcome, SandboxError>) -> Response {
    let (status, body) = match result {
        Ok(Outcome::Paid) => {
            let url = sandbox.state.lock().unwrap().checkouts.get(id).map(|c| c.request.success_url.clone());
            (StatusCode::OK, format!("<p id=\"outcome\">Paid.</p>{}", continue_link(url)))
        }
        Ok(_) => {
            let url = sandbox.state.lock().unwrap().checkouts.get(id).map(|c| c.request.cancel_url.clone());
            (StatusCode::OK, format!("<p id=\"outcome\">Declined.</p>{}", continue_link(url)))
        }
        Err(SandboxError::UnknownCheckout) => (StatusCode::NOT_FOUND, "<p>No such sandbox checkout.</p>".to_owned()),
        Err(e) => (StatusCode::CONFLICT, format!("<p id=\"outcome\">{}</p>", escape(&e.to_string()))),
    };
    (status, html_page("Sandbox checkout", &body)).into_response()
}

fn continue_link(url: Option<String>) -> String {
    match url {
        Some(u) if u.starts_with("http://") || u.starts_with("https://") || u.starts_with('/') => {
            format!("<p><a href=\"{}\">Continue</a></p>", escape(&u))
        }
        _ => String::new(),
    }
}

fn html_page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title></head><body><h1>{}</h1>{body}</body></html>",
        escape(title),
        escape(title)
    ))
}

fn format_amount(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, (cents % 100).abs())
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
