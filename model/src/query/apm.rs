//! APM endpoints and the service map (docs/API.md, "APM endpoints", "Service map").

use std::collections::BTreeMap;

use super::Merge;
use crate::sketch::LatencySketch;

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
    /// Zero for services and edges (the service map does not report means).
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
