//! The payment provider as `sextant dev` configures it: the sandbox's pages are served by
//! default; Stripe replaces them, needs both secret files, and never prints them.

use std::process::{Command, Stdio};

use crate::common::*;

#[tokio::test]
async fn dev_serves_the_sandbox_payment_pages_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start(dir.path()).await;
    let resp = http().get(format!("{}/billing/sandbox/checkout/cs_sbx_unknown", dev.url)).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    // The sandbox's own page, not the API's JSON "no such endpoint".
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(resp.text().await.unwrap().contains("No such sandbox checkout"));
}

#[tokio::test]
async fn with_stripe_the_sandbox_pages_are_gone_and_the_secrets_stay_out_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let key = dir.path().join("stripe.key");
    let whsec = dir.path().join("stripe.whsec");
    std::fs::write(&key, "sk_test_never_logged_1234\n").unwrap();
    std::fs::write(&whsec, "whsec_never_logged_5678\n").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let dev = Dev::start_with(
        &data,
        &[
            "--billing-provider",
            "stripe",
            "--stripe-secret-key-file",
            key.to_str().unwrap(),
            "--stripe-webhook-secret-file",
            whsec.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let resp = http().get(format!("{}/billing/sandbox/checkout/cs_sbx_unknown", dev.url)).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let log = std::fs::read_to_string(data.join("dev.log")).unwrap();
    assert!(!log.contains("never_logged"), "a secret reached the log");
}

#[test]
fn stripe_without_its_webhook_secret_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("stripe.key");
    std::fs::write(&key, "sk_test_never_logged_1234").unwrap();
    let out = Command::new(BIN)
        .args(["dev", "--data-dir", dir.path().to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--internal-listen", "127.0.0.1:0", "--billing-provider", "stripe"])
        .args(["--stripe-secret-key-file", key.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("--stripe-webhook-secret-file"), "{text}");
    assert!(!text.contains("never_logged"), "{text}");
}

#[test]
fn a_stripe_router_without_a_dashboard_origin_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("stripe.key");
    let whsec = dir.path().join("stripe.whsec");
    std::fs::write(&key, "sk_test_never_logged_1234").unwrap();
    std::fs::write(&whsec, "whsec_never_logged_5678").unwrap();
    let out = Command::new(BIN)
        .args(["router", "--nodes", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0"])
        .args(["--otlp-grpc-listen", "127.0.0.1:0", "--cluster-secret", "s", "--jwt-secret", &"j".repeat(32)])
        .args(["--billing-provider", "stripe", "--stripe-secret-key-file", key.to_str().unwrap()])
        .args(["--stripe-webhook-secret-file", whsec.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("--dashboard-origin"), "{text}");
    assert!(!text.contains("never_logged"), "{text}");
}

// ---- Subscriptions end to end: a storage node and a router in this process, on a manual
// clock, so that periods and trials end without sleeping. ----

mod stack {
    use std::time::Duration;

    use serde_json::{json, Value};
    use sextant_model::ManualClock;
    use sextant_router::billing::{BillingConfig, ProviderConfig};
    use sextant_router::{RouterConfig, RunningRouter};

    use crate::common::{
        http, in_process_router_config, manual_clock_at_now, start_in_process_node, start_in_process_router, wait_for,
    };

    pub struct Stack {
        pub router: RunningRouter,
        pub clock: ManualClock,
        pub url: String,
        _node: sextant_node::host::RunningNode,
        _dir: tempfile::TempDir,
    }

    pub const DAY: Duration = Duration::from_secs(86_400);
    const SECRET: &str = "billing-test-cluster-secret-0123456789";

    async fn start_router(node: String, clock: &ManualClock, provider: ProviderConfig) -> RunningRouter {
        let jwt = b"billing-test-jwt-secret-0123456789abcdef";
        start_in_process_router(RouterConfig {
            billing: BillingConfig { provider, public_url: None, lifecycle_period: Some(Duration::from_millis(50)) },
            ..in_process_router_config(node, SECRET, jwt, clock.clock())
        })
        .await
    }

    impl Stack {
        pub async fn start(provider: ProviderConfig) -> Stack {
            let dir = tempfile::tempdir().unwrap();
            let clock = manual_clock_at_now();
            let node = start_in_process_node(dir.path(), SECRET, 10_000).await;
            let router = start_router(node.addr.to_string(), &clock, provider).await;
            let url = format!("http://{}", router.addr);
            let now = clock.clock().now_millis();
            sextant_router::identity::bootstrap::bootstrap(&router.state.cluster, &url, "enterprise", now)
                .await
                .unwrap();
            Stack { router, clock, url, _node: node, _dir: dir }
        }

        /// Another router of the same cluster, on the same clock.
        pub async fn another_router(&self, provider: ProviderConfig) -> RunningRouter {
            start_router(self._node.addr.to_string(), &self.clock, provider).await
        }

        /// A new org (on its 14-day `pro` trial) and its owner's access token.
        pub async fn signup(&self, email: &str) -> (Value, String) {
            let resp = http()
                .post(format!("{}/auth/signup", self.url))
                .json(&json!({"email": email, "password": "correct horse battery", "name": "Ada", "org_name": "Acme"}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 201);
            let body: Value = resp.json().await.unwrap();
            let token = body["access_token"].as_str().unwrap().to_owned();
            (body, token)
        }

        /// A fresh access token (the clock may have moved past the old one's expiry).
        pub async fn login(&self, email: &str) -> String {
            crate::common::login(&self.url, email, "correct horse battery").await
        }

        pub async fn get(&self, token: &str, path: &str) -> (u16, Value) {
            let resp = http().get(format!("{}{path}", self.url)).bearer_auth(token).send().await.unwrap();
            (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
        }

        pub async fn send(
            &self,
            method: reqwest::Method,
            token: &str,
            path: &str,
            body: Option<Value>,
        ) -> (u16, Value) {
            let mut req = http().request(method, format!("{}{path}", self.url)).bearer_auth(token);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = req.send().await.unwrap();
            (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
        }

        pub fn advance(&self, by: Duration) {
            self.clock.advance(by);
        }

        /// Waits until `GET /billing/status` satisfies `f` (the lifecycle runs every 50 ms and
        /// the router's meta view refreshes every second).
        pub async fn wait_status(&self, token: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
            wait_for(what, Duration::from_secs(20), || async {
                let (code, body) = self.get(token, "/billing/status").await;
                (code == 200 && f(&body)).then_some(body)
            })
            .await
        }
    }
}

use reqwest::Method;
use serde_json::{json, Value};
use sextant_router::billing::ProviderConfig;
use stack::{Stack, DAY};

/// Subscribes to `plan` and pays on the sandbox's page; returns the active status.
async fn subscribe_and_pay(s: &Stack, token: &str, plan: &str) -> Value {
    let (code, checkout) = s.send(Method::POST, token, "/billing/subscribe", Some(json!({"plan": plan}))).await;
    assert_eq!(code, 200, "{checkout}");
    let url = checkout["payment_url"].as_str().unwrap();
    assert!(checkout["checkout_id"].as_str().unwrap().starts_with("cs_sbx_"));
    assert!(url.starts_with(&s.url) && url.ends_with(checkout["checkout_id"].as_str().unwrap()), "{url}");
    let page = http().get(url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("id=\"pay\""));
    let paid = http().post(format!("{url}/pay")).send().await.unwrap();
    assert_eq!(paid.status(), 200);
    s.wait_status(token, "the paid subscription", |b| b["plan"] == plan && b["status"] == "active").await
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort();
    k
}

#[tokio::test]
async fn sandbox_subscription_is_active_until_cancelled_then_free_at_period_end() {
    let s = Stack::start(ProviderConfig::Sandbox).await;
    let email = "owner@acme.test";
    let (_, token) = s.signup(email).await;

    let (code, trial) = s.get(&token, "/billing/status").await;
    assert_eq!(code, 200);
    assert_eq!((trial["plan"].as_str(), trial["status"].as_str()), (Some("pro"), Some("trialing")));
    assert_eq!(trial["auto_renew"], false);
    assert_eq!(s.get(&token, "/billing/payment-method").await.0, 404);

    let active = subscribe_and_pay(&s, &token, "growth").await;
    assert_eq!(
        keys(&active),
        [
            "auto_renew",
            "current_period_end",
            "current_period_start",
            "grace_until",
            "limits",
            "payment_method",
            "plan",
            "provider",
            "status",
            "usage"
        ]
    );
    assert_eq!(active["auto_renew"], true);
    assert_eq!(active["provider"], "sandbox");
    assert_eq!(active["limits"]["monthly_events"], 50_000_000);
    assert_eq!(active["limits"]["retention_days"], 90);
    assert_eq!(active["limits"]["features"], json!(["retention"]));
    assert_eq!(
        keys(&active["usage"]),
        ["events_used", "percentage", "period_end", "period_start", "used_bytes", "used_gb"]
    );
    let end = active["current_period_end"].as_str().unwrap().to_owned();
    let (_, usage) = s.get(&token, "/api/v1/usage").await;
    assert_eq!((usage["plan"].as_str(), usage["in_trial"].as_bool()), (Some("growth"), Some(false)), "paid: no trial");
    assert!(end.ends_with('Z') && end.contains('.'), "RFC 3339 with milliseconds: {end}");

    let (code, card) = s.get(&token, "/billing/payment-method").await;
    assert_eq!(code, 200);
    assert_eq!(
        card,
        json!({"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": card["exp_year"], "auto_renew": true})
    );

    let (code, history) = s.get(&token, "/billing/history").await;
    assert_eq!(code, 200);
    assert_eq!(history["next_cursor"], Value::Null);
    let items = history["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(
        keys(&items[0]),
        ["amount_cents", "created_at", "currency", "id", "period_end", "period_start", "plan", "status"]
    );
    assert_eq!((items[0]["plan"].as_str(), items[0]["amount_cents"].as_i64()), (Some("growth"), Some(9_900)));
    assert_eq!((items[0]["status"].as_str(), items[0]["currency"].as_str()), (Some("paid"), Some("usd")));
    assert_eq!(items[0]["period_end"], active["current_period_end"]);

    // A second subscription while this one renews is refused.
    let (code, err) = s.send(Method::POST, &token, "/billing/subscribe", Some(json!({"plan": "business"}))).await;
    assert_eq!((code, err["error"]["code"].as_str()), (409, Some("subscription_active")));

    let (code, canceled) = s.send(Method::POST, &token, "/billing/cancel", None).await;
    assert_eq!(code, 200, "{canceled}");
    assert_eq!((canceled["status"].as_str(), canceled["auto_renew"].as_bool()), (Some("canceled"), Some(false)));
    assert_eq!(canceled["plan"], "growth", "kept to the end of the period");
    assert_eq!(canceled["current_period_end"].as_str(), Some(end.as_str()));
    let (code, again) = s.send(Method::POST, &token, "/billing/cancel", None).await;
    assert_eq!((code, again["status"].as_str()), (200, Some("canceled")), "cancelling twice is harmless");

    // The trial (14 days) and the period (30 days) both end; the org is on free.
    s.advance(DAY * 31);
    let token = s.login(email).await;
    let free = s.wait_status(&token, "the downgrade to free", |b| b["plan"] == "free").await;
    assert_eq!((free["status"].as_str(), free["current_period_end"].as_str()), (Some("active"), None));
    assert_eq!(free["limits"]["monthly_gb"], 1.0);
    let (code, err) = s.get(&token, "/api/retention?start_event=a&return_event=b").await;
    assert_eq!((code, err["error"]["code"].as_str()), (403, Some("plan_feature_unavailable")));
    let (_, usage) = s.get(&token, "/api/v1/usage").await;
    assert_eq!((usage["plan"].as_str(), usage["in_trial"].as_bool()), (Some("free"), Some(false)));
    assert_eq!(s.send(Method::POST, &token, "/billing/cancel", None).await.0, 404, "nothing left to cancel");
}

#[tokio::test]
async fn a_declined_checkout_changes_nothing_and_the_trial_ends_into_free() {
    let s = Stack::start(ProviderConfig::Sandbox).await;
    let email = "decline@acme.test";
    let (_, token) = s.signup(email).await;
    let (code, checkout) = s.send(Method::POST, &token, "/billing/subscribe", Some(json!({"plan": "business"}))).await;
    assert_eq!(code, 200);
    let url = checkout["payment_url"].as_str().unwrap();
    let declined = http().post(format!("{url}/decline")).send().await.unwrap();
    assert_eq!(declined.status(), 200);
    assert!(declined.text().await.unwrap().contains("Declined"));
    assert_eq!(
        http().post(format!("{url}/pay")).send().await.unwrap().status(),
        409,
        "a declined checkout cannot be paid"
    );

    let (_, status) = s.get(&token, "/billing/status").await;
    assert_eq!((status["plan"].as_str(), status["status"].as_str()), (Some("pro"), Some("trialing")));
    assert_eq!(s.get(&token, "/billing/history").await.1["items"], json!([]));
    assert_eq!(s.get(&token, "/billing/payment-method").await.0, 404);
    // Retention analytics are a growth feature: not in the pro trial either.
    let (code, _) = s.get(&token, "/api/retention?start_event=a&return_event=b").await;
    assert_eq!(code, 403);

    // Unknown and unpriced plans.
    let (code, err) = s.send(Method::POST, &token, "/billing/subscribe", Some(json!({"plan": "platinum"}))).await;
    assert_eq!((code, err["error"]["code"].as_str()), (400, Some("invalid_plan")));
    let (code, err) = s.send(Method::POST, &token, "/billing/subscribe", Some(json!({"plan": "free"}))).await;
    assert_eq!((code, err["error"]["code"].as_str()), (400, Some("plan_not_purchasable")));
    let (code, _) = s.send(Method::POST, &token, "/billing/subscribe", Some(json!({"planx": 1}))).await;
    assert_eq!(code, 400);

    s.advance(DAY * 14);
    let token = s.login(email).await;
    let free = s.wait_status(&token, "the end of the trial", |b| b["plan"] == "free").await;
    assert_eq!(free["status"], "active");
    let (_, usage) = s.get(&token, "/api/v1/usage").await;
    assert_eq!((usage["plan"].as_str(), usage["trial_days_left"].as_i64()), (Some("free"), Some(0)));
}

#[tokio::test]
async fn renewals_charge_each_period_once_and_a_declined_renewal_downgrades_after_the_grace() {
    let s = Stack::start(ProviderConfig::Sandbox).await;
    let email = "renew@acme.test";
    let (_, token) = s.signup(email).await;
    let first = subscribe_and_pay(&s, &token, "growth").await;

    s.advance(DAY * 30);
    let token = s.login(email).await;
    let renewed =
        s.wait_status(&token, "the renewal", |b| b["current_period_start"] == first["current_period_end"]).await;
    assert_eq!((renewed["plan"].as_str(), renewed["status"].as_str()), (Some("growth"), Some("active")));
    let (_, history) = s.get(&token, "/billing/history").await;
    let items = history["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "one charge for the new period: {history}");
    assert_eq!(items[0]["period_start"], first["current_period_end"], "newest first");
    assert_eq!(items[0]["status"], "paid");

    // The next charge is declined: past due, plan kept for the 7-day grace, then free.
    s.router.state.billing.sandbox().unwrap().set_decline_renewals(true);
    s.advance(DAY * 30);
    let token = s.login(email).await;
    let past_due = s.wait_status(&token, "the failed renewal", |b| b["status"] == "past_due").await;
    assert_eq!(past_due["plan"], "growth");
    assert!(past_due["grace_until"].is_string());
    let (_, history) = s.get(&token, "/billing/history").await;
    assert_eq!(history["items"][0]["status"], "failed");
    assert_eq!(history["items"].as_array().unwrap().len(), 3);

    s.advance(DAY * 7);
    let token = s.login(email).await;
    s.wait_status(&token, "the downgrade after the grace period", |b| b["plan"] == "free").await;
    let (_, history) = s.get(&token, "/billing/history").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 3, "nothing more is charged");
}

#[tokio::test]
async fn two_routers_running_the_lifecycle_charge_and_end_each_period_once() {
    let s = Stack::start(ProviderConfig::Sandbox).await;
    let second = s.another_router(ProviderConfig::Sandbox).await;
    let email = "two@acme.test";
    let (_, token) = s.signup(email).await;
    let first = subscribe_and_pay(&s, &token, "business").await;

    // Both routers see the period end and both charge it, each through its own sandbox,
    // with the same key per org and period.
    let mut previous = first;
    for round in 1..=3 {
        s.advance(DAY * 30);
        let token = s.login(email).await;
        let renewed =
            s.wait_status(&token, "the renewal", |b| b["current_period_start"] == previous["current_period_end"]).await;
        // More passes of both routers' lifecycles over the same period change nothing.
        for _ in 0..3 {
            s.router.state.cluster.refresh_meta().await.unwrap();
            sextant_router::billing::lifecycle::run_once(&s.router.state).await;
            sextant_router::billing::lifecycle::run_once(&second.state).await;
        }
        let (_, history) = s.get(&token, "/billing/history").await;
        let items = history["items"].as_array().unwrap();
        assert_eq!(items.len(), round + 1, "round {round}: {history}");
        let ids: std::collections::BTreeSet<&str> = items.iter().map(|p| p["id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), items.len(), "no payment twice");
        assert_eq!(items[0]["period_start"], renewed["current_period_start"]);
        let (_, now) = s.get(&token, "/billing/status").await;
        assert_eq!(now["current_period_end"], renewed["current_period_end"], "one period per renewal");
        previous = renewed;
    }
    let token = s.login(email).await;

    // Cancelled through the second router, ended once by whichever gets there first.
    let resp = http().post(format!("http://{}/billing/cancel", second.addr)).bearer_auth(&token).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    s.advance(DAY * 31);
    let token = s.login(email).await;
    s.wait_status(&token, "the end of the canceled subscription", |b| b["plan"] == "free").await;
    let (_, history) = s.get(&token, "/billing/history").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 4, "nothing charged after the cancel");
}

#[tokio::test]
async fn unlinking_the_card_turns_auto_renew_off_and_changes_are_the_owners() {
    let s = Stack::start(ProviderConfig::Sandbox).await;
    let (_, token) = s.signup("cards@acme.test").await;
    subscribe_and_pay(&s, &token, "pro").await;

    // A member of the org reads but cannot change billing.
    let (code, invite) =
        s.send(Method::POST, &token, "/api/org/members", Some(json!({"email": "m@acme.test", "role": "admin"}))).await;
    assert_eq!(code, 201, "{invite}");
    let accepted = http()
        .post(format!("{}/auth/invite/accept", s.url))
        .json(&json!({"invite_token": invite["invite_token"], "password": "correct horse battery", "name": "M"}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    let admin: Value = accepted.json().await.unwrap();
    let admin = admin["access_token"].as_str().unwrap();
    assert_eq!(s.get(admin, "/billing/status").await.0, 200);
    assert_eq!(s.get(admin, "/billing/history").await.0, 200);
    for (method, path, body) in [
        (Method::POST, "/billing/subscribe", Some(json!({"plan": "growth"}))),
        (Method::POST, "/billing/cancel", None),
        (Method::DELETE, "/billing/payment-method", None),
    ] {
        let (code, err) = s.send(method, admin, path, body).await;
        assert_eq!((code, err["error"]["code"].as_str()), (403, Some("owner_only")), "{path}");
    }
    assert_eq!(s.get(&token, "/billing/status").await.1["auto_renew"], true);

    let (code, removed) = s.send(Method::DELETE, &token, "/billing/payment-method", None).await;
    assert_eq!(code, 200, "{removed}");
    assert_eq!((removed["last4"].as_str(), removed["auto_renew"].as_bool()), (Some("4242"), Some(false)));
    let status = s.wait_status(&token, "auto-renew off", |b| b["auto_renew"] == false).await;
    assert_eq!((status["plan"].as_str(), status["status"].as_str()), (Some("pro"), Some("canceled")));
    assert_eq!(status["payment_method"], Value::Null);
    assert_eq!(s.get(&token, "/billing/payment-method").await.0, 404);
    assert_eq!(s.send(Method::DELETE, &token, "/billing/payment-method", None).await.0, 404);
    assert_eq!(s.get(&token, "/billing/history").await.1["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn without_a_provider_changes_answer_billing_not_configured_and_reads_still_work() {
    let s = Stack::start(ProviderConfig::Disabled).await;
    let (_, token) = s.signup("none@acme.test").await;
    let (code, status) = s.get(&token, "/billing/status").await;
    assert_eq!(code, 200);
    assert_eq!((status["status"].as_str(), status["provider"].clone()), (Some("trialing"), Value::Null));
    assert_eq!(s.get(&token, "/billing/history").await, (200, json!({"items": [], "next_cursor": null})));
    for (method, path, body) in [
        (Method::POST, "/billing/subscribe", Some(json!({"plan": "growth"}))),
        (Method::POST, "/billing/cancel", None),
        (Method::DELETE, "/billing/payment-method", None),
        (Method::POST, "/billing/provider/webhook", Some(json!({}))),
    ] {
        let resp = http().request(method, format!("{}{path}", s.url)).bearer_auth(&token);
        let resp = match body {
            Some(b) => resp.json(&b),
            None => resp,
        };
        let resp = resp.send().await.unwrap();
        assert_eq!(resp.status(), 503, "{path}");
        assert!(resp.headers().contains_key("retry-after"));
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["code"], "billing_not_configured", "{path}");
    }
    // The lifecycle still ends the trial.
    s.advance(DAY * 15);
    let token = s.login("none@acme.test").await;
    s.wait_status(&token, "the end of the trial", |b| b["plan"] == "free").await;
}

/// A fake Stripe answering what the webhook path reads (the subscription and its card) and
/// what cancel and subscribe send; records each request's method, path and idempotency key.
mod fake_stripe {
    use std::sync::{Arc, Mutex};

    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, Method};
    use axum::routing::{get, post};
    use axum::{Json, Router};
    use serde_json::{json, Value};

    #[derive(Clone, Default)]
    pub struct Seen(pub Arc<Mutex<Vec<(String, String, Option<String>)>>>);

    fn subscription(id: &str, cancel: bool, now: i64) -> Value {
        json!({"id": id, "object": "subscription", "customer": "cus_1", "status": "active",
            "cancel_at_period_end": cancel, "current_period_start": now,
            "current_period_end": now + 30 * 86_400, "default_payment_method": "pm_1", "metadata": {}})
    }

    fn record(seen: &Seen, method: Method, path: String, headers: &HeaderMap) {
        let key = headers.get("idempotency-key").map(|v| v.to_str().unwrap().to_owned());
        seen.0.lock().unwrap().push((method.to_string(), path, key));
    }

    /// Serves on a free port; `now` is the Unix second periods start at.
    pub async fn start(now: i64) -> (String, Seen) {
        let seen = Seen::default();
        let app = Router::new()
            .route(
                "/v1/subscriptions/{id}",
                get(move |State(seen): State<Seen>, Path(id): Path<String>, h: HeaderMap| async move {
                    record(&seen, Method::GET, format!("/v1/subscriptions/{id}"), &h);
                    Json(subscription(&id, false, now))
                })
                .post(
                    move |State(seen): State<Seen>, Path(id): Path<String>, h: HeaderMap| async move {
                        record(&seen, Method::POST, format!("/v1/subscriptions/{id}"), &h);
                        Json(subscription(&id, true, now))
                    },
                ),
            )
            .route(
                "/v1/payment_methods/{id}",
                get(|State(seen): State<Seen>, Path(id): Path<String>, h: HeaderMap| async move {
                    record(&seen, Method::GET, format!("/v1/payment_methods/{id}"), &h);
                    Json(json!({"id": id, "object": "payment_method",
                        "card": {"brand": "mastercard", "last4": "4444", "exp_month": 3, "exp_year": 2031}}))
                }),
            )
            .route(
                "/v1/payment_methods/{id}/detach",
                post(|State(seen): State<Seen>, Path(id): Path<String>, h: HeaderMap| async move {
                    record(&seen, Method::POST, format!("/v1/payment_methods/{id}/detach"), &h);
                    Json(json!({"id": id, "object": "payment_method",
                        "card": {"brand": "mastercard", "last4": "4444", "exp_month": 3, "exp_year": 2031}}))
                }),
            )
            .route(
                "/v1/checkout/sessions",
                post(|State(seen): State<Seen>, h: HeaderMap| async move {
                    record(&seen, Method::POST, "/v1/checkout/sessions".into(), &h);
                    Json(json!({"id": "cs_test_1", "object": "checkout.session",
                        "url": "https://checkout.stripe.test/c/cs_test_1"}))
                }),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}"), seen)
    }
}

#[tokio::test]
async fn stripe_webhooks_are_verified_applied_once_and_in_the_order_they_happened() {
    use sextant_router::billing::stripe::StripeConfig;
    use sextant_router::billing::{webhook, Secret};

    let now_secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (api_base, seen) = fake_stripe::start(now_secs).await;
    let whsec = Secret::new("whsec_e2e_secret");
    let mut config = StripeConfig::new(Secret::new("sk_test_e2e"), whsec.clone());
    config.api_base = api_base;
    config.max_retries = 0;
    let s = Stack::start(ProviderConfig::Stripe(config)).await;
    let (signup, token) = s.signup("stripe@acme.test").await;
    let org = signup["org"]["id"].as_str().unwrap().to_owned();

    let (code, checkout) = s.send(Method::POST, &token, "/billing/subscribe", Some(json!({"plan": "growth"}))).await;
    assert_eq!(code, 200, "{checkout}");
    assert_eq!(
        checkout,
        json!({"payment_url": "https://checkout.stripe.test/c/cs_test_1", "checkout_id": "cs_test_1"})
    );

    let deliver = |body: Value, forged: bool| {
        let url = format!("{}/billing/provider/webhook", s.url);
        let payload = body.to_string();
        let t = s.clock.clock().now_secs();
        let header = if forged {
            webhook::sign(&Secret::new("whsec_forged"), t, payload.as_bytes())
        } else {
            webhook::sign(&whsec, t, payload.as_bytes())
        };
        async move {
            let resp = http()
                .post(url)
                .header("Stripe-Signature", header)
                .header("content-type", "application/json")
                .body(payload)
                .send()
                .await
                .unwrap();
            let code = resp.status().as_u16();
            (code, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let event = |id: &str, kind: &str, created: i64, object: Value| json!({"id": id, "object": "event", "type": kind, "created": created, "data": {"object": object}});
    let invoice = json!({"id": "in_1", "object": "invoice", "customer": "cus_1", "subscription": "sub_1",
        "amount_paid": 9900, "amount_due": 9900, "currency": "usd", "status": "paid",
        "period_start": now_secs, "period_end": now_secs, "created": now_secs,
        "lines": {"data": [{"period": {"start": now_secs, "end": now_secs + 30 * 86_400}}]}});
    let paid = event("evt_paid", "invoice.paid", now_secs, invoice);
    let completed = event(
        "evt_completed",
        "checkout.session.completed",
        now_secs,
        json!({"id": "cs_test_1", "object": "checkout.session", "client_reference_id": org,
            "customer": "cus_1", "subscription": "sub_1", "metadata": {"org_id": org, "plan": "growth"}}),
    );

    // The invoice arrives before the checkout it follows: refused, so Stripe sends it again.
    let (code, err) = deliver(paid.clone(), false).await;
    assert_eq!((code, err["error"]["code"].as_str()), (409, Some("billing_event_unmatched")));
    // Forged, or not signed at all: 400, nothing applied.
    let (code, err) = deliver(completed.clone(), true).await;
    assert_eq!((code, err["error"]["code"].as_str()), (400, Some("invalid_signature")));
    let unsigned =
        http().post(format!("{}/billing/provider/webhook", s.url)).body(completed.to_string()).send().await.unwrap();
    assert_eq!(unsigned.status(), 400);
    assert_eq!(s.get(&token, "/billing/status").await.1["status"], "trialing");

    assert_eq!(deliver(completed.clone(), false).await, (200, json!({"received": true})));
    let active = s.wait_status(&token, "the Stripe subscription", |b| b["status"] == "active").await;
    assert_eq!((active["plan"].as_str(), active["provider"].as_str()), (Some("growth"), Some("stripe")));
    assert_eq!(active["payment_method"]["last4"], "4444", "the card read from Stripe");
    // Redelivered: now it applies, once however often it comes.
    for _ in 0..3 {
        assert_eq!(deliver(paid.clone(), false).await.0, 200);
        assert_eq!(deliver(completed.clone(), false).await.0, 200);
    }
    let (_, history) = s.get(&token, "/billing/history").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 1, "{history}");
    assert_eq!(history["items"][0]["plan"], "growth");

    // Cancel: Stripe is told (with an idempotency key), then a newer update and an older one.
    let (code, canceled) = s.send(Method::POST, &token, "/billing/cancel", None).await;
    assert_eq!((code, canceled["status"].as_str()), (200, Some("canceled")));
    let cancel_call =
        seen.0.lock().unwrap().iter().find(|(m, p, _)| m == "POST" && p == "/v1/subscriptions/sub_1").cloned();
    assert!(cancel_call.unwrap().2.unwrap().starts_with("sextant-cancel_at_period_end-"));
    let sub = |cancel: bool| {
        json!({"id": "sub_1", "object": "subscription", "customer": "cus_1", "status": "active",
            "cancel_at_period_end": cancel, "current_period_start": now_secs,
            "current_period_end": now_secs + 30 * 86_400, "metadata": {}})
    };
    let newer = event("evt_upd_new", "customer.subscription.updated", now_secs + 20, sub(true));
    let older = event("evt_upd_old", "customer.subscription.updated", now_secs + 10, sub(false));
    assert_eq!(deliver(newer, false).await.0, 200);
    assert_eq!(deliver(older, false).await.0, 200);
    let (_, status) = s.get(&token, "/billing/status").await;
    assert_eq!((status["status"].as_str(), status["auto_renew"].as_bool()), (Some("canceled"), Some(false)));

    // Unlinking the card detaches it at Stripe, once, with an idempotency key.
    let (code, removed) = s.send(Method::DELETE, &token, "/billing/payment-method", None).await;
    assert_eq!((code, removed["last4"].as_str()), (200, Some("4444")));
    let detaches: Vec<_> = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == "/v1/payment_methods/pm_1/detach")
        .cloned()
        .collect();
    assert_eq!(detaches.len(), 1);
    assert!(detaches[0].2.as_deref().unwrap().starts_with("sextant-detach_payment_method-"));
    s.wait_status(&token, "the card gone", |b| b["payment_method"].is_null()).await;

    let mut deleted_sub = sub(true);
    deleted_sub["status"] = json!("canceled");
    let deleted = event("evt_deleted", "customer.subscription.deleted", now_secs + 30, deleted_sub);
    assert_eq!(deliver(deleted, false).await.0, 200);
    s.wait_status(&token, "the end of the Stripe subscription", |b| b["plan"] == "free").await;
}

#[tokio::test]
async fn a_paid_subscription_survives_a_kill_and_restart_of_dev() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let mut dev = Dev::start(dir.path()).await;

    // A signed-up org buys a plan on the sandbox page.
    let email = "restart@acme.test";
    let resp = http()
        .post(format!("{}/auth/signup", dev.url))
        .json(&json!({"email": email, "password": "correct horse battery", "name": "R", "org_name": "R"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let token: Value = resp.json().await.unwrap();
    let token = token["access_token"].as_str().unwrap().to_owned();
    let resp = http()
        .post(format!("{}/billing/subscribe", dev.url))
        .bearer_auth(&token)
        .json(&json!({"plan": "business"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let checkout: Value = resp.json().await.unwrap();
    let url = checkout["payment_url"].as_str().unwrap();
    assert_eq!(http().post(format!("{url}/pay")).send().await.unwrap().status(), 200);
    let status = |url: String, token: String| async move {
        let resp = http().get(format!("{url}/billing/status")).bearer_auth(token).send().await.unwrap();
        resp.json::<Value>().await.unwrap()
    };
    let before = wait_for("the paid subscription", std::time::Duration::from_secs(20), || {
        let (u, t) = (dev.url.clone(), token.clone());
        async move { Some(status(u, t).await).filter(|s| s["status"] == "active" && s["plan"] == "business") }
    })
    .await;
    // The sandbox delivers the payment as its own event after the subscription's: both must be
    // stored before the kill (the in-memory sandbox does not deliver them again afterwards).
    wait_for("the payment in the history", std::time::Duration::from_secs(20), || {
        let (u, t) = (dev.url.clone(), token.clone());
        async move {
            let resp = http().get(format!("{u}/billing/history")).bearer_auth(t).send().await.ok()?;
            let history: Value = resp.json().await.ok()?;
            (history["items"].as_array()?.len() == 1).then_some(())
        }
    })
    .await;

    dev.proc.kill();
    let dev = Dev::start(dir.path()).await;
    let token = login(&dev.url, email, "correct horse battery").await;
    let after = status(dev.url.clone(), token.clone()).await;
    for field in ["plan", "status", "auto_renew", "current_period_start", "current_period_end", "payment_method"] {
        assert_eq!(after[field], before[field], "{field} after the restart");
    }
    let resp = http().get(format!("{}/billing/history", dev.url)).bearer_auth(&token).send().await.unwrap();
    let history: Value = resp.json().await.unwrap();
    assert_eq!(history["items"].as_array().unwrap().len(), 1);
    // Cancelling works after the restart although the sandbox forgot the subscription.
    let resp = http().post(format!("{}/billing/cancel", dev.url)).bearer_auth(&token).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["status"], "canceled");
}
