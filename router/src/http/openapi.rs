//! `GET /openapi.json` (docs/API.md, "OpenAPI document"): the OpenAPI 3.1 document of the
//! public port, generated from the handlers' `#[utoipa::path]` annotations and the schemas of
//! their request and response types. The test below fails when the served router has a route
//! the document does not describe.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use utoipa::openapi::response::Response as ResponseObject;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::RefOr;
use utoipa::{IntoResponses, Modify, OpenApi};

use crate::http::error::ErrorBody;

/// Security scheme names, as the handlers' `security(...)` annotations spell them.
pub const JWT: &str = "jwt";
pub const API_KEY: &str = "api_key";
pub const API_KEY_BEARER: &str = "api_key_bearer";
pub const PROJECT_TOKEN: &str = "project_token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Sextant",
        description = "Observability and product analytics: ingest (API key, project token), reads (JWT), \
                       accounts and billing. Errors are always `{\"error\": {\"code\", \"message\", \"details\"?}}`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    paths(
        crate::ingest::observability::spans,
        crate::ingest::observability::logs,
        crate::ingest::observability::infrastructure,
        crate::ingest::otlp::http::traces,
        crate::ingest::otlp::http::logs,
        crate::ingest::otlp::http::metrics,
        crate::ingest::analytics::batch,
        crate::ingest::analytics::replay,
        crate::ingest::analytics::posthog,
        crate::ingest::posthog::recordings,
        crate::ingest::posthog::remote_config,
        crate::ingest::posthog::decide,
        crate::identity::account::signup,
        crate::identity::account::login,
        crate::identity::account::refresh,
        crate::identity::account::logout,
        crate::identity::account::accept_invite,
        crate::identity::projects::list,
        crate::identity::projects::create,
        crate::identity::members::list,
        crate::identity::members::invite,
        crate::identity::members::remove,
        crate::identity::api_keys::list,
        crate::identity::api_keys::create,
        crate::identity::api_keys::delete,
        crate::identity::usage::get,
        crate::query::traces::list,
        crate::query::traces::get_trace,
        crate::query::logs::search,
        crate::query::apm::endpoints,
        crate::query::service_map::get,
        crate::query::errors::list,
        crate::query::errors::get,
        crate::query::hosts::list,
        crate::query::hosts::metrics,
        crate::query::replays::list,
        crate::query::replays::events,
        crate::query::activity::timeseries,
        crate::query::activity::active_users,
        crate::query::funnel::funnel,
        crate::query::retention::retention,
        crate::query::cohorts::list,
        crate::query::cohorts::create,
        crate::query::cohorts::get,
        crate::query::cohorts::users,
        crate::alerts::api::list,
        crate::alerts::api::create,
        crate::alerts::api::get,
        crate::alerts::api::delete,
        crate::webhooks::api::list,
        crate::webhooks::api::create,
        crate::webhooks::api::delete,
        crate::webhooks::api::deliveries,
        crate::webhooks::api::test,
        crate::webhooks::api::rotate_secret,
        crate::billing::api::status,
        crate::billing::api::subscribe,
        crate::billing::api::cancel,
        crate::billing::api::history,
        crate::billing::api::payment_method,
        crate::billing::api::delete_payment_method,
        crate::billing::api::provider_webhook,
        openapi_json,
    ),
    components(schemas(ErrorBody, sextant_model::time::TimeInput, sextant_model::attributes::Attributes)),
    modifiers(&SecuritySchemes, &PosthogAliases),
    tags(
        (name = "observability ingest", description = "Spans, logs and host metrics, authenticated by an API key (`sxk_…`)."),
        (name = "analytics ingest", description = "Product events and session replays, authenticated by a project token (`sxp_…`)."),
        (name = "observability", description = "Reads of the current project's telemetry (JWT)."),
        (name = "analytics", description = "Reads of the current project's product analytics (JWT)."),
        (name = "accounts", description = "Sign-up, sessions, organizations, projects, members and API keys."),
        (name = "usage", description = "Metered usage against the plan's quotas."),
        (name = "billing", description = "The subscription, its payments and card; changes are the owner's (JWT)."),
        (name = "webhooks", description = "Signed deliveries of events to the project's endpoints (JWT)."),
        (name = "alerts", description = "Alert rules of the current project, their state and transitions (JWT)."),
        (name = "meta", description = "This document.")
    )
)]
pub struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            JWT,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "The access token of `POST /auth/login`, `/auth/signup`, `/auth/refresh` or \
                         `/auth/invite/accept` (15 minutes). The project is `X-Project-Id` or \
                         `project_id`, else the organization's default project.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            API_KEY,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "x-api-key",
                "An API key (`sxk_…`) of the project (`POST /api/v1/api-keys`); also accepted as \
                 `Authorization: Bearer sxk_…` or the `api_key` query parameter.",
            ))),
        );
        components.add_security_scheme(
            API_KEY_BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("sxk_…")
                    .description(Some(
                        "An API key (`sxk_…`) as `Authorization: Bearer sxk_…` (OpenTelemetry exporters).",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            PROJECT_TOKEN,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "x-analytics-token",
                "The project's ingest token (`sxp_…`); also accepted as the body's `token` or the \
                 `api_key`/`token` query parameter (PostHog SDKs).",
            ))),
        );
    }
}

/// PostHog SDKs post to any of these; each is the same operation as `/batch/`.
pub const POSTHOG_ALIASES: &[&str] = &["/batch", "/e", "/e/", "/capture", "/capture/", "/i/v0/e", "/i/v0/e/"];

struct PosthogAliases;

/// The other paths of posthog-js's recordings (`/s/`) and configuration (`/flags/`).
const POSTHOG_JS_ALIASES: &[(&str, &[&str])] = &[("/s/", &["/s"]), ("/flags/", &["/flags", "/decide", "/decide/"])];

impl Modify for PosthogAliases {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for (path, aliases) in [("/batch/", POSTHOG_ALIASES)].into_iter().chain(POSTHOG_JS_ALIASES.iter().copied()) {
            let Some(item) = doc.paths.paths.get(path).cloned() else { continue };
            for alias in aliases {
                let mut item = item.clone();
                for op in [&mut item.get, &mut item.post].into_iter().flatten() {
                    let suffix = alias.trim_matches('/').replace('/', "_");
                    op.operation_id = op.operation_id.as_ref().map(|id| format!("{id}_{suffix}"));
                }
                doc.paths.paths.insert((*alias).to_owned(), item);
            }
        }
    }
}

/// What each error status means, with the codes it carries.
fn error_status(status: u16) -> (&'static str, &'static [&'static str]) {
    match status {
        400 => (
            "The request is malformed or invalid.",
            &[
                "invalid_json",
                "invalid_body",
                "validation_failed",
                "batch_too_large",
                "invalid_parameter",
                "invalid_time_range",
                "invalid_cursor",
                "invalid_limit",
                "query_too_long",
                "invalid_query",
                "invalid_plan",
                "plan_not_purchasable",
                "card_declined",
                "invalid_signature",
            ],
        ),
        401 => ("A credential is missing, invalid or expired.", &["unauthorized"]),
        402 => ("The plan's monthly quota is used up.", &["quota_exceeded"]),
        403 => (
            "Authenticated but not allowed.",
            &["forbidden", "owner_only", "plan_feature_unavailable", "org_suspended"],
        ),
        404 => ("Not found, or not visible to this credential.", &["not_found"]),
        408 => ("The request body was not received in time.", &["request_timeout"]),
        409 => (
            "Conflicts with the current state.",
            &[
                "email_taken",
                "name_taken",
                "limit_reached",
                "managed_by_resource",
                "subscription_active",
                "billing_event_unmatched",
            ],
        ),
        413 => ("The body or its number of objects is over its limit.", &["payload_too_large", "too_many_events"]),
        415 => ("The content type or encoding is not accepted.", &["unsupported_media_type"]),
        422 => ("The query would read more, or need more memory, than one query may.", &["query_too_large"]),
        429 => ("Rate limited; retry after `Retry-After` seconds.", &["rate_limited"]),
        500 => ("Internal error (no detail is sent; the request id is in `X-Request-Id`).", &["internal"]),
        503 => (
            "Temporarily unavailable; retry after `Retry-After` seconds.",
            &["unavailable", "overloaded", "shards_unavailable", "billing_not_configured"],
        ),
        504 => ("The query did not finish within the request timeout.", &["query_timeout"]),
        _ => unreachable!("no error status {status}"),
    }
}

/// The body of an error: the contract's `ErrorBody`, or OTLP's `google.rpc.Status` on the OTLP
/// endpoints (in the request's encoding).
#[derive(Clone, Copy)]
enum Shape {
    Contract,
    Otlp,
}

fn error_responses(shape: Shape, statuses: &[u16]) -> BTreeMap<String, RefOr<ResponseObject>> {
    statuses
        .iter()
        .map(|&status| {
            let (description, codes) = error_status(status);
            let listed = codes.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ");
            let mut response = match shape {
                Shape::Contract => json!({
                    "description": format!("{description} Codes: {listed}."),
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/ErrorBody"},
                        "example": {"error": {"code": codes[0], "message": description}}
                    }}
                }),
                Shape::Otlp => json!({
                    "description": format!("{description} The body is a `google.rpc.Status` in the request's encoding."),
                    "content": {
                        "application/json": {"schema": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "integer", "description": "The gRPC status code."},
                                "message": {"type": "string"}
                            }
                        }},
                        "application/x-protobuf": {"schema": {"type": "string", "contentMediaType": "application/x-protobuf"}}
                    }
                }),
            };
            if matches!(status, 429 | 503) {
                response["headers"] = json!({"Retry-After": {
                    "description": "Seconds after which the request may be retried.",
                    "schema": {"type": "integer", "minimum": 0}
                }});
            }
            let response: ResponseObject = serde_json::from_value(response).expect("a valid response literal");
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}

macro_rules! error_set {
    ($(#[$doc:meta])* $name:ident($shape:ident): $($status:literal),+) => {
        $(#[$doc])*
        pub struct $name;
        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<ResponseObject>> {
                error_responses(Shape::$shape, &[$($status),+])
            }
        }
    };
}

error_set!(
    /// Errors of an ingest request (API key or project token).
    IngestErrors(Contract): 400, 401, 402, 408, 413, 415, 429, 500, 503
);
error_set!(
    /// Errors of an OTLP/HTTP export.
    OtlpErrors(Otlp): 400, 401, 402, 408, 413, 415, 429, 500, 503
);
error_set!(
    /// Errors of a read of the current project (JWT).
    ReadErrors(Contract): 400, 401, 403, 404, 422, 429, 500, 503, 504
);
error_set!(
    /// Errors of a JWT request about the org (projects, members, keys, usage).
    AccountErrors(Contract): 400, 401, 403, 404, 408, 413, 415, 429, 500, 503
);
error_set!(
    /// Errors of a sign-in endpoint (`/auth/*`).
    AuthErrors(Contract): 400, 401, 408, 413, 415, 429, 500, 503
);

/// The document as served, built once.
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| ApiDoc::openapi().to_json().expect("the OpenAPI document serializes"))
}

/// The document as a JSON value (tests, tools).
pub fn document_value() -> Value {
    serde_json::from_str(document()).expect("the document is JSON")
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of the public port.", content_type = "application/json", body = Object))
)]
pub async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document()).into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use tower::ServiceExt;

    use super::*;

    /// Routes of the public port that are not API operations, so not in the document.
    const NOT_API: &[&str] = &[
        "/healthz",
        "/readyz",
        // The sandbox payment provider's pages (HTML for a browser, dev and tests only). The
        // dashboard's pages and files are `crate::dashboard::is_dashboard_route`.
        "/billing/sandbox/checkout/{}",
        "/billing/sandbox/checkout/{}/pay",
        "/billing/sandbox/checkout/{}/decline",
    ];

    /// `{name}` → `{}`: the router and the document may name a path's parameters differently.
    fn shape(path: &str) -> String {
        let mut out = String::new();
        let mut in_param = false;
        for c in path.chars() {
            match c {
                '{' => {
                    in_param = true;
                    out.push_str("{}");
                }
                '}' => in_param = false,
                _ if !in_param => out.push(c),
                _ => {}
            }
        }
        out
    }

    fn not_api(path: &str) -> bool {
        NOT_API.contains(&shape(path).as_str()) || crate::dashboard::is_dashboard_route(path)
    }

    /// The paths of a router, from its `Debug` output (axum lists each route's path there as
    /// `RouteId(n): "/path"`, and nowhere public). Refuses to answer when that format changed.
    fn router_paths(router: &axum::Router) -> BTreeSet<String> {
        let text = format!("{router:?}");
        let mut paths = BTreeSet::new();
        for (at, _) in text.match_indices("RouteId(") {
            let rest = &text[at + "RouteId(".len()..];
            let Some(close) = rest.find(')') else { continue };
            if let Some(path) = rest[close..].strip_prefix("): \"") {
                let path = &path[..path.find('"').unwrap_or(path.len())];
                if !path.contains("__private__axum") {
                    paths.insert(path.to_owned());
                }
            }
        }
        assert!(
            paths.contains("/healthz") && paths.contains("/openapi.json"),
            "axum's Debug format changed: {paths:?}"
        );
        paths
    }

    /// The methods a path answers (`HEAD` aside), from axum's `Allow` on a method it does not
    /// route.
    async fn methods(router: &axum::Router, path: &str) -> BTreeSet<String> {
        let uri = shape(path).replace("{}", "x");
        let probe = Method::from_bytes(b"PROBE").unwrap();
        let req = Request::builder().method(probe).uri(&uri).body(Body::empty()).unwrap();
        let resp = router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{path}");
        let allow = resp.headers().get(axum::http::header::ALLOW).and_then(|v| v.to_str().ok()).unwrap_or_default();
        allow.split(',').map(|m| m.trim().to_lowercase()).filter(|m| !m.is_empty() && m != "head").collect()
    }

    async fn served_router() -> (crate::RunningRouter, axum::Router) {
        let config = crate::RouterConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            internal_listen: "127.0.0.1:0".parse().unwrap(),
            otlp_grpc_listen: None,
            nodes: vec![],
            cluster_secret: "openapi-test-cluster-secret-0123456789".into(),
            jwt_secret: vec![7; 32],
            dashboard_origins: vec![],
            secure_cookies: false,
            rate_limits: Default::default(),
            trusted_proxy_hops: 0,
            admin_token: None,
            server: Default::default(),
            clock: sextant_model::Clock::system(),
            billing: Default::default(),
            alert_interval: Duration::from_secs(3600),
            tls: None,
            internal_tls: None,
            in_process_node: None,
            webhook_targets: Default::default(),
        };
        let running = crate::start(config, Default::default()).await.unwrap();
        let router = crate::http::router(running.state.clone());
        (running, router)
    }

    #[tokio::test]
    async fn every_route_of_the_public_port_is_in_the_document_and_nothing_else_is() {
        let doc = document_value();
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| k.as_str() != "parameters")
                    .map(move |m| (m.clone(), shape(path)))
            })
            .collect();
        let (running, router) = served_router().await;
        let mut served = BTreeSet::new();
        for path in router_paths(&router) {
            if not_api(&path) {
                continue;
            }
            for method in methods(&router, &path).await {
                served.insert((method, shape(&path)));
            }
        }
        running.abort();
        let undocumented: Vec<_> = served.difference(&documented).collect();
        assert!(
            undocumented.is_empty(),
            "routes without an entry in /openapi.json (annotate the handler with #[utoipa::path] and list it \
             in router/src/http/openapi.rs, see docs/API.md \"OpenAPI document\"): {undocumented:?}"
        );
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(unserved.is_empty(), "documented operations the router does not serve: {unserved:?}");
    }

    #[test]
    fn the_document_is_openapi_3_1_with_its_security_schemes_and_error_shape() {
        let doc = document_value();
        assert_eq!(doc["openapi"], "3.1.0");
        for scheme in [JWT, API_KEY, API_KEY_BEARER, PROJECT_TOKEN] {
            assert!(doc["components"]["securitySchemes"][scheme].is_object(), "{scheme}");
        }
        assert_eq!(doc["components"]["securitySchemes"][API_KEY]["name"], "x-api-key");
        let error = &doc["components"]["schemas"]["ErrorBody"];
        assert!(error["properties"]["error"].is_object(), "{error}");
        let spans = &doc["paths"]["/api/v1/ingest/spans"]["post"];
        assert_eq!(
            spans["responses"]["429"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody"
        );
        assert!(spans["responses"]["429"]["headers"]["Retry-After"].is_object());
        assert!(spans["requestBody"]["content"]["application/json"]["example"].is_object());
    }
}
