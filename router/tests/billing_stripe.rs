//! The Stripe adapter against a fake Stripe: a local HTTP server that records what the adapter
//! sends (paths, form fields in bracket syntax, auth, version, idempotency keys) and answers
//! with Stripe-shaped JSON, scripted per test (errors, 429 with Retry-After, 5xx then success).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use sextant_model::ManualClock;
use sextant_router::billing::stripe::{StripeConfig, StripeProvider, STRIPE_VERSION};
use sextant_router::billing::webhook;
use sextant_router::billing::{
    idempotency_key, BillingError, CheckoutRequest, EventKind, Interval, PaymentProvider, PlanPrice, Secret,
    WebhookError,
};

const KEY: &str = "sk_test_fake_51H";
const WHSEC: &str = "whsec_fake";

#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    form: Vec<(String, String)>,
    headers: HeaderMap,
}

impl Seen {
    fn field(&self, k: &str) -> Option<&str> {
        self.form.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
    }
    fn header(&self, k: &str) -> Option<&str> {
        self.headers.get(k).and_then(|v| v.to_str().ok())
    }
}

struct Scripted {
    status: StatusCode,
    headers: Vec<(&'static str, String)>,
    body: Value,
    delay: Duration,
}

fn ok(body: Value) -> Scripted {
    Scripted { status: StatusCode::OK, headers: vec![], body, delay: Duration::ZERO }
}

fn status(status: StatusCode, body: Value) -> Scripted {
    Scripted { status, headers: vec![], body, delay: Duration::ZERO }
}

#[derive(Default)]
struct Fake {
    seen: Mutex<Vec<Seen>>,
    script: Mutex<VecDeque<Scripted>>,
}

async fn handle(State(fake): State<Arc<Fake>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let query: Vec<(String, String)> = serde_urlencoded::from_str(uri.query().unwrap_or("")).unwrap();
    let form: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap();
    fake.seen.lock().unwrap().push(Seen { method, path: uri.path().to_owned(), query, form, headers });
    let next = fake.script.lock().unwrap().pop_front();
    let Some(s) = next else {
        return (StatusCode::IM_A_TEAPOT, "the test scripted no answer for this request").into_response();
    };
    if !s.delay.is_zero() {
        tokio::time::sleep(s.delay).await;
    }
    let mut resp = (s.status, axum::Json(s.body)).into_response();
    for (k, v) in s.headers {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

async fn fake_stripe(script: Vec<Scripted>) -> (Arc<Fake>, SocketAddr) {
    let fake = Arc::new(Fake { seen: Mutex::default(), script: Mutex::new(script.into()) });
    let app = Router::new().fallback(handle).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, addr)
}

fn config(addr: SocketAddr) -> StripeConfig {
    let mut c = StripeConfig::new(Secret::new(KEY), Secret::new(WHSEC));
    c.api_base = format!("http://{addr}");
    c.initial_backoff = Duration::from_millis(10);
    c.max_backoff = Duration::from_secs(5);
    c.timeout = Duration::from_secs(5);
    c
}

fn provider(addr: SocketAddr) -> StripeProvider {
    StripeProvider::new(config(addr), ManualClock::at_millis(1_780_000_000_000).clock()).unwrap()
}

fn checkout_request(attempt: &str) -> CheckoutRequest {
    CheckoutRequest {
        org_id: "org_42".into(),
        price: PlanPrice { plan: "pro".into(), amount_cents: 2900, currency: "USD".into(), interval: Interval::Month },
        customer_id: None,
        customer_email: Some("owner@example.com".into()),
        success_url: "https://app.example.com/billing?paid=1".into(),
        cancel_url: "https://app.example.com/billing".into(),
        attempt_id: attempt.into(),
        metadata: [("requested_by".to_owned(), "user_7".to_owned())].into(),
    }
}

fn session_json() -> Value {
    json!({"id": "cs_test_a1", "object": "checkout.session", "mode": "subscription",
           "url": "https://checkout.stripe.com/c/pay/cs_test_a1", "client_reference_id": "org_42",
           "customer": null, "subscription": null, "metadata": {"org_id": "org_42", "plan": "pro"}})
}

fn stripe_error(kind: &str, code: &str, message: &str) -> Value {
    json!({"error": {"type": kind, "code": code, "message": message}})
}

#[tokio::test]
async fn checkout_posts_a_subscription_session_priced_from_the_plan_and_returns_its_url() {
    let (fake, addr) = fake_stripe(vec![ok(session_json())]).await;
    let checkout = provider(addr).create_checkout(&checkout_request("attempt-1")).await.unwrap();
    assert_eq!(checkout.checkout_id, "cs_test_a1");
    assert_eq!(checkout.payment_url, "https://checkout.stripe.com/c/pay/cs_test_a1");

    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(r.method, Method::POST);
    assert_eq!(r.path, "/v1/checkout/sessions");
    assert_eq!(r.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(r.header("stripe-version"), Some(STRIPE_VERSION));
    assert_eq!(r.header("content-type"), Some("application/x-www-form-urlencoded"));
    assert_eq!(
        r.header("idempotency-key"),
        Some(idempotency_key("checkout", &["org_42", "pro", "attempt-1"]).as_str())
    );
    for (k, v) in [
        ("mode", "subscription"),
        ("client_reference_id", "org_42"),
        ("customer_email", "owner@example.com"),
        ("success_url", "https://app.example.com/billing?paid=1"),
        ("cancel_url", "https://app.example.com/billing"),
        ("line_items[0][quantity]", "1"),
        ("line_items[0][price_data][currency]", "usd"),
        ("line_items[0][price_data][unit_amount]", "2900"),
        ("line_items[0][price_data][recurring][interval]", "month"),
        ("line_items[0][price_data][product_data][name]", "Sextant pro"),
        ("metadata[org_id]", "org_42"),
        ("metadata[plan]", "pro"),
        ("metadata[requested_by]", "user_7"),
        ("subscription_data[metadata][org_id]", "org_42"),
        ("subscription_data[metadata][plan]", "pro"),
    ] {
        assert_eq!(r.field(k), Some(v), "form field {k} in {:?}", r.form);
    }
    assert_eq!(r.field("customer"), None, "no customer yet: Stripe creates one");
}

#[tokio::test]
async fn a_yearly_plan_for_a_known_customer_names_the_customer_and_the_year() {
    let (fake, addr) = fake_stripe(vec![ok(session_json())]).await;
    let mut req = checkout_request("attempt-1");
    req.price.interval = Interval::Year;
    req.customer_id = Some("cus_9".into());
    provider(addr).create_checkout(&req).await.unwrap();
    let r = fake.seen.lock().unwrap()[0].clone();
    assert_eq!(r.field("line_items[0][price_data][recurring][interval]"), Some("year"));
    assert_eq!(r.field("customer"), Some("cus_9"));
    assert_eq!(r.field("customer_email"), None, "Stripe refuses customer and customer_email together");
}

#[tokio::test]
async fn a_500_is_retried_with_the_same_body_and_idempotency_key_then_succeeds() {
    let (fake, addr) = fake_stripe(vec![
        status(StatusCode::INTERNAL_SERVER_ERROR, stripe_error("api_error", "", "Something went wrong")),
        ok(session_json()),
    ])
    .await;
    let checkout = provider(addr).create_checkout(&checkout_request("attempt-1")).await.unwrap();
    assert_eq!(checkout.checkout_id, "cs_test_a1");
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].header("idempotency-key").is_some());
    assert_eq!(seen[0].header("idempotency-key"), seen[1].header("idempotency-key"));
    assert_eq!(seen[0].form, seen[1].form);
}

#[tokio::test]
async fn a_caller_retrying_the_same_attempt_reuses_the_key_and_a_new_attempt_does_not() {
    let (fake, addr) = fake_stripe(vec![ok(session_json()), ok(session_json()), ok(session_json())]).await;
    let p = provider(addr);
    p.create_checkout(&checkout_request("attempt-1")).await.unwrap();
    p.create_checkout(&checkout_request("attempt-1")).await.unwrap();
    p.create_checkout(&checkout_request("attempt-2")).await.unwrap();
    let keys: Vec<String> =
        fake.seen.lock().unwrap().iter().map(|s| s.header("idempotency-key").unwrap().to_owned()).collect();
    assert_eq!(keys[0], keys[1]);
    assert_ne!(keys[0], keys[2]);
}

#[tokio::test]
async fn a_429_waits_as_long_as_retry_after_says_then_retries() {
    let mut limited =
        status(StatusCode::TOO_MANY_REQUESTS, stripe_error("invalid_request_error", "rate_limit", "Too many requests"));
    limited.headers.push(("retry-after", "1".into()));
    let (fake, addr) = fake_stripe(vec![limited, ok(session_json())]).await;
    let started = Instant::now();
    provider(addr).create_checkout(&checkout_request("attempt-1")).await.unwrap();
    let waited = started.elapsed();
    // The configured backoff is 10 ms: only Retry-After explains a wait of a second.
    assert!(waited >= Duration::from_millis(950), "waited {waited:?}");
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].header("idempotency-key"), seen[1].header("idempotency-key"));
}

#[tokio::test]
async fn a_card_error_is_not_retried_and_comes_back_typed() {
    let mut body = stripe_error("card_error", "card_declined", "Your card was declined.");
    body["error"]["decline_code"] = json!("generic_decline");
    let (fake, addr) = fake_stripe(vec![status(StatusCode::PAYMENT_REQUIRED, body), ok(session_json())]).await;
    let err = provider(addr).create_checkout(&checkout_request("attempt-1")).await.unwrap_err();
    assert_eq!(
        err,
        BillingError::Card {
            code: "card_declined".into(),
            decline_code: Some("generic_decline".into()),
            message: "Your card was declined.".into()
        }
    );
    assert_eq!(fake.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn stripe_should_retry_false_stops_retries_of_a_server_error() {
    let mut s = status(StatusCode::SERVICE_UNAVAILABLE, stripe_error("api_error", "", "down"));
    s.headers.push(("stripe-should-retry", "false".into()));
    let (fake, addr) = fake_stripe(vec![s, ok(session_json())]).await;
    let err = provider(addr).create_checkout(&checkout_request("a")).await.unwrap_err();
    assert!(matches!(err, BillingError::Provider { status: 503, .. }), "{err:?}");
    assert_eq!(fake.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_server_error_that_persists_gives_up_after_the_configured_retries() {
    let script = (0..10).map(|_| status(StatusCode::BAD_GATEWAY, json!({}))).collect();
    let (fake, addr) = fake_stripe(script).await;
    let err = provider(addr).create_checkout(&checkout_request("a")).await.unwrap_err();
    assert!(matches!(err, BillingError::Provider { status: 502, .. }), "{err:?}");
    assert_eq!(fake.seen.lock().unwrap().len(), 4, "the first attempt and 3 retries");
}

#[tokio::test]
async fn an_invalid_key_is_an_authentication_error_without_retries() {
    let (fake, addr) = fake_stripe(vec![status(
        StatusCode::UNAUTHORIZED,
        stripe_error("invalid_request_error", "", "Invalid API Key provided: sk_test_****"),
    )])
    .await;
    let err = provider(addr).invoices("cus_1").await.unwrap_err();
    assert_eq!(err, BillingError::Authentication);
    assert!(!format!("{err}").contains(KEY));
    assert_eq!(fake.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_slow_answer_times_out_and_an_unreachable_stripe_is_a_transport_error() {
    let mut slow = ok(session_json());
    slow.delay = Duration::from_secs(3);
    let (_fake, addr) = fake_stripe(vec![slow]).await;
    let mut c = config(addr);
    c.timeout = Duration::from_millis(200);
    c.max_retries = 0;
    let p = StripeProvider::new(c, ManualClock::at_millis(0).clock()).unwrap();
    let started = Instant::now();
    let err = p.create_checkout(&checkout_request("a")).await.unwrap_err();
    assert!(matches!(err, BillingError::Transport(ref m) if m.starts_with("timeout")), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let err = provider(closed).cancel_at_period_end("sub_1", "cancel-1").await.unwrap_err();
    assert!(matches!(err, BillingError::Transport(_)), "{err:?}");
}

#[tokio::test]
async fn cancel_sets_cancel_at_period_end_on_the_subscription() {
    let (fake, addr) = fake_stripe(vec![ok(json!({
        "id": "sub_1", "object": "subscription", "customer": "cus_1", "status": "active",
        "cancel_at_period_end": true, "current_period_start": 1_780_000_000, "current_period_end": 1_782_592_000,
        "default_payment_method": "pm_1", "metadata": {"org_id": "org_42", "plan": "pro"}
    }))])
    .await;
    let sub = provider(addr).cancel_at_period_end("sub_1", "cancel-1").await.unwrap();
    assert!(sub.cancel_at_period_end);
    assert_eq!(sub.current_period_end, Some(1_782_592_000));
    assert_eq!(sub.metadata.get("org_id").map(String::as_str), Some("org_42"));
    let r = fake.seen.lock().unwrap()[0].clone();
    assert_eq!((r.method.clone(), r.path.as_str()), (Method::POST, "/v1/subscriptions/sub_1"));
    assert_eq!(r.form, vec![("cancel_at_period_end".to_owned(), "true".to_owned())]);
    assert_eq!(
        r.header("idempotency-key"),
        Some(idempotency_key("cancel_at_period_end", &["sub_1", "cancel-1"]).as_str())
    );
}

#[tokio::test]
async fn a_second_cancel_after_a_resume_gets_a_new_idempotency_key() {
    let sub = json!({"id": "sub_1", "status": "active", "cancel_at_period_end": true});
    let (fake, addr) = fake_stripe(vec![ok(sub.clone()), ok(sub.clone()), ok(sub)]).await;
    let p = provider(addr);
    p.cancel_at_period_end("sub_1", "cancel-1").await.unwrap();
    p.cancel_at_period_end("sub_1", "cancel-1").await.unwrap();
    p.cancel_at_period_end("sub_1", "cancel-2").await.unwrap();
    let keys: Vec<String> =
        fake.seen.lock().unwrap().iter().map(|s| s.header("idempotency-key").unwrap().to_owned()).collect();
    assert_eq!(keys[0], keys[1], "a retry of the same cancel");
    assert_ne!(keys[1], keys[2], "a new cancel");
}

fn invoice_json(id: &str, created: i64) -> Value {
    json!({"id": id, "object": "invoice", "customer": "cus_1", "subscription": "sub_1",
           "amount_paid": 2900, "amount_due": 2900, "currency": "usd", "status": "paid",
           "period_start": created, "period_end": created, "created": created,
           "lines": {"object": "list", "has_more": false,
                     "data": [{"period": {"start": created, "end": created + 2_592_000}}]}})
}

#[tokio::test]
async fn invoices_are_listed_for_the_customer_following_pages() {
    let (fake, addr) = fake_stripe(vec![
        ok(json!({"object": "list", "has_more": true, "data": [invoice_json("in_3", 300), invoice_json("in_2", 200)]})),
        ok(json!({"object": "list", "has_more": false, "data": [invoice_json("in_1", 100)]})),
    ])
    .await;
    let invoices = provider(addr).invoices("cus_1").await.unwrap();
    assert_eq!(invoices.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["in_3", "in_2", "in_1"]);
    assert_eq!((invoices[2].period_start, invoices[2].period_end), (100, 100 + 2_592_000));
    assert_eq!(invoices[0].amount_paid, 2900);
    assert_eq!(invoices[0].status, "paid");
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen[0].method, Method::GET);
    assert_eq!(seen[0].path, "/v1/invoices");
    assert!(seen[0].query.contains(&("customer".into(), "cus_1".into())));
    assert!(seen[0].header("idempotency-key").is_none(), "GETs carry no idempotency key");
    assert!(seen[1].query.contains(&("starting_after".into(), "in_2".into())));
}

fn card_json(id: &str) -> Value {
    json!({"id": id, "object": "payment_method", "type": "card",
           "card": {"brand": "visa", "last4": "4242", "exp_month": 8, "exp_year": 2031}, "customer": "cus_1"})
}

#[tokio::test]
async fn the_payment_method_is_retrieved_and_detached() {
    let mut detached = card_json("pm_1");
    detached["customer"] = Value::Null;
    let (fake, addr) = fake_stripe(vec![ok(card_json("pm_1")), ok(detached)]).await;
    let p = provider(addr);
    let pm = p.payment_method("pm_1").await.unwrap();
    assert_eq!((pm.brand.as_str(), pm.last4.as_str(), pm.exp_month, pm.exp_year), ("visa", "4242", 8, 2031));
    p.detach_payment_method("pm_1").await.unwrap();
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!((seen[0].method.clone(), seen[0].path.as_str()), (Method::GET, "/v1/payment_methods/pm_1"));
    assert_eq!((seen[1].method.clone(), seen[1].path.as_str()), (Method::POST, "/v1/payment_methods/pm_1/detach"));
    assert_eq!(seen[1].header("idempotency-key"), Some(idempotency_key("detach_payment_method", &["pm_1"]).as_str()));
}

#[tokio::test]
async fn a_missing_payment_method_is_not_found() {
    let (_fake, addr) = fake_stripe(vec![status(
        StatusCode::NOT_FOUND,
        stripe_error("invalid_request_error", "resource_missing", "No such PaymentMethod: 'pm_x'"),
    )])
    .await;
    assert!(matches!(provider(addr).payment_method("pm_x").await, Err(BillingError::NotFound(_))));
}

#[tokio::test]
async fn the_provider_verifies_webhooks_with_its_secret_and_clock() {
    let (_fake, addr) = fake_stripe(vec![]).await;
    let clock = ManualClock::at_millis(1_780_000_000_000);
    let p = StripeProvider::new(config(addr), clock.clock()).unwrap();
    let body = json!({"id": "evt_9", "type": "checkout.session.completed", "created": 1_780_000_000,
        "data": {"object": {"id": "cs_test_a1", "client_reference_id": "org_42", "customer": "cus_1",
                            "subscription": "sub_1", "metadata": {"plan": "pro"}}}})
    .to_string();
    let header = webhook::sign(&Secret::new(WHSEC), 1_780_000_000, body.as_bytes());
    let ev = p.parse_webhook(Some(&header), body.as_bytes()).unwrap();
    assert_eq!(ev.id, "evt_9");
    assert!(
        matches!(ev.kind, EventKind::CheckoutCompleted { ref subscription_id, .. } if subscription_id.as_deref() == Some("sub_1"))
    );
    let forged = webhook::sign(&Secret::new("whsec_guess"), 1_780_000_000, body.as_bytes());
    assert_eq!(p.parse_webhook(Some(&forged), body.as_bytes()), Err(WebhookError::SignatureMismatch));
    clock.advance(Duration::from_secs(301));
    assert!(matches!(p.parse_webhook(Some(&header), body.as_bytes()), Err(WebhookError::StaleTimestamp { .. })));
}

#[test]
fn the_provider_debug_output_hides_both_secrets() {
    let p = StripeProvider::new(config("127.0.0.1:9".parse().unwrap()), ManualClock::at_millis(0).clock()).unwrap();
    let dbg = format!("{p:?}");
    assert!(!dbg.contains(KEY) && !dbg.contains(WHSEC), "{dbg}");
}

#[tokio::test]
async fn a_409_for_the_same_key_still_in_flight_is_retried() {
    let (fake, addr) = fake_stripe(vec![
        status(
            StatusCode::CONFLICT,
            stripe_error(
                "idempotency_error",
                "idempotency_key_in_use",
                "There is currently another in-progress request",
            ),
        ),
        ok(session_json()),
    ])
    .await;
    provider(addr).create_checkout(&checkout_request("attempt-1")).await.unwrap();
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].header("idempotency-key"), seen[1].header("idempotency-key"));
}
