//! Trace reads (DESIGN A4). A trace lives on one shard, found through its partition.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_model::attributes;
use sextant_model::partition::partition_of;
use sextant_model::time::format_nanos;
use sextant_model::TraceId;
use sextant_proto::{Span, SpanStatus};

use crate::auth::Session;
use crate::error::ApiError;
use crate::AppState;

pub fn span_json(s: &Span) -> Value {
    let status = match SpanStatus::try_from(s.status).unwrap_or(SpanStatus::Unset) {
        SpanStatus::Ok => "ok",
        SpanStatus::Error => "error",
        SpanStatus::Unset => "unset",
    };
    json!({
        "trace_id": s.trace_id,
        "span_id": s.span_id,
        "parent_span_id": if s.parent_span_id.is_empty() { Value::Null } else { Value::String(s.parent_span_id.clone()) },
        "service_name": s.service_name,
        "operation": s.operation,
        "timestamp": format_nanos(s.start_unix_nanos),
        "duration_ms": s.duration_nanos as f64 / 1e6,
        "status": status,
        "attributes": attributes::to_json(&s.attributes),
    })
}

pub async fn get_trace(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(trace_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let trace_id = TraceId::parse(&trace_id).map_err(|_| ApiError::NotFound("trace not found".into()))?;
    let cache = app.cluster.meta_cache().ok_or_else(|| ApiError::Unavailable("metadata is not loaded yet".into()))?;
    let p = partition_of(&session.project_id, trace_id.as_str().as_bytes());
    let group = *cache.partitions.get(p as usize).ok_or_else(|| ApiError::Unavailable("no partition table".into()))?;
    let mut spans = app.cluster.get_trace(group, &session.project_id, trace_id.as_str()).await?;
    if spans.is_empty() {
        return Err(ApiError::NotFound("trace not found".into()));
    }
    spans.sort_by(|a, b| a.start_unix_nanos.cmp(&b.start_unix_nanos).then_with(|| a.span_id.cmp(&b.span_id)));
    let start = spans.iter().map(|s| s.start_unix_nanos).min().unwrap_or_default();
    let end =
        spans.iter().map(|s| s.start_unix_nanos.saturating_add_unsigned(s.duration_nanos)).max().unwrap_or_default();
    let services: BTreeSet<&str> = spans.iter().map(|s| s.service_name.as_str()).collect();
    Ok(Json(json!({
        "trace_id": trace_id.as_str(),
        "start_time": format_nanos(start),
        "duration_ms": (end - start) as f64 / 1e6,
        "services": services,
        "spans": spans.iter().map(span_json).collect::<Vec<_>>(),
    })))
}
