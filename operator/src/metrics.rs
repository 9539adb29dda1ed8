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

use crate::v1alpha1::{ClusterPhase, ScalingStep, SextantClusterStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabel {
    controller: &'static str,
    reason: &'static str,
}

/// One series per cluster and value of a state (`phase`, `step`, node count `kind`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabel {
    namespace: String,
    cluster: String,
    state: &'static str,
}

const PHASES: [ClusterPhase; 6] = [
    ClusterPhase::Pending,
    ClusterPhase::Running,
    ClusterPhase::Scaling,
    ClusterPhase::Blocked,
    ClusterPhase::Stopped,
    ClusterPhase::Paused,
];
const STEPS: [Option<ScalingStep>; 6] = [
    None,
    Some(ScalingStep::GrowStatefulSet),
    Some(ScalingStep::PlaceReplicas),
    Some(ScalingStep::Drain),
    Some(ScalingStep::Shrink),
    Some(ScalingStep::DeleteVolume),
];

type HistogramFamily = Family<ControllerLabel, Histogram, fn() -> Histogram>;

pub struct Metrics {
    reconciles: Family<ControllerLabel, Counter>,
    failures: Family<ControllerLabel, Counter>,
    duration: HistogramFamily,
    errors: Family<ErrorLabel, Counter>,
    phase: Family<ClusterLabel, Gauge>,
    step: Family<ClusterLabel, Gauge>,
    nodes: Family<ClusterLabel, Gauge>,
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
        let errors = Family::<ErrorLabel, Counter>::default();
        let phase = Family::<ClusterLabel, Gauge>::default();
        let step = Family::<ClusterLabel, Gauge>::default();
        let nodes = Family::<ClusterLabel, Gauge>::default();
        let leader = Gauge::default();
        let mut registry = Registry::with_prefix("sextant_operator");
        registry.register("reconciliations", "Reconciles run, by controller", reconciles.clone());
        registry.register("reconcile_failures", "Reconciles that failed (waiting excluded)", failures.clone());
        registry.register("reconcile_duration_seconds", "Reconcile duration", duration.clone());
        registry.register("reconcile_errors", "Reconciles that failed, by controller and reason", errors.clone());
        registry.register(
            "cluster_phase",
            "1 for the phase a SextantCluster is in (state), 0 for the others",
            phase.clone(),
        );
        registry.register(
            "cluster_scaling_step",
            "1 for the scaling step a SextantCluster is at (state; None when not scaling)",
            step.clone(),
        );
        registry.register(
            "cluster_nodes",
            "Storage nodes of a SextantCluster: state desired (spec), current (StatefulSet) or ready",
            nodes.clone(),
        );
        registry.register("leader", "1 while this replica holds the leader Lease", leader.clone());
        Self {
            reconciles,
            failures,
            duration,
            errors,
            phase,
            step,
            nodes,
            leader,
            registry,
            healthy: AtomicBool::new(false),
        }
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

    /// A failed reconcile's cause; `reason` is one of a small fixed set (`Error::reason`).
    pub fn observe_error(&self, controller: &'static str, reason: &'static str) {
        self.errors.get_or_create(&ErrorLabel { controller, reason }).inc();
    }

    /// The cluster's phase, scaling step and node counts as its status now says.
    pub fn observe_cluster(&self, namespace: &str, cluster: &str, desired_nodes: i32, status: &SextantClusterStatus) {
        let label = |state| ClusterLabel { namespace: namespace.to_owned(), cluster: cluster.to_owned(), state };
        for p in PHASES {
            self.phase.get_or_create(&label(phase_name(p))).set(i64::from(status.phase == Some(p)));
        }
        let step = status.scaling.as_ref().map(|s| s.step);
        for s in STEPS {
            self.step.get_or_create(&label(step_name(s))).set(i64::from(step == s));
        }
        self.nodes.get_or_create(&label("desired")).set(i64::from(desired_nodes));
        self.nodes.get_or_create(&label("current")).set(i64::from(status.storage_nodes));
        self.nodes.get_or_create(&label("ready")).set(i64::from(status.ready_nodes));
    }

    /// Drops a deleted cluster's series.
    pub fn forget_cluster(&self, namespace: &str, cluster: &str) {
        let label = |state| ClusterLabel { namespace: namespace.to_owned(), cluster: cluster.to_owned(), state };
        for p in PHASES {
            self.phase.remove(&label(phase_name(p)));
        }
        for s in STEPS {
            self.step.remove(&label(step_name(s)));
        }
        for n in ["desired", "current", "ready"] {
            self.nodes.remove(&label(n));
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

fn phase_name(phase: ClusterPhase) -> &'static str {
    match phase {
        ClusterPhase::Pending => "Pending",
        ClusterPhase::Running => "Running",
        ClusterPhase::Scaling => "Scaling",
        ClusterPhase::Blocked => "Blocked",
        ClusterPhase::Stopped => "Stopped",
        ClusterPhase::Paused => "Paused",
    }
}

fn step_name(step: Option<ScalingStep>) -> &'static str {
    match step {
        None => "None",
        Some(ScalingStep::GrowStatefulSet) => "GrowStatefulSet",
        Some(ScalingStep::PlaceReplicas) => "PlaceReplicas",
        Some(ScalingStep::Drain) => "Drain",
        Some(ScalingStep::Shrink) => "Shrink",
        Some(ScalingStep::DeleteVolume) => "DeleteVolume",
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

    #[test]
    fn a_cluster_reports_one_phase_one_step_and_its_node_counts_until_deleted() {
        use crate::v1alpha1::ScalingOperation;
        let m = Metrics::default();
        let status = SextantClusterStatus {
            phase: Some(ClusterPhase::Scaling),
            storage_nodes: 5,
            ready_nodes: 4,
            scaling: Some(ScalingOperation {
                from: 3,
                to: 5,
                step: ScalingStep::GrowStatefulSet,
                node: None,
                started_at: None,
                cancelled: false,
            }),
            ..SextantClusterStatus::default()
        };
        m.observe_cluster("obs", "c1", 5, &status);
        m.observe_error("sextantcluster", "admin_unreachable");
        let text = m.encode();
        let series = |name: &str| text.lines().filter(|l| l.starts_with(name)).map(str::to_owned).collect::<Vec<_>>();
        let phases = series("sextant_operator_cluster_phase{");
        assert_eq!(phases.len(), PHASES.len(), "{text}");
        assert_eq!(phases.iter().filter(|l| l.ends_with(" 1")).count(), 1, "{text}");
        assert!(
            text.contains(r#"sextant_operator_cluster_phase{namespace="obs",cluster="c1",state="Scaling"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"sextant_operator_cluster_scaling_step{namespace="obs",cluster="c1",state="GrowStatefulSet"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"sextant_operator_cluster_scaling_step{namespace="obs",cluster="c1",state="None"} 0"#));
        assert!(text.contains(r#"sextant_operator_cluster_nodes{namespace="obs",cluster="c1",state="ready"} 4"#));
        assert!(text.contains(
            r#"sextant_operator_reconcile_errors_total{controller="sextantcluster",reason="admin_unreachable"} 1"#
        ));

        m.observe_cluster("obs", "c1", 5, &SextantClusterStatus { phase: Some(ClusterPhase::Running), ..status });
        let text = m.encode();
        assert!(text.contains(r#"sextant_operator_cluster_phase{namespace="obs",cluster="c1",state="Scaling"} 0"#));
        assert!(text.contains(r#"sextant_operator_cluster_phase{namespace="obs",cluster="c1",state="Running"} 1"#));

        m.forget_cluster("obs", "c1");
        assert!(!m.encode().contains("cluster=\"c1\""), "a deleted cluster leaves no series");
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
