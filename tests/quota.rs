//! Monthly quotas end to end (docs/API.md, "Usage"): a tenant's tiny Hard event quota, set
//! through the admin API, lets ingest through until the usage the router sees reaches it, then
//! refuses analytics ingest with 402 `quota_exceeded` and its details, while observability
//! ingest (metered in bytes) goes on; turned Soft, the same quota accepts again and is counted.

mod common;

use std::time::Duration;

use common::*;
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

async fn metric(internal: &str, line_prefix: &str) -> f64 {
    let text = http().get(format!("{internal}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
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
    let next_month = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .first_of_month()
        .unwrap()
        .start_of_day()
        .unwrap()
        .checked_add(jiff::Span::new().months(1))
        .unwrap();
    let resets_at = next_month.timestamp().strftime("%Y-%m-%dT%H:%M:%S.000Z").to_string();
    assert_eq!(body["error"]["details"], json!({"limit": LIMIT, "used": 6, "resets_at": resets_at}));
    // Observability is metered in bytes, far from the free plan's gigabyte.
    assert_eq!(post_spans(&url, &api_key, &spans_batch("q", 1, 2)).await.status(), 200);
    assert_eq!(
        metric(&internal, "sextant_router_over_quota_requests_total{meter=\"events\",outcome=\"refused\"}").await,
        1.0
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
            >= 2.0
    );
    let log = std::fs::read_to_string(dir.path().join("dev.log")).unwrap();
    assert_eq!(log.matches("soft monthly quota exceeded").count(), 1, "one warning per org and month");
}
