//! Prometheus metrics of a router, served on the internal port (docs/API.md, "Ports and probes").

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::http::error::ApiError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct RejectLabel {
    pub kind: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct QuotaLabel {
    /// `bytes` or `events`.
    pub meter: &'static str,
    /// `refused` (hard quota) or `accepted` (soft quota).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct RequestLabel {
    pub route: String,
    pub status: u16,
}

pub struct RouterMetrics {
    pub accepted_objects: Family<KindLabel, Counter>,
    pub rejected_requests: Family<RejectLabel, Counter>,
    pub requests: Family<RequestLabel, Counter>,
    /// Ingest requests over a monthly quota, refused (hard) or accepted (soft).
    pub over_quota: Family<QuotaLabel, Counter>,
    pub request_seconds: Family<RequestLabel, Histogram>,
    /// Routers sharing the rate limits, as this router last saw them.
    pub live_routers: Gauge,
    /// Connections closed at accept because the connection cap was reached.
    pub refused_connections: Counter,
    /// Alert evaluation rounds this router recorded while holding the evaluator lease.
    pub alert_rounds: Counter,
    /// Ingest requests whose sub-batches are being replicated or aborted, including those
    /// whose client gave up: replication goes on to the end (`ingest::commit`).
    pub commits_in_flight: Gauge,
}

impl Default for RouterMetrics {
    fn default() -> Self {
        Self {
            accepted_objects: Family::default(),
            rejected_requests: Family::default(),
            requests: Family::default(),
            over_quota: Family::default(),
            request_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16))),
            live_routers: Gauge::default(),
            refused_connections: Counter::default(),
            alert_rounds: Counter::default(),
            commits_in_flight: Gauge::default(),
        }
    }
}

impl RouterMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("sextant_router");
        r.register("accepted_objects", "objects acknowledged to clients", self.accepted_objects.clone());
        r.register("rejected_requests", "ingest requests refused, by reason", self.rejected_requests.clone());
        r.register("over_quota_requests", "ingest requests over a monthly quota, by outcome", self.over_quota.clone());
        r.register("http_requests", "HTTP requests by route and status", self.requests.clone());
        r.register("http_request_seconds", "HTTP request latency", self.request_seconds.clone());
        r.register("live_routers", "routers the rate limits are divided between", self.live_routers.clone());
        r.register("refused_connections", "connections closed at the connection cap", self.refused_connections.clone());
        r.register(
            "alert_evaluation_rounds",
            "alert rounds recorded under the evaluator lease",
            self.alert_rounds.clone(),
        );
        r.register(
            "commits_in_flight",
            "ingest requests being replicated or aborted, also those whose client gave up",
            self.commits_in_flight.clone(),
        );
    }

    pub fn accepted(&self, kind: &'static str, n: u64) {
        self.accepted_objects.get_or_create(&KindLabel { kind }).inc_by(n);
    }

    pub fn over_quota(&self, meter: &'static str, refused: bool) {
        let outcome = if refused { "refused" } else { "accepted" };
        self.over_quota.get_or_create(&QuotaLabel { meter, outcome }).inc();
    }

    pub fn rejected(&self, kind: &'static str, e: &ApiError) {
        let reason = format!("{e:?}").split(['(', ' ', '{']).next().unwrap_or("other").to_lowercase();
        self.rejected_requests.get_or_create(&RejectLabel { kind, reason }).inc();
    }
}
