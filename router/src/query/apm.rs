//! `GET /api/v1/apm/endpoints` (docs/API.md, "APM endpoints"): per (service, operation) sums
//! from every shard and their latency sketches merged bucket by bucket, so percentiles keep the
//! sketch's relative error whatever the number of shards.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_proto::{query_request, ApmPlan};

use super::merge::Endpoints;
use super::params::{invalid, ms, Params};
use super::scatter::scatter;
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

const SORTS: [&str; 9] =
    ["count", "error_count", "error_rate", "rps", "avg_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms"];

pub async fn endpoints(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let (from, to) = params.range()?;
    let sort = params.get("sort").unwrap_or("count").to_owned();
    if !SORTS.contains(&sort.as_str()) && sort != "max_ms" {
        return Err(invalid(
            "sort",
            "must be one of count, error_count, error_rate, rps, avg_ms, p50_ms, p90_ms, p95_ms, p99_ms, max_ms",
        ));
    }
    let plan = ApmPlan { services: params.list("service")? };
    let mut gathered =
        scatter(&app, &session.project_id, (from, to), params.allow_partial()?, query_request::Plan::Apm(plan)).await?;
    let merged = gathered.fold(Endpoints::default())?;
    let seconds = (to - from) as f64 / 1e9;
    let mut items: Vec<Value> = merged
        .0
        .iter()
        .map(|((service, operation), s)| {
            json!({
                "service": service,
                "operation": operation,
                "count": s.count,
                "error_count": s.errors,
                "error_rate": s.error_rate(),
                "rps": s.count as f64 / seconds,
                "avg_ms": ms(s.sum_ms / s.count.max(1) as f64),
                "p50_ms": s.quantile_ms(0.5),
                "p90_ms": s.quantile_ms(0.9),
                "p95_ms": s.quantile_ms(0.95),
                "p99_ms": s.quantile_ms(0.99),
                "max_ms": s.sketch.max().map(ms),
            })
        })
        .collect();
    // Largest first; ties keep (service, operation) order (the sort is stable).
    let value = |v: &Value| v[&sort].as_f64().unwrap_or(0.0);
    items.sort_by(|a, b| value(b).total_cmp(&value(a)));
    let mut body = json!({ "items": items, "next_cursor": null });
    gathered.annotate(&mut body);
    Ok(Json(body))
}
