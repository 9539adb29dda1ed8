//! Route table and cross-cutting HTTP concerns: request ids, access logs, CORS, limits.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tracing::Instrument;

use crate::error::ApiError;
use crate::metrics::RequestLabel;
use crate::rate_limit::Class;
use crate::{account, api_keys, capture, ingest, members, projects, traces, AppState};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub fn router(app: Arc<AppState>) -> Router {
    // Browser SDKs post from any origin, without credentials.
    let ingest_cors =
        CorsLayer::new().allow_origin(Any).allow_methods([Method::POST, Method::OPTIONS]).allow_headers(Any);
    let origins: Vec<HeaderValue> = app.config.dashboard_origins.iter().filter_map(|o| o.parse().ok()).collect();
    let dashboard_cors = CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_credentials(true)
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, HeaderName::from_static("x-project-id")]);

    let ingest = Router::new()
        .route("/api/v1/ingest/spans", post(ingest::spans))
        .route("/api/v1/ingest/logs", post(ingest::logs))
        .route("/api/v1/ingest/infrastructure", post(ingest::infrastructure))
        .layer(ingest_cors.clone());
    // Product analytics (DESIGN A7), native and PostHog-compatible.
    let mut capture =
        Router::new().route("/v1/batch", post(capture::batch)).route("/v1/replay/events", post(capture::replay));
    for path in ["/batch", "/batch/", "/e", "/e/", "/capture", "/capture/", "/i/v0/e", "/i/v0/e/"] {
        capture = capture.route(path, post(capture::posthog));
    }
    // Ingest handlers read their bodies themselves, within their limits and the body budget.
    let capture = capture.layer(ingest_cors);
    // Per client IP, before anything else is done for the request.
    let auth = Router::new()
        .route("/auth/signup", post(account::signup))
        .route("/auth/login", post(account::login))
        .route("/auth/refresh", post(account::refresh))
        .route("/auth/logout", post(account::logout))
        .route("/auth/invite/accept", post(account::accept_invite))
        .route_layer(middleware::from_fn_with_state(app.clone(), limit_by_client_ip));
    // JWT endpoints; the per-user limit is applied where the session is established.
    let api = Router::new()
        .route("/api/v1/traces/{trace_id}", get(traces::get_trace))
        .route("/api/v1/traces", get(crate::trace_search::list))
        .route("/api/v1/logs/search", get(crate::log_search::search))
        .route("/api/v1/apm/endpoints", get(crate::apm::endpoints))
        .route("/api/v1/service-map", get(crate::service_map::get))
        .route("/api/v1/errors", get(crate::error_groups::list))
        .route("/api/v1/errors/{fingerprint}", get(crate::error_groups::get))
        .route("/api/v1/infrastructure/hosts", get(crate::hosts::list))
        .route("/api/replays", get(crate::replays::list))
        .route("/api/events/timeseries", get(crate::activity::timeseries))
        .route("/api/users/active", get(crate::activity::active_users))
        .route("/api/funnel", get(crate::funnel::funnel))
        .route("/api/retention", get(crate::retention::retention))
        .route("/api/cohorts", get(crate::cohorts::list).post(crate::cohorts::create))
        .route("/api/cohorts/{id}", get(crate::cohorts::get))
        .route("/api/cohorts/{id}/users", get(crate::cohorts::users))
        .route("/api/replays/{session_id}", get(crate::replays::events))
        .route("/api/v1/infrastructure/hosts/{hostname}/metrics", get(crate::hosts::metrics))
        .route("/projects", get(projects::list).post(projects::create))
        .route("/api/org/members", get(members::list).post(members::invite))
        .route("/api/org/members/{user_id}", delete(members::remove))
        .route("/api/v1/api-keys", get(api_keys::list).post(api_keys::create))
        .route("/api/v1/api-keys/{id}", delete(api_keys::delete))
        .route_layer(middleware::from_fn_with_state(app.clone(), read_deadline))
        .merge(auth)
        .layer(DefaultBodyLimit::max(account::MAX_AUTH_BODY))
        .layer(dashboard_cors);

    Router::new()
        .merge(ingest)
        .merge(capture)
        .merge(api)
        .merge(probes())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(middleware::from_fn_with_state(app.clone(), observe))
        .with_state(app)
}

/// The internal port (`--internal-listen`): `/metrics` and the admin API `/admin/v1`, never
/// served on the public port, and the probes.
pub fn internal_router(app: Arc<AppState>) -> Router {
    let admin = crate::admin::router().layer(DefaultBodyLimit::max(crate::admin::MAX_ADMIN_BODY));
    Router::new()
        .nest("/admin/v1", admin)
        .route("/metrics", get(metrics))
        .merge(probes())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(middleware::from_fn_with_state(app.clone(), observe))
        .with_state(app)
}

fn probes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
}

/// Reads end within the configured time (504 `query_timeout`); their shard requests are
/// dropped with them.
async fn read_deadline(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if req.method() != Method::GET {
        return next.run(req).await;
    }
    let limit = app.config.server.read_timeout;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::ReadTimeout { secs: limit.as_secs() }.into_response(),
    }
}

/// DESIGN A10: `/auth/*` per client IP.
async fn limit_by_client_ip(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let ip = client_ip(peer, req.headers(), app.config.trusted_proxy_hops).map(|ip| ip.to_string()).unwrap_or_default();
    let now = chrono::Utc::now().timestamp_millis();
    let live = app.cluster.meta_cache().map_or(1, |c| c.live_routers(now));
    match app.limits.check(Class::Auth, &ip, &[], live) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// The client's address. Behind `hops` trusted proxies (an ingress, a load balancer) it is the
/// `hops`-th address from the right of `X-Forwarded-For`: entries further left were written
/// by the client and prove nothing. Without trusted proxies, the peer address.
pub fn client_ip(peer: Option<IpAddr>, headers: &HeaderMap, hops: usize) -> Option<IpAddr> {
    if hops == 0 {
        return peer;
    }
    let forwarded: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    // Fewer entries than trusted hops: the request did not come through them all.
    match forwarded.len().checked_sub(hops) {
        Some(i) => forwarded[i].parse().ok().or(peer),
        None => peer,
    }
}

/// Request id (echoed or generated), one access-log line per request, request metrics.
async fn observe(State(app): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_owned();
    let method = req.method().clone();
    req.headers_mut().insert(REQUEST_ID, HeaderValue::from_str(&id).expect("validated above"));
    let span = tracing::info_span!("request", request_id = %id, %method, route = %route);
    let started = Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    // axum's own 405 has no body; give it the contract's error shape. (Not through
    // `method_not_allowed_fallback`, which would also swallow CORS preflights.)
    if resp.status() == StatusCode::METHOD_NOT_ALLOWED && !resp.headers().contains_key(header::CONTENT_TYPE) {
        let allow = resp.headers().get(header::ALLOW).cloned();
        let body = json!({"error": {"code": "method_not_allowed", "message": "method not allowed on this endpoint"}});
        resp = (StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response();
        if let Some(allow) = allow {
            resp.headers_mut().insert(header::ALLOW, allow);
        }
    }
    let elapsed = started.elapsed();
    let status = resp.status().as_u16();
    span.in_scope(|| tracing::info!(status, ms = elapsed.as_secs_f64() * 1e3, "request"));
    let label = RequestLabel { route, status };
    app.metrics.requests.get_or_create(&label).inc();
    app.metrics.request_seconds.get_or_create(&label).observe(elapsed.as_secs_f64());
    resp.headers_mut().insert(REQUEST_ID, HeaderValue::from_str(&id).expect("validated above"));
    resp
}

async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    if app.cluster.ready() {
        Json(json!({"status": "ready"})).into_response()
    } else {
        ApiError::Unavailable("waiting for storage leaders and metadata".into()).into_response()
    }
}

async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &app.registry).is_err() {
        return ApiError::Internal("metrics encoding failed".into()).into_response();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ip_trusts_only_the_configured_proxies() {
        let peer: Option<IpAddr> = Some("10.0.0.9".parse().unwrap());
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6, 1.2.3.4, 10.0.0.5"));
        assert_eq!(client_ip(peer, &h, 0), peer, "no trusted proxy: the header is ignored");
        // One proxy (the ingress, our peer) appended the address it saw.
        assert_eq!(client_ip(peer, &h, 1), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(client_ip(peer, &h, 2), Some("1.2.3.4".parse().unwrap()));
        assert_eq!(client_ip(peer, &h, 4), peer, "more hops than entries");
        h.insert("x-forwarded-for", HeaderValue::from_static("not-an-ip"));
        assert_eq!(client_ip(peer, &h, 1), peer);
        assert_eq!(client_ip(peer, &HeaderMap::new(), 1), peer);
    }
}
