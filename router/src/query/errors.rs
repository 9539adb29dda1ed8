//! `GET /api/v1/errors` and `/errors/{fingerprint}` (docs/API.md, "Error groups"): groups
//! computed per shard (the fingerprint is a hash of source, service, type and normalised
//! message, the same on every shard) and merged: counts add up, first/last seen are the
//! min/max, the sample is the latest occurrence's trace.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sextant_model::query::{ErrorGroup, ErrorGroups, ErrorsPlan};
use sextant_model::time::format_nanos;

use super::params::{self, list_of, Params};
use super::scatter::{scatter, Answer, Gathered};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

/// An error group in `GET /api/v1/errors`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorGroupJson {
    pub fingerprint: String,
    pub service: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub count: u64,
    pub first_seen: String,
    pub last_seen: String,
    pub sample_trace_id: Option<String>,
    /// `span` or `log`.
    pub source: String,
}

impl From<&ErrorGroup> for ErrorGroupJson {
    fn from(g: &ErrorGroup) -> Self {
        ErrorGroupJson {
            fingerprint: g.fingerprint.clone(),
            service: g.service.clone(),
            kind: g.kind.clone(),
            message: g.message.clone(),
            count: g.count,
            first_seen: format_nanos(g.first_unix_nanos),
            last_seen: format_nanos(g.last_unix_nanos),
            sample_trace_id: (!g.sample_trace_id.is_empty()).then(|| g.sample_trace_id.clone()),
            source: g.source.clone(),
        }
    }
}

/// `GET /api/v1/errors/{fingerprint}`: the group and its latest occurrences.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorGroupDetail {
    #[serde(flatten)]
    pub group: ErrorGroupJson,
    /// Newest first, as sent (the message before normalisation).
    pub occurrences: Vec<Occurrence>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Occurrence {
    pub timestamp: String,
    pub trace_id: Option<String>,
    pub message: String,
}

/// `GET /api/v1/errors`: every group, unpaged.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorGroupList {
    pub items: Vec<ErrorGroupJson>,
    /// Always null: the list is whole.
    pub next_cursor: Option<String>,
}

/// The parameters of `GET /api/v1/errors` and `/errors/{fingerprint}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ErrorsQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    pub service: Option<String>,
}

async fn groups(
    app: &AppState,
    session: &Session,
    q: &ErrorsQuery,
    fingerprint: &str,
) -> Result<(Vec<ErrorGroup>, Gathered), ApiError> {
    let plan = ErrorsPlan { services: list_of("service", q.service.as_deref())?, fingerprint: fingerprint.to_owned() };
    let params = &q.params;
    let range = params.range(app.clock.now_nanos())?;
    let mut gathered = scatter(app, &session.project_id, range, params.allow_partial()?, plan).await?;
    Ok((gathered.fold::<ErrorGroups>().sorted(), gathered))
}

#[utoipa::path(
    get, path = "/api/v1/errors", tag = "observability", summary = "Error groups",
    params(crate::query::params::Params, crate::http::listing::Paging, ErrorsQuery),
    responses((status = 200, description = "Error groups.", body = crate::query::scatter::Answer<ErrorGroupList>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<ErrorGroupList>>, ApiError> {
    let q: ErrorsQuery = params::parse(raw.as_deref())?;
    let limit = q.params.limit()?;
    let (groups, gathered) = groups(&app, &session, &q, "").await?;
    let items = groups.iter().take(limit).map(ErrorGroupJson::from).collect();
    Ok(gathered.answer(ErrorGroupList { items, next_cursor: None }))
}

#[utoipa::path(
    get, path = "/api/v1/errors/{fingerprint}", tag = "observability", summary = "An error group and its recent occurrences",
    params(("fingerprint" = String, Path, description = "The group's fingerprint."), crate::query::params::Params, ErrorsQuery),
    responses((status = 200, description = "An error group and its recent occurrences.", body = crate::query::scatter::Answer<ErrorGroupDetail>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn get(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(fingerprint): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<ErrorGroupDetail>>, ApiError> {
    let not_found = || ApiError::NotFound("no such error group in the time range".into());
    if fingerprint.len() != 16 || !fingerprint.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(not_found());
    }
    let q: ErrorsQuery = params::parse(raw.as_deref())?;
    let (groups, gathered) = groups(&app, &session, &q, &fingerprint.to_ascii_lowercase()).await?;
    let group = groups.first().ok_or_else(not_found)?;
    let occurrences = group
        .recent
        .iter()
        .map(|o| Occurrence {
            timestamp: format_nanos(o.unix_nanos),
            trace_id: (!o.trace_id.is_empty()).then(|| o.trace_id.clone()),
            message: o.message.clone(),
        })
        .collect();
    Ok(gathered.answer(ErrorGroupDetail { group: group.into(), occurrences }))
}
