//! The sandbox provider: its payment page served by the router, and the events "Pay" and
//! "Decline" produce, which must be the ones a Stripe webhook would have produced.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use sextant_model::ManualClock;
use sextant_router::billing::sandbox::{self, SandboxProvider};
use sextant_router::billing::{
    CheckoutRequest, EventKind, Interval, PaymentProvider, PlanPrice, ProviderEvent, RenewalRequest,
};
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

const MONTH: i64 = 30 * 86_400;

fn renewal(key: &str, card: Option<(u32, u32)>) -> RenewalRequest {
    RenewalRequest {
        org_id: "org_1".into(),
        subscription_id: "sub_sbx_1".into(),
        customer_id: Some("cus_sbx_1".into()),
        card: card.map(|(month, year)| ("pm_sbx_1".to_owned(), month, year)),
        price: request("a1").price,
        period_start: NOW + MONTH,
        period_end: NOW + 2 * MONTH,
        idempotency_key: key.into(),
    }
}

#[tokio::test]
async fn a_renewal_is_charged_to_the_card_on_file_once_per_key() {
    let (p, _rx, _clock) = sandbox();
    // NOW + MONTH is in 2026-06; a card valid through that month pays.
    let first = p.charge_renewal(&renewal("sextant-renewal-k1", Some((6, 2026)))).await.unwrap();
    assert_eq!((first.status.as_str(), first.amount_paid, first.amount_due), ("paid", 9900, 9900));
    assert_eq!((first.period_start, first.period_end), (NOW + MONTH, NOW + 2 * MONTH));
    assert_eq!(first.subscription_id.as_deref(), Some("sub_sbx_1"));
    // The same key (another router, a retry) answers the same invoice, even if declining now.
    p.set_decline_renewals(true);
    assert_eq!(p.charge_renewal(&renewal("sextant-renewal-k1", Some((6, 2026)))).await.unwrap(), first);
    // Another sandbox (another router's) derives the same invoice id from the key.
    let (other, _rx2, _c2) = sandbox();
    assert_eq!(other.charge_renewal(&renewal("sextant-renewal-k1", Some((6, 2026)))).await.unwrap().id, first.id);
}

#[tokio::test]
async fn a_renewal_without_a_valid_card_or_set_to_decline_is_an_unpaid_invoice() {
    let (p, _rx, _clock) = sandbox();
    for (key, card) in [("sextant-renewal-none", None), ("sextant-renewal-expired", Some((5, 2026)))] {
        let inv = p.charge_renewal(&renewal(key, card)).await.unwrap();
        assert_eq!((inv.status.as_str(), inv.amount_paid, inv.amount_due), ("open", 0, 9900), "{key}");
    }
    p.set_decline_renewals(true);
    let inv = p.charge_renewal(&renewal("sextant-renewal-declined", Some((12, 2030)))).await.unwrap();
    assert_eq!(inv.status, "open");
    p.set_decline_renewals(false);
    let inv = p.charge_renewal(&renewal("sextant-renewal-next", Some((12, 2030)))).await.unwrap();
    assert_eq!(inv.status, "paid");
}
