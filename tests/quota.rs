//! Monthly quotas end to end (docs/API.md, "Usage", "Quotas"): a tenant's tiny Hard event
//! quota, set through the admin API, lets ingest through until the usage the router sees
//! reaches it, then refuses analytics ingest with 402 `quota_exceeded` and its details, while
//! observability ingest (metered in bytes) goes on; turned Soft, the same quota accepts again
//! and is counted. A byte quota crossed by 16 writers through two routers is refused within
//! the stated staleness and overshot by no more than the stated bound.

use std::time::{Duration, Instant};

use crate::common::*;
use reqwest::Method;
use serde_json::{json, Value};

const TOKEN: &str = "admin-token-for-tests-0123456789abcdef";
const TENANT: &str = "0f6a3c1e-0000-4000-8000-0000000000aa";
const PROJECT: &str = "0f6a3c1e-0000-4000-8000-0000000000ab";
const QUOTA: &str = "0f6a3c1e-0000-4000-8000-0000000000ac";
const LIMIT: u64 = 5;

fn managed(kind: &str, name: &str, uid: &str) -> Value {
    json!({"api_version": "sextant.dev/v1alpha1", "kind": kind, "namespace": "telemetry", "name": name, "uid": uid})
}

async fn admin(url: &str, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http().request(method, format!("{url}/admin/v1/{path}")).bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn set_quota(url: &str, enforcement: &str) {
    let body = json!({"tenant_key": TENANT, "events_per_month": LIMIT, "enforcement": enforcement,
                      "managed_by": managed("Quota", "acme-quota", QUOTA)});
    let (status, body) = admin(url, Method::PUT, &format!("quotas/{QUOTA}"), Some(body)).await;
    assert_eq!(status, 204, "{body}");
}

/// Two analytics events.
async fn capture(url: &str, token: &str) -> (u16, Value) {
    let events: Vec<Value> = (0..2).map(|i| json!({"event": "signup", "distinct_id": format!("u{i}")})).collect();
    let resp = http()
        .post(format!("{url}/v1/batch"))
        .header("X-Analytics-Token", token)
        .json(&json!({ "events": events }))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_hard_event_quota_refuses_analytics_ingest_with_402_once_usage_reaches_it_and_a_soft_one_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let flags = ["--ingest-rps", "100000", "--api-rps", "100000", "--auth-rps", "100000"];
    let dev = Dev::start_with(dir.path(), &flags, &[("SEXTANT_ADMIN_TOKEN", TOKEN)]).await;
    let (url, internal) = (dev.url.clone(), dev.internal_url.clone());

    // A tenant on the free plan, its project and credentials, its owner signed in.
    let tenant = json!({"display_name": "Acme", "plan": "free", "owner_email": "ops@acme.test", "suspended": false,
                        "managed_by": managed("Tenant", "acme", TENANT)});
    assert_eq!(admin(&internal, Method::PUT, &format!("tenants/{TENANT}"), Some(tenant)).await.0, 200);
    let project = json!({"tenant_key": TENANT, "name": "shop", "managed_by": managed("Project", "shop", PROJECT)});
    assert_eq!(admin(&internal, Method::PUT, &format!("projects/{PROJECT}"), Some(project)).await.0, 200);
    let (status, creds) = admin(&internal, Method::POST, &format!("projects/{PROJECT}/credentials"), None).await;
    assert_eq!(status, 200, "{creds}");
    let (ingest_token, api_key) =
        (creds["ingest_token"].as_str().unwrap().to_owned(), creds["api_key"].as_str().unwrap().to_owned());
    let (status, invite) = admin(&internal, Method::POST, &format!("tenants/{TENANT}/owner-invite"), None).await;
    assert_eq!(status, 201, "{invite}");
    let resp = http()
        .post(format!("{url}/auth/invite/accept"))
        .json(&json!({"invite_token": invite["invite_token"], "password": "tenant owner password", "name": "Ops"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let jwt = resp.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned();

    set_quota(&internal, "Hard").await;
    // 0, 2 and 4 events used before each: all under the limit of 5, whatever the router saw.
    for n in 0..3 {
        let (status, body) = capture(&url, &ingest_token).await;
        assert_eq!(status, 200, "request {n}: {body}");
    }
    wait_for("the usage to reach the quota", Duration::from_secs(60), || {
        let (url, jwt) = (url.clone(), jwt.clone());
        async move {
            let (status, usage) = get_json(&url, &jwt, "/api/v1/usage").await;
            (status == 200 && usage["events_used"] == json!(6) && usage["events_limit"] == json!(LIMIT)).then_some(())
        }
    })
    .await;

    let (status, body) = capture(&url, &ingest_token).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded");
    assert_eq!(body["error"]["details"], json!({"limit": LIMIT, "used": 6, "resets_at": resets_at()}));
    // Observability is metered in bytes, far from the free plan's gigabyte.
    assert_eq!(post_spans(&url, &api_key, &spans_batch("q", 1, 2)).await.status(), 200);
    assert_eq!(
        metric(&internal, "sextant_router_over_quota_requests_total{meter=\"events\",outcome=\"refused\"}").await,
        Some(1.0)
    );

    // Soft: accepted again once the router sees the change, and counted as over the quota.
    set_quota(&internal, "Soft").await;
    wait_for("a Soft quota to accept", Duration::from_secs(30), || {
        let (url, token) = (url.clone(), ingest_token.clone());
        async move { (capture(&url, &token).await.0 == 200).then_some(()) }
    })
    .await;
    let (status, body) = capture(&url, &ingest_token).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        metric(&internal, "sextant_router_over_quota_requests_total{meter=\"events\",outcome=\"accepted\"}").await
            >= Some(2.0)
    );
    let log = std::fs::read_to_string(dir.path().join("dev.log")).unwrap();
    assert_eq!(log.matches("soft monthly quota exceeded").count(), 1, "one warning per org and month");
}

const SECRETS: [(&str, &str); 3] = [
    ("SEXTANT_CLUSTER_SECRET", "test-cluster-secret-0123456789abcdef"),
    ("SEXTANT_JWT_SECRET", "test-jwt-secret-0123456789abcdef0123456789"),
    ("SEXTANT_ADMIN_TOKEN", TOKEN),
];

/// One storage node (two shards) and two routers, each its own process.
struct TwoRouters {
    _node: Proc,
    _routers: Vec<Proc>,
    urls: Vec<String>,
    /// Each router's `--internal-listen`: `/metrics` and `/admin/v1`.
    internal: Vec<String>,
}

impl TwoRouters {
    async fn start(dir: &std::path::Path) -> TwoRouters {
        let grpc = format!("127.0.0.1:{}", free_port());
        let node = spawn_lone_node(dir, &grpc, &SECRETS[..1]);
        let creds = dir.join("credentials.json");
        let extra = ["--ingest-rps", "100000", "--api-rps", "100000"];
        let RouterProcs { procs: routers, urls, internal } = spawn_routers(dir, &grpc, 2, &extra, &creds, &SECRETS);
        wait_routers_serve(&urls, &creds).await;
        TwoRouters { _node: node, _routers: routers, urls, internal }
    }
}

/// What one request got.
#[derive(Clone, Copy, Debug)]
struct Sent {
    router: usize,
    started: Duration,
    ended: Duration,
    status: u16,
    bytes: u64,
}

/// Ten log lines of about 400 bytes each, as the JSON body sent.
fn logs_body(writer: usize, n: u64) -> Vec<u8> {
    let now = jiff::Timestamp::now().as_millisecond();
    let logs: Vec<Value> = (0..10)
        .map(|i| {
            json!({"timestamp": now, "level": "info", "service": "checkout",
                   "message": format!("writer {writer} request {n} line {i} {}", "x".repeat(340))})
        })
        .collect();
    serde_json::to_vec(&json!({ "logs": logs })).unwrap()
}

async fn post_logs(url: &str, key: &str, body: Vec<u8>) -> (u16, Value) {
    let resp = http()
        .post(format!("{url}/api/v1/ingest/logs"))
        .header("X-API-Key", key)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn resets_at() -> String {
    let next_month = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .first_of_month()
        .unwrap()
        .start_of_day()
        .unwrap()
        .checked_add(jiff::Span::new().months(1))
        .unwrap();
    next_month.timestamp().strftime("%Y-%m-%dT%H:%M:%S.000Z").to_string()
}

/// docs/API.md, "Quotas": how far behind what was committed a router's view of usage is at
/// most (roll-up report every 2 s, cache refresh every 1 s, meta commit and read).
const STALENESS: Duration = Duration::from_secs(4);
const WRITERS: usize = 16;
const BYTE_LIMIT: u64 = 8_000_000;

#[tokio::test]
async fn a_hard_byte_quota_crossed_through_two_routers_is_refused_in_time_and_overshot_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let cluster = TwoRouters::start(dir.path()).await;
    let admin_url = cluster.internal[0].clone();
    let tenant = json!({"display_name": "Acme", "plan": "enterprise", "owner_email": "ops@acme.test",
                        "suspended": false, "managed_by": managed("Tenant", "acme", TENANT)});
    assert_eq!(admin(&admin_url, Method::PUT, &format!("tenants/{TENANT}"), Some(tenant)).await.0, 200);
    let project = json!({"tenant_key": TENANT, "name": "shop", "managed_by": managed("Project", "shop", PROJECT)});
    assert_eq!(admin(&admin_url, Method::PUT, &format!("projects/{PROJECT}"), Some(project)).await.0, 200);
    let (status, creds) = admin(&admin_url, Method::POST, &format!("projects/{PROJECT}/credentials"), None).await;
    assert_eq!(status, 200, "{creds}");
    let key = creds["api_key"].as_str().unwrap().to_owned();
    let quota = |enforcement: &str| {
        json!({"tenant_key": TENANT, "bytes_per_month": BYTE_LIMIT, "enforcement": enforcement,
               "managed_by": managed("Quota", "acme-quota", QUOTA)})
    };
    let (status, body) = admin(&admin_url, Method::PUT, &format!("quotas/{QUOTA}"), Some(quota("Hard"))).await;
    assert_eq!(status, 204, "{body}");
    let (_, q) = admin(&admin_url, Method::GET, &format!("quotas/{QUOTA}"), None).await;
    assert_eq!(q["monthly_bytes"], json!(BYTE_LIMIT), "a limit in bytes, to the byte");

    // Both routers know the key and the quota (one request each, counted like the others).
    let started = Instant::now();
    let mut sent: Vec<Sent> = Vec::new();
    for (router, url) in cluster.urls.iter().enumerate() {
        let s = wait_for("the router to know the new key", Duration::from_secs(30), || {
            let (url, key) = (url.clone(), key.clone());
            async move {
                let body = logs_body(99, router as u64);
                let (bytes, t0) = (body.len() as u64, started.elapsed());
                let (status, _) = post_logs(&url, &key, body).await;
                (status == 200).then(|| Sent { router, started: t0, ended: started.elapsed(), status, bytes })
            }
        })
        .await;
        sent.push(s);
    }

    // 16 writers, 8 through each router, until each is refused.
    let writers = (0..WRITERS).map(|w| {
        let (url, key) = (cluster.urls[w % 2].clone(), key.clone());
        tokio::spawn(async move {
            let mut mine = Vec::new();
            for n in 0.. {
                let body = logs_body(w, n);
                let (bytes, t0) = (body.len() as u64, started.elapsed());
                let (status, answer) = post_logs(&url, &key, body).await;
                mine.push(Sent { router: w % 2, started: t0, ended: started.elapsed(), status, bytes });
                match status {
                    200 => assert!(started.elapsed() < Duration::from_secs(120), "writer {w} never refused"),
                    402 => return (mine, answer),
                    // A shard shedding load stored nothing; a client retries after `Retry-After`.
                    503 if answer["error"]["code"] == "overloaded" => tokio::time::sleep(Duration::from_secs(1)).await,
                    s => panic!("writer {w}: unexpected {s}: {answer}"),
                }
            }
            unreachable!()
        })
    });
    let mut refusals = Vec::new();
    for done in futures::future::join_all(writers).await {
        let (mine, answer) = done.unwrap();
        sent.extend(mine);
        refusals.push(answer);
    }
    for answer in &refusals {
        assert_eq!(answer["error"]["code"], "quota_exceeded", "{answer}");
        let details = &answer["error"]["details"];
        assert_eq!(
            (details["limit"].as_u64(), details["resets_at"].as_str()),
            (Some(BYTE_LIMIT), Some(resets_at().as_str()))
        );
        assert!(details["used"].as_u64().unwrap() >= BYTE_LIMIT, "{answer}");
    }

    let mut accepted: Vec<Sent> = sent.iter().copied().filter(|s| s.status == 200).collect();
    accepted.sort_by_key(|s| s.ended);
    let total: u64 = accepted.iter().map(|s| s.bytes).sum();
    assert!(total >= BYTE_LIMIT, "refused at {total} bytes, before the limit of {BYTE_LIMIT} was reached");
    // When the committed usage reached the limit.
    let mut sum = 0;
    let reached = accepted.iter().find(|s| {
        sum += s.bytes;
        sum >= BYTE_LIMIT
    });
    let reached = reached.unwrap().ended;
    let last_accept = accepted.iter().map(|s| s.started).max().unwrap();
    assert!(
        last_accept <= reached + STALENESS,
        "a request started {:?} after the limit was reached was still accepted",
        last_accept - reached
    );

    // The bound: the requests of every writer in flight at the end, each whole, plus what the
    // other router accepted within the staleness before the later router's last acceptance.
    let last_of = |r: usize| accepted.iter().filter(|s| s.router == r).map(|s| s.started).max().unwrap_or_default();
    let later = if last_of(0) >= last_of(1) { 0 } else { 1 };
    let since = last_of(later).saturating_sub(STALENESS);
    let unseen: u64 = accepted.iter().filter(|s| s.router != later && s.ended > since).map(|s| s.bytes).sum();
    let biggest = sent.iter().map(|s| s.bytes).max().unwrap();
    let bound = WRITERS as u64 * biggest + unseen;
    let overshoot = total - BYTE_LIMIT;
    let secs = reached.as_secs_f64();
    eprintln!(
        "byte quota {BYTE_LIMIT}: accepted {total} in {} requests ({:.0} bytes/s until the limit); overshoot {overshoot} \
         bytes ({:.1} requests of {biggest}); bound {bound} ({unseen} from the other router); last acceptance {:?} \
         after the limit was reached",
        accepted.len(),
        BYTE_LIMIT as f64 / secs,
        overshoot as f64 / biggest as f64,
        last_accept.saturating_sub(reached),
    );
    assert!(overshoot <= bound, "overshoot {overshoot} bytes, over the stated bound of {bound}");

    // Usage is exactly what was accepted, from both routers.
    for internal in &cluster.internal {
        wait_for("the usage to count every accepted byte", Duration::from_secs(30), || {
            let internal = internal.clone();
            async move {
                let (status, usage) = admin(&internal, Method::GET, &format!("quotas/{QUOTA}/usage"), None).await;
                (status == 200 && usage["used_bytes"] == json!(total) && usage["limit_bytes"] == json!(BYTE_LIMIT))
                    .then_some(())
            }
        })
        .await;
    }

    // Soft: accepted through both routers, counted and warned of.
    let (status, body) = admin(&admin_url, Method::PUT, &format!("quotas/{QUOTA}"), Some(quota("Soft"))).await;
    assert_eq!(status, 204, "{body}");
    for (r, url) in cluster.urls.iter().enumerate() {
        wait_for("a Soft byte quota to accept", Duration::from_secs(30), || {
            let (url, key) = (url.clone(), key.clone());
            async move { (post_logs(&url, &key, logs_body(100, r as u64)).await.0 == 200).then_some(()) }
        })
        .await;
        let accepted_over = "sextant_router_over_quota_requests_total{meter=\"bytes\",outcome=\"accepted\"}";
        assert!(metric(&cluster.internal[r], accepted_over).await >= Some(1.0));
        let log = std::fs::read_to_string(dir.path().join(format!("router{r}.log"))).unwrap();
        assert_eq!(log.matches("soft monthly quota exceeded").count(), 1, "router {r} warns once");
    }
}
