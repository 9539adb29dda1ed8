//! `GET /api/v1/apm/endpoints` (docs/API.md, "APM endpoints"): per (service, operation) sums
//! from every shard and their latency sketches merged bucket by bucket, so percentiles keep the
//! sketch's relative error whatever the number of shards.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sextant_model::query::{ApmPlan, Endpoints};

use super::params::{self, invalid, list_of, ms, Params};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

pub const SORTS: [&str; 10] =
    ["count", "error_count", "error_rate", "rps", "avg_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms"];

/// An endpoint in `GET /api/v1/apm/endpoints`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointJson {
    pub service: String,
    pub operation: String,
    pub count: u64,
    pub error_count: u64,
    pub error_rate: f64,
    pub rps: f64,
    pub avg_ms: f64,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl EndpointJson {
    /// The value `sort` (one of [`SORTS`]) orders by; a missing percentile counts as 0.
    fn sort_value(&self, sort: &str) -> f64 {
        match sort {
            "count" => self.count as f64,
            "error_count" => self.error_count as f64,
            "error_rate" => self.error_rate,
            "rps" => self.rps,
            "avg_ms" => self.avg_ms,
            "p50_ms" => self.p50_ms.unwrap_or(0.0),
            "p90_ms" => self.p90_ms.unwrap_or(0.0),
            "p95_ms" => self.p95_ms.unwrap_or(0.0),
            "p99_ms" => self.p99_ms.unwrap_or(0.0),
            "max_ms" => self.max_ms.unwrap_or(0.0),
            _ => 0.0,
        }
    }
}

/// `GET /api/v1/apm/endpoints`: every endpoint, unpaged.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointList {
    pub items: Vec<EndpointJson>,
    /// Always null: the list is whole.
    pub next_cursor: Option<String>,
}

/// The parameters of `GET /api/v1/apm/endpoints`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EndpointsQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    pub service: Option<String>,
    /// One of [`SORTS`], largest first (default `count`).
    pub sort: Option<String>,
}

#[utoipa::path(
    get, path = "/api/v1/apm/endpoints", tag = "observability", summary = "Latency and errors per service and operation",
    params(crate::query::params::Params, crate::http::listing::Paging, EndpointsQuery),
    responses((status = 200, description = "Latency and errors per service and operation.", body = crate::query::scatter::Answer<EndpointList>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn endpoints(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<EndpointList>>, ApiError> {
    let q: EndpointsQuery = params::parse(raw.as_deref())?;
    let (from, to) = q.params.range(app.clock.now_nanos())?;
    let sort = q.sort.unwrap_or_else(|| "count".into());
    if !SORTS.contains(&sort.as_str()) {
        return Err(invalid(
            "sort",
            "must be one of count, error_count, error_rate, rps, avg_ms, p50_ms, p90_ms, p95_ms, p99_ms, max_ms",
        ));
    }
    let plan = ApmPlan { services: list_of("service", q.service.as_deref())? };
    let mut gathered = scatter(&app, &session.project_id, (from, to), q.params.allow_partial()?, plan).await?;
    let merged = gathered.fold::<Endpoints>();
    let seconds = (to - from) as f64 / 1e9;
    let mut items: Vec<EndpointJson> = merged
        .0
        .into_iter()
        .map(|((service, operation), s)| EndpointJson {
            count: s.count,
            error_count: s.errors,
            error_rate: s.error_rate(),
            rps: s.count as f64 / seconds,
            avg_ms: ms(s.sum_ms / s.count.max(1) as f64),
            p50_ms: s.sketch.quantile(0.5).map(ms),
            p90_ms: s.sketch.quantile(0.9).map(ms),
            p95_ms: s.sketch.quantile(0.95).map(ms),
            p99_ms: s.sketch.quantile(0.99).map(ms),
            max_ms: s.sketch.max().map(ms),
            service,
            operation,
        })
        .collect();
    // Largest first; ties keep (service, operation) order (the sort is stable).
    items.sort_by(|a, b| b.sort_value(&sort).total_cmp(&a.sort_value(&sort)));
    Ok(gathered.answer(EndpointList { items, next_cursor: None }))
}
