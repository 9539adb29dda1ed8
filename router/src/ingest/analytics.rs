//! Product-analytics ingest (docs/API.md, "Product analytics ingest"): `/v1/batch` and
//! `/v1/replay/events` with the project ingest token, and PostHog-compatible capture
//! (`/batch/`, `/e/`, `/capture/`, `/i/v0/e/`) so PostHog SDKs send without changes. Events are
//! partitioned by (project, distinct_id), replay events by (project, session_id), and committed
//! like observability ingest: all or nothing.

use std::io::Read;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::Json;
use bytes::Bytes;
use serde::Serialize;
use sextant_model::analytics::{self, BatchBody, EventJson, ReplayBody, MAX_EVENTS, MAX_EVENTS_BODY, MAX_REPLAY_BODY};
use sextant_model::batch::Capped;
use sextant_model::capture::lz64::{self, Lz64Error};
use sextant_model::capture::{self, TokenPlaces};
use sextant_model::meta::CredentialKind;
use sextant_model::row::{Event, ReplayEvent, RowBatch};
use sextant_model::ProjectId;
use sextant_proto::convert::persist_row::Packed;

use super::admission::Share;
use super::commit::commit;
use super::partition::{partition, Partitioned};
use super::{answer, Accepted};
use crate::http::body::{Charge, Encoding, Received};
use crate::http::error::ApiError;
use crate::http::query_string;
use crate::identity::auth::admit_credential;
use crate::AppState;

pub(crate) struct Events;
impl Partitioned for Events {
    type Row = Event;
    fn key(row: &Event) -> Option<&[u8]> {
        Some(row.distinct_id.as_bytes())
    }
    fn rows(batch: &mut RowBatch<Packed>) -> &mut Vec<Event> {
        &mut batch.events
    }
}

pub(crate) struct Replays;
impl Partitioned for Replays {
    type Row = ReplayEvent;
    fn key(row: &ReplayEvent) -> Option<&[u8]> {
        Some(row.session_id.as_bytes())
    }
    fn rows(batch: &mut RowBatch<Packed>) -> &mut Vec<ReplayEvent> {
        &mut batch.replay_events
    }
}

pub(super) const EVENTS: &str = "events";
pub(super) const REPLAY_EVENTS: &str = "replay_events";

/// The token of an analytics request sent outside its body: `X-Analytics-Token`, or the
/// `api_key`/`token` query parameter (PostHog SDKs).
fn token_outside_body(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let from_header = headers.get("x-analytics-token").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let from_query = || query_string::find(query, &["api_key", "token"]);
    from_header.or_else(from_query).filter(|t| !t.trim().is_empty())
}

async fn admit(app: &AppState, token: Option<String>) -> Result<ProjectId, ApiError> {
    let token = token.ok_or(ApiError::Unauthorized("missing project token"))?;
    admit_credential(app, CredentialKind::IngestToken, token.trim()).await
}

/// The project of `token`, if it is within its monthly event quota.
async fn admit_within_quota(app: &AppState, token: Option<String>) -> Result<ProjectId, ApiError> {
    let project = admit(app, token).await?;
    super::quota::check(app, project, super::quota::Meter::Events)?;
    Ok(project)
}

/// An analytics body, parsed, and what it holds until it is stored.
pub(super) struct Admitted<T> {
    pub parsed: T,
    pub project: ProjectId,
    /// Bytes of the decoded JSON.
    pub json_len: usize,
    /// The project's share of this router's ingest, passed to `commit`.
    pub share: Share,
    /// The body's bytes against the router's budget: held until the request is stored.
    pub charge: Charge,
}

/// The body of an analytics request and its project. A token outside the body is admitted
/// before the body is read; else the body is searched for one, keeping nothing of it, and only
/// an admitted body is decoded in full and parsed (docs/API.md, "Connections and request
/// bodies").
pub(super) async fn receive_admitted<T: Send + 'static>(
    app: &Arc<AppState>,
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
    shape: Shape,
    limit: usize,
    parse: impl FnOnce(&[u8], &mut Received) -> Result<T, ApiError> + Send + 'static,
) -> Result<Admitted<T>, ApiError> {
    let admitted = match token_outside_body(headers, query) {
        Some(token) => Some(admit_within_quota(app, Some(token)).await?),
        None => None,
    };
    if shape.json_only() {
        crate::http::body::require_json(headers)?;
    }
    let encoding = shape.encoding(headers, query)?;
    let received =
        crate::http::body::receive(&app.bodies, headers, body, limit, app.config.server.body_read_timeout).await?;
    let received = if shape.lz64(query) { lz64_body(app, received, limit).await? } else { received };
    let (project, received) = match admitted {
        Some(project) => (project, received),
        None => {
            let places = shape.token_places();
            let (token, received) = app
                .bodies
                .parse(received, encoding, move |received| {
                    let token = capture::find_token(shape.reader(&received.raw, encoding, limit), places);
                    Ok((token, received))
                })
                .await?;
            (admit_within_quota(app, token).await?, received)
        }
    };
    let share = app.ingest_shares.enter(&project, received.raw.len() as u64)?;
    let (parsed, json_len, charge) = finish(app, received, encoding, shape, limit, parse).await?;
    Ok(Admitted { parsed, project, json_len, share, charge })
}

async fn finish<T: Send + 'static>(
    app: &AppState,
    received: Received,
    encoding: Encoding,
    shape: Shape,
    limit: usize,
    parse: impl FnOnce(&[u8], &mut Received) -> Result<T, ApiError> + Send + 'static,
) -> Result<(T, usize, Charge), ApiError> {
    app.bodies
        .parse(received, encoding, move |mut received| {
            let json = shape.decode(&mut received, encoding, limit)?;
            let parsed = parse(&json, &mut received)?;
            Ok((parsed, json.len(), received.charge))
        })
        .await
}

/// The kinds of analytics bodies: how each is encoded and where it carries its token.
#[derive(Clone, Copy)]
pub(super) enum Shape {
    /// `/v1/batch`, `/v1/replay/events`: JSON, gzip by `Content-Encoding`.
    Native,
    /// PostHog capture: JSON or a `data=<base64>` form, gzip by header, query or magic bytes.
    Posthog,
}

impl Shape {
    fn json_only(self) -> bool {
        matches!(self, Shape::Native)
    }

    /// Whether the body is LZ-string's base64 form (`?compression=lz64`, older posthog-js).
    fn lz64(self, query: Option<&str>) -> bool {
        matches!(self, Shape::Posthog) && query_string::find(query, &["compression"]).is_some_and(|v| v == "lz64")
    }

    fn token_places(self) -> TokenPlaces {
        match self {
            Shape::Native => TokenPlaces::Native,
            Shape::Posthog => TokenPlaces::Posthog,
        }
    }

    fn encoding(self, headers: &HeaderMap, query: Option<&str>) -> Result<Encoding, ApiError> {
        match self {
            Shape::Native => crate::http::body::encoding(headers),
            Shape::Posthog => {
                let gzip_query = query_string::find(query, &["compression"]).is_some_and(|v| v == "gzip-js");
                let gzip_header = headers
                    .get(header::CONTENT_ENCODING)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
                Ok(if gzip_header || gzip_query { Encoding::Gzip } else { Encoding::Identity })
            }
        }
    }

    /// The JSON text as a stream, for a token search that keeps nothing.
    fn reader<'a>(self, raw: &'a [u8], encoding: Encoding, limit: usize) -> Box<dyn Read + 'a> {
        let decoded: Box<dyn Read + 'a> = if self.gzipped(raw, encoding) {
            Box::new(flate2::read::GzDecoder::new(raw).take(limit as u64))
        } else {
            Box::new(raw)
        };
        match self {
            Shape::Native => decoded,
            Shape::Posthog => capture::posthog_json(decoded),
        }
    }

    /// Whether the body is gzip: by its encoding, or for PostHog also by its magic bytes.
    fn gzipped(self, raw: &[u8], encoding: Encoding) -> bool {
        encoding == Encoding::Gzip || (matches!(self, Shape::Posthog) && raw.starts_with(&GZIP_MAGIC))
    }

    /// The JSON text in full, charged to the request's budget.
    fn decode(self, received: &mut Received, encoding: Encoding, limit: usize) -> Result<Bytes, ApiError> {
        let text = if self.gzipped(&received.raw, encoding) {
            received.decode(Encoding::Gzip, limit)?
        } else {
            received.raw.clone()
        };
        match self {
            Shape::Native => Ok(text),
            Shape::Posthog if !capture::is_form(&text) => Ok(text),
            Shape::Posthog => {
                let mut out = Vec::new();
                capture::posthog_json(&text[..])
                    .take(limit as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| ApiError::BadRequest("invalid_body", e.to_string()))?;
                if out.len() > limit {
                    return Err(ApiError::PayloadTooLarge { limit });
                }
                received.charge.add(out.len())?;
                Ok(out.into())
            }
        }
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// An LZ-string body (or its `data` field) decompressed to its JSON within `limit`, charged to
/// the budget as it grows, before the token is looked for in it.
async fn lz64_body(app: &AppState, received: Received, limit: usize) -> Result<Received, ApiError> {
    app.bodies
        .run(move || {
            let mut received = received;
            let text = capture::form_data(&received.raw)
                .map_err(|e| ApiError::BadRequest("invalid_body", format!("invalid form: {e}")))?;
            let charge = &mut received.charge;
            let json = lz64::decompress(&text, limit, &mut |n| charge.add(n)).map_err(|e| match e {
                Lz64Error::Invalid(why) => ApiError::BadRequest("invalid_body", format!("invalid lz64 body: {why}")),
                Lz64Error::TooLarge => ApiError::PayloadTooLarge { limit },
                Lz64Error::Refused(refused) => refused,
            })?;
            received.charge.add(json.len())?;
            received.raw = json.into();
            Ok(received)
        })
        .await?
}

pub(super) fn validate_events(app: &AppState, events: Capped<EventJson, MAX_EVENTS>) -> Result<Vec<Event>, ApiError> {
    let events = events.into_items().map_err(|got| ApiError::BatchTooLarge { max: MAX_EVENTS, got })?;
    let now = app.clock.now_nanos();
    sextant_model::ingest::validate_all(events, |i, e, errors| analytics::validate_event(i, e, now, errors))
        .map_err(|errors| ApiError::invalid_objects("events", errors))
}

async fn store_events(app: &AppState, admitted: Admitted<BatchBody>) -> Result<usize, ApiError> {
    let Admitted { parsed, project, json_len, share, charge: _held } = admitted;
    let project = &project;
    let rows = validate_events(app, parsed.events)?;
    let accepted = rows.len();
    if accepted > 0 {
        let hooked = crate::webhooks::subscribed_events(app, project, &rows);
        commit(app, &share, partition::<Events>(app, project, rows, json_len)?).await?;
        crate::webhooks::publish_customer_events(app, project, hooked).await;
    }
    Ok(accepted)
}

/// `POST /v1/batch {token?, events:[...]}`.
#[utoipa::path(
    post,
    path = "/v1/batch",
    tag = "analytics ingest",
    summary = "Ingest product events",
    description = "At most 1000 events, body at most 20 MB. An event's `uuid` makes it idempotent. The token is the body's `token`, `X-Analytics-Token` or the `token` query parameter.",
    request_body(content = sextant_model::analytics::BatchBody, example = json!({"token": "sxp_…", "events": [{"event": "signed_up", "distinct_id": "user-42", "timestamp": "2026-11-22T10:15:30.123Z", "properties": {"plan": "pro"}}]})),
    responses((status = 200, description = "Every object was durably stored.", body = crate::ingest::Accepted, example = json!({"status": "ok", "accepted": 1})), crate::http::openapi::IngestErrors),
    security(("project_token" = []))
)]
pub async fn batch(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    let result = async {
        let admitted =
            receive_admitted(&app, &headers, query.as_deref(), body, Shape::Native, MAX_EVENTS_BODY, |json, r| {
                r.parse::<BatchBody>(json)
            })
            .await?;
        store_events(&app, admitted).await
    }
    .await;
    answer(&app, EVENTS, result, |accepted| Accepted { status: "ok", accepted })
}

/// `POST /v1/replay/events {token?, session_id, distinct_id?, window_id?, events:[...]}`.
#[utoipa::path(
    post,
    path = "/v1/replay/events",
    tag = "analytics ingest",
    summary = "Ingest session-replay (rrweb) events",
    description = "At most 500 events and 10 MB per request.",
    request_body(content = sextant_model::analytics::ReplayBody, example = json!({"token": "sxp_…", "session_id": "s-1", "distinct_id": "user-42", "events": [{"type": 4, "data": {"href": "https://example.com/", "width": 1280, "height": 720}, "timestamp": 1795342530123u64}]})),
    responses((status = 200, description = "Every object was durably stored.", body = crate::ingest::Accepted, example = json!({"status": "ok", "accepted": 1})), crate::http::openapi::IngestErrors),
    security(("project_token" = []))
)]
pub async fn replay(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    let result = async {
        let Admitted { parsed, project, json_len, share, charge: _held } =
            receive_admitted(&app, &headers, query.as_deref(), body, Shape::Native, MAX_REPLAY_BODY, |json, r| {
                r.parse::<ReplayBody>(json)
            })
            .await?;
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
            commit(&app, &share, partition::<Replays>(&app, &project, rows, json_len)?).await?;
        }
        Ok(accepted)
    }
    .await;
    answer(&app, REPLAY_EVENTS, result, |accepted| Accepted { status: "ok", accepted })
}

/// What PostHog's capture answers: `status` 1.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PosthogAccepted {
    pub status: u8,
    pub accepted: usize,
}

/// PostHog capture (`/batch/`, `/e/`, `/capture/`, `/i/v0/e/`): JSON, gzip (header,
/// `?compression=gzip-js` or magic bytes), or a form with `data=<base64 JSON>`; the project
/// token is `api_key`. `$snapshot` events are stored as replay events of their session
/// (`super::posthog`). Answers `{"status": 1}` as PostHog does.
#[utoipa::path(
    post,
    path = "/batch/",
    tag = "analytics ingest",
    summary = "PostHog-compatible capture",
    description = "What PostHog SDKs send, unchanged: a batch or one event, the project token as `api_key`. Also served at `/batch`, `/e`, `/e/`, `/capture`, `/capture/`, `/i/v0/e` and `/i/v0/e/`.",
    request_body(description = "A PostHog capture body: `{api_key, batch: [...]}` or one event `{api_key, event, distinct_id, properties, timestamp}`.", content = Object, example = json!({"api_key": "sxp_…", "batch": [{"event": "$pageview", "distinct_id": "user-42", "properties": {"$current_url": "https://example.com/"}}]})),
    responses(
        (status = 200, description = "Stored, answered as PostHog does.", body = PosthogAccepted, example = json!({"status": 1, "accepted": 1})),
        crate::http::openapi::IngestErrors
    ),
    security(("project_token" = []))
)]
pub async fn posthog(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Json<PosthogAccepted>, ApiError> {
    super::posthog::capture(app, headers, query, body, MAX_EVENTS_BODY).await
}
