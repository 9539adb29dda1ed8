//! Payment providers: where money is taken for a plan (docs/API.md, "Billing providers").
//!
//! The billing state machine (subscriptions in meta, renewals, downgrades) speaks only to the
//! [`PaymentProvider`] trait and consumes [`ProviderEvent`]s; it never sees which provider is
//! behind them. Two implementations:
//! - [`stripe::StripeProvider`]: Stripe's HTTP API (Checkout Sessions in subscription mode,
//!   `cancel_at_period_end`, invoices, payment methods) and its signed webhooks
//!   ([`webhook`]).
//! - [`sandbox::SandboxProvider`]: in-process, for `sextant dev` and tests. Its payment URL is
//!   a page served by the router (`/billing/sandbox/checkout/{id}`) whose "Pay" and "Decline"
//!   buttons produce the same [`ProviderEvent`]s a Stripe webhook would.
//!
//! Events reach the state machine one way per provider: Stripe's through
//! [`PaymentProvider::parse_webhook`] on the body of `POST /billing/provider/webhook`, the
//! sandbox's through the channel returned by [`sandbox::SandboxProvider::new`]. Either way the
//! consumer deduplicates on [`ProviderEvent::id`] (providers deliver at least once, and out of
//! order).

pub mod api;
pub mod lifecycle;
pub mod sandbox;
pub mod stripe;
pub mod webhook;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sextant_model::Clock;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

/// Which provider takes payments.
#[derive(Clone, Debug, Default)]
pub enum ProviderConfig {
    /// None: subscribing, cancelling and unlinking cards answer 503 `billing_not_configured`;
    /// status and history still answer, and the lifecycle still ends trials and periods.
    #[default]
    Disabled,
    /// Simulated payments on a page the router serves (the default of `sextant dev`).
    Sandbox,
    Stripe(stripe::StripeConfig),
}

#[derive(Clone, Debug, Default)]
pub struct BillingConfig {
    pub provider: ProviderConfig,
    /// The router's URL as a browser reaches it, for the sandbox's payment pages. `None`:
    /// `http://` and the address the router listens on (an unspecified address shown as
    /// `localhost`).
    pub public_url: Option<String>,
    /// How often this router runs the subscription lifecycle (ends of trials and periods,
    /// renewals); `None`: [`lifecycle::DEFAULT_PERIOD`].
    pub lifecycle_period: Option<std::time::Duration>,
}

/// The configured provider, as the router holds it.
pub struct Billing {
    /// `None` when no provider is configured.
    pub provider: Option<SharedProvider>,
    sandbox: Option<Arc<sandbox::SandboxProvider>>,
    sandbox_events: Mutex<Option<mpsc::UnboundedReceiver<ProviderEvent>>>,
}

impl Billing {
    /// `listening` is the public port's bound address, for the sandbox's default URL.
    pub fn new(config: &BillingConfig, listening: SocketAddr, clock: Clock) -> anyhow::Result<Self> {
        match &config.provider {
            ProviderConfig::Disabled => Ok(Billing { provider: None, sandbox: None, sandbox_events: Mutex::new(None) }),
            ProviderConfig::Sandbox => {
                let base = config.public_url.clone().unwrap_or_else(|| {
                    let host = if listening.ip().is_unspecified() {
                        "localhost".to_owned()
                    } else if listening.is_ipv6() {
                        format!("[{}]", listening.ip())
                    } else {
                        listening.ip().to_string()
                    };
                    format!("http://{host}:{}", listening.port())
                });
                let (p, rx) = sandbox::SandboxProvider::new(base, clock);
                let p = Arc::new(p);
                Ok(Billing { provider: Some(p.clone()), sandbox: Some(p), sandbox_events: Mutex::new(Some(rx)) })
            }
            ProviderConfig::Stripe(c) => Ok(Billing {
                provider: Some(Arc::new(stripe::StripeProvider::new(c.clone(), clock)?)),
                sandbox: None,
                sandbox_events: Mutex::new(None),
            }),
        }
    }

    /// The sandbox's events (payments made and declined on its pages), once, for the billing
    /// state machine; `None` with Stripe (its events arrive as webhooks) or when taken. Until
    /// taken they wait in the channel.
    pub fn take_sandbox_events(&self) -> Option<mpsc::UnboundedReceiver<ProviderEvent>> {
        self.sandbox_events.lock().unwrap().take()
    }

    /// The sandbox provider, when it is the one configured: its events' consumer reads the
    /// subscriptions it made, and tests set its renewals to decline.
    pub fn sandbox(&self) -> Option<&Arc<sandbox::SandboxProvider>> {
        self.sandbox.as_ref()
    }

    /// The sandbox's payment pages, when the sandbox is the provider; nothing otherwise.
    pub fn routes<S: Clone + Send + Sync + 'static>(&self) -> axum::Router<S> {
        match &self.sandbox {
            Some(s) => sandbox::routes(s.clone()),
            None => axum::Router::new(),
        }
    }
}

impl fmt::Debug for Billing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Billing").field("provider", &self.provider.as_ref().map(|p| p.name())).finish_non_exhaustive()
    }
}

/// A secret read from a file (API key, webhook signing secret). Its `Debug` and `Display` never
/// show the value, so it cannot reach a log through a `{:?}` of a config.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The file's contents without surrounding whitespace (a trailing newline is common);
    /// empty files are refused. The error names the file, never its contents.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let raw = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read secret file {}: {e}", path.display()))?;
        let value = raw.trim();
        anyhow::ensure!(!value.is_empty(), "secret file {} is empty", path.display());
        Ok(Secret(value.to_owned()))
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// How often a subscription renews.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interval {
    Month,
    Year,
}

impl Interval {
    pub fn as_str(self) -> &'static str {
        match self {
            Interval::Month => "month",
            Interval::Year => "year",
        }
    }
}

/// What a plan costs: the price a checkout charges each period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanPrice {
    /// The plan's name in the catalog (`pro`, `growth`, …).
    pub plan: String,
    /// In the currency's smallest unit (cents).
    pub amount_cents: i64,
    /// ISO 4217, lower case (`usd`).
    pub currency: String,
    pub interval: Interval,
}

/// A request to start paying for a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckoutRequest {
    pub org_id: String,
    pub price: PlanPrice,
    /// The provider's customer, when the org already has one (a second subscription, a plan
    /// change); otherwise the provider creates one and reports it in
    /// [`EventKind::CheckoutCompleted`].
    pub customer_id: Option<String>,
    /// Prefilled on the payment page for a new customer.
    pub customer_email: Option<String>,
    /// Where the payment page sends the browser after paying, and after giving up.
    pub success_url: String,
    pub cancel_url: String,
    /// Names this subscribe attempt (for example the meta command's id). A retry of the same
    /// attempt reuses it, so the provider returns the checkout it already created instead of
    /// making a second one.
    pub attempt_id: String,
    /// Copied onto the checkout and the subscription; comes back in events.
    pub metadata: BTreeMap<String, String>,
}

/// A renewal to charge: the period after the one paid, to the card on file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenewalRequest {
    pub org_id: String,
    pub subscription_id: String,
    pub customer_id: Option<String>,
    /// The card meta has on file, and its expiry (month, year); `None`: no card.
    pub card: Option<(String, u32, u32)>,
    pub price: PlanPrice,
    /// Unix seconds: the period charged for.
    pub period_start: i64,
    pub period_end: i64,
    /// One per org and period: every router charging the same period gets the same invoice.
    pub idempotency_key: String,
}

/// A payment page to send the customer to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkout {
    pub payment_url: String,
    pub checkout_id: String,
}

/// A subscription as the provider holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub id: String,
    pub customer_id: Option<String>,
    /// The provider's status word (`active`, `past_due`, `canceled`, `trialing`, …).
    pub status: String,
    pub cancel_at_period_end: bool,
    /// Unix seconds.
    pub current_period_start: Option<i64>,
    pub current_period_end: Option<i64>,
    /// The card renewals are charged to, if one is attached.
    pub default_payment_method: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

/// One bill, for the payment history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invoice {
    pub id: String,
    pub customer_id: Option<String>,
    pub subscription_id: Option<String>,
    /// Cents actually paid, and cents that were due.
    pub amount_paid: i64,
    pub amount_due: i64,
    pub currency: String,
    /// `draft`, `open`, `paid`, `uncollectible`, `void`.
    pub status: String,
    /// Unix seconds: the service period billed, and when the invoice was created.
    pub period_start: i64,
    pub period_end: i64,
    pub created: i64,
}

/// The card a customer pays with. Never the number: brand and last four digits only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentMethod {
    pub id: String,
    pub brand: String,
    pub last4: String,
    pub exp_month: u32,
    pub exp_year: u32,
}

/// Something that happened at the provider, in provider-neutral terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderEvent {
    /// The provider's event id: the consumer applies each id once.
    pub id: String,
    /// Unix seconds when the provider created the event. Providers deliver out of order;
    /// the consumer compares this (and the objects' own periods), not arrival order.
    pub created: i64,
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The customer paid on the payment page; the subscription exists.
    CheckoutCompleted {
        checkout_id: String,
        /// The org that started the checkout (`client_reference_id`).
        org_id: Option<String>,
        customer_id: Option<String>,
        subscription_id: Option<String>,
        metadata: BTreeMap<String, String>,
    },
    /// The payment page was abandoned or the payment declined; nothing was bought.
    CheckoutExpired {
        checkout_id: String,
        org_id: Option<String>,
        metadata: BTreeMap<String, String>,
    },
    /// A period was paid for (first payment or renewal).
    InvoicePaid(Invoice),
    /// A charge failed (a renewal, typically): the subscription goes `past_due`.
    InvoicePaymentFailed(Invoice),
    SubscriptionUpdated(Subscription),
    /// The subscription ended (canceled at period end, or after failed renewals).
    SubscriptionDeleted(Subscription),
    /// An event type billing does not act on; kept so the consumer can acknowledge it.
    Other {
        event_type: String,
    },
}

/// What went wrong talking to a provider.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BillingError {
    /// The card was declined or is unusable: the customer's problem, shown to them.
    #[error("card error ({code}): {message}")]
    Card { code: String, decline_code: Option<String>, message: String },
    /// The request was wrong (unknown price, bad parameter): our bug or stale data.
    #[error("invalid request ({code}): {message}")]
    InvalidRequest { code: String, param: Option<String>, message: String },
    /// The object does not exist at the provider.
    #[error("not found: {0}")]
    NotFound(String),
    /// The secret key was refused.
    #[error("the provider refused the API key")]
    Authentication,
    /// The provider kept answering 429 after the retries.
    #[error("the provider is rate limiting us")]
    RateLimited,
    /// The provider failed (5xx after the retries, or an idempotency conflict).
    #[error("provider error (HTTP {status}, {error_type}): {message}")]
    Provider { status: u16, error_type: String, message: String },
    /// No answer: connection refused, reset, or the timeout passed (after the retries).
    #[error("provider unreachable: {0}")]
    Transport(String),
    /// The provider answered something we cannot read.
    #[error("unexpected provider response: {0}")]
    Decode(String),
    /// This provider does not do that (the sandbox has no webhooks).
    #[error("not supported by this provider: {0}")]
    Unsupported(&'static str),
}

/// Why a webhook was refused. Every variant is answered 400 and logged without the payload.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("missing signature header")]
    MissingSignature,
    #[error("malformed signature header: {0}")]
    MalformedHeader(&'static str),
    #[error("no signature matches the payload")]
    SignatureMismatch,
    #[error("timestamp {timestamp} is outside the tolerance of {tolerance_secs} s (now {now})")]
    StaleTimestamp { timestamp: i64, now: i64, tolerance_secs: i64 },
    #[error("event body: {0}")]
    Payload(String),
    #[error("this provider does not accept webhooks")]
    Unsupported,
}

/// A payment provider. Object-safe: the router holds an `Arc<dyn PaymentProvider>`.
pub trait PaymentProvider: Send + Sync {
    /// A short name for logs and `/billing/status` (`stripe`, `sandbox`).
    fn name(&self) -> &'static str;

    /// Creates a payment page for a subscription to `req.price`.
    fn create_checkout<'a>(&'a self, req: &'a CheckoutRequest) -> BoxFuture<'a, Result<Checkout, BillingError>>;

    /// Turns auto-renew off: the subscription runs to the end of its period, then ends.
    /// `operation_id` names this cancel (the meta command's id, say): its retries reuse it, and
    /// a later cancel (after auto-renew was turned back on) must pass a new one, or the
    /// provider would answer with the first cancel's cached result.
    fn cancel_at_period_end<'a>(
        &'a self,
        subscription_id: &'a str,
        operation_id: &'a str,
    ) -> BoxFuture<'a, Result<Subscription, BillingError>>;

    fn subscription<'a>(&'a self, subscription_id: &'a str) -> BoxFuture<'a, Result<Subscription, BillingError>>;

    /// The customer's invoices, newest first.
    fn invoices<'a>(&'a self, customer_id: &'a str) -> BoxFuture<'a, Result<Vec<Invoice>, BillingError>>;

    fn payment_method<'a>(&'a self, payment_method_id: &'a str) -> BoxFuture<'a, Result<PaymentMethod, BillingError>>;

    /// Unlinks the card from the customer; renewals can no longer be charged to it.
    fn detach_payment_method<'a>(
        &'a self,
        payment_method_id: &'a str,
    ) -> BoxFuture<'a, Result<PaymentMethod, BillingError>>;

    /// Verifies a webhook's signature header against its raw body and reads the event.
    fn parse_webhook(&self, signature_header: Option<&str>, payload: &[u8]) -> Result<ProviderEvent, WebhookError>;

    /// Charges a renewal and answers its invoice (`paid`, or unpaid when the card was
    /// declined). Providers that renew subscriptions themselves (Stripe) answer
    /// [`BillingError::Unsupported`]: their invoice events report the outcome instead.
    fn charge_renewal<'a>(&'a self, _req: &'a RenewalRequest) -> BoxFuture<'a, Result<Invoice, BillingError>> {
        Box::pin(async { Err(BillingError::Unsupported("renewals are charged by the provider itself")) })
    }
}

pub type SharedProvider = Arc<dyn PaymentProvider>;

/// The `Idempotency-Key` of a provider call: the same operation on the same objects gives the
/// same key, so a retried call (ours after a timeout, or the caller's after a crash) is
/// answered with the first call's result instead of being done twice.
pub fn idempotency_key(operation: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(operation.as_bytes());
    for p in parts {
        // Length-prefixed, so ("ab","c") and ("a","bc") differ.
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    format!("sextant-{operation}-{}", hex::encode(&h.finalize()[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_never_shows_the_value() {
        let s = Secret::new("sk_test_abc123");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert!(!format!("{:?}", Some(&s)).contains("abc123"));
    }

    #[test]
    fn secret_from_file_trims_and_refuses_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, "sk_test_x\n").unwrap();
        assert_eq!(Secret::from_file(&p).unwrap().expose(), "sk_test_x");
        std::fs::write(&p, " \n").unwrap();
        let err = Secret::from_file(&p).unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
    }

    #[tokio::test]
    async fn sandbox_payment_urls_point_at_the_address_the_router_serves() {
        let req = CheckoutRequest {
            org_id: "o".into(),
            price: PlanPrice {
                plan: "pro".into(),
                amount_cents: 100,
                currency: "usd".into(),
                interval: Interval::Month,
            },
            customer_id: None,
            customer_email: None,
            success_url: "/".into(),
            cancel_url: "/".into(),
            attempt_id: "a".into(),
            metadata: BTreeMap::new(),
        };
        let url = |listen: &str, public: Option<&str>| {
            let config = BillingConfig {
                provider: ProviderConfig::Sandbox,
                public_url: public.map(str::to_owned),
                lifecycle_period: None,
            };
            let b = Billing::new(&config, listen.parse().unwrap(), Clock::system()).unwrap();
            assert!(b.take_sandbox_events().is_some());
            assert!(b.take_sandbox_events().is_none(), "handed out once");
            let req = req.clone();
            async move { b.provider.as_ref().unwrap().create_checkout(&req).await.unwrap().payment_url }
        };
        assert!(url("0.0.0.0:8080", None).await.starts_with("http://localhost:8080/billing/sandbox/checkout/cs_sbx_"));
        assert!(url("127.0.0.1:9", None).await.starts_with("http://127.0.0.1:9/billing/sandbox/checkout/"));
        assert!(url("[::1]:9", None).await.starts_with("http://[::1]:9/billing/sandbox/checkout/"));
        assert!(url("0.0.0.0:1", Some("https://api.example.com/"))
            .await
            .starts_with("https://api.example.com/billing/"));
    }

    #[test]
    fn idempotency_key_is_stable_per_operation_and_distinguishes_parts() {
        let a = idempotency_key("checkout", &["org1", "pro", "attempt-1"]);
        assert_eq!(a, idempotency_key("checkout", &["org1", "pro", "attempt-1"]));
        assert_ne!(a, idempotency_key("checkout", &["org1", "pro", "attempt-2"]));
        assert_ne!(idempotency_key("x", &["ab", "c"]), idempotency_key("x", &["a", "bc"]));
        assert_ne!(a, idempotency_key("cancel", &["org1", "pro", "attempt-1"]));
    }
}
