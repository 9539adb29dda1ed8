//! Projects of an organization (docs/API.md, "Projects and project tokens"). Every project gets
//! an analytics ingest token, shown once at creation.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use sextant_model::identity::{normalize_name, Problems};
use sextant_model::meta::{CredentialKind, MetaCommand, Project};
use sextant_model::ProjectId;

use crate::http::error::ApiError;
use crate::http::listing::Page;
use crate::identity::account::{time_json, MAX_AUTH_BODY};
use crate::identity::auth::{new_credential, Session};
use crate::AppState;

/// A project; `token` only in the answer that created it.
pub fn project_json(p: &Project, token: Option<&str>, is_default: bool) -> Value {
    let mut v = json!({
        "id": p.id, "name": p.name, "created_at": time_json(p.created_at_ms), "is_default": is_default,
    });
    if let Some(t) = token {
        v["token"] = json!(t);
    }
    v
}

pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let page = Page::from_query(query.as_deref())?;
    let cache = app.cluster.meta_cache().ok_or_else(|| ApiError::Unavailable("metadata is not loaded yet".into()))?;
    let default = cache.orgs.get(&session.user.org_id).map(|o| o.default_project);
    let mut items: Vec<(String, Value)> = cache
        .projects
        .values()
        .filter(|p| p.org_id == session.user.org_id)
        .map(|p| {
            let mut v = project_json(p, None, Some(p.id) == default);
            v["managed_by"] = json!(cache.project_manager(&p.id).map(|m| &m.managed_by));
            (p.id.to_string(), v)
        })
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Json(page.apply(items)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateProject {
    name: String,
}

pub async fn create(
    State(app): State<Arc<AppState>>,
    session: Session,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    session.require_owner()?;
    let req: CreateProject = crate::http::body::json(&headers, body, MAX_AUTH_BODY)?;
    let mut problems = Problems::default();
    let name = problems.check("name", normalize_name(&req.name));
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let now = chrono::Utc::now().timestamp_millis();
    let project = Project {
        id: ProjectId::random(),
        org_id: session.user.org_id,
        name: name.unwrap_or_default(),
        created_at_ms: now,
    };
    let (token, record) = new_credential(CredentialKind::IngestToken, project.id, "default", now);
    let body = project_json(&project, Some(token.as_str()), false);
    crate::http::error::expect_done(
        app.cluster.meta_change(&MetaCommand::CreateProject { project, credentials: vec![record] }).await?,
        "a new project",
    )?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
