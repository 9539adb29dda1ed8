//! `GET /api/v1/service-map` (docs/API.md, "Service map"): nodes and edges summed over shards
//! (a trace lives on one shard, so every edge is found whole on one), p95 from merged sketches.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_proto::{query_request, ServiceMapPlan};

use super::merge::ServiceMap;
use super::params::Params;
use super::scatter::scatter;
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

pub async fn get(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let range = params.range()?;
    let mut gathered = scatter(
        &app,
        &session.project_id,
        range,
        params.allow_partial()?,
        query_request::Plan::ServiceMap(ServiceMapPlan {}),
    )
    .await?;
    let ServiceMap { nodes, edges } = gathered.fold(ServiceMap::default())?;
    let mut body = json!({
        "nodes": nodes.iter().map(|(service, s)| json!({
            "service": service,
            "span_count": s.count,
            "error_rate": s.error_rate(),
            "p95_ms": s.quantile_ms(0.95),
        })).collect::<Vec<_>>(),
        "edges": edges.iter().map(|((source, target), s)| json!({
            "source": source,
            "target": target,
            "call_count": s.count,
            "error_count": s.errors,
            "p95_ms": s.quantile_ms(0.95),
        })).collect::<Vec<_>>(),
    });
    gathered.annotate(&mut body);
    Ok(Json(body))
}
