//! The webhook endpoints of the current project (docs/API.md, "Webhooks"):
//! `GET/POST /api/webhooks`, `DELETE /api/webhooks/{id}`, `GET /api/webhooks/{id}/deliveries`,
//! `POST /api/webhooks/{id}/test` and `POST /api/webhooks/{id}/rotate-secret`. A webhook of
//! another project or org is the same 404 as an unknown id. Creating, deleting and rotating
//! take an owner or admin (a webhook sends the project's events out). The signing secret is
//! answered once, when it is made; meta keeps it to sign with.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sextant_model::alert::AlertEntry;
use sextant_model::ingest::FieldError;
use sextant_model::meta::{MetaCommand, MetaQuery};
use sextant_model::webhook::{
    validate_events, Attempt, Delivery, DeliveryStatus, SigningSecret, Webhook, WebhookInfo, WebhookSecret,
    MAX_EVENTS_PER_WEBHOOK, MAX_EVENT_NAME_LEN, MAX_URL_LEN, ROTATION_OVERLAP_MS,
};

use super::{guard, sign, worker};
use crate::http::error::{expect_done, ApiError};
use crate::http::listing::{Listed, Page};
use crate::identity::account::time_json;
use crate::identity::auth::Session;
use crate::AppState;

/// A webhook body: a URL, up to 50 event names and a secret fit easily.
pub const MAX_WEBHOOK_BODY: usize = MAX_URL_LEN + MAX_EVENTS_PER_WEBHOOK * (MAX_EVENT_NAME_LEN + 8) + 1024;
/// Longest webhook id accepted in a path (ids are `wh_` and 32 hex digits).
const MAX_ID_CHARS: usize = 64;
/// How long `POST /api/webhooks/{id}/test` waits for the ping's first attempt.
const TEST_WAIT: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookInput {
    pub url: String,
    pub events: Vec<String>,
    /// `whsec_` + base64 of 24 to 64 bytes; generated when absent.
    #[serde(default)]
    pub secret: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookJson {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub enabled: bool,
    pub created_at: String,
    /// Why it was disabled (`gone`: the endpoint answered 410).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Deliveries not queued because 500 were already pending.
    pub dropped_deliveries: u64,
}

impl From<&WebhookInfo> for WebhookJson {
    fn from(w: &WebhookInfo) -> Self {
        WebhookJson {
            id: w.id.clone(),
            url: w.url.clone(),
            events: w.events.clone(),
            enabled: w.enabled,
            created_at: time_json(w.created_at_ms),
            disabled_reason: w.disabled_reason.clone(),
            dropped_deliveries: w.dropped,
        }
    }
}

/// A new webhook with its secret, shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NewWebhook {
    #[serde(flatten)]
    pub webhook: WebhookJson,
    pub secret: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptJson {
    pub attempt: u32,
    pub at: String,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response_excerpt: Option<String>,
}

impl From<&Attempt> for AttemptJson {
    fn from(a: &Attempt) -> Self {
        AttemptJson {
            attempt: a.attempt,
            at: time_json(a.at_ms),
            status_code: a.status_code,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            response_excerpt: a.response_excerpt.clone(),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryJson {
    /// The `webhook-id` header of every attempt.
    pub id: String,
    pub event: String,
    pub status: DeliveryStatus,
    pub created_at: String,
    pub attempts: Vec<AttemptJson>,
    pub next_attempt_at: Option<String>,
}

impl From<&Delivery> for DeliveryJson {
    fn from(d: &Delivery) -> Self {
        DeliveryJson {
            id: d.id.clone(),
            event: d.event.clone(),
            status: d.status,
            created_at: time_json(d.created_at_ms),
            attempts: d.attempts.iter().map(AttemptJson::from).collect(),
            next_attempt_at: d.next_attempt_at_ms.map(time_json),
        }
    }
}

#[derive(Debug, Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateInput {
    #[serde(default)]
    pub secret: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Rotated {
    /// The new secret, shown this once.
    pub secret: String,
    /// Until then the previous secret signs too.
    pub previous_secret_expires_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TestResult {
    pub delivery_id: String,
    pub status: DeliveryStatus,
    /// The first attempt, if it finished in time (else see the delivery's history).
    pub attempt: Option<AttemptJson>,
}

fn field_error(field: &str, reason: impl Into<String>) -> ApiError {
    ApiError::invalid_fields(vec![FieldError { index: 0, field: field.into(), reason: reason.into() }])
}

/// A given secret must be one the spec allows; none makes a new one.
fn secret_or_new(given: Option<String>) -> Result<String, ApiError> {
    match given {
        None => Ok(sign::generate_secret()),
        Some(s) if sign::key_of(&s).is_some() => Ok(s),
        Some(_) => Err(field_error(
            "secret",
            format!("must be whsec_ followed by base64 of {} to {} bytes", sign::MIN_KEY_BYTES, sign::MAX_KEY_BYTES),
        )),
    }
}

impl From<guard::Refused> for ApiError {
    fn from(r: guard::Refused) -> Self {
        field_error("url", r.to_string())
    }
}

async fn project_webhooks(app: &AppState, session: &Session) -> Result<Vec<WebhookInfo>, ApiError> {
    Ok(app.cluster.meta_read(&MetaQuery::Webhooks { project_id: session.project_id }).await?)
}

/// The webhook `id` of the session's project; 404 for any other id.
async fn find(app: &AppState, session: &Session, id: &str) -> Result<WebhookInfo, ApiError> {
    let not_found = || ApiError::NotFound(format!("no webhook {id} in this project"));
    if id.is_empty() || id.len() > MAX_ID_CHARS {
        return Err(not_found());
    }
    project_webhooks(app, session).await?.into_iter().find(|w| w.id == id).ok_or_else(not_found)
}

/// `GET /api/webhooks`: oldest first.
#[utoipa::path(
    get, path = "/api/webhooks", tag = "webhooks", summary = "The current project's webhooks",
    params(crate::http::listing::Paging),
    responses((status = 200, description = "The webhooks, oldest first, without their secrets.", body = Listed<WebhookJson>), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Listed<WebhookJson>>, ApiError> {
    let page = Page::from_query(raw.as_deref())?;
    let hooks = project_webhooks(&app, &session).await?;
    let items = hooks.iter().map(|w| (format!("{:020}:{}", w.created_at_ms.max(0), w.id), WebhookJson::from(w)));
    Ok(Json(page.apply(items.collect())))
}

/// `POST /api/webhooks {url, events, secret?}` → 201 with the secret.
#[utoipa::path(
    post, path = "/api/webhooks", tag = "webhooks", summary = "Create a webhook",
    request_body(content = WebhookInput, example = json!({"url": "https://hooks.example.com/sextant", "events": ["purchase", "system.alert_triggered"]})),
    responses(
        (status = 201, description = "Created; `secret` (`whsec_…`) is shown only here.", body = NewWebhook),
        (status = 409, description = "The project has the maximum number of webhooks.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn create(
    State(app): State<Arc<AppState>>,
    session: Session,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    session.require_org_manager()?;
    let input: WebhookInput = crate::http::body::json(&headers, body, MAX_WEBHOOK_BODY)?;
    app.webhooks.policy.check_url(&input.url)?;
    validate_events(&input.events).map_err(|(field, reason)| field_error(field, reason))?;
    let mut events: Vec<String> = Vec::with_capacity(input.events.len());
    for e in input.events {
        if !events.contains(&e) {
            events.push(e);
        }
    }
    let secret = secret_or_new(input.secret)?;
    let hook = Webhook {
        id: format!("wh_{}", uuid::Uuid::new_v4().simple()),
        org_id: session.user.org_id,
        project_id: session.project_id,
        url: input.url,
        events,
        enabled: true,
        created_at_ms: app.clock.now_millis(),
        secrets: vec![WebhookSecret { secret: SigningSecret(secret.clone()), expires_at_ms: None }],
        disabled_reason: None,
        dropped: 0,
    };
    let answer = NewWebhook { webhook: WebhookJson::from(&hook.info()), secret };
    expect_done(app.cluster.meta_change(&MetaCommand::CreateWebhook { webhook: hook }).await?, "a new webhook")?;
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// `DELETE /api/webhooks/{id}` → 204; its pending deliveries are not sent.
#[utoipa::path(
    delete, path = "/api/webhooks/{id}", tag = "webhooks", summary = "Delete a webhook",
    params(("id" = String, Path, description = "The webhook's id.")),
    responses(
        (status = 204, description = "Deleted, with its deliveries."),
        (status = 409, description = "`webhook_in_use`: alert rules notify it.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn delete(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    session.require_org_manager()?;
    let hook = find(&app, &session, &id).await?;
    let rules: Vec<AlertEntry> =
        app.cluster.meta_read(&MetaQuery::Alerts { project_id: Some(session.project_id), history: false }).await?;
    if rules.iter().any(|e| e.rule.webhook_id.as_deref() == Some(hook.id.as_str())) {
        return Err(ApiError::Conflict(
            "webhook_in_use",
            "alert rules notify this webhook; point them elsewhere or delete them first",
        ));
    }
    let command =
        MetaCommand::DeleteWebhook { org_id: session.user.org_id, project_id: session.project_id, id: hook.id };
    expect_done(app.cluster.meta_change(&command).await?, "deleting a webhook")?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/webhooks/{id}/deliveries`: newest first, every attempt of each.
#[utoipa::path(
    get, path = "/api/webhooks/{id}/deliveries", tag = "webhooks", summary = "A webhook's deliveries and their attempts",
    params(("id" = String, Path, description = "The webhook's id."), crate::http::listing::Paging),
    responses((status = 200, description = "Deliveries, newest first.", body = Listed<DeliveryJson>), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn deliveries(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Listed<DeliveryJson>>, ApiError> {
    let page = Page::from_query(raw.as_deref())?;
    let hook = find(&app, &session, &id).await?;
    let list: Vec<Delivery> = app
        .cluster
        .meta_read(&MetaQuery::WebhookDeliveries { project_id: session.project_id, webhook_id: hook.id })
        .await?;
    // Newest first: the key counts down with time.
    let items =
        list.iter().map(|d| (format!("{:020}:{}", i64::MAX - d.created_at_ms.max(0), d.id), DeliveryJson::from(d)));
    Ok(Json(page.apply(items.collect())))
}

/// `POST /api/webhooks/{id}/test`: a signed `webhook.test` delivery, sent now through the
/// queue (so it is recorded and retried like any other); answers its first attempt.
#[utoipa::path(
    post, path = "/api/webhooks/{id}/test", tag = "webhooks", summary = "Send a signed test event",
    params(("id" = String, Path, description = "The webhook's id.")),
    responses(
        (status = 200, description = "The test delivery and its first attempt.", body = TestResult),
        (status = 409, description = "The webhook is disabled.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn test(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Json<TestResult>, ApiError> {
    let hook = find(&app, &session, &id).await?;
    if !hook.enabled {
        return Err(ApiError::Conflict("webhook_disabled", "this webhook is disabled; create it again to use it"));
    }
    let event_id = format!("test:{}", uuid::Uuid::new_v4().simple());
    let delivery_id = sextant_model::webhook::delivery_id(&event_id, &hook.id);
    let command = MetaCommand::SendTestEvent {
        org_id: session.user.org_id,
        project_id: session.project_id,
        webhook_id: hook.id.clone(),
        event_id,
        at_ms: app.clock.now_millis(),
    };
    expect_done(app.cluster.meta_write(&command).await?, "a test delivery")?;
    // Sent by this router at once, unless another router's worker got to it first.
    if let Err(e) = worker::run_once(&app).await {
        tracing::warn!(error = %e, "sending a test delivery failed");
    }
    let query = MetaQuery::WebhookDeliveries { project_id: session.project_id, webhook_id: hook.id };
    let deadline = tokio::time::Instant::now() + TEST_WAIT;
    loop {
        let list: Vec<Delivery> = app.cluster.meta_read(&query).await?;
        let Some(d) = list.into_iter().find(|d| d.id == delivery_id) else {
            return Err(ApiError::NotFound("the webhook was deleted".into()));
        };
        if !d.attempts.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(Json(TestResult {
                delivery_id: d.id.clone(),
                status: d.status,
                attempt: d.attempts.first().map(AttemptJson::from),
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `POST /api/webhooks/{id}/rotate-secret {secret?}`: the new secret signs from now on, the
/// previous one too for [`ROTATION_OVERLAP_MS`].
#[utoipa::path(
    post, path = "/api/webhooks/{id}/rotate-secret", tag = "webhooks", summary = "Rotate a webhook's signing secret",
    params(("id" = String, Path, description = "The webhook's id.")),
    request_body(content = Option<RotateInput>, description = "Optional: the new secret; generated when absent."),
    responses((status = 200, description = "The new secret, shown only here.", body = Rotated), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn rotate_secret(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Rotated>, ApiError> {
    session.require_org_manager()?;
    let input: RotateInput = match &body {
        Ok(b) if b.is_empty() => RotateInput::default(),
        _ => crate::http::body::json(&headers, body, MAX_WEBHOOK_BODY)?,
    };
    let hook = find(&app, &session, &id).await?;
    let secret = secret_or_new(input.secret)?;
    let now_ms = app.clock.now_millis();
    let command = MetaCommand::RotateWebhookSecret {
        org_id: session.user.org_id,
        project_id: session.project_id,
        id: hook.id,
        secret: SigningSecret(secret.clone()),
        now_ms,
    };
    expect_done(app.cluster.meta_change(&command).await?, "rotating a webhook secret")?;
    Ok(Json(Rotated { secret, previous_secret_expires_at: time_json(now_ms.saturating_add(ROTATION_OVERLAP_MS)) }))
}
