//! `GET /api/v1/errors` and `/errors/{fingerprint}` (docs/API.md, "Error groups"): groups
//! computed per shard (the fingerprint is a hash of source, service, type and normalised
//! message, the same on every shard) and merged: counts add up, first/last seen are the
//! min/max, the sample is the latest occurrence's trace.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_model::time::format_nanos;
use sextant_proto::{query_reply, query_request, ErrorGroup, ErrorsPlan};

use super::params::Params;
use super::scatter::{scatter, Gathered};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

/// Occurrences in a group's detail (each shard sends at most this many).
pub const RECENT: usize = 20;

pub fn merge(into: &mut ErrorGroup, other: &ErrorGroup) {
    into.count += other.count;
    into.recent.extend(other.recent.iter().cloned());
    into.recent.sort_by(|a, b| (b.unix_nanos, &b.trace_id, &b.message).cmp(&(a.unix_nanos, &a.trace_id, &a.message)));
    into.recent.truncate(RECENT);
    into.first_unix_nanos = into.first_unix_nanos.min(other.first_unix_nanos);
    into.last_unix_nanos = into.last_unix_nanos.max(other.last_unix_nanos);
    if !other.sample_trace_id.is_empty()
        && (into.sample_trace_id.is_empty() || other.sample_unix_nanos > into.sample_unix_nanos)
    {
        into.sample_trace_id.clone_from(&other.sample_trace_id);
        into.sample_unix_nanos = other.sample_unix_nanos;
    }
}

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

/// Most frequent first, then most recent, then by fingerprint (a stable order).
fn merged(gathered: &Gathered) -> Vec<ErrorGroup> {
    let mut groups: HashMap<String, ErrorGroup> = HashMap::new();
    for (_, p) in &gathered.partials {
        if let query_reply::Partial::Errors(e) = p {
            for g in &e.groups {
                match groups.get_mut(&g.fingerprint) {
                    Some(into) => merge(into, g),
                    None => {
                        groups.insert(g.fingerprint.clone(), g.clone());
                    }
                }
            }
        }
    }
    let mut out: Vec<ErrorGroup> = groups.into_values().collect();
    out.sort_by(|a, b| (b.count, b.last_unix_nanos, &a.fingerprint).cmp(&(a.count, a.last_unix_nanos, &b.fingerprint)));
    out
}

async fn groups(
    app: &AppState,
    session: &Session,
    params: &Params,
    fingerprint: &str,
) -> Result<(Vec<ErrorGroup>, Gathered), ApiError> {
    let plan = ErrorsPlan { services: params.list("service")?, fingerprint: fingerprint.to_owned() };
    let gathered =
        scatter(app, &session.project_id, params.range()?, params.allow_partial()?, query_request::Plan::Errors(plan))
            .await?;
    Ok((merged(&gathered), gathered))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_merge_counts_bounds_and_latest_sample() {
        let g = |count, first, last, trace: &str| ErrorGroup {
            fingerprint: "f".into(),
            count,
            first_unix_nanos: first,
            last_unix_nanos: last,
            sample_trace_id: trace.into(),
            sample_unix_nanos: last,
            ..Default::default()
        };
        let mut a = g(2, 10, 20, "t1");
        merge(&mut a, &g(3, 5, 30, "t2"));
        merge(&mut a, &g(1, 7, 40, ""));
        assert_eq!((a.count, a.first_unix_nanos, a.last_unix_nanos, a.sample_trace_id.as_str()), (6, 5, 40, "t2"));
    }
}
