//! Product-analytics ingest (DESIGN A7): `/v1/batch` and `/v1/replay/events` with the project
//! ingest token, and PostHog-compatible capture (`/batch/`, `/e/`, `/capture/`, `/i/v0/e/`) so
//! PostHog SDKs send without changes. Events are partitioned by (project, distinct_id), replay
//! events by (project, session_id), and committed like observability ingest: all or nothing.

use std::io::Read;
use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::Json;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};
use sextant_model::analytics::{self, BatchBody, EventJson, ReplayBody, MAX_EVENTS, MAX_EVENTS_BODY, MAX_REPLAY_BODY};
use sextant_model::meta::CredentialKind;
use sextant_model::ProjectId;
use sextant_proto::{Event, ReplayEvent, ShardBatch};

use crate::auth::{admit_credential, url_pairs};
use crate::error::ApiError;
use crate::ingest::{answer, commit, partition, Accepted, Placement};
use crate::AppState;

pub(crate) struct Events;
impl Placement for Events {
    type Row = Event;
    fn key(row: &Event) -> Option<&[u8]> {
        Some(row.distinct_id.as_bytes())
    }
    fn push(batch: &mut ShardBatch, row: Event) {
        batch.events.push(row)
    }
}

pub(crate) struct Replays;
impl Placement for Replays {
    type Row = ReplayEvent;
    fn key(row: &ReplayEvent) -> Option<&[u8]> {
        Some(row.session_id.as_bytes())
    }
    fn push(batch: &mut ShardBatch, row: ReplayEvent) {
        batch.replay_events.push(row)
    }
}

const EVENTS: &str = "events";
const REPLAY_EVENTS: &str = "replay_events";

fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// The project of an analytics request: token in the body, `X-Analytics-Token`, or the
/// `api_key`/`token` query parameter (PostHog SDKs), admitted by its rate limit.
fn token_project(
    app: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    in_body: Option<&str>,
) -> Result<ProjectId, ApiError> {
    let from_header = headers.get("x-analytics-token").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let from_query = || query.and_then(|q| url_pairs(q).find(|(k, _)| k == "api_key" || k == "token").map(|(_, v)| v));
    let token = in_body
        .map(str::to_owned)
        .or(from_header)
        .or_else(from_query)
        .ok_or(ApiError::Unauthorized("missing project token"))?;
    admit_credential(app, CredentialKind::IngestToken, token.trim())
}

/// A native analytics body: read within `limit`, parsed, and its token admitted. Returns the
/// body, the project it writes to and its decoded length.
fn read_admitted<T: serde::de::DeserializeOwned>(
    app: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    body: Result<Bytes, BytesRejection>,
    limit: usize,
    token: impl Fn(&T) -> Option<&str>,
) -> Result<(T, ProjectId, usize), ApiError> {
    let bytes = crate::body::read(headers, body, limit)?;
    let parsed: T = crate::body::parse_json(&bytes)?;
    let project = token_project(app, headers, query, token(&parsed))?;
    Ok((parsed, project, bytes.len()))
}

async fn store_events(
    app: &AppState,
    project: &ProjectId,
    events: Vec<EventJson>,
    body_len: usize,
) -> Result<usize, ApiError> {
    if events.len() > MAX_EVENTS {
        return Err(ApiError::BatchTooLarge { max: MAX_EVENTS, got: events.len() });
    }
    let now = now_ns();
    let rows = sextant_model::ingest::validate_all(events, |i, e, errors| analytics::validate_event(i, e, now, errors))
        .map_err(|errors| ApiError::invalid_objects("events", errors))?;
    let accepted = rows.len();
    if accepted > 0 {
        commit(app, partition::<Events>(app, project, rows, body_len)?).await?;
    }
    Ok(accepted)
}

/// `POST /v1/batch {token?, events:[...]}`.
pub async fn batch(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Accepted>, ApiError> {
    let result = async {
        let (parsed, project, len) =
            read_admitted::<BatchBody>(&app, &headers, query.as_deref(), body, MAX_EVENTS_BODY, |b| {
                b.token.as_deref()
            })?;
        store_events(&app, &project, parsed.events, len).await
    }
    .await;
    answer(&app, EVENTS, result, |accepted| Accepted { status: "ok", accepted })
}

/// `POST /v1/replay/events {token?, session_id, distinct_id?, window_id?, events:[...]}`.
pub async fn replay(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Accepted>, ApiError> {
    let result = async {
        let (parsed, project, len) =
            read_admitted::<ReplayBody>(&app, &headers, query.as_deref(), body, MAX_REPLAY_BODY, |b| {
                b.token.as_deref()
            })?;
        if parsed.events.len() > analytics::MAX_REPLAY_EVENTS {
            return Err(ApiError::TooManyEvents { max: analytics::MAX_REPLAY_EVENTS, got: parsed.events.len() });
        }
        let mut errors = Vec::new();
        let rows = analytics::validate_replay(parsed, &mut errors);
        if !errors.is_empty() {
            return Err(ApiError::invalid_objects("replay events", errors));
        }
        let accepted = rows.len();
        if accepted > 0 {
            commit(&app, partition::<Replays>(&app, &project, rows, len)?).await?;
        }
        Ok(accepted)
    }
    .await;
    answer(&app, REPLAY_EVENTS, result, |accepted| Accepted { status: "ok", accepted })
}

/// PostHog capture (`/batch/`, `/e/`, `/capture/`, `/i/v0/e/`): JSON, gzip (header or
/// `?compression=gzip-js`), or a form with `data=<base64 JSON>`; the project token is
/// `api_key`. Answers `{"status": 1}` as PostHog does.
pub async fn posthog(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let result = async {
        let raw = crate::body::raw(body, MAX_EVENTS_BODY)?;
        let text = decode_posthog_body(&headers, query.as_deref(), &raw)?;
        let value: Value = crate::body::parse_json(&text)?;
        let (events, token) = analytics::posthog_events(value).map_err(|m| ApiError::BadRequest("invalid_body", m))?;
        let project = token_project(&app, &headers, query.as_deref(), token.as_deref())?;
        store_events(&app, &project, events, text.len()).await
    }
    .await;
    answer(&app, EVENTS, result, |accepted| json!({ "status": 1, "accepted": accepted }))
}

/// The JSON text of a PostHog body, decompressed and un-wrapped, at most the events limit.
fn decode_posthog_body(headers: &HeaderMap, query: Option<&str>, raw: &[u8]) -> Result<Vec<u8>, ApiError> {
    let limit = MAX_EVENTS_BODY;
    let gzip_query = query.is_some_and(|q| url_pairs(q).any(|(k, v)| k == "compression" && v == "gzip-js"));
    let gzip_header = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    let mut bytes = if gzip_header || gzip_query || raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw)
            .take(limit as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| ApiError::BadRequest("invalid_body", format!("invalid gzip body: {e}")))?;
        out
    } else {
        raw.to_vec()
    };
    if bytes.len() > limit {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    // Older SDKs post `data=<base64 JSON>` as a form.
    if let Some(rest) = bytes.strip_prefix(b"data=") {
        let text =
            std::str::from_utf8(rest).map_err(|_| ApiError::BadRequest("invalid_body", "form is not UTF-8".into()))?;
        let field = text.split('&').next().unwrap_or_default();
        let decoded: String = url_pairs(&format!("data={field}")).next().map(|(_, v)| v).unwrap_or_default();
        bytes = base64::engine::general_purpose::STANDARD
            .decode(decoded.trim())
            .map_err(|_| ApiError::BadRequest("invalid_body", "`data` is not base64".into()))?;
    }
    Ok(bytes)
}
