//! Middleware of the route tables: request ids, access logs and request metrics (`observe`),
//! the deadline of reads, and the per-IP limit of `/auth/*`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::http::error::ApiError;
use crate::http::metrics::RequestLabel;
use crate::identity::rate_limit::Class;
use crate::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Reads end within the configured time (504 `query_timeout`); their shard requests are
/// dropped with them. At most so many run at once, and a bounded number wait for a place
/// (503 `overloaded` past them, `overload`).
pub(crate) async fn read_deadline(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if req.method() != Method::GET {
        return next.run(req).await;
    }
    let _slot = match app.reads.enter(crate::http::overload::READ_QUEUE_WAIT).await {
        Ok(slot) => slot,
        Err(e) => return e.into_response(),
    };
    let limit = app.config.server.read_timeout;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::ReadTimeout { secs: limit.as_secs() }.into_response(),
    }
}

/// `/auth/*` is limited per client IP (docs/API.md, "Rate limits").
pub(crate) async fn limit_by_client_ip(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let ip = client_ip(peer, req.headers(), app.config.trusted_proxy_hops).map(|ip| ip.to_string()).unwrap_or_default();
    let live = app.cluster.meta_cache().map_or(1, |c| c.live_routers(app.clock.now_millis()));
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
pub(crate) async fn observe(State(app): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
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
        resp = ApiError::MethodNotAllowed.into_response();
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
