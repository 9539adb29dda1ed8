//! Stripe's signed webhooks: the `Stripe-Signature` header and the event body.
//!
//! The header is `t=<unix seconds>,v1=<hex>[,v1=<hex>…]` (other schemes such as `v0` are
//! ignored). Each `v1` is HMAC-SHA256, keyed with the endpoint's signing secret, of
//! `"{t}.{raw body}"`; there are several while a secret is being rolled. The event is accepted
//! when one of them matches (compared in constant time) and `t` is within the tolerance of
//! the [`Clock`], which bounds how long a captured request can be replayed.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sextant_model::Clock;
use sha2::Sha256;

use super::stripe::{StripeCheckoutSession, StripeInvoice, StripeSubscription};
use super::{EventKind, ProviderEvent, Secret, WebhookError};

/// Stripe's own libraries' default.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// The header's name, as sent by Stripe.
pub const SIGNATURE_HEADER: &str = "Stripe-Signature";

/// Checks `header` against `payload` and returns the event it carries.
pub fn verify_and_parse(
    secret: &Secret,
    header: Option<&str>,
    payload: &[u8],
    clock: &Clock,
    tolerance: Duration,
) -> Result<ProviderEvent, WebhookError> {
    verify(secret, header, payload, clock, tolerance)?;
    parse_event(payload)
}

/// Signature and timestamp only.
pub fn verify(
    secret: &Secret,
    header: Option<&str>,
    payload: &[u8],
    clock: &Clock,
    tolerance: Duration,
) -> Result<(), WebhookError> {
    let header = header.ok_or(WebhookError::MissingSignature)?;
    let (timestamp, signatures) = parse_header(header)?;

    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    // Every candidate is checked (no early exit on the first mismatch), each in constant time.
    let mut matched = false;
    for sig in &signatures {
        matched |= mac.clone().verify_slice(sig).is_ok();
    }
    if !matched {
        return Err(WebhookError::SignatureMismatch);
    }

    let now = clock.now_secs();
    let tolerance_secs = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    if now.saturating_sub(timestamp).abs() > tolerance_secs {
        return Err(WebhookError::StaleTimestamp { timestamp, now, tolerance_secs });
    }
    Ok(())
}

/// `t` and the decoded `v1` signatures. A `v1` that is not hex cannot match and is dropped; a
/// header with no `t`, two `t`s, or no `v1` at all is malformed.
fn parse_header(header: &str) -> Result<(i64, Vec<Vec<u8>>), WebhookError> {
    let mut timestamp = None;
    let mut v1 = Vec::new();
    let mut any_v1 = false;
    for item in header.split(',') {
        let (key, value) =
            item.trim().split_once('=').ok_or(WebhookError::MalformedHeader("an item is not key=value"))?;
        match key {
            "t" => {
                if timestamp.is_some() {
                    return Err(WebhookError::MalformedHeader("more than one timestamp"));
                }
                timestamp = Some(
                    value.parse::<i64>().map_err(|_| WebhookError::MalformedHeader("timestamp is not an integer"))?,
                );
            }
            "v1" => {
                any_v1 = true;
                if let Ok(sig) = hex::decode(value) {
                    v1.push(sig);
                }
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(WebhookError::MalformedHeader("no timestamp"))?;
    if !any_v1 {
        return Err(WebhookError::MalformedHeader("no v1 signature"));
    }
    Ok((timestamp, v1))
}

#[derive(Deserialize)]
struct RawEvent {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    created: i64,
    data: RawData,
}

#[derive(Deserialize)]
struct RawData {
    object: serde_json::Value,
}

/// Reads a Stripe event body (already verified) into a [`ProviderEvent`].
pub fn parse_event(payload: &[u8]) -> Result<ProviderEvent, WebhookError> {
    let raw: RawEvent = serde_json::from_slice(payload).map_err(|e| WebhookError::Payload(e.to_string()))?;
    let object = raw.data.object;
    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value, what: &str) -> Result<T, WebhookError> {
        serde_json::from_value(v).map_err(|e| WebhookError::Payload(format!("{what}: {e}")))
    }
    let kind = match raw.event_type.as_str() {
        "checkout.session.completed" => {
            let s: StripeCheckoutSession = obj(object, "checkout session")?;
            EventKind::CheckoutCompleted {
                checkout_id: s.id,
                org_id: s.client_reference_id,
                customer_id: s.customer.map(|c| c.into_id()),
                subscription_id: s.subscription.map(|c| c.into_id()),
                metadata: s.metadata,
            }
        }
        "checkout.session.expired" => {
            let s: StripeCheckoutSession = obj(object, "checkout session")?;
            EventKind::CheckoutExpired { checkout_id: s.id, org_id: s.client_reference_id, metadata: s.metadata }
        }
        "invoice.paid" => EventKind::InvoicePaid(obj::<StripeInvoice>(object, "invoice")?.into()),
        "invoice.payment_failed" => EventKind::InvoicePaymentFailed(obj::<StripeInvoice>(object, "invoice")?.into()),
        "customer.subscription.updated" => {
            EventKind::SubscriptionUpdated(obj::<StripeSubscription>(object, "subscription")?.into())
        }
        "customer.subscription.deleted" => {
            EventKind::SubscriptionDeleted(obj::<StripeSubscription>(object, "subscription")?.into())
        }
        other => EventKind::Other { event_type: other.to_owned() },
    };
    Ok(ProviderEvent { id: raw.id, created: raw.created, kind })
}

/// The header Stripe would send for `payload` at `timestamp`: for tests and the fake server.
pub fn sign(secret: &Secret, timestamp: i64, payload: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    format!("t={timestamp},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::ManualClock;

    const NOW: i64 = 1_780_000_000;

    fn secret() -> Secret {
        Secret::new("whsec_test_secret")
    }

    fn clock() -> ManualClock {
        ManualClock::at_millis(NOW * 1000)
    }

    fn invoice_paid_body() -> Vec<u8> {
        serde_json::json!({
            "id": "evt_1", "object": "event", "type": "invoice.paid", "created": NOW - 5,
            "data": {"object": {
                "id": "in_1", "object": "invoice", "customer": "cus_1", "subscription": "sub_1",
                "amount_paid": 2900, "amount_due": 2900, "currency": "usd", "status": "paid",
                "period_start": NOW - 100, "period_end": NOW + 100, "created": NOW - 5,
                "lines": {"data": [{"period": {"start": NOW - 5, "end": NOW + 2_592_000}}]}
            }}
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_correctly_signed_event_is_accepted_and_read() {
        let body = invoice_paid_body();
        let header = sign(&secret(), NOW - 3, &body);
        let ev = verify_and_parse(&secret(), Some(&header), &body, &clock().clock(), DEFAULT_TOLERANCE).unwrap();
        assert_eq!(ev.id, "evt_1");
        assert_eq!(ev.created, NOW - 5);
        let EventKind::InvoicePaid(inv) = ev.kind else { panic!("{:?}", ev.kind) };
        assert_eq!(inv.id, "in_1");
        assert_eq!(inv.amount_paid, 2900);
        assert_eq!(inv.subscription_id.as_deref(), Some("sub_1"));
        // The service period is the subscription line's, not the invoice's own draft window.
        assert_eq!((inv.period_start, inv.period_end), (NOW - 5, NOW + 2_592_000));
    }

    #[test]
    fn a_forged_signature_or_other_secret_or_altered_body_is_refused() {
        let body = invoice_paid_body();
        let forged = format!("t={},v1={}", NOW, "ab".repeat(32));
        assert_eq!(
            verify(&secret(), Some(&forged), &body, &clock().clock(), DEFAULT_TOLERANCE),
            Err(WebhookError::SignatureMismatch)
        );
        let other = sign(&Secret::new("whsec_other"), NOW, &body);
        assert_eq!(
            verify(&secret(), Some(&other), &body, &clock().clock(), DEFAULT_TOLERANCE),
            Err(WebhookError::SignatureMismatch)
        );
        let header = sign(&secret(), NOW, &body);
        let mut altered = body.clone();
        altered.extend_from_slice(b" ");
        assert_eq!(
            verify(&secret(), Some(&header), &altered, &clock().clock(), DEFAULT_TOLERANCE),
            Err(WebhookError::SignatureMismatch)
        );
        // A genuine signature moved to another timestamp no longer matches.
        let sig = header.split_once(",v1=").unwrap().1;
        let moved = format!("t={},v1={sig}", NOW + 1);
        assert_eq!(
            verify(&secret(), Some(&moved), &body, &clock().clock(), DEFAULT_TOLERANCE),
            Err(WebhookError::SignatureMismatch)
        );
    }

    #[test]
    fn a_signature_older_than_the_tolerance_is_refused_until_then_accepted() {
        let body = invoice_paid_body();
        let header = sign(&secret(), NOW, &body);
        let clock = clock();
        clock.advance(Duration::from_secs(300));
        assert!(verify(&secret(), Some(&header), &body, &clock.clock(), DEFAULT_TOLERANCE).is_ok());
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            verify(&secret(), Some(&header), &body, &clock.clock(), DEFAULT_TOLERANCE),
            Err(WebhookError::StaleTimestamp { timestamp: NOW, now: NOW + 301, tolerance_secs: 300 })
        );
        // A tighter tolerance refuses earlier.
        let clock = self::clock();
        clock.advance(Duration::from_secs(11));
        assert!(matches!(
            verify(&secret(), Some(&header), &body, &clock.clock(), Duration::from_secs(10)),
            Err(WebhookError::StaleTimestamp { .. })
        ));
    }

    #[test]
    fn any_of_several_v1_signatures_may_match_while_a_secret_rolls() {
        let body = invoice_paid_body();
        let good = sign(&secret(), NOW, &body);
        let good_sig = good.split_once(",v1=").unwrap().1;
        let old = sign(&Secret::new("whsec_old"), NOW, &body);
        let old_sig = old.split_once(",v1=").unwrap().1;
        let header = format!("t={NOW},v1={old_sig},v0=deadbeef,v1={good_sig}");
        assert!(verify(&secret(), Some(&header), &body, &clock().clock(), DEFAULT_TOLERANCE).is_ok());
        let header = format!("t={NOW},v1=nothex,v1={good_sig}");
        assert!(verify(&secret(), Some(&header), &body, &clock().clock(), DEFAULT_TOLERANCE).is_ok());
        let header = format!("t={NOW},v1={old_sig},v1={old_sig}");
        assert_eq!(
            verify(&secret(), Some(&header), &body, &clock().clock(), DEFAULT_TOLERANCE),
            Err(WebhookError::SignatureMismatch)
        );
    }

    #[test]
    fn malformed_or_missing_headers_are_refused() {
        let body = invoice_paid_body();
        let c = clock().clock();
        let check = |h: Option<&str>| verify(&secret(), h, &body, &c, DEFAULT_TOLERANCE);
        assert_eq!(check(None), Err(WebhookError::MissingSignature));
        assert!(matches!(check(Some("")), Err(WebhookError::MalformedHeader(_))));
        assert!(matches!(check(Some("garbage")), Err(WebhookError::MalformedHeader(_))));
        assert!(matches!(check(Some("v1=abcd")), Err(WebhookError::MalformedHeader("no timestamp"))));
        assert!(matches!(check(Some(&format!("t={NOW}"))), Err(WebhookError::MalformedHeader("no v1 signature"))));
        assert!(matches!(check(Some("t=soon,v1=abcd")), Err(WebhookError::MalformedHeader(_))));
        assert!(matches!(check(Some(&format!("t={NOW},t={NOW},v1=ab"))), Err(WebhookError::MalformedHeader(_))));
    }

    #[test]
    fn the_event_types_billing_needs_are_read_and_others_kept_by_name() {
        let ev = parse_event(
            serde_json::json!({"id": "evt_2", "type": "checkout.session.completed", "created": 10,
                "data": {"object": {"id": "cs_1", "object": "checkout.session", "client_reference_id": "org_9",
                    "customer": "cus_1", "subscription": "sub_1", "metadata": {"plan": "pro"}}}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let EventKind::CheckoutCompleted { checkout_id, org_id, customer_id, subscription_id, metadata } = ev.kind
        else {
            panic!()
        };
        assert_eq!(checkout_id, "cs_1");
        assert_eq!(org_id.as_deref(), Some("org_9"));
        assert_eq!(customer_id.as_deref(), Some("cus_1"));
        assert_eq!(subscription_id.as_deref(), Some("sub_1"));
        assert_eq!(metadata.get("plan").map(String::as_str), Some("pro"));

        let ev = parse_event(
            serde_json::json!({"id": "evt_3", "type": "customer.subscription.updated", "created": 11,
                "data": {"object": {"id": "sub_1", "object": "subscription", "customer": {"id": "cus_1", "object": "customer"},
                    "status": "past_due", "cancel_at_period_end": true, "current_period_start": 100,
                    "current_period_end": 200, "default_payment_method": "pm_1", "metadata": {}}}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let EventKind::SubscriptionUpdated(sub) = ev.kind else { panic!() };
        assert_eq!(sub.customer_id.as_deref(), Some("cus_1"));
        assert_eq!(sub.status, "past_due");
        assert!(sub.cancel_at_period_end);
        assert_eq!(sub.current_period_end, Some(200));
        assert_eq!(sub.default_payment_method.as_deref(), Some("pm_1"));

        let ev = parse_event(br#"{"id":"evt_4","type":"customer.subscription.deleted","created":12,"data":{"object":{"id":"sub_1","status":"canceled"}}}"#).unwrap();
        assert!(matches!(ev.kind, EventKind::SubscriptionDeleted(ref s) if s.status == "canceled"));
        let ev = parse_event(br#"{"id":"evt_5","type":"invoice.payment_failed","created":13,"data":{"object":{"id":"in_2","amount_due":900,"amount_paid":0,"currency":"usd","status":"open","period_start":1,"period_end":2,"created":3}}}"#).unwrap();
        assert!(matches!(ev.kind, EventKind::InvoicePaymentFailed(ref i) if i.amount_due == 900 && i.period_end == 2));
        let ev = parse_event(br#"{"id":"evt_6","type":"charge.refunded","created":14,"data":{"object":{}}}"#).unwrap();
        assert_eq!(ev.kind, EventKind::Other { event_type: "charge.refunded".into() });
        assert!(matches!(parse_event(b"{not json"), Err(WebhookError::Payload(_))));
        assert!(matches!(
            parse_event(br#"{"id":"evt_7","type":"invoice.paid","created":1,"data":{"object":{"id":5}}}"#),
            Err(WebhookError::Payload(_))
        ));
    }
}
