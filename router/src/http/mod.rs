//! The edge every request passes: the route table (one per port), the middleware around it
//! (`middleware`: request ids, access logs, request metrics, the read deadline, per-IP limits),
//! connections (`connection`), request bodies (`body`), lists (`listing`) and the one place
//! errors become responses (`error`).

pub mod body;
pub mod connection;
pub mod error;
pub mod listing;
pub mod metrics;
pub mod middleware;
pub mod openapi;
pub mod overload;
pub mod query_string;
pub mod tls;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Serialize;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use crate::http::error::ApiError;
use crate::identity::{account, api_keys, members, projects, usage};
use crate::ingest::{analytics, observability, otlp, posthog};
use crate::query::{activity, apm, cohorts, errors, funnel, hosts, logs, replays, retention, service_map, traces};
use crate::webhooks::api as webhooks;
use crate::AppState;

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
        .route("/api/v1/ingest/spans", post(observability::spans))
        .route("/api/v1/ingest/logs", post(observability::logs))
        .route("/api/v1/ingest/infrastructure", post(observability::infrastructure))
        // OTLP/HTTP (docs/API.md, "OTLP").
        .route("/v1/traces", post(otlp::http::traces))
        .route("/v1/logs", post(otlp::http::logs))
        .route("/v1/metrics", post(otlp::http::metrics))
        .layer(ingest_cors.clone());
    // Product analytics (docs/API.md, "Product analytics ingest"), native and PostHog-compatible.
    let mut capture =
        Router::new().route("/v1/batch", post(analytics::batch)).route("/v1/replay/events", post(analytics::replay));
    for path in ["/batch", "/batch/", "/e", "/e/", "/capture", "/capture/", "/i/v0/e", "/i/v0/e/"] {
        capture = capture.route(path, post(analytics::posthog));
    }
    // posthog-js session recordings and the configuration it reads before recording.
    capture = capture.route("/s", post(posthog::recordings)).route("/s/", post(posthog::recordings));
    let mut posthog_config = Router::new().route("/array/{token}/config", get(posthog::remote_config));
    for path in ["/flags", "/flags/", "/decide", "/decide/"] {
        posthog_config = posthog_config.route(path, get(posthog::decide).post(posthog::decide));
    }
    let posthog_config = posthog_config.layer(
        CorsLayer::new()
            .allow_origin(Any)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(Any),
    );
    // Ingest handlers read their bodies themselves, within their limits and the body budget.
    let capture = capture.layer(ingest_cors);
    // Per client IP, before anything else is done for the request.
    let auth = Router::new()
        .route("/auth/signup", post(account::signup))
        .route("/auth/login", post(account::login))
        .route("/auth/refresh", post(account::refresh))
        .route("/auth/logout", post(account::logout))
        .route("/auth/invite/accept", post(account::accept_invite))
        .route_layer(from_fn_with_state(app.clone(), middleware::limit_by_client_ip));
    // JWT endpoints; the per-user limit is applied where the session is established.
    let api = Router::new()
        .route("/api/v1/traces/{trace_id}", get(traces::get_trace))
        .route("/api/v1/traces", get(traces::list))
        .merge(crate::billing::api::routes())
        .route("/api/v1/logs/search", get(logs::search))
        .route("/api/v1/apm/endpoints", get(apm::endpoints))
        .route("/api/v1/service-map", get(service_map::get))
        .route("/api/v1/errors", get(errors::list))
        .route("/api/v1/errors/{fingerprint}", get(errors::get))
        .route("/api/v1/infrastructure/hosts", get(hosts::list))
        .route("/api/replays", get(replays::list))
        .route("/api/events/timeseries", get(activity::timeseries))
        .route("/api/users/active", get(activity::active_users))
        .route("/api/funnel", get(funnel::funnel))
        .route("/api/retention", get(retention::retention))
        .route("/api/cohorts", get(cohorts::list).post(cohorts::create))
        .route("/api/cohorts/{id}", get(cohorts::get))
        .route("/api/cohorts/{id}/users", get(cohorts::users))
        .route("/api/replays/{session_id}", get(replays::events))
        .route("/api/v1/infrastructure/hosts/{hostname}/metrics", get(hosts::metrics))
        .route("/projects", get(projects::list).post(projects::create))
        .route("/api/org/members", get(members::list).post(members::invite))
        .route("/api/org/members/{user_id}", delete(members::remove))
        .route("/api/v1/api-keys", get(api_keys::list).post(api_keys::create))
        .route("/api/v1/api-keys/{id}", delete(api_keys::delete))
        .route("/api/v1/usage", get(usage::get))
        .route("/api/v1/alerts", get(crate::alerts::api::list).post(crate::alerts::api::create))
        .route("/api/v1/alerts/{id}", get(crate::alerts::api::get).delete(crate::alerts::api::delete))
        .route("/api/webhooks", get(webhooks::list).post(webhooks::create))
        .route("/api/webhooks/{id}", delete(webhooks::delete))
        .route("/api/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route("/api/webhooks/{id}/test", post(webhooks::test))
        .route("/api/webhooks/{id}/rotate-secret", post(webhooks::rotate_secret))
        .route_layer(from_fn_with_state(app.clone(), middleware::read_deadline))
        .merge(auth)
        .layer(DefaultBodyLimit::max(account::MAX_AUTH_BODY))
        .layer(dashboard_cors);

    Router::new()
        .merge(ingest)
        .merge(capture)
        .merge(posthog_config)
        .merge(api)
        .merge(probes())
        .route("/openapi.json", get(openapi::openapi_json))
        .merge(app.billing.routes())
        // The web dashboard: `/`, `/assets/*` and its own pages, never an API path.
        .merge(crate::dashboard::routes())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(from_fn_with_state(app.clone(), middleware::observe))
        .with_state(app)
}

/// The internal port (`--internal-listen`): `/metrics` and the admin API `/admin/v1`, never
/// served on the public port, and the probes.
pub fn internal_router(app: Arc<AppState>) -> Router {
    let admin = crate::admin::router().layer(DefaultBodyLimit::max(crate::admin::MAX_ADMIN_BODY));
    Router::new()
        .nest("/admin/v1", admin)
        .route("/metrics", get(metrics_text))
        .merge(probes())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(from_fn_with_state(app.clone(), middleware::observe))
        .with_state(app)
}

/// What a probe answers when the router serves (`/healthz`) or is ready (`/readyz`).
#[derive(Serialize)]
struct Probe {
    status: &'static str,
}

fn probes() -> Router<Arc<AppState>> {
    Router::new().route("/healthz", get(|| async { Json(Probe { status: "ok" }) })).route("/readyz", get(readyz))
}

async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    if app.cluster.ready() {
        Json(Probe { status: "ready" }).into_response()
    } else {
        ApiError::Unavailable("waiting for storage leaders and metadata".into()).into_response()
    }
}

async fn metrics_text(State(app): State<Arc<AppState>>) -> Response {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &app.registry).is_err() {
        return ApiError::Internal("metrics encoding failed".into()).into_response();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response()
}
