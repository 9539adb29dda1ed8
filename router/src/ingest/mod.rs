//! Ingest: every write goes authenticate -> receive the body (within its limits and the byte
//! budget) -> validate -> partition into one sub-batch per shard -> commit every sub-batch
//! -> answer, only once all of them are committed.
//!
//! - [`observability`]: spans, logs and host metrics, with a project API key.
//! - [`analytics`]: product-analytics events and session replays, with a project token,
//!   natively and PostHog-compatible.
//! - [`otlp`]: the same three kinds from OpenTelemetry SDKs and Collectors, over OTLP/gRPC and
//!   OTLP/HTTP.
//! - [`partition`]: rows to shards through the partition table.
//! - [`quota`]: monthly quotas, checked right after authentication.
//! - [`commit`]: all-or-nothing replication of a request's sub-batches.
//! - [`admission`]: each project's share of the ingest in flight (per-tenant fairness).

pub mod admission;
pub mod analytics;
pub mod commit;
pub mod observability;
pub mod otlp;
pub mod partition;
pub mod posthog;
pub mod quota;

use axum::Json;
use serde::Serialize;

use crate::http::error::ApiError;
use crate::AppState;

#[derive(Serialize, utoipa::ToSchema)]
pub struct Accepted {
    pub status: &'static str,
    pub accepted: usize,
}

/// Counts an ingest request's outcome (objects accepted, or the refusal's reason) and answers.
pub(crate) fn answer<T>(
    app: &AppState,
    kind: &'static str,
    result: Result<usize, ApiError>,
    ok: impl FnOnce(usize) -> T,
) -> Result<Json<T>, ApiError> {
    match result {
        Ok(n) => {
            app.metrics.accepted(kind, n as u64);
            Ok(Json(ok(n)))
        }
        Err(e) => {
            app.metrics.rejected(kind, &e);
            Err(e)
        }
    }
}
