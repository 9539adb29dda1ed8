//! Webhooks end to end (docs/API.md, "Webhooks"): a receiver in this process verifies every
//! request with the Standard Webhooks algorithm, written here from the specification; the
//! retry schedule is driven by a manual clock, and restarts kill the real process.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sextant_model::ManualClock;
use sextant_router::webhooks::guard::TargetPolicy;
use sextant_router::{RouterConfig, RunningRouter};
use sha2::Sha256;

// ---- The receiver ----

/// One request as the receiver got it.
#[derive(Clone, Debug)]
struct Received {
    id: String,
    timestamp: i64,
    signatures: String,
    body: String,
}

/// What the receiver answers, in order; 200 once the script is used up.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
}

fn reply(status: u16) -> Reply {
    Reply { status, headers: vec![] }
}

#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
}

impl Receiver {
    /// Listens on 127.0.0.1; answers `script` in order, then 200.
    async fn start(script: Vec<Reply>) -> (Receiver, SocketAddr) {
        let r = Receiver { got: Default::default(), script: Arc::new(Mutex::new(script.into())) };
        let app = axum::Router::new().fallback(receive).with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, addr)
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    async fn wait_for(&self, n: usize) -> Vec<Received> {
        wait_for(&format!("{n} requests at the receiver"), Duration::from_secs(30), || async {
            let got = self.got();
            (got.len() >= n).then_some(got)
        })
        .await
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    r.got.lock().unwrap().push(Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp").parse().unwrap_or(-1),
        signatures: header("webhook-signature"),
        body: String::from_utf8(body.to_vec()).unwrap(),
    });
    let Reply { status, headers } = r.script.lock().unwrap().pop_front().unwrap_or(reply(200));
    let mut resp = (StatusCode::from_u16(status).unwrap(), format!("answered {status}")).into_response();
    for (k, v) in headers {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

/// Standard Webhooks verification: the key is the base64 after `whsec_`; the signed content is
/// `{webhook-id}.{webhook-timestamp}.{body}`; `webhook-signature` holds space-separated
/// `v1,<base64 HMAC-SHA256>` entries, any of which may match (compared in constant time).
fn verifies(secret: &str, r: &Received) -> bool {
    let key = STANDARD.decode(secret.strip_prefix("whsec_").expect("a whsec_ secret")).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.{}", r.id, r.timestamp, r.body).as_bytes());
    r.signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|sig| STANDARD.decode(sig).is_ok_and(|raw| mac.clone().verify_slice(&raw).is_ok()))
}

// ---- A node and a router in this process, on a manual clock ----

struct Stack {
    _router: RunningRouter,
    clock: ManualClock,
    url: String,
    creds: sextant_router::identity::bootstrap::Credentials,
    /// An access token and the manual time it was issued at; renewed once the clock has moved
    /// near its 15 minutes.
    token: Mutex<(String, i64)>,
    ingest_token: String,
    _node: sextant_node::host::RunningNode,
    _dir: tempfile::TempDir,
}

impl Stack {
    async fn start(webhook_targets: TargetPolicy) -> Stack {
        let dir = tempfile::tempdir().unwrap();
        let clock = manual_clock_at_now();
        let secret = "webhook-test-cluster-secret-0123456789".to_owned();
        let node = start_in_process_node(dir.path(), &secret, 1000).await;
        let jwt = b"webhook-test-jwt-secret-0123456789abcdef";
        let router = start_in_process_router(RouterConfig {
            // The tests poll the API; the limits are tested elsewhere.
            rate_limits: sextant_router::identity::rate_limit::RateLimitConfig {
                ingest_rps: 100_000,
                analytics_rps: 100_000,
                api_rps: 100_000,
                auth_rps: 1_000,
            },
            webhook_targets,
            ..in_process_router_config(node.addr.to_string(), &secret, jwt, clock.clock())
        })
        .await;
        let url = format!("http://{}", router.addr);
        let creds = sextant_router::identity::bootstrap::bootstrap(
            &router.state.cluster,
            &url,
            "enterprise",
            clock.clock().now_millis(),
        )
        .await
        .unwrap()
        .unwrap();
        let token = login(&url, &creds.email, &creds.password).await;
        let issued = clock.clock().now_millis();
        let ingest_token = creds.ingest_token.clone();
        Stack {
            _router: router,
            clock,
            url,
            creds,
            token: Mutex::new((token, issued)),
            ingest_token,
            _node: node,
            _dir: dir,
        }
    }

    async fn token(&self) -> String {
        let (token, issued) = self.token.lock().unwrap().clone();
        if self.now_ms() - issued < 10 * 60_000 {
            return token;
        }
        let fresh = login(&self.url, &self.creds.email, &self.creds.password).await;
        *self.token.lock().unwrap() = (fresh.clone(), self.now_ms());
        fresh
    }

    fn now_ms(&self) -> i64 {
        self.clock.clock().now_millis()
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        call(&self.url, &self.token().await, method, path, body).await
    }

    /// Waits until the delivery of `hook` satisfies `f`.
    async fn wait_delivery(&self, hook: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        wait_delivery(&self.url, &self.token().await, hook, what, f).await
    }
}

async fn call(url: &str, token: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http().request(method, format!("{url}{path}")).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

async fn wait_delivery(url: &str, token: &str, hook: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, Duration::from_secs(60), || async {
        let (code, body) =
            call(url, token, reqwest::Method::GET, &format!("/api/webhooks/{hook}/deliveries"), None).await;
        assert_eq!(code, 200, "{body}");
        body["items"].as_array().unwrap().iter().find(|d| f(d)).cloned()
    })
    .await
}

async fn create_hook(url: &str, token: &str, target: &str, events: &[&str]) -> (String, String) {
    let (code, body) =
        call(url, token, reqwest::Method::POST, "/api/webhooks", Some(json!({"url": target, "events": events}))).await;
    assert_eq!(code, 201, "{body}");
    (body["id"].as_str().unwrap().to_owned(), body["secret"].as_str().unwrap().to_owned())
}

async fn ingest(url: &str, ingest_token: &str, events: Value) {
    let resp = http()
        .post(format!("{url}/v1/batch"))
        .json(&json!({"token": ingest_token, "events": events}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

fn rfc3339_ms(s: &Value) -> i64 {
    s.as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

/// Ingested events named by a webhook arrive batched in one signed delivery; a failure is
/// retried on A9's schedule with jitter, a later `Retry-After` is honoured, every attempt is
/// recorded, and the `webhook-id` stays the same throughout.
#[tokio::test]
async fn failed_deliveries_are_retried_on_schedule_and_every_attempt_is_recorded() {
    let s = Stack::start(TargetPolicy::dev()).await;
    let retry_after = Reply { status: 429, headers: vec![("retry-after", "3600".into())] };
    let (receiver, addr) = Receiver::start(vec![reply(500), retry_after]).await;
    let (hook, secret) =
        create_hook(&s.url, &s.token().await, &format!("http://{addr}/hook"), &["signup", "purchase"]).await;
    // The secret is shown once: the list does not have it.
    let (_, list) = s.call(reqwest::Method::GET, "/api/webhooks", None).await;
    assert_eq!(list["items"][0]["id"], hook.as_str());
    assert!(!list.to_string().contains(&secret) && list["items"][0].get("secret").is_none());

    let ts = s.now_ms();
    let event = |name: &str, n: u32| json!({"event": name, "distinct_id": format!("u{n}"), "timestamp": ts, "properties": {"n": n}});
    ingest(&s.url, &s.ingest_token, json!([event("signup", 1), event("pageview", 2), event("purchase", 3)])).await;

    // Attempt 1, at once: 500.
    let first = receiver.wait_for(1).await;
    assert!(verifies(&secret, &first[0]), "{first:?}");
    let body: Value = serde_json::from_str(&first[0].body).unwrap();
    assert_eq!(body["type"], "events");
    let names: Vec<&str> =
        body["data"]["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["signup", "purchase"], "one delivery, only the subscribed events");
    assert_eq!(body["data"]["events"][1]["properties"]["n"], 3);
    let d = s.wait_delivery(&hook, "attempt 1 recorded", |d| d["attempts"].as_array().unwrap().len() == 1).await;
    assert_eq!((d["status"].as_str(), d["attempts"][0]["status_code"].as_u64()), (Some("pending"), Some(500)));
    assert_eq!(d["attempts"][0]["error"], "HTTP 500");
    assert_eq!(d["attempts"][0]["response_excerpt"], "answered 500");
    let (at1, next1) = (rfc3339_ms(&d["attempts"][0]["at"]), rfc3339_ms(&d["next_attempt_at"]));
    assert!((4_500..=5_500).contains(&(next1 - at1)), "the first retry is 5 s ± 10%: {}", next1 - at1);

    // Attempt 2 when due: 429 with Retry-After: 3600, later than the 5 min of the schedule.
    s.clock.advance(Duration::from_millis((next1 - s.now_ms()).max(0) as u64));
    let second = receiver.wait_for(2).await;
    assert_eq!(second[1].id, first[0].id, "webhook-id is stable across retries");
    assert_eq!(second[1].body, first[0].body);
    assert!(verifies(&secret, &second[1]));
    let d = s.wait_delivery(&hook, "attempt 2 recorded", |d| d["attempts"].as_array().unwrap().len() == 2).await;
    let (at2, next2) = (rfc3339_ms(&d["attempts"][1]["at"]), rfc3339_ms(&d["next_attempt_at"]));
    assert_eq!((d["attempts"][1]["attempt"].as_u64(), d["attempts"][1]["status_code"].as_u64()), (Some(2), Some(429)));
    assert_eq!(next2 - at2, 3_600_000, "Retry-After is honoured");

    // Nothing is sent before it is due; then attempt 3 succeeds.
    s.clock.advance(Duration::from_millis((next2 - s.now_ms() - 1_000).max(0) as u64));
    let d = s.wait_delivery(&hook, "still pending", |d| d["status"] == "pending").await;
    assert_eq!(d["attempts"].as_array().unwrap().len(), 2);
    s.clock.advance(Duration::from_secs(1));
    let d = s.wait_delivery(&hook, "the delivery succeeded", |d| d["status"] == "succeeded").await;
    let codes: Vec<u64> =
        d["attempts"].as_array().unwrap().iter().map(|a| a["status_code"].as_u64().unwrap()).collect();
    assert_eq!(codes, [500, 429, 200]);
    assert!(d["next_attempt_at"].is_null());
    let got = receiver.got();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|r| verifies(&secret, r) && r.id == first[0].id));
    assert!(got.iter().all(|r| (r.timestamp - s.now_ms() / 1000).abs() < 7200), "webhook-timestamp is the send time");
}

/// A receiver that keeps failing gets A9's eight attempts and the delivery then fails; a
/// rotated secret signs alongside the previous one; a 410 disables the webhook.
#[tokio::test]
async fn the_last_retry_fails_the_delivery_rotation_signs_twice_and_410_disables() {
    let s = Stack::start(TargetPolicy::dev()).await;
    let (receiver, addr) = Receiver::start(vec![reply(503); 8]).await;
    let (hook, old) = create_hook(&s.url, &s.token().await, &format!("http://{addr}/"), &["signup"]).await;
    let (code, rotated) = s.call(reqwest::Method::POST, &format!("/api/webhooks/{hook}/rotate-secret"), None).await;
    assert_eq!(code, 200, "{rotated}");
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    ingest(&s.url, &s.ingest_token, json!([{"event": "signup", "distinct_id": "u1", "timestamp": s.now_ms()}])).await;
    let mut schedule = Vec::new();
    for n in 1..=8 {
        let d = s.wait_delivery(&hook, &format!("attempt {n}"), |d| d["attempts"].as_array().unwrap().len() == n).await;
        if n < 8 {
            let next = rfc3339_ms(&d["next_attempt_at"]);
            schedule.push(next - rfc3339_ms(&d["attempts"][n - 1]["at"]));
            s.clock.advance(Duration::from_millis((next - s.now_ms()).max(0) as u64));
        } else {
            assert_eq!(d["status"], "failed");
            assert!(d["next_attempt_at"].is_null());
        }
    }
    let expected = [5_000i64, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];
    for (got, want) in schedule.iter().zip(expected) {
        assert!((want * 9 / 10..=want * 11 / 10).contains(got), "retry after {got} ms, schedule {want} ms");
    }
    let got = receiver.got();
    assert_eq!(got.len(), 8);
    // The previous secret signs for 24 hours after the rotation, then only the new one does.
    let overlap_end = rfc3339_ms(&rotated["previous_secret_expires_at"]);
    let (during, after): (Vec<&Received>, Vec<&Received>) = got.iter().partition(|r| r.timestamp * 1000 < overlap_end);
    assert!(!during.is_empty() && !after.is_empty(), "the schedule outlasts the overlap");
    for r in during {
        assert_eq!(r.signatures.split(' ').count(), 2, "two signatures during the overlap");
        assert!(verifies(&new, r) && verifies(&old, r));
    }
    for r in after {
        assert!(verifies(&new, r) && !verifies(&old, r), "{r:?}");
    }

    // 410: the webhook is disabled and sent nothing more.
    let (gone, gone_addr) = Receiver::start(vec![reply(410)]).await;
    let (hook2, _) = create_hook(&s.url, &s.token().await, &format!("http://{gone_addr}/"), &["purchase"]).await;
    ingest(&s.url, &s.ingest_token, json!([{"event": "purchase", "distinct_id": "u2", "timestamp": s.now_ms()}])).await;
    s.wait_delivery(&hook2, "the 410", |d| d["status"] == "failed").await;
    let (_, list) = s.call(reqwest::Method::GET, "/api/webhooks", None).await;
    let h = list["items"].as_array().unwrap().iter().find(|h| h["id"] == hook2.as_str()).unwrap().clone();
    assert_eq!((h["enabled"].as_bool(), h["disabled_reason"].as_str()), (Some(false), Some("gone")));
    ingest(&s.url, &s.ingest_token, json!([{"event": "purchase", "distinct_id": "u3", "timestamp": s.now_ms()}])).await;
    let (code, _) = s.call(reqwest::Method::POST, &format!("/api/webhooks/{hook2}/test"), None).await;
    assert_eq!(code, 409, "a disabled webhook takes no test either");
    assert_eq!(gone.got().len(), 1);
}

/// The test endpoint sends a signed ping at once and answers its attempt; webhooks belong to
/// their project (another org's token sees a 404), and bad input is refused.
#[tokio::test]
async fn a_test_ping_is_signed_and_webhooks_stay_in_their_project() {
    let s = Stack::start(TargetPolicy::dev()).await;
    let (receiver, addr) = Receiver::start(vec![]).await;
    let (hook, secret) =
        create_hook(&s.url, &s.token().await, &format!("http://{addr}/ping"), &["system.alert_triggered"]).await;
    let (code, result) = s.call(reqwest::Method::POST, &format!("/api/webhooks/{hook}/test"), None).await;
    assert_eq!(code, 200, "{result}");
    assert_eq!((result["status"].as_str(), result["attempt"]["status_code"].as_u64()), (Some("succeeded"), Some(200)));
    let got = receiver.got();
    assert!(verifies(&secret, &got[0]));
    assert_eq!(got[0].id, result["delivery_id"].as_str().unwrap());
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(
        (body["type"].as_str(), body["data"]["webhook_id"].as_str()),
        (Some("webhook.test"), Some(hook.as_str()))
    );

    // Another org: its own sign-up sees none of this project's webhooks.
    let resp = http()
        .post(format!("{}/auth/signup", s.url))
        .json(&json!({"email": "eve@example.com", "password": "correct horse battery", "name": "Eve", "org_name": "Evil"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let eve = resp.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned();
    for (method, path) in [
        (reqwest::Method::GET, format!("/api/webhooks/{hook}/deliveries")),
        (reqwest::Method::POST, format!("/api/webhooks/{hook}/test")),
        (reqwest::Method::POST, format!("/api/webhooks/{hook}/rotate-secret")),
        (reqwest::Method::DELETE, format!("/api/webhooks/{hook}")),
    ] {
        let (code, _) = call(&s.url, &eve, method.clone(), &path, None).await;
        assert_eq!(code, 404, "{method} {path}");
    }
    let (_, theirs) = call(&s.url, &eve, reqwest::Method::GET, "/api/webhooks", None).await;
    assert_eq!(theirs["items"], json!([]));

    for (bad, field) in [
        (json!({"url": format!("http://{addr}/"), "events": []}), "events"),
        (json!({"url": format!("http://{addr}/"), "events": ["system.nope"]}), "events"),
        (json!({"url": format!("http://{addr}/"), "events": ["x".repeat(201)]}), "events"),
        (json!({"url": format!("http://{addr}/"), "events": vec!["e"; 51]}), "events"),
        (json!({"url": format!("http://{addr}/{}", "p".repeat(2048)), "events": ["e"]}), "url"),
        (json!({"url": format!("http://{addr}/"), "events": ["e"], "secret": "not-a-whsec"}), "secret"),
    ] {
        let (code, body) = s.call(reqwest::Method::POST, "/api/webhooks", Some(bad)).await;
        assert_eq!(code, 400, "{body}");
        assert_eq!(body["error"]["details"]["errors"][0]["field"], field, "{body}");
    }
    let (code, _) = s.call(reqwest::Method::DELETE, &format!("/api/webhooks/{hook}"), None).await;
    assert_eq!(code, 204);
    let (code, _) = s.call(reqwest::Method::GET, &format!("/api/webhooks/{hook}/deliveries"), None).await;
    assert_eq!(code, 404);
}

/// Events sent the PostHog way (`/batch/`, `/e/`, ...) are delivered like `/v1/batch` ones.
#[tokio::test]
async fn posthog_capture_events_reach_their_webhooks() {
    let s = Stack::start(TargetPolicy::dev()).await;
    let (receiver, addr) = Receiver::start(vec![]).await;
    let (_, secret) = create_hook(&s.url, &s.token().await, &format!("http://{addr}/"), &["purchase"]).await;
    let body = json!({"api_key": s.ingest_token, "batch": [
        {"event": "purchase", "distinct_id": "u1", "properties": {"amount": 5}, "timestamp": s.now_ms()},
        {"event": "$pageview", "distinct_id": "u1", "timestamp": s.now_ms()}
    ]});
    let resp = http().post(format!("{}/batch/", s.url)).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let got = receiver.wait_for(1).await;
    assert!(verifies(&secret, &got[0]));
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    let events = body["data"]["events"].as_array().unwrap();
    assert_eq!((events.len(), events[0]["event"].as_str()), (1, Some("purchase")));
    assert_eq!(events[0]["properties"]["amount"], 5);
}

/// Crossing a monthly quota publishes `system.quota_exceeded` once for the org, however many
/// requests are refused after it.
#[tokio::test]
async fn a_crossed_quota_is_published_once_to_the_orgs_webhooks() {
    let s = Stack::start(TargetPolicy::dev()).await;
    let (receiver, addr) = Receiver::start(vec![]).await;
    let (hook, secret) =
        create_hook(&s.url, &s.token().await, &format!("http://{addr}/"), &["system.quota_exceeded"]).await;
    let cluster = &s._router.state.cluster;
    let org = cluster.meta_cache().unwrap().projects[&s.creds.project_id].org_id;
    let quota = json!({"id": "q-events", "org_id": org, "project_id": null, "rate_limits": {}, "monthly_events": 1, "hard": true});
    let put = sextant_model::meta::MetaCommand::PutQuota { quota: serde_json::from_value(quota).unwrap() };
    cluster.meta_change(&put).await.unwrap();
    let event = || json!([{"event": "e", "distinct_id": "u", "timestamp": s.now_ms()}, {"event": "e", "distinct_id": "v", "timestamp": s.now_ms()}]);
    let refused = std::sync::atomic::AtomicU32::new(0);
    wait_for("402 quota_exceeded, twice", Duration::from_secs(30), || async {
        let resp = http()
            .post(format!("{}/v1/batch", s.url))
            .json(&json!({"token": s.ingest_token, "events": event()}))
            .send()
            .await
            .unwrap();
        let n = refused.fetch_add(u32::from(resp.status() == 402), std::sync::atomic::Ordering::SeqCst);
        (n + u32::from(resp.status() == 402) >= 2).then_some(())
    })
    .await;
    let got = receiver.wait_for(1).await;
    assert!(verifies(&secret, &got[0]));
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(body["type"], "system.quota_exceeded");
    assert_eq!((body["data"]["meter"].as_str(), body["data"]["limit"].as_u64()), (Some("events"), Some(1)));
    assert_eq!(body["data"]["org_id"], org.to_string());
    let (_, list) = s.call(reqwest::Method::GET, &format!("/api/webhooks/{hook}/deliveries"), None).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "once per org and month: {list}");
}

/// A name other than `localhost` that resolves to a loopback address, from /etc/hosts, else
/// this machine's host name.
fn loopback_name() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let from_hosts = hosts.lines().filter_map(|l| {
        let mut parts = l.split('#').next()?.split_whitespace();
        let ip: std::net::IpAddr = parts.next()?.parse().ok()?;
        ip.is_loopback().then(|| parts.find(|n| !n.contains("localhost")).map(str::to_owned)).flatten()
    });
    from_hosts.into_iter().next().unwrap_or_else(|| {
        String::from_utf8(std::process::Command::new("hostname").output().unwrap().stdout).unwrap().trim().to_owned()
    })
}

/// On a router (no `--webhook-allow-*`): only https, no private, loopback, link-local or
/// metadata targets, whether literal, `localhost`, or a name that resolves to one; and a
/// redirect is not followed.
#[tokio::test]
async fn a_router_refuses_private_targets_and_does_not_follow_redirects() {
    let s = Stack::start(TargetPolicy::default()).await;
    let (receiver, addr) = Receiver::start(vec![]).await;
    let port = addr.port();
    for target in [
        format!("http://{addr}/"),
        format!("https://127.0.0.1:{port}/"),
        format!("https://10.0.0.5:{port}/"),
        format!("https://192.168.1.10/"),
        format!("https://100.64.0.1/"),
        "https://169.254.169.254/latest/meta-data/".to_owned(),
        "https://[fd00:ec2::254]/latest/meta-data/".to_owned(),
        format!("https://[::1]:{port}/"),
        format!("https://localhost:{port}/"),
        format!("https://LocalHost.:{port}/"),
        format!("https://2130706433:{port}/"),
        "https://0.0.0.0/".to_owned(),
    ] {
        let (code, body) =
            s.call(reqwest::Method::POST, "/api/webhooks", Some(json!({"url": target, "events": ["e"]}))).await;
        assert_eq!(code, 400, "{target}: {body}");
        assert_eq!(body["error"]["details"]["errors"][0]["field"], "url", "{body}");
    }
    // A name that only resolution shows to be loopback: accepted, then refused at sending, on
    // the address the connection would use.
    let name = loopback_name();
    let (hook, _) = create_hook(&s.url, &s.token().await, &format!("https://{name}:{port}/"), &["e"]).await;
    let (code, result) = s.call(reqwest::Method::POST, &format!("/api/webhooks/{hook}/test"), None).await;
    assert_eq!(code, 200, "{result}");
    assert_eq!(result["status"], "pending");
    let error = result["attempt"]["error"].as_str().unwrap();
    assert!(error.contains("does not resolve to any address webhooks may be sent to"), "{name}: {error}");
    assert!(result["attempt"]["status_code"].is_null());
    assert!(receiver.got().is_empty(), "nothing reached the loopback receiver");

    // Redirects: a dev-like policy reaches the local receiver, which redirects to another one.
    let dev = Stack::start(TargetPolicy::dev()).await;
    let (target, target_addr) = Receiver::start(vec![]).await;
    let redirect = Reply { status: 307, headers: vec![("location", format!("http://{target_addr}/stolen"))] };
    let (redirector, redirector_addr) = Receiver::start(vec![redirect]).await;
    let (hook, _) = create_hook(&dev.url, &dev.token().await, &format!("http://{redirector_addr}/"), &["e"]).await;
    let (_, result) = dev.call(reqwest::Method::POST, &format!("/api/webhooks/{hook}/test"), None).await;
    assert_eq!(result["attempt"]["status_code"], 307);
    assert_eq!(result["attempt"]["error"], "HTTP 307: redirects are not followed");
    assert_eq!(redirector.got().len(), 1);
    assert!(target.got().is_empty(), "the redirect was not followed");
}

/// The tests poll the API faster than its default limit allows.
const DEV_FLAGS: &[&str] = &["--api-rps", "100000"];

/// `sextant dev` killed (SIGKILL: node and router at once) while a delivery waits for its
/// retry: after the restart the delivery is sent again with the same `webhook-id` and
/// succeeds; nothing is lost.
#[tokio::test]
async fn a_delivery_waiting_for_its_retry_survives_a_kill_of_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let (receiver, addr) = Receiver::start(vec![reply(500)]).await;
    let mut dev = Dev::start_with(dir.path(), DEV_FLAGS, &[]).await;
    let token = dev.token().await;
    let ingest_token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let (hook, secret) = create_hook(&dev.url, &token, &format!("http://{addr}/"), &["signup"]).await;
    // Routers learn of a new webhook from their meta view, refreshed every second.
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    ingest(&dev.url, &ingest_token, json!([{"event": "signup", "distinct_id": "u1", "timestamp": now()}])).await;
    receiver.wait_for(1).await;
    wait_delivery(&dev.url, &token, &hook, "the failed first attempt", |d| {
        d["attempts"].as_array().unwrap().len() == 1 && d["status"] == "pending"
    })
    .await;
    dev.proc.kill();
    let dev = Dev::start_with(dir.path(), DEV_FLAGS, &[]).await;
    let token = dev.token().await;
    let d = wait_delivery(&dev.url, &token, &hook, "the retried delivery", |d| d["status"] == "succeeded").await;
    let codes: Vec<u64> =
        d["attempts"].as_array().unwrap().iter().map(|a| a["status_code"].as_u64().unwrap()).collect();
    assert_eq!(codes, [500, 200]);
    let got = receiver.got();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.id == got[0].id && verifies(&secret, r)));
}

/// In a three-node cluster, the metadata group's leader is killed while a delivery waits for
/// its retry: a new leader holds the queue and the retry is sent and recorded.
#[tokio::test]
async fn a_delivery_waiting_for_its_retry_survives_a_meta_leader_change() {
    // The receiver listens on loopback over plain HTTP: allowed for this router (its children
    // inherit the environment; each test runs in a process of its own).
    std::env::set_var("SEXTANT_WEBHOOK_ALLOW_PRIVATE", "true");
    std::env::set_var("SEXTANT_WEBHOOK_ALLOW_HTTP", "true");
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, 2, &[]).await;
    let token = cluster.token().await;
    let ingest_token = cluster.creds["ingest_token"].as_str().unwrap().to_owned();
    let (receiver, addr) = Receiver::start(vec![reply(500)]).await;
    let (hook, secret) = create_hook(&cluster.url, &token, &format!("http://{addr}/"), &["signup"]).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    ingest(&cluster.url, &ingest_token, json!([{"event": "signup", "distinct_id": "u1", "timestamp": now}])).await;
    wait_delivery(&cluster.url, &token, &hook, "the failed first attempt", |d| {
        d["attempts"].as_array().unwrap().len() == 1 && d["status"] == "pending"
    })
    .await;
    let leader = cluster.leader_of(0).await;
    cluster.kill_node(leader);
    let d =
        wait_delivery(&cluster.url, &token, &hook, "the retry after the leader change", |d| d["status"] == "succeeded")
            .await;
    let codes: Vec<u64> =
        d["attempts"].as_array().unwrap().iter().map(|a| a["status_code"].as_u64().unwrap()).collect();
    assert_eq!(codes, [500, 200]);
    let got = receiver.got();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.id == got[0].id && verifies(&secret, r)));
}
