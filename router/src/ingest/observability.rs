//! Observability ingest (docs/API.md, "Observability ingest"): spans, logs and host metrics,
//! authenticated by a project API key before their body is read.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::de::DeserializeOwned;
use sextant_model::batch::Capped;
use sextant_model::ingest::{self, FieldError, MAX_BATCH_OBJECTS, MAX_OBSERVABILITY_BODY};
use sextant_model::row::{HostMetric, LogRecord, RowBatch, Span};
use sextant_proto::convert::persist_row::Packed;

use super::commit::commit;
use super::partition::{partition, Partitioned};
use super::{answer, Accepted};
use crate::http::error::ApiError;
use crate::identity::auth::api_key_project;
use crate::AppState;

/// One kind of observability object: its request body and validation.
trait Kind: Partitioned<Row: Send + 'static> {
    const NAME: &'static str;
    type Body: DeserializeOwned;
    type Json;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS>;
    fn validate(index: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<Self::Row>;
}

pub(crate) struct Spans;
impl Partitioned for Spans {
    type Row = Span<Packed>;
    fn key(row: &Span<Packed>) -> Option<&[u8]> {
        Some(row.trace_id.as_bytes())
    }
    fn rows(batch: &mut RowBatch<Packed>) -> &mut Vec<Span<Packed>> {
        &mut batch.spans
    }
}
impl Kind for Spans {
    const NAME: &'static str = "spans";
    type Body = ingest::SpansBody<Packed>;
    type Json = ingest::SpanInput<Packed>;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS> {
        body.spans
    }
    fn validate(i: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<Span<Packed>> {
        ingest::validate_span(i, item, errors)
    }
}

pub(crate) struct Logs;
impl Partitioned for Logs {
    type Row = LogRecord<Packed>;
    fn key(row: &LogRecord<Packed>) -> Option<&[u8]> {
        (!row.trace_id.is_empty()).then_some(row.trace_id.as_bytes())
    }
    fn rows(batch: &mut RowBatch<Packed>) -> &mut Vec<LogRecord<Packed>> {
        &mut batch.logs
    }
}
impl Kind for Logs {
    const NAME: &'static str = "logs";
    type Body = ingest::LogsBody<Packed>;
    type Json = ingest::LogInput<Packed>;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS> {
        body.logs
    }
    fn validate(i: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<LogRecord<Packed>> {
        ingest::validate_log(i, item, errors)
    }
}

pub(crate) struct HostMetrics;
impl Partitioned for HostMetrics {
    type Row = HostMetric<Packed>;
    fn key(row: &HostMetric<Packed>) -> Option<&[u8]> {
        Some(row.hostname.as_bytes())
    }
    fn rows(batch: &mut RowBatch<Packed>) -> &mut Vec<HostMetric<Packed>> {
        &mut batch.host_metrics
    }
}
impl Kind for HostMetrics {
    const NAME: &'static str = "host_metrics";
    type Body = ingest::MetricsBody<Packed>;
    type Json = ingest::HostMetricInput<Packed>;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS> {
        body.metrics
    }
    fn validate(i: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<HostMetric<Packed>> {
        ingest::validate_host_metric(i, item, errors)
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/ingest/spans",
    tag = "observability ingest",
    summary = "Ingest spans",
    description = "At most 1000 objects per request, body at most 10 MB (gzip allowed). All or nothing: a 200 means every object is stored.",
    request_body(content = sextant_model::ingest::SpansBody, example = json!({"spans": [{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "service_name": "checkout", "operation": "POST /pay", "timestamp": "2026-11-22T10:15:30.123Z", "duration_ms": 12.5, "status": "ok", "attributes": {"http.status_code": 200}}]})),
    params(("api_key" = Option<String>, Query, description = "The API key, when not sent in a header.")),
    responses((status = 200, description = "Every object was durably stored.", body = crate::ingest::Accepted, example = json!({"status": "ok", "accepted": 1})), crate::http::openapi::IngestErrors),
    security(("api_key" = []), ("api_key_bearer" = []))
)]
pub async fn spans(
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    query: RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    handle::<Spans>(state, headers, query, body).await
}

#[utoipa::path(
    post,
    path = "/api/v1/ingest/logs",
    tag = "observability ingest",
    summary = "Ingest logs",
    description = "At most 1000 objects per request, body at most 10 MB (gzip allowed). All or nothing: a 200 means every object is stored.",
    request_body(content = sextant_model::ingest::LogsBody, example = json!({"logs": [{"timestamp": "2026-11-22T10:15:30.123Z", "level": "error", "service": "checkout", "message": "payment declined", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}]})),
    params(("api_key" = Option<String>, Query, description = "The API key, when not sent in a header.")),
    responses((status = 200, description = "Every object was durably stored.", body = crate::ingest::Accepted, example = json!({"status": "ok", "accepted": 1})), crate::http::openapi::IngestErrors),
    security(("api_key" = []), ("api_key_bearer" = []))
)]
pub async fn logs(
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    query: RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    handle::<Logs>(state, headers, query, body).await
}

#[utoipa::path(
    post,
    path = "/api/v1/ingest/infrastructure",
    tag = "observability ingest",
    summary = "Ingest host metrics",
    description = "At most 1000 objects per request, body at most 10 MB (gzip allowed). All or nothing: a 200 means every object is stored.",
    request_body(content = sextant_model::ingest::MetricsBody, example = json!({"metrics": [{"timestamp": "2026-11-22T10:15:30.123Z", "hostname": "web-1", "cpu_percent": 42.5, "memory_used_bytes": 1073741824, "memory_total_bytes": 4294967296u64}]})),
    params(("api_key" = Option<String>, Query, description = "The API key, when not sent in a header.")),
    responses((status = 200, description = "Every object was durably stored.", body = crate::ingest::Accepted, example = json!({"status": "ok", "accepted": 1})), crate::http::openapi::IngestErrors),
    security(("api_key" = []), ("api_key_bearer" = []))
)]
pub async fn infrastructure(
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    query: RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    handle::<HostMetrics>(state, headers, query, body).await
}

async fn handle<K: Kind + 'static>(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    let result = async {
        // The credential first: an unauthenticated body is never read.
        let project = api_key_project(&app, &headers, query.as_deref()).await?;
        super::quota::check(&app, project, super::quota::Meter::Bytes)?;
        crate::http::body::require_json(&headers)?;
        let encoding = crate::http::body::encoding(&headers)?;
        let timeout = app.config.server.body_read_timeout;
        let received = crate::http::body::receive(&app.bodies, &headers, body, MAX_OBSERVABILITY_BODY, timeout).await?;
        let share = app.ingest_shares.enter(&project, received.raw.len() as u64)?;
        let (rows, json_len, _held) = app
            .bodies
            .parse(received, encoding, move |mut received| {
                let json = received.decode(encoding, MAX_OBSERVABILITY_BODY)?;
                let items = K::items(received.parse::<K::Body>(&json)?)
                    .into_items()
                    .map_err(|got| ApiError::BatchTooLarge { max: MAX_BATCH_OBJECTS, got })?;
                let rows = ingest::validate_all(items, K::validate)
                    .map_err(|errors| ApiError::invalid_objects(K::NAME, errors))?;
                Ok((rows, json.len(), received.charge))
            })
            .await?;
        let accepted = rows.len();
        let batches = partition::<K>(&app, &project, rows, json_len)?;
        commit(&app, &share, batches).await?;
        Ok(accepted)
    }
    .await;
    answer(&app, K::NAME, result, |accepted| Accepted { status: "ok", accepted })
}
