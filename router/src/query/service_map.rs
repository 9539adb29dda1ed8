//! `GET /api/v1/service-map` (docs/API.md, "Service map"): nodes and edges summed over shards
//! (a trace lives on one shard, so every edge is found whole on one), p95 from merged sketches.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_proto::{query_reply, query_request, ServiceMapPlan};

use super::params::Params;
use super::scatter::scatter;
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::query::apm::Stats;
use crate::AppState;

pub async fn get(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let range = params.range()?;
    let gathered = scatter(
        &app,
        &session.project_id,
        range,
        params.allow_partial()?,
        query_request::Plan::ServiceMap(ServiceMapPlan {}),
    )
    .await?;
    let mut nodes: BTreeMap<String, Stats> = BTreeMap::new();
    let mut edges: BTreeMap<(String, String), Stats> = BTreeMap::new();
    for (_, p) in &gathered.partials {
        if let query_reply::Partial::ServiceMap(m) = p {
            for n in &m.nodes {
                nodes.entry(n.service.clone()).or_default().add(n.span_count, n.error_count, 0.0, &n.sketch)?;
            }
            for e in &m.edges {
                edges.entry((e.source.clone(), e.target.clone())).or_default().add(
                    e.call_count,
                    e.error_count,
                    0.0,
                    &e.sketch,
                )?;
            }
        }
    }
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
