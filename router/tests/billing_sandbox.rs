//! The sandbox provider: its payment page served by the router, and the events "Pay" and
//! "Decline" produce, which must be the ones a Stripe webhook would have produced.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use sextant_model::ManualClock;
use sextant_router::billing::sandbox::{self, SandboxProvider};
use sextant_router::billing::{CheckoutRequest, EventKind, Interval, PaymentProvider, PlanPrice, ProviderEvent};
use tokio::sync::mpsc::UnboundedReceiver;
use tower::ServiceExt;

const NOW: i64 = 1_780_000_000;

fn sandbox() -> (Arc<SandboxProvider>, UnboundedReceiver<ProviderEvent>, ManualClock) {
    let clock = ManualClock::at_millis(NOW * 1000);
    let (p, rx) = SandboxProvider::new("http://localhost:8080/", clock.clock());
    (Arc::new(p), rx, clock)
}

fn request(attempt: &str) -> CheckoutRequest {
    CheckoutRequest {
        org_id: "org_1".into(),
        price: PlanPrice {
            plan: "growth".into(),
            amount_cents: 9900,
            currency: "usd".into(),
            interval: Interval::Month,
        },
        customer_id: None,
        customer_email: None,
        success_url: "http://localhost:5173/billing?paid=1".into(),
        cancel_url: "http://localhost:5173/billing".into(),
        attempt_id: attempt.into(),
        metadata: Default::default(),
    }
}

async fn call(p: &Arc<SandboxProvider>, method: &str, path: &str) -> (StatusCode, String) {
    let resp = sandbox::routes::<()>(p.clone())
        .oneshot(Request::builder().method(method).uri(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn path_of(url: &str) -> &str {
    url.strip_prefix("http://localhost:8080").unwrap()
}

#[tokio::test]
async fn checkout_links_to_a_page_on_the_router_with_pay_and_decline() {
    let (p, _rx, _clock) = sandbox();
    let c = p.create_checkout(&request("a1")).await.unwrap();
    assert_eq!(c.payment_url, format!("http://localhost:8080/billing/sandbox/checkout/{}", c.checkout_id));
    let (status, html) = call(&p, "GET", path_of(&c.payment_url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("growth") && html.contains("99.00 USD per month"), "{html}");
    assert!(html.contains(&format!("action=\"/billing/sandbox/checkout/{}/pay\"", c.checkout_id)), "{html}");
    assert!(html.contains(&format!("action=\"/billing/sandbox/checkout/{}/decline\"", c.checkout_id)), "{html}");
    let (status, _) = call(&p, "GET", "/billing/sandbox/checkout/cs_sbx_nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_same_subscribe_attempt_gets_the_same_checkout() {
    let (p, _rx, _clock) = sandbox();
    let a = p.create_checkout(&request("a1")).await.unwrap();
    assert_eq!(a, p.create_checkout(&request("a1")).await.unwrap());
    assert_ne!(a.checkout_id, p.create_checkout(&request("a2")).await.unwrap().checkout_id);
}

#[tokio::test]
async fn paying_emits_the_events_a_stripe_checkout_would_and_creates_the_subscription() {
    let (p, mut rx, _clock) = sandbox();
    let c = p.create_checkout(&request("a1")).await.unwrap();
    let (status, html) = call(&p, "POST", &format!("/billing/sandbox/checkout/{}/pay", c.checkout_id)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Paid.") && html.contains("http://localhost:5173/billing?paid=1"), "{html}");

    let completed = rx.try_recv().unwrap();
    let EventKind::CheckoutCompleted { checkout_id, org_id, customer_id, subscription_id, metadata } = completed.kind
    else {
        panic!("{completed:?}")
    };
    assert_eq!(checkout_id, c.checkout_id);
    assert_eq!(org_id.as_deref(), Some("org_1"));
    assert_eq!(metadata.get("plan").map(String::as_str), Some("growth"));
    assert_eq!(completed.created, NOW);
    let customer = customer_id.unwrap();
    let sub_id = subscription_id.unwrap();

    let paid = rx.try_recv().unwrap();
    assert_ne!(paid.id, completed.id, "each event has its own id");
    let EventKind::InvoicePaid(invoice) = paid.kind else { panic!("{paid:?}") };
    assert_eq!((invoice.amount_paid, invoice.currency.as_str(), invoice.status.as_str()), (9900, "usd", "paid"));
    assert_eq!((invoice.period_start, invoice.period_end), (NOW, NOW + 30 * 86_400));
    assert_eq!(invoice.subscription_id.as_deref(), Some(sub_id.as_str()));
    assert!(rx.try_recv().is_err(), "two events, no more");

    let sub = p.subscription(&sub_id).await.unwrap();
    assert_eq!((sub.status.as_str(), sub.cancel_at_period_end), ("active", false));
    assert_eq!(sub.current_period_end, Some(NOW + 30 * 86_400));
    assert_eq!(p.invoices(&customer).await.unwrap(), vec![invoice]);
    let pm = p.payment_method(sub.default_payment_method.as_deref().unwrap()).await.unwrap();
    assert_eq!((pm.brand.as_str(), pm.last4.as_str()), ("visa", "4242"));

    // Paying twice (a double click) changes nothing and emits nothing.
    let (status, _) = call(&p, "POST", &format!("/billing/sandbox/checkout/{}/pay", c.checkout_id)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(rx.try_recv().is_err());
    let (_, html) = call(&p, "GET", &format!("/billing/sandbox/checkout/{}", c.checkout_id)).await;
    assert!(html.contains("Paid.") && !html.contains("id=\"pay\""), "{html}");
}

#[tokio::test]
async fn declining_ends_the_checkout_unpaid_like_an_expired_stripe_session() {
    let (p, mut rx, _clock) = sandbox();
    let c = p.create_checkout(&request("a1")).await.unwrap();
    let (status, html) = call(&p, "POST", &format!("/billing/sandbox/checkout/{}/decline", c.checkout_id)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Declined."), "{html}");
    let ev = rx.try_recv().unwrap();
    assert!(
        matches!(ev.kind, EventKind::CheckoutExpired { ref checkout_id, ref org_id, .. }
            if *checkout_id == c.checkout_id && org_id.as_deref() == Some("org_1")),
        "{ev:?}"
    );
    assert!(rx.try_recv().is_err());
    let (status, _) = call(&p, "POST", &format!("/billing/sandbox/checkout/{}/pay", c.checkout_id)).await;
    assert_eq!(status, StatusCode::CONFLICT, "a declined checkout cannot be paid afterwards");
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn cancel_and_detach_change_the_subscription_like_stripe() {
    let (p, mut rx, _clock) = sandbox();
    let c = p.create_checkout(&request("a1")).await.unwrap();
    p.pay(&c.checkout_id).unwrap();
    let EventKind::CheckoutCompleted { subscription_id: Some(sub_id), .. } = rx.try_recv().unwrap().kind else {
        panic!()
    };
    let _invoice_paid = rx.try_recv().unwrap();

    let sub = p.cancel_at_period_end(&sub_id, "cancel-1").await.unwrap();
    assert!(sub.cancel_at_period_end);
    assert_eq!(sub.status, "active", "kept to the end of the period");
    let ev = rx.try_recv().unwrap();
    assert!(matches!(ev.kind, EventKind::SubscriptionUpdated(ref s) if s.cancel_at_period_end));

    let pm = sub.default_payment_method.unwrap();
    p.detach_payment_method(&pm).await.unwrap();
    assert!(p.payment_method(&pm).await.is_err());
    assert_eq!(p.subscription(&sub_id).await.unwrap().default_payment_method, None);
    assert!(p.cancel_at_period_end("sub_sbx_unknown", "cancel-2").await.is_err());
}

#[tokio::test]
async fn the_page_escapes_what_the_org_put_in_it() {
    let (p, _rx, _clock) = sandbox();
    let mut r = request("a1");
    r.org_id = "<script>alert(1)</script>".into();
    let c = p.create_checkout(&r).await.unwrap();
    let (_, html) = call(&p, "GET", path_of(&c.payment_url)).await;
    assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"), "{html}");
}

#[test]
fn the_sandbox_takes_no_webhooks_from_outside() {
    let (p, _rx, _clock) = sandbox();
    assert!(p.parse_webhook(Some("t=1,v1=00"), b"{}").is_err());
}

/// A paid sandbox subscription; the checkout's two events already drained.
async fn paid_subscription(p: &Arc<SandboxProvider>, rx: &mut UnboundedReceiver<ProviderEvent>) -> String {
    let c = p.create_checkout(&request("a1")).await.unwrap();
    p.pay(&c.checkout_id).unwrap();
    let EventKind::CheckoutCompleted { subscription_id: Some(sub_id), .. } = rx.try_recv().unwrap().kind else {
        panic!()
    };
    let _invoice_paid = rx.try_recv().unwrap();
    sub_id
}

const MONTH: u64 = 30 * 86_400;
const GRACE: i64 = 7 * 86_400;

#[tokio::test]
async fn at_period_end_a_subscription_with_a_card_is_charged_again_for_the_next_period() {
    let (p, mut rx, clock) = sandbox();
    let sub_id = paid_subscription(&p, &mut rx).await;
    clock.advance(std::time::Duration::from_secs(MONTH - 1));
    assert_eq!(p.renew_due(GRACE), 0, "nothing is due before the period ends");
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(p.renew_due(GRACE), 2);
    let EventKind::InvoicePaid(inv) = rx.try_recv().unwrap().kind else { panic!() };
    assert_eq!((inv.amount_paid, inv.period_start, inv.period_end), (9900, NOW + 30 * 86_400, NOW + 60 * 86_400));
    let EventKind::SubscriptionUpdated(sub) = rx.try_recv().unwrap().kind else { panic!() };
    assert_eq!((sub.status.as_str(), sub.current_period_end), ("active", Some(NOW + 60 * 86_400)));
    assert_eq!(p.renew_due(GRACE), 0, "renewing twice at the same time charges once");
    assert_eq!(p.invoices(sub.customer_id.as_deref().unwrap()).await.unwrap().len(), 2);
    assert_eq!(p.subscription(&sub_id).await.unwrap().current_period_end, Some(NOW + 60 * 86_400));
}

#[tokio::test]
async fn at_period_end_a_canceled_subscription_ends_without_a_charge() {
    let (p, mut rx, clock) = sandbox();
    let sub_id = paid_subscription(&p, &mut rx).await;
    p.cancel_at_period_end(&sub_id, "cancel-1").await.unwrap();
    let _updated = rx.try_recv().unwrap();
    clock.advance(std::time::Duration::from_secs(MONTH));
    assert_eq!(p.renew_due(GRACE), 1);
    let EventKind::SubscriptionDeleted(sub) = rx.try_recv().unwrap().kind else { panic!() };
    assert_eq!(sub.status, "canceled");
    assert_eq!(p.invoices(sub.customer_id.as_deref().unwrap()).await.unwrap().len(), 1, "no second invoice");
    clock.advance(std::time::Duration::from_secs(MONTH));
    assert_eq!(p.renew_due(GRACE), 0);
}

#[tokio::test]
async fn without_a_card_the_renewal_fails_goes_past_due_and_ends_after_the_grace_period() {
    let (p, mut rx, clock) = sandbox();
    let sub_id = paid_subscription(&p, &mut rx).await;
    let pm = p.subscription(&sub_id).await.unwrap().default_payment_method.unwrap();
    p.detach_payment_method(&pm).await.unwrap();
    clock.advance(std::time::Duration::from_secs(MONTH));
    assert_eq!(p.renew_due(GRACE), 2);
    let EventKind::InvoicePaymentFailed(inv) = rx.try_recv().unwrap().kind else { panic!() };
    assert_eq!((inv.amount_due, inv.amount_paid, inv.status.as_str()), (9900, 0, "open"));
    let EventKind::SubscriptionUpdated(sub) = rx.try_recv().unwrap().kind else { panic!() };
    assert_eq!(sub.status, "past_due");
    clock.advance(std::time::Duration::from_secs(GRACE as u64 - 1));
    assert_eq!(p.renew_due(GRACE), 0, "still within the grace period");
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(p.renew_due(GRACE), 1);
    let EventKind::SubscriptionDeleted(sub) = rx.try_recv().unwrap().kind else { panic!() };
    assert_eq!(sub.status, "canceled");
}
