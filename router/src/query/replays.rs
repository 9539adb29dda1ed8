//! Session recordings (docs/API.md, "Session replays"): `GET /api/replays?from&to&distinct_id`
//! lists sessions newest first with a keyset cursor, `GET /api/replays/{session_id}` returns a
//! session's rrweb events in timestamp order for a player. A session lives on one shard, so
//! shards answer whole sessions and the router only sorts and pages.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_model::time::format_nanos;
use sextant_proto::{query_request, ReplayEventsPlan, ReplayListPlan};

use super::merge::{ReplayEvents, ReplaySessions};
use super::params::{bad_cursor, cursor_time, decode_cursor, encode_cursor, invalid, Params, HOUR_NS};
use super::scatter::scatter;
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

/// Recordings are looked for over the last 30 days unless `from`/`to` say otherwise.
const DEFAULT_RANGE_NS: i64 = 30 * 24 * HOUR_NS;
const MAX_ID_CHARS: usize = 200;

pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let range = params.range_or(DEFAULT_RANGE_NS)?;
    let limit = params.limit()?;
    let distinct_id = params.get("distinct_id").unwrap_or_default().to_owned();
    if distinct_id.chars().count() > MAX_ID_CHARS {
        return Err(invalid("distinct_id", "may have at most 200 characters"));
    }
    let after = decode_cursor(&params)?
        .map(|c| -> Result<(i64, String), ApiError> {
            let (start, id) = c.split_once(':').ok_or_else(bad_cursor)?;
            Ok((cursor_time(start)?, id.to_owned()))
        })
        .transpose()?;
    let plan = query_request::Plan::Replays(ReplayListPlan { distinct_id });
    let mut gathered = scatter(&app, &session.project_id, range, params.allow_partial()?, plan).await?;
    let after = after.as_ref().map(|(t, id)| (*t, id.as_str()));
    let (sessions, more) = gathered.fold(ReplaySessions::default())?.page(after, limit);
    let next_cursor =
        more.then(|| sessions.last().map(|s| encode_cursor(&format!("{}:{}", s.start_unix_nanos, s.session_id))));
    let items: Vec<Value> = sessions
        .iter()
        .map(|s| {
            json!({
                "session_id": s.session_id,
                "distinct_id": s.distinct_id,
                "start_time": format_nanos(s.start_unix_nanos),
                "end_time": format_nanos(s.end_unix_nanos),
                "event_count": s.event_count,
                "size_bytes": s.size_bytes,
            })
        })
        .collect();
    let mut body = json!({ "items": items, "next_cursor": next_cursor.flatten() });
    gathered.annotate(&mut body);
    Ok(Json(body))
}

pub async fn events(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(session_id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    if session_id.is_empty() || session_id.chars().count() > MAX_ID_CHARS {
        return Err(invalid("session_id", "must have 1 to 200 characters"));
    }
    let range = params.range_or(DEFAULT_RANGE_NS)?;
    let plan = query_request::Plan::ReplayEvents(ReplayEventsPlan { session_id: session_id.clone() });
    let mut gathered = scatter(&app, &session.project_id, range, params.allow_partial()?, plan).await?;
    let events = gathered.fold(ReplayEvents::default())?.sorted();
    if events.is_empty() {
        return Err(ApiError::NotFound(format!("no recording of session {session_id}")));
    }
    let distinct_id = events.iter().map(|e| e.distinct_id.as_str()).find(|d| !d.is_empty()).unwrap_or_default();
    let body_events: Vec<Value> = events
        .iter()
        .map(|e| {
            // rrweb players want the event as it was recorded: type, data, epoch-ms timestamp.
            let data: Value = serde_json::from_str(&e.data_json).unwrap_or(Value::Null);
            json!({ "type": e.event_type, "data": data, "timestamp": e.unix_nanos / 1_000_000, "window_id": e.window_id })
        })
        .collect();
    let mut body = json!({
        "session_id": session_id,
        "distinct_id": distinct_id,
        "start_time": format_nanos(events[0].unix_nanos),
        "end_time": format_nanos(events[events.len() - 1].unix_nanos),
        "events": body_events,
    });
    gathered.annotate(&mut body);
    Ok(Json(body))
}
