//! The node's small HTTP endpoint: liveness, readiness, Raft status and Prometheus metrics.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::host::NodeHost;
use crate::identity::Standing;

pub struct NodeHttp {
    pub host: Arc<NodeHost>,
    pub registry: Arc<Registry>,
}

pub fn router(state: Arc<NodeHttp>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(s): State<Arc<NodeHttp>>) -> impl IntoResponse {
    if s.host.ready() {
        (StatusCode::OK, Json(json!({"status": "ready"})))
    } else if let Some(standing) = identity(&s.host) {
        (StatusCode::SERVICE_UNAVAILABLE, Json(standing))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "waiting for registration and group leaders"})))
    }
}

/// Per-group Raft state of this node, for operators and tests.
async fn status(State(s): State<Arc<NodeHttp>>) -> impl IntoResponse {
    let groups: Vec<_> = s
        .host
        .rafts()
        .into_iter()
        .map(|(group, raft)| {
            let m = raft.metrics().borrow().clone();
            json!({
                "group": group,
                "state": format!("{:?}", m.state),
                "leader": m.current_leader,
                "term": m.current_term,
                "last_log_index": m.last_log_index,
                "last_applied": m.last_applied.map(|l| l.index),
                "snapshot": m.snapshot.map(|l| l.index),
                "voters": m.membership_config.membership().voter_ids().collect::<Vec<_>>(),
            })
        })
        .collect();
    let incarnation = crate::identity::hex(s.host.identity.incarnation);
    let identity = identity(&s.host).unwrap_or_else(|| json!({"status": "confirmed"}));
    let zone = s.host.config.zone.read().ok().flatten();
    Json(json!({
        "node_id": s.host.config.id,
        "incarnation": incarnation,
        "identity": identity,
        "zone": zone,
        "initial_members": s.host.initial_members(),
        "retired_members": s.host.peer_incarnations.retired(),
        "groups": groups,
    }))
}

/// Why this incarnation does not take part in Raft under its id, if it does not.
fn identity(host: &NodeHost) -> Option<serde_json::Value> {
    let id = host.config.id;
    Some(match host.identity.standing() {
        Standing::Verified => return None,
        Standing::Unverified => json!({"status": "waiting for meta to confirm this node id"}),
        Standing::NeedsReplacement { known } => json!({
            "status": "needs replacement",
            "detail": format!(
                "restarted on an empty data directory under node id {id}, which the cluster knows as incarnation \
                 {}; replace it with POST /admin/v1/cluster/replace {{\"id\": {id}}}",
                crate::identity::hex(known)
            ),
        }),
        Standing::Replacing { groups } => json!({"status": "being replaced", "groups_left": groups}),
    })
}

async fn metrics(State(s): State<Arc<NodeHttp>>) -> impl IntoResponse {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &s.registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "metrics encoding failed".to_string()).into_response();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response()
}
