//! `/metrics` and `/healthz` of the operator (docs/KUBERNETES.md, "Operator").

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

type HistogramFamily = Family<ControllerLabel, Histogram, fn() -> Histogram>;

pub struct Metrics {
    reconciles: Family<ControllerLabel, Counter>,
    failures: Family<ControllerLabel, Counter>,
    duration: HistogramFamily,
    leader: Gauge,
    registry: Registry,
    /// Set once the Kubernetes client works; `/healthz` answers 503 before.
    pub healthy: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let failures = Family::<ControllerLabel, Counter>::default();
        let duration: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 2.0, 14)));
        let leader = Gauge::default();
        let mut registry = Registry::with_prefix("sextant_operator");
        registry.register("reconciliations", "Reconciles run, by controller", reconciles.clone());
        registry.register("reconcile_failures", "Reconciles that failed (waiting excluded)", failures.clone());
        registry.register("reconcile_duration_seconds", "Reconcile duration", duration.clone());
        registry.register("leader", "1 while this replica holds the leader Lease", leader.clone());
        Self { reconciles, failures, duration, leader, registry, healthy: AtomicBool::new(false) }
    }
}

impl Metrics {
    /// `failed`: `None` for success, `Some(false)` for waiting, `Some(true)` for a failure.
    pub fn observe(&self, controller: &'static str, took: Duration, failed: Option<bool>) {
        let label = ControllerLabel { controller };
        self.reconciles.get_or_create(&label).inc();
        self.duration.get_or_create(&label).observe(took.as_secs_f64());
        if failed == Some(true) {
            self.failures.get_or_create(&label).inc();
        }
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

pub fn router(metrics: Arc<Metrics>) -> axum::Router {
    axum::Router::new()
        .route(
            "/healthz",
            get(|State(m): State<Arc<Metrics>>| async move {
                if m.healthy.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "starting")
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move {
                ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], m.encode())
                    .into_response()
            }),
        )
        .with_state(metrics)
}

pub async fn serve(listen: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    axum::serve(listener, router(metrics)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_apart_from_waiting() {
        let m = Metrics::default();
        m.observe("project", Duration::from_millis(3), None);
        m.observe("project", Duration::from_millis(3), Some(false));
        m.observe("project", Duration::from_millis(3), Some(true));
        m.set_leader(true);
        let text = m.encode();
        assert!(text.contains("sextant_operator_reconciliations_total{controller=\"project\"} 3"), "{text}");
        assert!(text.contains("sextant_operator_reconcile_failures_total{controller=\"project\"} 1"), "{text}");
        assert!(text.contains("sextant_operator_leader 1"), "{text}");
    }

    #[tokio::test]
    async fn healthz_turns_ok_once_started_and_metrics_are_served() {
        use axum::body::Body;
        use axum::http::Request;
        use tower::ServiceExt;

        let m = Arc::new(Metrics::default());
        let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
        let r = router(m.clone()).oneshot(get("/healthz")).await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        m.healthy.store(true, Ordering::Relaxed);
        let r = router(m.clone()).oneshot(get("/healthz")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        m.observe("plan", Duration::from_millis(1), None);
        let r = router(m).oneshot(get("/metrics")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        assert!(
            String::from_utf8_lossy(&body).contains("sextant_operator_reconciliations_total{controller=\"plan\"} 1")
        );
    }
}
