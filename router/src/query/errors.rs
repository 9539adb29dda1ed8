//! `GET /api/v1/errors` and `/errors/{fingerprint}` (docs/API.md, "Error groups"): groups
//! computed per shard (the fingerprint is a hash of source, service, type and normalised
//! message, the same on every shard) and merged: counts add up, first/last seen are the
//! min/max, the sample is the latest occurrence's trace.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_model::time::format_nanos;
use sextant_proto::{query_request, ErrorGroup, ErrorsPlan};

use super::merge::ErrorGroups;
use super::params::Params;
use super::scatter::{scatter, Gathered};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

fn group_json(g: &ErrorGroup) -> Value {
    json!({
        "fingerprint": g.fingerprint,
        "service": g.service,
        "type": g.r#type,
        "message": g.message,
        "count": g.count,
        "first_seen": format_nanos(g.first_unix_nanos),
        "last_seen": format_nanos(g.last_unix_nanos),
        "sample_trace_id": if g.sample_trace_id.is_empty() { Value::Null } else { Value::String(g.sample_trace_id.clone()) },
        "source": g.source,
    })
}

async fn groups(
    app: &AppState,
    session: &Session,
    params: &Params,
    fingerprint: &str,
) -> Result<(Vec<ErrorGroup>, Gathered), ApiError> {
    let plan = ErrorsPlan { services: params.list("service")?, fingerprint: fingerprint.to_owned() };
    let mut gathered =
        scatter(app, &session.project_id, params.range()?, params.allow_partial()?, query_request::Plan::Errors(plan))
            .await?;
    Ok((gathered.fold(ErrorGroups::default())?.sorted(), gathered))
}

pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let limit = params.limit()?;
    let (groups, gathered) = groups(&app, &session, &params, "").await?;
    let mut body = json!({
        "items": groups.iter().take(limit).map(group_json).collect::<Vec<_>>(),
        "next_cursor": null,
    });
    gathered.annotate(&mut body);
    Ok(Json(body))
}

pub async fn get(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(fingerprint): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let not_found = || ApiError::NotFound("no such error group in the time range".into());
    if fingerprint.len() != 16 || !fingerprint.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(not_found());
    }
    let params = Params::parse(raw.as_deref())?;
    let (groups, gathered) = groups(&app, &session, &params, &fingerprint.to_ascii_lowercase()).await?;
    let group = groups.first().ok_or_else(not_found)?;
    let mut body = group_json(group);
    body["occurrences"] = group
        .recent
        .iter()
        .map(|o| {
            json!({
                "timestamp": format_nanos(o.unix_nanos),
                "trace_id": if o.trace_id.is_empty() { Value::Null } else { Value::String(o.trace_id.clone()) },
                "message": o.message,
            })
        })
        .collect();
    gathered.annotate(&mut body);
    Ok(Json(body))
}
