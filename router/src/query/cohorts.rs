//! Cohorts (docs/API.md, "Cohorts"): `GET/POST /api/cohorts`, `GET /api/cohorts/{id}`,
//! `GET /api/cohorts/{id}/users`, and the `cohort_id` filter of timeseries, funnels and
//! active users. Definitions are validated by `model::cohort` and stored in meta, scoped to a
//! project (another project's or org's cohort is the same 404 as an unknown id). Membership
//! is decided by the shards, each for its own users; sizes are added and member lists merged
//! here.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use sextant_model::cohort::{self, Cohort, CohortInput};
use sextant_model::meta::{MetaCommand, MetaQuery};
use sextant_model::query::{CohortFilter, CohortMembers, CohortSizes, CohortSizesPlan, CohortUsersPlan};
use sextant_model::ProjectId;

use super::params::{invalid, Params};
use super::scatter::{scatter, Answer, Gathered};
use crate::http::error::ApiError;
use crate::http::listing::{Listed, Page};
use crate::identity::account::time_json;
use crate::identity::auth::Session;
use crate::AppState;

/// A cohort body: a name and at most 20 conditions fit easily.
pub const MAX_COHORT_BODY: usize = 16 * 1024;
/// Longest cohort id accepted in a path or parameter (ids are 32 hex digits).
const MAX_ID_CHARS: usize = 64;

/// A cohort, with its size when it was evaluated.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CohortJson {
    pub id: String,
    pub name: String,
    pub conditions: Value,
    pub size: u64,
    pub created_at: String,
}

fn cohort_json(c: &Cohort, size: u64) -> CohortJson {
    CohortJson {
        id: c.id.clone(),
        name: c.name.clone(),
        conditions: c.definition.to_json(),
        size,
        created_at: time_json(c.created_at_ms),
    }
}

/// A member of a cohort.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CohortMember {
    pub distinct_id: String,
}

async fn project_cohorts(app: &AppState, project: &ProjectId) -> Result<Vec<Cohort>, ApiError> {
    Ok(app.cluster.meta_read(&MetaQuery::Cohorts { project_id: *project }).await?)
}

/// The cohort `id` of the session's project; 404 for any other id.
async fn find(app: &AppState, session: &Session, id: &str) -> Result<Cohort, ApiError> {
    let not_found = || ApiError::NotFound(format!("no cohort {id} in this project"));
    if id.is_empty() || id.len() > MAX_ID_CHARS {
        return Err(not_found());
    }
    project_cohorts(app, &session.project_id).await?.into_iter().find(|c| c.id == id).ok_or_else(not_found)
}

/// The evaluation instant: `to` if given, else now (docs/API.md, "Cohorts": a cohort's ranges
/// end now, or at `to`).
fn instant(params: &Params, now_ns: i64) -> Result<i64, ApiError> {
    match params.to()? {
        Some(at) => after_epoch(at),
        None => Ok(now_ns),
    }
}

/// Shards evaluate cohorts over `[0, at)`: an instant at or before 1970 has no events and is
/// refused here rather than by the shards.
fn after_epoch(at: i64) -> Result<i64, ApiError> {
    if at > 0 {
        Ok(at)
    } else {
        Err(invalid("to", "must be after 1970-01-01T00:00:00Z to evaluate a cohort"))
    }
}

/// Sizes of `cohorts` at `at`, computed by every shard in one scan.
async fn sizes(
    app: &AppState,
    session: &Session,
    cohorts: &[&Cohort],
    at: i64,
    allow_partial: bool,
) -> Result<(Vec<u64>, Gathered), ApiError> {
    let plan = CohortSizesPlan { cohorts: cohorts.iter().map(|c| c.definition.clone()).collect(), at_unix_nanos: at };
    let mut gathered = scatter(app, &session.project_id, (0, at), allow_partial, plan).await?;
    let sums = gathered.fold::<CohortSizes>().fit(cohorts.len());
    Ok((sums, gathered))
}

#[utoipa::path(
    get, path = "/api/cohorts", tag = "analytics", summary = "The project's cohorts with their sizes",
    params(crate::query::params::Params, crate::http::listing::Paging),
    responses((status = 200, description = "The project's cohorts with their sizes.", body = crate::query::scatter::Answer<crate::http::listing::Listed<CohortJson>>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Listed<CohortJson>>>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let page = Page::of(&params.paging)?;
    let at = instant(&params, app.clock.now_nanos())?;
    // Oldest first; the key is (creation time, id), fixed-width so text order is that order.
    let all = project_cohorts(&app, &session.project_id).await?;
    let key = |c: &Cohort| format!("{:020}:{}", c.created_at_ms.max(0), c.id);
    let shown: Vec<&Cohort> =
        all.iter().filter(|c| page.after.as_ref().is_none_or(|a| &key(c) > a)).take(page.limit).collect();
    let (counts, gathered) = if shown.is_empty() {
        (Vec::new(), None)
    } else {
        let (s, g) = sizes(&app, &session, &shown, at, params.allow_partial()?).await?;
        (s, Some(g))
    };
    let items: Vec<(String, CohortJson)> = all
        .iter()
        .map(|c| {
            let size = shown.iter().position(|s| s.id == c.id).map_or(0, |i| counts[i]);
            (key(c), cohort_json(c, size))
        })
        .collect();
    let coverage = gathered.map(|g| g.coverage()).unwrap_or_default();
    Ok(Json(Answer { body: page.apply(items), coverage }))
}

#[utoipa::path(
    post, path = "/api/cohorts", tag = "analytics", summary = "Create a cohort",
    request_body(content = sextant_model::cohort::CohortInput, example = json!({"name": "buyers", "conditions": {"logic": "and", "conditions": [{"type": "did", "event": "purchase", "count_op": ">=", "count": 1, "range": "30d"}]}})),
    responses(
        (status = 201, description = "Created, with its size now.", body = CohortJson),
        (status = 409, description = "The project has the maximum number of cohorts.", body = crate::http::error::ErrorBody),
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
    let input: CohortInput = crate::http::body::json(&headers, body, MAX_COHORT_BODY)?;
    let (name, definition) = cohort::validate(&input).map_err(ApiError::invalid_fields)?;
    let now_ms = app.clock.now_millis();
    let cohort = Cohort {
        id: uuid::Uuid::new_v4().simple().to_string(),
        project_id: session.project_id,
        name,
        definition,
        created_at_ms: now_ms,
    };
    // Sized before it is stored: a cohort the shards cannot evaluate is refused, and a
    // failed request leaves nothing behind for the client's retry to duplicate.
    let (size, _) = sizes(&app, &session, &[&cohort], now_ms.saturating_mul(1_000_000), false).await?;
    let command = MetaCommand::CreateCohort { org_id: session.user.org_id, cohort: cohort.clone() };
    crate::http::error::expect_done(app.cluster.meta_change(&command).await?, "a new cohort")?;
    Ok((StatusCode::CREATED, Json(cohort_json(&cohort, size[0]))).into_response())
}

#[utoipa::path(
    get, path = "/api/cohorts/{id}", tag = "analytics", summary = "A cohort with its size",
    params(("id" = String, Path, description = "The cohort id."), crate::query::params::Params),
    responses((status = 200, description = "A cohort with its size.", body = crate::query::scatter::Answer<CohortJson>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn get(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<CohortJson>>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let at = instant(&params, app.clock.now_nanos())?;
    let cohort = find(&app, &session, &id).await?;
    let (size, gathered) = sizes(&app, &session, &[&cohort], at, params.allow_partial()?).await?;
    Ok(gathered.answer(cohort_json(&cohort, size[0])))
}

/// Members by distinct id (byte order), `limit` per page with a keyset cursor: every shard
/// answers its first `limit + 1` members after the cursor, so the merged page is exact.
#[utoipa::path(
    get, path = "/api/cohorts/{id}/users", tag = "analytics", summary = "The users of a cohort",
    params(("id" = String, Path, description = "The cohort id."), crate::query::params::Params, crate::http::listing::Paging),
    responses((status = 200, description = "The users of a cohort.", body = crate::query::scatter::Answer<crate::http::listing::Listed<CohortMember>>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn users(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Listed<CohortMember>>>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let page = Page::of(&params.paging)?;
    let at = instant(&params, app.clock.now_nanos())?;
    let cohort = find(&app, &session, &id).await?;
    let plan = CohortUsersPlan {
        cohort: CohortFilter { definition: cohort.definition, at_unix_nanos: at },
        after: page.after.clone().unwrap_or_default(),
        limit: page.limit as u32 + 1,
    };
    let mut gathered = scatter(&app, &session.project_id, (0, at), params.allow_partial()?, plan).await?;
    let ids = gathered.fold::<CohortMembers>().sorted();
    let items = ids.into_iter().map(|id| (id.clone(), CohortMember { distinct_id: id })).collect();
    Ok(gathered.answer(page.apply(items)))
}

/// The `cohort_id` parameter of a read, as the filter shards apply: membership evaluated at
/// `at` (the query's end). None without the parameter; 404 for a cohort of another project.
pub async fn filter(
    app: &AppState,
    session: &Session,
    cohort_id: Option<&str>,
    at: i64,
) -> Result<Option<CohortFilter>, ApiError> {
    let Some(id) = cohort_id else { return Ok(None) };
    if id.len() > MAX_ID_CHARS {
        return Err(invalid("cohort_id", "is not a cohort id"));
    }
    let at = after_epoch(at)?;
    let cohort = find(app, session, id).await?;
    Ok(Some(CohortFilter { definition: cohort.definition, at_unix_nanos: at }))
}
