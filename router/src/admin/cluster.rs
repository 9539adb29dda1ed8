//! Admin API: storage membership (nodes, replica placement, drains), as the operator calls it
//! (request and response types in `sextant_model::admin`).
//!
//! Both changes only record intent in meta and answer 202: meta computes the placement, each
//! group's leader moves its replicas (`node/src/placement.rs`), and progress shows in the node
//! states of `GET /cluster/nodes` (`Active` once a member holds what is placed on it, `Drained`
//! once a draining node holds nothing). Repeating a request changes nothing.
//!
//! Node identity (docs/RELIABILITY.md, "Replacing a node"): `GET /cluster/identities` shows
//! which incarnation holds each id and which restarted on an empty disk; `replace` hands such
//! an id to its new incarnation, `remove` drains a dead node by id.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use sextant_model::admin::{
    ClusterGroup, ClusterGroups, ClusterNode, ClusterNodes, DrainRequest, NodeIdRequest, NodeIdentities, NodeIdentity,
    NodeReplacementStatus, PlacementRequest,
};
use sextant_model::meta::{ClusterView, MetaCommand, MetaCommandResult, MetaQuery};

use super::{Admin, MAX_ADMIN_BODY};
use crate::http::error::ApiError;
use crate::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/cluster/nodes", get(nodes))
        .route("/cluster/groups", get(groups))
        .route("/cluster/placement", post(placement))
        .route("/cluster/drain", post(drain))
        .route("/cluster/identities", get(identities))
        .route("/cluster/replace", post(replace))
        .route("/cluster/remove", post(remove))
}

fn hex(incarnation: u64) -> String {
    format!("{incarnation:016x}")
}

async fn identities(_: Admin, State(app): State<Arc<AppState>>) -> Result<Json<NodeIdentities>, ApiError> {
    let view: ClusterView = app.cluster.meta_read(&MetaQuery::Cluster).await?;
    let nodes = view
        .nodes
        .into_iter()
        .map(|n| NodeIdentity {
            id: n.id,
            incarnation: hex(n.incarnation),
            needs_replacement: n.needs_replacement.map(hex),
            replacing: n
                .replacing
                .map(|r| NodeReplacementStatus { incarnation: hex(r.incarnation), groups_left: r.groups }),
        })
        .collect();
    Ok(Json(NodeIdentities { nodes }))
}

async fn replace(
    _: Admin,
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let req: NodeIdRequest = crate::http::body::json(&headers, body, MAX_ADMIN_BODY)?;
    accepted(app.cluster.meta_write(&MetaCommand::ReplaceNode { id: req.id }).await?)
}

async fn remove(
    _: Admin,
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let req: NodeIdRequest = crate::http::body::json(&headers, body, MAX_ADMIN_BODY)?;
    accepted(app.cluster.meta_write(&MetaCommand::RemoveNode { id: req.id }).await?)
}

async fn nodes(_: Admin, State(app): State<Arc<AppState>>) -> Result<Json<ClusterNodes>, ApiError> {
    let view: ClusterView = app.cluster.meta_read(&MetaQuery::Cluster).await?;
    let nodes = view
        .nodes
        .into_iter()
        .map(|n| ClusterNode { id: n.id, address: n.address, state: n.state.into(), zone: n.zone })
        .collect();
    Ok(Json(ClusterNodes { nodes }))
}

/// Each group's replicas, where placement wants them, and their zones (docs/ARCHITECTURE.md,
/// "Zones").
async fn groups(_: Admin, State(app): State<Arc<AppState>>) -> Result<Json<ClusterGroups>, ApiError> {
    let view: ClusterView = app.cluster.meta_read(&MetaQuery::Cluster).await?;
    let zone_of = |id: &u64| view.nodes.iter().find(|n| n.id == *id).and_then(|n| n.zone.clone());
    let groups = view
        .replicas
        .iter()
        .map(|(group, replicas)| ClusterGroup {
            group: *group,
            replicas: replicas.clone(),
            desired: view.desired.get(group).cloned().unwrap_or_default(),
            zones: replicas.iter().map(zone_of).collect(),
            zone_spread: !view.misplaced.contains(group),
        })
        .collect();
    Ok(Json(ClusterGroups { zones: view.zones, groups }))
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
