//! Hosts and host metrics (docs/API.md, "Hosts and host metrics").

use std::collections::BTreeMap;

use super::Merge;
use crate::row::HostMetric;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostsPlan;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostSeriesPlan {
    pub hostname: String,
    pub step_nanos: i64,
}

/// The latest sample of every host, by hostname (on equal times, the one merged first).
#[derive(Debug, Default)]
pub struct LatestHosts(pub BTreeMap<String, HostMetric>);

impl LatestHosts {
    /// Keeps `m` if it is the host's latest sample so far.
    pub fn offer(&mut self, m: HostMetric) {
        if self.0.get(&m.hostname).is_none_or(|l| m.unix_nanos > l.unix_nanos) {
            self.0.insert(m.hostname.clone(), m);
        }
    }
}

impl Merge for LatestHosts {
    fn merge(&mut self, other: Self) {
        for m in other.0.into_values() {
            self.offer(m);
        }
    }
}

/// A sum and a count, which merge exactly into a mean.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mean {
    pub sum: f64,
    pub count: u64,
}

impl Mean {
    pub fn get(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// Adds `other`'s samples.
    pub fn add(into: &mut Option<Mean>, other: Option<Mean>) {
        if let Some(o) = other {
            let m = into.get_or_insert_with(Mean::default);
            m.sum += o.sum;
            m.count += o.count;
        }
    }

    /// Adds one sample, if there is one.
    pub fn add_sample(into: &mut Option<Mean>, v: Option<f64>) {
        Mean::add(into, v.map(|sum| Mean { sum, count: 1 }));
    }
}

/// The metrics of a host sample, in the order [`HostBucket::means`] and
/// [`HostMetric::values`](crate::row::HostMetric::values) list them.
pub const HOST_METRICS: [&str; 6] = [
    "cpu_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "disk_used_percent",
    "network_rx_bytes_per_sec",
    "network_tx_bytes_per_sec",
];

/// One step of one host's metrics: per metric, the samples' sum and count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostBucket {
    pub start_unix_nanos: i64,
    pub cpu_percent: Option<Mean>,
    pub memory_used_bytes: Option<Mean>,
    pub memory_total_bytes: Option<Mean>,
    pub disk_used_percent: Option<Mean>,
    pub network_rx_bytes_per_sec: Option<Mean>,
    pub network_tx_bytes_per_sec: Option<Mean>,
}

impl HostBucket {
    /// The means in [`HOST_METRICS`] order.
    pub fn means(&self) -> [Option<Mean>; 6] {
        [
            self.cpu_percent,
            self.memory_used_bytes,
            self.memory_total_bytes,
            self.disk_used_percent,
            self.network_rx_bytes_per_sec,
            self.network_tx_bytes_per_sec,
        ]
    }

    /// The means in [`HOST_METRICS`] order, to add to.
    pub fn means_mut(&mut self) -> [&mut Option<Mean>; 6] {
        [
            &mut self.cpu_percent,
            &mut self.memory_used_bytes,
            &mut self.memory_total_bytes,
            &mut self.disk_used_percent,
            &mut self.network_rx_bytes_per_sec,
            &mut self.network_tx_bytes_per_sec,
        ]
    }

    /// Adds a sample's values (in [`HOST_METRICS`] order).
    pub fn add_sample(&mut self, values: [Option<f64>; 6]) {
        for (m, v) in self.means_mut().into_iter().zip(values) {
            Mean::add_sample(m, v);
        }
    }
}

impl Merge for HostBucket {
    fn merge(&mut self, o: Self) {
        for (m, o) in self.means_mut().into_iter().zip(o.means()) {
            Mean::add(m, o);
        }
    }
}

/// One host's buckets by start.
#[derive(Debug, Default)]
pub struct HostSeries(pub BTreeMap<i64, HostBucket>);

impl Merge for HostSeries {
    fn merge(&mut self, other: Self) {
        for (start, b) in other.0 {
            self.0
                .entry(start)
                .or_insert_with(|| HostBucket { start_unix_nanos: start, ..Default::default() })
                .merge(b);
        }
    }
}
