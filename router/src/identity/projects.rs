//! Projects of an organization (docs/API.md, "Projects and project tokens"). Every project gets
//! an analytics ingest token, shown once at creation.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sextant_model::identity::{normalize_name, Problems};
use sextant_model::meta::{CredentialKind, ManagedBy, MetaCommand, Project};
use sextant_model::ProjectId;

use crate::http::error::ApiError;
use crate::http::listing::{Listed, Page};
use crate::identity::account::{time_json, MAX_AUTH_BODY};
use crate::identity::auth::{new_credential, Session};
use crate::AppState;

/// A project; `token` (its analytics ingest token) only in the answer that created it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProjectJson {
    pub id: ProjectId,
    pub name: String,
    pub created_at: String,
    pub is_default: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl ProjectJson {
    pub fn new(p: &Project, token: Option<String>, is_default: bool) -> Self {
        ProjectJson { id: p.id, name: p.name.clone(), created_at: time_json(p.created_at_ms), is_default, token }
    }
}

/// A project in `GET /projects`: and the Kubernetes resource that manages it, if any.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ListedProject {
    #[serde(flatten)]
    pub project: ProjectJson,
    pub managed_by: Option<ManagedBy>,
}

#[utoipa::path(
    get, path = "/projects", tag = "accounts", summary = "The organization's projects",
    responses((status = 200, description = "Every project of the caller's organization.", body = Listed<ListedProject>), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(query): RawQuery,
) -> Result<Json<Listed<ListedProject>>, ApiError> {
    let page = Page::from_query(query.as_deref())?;
    let cache = app.meta()?;
    let default = cache.orgs.get(&session.user.org_id).map(|o| o.default_project);
    let mut items: Vec<(String, ListedProject)> = cache
        .projects
        .values()
        .filter(|p| p.org_id == session.user.org_id)
        .map(|p| {
            let listed = ListedProject {
                project: ProjectJson::new(p, None, Some(p.id) == default),
                managed_by: p.managed_by.clone(),
            };
            (p.id.to_string(), listed)
        })
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Json(page.apply(items)))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateProject {
    name: String,
}

#[utoipa::path(
    post, path = "/projects", tag = "accounts", summary = "Create a project (owner only)",
    request_body(content = CreateProject, example = json!({"name": "web"})),
    responses(
        (status = 201, description = "Created; `token` is its ingest token.", body = ProjectJson),
        (status = 409, description = "A project with this name exists, or the limit is reached.", body = crate::http::error::ErrorBody),
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
    session.require_owner()?;
    let req: CreateProject = crate::http::body::json(&headers, body, MAX_AUTH_BODY)?;
    let mut problems = Problems::default();
    let name = problems.check("name", normalize_name(&req.name));
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let now = app.clock.now_millis();
    let project = Project {
        id: ProjectId::random(),
        org_id: session.user.org_id,
        name: name.unwrap_or_default(),
        created_at_ms: now,
        managed_by: None,
        key: None,
    };
    let (token, record) = new_credential(CredentialKind::IngestToken, project.id, "default", now);
    let body = ProjectJson::new(&project, Some(token), false);
    crate::http::error::expect_done(
        app.cluster.meta_change(&MetaCommand::CreateProject { project, credentials: vec![record] }).await?,
        "a new project",
    )?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
