//! API keys of the current project (docs/API.md, "API keys"): `sxk_…`, for observability
//! ingest. The secret is shown once; meta keeps its SHA-256.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sextant_model::identity::{normalize_name, Problems};
use sextant_model::meta::{Credential, CredentialKind, ManagedBy, MetaCommand};
use sextant_model::ProjectId;

use crate::http::error::ApiError;
use crate::http::listing::{Listed, Page};
use crate::identity::account::{time_json, MAX_AUTH_BODY};
use crate::identity::auth::{new_credential, Session};
use crate::AppState;

/// An API key as listed: never its secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyJson {
    pub id: String,
    pub name: String,
    pub project_id: ProjectId,
    pub prefix: String,
    pub created_at: String,
}

impl From<&Credential> for KeyJson {
    fn from(c: &Credential) -> Self {
        KeyJson {
            id: c.id.clone(),
            name: c.name.clone(),
            project_id: c.project_id,
            prefix: format!("sxk_{}", c.id),
            created_at: time_json(c.created_at_ms),
        }
    }
}

/// A key in `GET /api/v1/api-keys`, and the Kubernetes resource whose Secret holds it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ListedKey {
    #[serde(flatten)]
    pub api_key: KeyJson,
    pub managed_by: Option<ManagedBy>,
}

/// A new key: the whole secret, shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NewKey {
    #[serde(flatten)]
    pub api_key: KeyJson,
    pub key: String,
}

#[utoipa::path(
    get, path = "/api/v1/api-keys", tag = "accounts", summary = "The current project's API keys",
    responses((status = 200, description = "The keys, without their secrets.", body = Listed<ListedKey>), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(query): RawQuery,
) -> Result<Json<Listed<ListedKey>>, ApiError> {
    let page = Page::from_query(query.as_deref())?;
    let cache = app.meta()?;
    let mut items: Vec<(String, ListedKey)> = cache
        .credentials
        .values()
        .filter(|c| c.kind == CredentialKind::ApiKey && !c.revoked && c.project_id == session.project_id)
        .map(|c| {
            // Keys in a Project resource's Secret are read-only here (DELETE answers 409).
            let managed_by = c.managed_by.clone();
            (c.id.clone(), ListedKey { api_key: c.into(), managed_by })
        })
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Json(page.apply(items)))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    name: String,
}

#[utoipa::path(
    post, path = "/api/v1/api-keys", tag = "accounts", summary = "Create an API key",
    request_body(content = CreateKey, example = json!({"name": "production"})),
    responses(
        (status = 201, description = "Created; `key` (`sxk_…`) is shown only here.", body = NewKey),
        (status = 409, description = "The limit is reached.", body = crate::http::error::ErrorBody),
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
    let req: CreateKey = crate::http::body::json(&headers, body, MAX_AUTH_BODY)?;
    let mut problems = Problems::default();
    let name = problems.check("name", normalize_name(&req.name));
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let now = app.clock.now_millis();
    let (key, credential) = new_credential(CredentialKind::ApiKey, session.project_id, &name.unwrap_or_default(), now);
    let body = NewKey { api_key: KeyJson::from(&credential), key };
    let command = MetaCommand::CreateCredential { org_id: session.user.org_id, credential };
    crate::http::error::expect_done(app.cluster.meta_change(&command).await?, "a new key")?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Revokes a key of any project of the caller's org; every router refuses it within a
/// meta refresh period (one second).
#[utoipa::path(
    delete, path = "/api/v1/api-keys/{id}", tag = "accounts", summary = "Revoke an API key",
    params(("id" = String, Path, description = "The key's id.")),
    responses(
        (status = 204, description = "Revoked."),
        (status = 409, description = "Managed by a Kubernetes resource.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn delete(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    session.require_org_manager()?;
    if id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::NotFound("API key not found".into()));
    }
    let command = MetaCommand::RevokeCredential { org_id: session.user.org_id, id, kind: CredentialKind::ApiKey };
    crate::http::error::expect_done(app.cluster.meta_change(&command).await?, "a revocation")?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
