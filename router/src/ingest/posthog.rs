//! What posthog-js needs beyond capture (docs/API.md, "Session recordings from posthog-js"):
//! its session recordings (`$snapshot` events, sent to `/s/` or in any capture batch) stored as
//! replay events of their session, and the configuration it asks for before it records
//! (`/array/{token}/config`, `/flags`, `/decide`): recording on, sent to `/s/`, gzip bodies
//! welcome, no feature flags.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Serialize;
use sextant_model::analytics::{MAX_REPLAY_BODY, MAX_REPLAY_EVENTS};
use sextant_model::capture::recording::{self, Inflated, Recording};
use sextant_model::capture::{self, SnapshotJson};
use sextant_model::meta::CredentialKind;
use sextant_model::row::ReplayEvent;

use super::analytics::{receive_admitted, validate_events, Admitted, Events, PosthogAccepted, Replays, Shape};
use super::analytics::{EVENTS, REPLAY_EVENTS};
use super::answer;
use super::commit::commit;
use super::partition::partition;
use crate::http::body::{self, Received};
use crate::http::error::ApiError;
use crate::identity::auth::admit_credential;
use crate::AppState;

/// `/s/`: posthog-js session recordings, within the replay body limit (10 MB).
#[utoipa::path(
    post,
    path = "/s/",
    tag = "analytics ingest",
    summary = "posthog-js session recordings",
    description = "What posthog-js sends while it records, unchanged: PostHog capture bodies whose `$snapshot` events carry rrweb events (`$snapshot_data` or `$snapshot_items`) of `$session_id`, stored as replay events of that session (`GET /api/replays/{session_id}`). At most 500 rrweb events and 10 MB a request, also once expanded. Also served at `/s`; `$snapshot` events sent to the other capture paths are stored the same way.",
    request_body(description = "A PostHog capture body (JSON, gzip or a `data=<base64>` form) of `$snapshot` events.", content = Object, example = json!([{"event": "$snapshot", "properties": {"token": "sxp_…", "distinct_id": "user-42", "$session_id": "0192…", "$window_id": "0192…", "$snapshot_data": [{"type": 4, "data": {"href": "https://example.com/", "width": 1280, "height": 720}, "timestamp": 1795342530123u64}]}}])),
    responses(
        (status = 200, description = "Stored, answered as PostHog does; `accepted` counts the other events.", body = PosthogAccepted, example = json!({"status": 1, "accepted": 0})),
        crate::http::openapi::IngestErrors
    ),
    security(("project_token" = []))
)]
pub async fn recordings(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Json<PosthogAccepted>, ApiError> {
    capture(app, headers, query, body, MAX_REPLAY_BODY).await
}

/// A PostHog capture body of at most `limit` bytes: its events stored as product events, its
/// `$snapshot` events as replay events; both validated before either is stored.
pub(super) async fn capture(
    app: Arc<AppState>,
    headers: HeaderMap,
    query: Option<String>,
    body: Body,
    limit: usize,
) -> Result<Json<PosthogAccepted>, ApiError> {
    let mut replayed = 0;
    let result = async {
        let Admitted { parsed: (events, replay), project, json_len: len, share, charge: _held } =
            receive_admitted(&app, &headers, query.as_deref(), body, Shape::Posthog, limit, |json, r| {
                r.charge.add(json.len().saturating_mul(body::PARSE_EXPANSION))?;
                let parsed = capture::posthog_body(json)
                    .map_err(|e| ApiError::BadRequest("invalid_body", format!("invalid event: {e}")))?;
                let replay = replay_events(parsed.snapshots, r)?;
                Ok((parsed.events, replay))
            })
            .await?;
        let events = validate_events(&app, events)?;
        // The body's bytes, apportioned by rows between the two kinds (metering).
        let rows = events.len() + replay.len();
        let replay_len = (len as u128 * replay.len() as u128 / rows.max(1) as u128) as usize;
        let accepted = events.len();
        if !events.is_empty() {
            let hooked = crate::webhooks::subscribed_events(&app, &project, &events);
            commit(&app, &share, partition::<Events>(&app, &project, events, len - replay_len)?).await?;
            crate::webhooks::publish_customer_events(&app, &project, hooked).await;
        }
        if !replay.is_empty() {
            let n = replay.len();
            commit(&app, &share, partition::<Replays>(&app, &project, replay, replay_len)?).await?;
            replayed = n;
        }
        Ok(accepted)
    }
    .await;
    if replayed > 0 {
        app.metrics.accepted(REPLAY_EVENTS, replayed as u64);
    }
    answer(&app, EVENTS, result, |accepted| PosthogAccepted { status: 1, accepted })
}

/// The replay events of a body's `$snapshot` events, validated as `/v1/replay/events`
/// validates them: at most [`MAX_REPLAY_EVENTS`] rrweb events, and what posthog-js compressed
/// expanding to at most [`MAX_REPLAY_BODY`] bytes, charged to the body budget as it expands.
fn replay_events(snapshots: Vec<SnapshotJson>, received: &mut Received) -> Result<Vec<ReplayEvent>, ApiError> {
    let mut errors = Vec::new();
    let found: Vec<Recording> = snapshots.into_iter().filter_map(|s| recording::parse(s, &mut errors)).collect();
    let total = found.iter().map(Recording::len).fold(0usize, usize::saturating_add);
    if total > MAX_REPLAY_EVENTS {
        return Err(ApiError::TooManyEvents { max: MAX_REPLAY_EVENTS, got: total });
    }
    let mut left = MAX_REPLAY_BODY;
    let charge = &mut received.charge;
    let mut inflate = |gz: &[u8]| match body::gunzip(gz, left, &mut |step| charge.add(step)) {
        Ok(out) => {
            left -= out.len();
            Ok(out)
        }
        Err(ApiError::BadRequest(_, why)) => Err(Inflated::Invalid(why)),
        Err(refused) => Err(Inflated::Refused(refused)),
    };
    let mut rows = Vec::new();
    for r in found {
        rows.extend(r.validate(&mut inflate, &mut errors)?);
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid_objects("replay events", errors));
    }
    Ok(rows)
}

/// What posthog-js reads from its remote configuration: where and how to send recordings.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteConfig {
    /// Body encodings accepted; posthog-js then gzips its bodies.
    #[schema(value_type = Vec<String>)]
    pub supported_compression: [&'static str; 2],
    pub session_recording: SessionRecording,
    /// No feature flags: posthog-js need not ask for them.
    pub has_feature_flags: bool,
    pub capture_performance: bool,
    #[serde(rename = "autocapture_opt_out")]
    pub autocapture_opt_out: bool,
    pub autocapture_exceptions: bool,
    pub heatmaps: bool,
    pub surveys: bool,
    #[schema(value_type = Vec<String>)]
    pub site_apps: &'static [&'static str],
}

/// Recording on, sent to `/s/`, every session, inputs masked as posthog-js masks them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecording {
    pub endpoint: &'static str,
    pub recorder_version: &'static str,
    pub console_log_recording_enabled: bool,
}

impl RemoteConfig {
    fn new() -> Self {
        RemoteConfig {
            supported_compression: ["gzip", "gzip-js"],
            session_recording: SessionRecording {
                endpoint: "/s/",
                recorder_version: "v2",
                console_log_recording_enabled: false,
            },
            has_feature_flags: false,
            capture_performance: false,
            autocapture_opt_out: false,
            autocapture_exceptions: false,
            heatmaps: false,
            surveys: false,
            site_apps: &[],
        }
    }
}

/// `/flags` and `/decide`: the remote configuration and no feature flags, in the fields every
/// posthog-js version reads (`flags` now, `featureFlags` before).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decide {
    #[serde(flatten)]
    pub config: RemoteConfig,
    #[schema(value_type = Object)]
    pub flags: BTreeMap<String, bool>,
    #[schema(value_type = Object)]
    pub feature_flags: BTreeMap<String, bool>,
    #[schema(value_type = Object)]
    pub feature_flag_payloads: BTreeMap<String, bool>,
    pub errors_while_computing_flags: bool,
}

/// The largest `/flags` or `/decide` body read (a user's properties for flag evaluation).
const MAX_DECIDE_BODY: usize = 1024 * 1024;

/// `GET /array/{token}/config`: posthog-js's remote configuration for a project token.
#[utoipa::path(
    get,
    path = "/array/{token}/config",
    tag = "analytics ingest",
    summary = "posthog-js remote configuration",
    description = "What posthog-js asks for when it starts: session recording on, sent to `/s/`; gzip bodies accepted; no feature flags.",
    params(("token" = String, Path, description = "The project token (`sxp_…`).")),
    responses(
        (status = 200, description = "The configuration.", body = RemoteConfig),
        crate::http::openapi::IngestErrors
    ),
    security(())
)]
pub async fn remote_config(
    State(app): State<Arc<AppState>>,
    Path(token): Path<String>,
) -> Result<Json<RemoteConfig>, ApiError> {
    admit_credential(&app, CredentialKind::IngestToken, token.trim()).await?;
    Ok(Json(RemoteConfig::new()))
}

/// `/flags` and `/decide` (GET or POST): the token in the query or the body, as capture takes it.
#[utoipa::path(
    method(get, post),
    path = "/flags/",
    tag = "analytics ingest",
    summary = "PostHog feature flags and configuration",
    description = "What posthog-js (and older versions, at `/decide/`) asks for: the remote configuration and no feature flags. The project token is the `token` or `api_key` query parameter or body field; the body may be JSON, gzip or a `data=<base64>` form. Also served at `/flags`, `/decide` and `/decide/`.",
    request_body(description = "A PostHog flags request: `{token, distinct_id, ...}`.", content = Object, example = json!({"token": "sxp_…", "distinct_id": "user-42"})),
    responses(
        (status = 200, description = "The configuration, no flags.", body = Decide),
        crate::http::openapi::IngestErrors
    ),
    security(("project_token" = []))
)]
pub async fn decide(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Json<Decide>, ApiError> {
    receive_admitted(&app, &headers, query.as_deref(), body, Shape::Posthog, MAX_DECIDE_BODY, |_, _| Ok(())).await?;
    Ok(Json(Decide {
        config: RemoteConfig::new(),
        flags: BTreeMap::new(),
        feature_flags: BTreeMap::new(),
        feature_flag_payloads: BTreeMap::new(),
        errors_while_computing_flags: false,
    }))
}
