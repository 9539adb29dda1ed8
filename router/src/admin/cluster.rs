//! Admin API: storage membership (nodes, replica placement, drains), as the operator calls it
//! (request and response types in `sextant_model::admin`).
//!
//! Both changes only record intent in meta and answer 202: meta computes the placement, each
//! group's leader moves its replicas (`node/src/placement.rs`), and progress shows in the node
//! states of `GET /cluster/nodes` (`Active` once a member holds what is placed on it, `Drained`
//! once a draining node holds nothing). Repeating a request changes nothing.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use sextant_model::admin::{ClusterNode, ClusterNodes, DrainRequest, PlacementRequest};
use sextant_model::meta::{ClusterView, MetaCommand, MetaCommandResult, MetaQuery};

use super::{Admin, MAX_ADMIN_BODY};
use crate::http::error::ApiError;
use crate::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/cluster/nodes", get(nodes))
        .route("/cluster/placement", post(placement))
        .route("/cluster/drain", post(drain))
}

async fn nodes(_: Admin, State(app): State<Arc<AppState>>) -> Result<Json<ClusterNodes>, ApiError> {
    let view: ClusterView = app.cluster.meta_read(&MetaQuery::Cluster).await?;
    let nodes =
        view.nodes.into_iter().map(|n| ClusterNode { id: n.id, address: n.address, state: n.state.into() }).collect();
    Ok(Json(ClusterNodes { nodes }))
}

async fn placement(
    _: Admin,
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let req: PlacementRequest = crate::http::body::json(&headers, body, MAX_ADMIN_BODY)?;
    if req.nodes.iter().any(|a| a.trim().is_empty()) {
        return Err(ApiError::BadRequest("invalid_address", "node addresses must not be empty".into()));
    }
    accepted(app.cluster.meta_write(&MetaCommand::SetMembers { addresses: req.nodes }).await?)
}

async fn drain(
    _: Admin,
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let req: DrainRequest = crate::http::body::json(&headers, body, MAX_ADMIN_BODY)?;
    accepted(app.cluster.meta_write(&MetaCommand::DrainNode { address: req.address }).await?)
}

fn accepted(result: MetaCommandResult) -> Result<StatusCode, ApiError> {
    crate::http::error::expect_done(result, "a membership change")?;
    Ok(StatusCode::ACCEPTED)
}
