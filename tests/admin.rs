//! The admin API end to end: a real `sextant dev` driven by the operator's own client
//! (`HttpClusterAdmin`) through every call it makes — tenants, projects, credentials, plans,
//! quotas, alert rules — plus what those objects mean for the public API: the credentials
//! work and the replaced ones stop, managed objects are read-only (409), suspension, and a
//! deleted project's data gone from queries and from disk while another project's stays.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sextant_operator::admin::{
    AdminConnector, AdminEndpoint, AdminError, AlertRuleRequest, ClusterAdmin, Deletion, HttpConnector, ManagedBy,
    PlanPrice, PlanRequest, ProjectRequest, QuotaRequest, TenantRequest,
};
use sextant_operator::v1alpha1::{AlertFilter, AlertMetric, BillingInterval, Comparison, Enforcement, PlanFeature};

const TOKEN: &str = "admin-token-for-tests-0123456789abcdef";
const TENANT: &str = "0f6a3c1e-0000-4000-8000-00000000000a";
const SHOP: &str = "0f6a3c1e-0000-4000-8000-00000000000b";
const BLOG: &str = "0f6a3c1e-0000-4000-8000-00000000000c";

fn managed(kind: &str, name: &str, uid: &str) -> ManagedBy {
    ManagedBy {
        api_version: "sextant.dev/v1alpha1".into(),
        kind: kind.into(),
        namespace: (kind != "Plan").then(|| "telemetry".into()),
        name: name.into(),
        uid: uid.into(),
    }
}

fn connect(url: &str, token: &str) -> std::sync::Arc<dyn ClusterAdmin> {
    HttpConnector::new().unwrap().connect(AdminEndpoint { url: url.into(), token: token.into() })
}

fn status_of(e: AdminError) -> (u16, String) {
    match e {
        AdminError::Status { status, body } => (status, body),
        other => panic!("expected an HTTP status, got {other}"),
    }
}

async fn start(dir: &Path, token: Option<&str>) -> Dev {
    let envs: Vec<(&str, &str)> = token.map(|t| ("SEXTANT_ADMIN_TOKEN", t)).into_iter().collect();
    // Two shards flushing every two entries: ingested rows reach segment files quickly.
    let extra = ["--shards", "2", "--snapshot-every", "2", "--api-rps", "10000", "--auth-rps", "10000"];
    Dev::start_with(dir, &extra, &envs).await
}

/// A raw admin call (for what the operator's client has no method for); `url` is the internal
/// address.
async fn admin_call(url: &str, method: Method, path: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut req = http().request(method, format!("{url}/admin/v1/{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, body)
}

async fn ingest_spans(url: &str, key: &str, prefix: &str) -> StatusCode {
    post_spans(url, key, &spans_batch(prefix, 4, 3)).await.status()
}

async fn capture(url: &str, token: &str) -> StatusCode {
    let body = json!({"token": token, "events": [{"event": "signup", "distinct_id": "u1"}]});
    http().post(format!("{url}/v1/batch")).json(&body).send().await.unwrap().status()
}

/// `GET` with a JWT on a project.
async fn read(url: &str, jwt: &str, project: &str, path: &str) -> (StatusCode, Value) {
    let resp =
        http().get(format!("{url}{path}")).bearer_auth(jwt).header("X-Project-Id", project).send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Every shard's manifest under `dir`: segment file path -> projects with rows in it.
fn segments_on_disk(dir: &Path) -> HashMap<PathBuf, Vec<String>> {
    let mut out = HashMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        let mut has_manifest = false;
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if e.file_name() == sextant_node::segment::manifest::MANIFEST {
                has_manifest = true;
            }
        }
        if has_manifest {
            if let Ok(Some((manifest, _))) = sextant_node::segment::Manifest::load(&d) {
                for s in manifest.segments {
                    out.insert(d.join(&s.file.name), s.projects);
                }
            }
        }
    }
    out
}

fn files_of(segments: &HashMap<PathBuf, Vec<String>>, project: &str) -> HashSet<PathBuf> {
    segments.iter().filter(|(_, p)| p.iter().any(|p| p == project)).map(|(f, _)| f.clone()).collect()
}

fn plan_request(gb: u64, days: u32) -> PlanRequest {
    PlanRequest {
        display_name: Some("Gold".into()),
        gb_per_month: Some(gb),
        events_per_month: None,
        retention_days: days,
        features: vec![PlanFeature::Retention, PlanFeature::Alerts],
        price: Some(PlanPrice { amount_cents: 4900, currency: "EUR".into(), interval: BillingInterval::Month }),
        managed_by: managed("Plan", "gold", "plan-uid-gold"),
    }
}

fn tenant_request(name: &str, suspended: bool) -> TenantRequest {
    TenantRequest {
        display_name: name.into(),
        plan: "gold".into(),
        owner_email: "ops@acme.test".into(),
        suspended,
        managed_by: managed("Tenant", "acme", TENANT),
    }
}

fn project_request(name: &str, uid: &str) -> ProjectRequest {
    ProjectRequest { tenant_key: TENANT.into(), name: name.into(), managed_by: managed("Project", name, uid) }
}

fn rule_request(threshold: f64) -> AlertRuleRequest {
    AlertRuleRequest {
        project_key: SHOP.into(),
        name: "checkout errors".into(),
        metric: AlertMetric::ErrorRate,
        filter: AlertFilter { service: Some("checkout".into()), ..AlertFilter::default() },
        comparison: Comparison::Greater,
        threshold,
        window_minutes: 5,
        enabled: true,
        managed_by: managed("AlertRule", "checkout-errors", "rule-uid-1"),
        for_seconds: 0,
        webhook_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_client_drives_every_admin_call() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = start(tmp.path(), Some(TOKEN)).await;
    let url = dev.url.clone();
    let admin_url = dev.internal_url.clone();
    let admin = connect(&admin_url, TOKEN);

    // ---- authentication: wrong or missing token ----
    let wrong = connect(&admin_url, "not-the-admin-token-0123456789abcdef");
    let (status, body) = status_of(wrong.upsert_plan("gold", &plan_request(10, 30)).await.unwrap_err());
    assert_eq!(status, 401, "{body}");
    assert_eq!(status_of(wrong.delete_project(SHOP).await.unwrap_err()).0, 401);
    let (status, body) = admin_call(&admin_url, Method::PUT, "plans/gold", None).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unauthorized", "the contract's error shape: {body}");
    // The bootstrap owner's session does not open the admin API either.
    let owner_jwt = dev.token().await;
    let (status, _) = admin_call(&admin_url, Method::GET, "plans/pro", Some(&owner_jwt)).await;
    assert_eq!(status, 401);

    // ---- plans: create, no-op, update ----
    admin.upsert_plan("gold", &plan_request(10, 30)).await.unwrap();
    admin.upsert_plan("gold", &plan_request(10, 30)).await.unwrap();
    let (status, plan) = admin_call(&admin_url, Method::GET, "plans/gold", Some(TOKEN)).await;
    assert_eq!(status, 200);
    assert_eq!(plan["monthly_bytes"], 10_000_000_000u64);
    assert_eq!(plan["retention_days"], 30);
    assert_eq!(plan["features"], json!(["alerts", "retention"]));
    assert_eq!(plan["price"]["currency"], "EUR");
    assert_eq!(plan["managed_by"]["uid"], "plan-uid-gold");
    admin.upsert_plan("gold", &plan_request(20, 90)).await.unwrap();
    let (_, plan) = admin_call(&admin_url, Method::GET, "plans/gold", Some(TOKEN)).await;
    assert_eq!((plan["monthly_bytes"].as_u64(), plan["retention_days"].as_u64()), (Some(20_000_000_000), Some(90)));
    // Invalid input is refused with the field named.
    let mut bad = plan_request(10, 0);
    bad.price.as_mut().unwrap().currency = "euro".into();
    let (status, body) = status_of(admin.upsert_plan("gold", &bad).await.unwrap_err());
    assert_eq!(status, 400);
    assert!(body.contains("retention_days") && body.contains("price.currency"), "{body}");

    // ---- tenant: create, retry, update ----
    let (status, body) = status_of(
        admin
            .upsert_tenant(TENANT, &TenantRequest { plan: "platinum".into(), ..tenant_request("Acme", false) })
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 400, "unknown plan: {body}");
    let org = admin.upsert_tenant(TENANT, &tenant_request("Acme", false)).await.unwrap().org_id;
    assert_eq!(admin.upsert_tenant(TENANT, &tenant_request("Acme", false)).await.unwrap().org_id, org, "a retry");
    assert_eq!(admin.upsert_tenant(TENANT, &tenant_request("Acme Corp", false)).await.unwrap().org_id, org);
    let (_, tenant) = admin_call(&admin_url, Method::GET, &format!("tenants/{TENANT}"), Some(TOKEN)).await;
    assert_eq!((tenant["org_id"].as_str(), tenant["display_name"].as_str()), (Some(org.as_str()), Some("Acme Corp")));
    assert_eq!(tenant["owner_email"], "ops@acme.test");
    assert_eq!(tenant["managed_by"]["kind"], "Tenant");

    // ---- projects: create, retry, rename ----
    let shop = admin.upsert_project(SHOP, &project_request("shop", SHOP)).await.unwrap().project_id;
    assert_eq!(admin.upsert_project(SHOP, &project_request("shop", SHOP)).await.unwrap().project_id, shop);
    assert_eq!(admin.upsert_project(SHOP, &project_request("Shop", SHOP)).await.unwrap().project_id, shop);
    let blog = admin.upsert_project(BLOG, &project_request("blog", BLOG)).await.unwrap().project_id;
    assert_ne!(shop, blog);
    let orphan = ProjectRequest { tenant_key: "no-such-tenant".into(), ..project_request("x", "uid-x") };
    assert_eq!(status_of(admin.upsert_project("uid-x", &orphan).await.unwrap_err()).0, 404);
    let (_, p) = admin_call(&admin_url, Method::GET, &format!("projects/{SHOP}"), Some(TOKEN)).await;
    assert_eq!((p["name"].as_str(), p["org_id"].as_str()), (Some("Shop"), Some(org.as_str())));

    // ---- credentials: a second issue replaces the first pair ----
    let first = admin.issue_credentials(SHOP).await.unwrap();
    let creds = admin.issue_credentials(SHOP).await.unwrap();
    assert_eq!(creds.project_id, shop);
    assert!(creds.api_key.starts_with("sxk_") && creds.ingest_token.starts_with("sxp_"));
    assert_ne!(first.api_key, creds.api_key);
    let blog_creds = admin.issue_credentials(BLOG).await.unwrap();
    assert_eq!(status_of(admin.issue_credentials("no-such-project").await.unwrap_err()).0, 404);
    assert_eq!(ingest_spans(&url, &first.api_key, "old").await, 401, "the replaced API key");
    assert_eq!(capture(&url, &first.ingest_token).await, 401, "the replaced ingest token");
    assert_eq!(ingest_spans(&url, &creds.api_key, "shop-a").await, 200);
    assert_eq!(capture(&url, &creds.ingest_token).await, 200);
    assert_eq!(ingest_spans(&url, &blog_creds.api_key, "blog-a").await, 200);
    // Only hashes are kept: nothing of the secrets is on disk or in the log.
    let (_, p) = admin_call(&admin_url, Method::GET, &format!("projects/{SHOP}"), Some(TOKEN)).await;
    assert_eq!(p["credentials"].as_array().unwrap().len(), 2, "{p}");
    let (_, secret) = creds.api_key.strip_prefix("sxk_").unwrap().split_once('_').unwrap();
    assert!(!std::fs::read_to_string(tmp.path().join("dev.log")).unwrap().contains(secret), "a secret in the log");

    // ---- the tenant's owner gets in by invitation, and reads with the credentials' data ----
    let (status, invite) =
        admin_call(&admin_url, Method::POST, &format!("tenants/{TENANT}/owner-invite"), Some(TOKEN)).await;
    assert_eq!(status, 201, "{invite}");
    let resp = http()
        .post(format!("{url}/auth/invite/accept"))
        .json(&json!({"invite_token": invite["invite_token"], "password": "tenant owner password", "name": "Ops"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let jwt = resp.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned();
    let (status, trace) = read(&url, &jwt, &shop, "/api/v1/traces/shop-a-t0").await;
    assert_eq!(status, 200, "{trace}");
    assert_eq!(trace["spans"].as_array().unwrap().len(), 3);
    let (status, _) = read(&url, &jwt, &shop, "/api/v1/traces/blog-a-t0").await;
    assert_eq!(status, 404, "one project's data is not visible through another");
    // Another org's user cannot reach the tenant's projects.
    let (status, _) = read(&url, &owner_jwt, &shop, "/api/v1/traces/shop-a-t0").await;
    assert_eq!(status, 404);

    // ---- managed objects are read-only through the public API ----
    let (status, keys) = read(&url, &jwt, &shop, "/api/v1/api-keys").await;
    assert_eq!(status, 200);
    let key = keys["items"].as_array().unwrap().iter().find(|k| !k["managed_by"].is_null()).cloned().unwrap();
    assert_eq!(key["managed_by"]["uid"], SHOP);
    let resp = http()
        .delete(format!("{url}/api/v1/api-keys/{}", key["id"].as_str().unwrap()))
        .bearer_auth(&jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "managed_by_resource", "{body}");
    assert_eq!(ingest_spans(&url, &creds.api_key, "shop-b").await, 200, "the key still works");
    let (_, projects) = read(&url, &jwt, &shop, "/projects").await;
    let listed: Vec<&Value> = projects["items"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|p| p["managed_by"]["kind"] == "Project"), "{projects}");
    // An unmanaged key of the same project stays deletable.
    let resp = http()
        .post(format!("{url}/api/v1/api-keys"))
        .bearer_auth(&jwt)
        .header("X-Project-Id", &shop)
        .json(&json!({"name": "ci"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let own: Value = resp.json().await.unwrap();
    let resp = http()
        .delete(format!("{url}/api/v1/api-keys/{}", own["id"].as_str().unwrap()))
        .bearer_auth(&jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);

    // ---- suspension ----
    admin.upsert_tenant(TENANT, &tenant_request("Acme Corp", true)).await.unwrap();
    let resp = post_spans(&url, &creds.api_key, &spans_batch("susp", 1, 1)).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "org_suspended");
    assert_eq!(read(&url, &jwt, &shop, "/api/v1/traces/shop-a-t0").await.0, 403);
    admin.upsert_tenant(TENANT, &tenant_request("Acme Corp", false)).await.unwrap();
    assert_eq!(ingest_spans(&url, &creds.api_key, "shop-c").await, 200);

    // ---- quotas ----
    let quota = QuotaRequest {
        tenant_key: None,
        project_key: Some(SHOP.into()),
        gb_per_month: Some(5),
        bytes_per_month: None,
        events_per_month: Some(1000),
        ingest_requests_per_second: Some(1000),
        enforcement: Enforcement::Soft,
        managed_by: managed("Quota", "shop-quota", "quota-uid-1"),
    };
    admin.upsert_quota("quota-uid-1", &quota).await.unwrap();
    admin.upsert_quota("quota-uid-1", &quota).await.unwrap();
    let (_, q) = admin_call(&admin_url, Method::GET, "quotas/quota-uid-1", Some(TOKEN)).await;
    assert_eq!((q["project_id"].as_str(), q["enforcement"].as_str()), (Some(shop.as_str()), Some("Soft")));
    admin.upsert_quota("quota-uid-1", &QuotaRequest { enforcement: Enforcement::Hard, ..quota.clone() }).await.unwrap();
    let (_, q) = admin_call(&admin_url, Method::GET, "quotas/quota-uid-1", Some(TOKEN)).await;
    assert_eq!(q["enforcement"], "Hard");
    let both = QuotaRequest { tenant_key: Some(TENANT.into()), ..quota.clone() };
    assert_eq!(status_of(admin.upsert_quota("quota-uid-2", &both).await.unwrap_err()).0, 400);
    // A limit in bytes, to the byte; not both units at once.
    let in_bytes = QuotaRequest { gb_per_month: None, bytes_per_month: Some(1_234_567), ..quota.clone() };
    admin.upsert_quota("quota-uid-1", &in_bytes).await.unwrap();
    let (_, q) = admin_call(&admin_url, Method::GET, "quotas/quota-uid-1", Some(TOKEN)).await;
    assert_eq!(q["monthly_bytes"], 1_234_567);
    let two_units = QuotaRequest { gb_per_month: Some(1), ..in_bytes.clone() };
    let (status, body) = status_of(admin.upsert_quota("quota-uid-1", &two_units).await.unwrap_err());
    assert!(status == 400 && body.contains("bytes_per_month"), "{body}");
    // Usage against it and against the plan, what Quota and Plan status show.
    let usage = admin.quota_usage("quota-uid-1").await.unwrap();
    assert_eq!((usage.limit_bytes, usage.limit_events), (Some(1_234_567), Some(1000)));
    assert!(usage.period_start < usage.period_end && usage.period.len() == 7, "{usage:?}");
    let plan = admin.plan_usage("gold").await.unwrap();
    assert_eq!((plan.organizations, plan.limit_bytes), (1, Some(20_000_000_000)));
    assert_eq!(status_of(admin.quota_usage("no-such-quota").await.unwrap_err()).0, 404);
    assert_eq!(admin_call(&admin_url, Method::GET, "quotas/quota-uid-1/usage", None).await.0, 401);
    assert_eq!(admin.delete_quota("quota-uid-1").await.unwrap(), Deletion::Done);
    assert_eq!(admin_call(&admin_url, Method::GET, "quotas/quota-uid-1", Some(TOKEN)).await.0, 404);
    assert_eq!(admin.delete_quota("quota-uid-1").await.unwrap(), Deletion::Done, "unknown: 204");

    // ---- alert rules ----
    let rule = admin.upsert_alert_rule("rule-uid-1", &rule_request(0.05)).await.unwrap().id;
    let again = admin.upsert_alert_rule("rule-uid-1", &rule_request(0.05)).await.unwrap();
    assert_eq!(again.id, rule);
    // The rule's state comes back with it: `ok` until evaluated, then `no_data` (no spans).
    match again.state.as_deref() {
        Some("ok") => assert_eq!(again.last_transition_at, None),
        Some("no_data") => assert!(again.last_transition_at.is_some() && again.last_value.is_none()),
        other => panic!("{other:?}"),
    }
    assert_eq!(admin.upsert_alert_rule("rule-uid-1", &rule_request(0.2)).await.unwrap().id, rule);
    let (_, r) = admin_call(&admin_url, Method::GET, "alert-rules/rule-uid-1", Some(TOKEN)).await;
    assert_eq!((r["threshold"].as_f64(), r["comparison"].as_str()), (Some(0.2), Some(">")));
    assert_eq!((r["metric"].as_str(), r["filter"]["service"].as_str()), (Some("error_rate"), Some("checkout")));
    assert_eq!(r["managed_by"]["kind"], "AlertRule");
    let long = AlertRuleRequest { window_minutes: 2000, ..rule_request(0.1) };
    assert_eq!(status_of(admin.upsert_alert_rule("rule-uid-2", &long).await.unwrap_err()).0, 400);
    assert_eq!(admin.delete_alert_rule("rule-uid-1").await.unwrap(), Deletion::Done);
    assert_eq!(admin.delete_alert_rule("rule-uid-1").await.unwrap(), Deletion::Done);
    admin.upsert_alert_rule("rule-uid-3", &rule_request(1.0)).await.unwrap();

    // ---- unknown deletes are done; a tenant with projects is not deleted ----
    for deletion in [
        admin.delete_project("never-existed").await,
        admin.delete_tenant("never-existed").await,
        admin.delete_plan("never-existed").await,
        admin.delete_alert_rule("never-existed").await,
    ] {
        assert_eq!(deletion.unwrap(), Deletion::Done);
    }
    let (status, body) = status_of(admin.delete_tenant(TENANT).await.unwrap_err());
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("projects_remain"), "{body}");

    // ---- project deletion: data gone from queries and disk, the other project's kept ----
    for i in 0..4 {
        assert_eq!(ingest_spans(&url, &creds.api_key, &format!("shop-d{i}")).await, 200);
        assert_eq!(ingest_spans(&url, &blog_creds.api_key, &format!("blog-d{i}")).await, 200);
    }
    let (shop_files, blog_files) = wait_for("both projects' rows in segment files", Duration::from_secs(60), || {
        let dir = tmp.path().to_owned();
        let (shop, blog) = (shop.clone(), blog.clone());
        async move {
            let segments = segments_on_disk(&dir);
            let (s, b) = (files_of(&segments, &shop), files_of(&segments, &blog));
            (!s.is_empty() && !b.is_empty()).then_some((s, b))
        }
    })
    .await;
    // And some rows still only in a buffer: one entry, below the flush threshold.
    assert_eq!(post_spans(&url, &creds.api_key, &spans_batch("shop-last", 1, 1)).await.status(), 200);
    assert_eq!(admin.delete_project(SHOP).await.unwrap(), Deletion::Done);
    assert_eq!(read(&url, &jwt, &shop, "/api/v1/traces/shop-a-t0").await.0, 404);
    assert_eq!(read(&url, &jwt, &shop, "/api/v1/logs/search").await.0, 404);
    assert_eq!(ingest_spans(&url, &creds.api_key, "shop-late").await, 401);
    assert_eq!(capture(&url, &creds.ingest_token).await, 401);
    assert_eq!(
        admin_call(&admin_url, Method::GET, "alert-rules/rule-uid-3", Some(TOKEN)).await.0,
        404,
        "its rules go too"
    );
    // The tenant's default moved to the remaining project.
    let (status, trace) = read(&url, &jwt, &blog, "/api/v1/traces/blog-a-t0").await;
    assert_eq!(status, 200, "{trace}");
    let resp = http().get(format!("{url}/api/v1/traces/blog-a-t0")).bearer_auth(&jwt).send().await.unwrap();
    assert_eq!(resp.status(), 200, "default project");
    wait_for("the deleted project's segments to leave the disk", Duration::from_secs(120), || {
        let dir = tmp.path().to_owned();
        let shop = shop.clone();
        async move { files_of(&segments_on_disk(&dir), &shop).is_empty().then_some(()) }
    })
    .await;
    // Every file that held its rows is gone (mixed ones were rewritten without them).
    wait_for("the replaced segment files to be removed", Duration::from_secs(30), || {
        let gone = shop_files.iter().all(|f| !f.exists());
        async move { gone.then_some(()) }
    })
    .await;
    let segments = segments_on_disk(tmp.path());
    assert!(!files_of(&segments, &blog).is_empty(), "the other project's segments are kept");
    assert!(!blog_files.is_empty());
    for i in 0..4 {
        let (status, _) = read(&url, &jwt, &blog, &format!("/api/v1/traces/blog-d{i}-t0")).await;
        assert_eq!(status, 200, "the other project's data is intact");
    }
    assert_eq!(admin.delete_project(SHOP).await.unwrap(), Deletion::Done, "a retried delete");
    let (status, body) = status_of(admin.upsert_project(SHOP, &project_request("Shop", SHOP)).await.unwrap_err());
    assert_eq!(status, 409, "a deleted project's key never makes a new project: {body}");

    // ---- tenant deletion, then its plan ----
    assert_eq!(status_of(admin.delete_plan("gold").await.unwrap_err()).0, 409, "the tenant is on it");
    assert_eq!(admin.delete_project(BLOG).await.unwrap(), Deletion::Done);
    // An org without projects: project data answers 404, org endpoints still serve, and a
    // project made through the public API becomes the default.
    let resp = http().get(format!("{url}/api/v1/traces/blog-a-t0")).bearer_auth(&jwt).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    let resp = http().get(format!("{url}/projects")).bearer_auth(&jwt).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["items"], json!([]));
    let resp =
        http().post(format!("{url}/projects")).bearer_auth(&jwt).json(&json!({"name": "side"})).send().await.unwrap();
    assert_eq!(resp.status(), 201);
    let side: Value = resp.json().await.unwrap();
    let side_token = side["token"].as_str().unwrap().to_owned();
    assert_eq!(capture(&url, &side_token).await, 200);
    let resp = http().get(format!("{url}/api/v1/api-keys")).bearer_auth(&jwt).send().await.unwrap();
    assert_eq!(resp.status(), 200, "the new project is the default");
    // Deleting the tenant takes that unmanaged project with it.
    assert_eq!(admin.delete_tenant(TENANT).await.unwrap(), Deletion::Done);
    assert_eq!(capture(&url, &side_token).await, 401);
    assert_eq!(admin.delete_tenant(TENANT).await.unwrap(), Deletion::Done);
    assert_eq!(admin_call(&admin_url, Method::GET, &format!("tenants/{TENANT}"), Some(TOKEN)).await.0, 404);
    let resp = http()
        .post(format!("{url}/auth/login"))
        .json(&json!({"email": "ops@acme.test", "password": "tenant owner password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "the tenant's users are gone");
    assert_eq!(admin.delete_plan("gold").await.unwrap(), Deletion::Done);
    assert_eq!(admin_call(&admin_url, Method::GET, "plans/gold", Some(TOKEN)).await.0, 404);
    // The bootstrap org never noticed.
    assert_eq!(ingest_spans(&url, dev.api_key(), "bootstrap").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_token_the_admin_api_does_not_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = start(tmp.path(), None).await;
    let admin = connect(&dev.internal_url, TOKEN);
    let (status, body) = status_of(admin.upsert_tenant(TENANT, &tenant_request("Acme", false)).await.unwrap_err());
    assert_eq!(status, 404, "{body}");
    // The operator must not take this 404 for a finished delete.
    assert_eq!(status_of(admin.delete_project(SHOP).await.unwrap_err()).0, 404);
    let (status, body) = admin_call(&dev.internal_url, Method::GET, "plans/pro", Some(TOKEN)).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_the_admin_api_are_served_on_the_internal_port_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = start(tmp.path(), Some(TOKEN)).await;
    let (public, internal) = (dev.url.as_str(), dev.internal_url.as_str());
    assert_ne!(public, internal);

    // The public port: no metrics, no admin API, even with the admin token.
    let resp = http().get(format!("{public}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found", "{body}");
    for (method, path) in [(Method::GET, "plans/pro"), (Method::GET, "cluster/nodes"), (Method::PUT, "plans/gold")] {
        let (status, body) = admin_call(public, method, path, Some(TOKEN)).await;
        assert_eq!(status, 404, "{path} on the public port: {body}");
        assert_eq!(body["error"]["code"], "not_found", "{body}");
    }
    let err = connect(public, TOKEN).upsert_plan("gold", &plan_request(10, 30)).await.unwrap_err();
    assert_eq!(status_of(err).0, 404);
    let (status, _) = admin_call(internal, Method::GET, "plans/gold", Some(TOKEN)).await;
    assert_eq!(status, 404, "the refused upsert stored nothing");

    // The internal port: both, the admin API behind the token.
    let resp = http().get(format!("{internal}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.lines().any(|l| l.starts_with("sextant_router_live_routers ")), "{text}");
    // The public port's refusals above are counted there.
    let unmatched_404 = |l: &&str| {
        l.starts_with("sextant_router_http_requests_total{")
            && l.contains("route=\"unmatched\"")
            && l.contains("status=\"404\"")
    };
    assert!(text.lines().any(|l| unmatched_404(&l)), "{text}");
    assert_eq!(admin_call(internal, Method::GET, "plans/pro", None).await.0, 401);
    let (status, plan) = admin_call(internal, Method::GET, "plans/pro", Some(TOKEN)).await;
    assert_eq!((status, plan["name"].as_str()), (StatusCode::OK, Some("pro")), "{plan}");
    let (status, nodes) = admin_call(internal, Method::GET, "cluster/nodes", Some(TOKEN)).await;
    assert_eq!(status, 200, "{nodes}");
    assert_eq!(nodes["nodes"].as_array().map(Vec::len), Some(1), "{nodes}");
    connect(internal, TOKEN).upsert_plan("gold", &plan_request(10, 30)).await.unwrap();

    // The probes answer on both; the public API stays on the public port.
    for url in [public, internal] {
        for probe in ["healthz", "readyz"] {
            assert_eq!(http().get(format!("{url}/{probe}")).send().await.unwrap().status(), 200, "{url}/{probe}");
        }
    }
    assert_eq!(ingest_spans(public, dev.api_key(), "public").await, 200);
    assert_eq!(ingest_spans(internal, dev.api_key(), "internal").await, 404);
}
