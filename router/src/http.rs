//! Route table and cross-cutting HTTP concerns: request ids, access logs, CORS, limits.

use std::sync::Arc;
use std::time::Instant;

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::json;
use sextant_model::ingest::MAX_OBSERVABILITY_BODY;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tracing::Instrument;

use crate::error::ApiError;
use crate::metrics::RequestLabel;
use crate::rate_limit::Class;
use crate::{account, api_keys, ingest, members, projects, traces, AppState};

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
        .layer(DefaultBodyLimit::max(MAX_OBSERVABILITY_BODY))
        .layer(ingest_cors);
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
        .route("/api/v1/infrastructure/hosts/{hostname}/metrics", get(crate::hosts::metrics))
        .route("/projects", get(projects::list).post(projects::create))
        .route("/api/org/members", get(members::list).post(members::invite))
        .route("/api/org/members/{user_id}", delete(members::remove))
        .route("/api/v1/api-keys", get(api_keys::list).post(api_keys::create))
        .route("/api/v1/api-keys/{id}", delete(api_keys::delete))
        .merge(auth)
        .layer(DefaultBodyLimit::max(account::MAX_AUTH_BODY))
        .layer(dashboard_cors);

    Router::new()
        .merge(ingest)
        .merge(api)
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(
                    json!({"error": {"code": "method_not_allowed", "message": "method not allowed on this endpoint"}}),
                ),
            )
        })
        .layer(middleware::from_fn_with_state(app.clone(), observe))
        .with_state(app)
}

/// DESIGN A10: `/auth/*` per client IP (the peer address; a trusted proxy header is not
/// consulted yet).
async fn limit_by_client_ip(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let ip = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string()).unwrap_or_default();
    let now = chrono::Utc::now().timestamp_millis();
    let live = app.cluster.meta_cache().map_or(1, |c| c.live_routers(now));
    match app.limits.check(Class::Auth, &ip, None, live) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
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
