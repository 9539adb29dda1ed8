//! Session recordings (docs/API.md, "Session replays"): `GET /api/replays?from&to&distinct_id`
//! lists sessions newest first with a keyset cursor, `GET /api/replays/{session_id}` returns a
//! session's rrweb events in timestamp order for a player. A session lives on one shard, so
//! shards answer whole sessions and the router only sorts and pages.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sextant_model::query::{ReplayEvents, ReplayEventsPlan, ReplayListPlan, ReplaySessions};
use sextant_model::time::format_nanos;

use super::params::{self, bad_cursor, cursor_time, decode_cursor, encode_cursor, invalid, Params, HOUR_NS};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::http::listing::Listed;
use crate::identity::auth::Session;
use crate::AppState;

/// Recordings are looked for over the last 30 days unless `from`/`to` say otherwise.
const DEFAULT_RANGE_NS: i64 = 30 * 24 * HOUR_NS;
const MAX_ID_CHARS: usize = 200;

/// A session in `GET /api/replays`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplaySessionJson {
    pub session_id: String,
    pub distinct_id: String,
    pub start_time: String,
    pub end_time: String,
    pub event_count: u64,
    pub size_bytes: u64,
}

/// The parameters of `GET /api/replays` and `/api/replays/{session_id}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReplaysQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    /// Only this user's sessions (the list).
    pub distinct_id: Option<String>,
}

#[utoipa::path(
    get, path = "/api/replays", tag = "analytics", summary = "Recorded sessions",
    params(crate::query::params::Params, crate::http::listing::Paging, ReplaysQuery),
    responses((status = 200, description = "Recorded sessions.", body = crate::query::scatter::Answer<crate::http::listing::Listed<ReplaySessionJson>>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Listed<ReplaySessionJson>>>, ApiError> {
    let q: ReplaysQuery = params::parse(raw.as_deref())?;
    let params = &q.params;
    let range = params.range_or(DEFAULT_RANGE_NS, app.clock.now_nanos())?;
    let limit = params.limit()?;
    let distinct_id = q.distinct_id.clone().unwrap_or_default();
    if distinct_id.chars().count() > MAX_ID_CHARS {
        return Err(invalid("distinct_id", "may have at most 200 characters"));
    }
    let after = decode_cursor(params)?
        .map(|c| -> Result<(i64, String), ApiError> {
            let (start, id) = c.split_once(':').ok_or_else(bad_cursor)?;
            Ok((cursor_time(start)?, id.to_owned()))
        })
        .transpose()?;
    let plan = ReplayListPlan { distinct_id };
    let mut gathered = scatter(&app, &session.project_id, range, params.allow_partial()?, plan).await?;
    let after = after.as_ref().map(|(t, id)| (*t, id.as_str()));
    let (sessions, more) = gathered.fold::<ReplaySessions>().page(after, limit);
    let next_cursor = if more {
        sessions.last().map(|s| encode_cursor(&format!("{}:{}", s.start_unix_nanos, s.session_id)))
    } else {
        None
    };
    let items = sessions
        .into_iter()
        .map(|s| ReplaySessionJson {
            start_time: format_nanos(s.start_unix_nanos),
            end_time: format_nanos(s.end_unix_nanos),
            event_count: s.event_count,
            size_bytes: s.size_bytes,
            session_id: s.session_id,
            distinct_id: s.distinct_id,
        })
        .collect();
    Ok(gathered.answer(Listed { items, next_cursor }))
}

/// An rrweb event as it was recorded: type, data, epoch-millisecond timestamp.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RecordedEvent {
    #[serde(rename = "type")]
    pub event_type: i32,
    pub data: Value,
    pub timestamp: i64,
    pub window_id: String,
}

/// `GET /api/replays/{session_id}`: the session's events in timestamp order, for a player.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Recording {
    pub session_id: String,
    pub distinct_id: String,
    pub start_time: String,
    pub end_time: String,
    pub events: Vec<RecordedEvent>,
}

#[utoipa::path(
    get, path = "/api/replays/{session_id}", tag = "analytics", summary = "A session's replay events in timestamp order",
    params(("session_id" = String, Path, description = "The session id."), crate::query::params::Params),
    responses((status = 200, description = "A session's replay events in timestamp order.", body = crate::query::scatter::Answer<Recording>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn events(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(session_id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Recording>>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    if session_id.is_empty() || session_id.chars().count() > MAX_ID_CHARS {
        return Err(invalid("session_id", "must have 1 to 200 characters"));
    }
    let range = params.range_or(DEFAULT_RANGE_NS, app.clock.now_nanos())?;
    let plan = ReplayEventsPlan { session_id: session_id.clone() };
    let mut gathered = scatter(&app, &session.project_id, range, params.allow_partial()?, plan).await?;
    let events = gathered.fold::<ReplayEvents>().sorted();
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Err(ApiError::NotFound(format!("no recording of session {session_id}")));
    };
    let recording = Recording {
        distinct_id: events.iter().map(|e| e.distinct_id.as_str()).find(|d| !d.is_empty()).unwrap_or_default().into(),
        start_time: format_nanos(first.unix_nanos),
        end_time: format_nanos(last.unix_nanos),
        events: events
            .iter()
            .map(|e| RecordedEvent {
                event_type: e.event_type,
                data: serde_json::from_str(&e.data_json).unwrap_or(Value::Null),
                timestamp: e.unix_nanos / 1_000_000,
                window_id: e.window_id.clone(),
            })
            .collect(),
        session_id,
    };
    Ok(gathered.answer(recording))
}
