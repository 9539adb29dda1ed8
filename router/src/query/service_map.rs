//! `GET /api/v1/service-map` (docs/API.md, "Service map"): nodes and edges summed over shards
//! (a trace lives on one shard, so every edge is found whole on one), p95 from merged sketches.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::Serialize;
use sextant_model::query::{ServiceMap, ServiceMapPlan};

use super::params::{ms, Params};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

/// A service in `GET /api/v1/service-map`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServiceNode {
    pub service: String,
    pub span_count: u64,
    pub error_rate: f64,
    pub p95_ms: Option<f64>,
}

/// Calls from `source` to `target` (a span of `target` whose parent span is of `source`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServiceEdge {
    pub source: String,
    pub target: String,
    pub call_count: u64,
    pub error_count: u64,
    pub p95_ms: Option<f64>,
}

/// `GET /api/v1/service-map`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServiceMapJson {
    pub nodes: Vec<ServiceNode>,
    pub edges: Vec<ServiceEdge>,
}

#[utoipa::path(
    get, path = "/api/v1/service-map", tag = "observability", summary = "Services and the calls between them",
    params(crate::query::params::Params),
    responses((status = 200, description = "Services and the calls between them.", body = crate::query::scatter::Answer<ServiceMapJson>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn get(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<ServiceMapJson>>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let range = params.range(app.clock.now_nanos())?;
    let mut gathered = scatter(&app, &session.project_id, range, params.allow_partial()?, ServiceMapPlan).await?;
    let ServiceMap { nodes, edges } = gathered.fold();
    let nodes = nodes
        .into_iter()
        .map(|(service, s)| ServiceNode {
            span_count: s.count,
            error_rate: s.error_rate(),
            p95_ms: s.sketch.quantile(0.95).map(ms),
            service,
        })
        .collect();
    let edges = edges
        .into_iter()
        .map(|((source, target), s)| ServiceEdge {
            call_count: s.count,
            error_count: s.errors,
            p95_ms: s.sketch.quantile(0.95).map(ms),
            source,
            target,
        })
        .collect();
    Ok(gathered.answer(ServiceMapJson { nodes, edges }))
}
