//! Admin API: tenants, projects and their credentials, plans, quotas, alert rules — what the
//! operator pushes from Tenant, Project, Plan, Quota and AlertRule resources
//! (`operator/src/admin.rs` is the client).
//!
//! Every object is keyed by the Kubernetes UID of its resource (plans by name): `PUT` creates
//! or updates and answers the same id every time, `DELETE` of an unknown key answers 204, so
//! the operator may retry anything. Each object records the resource it is managed by and is
//! read-only through the public API (409). Decisions that concurrent calls could race on are
//! taken by meta, in log order.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::{json, Value};
use sextant_model::admin::{
    AlertRuleRequest, Enforcement, PlanFeature, PlanRequest, ProjectRequest, QuotaRequest, TenantRequest,
};
use sextant_model::identity::{normalize_email, normalize_name, Problems};
use sextant_model::meta::{
    CredentialKind, Invite, ManagedBy, MetaCommand, MetaCommandResult, Org, Plan, PlanPrice, Project,
    RateLimitOverrides,
};
use sextant_model::meta::{Role, INVITE_TTL_MS};
use sextant_model::{OrgId, ProjectId, UserId};

use super::{Admin, MAX_ADMIN_BODY};
use crate::http::error::ApiError;
use crate::identity::account::time_json;
use crate::identity::auth::new_credential;
use crate::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/tenants/{key}", put(put_tenant).get(get_tenant).delete(delete_tenant))
        .route("/tenants/{key}/owner-invite", post(invite_owner))
        .route("/projects/{key}", put(put_project).get(get_project).delete(delete_project))
        .route("/projects/{key}/credentials", post(issue_credentials))
        .route("/plans/{name}", put(put_plan).get(get_plan).delete(delete_plan))
        .route("/quotas/{key}", put(put_quota).get(get_quota).delete(delete_quota))
        .route("/alert-rules/{key}", put(put_alert_rule).get(get_alert_rule).delete(delete_alert_rule))
}

/// Longest key: a Kubernetes name (UIDs are 36 characters).
const MAX_KEY: usize = 253;
const GB: u64 = 1_000_000_000;

/// A path key: what Kubernetes names and UIDs are made of, nothing that could mean anything
/// else. Checked after the admin token, so strangers learn nothing from it.
pub(super) fn key(raw: &str) -> Result<String, ApiError> {
    let ok = !raw.is_empty()
        && raw.len() <= MAX_KEY
        && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && raw != "."
        && raw != "..";
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(ApiError::BadRequest(
            "invalid_key",
            format!("`{}` is not a valid key", raw.chars().take(64).collect::<String>()),
        ))
    }
}

fn check_managed_by(problems: &mut Problems, m: &ManagedBy) {
    let short = |s: &str| {
        if s.is_empty() {
            Err("must not be empty")
        } else if s.len() > MAX_KEY || s.chars().any(char::is_control) {
            Err("must be at most 253 characters, without control characters")
        } else {
            Ok(())
        }
    };
    problems.check("managed_by.api_version", short(&m.api_version));
    problems.check("managed_by.kind", short(&m.kind));
    problems.check("managed_by.name", short(&m.name));
    problems.check("managed_by.uid", short(&m.uid));
    if let Some(ns) = &m.namespace {
        problems.check("managed_by.namespace", short(ns));
    }
}

/// Runs a meta command whose success is `Done`.
async fn change(app: &AppState, command: MetaCommand) -> Result<(), ApiError> {
    crate::http::error::expect_done(app.cluster.meta_change(&command).await?, "an admin change")
}

/// Runs a keyed meta command: the id of the object it created or updated.
async fn keyed(app: &AppState, command: MetaCommand) -> Result<String, ApiError> {
    match app.cluster.meta_change(&command).await? {
        MetaCommandResult::Keyed { id } => Ok(id),
        MetaCommandResult::Refused(r) => Err(r.into()),
        other => Err(ApiError::Internal(format!("unexpected meta answer to an admin change: {other:?}"))),
    }
}

fn deleted() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

// ---- tenants ----

async fn put_tenant(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    raw_body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let req: TenantRequest = crate::http::body::json(&headers, raw_body, MAX_ADMIN_BODY)?;
    let mut cache = app.meta()?;
    if !cache.plans.contains_key(&req.plan) {
        // Pushed through another router less than a refresh period ago, perhaps.
        app.cluster.refresh_meta().await?;
        cache = app.meta()?;
    }
    let mut problems = Problems::default();
    let name = problems.check("display_name", normalize_name(&req.display_name));
    let email = problems.check("owner_email", normalize_email(&req.owner_email));
    problems
        .check("plan", if cache.plans.contains_key(&req.plan) { Ok(()) } else { Err("no such plan in the catalog") });
    check_managed_by(&mut problems, &req.managed_by);
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let org = Org {
        id: OrgId::random(),
        name: name.unwrap_or_default(),
        plan: req.plan,
        // No project yet: the tenant's first project becomes its default.
        default_project: ProjectId::random(),
        created_at_ms: app.clock.now_millis(),
        managed_by: None,
        key: None,
        owner_email: None,
        suspended: false,
    };
    let command = MetaCommand::PutTenant {
        key,
        org,
        owner_email: email.unwrap_or_default(),
        suspended: req.suspended,
        managed_by: req.managed_by,
    };
    Ok(Json(json!({ "org_id": keyed(&app, command).await? })))
}

async fn get_tenant(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let cache = app.meta()?;
    let org = cache.tenant(&key).ok_or(ApiError::NotFound("no such tenant".into()))?;
    let projects: Vec<String> = {
        let mut p: Vec<String> =
            cache.projects.values().filter(|p| p.org_id == org.id).map(|p| p.id.to_string()).collect();
        p.sort();
        p
    };
    Ok(Json(json!({
        "org_id": org.id, "display_name": org.name, "plan": org.plan, "owner_email": org.owner_email,
        "suspended": org.suspended, "projects": projects, "created_at": time_json(org.created_at_ms),
        "managed_by": org.managed_by,
    })))
}

/// 409 while projects managed by Project resources remain (the operator deletes those first:
/// its Tenant finalizer waits for them); other projects of the org go with it, data included.
async fn delete_tenant(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let key = key(&raw)?;
    change(&app, MetaCommand::DeleteTenant { key, now_ms: app.clock.now_millis() }).await?;
    Ok(deleted())
}

/// An invitation for the tenant's owner email into its org, as owner (7 days, single use,
/// `POST /auth/invite/accept`): how the first person gets into an org that a Tenant resource
/// made. A new one replaces the pending one; 409 once that person has an account.
async fn invite_owner(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let key = key(&raw)?;
    let (token, id, token_sha256) = crate::identity::members::new_invite_token();
    let now = app.clock.now_millis();
    let invite = Invite {
        id,
        // Org, email and role are the tenant's, set by meta.
        org_id: OrgId::random(),
        email: String::new(),
        role: Role::Owner,
        token_sha256,
        invited_by: UserId::random(),
        created_at_ms: now,
        expires_at_ms: now + INVITE_TTL_MS,
    };
    let org_id = keyed(&app, MetaCommand::InviteTenantOwner { key, invite }).await?;
    Ok((StatusCode::CREATED, Json(json!({ "org_id": org_id, "invite_token": token }))))
}

// ---- projects ----

async fn put_project(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    raw_body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let req: ProjectRequest = crate::http::body::json(&headers, raw_body, MAX_ADMIN_BODY)?;
    let mut problems = Problems::default();
    let name = problems.check("name", normalize_name(&req.name));
    let tenant_key = problems.check("tenant_key", self::key(&req.tenant_key).map_err(|_| "not a valid key"));
    check_managed_by(&mut problems, &req.managed_by);
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let project = Project {
        id: ProjectId::random(),
        // Meta puts the tenant's org here.
        org_id: OrgId::random(),
        name: name.unwrap_or_default(),
        created_at_ms: app.clock.now_millis(),
        managed_by: None,
        key: None,
    };
    let command = MetaCommand::PutManagedProject {
        key,
        tenant_key: tenant_key.unwrap_or_default(),
        project,
        managed_by: req.managed_by,
    };
    Ok(Json(json!({ "project_id": keyed(&app, command).await? })))
}

async fn get_project(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let cache = app.meta()?;
    let project = cache.managed_project(&key).ok_or(ApiError::NotFound("no such project".into()))?;
    let credentials: Vec<Value> = {
        let mut c: Vec<_> = cache
            .credentials
            .values()
            .filter(|c| c.project_id == project.id && c.managed_by.is_some())
            .map(|c| (c.id.clone(), c.kind))
            .collect();
        c.sort_by(|a, b| a.0.cmp(&b.0));
        c.into_iter().map(|(id, kind)| json!({"id": id, "kind": kind})).collect()
    };
    Ok(Json(json!({
        "project_id": project.id, "org_id": project.org_id, "name": project.name,
        "created_at": time_json(project.created_at_ms), "credentials": credentials, "managed_by": project.managed_by,
    })))
}

/// A new ingest token and API key for the project; the pair issued before is deleted, so a
/// retry after a lost answer leaves exactly one valid pair. The secrets are in this answer
/// only; meta keeps their SHA-256.
async fn issue_credentials(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let mut cache = app.meta()?;
    if cache.managed_project(&key).is_none() {
        // Created through another router less than a refresh period ago.
        app.cluster.refresh_meta().await?;
        cache = app.meta()?;
    }
    let project_id = cache.managed_project(&key).map(|p| p.id).ok_or(ApiError::NotFound("no such project".into()))?;
    let now = app.clock.now_millis();
    let (ingest_token, token_record) = new_credential(CredentialKind::IngestToken, project_id, "kubernetes", now);
    let (api_key, key_record) = new_credential(CredentialKind::ApiKey, project_id, "kubernetes", now);
    change(&app, MetaCommand::IssueManagedCredentials { key, credentials: vec![token_record, key_record] }).await?;
    Ok(Json(json!({ "project_id": project_id, "ingest_token": ingest_token, "api_key": api_key })))
}

/// Deletes the project and all of its data: from now on no credential, token or query reaches
/// it; storage nodes drop its buffered rows and segments within their next retention pass.
async fn delete_project(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let key = key(&raw)?;
    change(&app, MetaCommand::DeleteManagedProject { key, now_ms: app.clock.now_millis() }).await?;
    Ok(deleted())
}

// ---- plans ----

async fn put_plan(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    raw_body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let name = key(&raw)?;
    let req: PlanRequest = crate::http::body::json(&headers, raw_body, MAX_ADMIN_BODY)?;
    let mut problems = Problems::default();
    let display_name = match &req.display_name {
        Some(d) => problems.check("display_name", normalize_name(d)),
        None => None,
    };
    let monthly_bytes = match req.gb_per_month {
        Some(gb) => problems.check("gb_per_month", gb.checked_mul(GB).ok_or("too large")).map(Some),
        None => Some(None),
    };
    problems.check(
        "retention_days",
        if (1..=36_500).contains(&req.retention_days) { Ok(()) } else { Err("must be between 1 and 36500") },
    );
    if req.features.len() > PlanFeature::ALL.len() {
        problems.check::<()>("features", Err("too many features"));
    }
    let price = req.price.map(|p| {
        let currency_ok = p.currency.len() == 3 && p.currency.bytes().all(|b| b.is_ascii_uppercase());
        problems.check("price.currency", if currency_ok { Ok(()) } else { Err("must be an ISO 4217 code") });
        PlanPrice { amount_cents: p.amount_cents, currency: p.currency, interval: p.interval.as_str().to_owned() }
    });
    check_managed_by(&mut problems, &req.managed_by);
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let mut features: Vec<String> = req.features.iter().map(|f| f.as_str().to_owned()).collect();
    features.sort();
    features.dedup();
    let plan = Plan {
        name,
        monthly_bytes: monthly_bytes.flatten(),
        monthly_events: req.events_per_month,
        retention_days: Some(req.retention_days),
        features,
        rate_limits: RateLimitOverrides::default(),
        managed_by: None,
        display_name: None,
        price: None,
    };
    change(&app, MetaCommand::PutManagedPlan { plan, display_name, price, managed_by: req.managed_by }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn get_plan(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let name = key(&raw)?;
    let cache = app.meta()?;
    let plan = cache.plans.get(&name).ok_or(ApiError::NotFound("no such plan".into()))?;
    Ok(Json(json!({
        "name": plan.name,
        "display_name": plan.display_name,
        "monthly_bytes": plan.monthly_bytes, "monthly_events": plan.monthly_events,
        "retention_days": plan.retention_days, "features": plan.features,
        "price": plan.price,
        "managed_by": plan.managed_by,
    })))
}

/// A default catalog entry returns to its default; another plan is removed (409 while orgs
/// are on it).
async fn delete_plan(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let name = key(&raw)?;
    change(&app, MetaCommand::DeleteManagedPlan { name }).await?;
    Ok(deleted())
}

// ---- quotas ----

async fn put_quota(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    raw_body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = key(&raw)?;
    let req: QuotaRequest = crate::http::body::json(&headers, raw_body, MAX_ADMIN_BODY)?;
    let mut problems = Problems::default();
    let valid_key = |k: &Option<String>| k.as_deref().map(|k| self::key(k).map_err(|_| "not a valid key")).transpose();
    let tenant_key = problems.check("tenant_key", valid_key(&req.tenant_key)).flatten();
    let project_key = problems.check("project_key", valid_key(&req.project_key)).flatten();
    if req.tenant_key.is_some() == req.project_key.is_some() {
        problems.check::<()>("tenant_key", Err("exactly one of tenant_key and project_key must be set"));
    }
    let monthly_bytes = match (req.gb_per_month, req.bytes_per_month) {
        (Some(_), Some(_)) => {
            problems.check::<()>("bytes_per_month", Err("at most one of gb_per_month and bytes_per_month"));
            None
        }
        (Some(gb), None) => problems.check("gb_per_month", gb.checked_mul(GB).ok_or("too large")).map(Some),
        (None, bytes) => Some(bytes),
    };
    if req.ingest_requests_per_second == Some(0) {
        problems.check::<()>("ingest_requests_per_second", Err("must be at least 1"));
    }
    let hard = req.enforcement == Enforcement::Hard;
    check_managed_by(&mut problems, &req.managed_by);
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let command = MetaCommand::PutManagedQuota {
        key,
        tenant_key,
        project_key,
        monthly_bytes: monthly_bytes.flatten(),
        monthly_events: req.events_per_month,
        ingest_rps: req.ingest_requests_per_second,
        hard,
        managed_by: req.managed_by,
    };
    change(&app, command).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn get_quota(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let cache = app.meta()?;
    let q = cache.managed_quota(&key).ok_or(ApiError::NotFound("no such quota".into()))?;
    Ok(Json(json!({
        "org_id": q.org_id, "project_id": q.project_id, "monthly_bytes": q.monthly_bytes,
        "monthly_events": q.monthly_events, "ingest_requests_per_second": q.rate_limits.ingest_rps,
        "enforcement": if q.hard { "Hard" } else { "Soft" }, "managed_by": q.managed_by,
    })))
}

async fn delete_quota(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let key = key(&raw)?;
    change(&app, MetaCommand::DeleteManagedQuota { key }).await?;
    Ok(deleted())
}

// ---- alert rules ----

async fn put_alert_rule(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    raw_body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let req: AlertRuleRequest = crate::http::body::json(&headers, raw_body, MAX_ADMIN_BODY)?;
    let mut problems = Problems::default();
    let project_key = problems.check("project_key", self::key(&req.project_key).map_err(|_| "not a valid key"));
    let name = problems.check("name", normalize_name(&req.name));
    problems.check("threshold", if req.threshold.is_finite() { Ok(()) } else { Err("must be a finite number") });
    problems.check(
        "window_minutes",
        if (1..=1440).contains(&req.window_minutes) { Ok(()) } else { Err("must be between 1 and 1440") },
    );
    let filter = crate::alerts::api::checked_filter(&mut problems, req.filter);
    problems.check(
        "for_seconds",
        if req.for_seconds <= sextant_model::alert::MAX_FOR_SECONDS { Ok(()) } else { Err("must be at most 86400") },
    );
    let webhook_id = crate::alerts::api::filter_value(&mut problems, "webhook_id", req.webhook_id);
    check_managed_by(&mut problems, &req.managed_by);
    problems.into_result().map_err(ApiError::invalid_fields)?;
    if let Some(project) = app.meta()?.managed_project(project_key.as_deref().unwrap_or_default()) {
        crate::alerts::api::check_target(&app, project.id, webhook_id.as_deref()).await?;
    }
    let command = MetaCommand::PutManagedAlertRule {
        key,
        project_key: project_key.unwrap_or_default(),
        id: uuid::Uuid::new_v4().to_string(),
        name: name.unwrap_or_default(),
        metric: req.metric.as_str().to_owned(),
        filter,
        comparison: req.comparison.as_str().to_owned(),
        threshold: req.threshold,
        window_minutes: req.window_minutes,
        enabled: req.enabled,
        now_ms: app.clock.now_millis(),
        managed_by: req.managed_by,
        for_seconds: req.for_seconds,
        webhook_id,
    };
    let id = keyed(&app, command).await?;
    Ok(Json(json!(crate::alerts::api::managed_rule_status(&app, id).await?)))
}

async fn get_alert_rule(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&raw)?;
    let cache = app.meta()?;
    let r = cache
        .alert_rules
        .iter()
        .find(|r| r.key.as_deref() == Some(key.as_str()))
        .ok_or(ApiError::NotFound("no such alert rule".into()))?;
    Ok(Json(json!({
        "id": r.id, "project_id": r.project_id, "name": r.name, "metric": r.metric, "filter": r.filter,
        "comparison": r.comparison, "threshold": r.threshold, "window_minutes": r.window_minutes,
        "enabled": r.enabled, "created_at": time_json(r.created_at_ms), "managed_by": r.managed_by,
    })))
}

async fn delete_alert_rule(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let key = key(&raw)?;
    change(&app, MetaCommand::DeleteManagedAlertRule { key }).await?;
    Ok(deleted())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kubernetes_names_or_uids() {
        assert!(key("9b2e6f9e-0000-4000-8000-000000000001").is_ok());
        assert!(key("pro").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "a%2f", &"a".repeat(254)] {
            assert!(key(bad).is_err(), "{bad}");
        }
    }
}
