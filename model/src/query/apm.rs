//! APM endpoints and the service map (docs/API.md, "APM endpoints", "Service map").

use std::collections::BTreeMap;

use super::Merge;
use crate::sketch::{LatencyBuckets, LatencySketch};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApmPlan {
    /// Empty: every service.
    pub services: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceMapPlan;

/// Statistics of one endpoint, service or edge; latencies in milliseconds.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub count: u64,
    pub errors: u64,
    /// Sum of the durations (the service map does not report means).
    pub sum_ms: f64,
    pub sketch: LatencySketch,
}

impl Merge for Stats {
    fn merge(&mut self, other: Self) {
        self.count += other.count;
        self.errors += other.errors;
        self.sum_ms += other.sum_ms;
        self.sketch.absorb(other.sketch);
    }
}

impl Stats {
    pub fn error_rate(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.errors as f64 / self.count as f64
        }
    }
}

/// Spans added up for one endpoint (or service, or edge): by a scan, or read back from rollups
/// of the same spans. Adding up rollups is exact (integer sums, bucket counts), so rollups
/// answer what the scan would.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpanTotals {
    pub count: u64,
    pub errors: u64,
    /// Sum of the durations, nanoseconds.
    pub duration_sum_ns: i128,
    /// Durations in milliseconds; made into the reply's sketch once, at the end.
    pub latency: LatencyBuckets,
}

impl SpanTotals {
    #[inline]
    pub fn add(&mut self, duration_ns: i64, error: bool) {
        self.count += 1;
        self.errors += u64::from(error);
        self.duration_sum_ns += i128::from(duration_ns);
        self.latency.add(duration_ns as f64 / 1e6);
    }

    /// Adds `other`'s spans: the totals of both's spans.
    pub fn absorb(&mut self, other: &SpanTotals) {
        self.count += other.count;
        self.errors += other.errors;
        self.duration_sum_ns += other.duration_sum_ns;
        self.latency.absorb(&other.latency);
    }

    /// The statistics to answer, the buckets made into a sketch.
    pub fn stats(&self) -> Stats {
        Stats {
            count: self.count,
            errors: self.errors,
            sum_ms: self.duration_sum_ns as f64 / 1e6,
            sketch: self.latency.to_sketch(),
        }
    }
}

fn merge_maps<K: Ord>(into: &mut BTreeMap<K, Stats>, other: BTreeMap<K, Stats>) {
    for (k, s) in other {
        into.entry(k).or_default().merge(s);
    }
}

/// APM: per (service, operation), in that order.
#[derive(Debug, Default)]
pub struct Endpoints(pub BTreeMap<(String, String), Stats>);

impl Merge for Endpoints {
    fn merge(&mut self, other: Self) {
        merge_maps(&mut self.0, other.0);
    }
}

/// The service map: per service, and per (source, target) edge (a trace lives on one shard,
/// so every edge is found whole on one).
#[derive(Debug, Default)]
pub struct ServiceMap {
    pub nodes: BTreeMap<String, Stats>,
    pub edges: BTreeMap<(String, String), Stats>,
}

impl Merge for ServiceMap {
    fn merge(&mut self, other: Self) {
        merge_maps(&mut self.nodes, other.nodes);
        merge_maps(&mut self.edges, other.edges);
    }
}
