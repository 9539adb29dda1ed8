//! A rule's metric over its window, read with the same plans, scatter and merges as the read
//! API (`crate::query`): APM endpoint statistics for spans, log search for log counts, the
//! latest host samples, analytics event buckets.

use sextant_model::admin::AlertMetric;
use sextant_model::alert::MAX_LOG_COUNT_PER_SHARD;
use sextant_model::ingest::parse_level;
use sextant_model::meta::AlertRule;
use sextant_model::query::{
    ApmPlan, Endpoints, EventBuckets, EventBucketsPlan, HostsPlan, LatestHosts, LogList, LogSearchPlan, Merge, Stats,
};
use sextant_model::row::HostMetric;

use crate::http::error::ApiError;
use crate::query::params::ms;
use crate::query::scatter::scatter;
use crate::AppState;

const MINUTE_NS: i64 = 60 * 1_000_000_000;

/// The rule's value over the `window_minutes` ending at `now_ns`; `None` when the metric has
/// no value there (a rate or percentile without spans, no host samples). A shard that does not
/// answer fails the measurement: a partial value could resolve or fire a rule wrongly.
pub async fn measure(
    app: &AppState,
    rule: &AlertRule,
    metric: AlertMetric,
    now_ns: i64,
) -> Result<Option<f64>, ApiError> {
    let window_ns = i64::from(rule.window_minutes).saturating_mul(MINUTE_NS);
    let range = (now_ns.saturating_sub(window_ns), now_ns);
    let f = &rule.filter;
    let one = |v: &Option<String>| v.iter().cloned().collect::<Vec<String>>();
    let project = &rule.project_id;
    Ok(match metric {
        AlertMetric::ErrorRate
        | AlertMetric::ErrorCount
        | AlertMetric::SpanCount
        | AlertMetric::RequestRate
        | AlertMetric::P50LatencyMs
        | AlertMetric::P95LatencyMs
        | AlertMetric::P99LatencyMs => {
            let plan = ApmPlan { services: one(&f.service) };
            let mut gathered = scatter(app, project, range, false, plan).await?;
            let endpoints = gathered.fold::<Endpoints>();
            let mut total = Stats::default();
            for ((_, operation), s) in endpoints.0 {
                if f.operation.as_ref().is_none_or(|o| *o == operation) {
                    total.merge(s);
                }
            }
            span_value(metric, total, window_ns)
        }
        AlertMetric::LogCount => {
            let mut levels = Vec::new();
            for l in f.level.as_deref().unwrap_or_default().split(',').map(str::trim).filter(|l| !l.is_empty()) {
                levels.push(parse_level(l).ok_or_else(|| ApiError::Internal(format!("rule level {l}")))?);
            }
            let plan = LogSearchPlan {
                services: one(&f.service),
                levels,
                query: f.query.clone().unwrap_or_default(),
                limit: MAX_LOG_COUNT_PER_SHARD,
                before: None,
            };
            let mut gathered = scatter(app, project, range, false, plan).await?;
            Some(gathered.fold::<LogList>().0.len() as f64)
        }
        AlertMetric::CpuPercent | AlertMetric::MemoryUsedBytes | AlertMetric::DiskUsedPercent => {
            let mut gathered = scatter(app, project, range, false, HostsPlan).await?;
            let hosts = gathered.fold::<LatestHosts>();
            let matching = hosts.0.into_values().filter(|h| f.hostname.as_ref().is_none_or(|n| *n == h.hostname));
            host_value(metric, matching)
        }
        AlertMetric::EventCount => {
            let plan = EventBucketsPlan {
                events: one(&f.event),
                bucket_starts: vec![range.0],
                cohort: None,
                counts_only: true,
            };
            let mut gathered = scatter(app, project, range, false, plan).await?;
            Some(gathered.fold::<EventBuckets>().fit(1)[0].count as f64)
        }
    })
}

/// A span metric from the merged statistics of the matching endpoints.
pub fn span_value(metric: AlertMetric, s: Stats, window_ns: i64) -> Option<f64> {
    match metric {
        AlertMetric::ErrorRate => (s.count > 0).then(|| s.error_rate()),
        AlertMetric::ErrorCount => Some(s.errors as f64),
        AlertMetric::SpanCount => Some(s.count as f64),
        AlertMetric::RequestRate => Some(s.count as f64 / (window_ns as f64 / 1e9)),
        AlertMetric::P50LatencyMs => s.sketch.quantile(0.5).map(ms),
        AlertMetric::P95LatencyMs => s.sketch.quantile(0.95).map(ms),
        AlertMetric::P99LatencyMs => s.sketch.quantile(0.99).map(ms),
        _ => None,
    }
}

/// The highest latest sample among `hosts`: an alert on "some host over 90 % CPU".
pub fn host_value(metric: AlertMetric, hosts: impl Iterator<Item = HostMetric>) -> Option<f64> {
    hosts
        .filter_map(|h| match metric {
            AlertMetric::CpuPercent => h.cpu_percent,
            AlertMetric::MemoryUsedBytes => h.memory_used_bytes.map(|b| b as f64),
            AlertMetric::DiskUsedPercent => h.disk_used_percent,
            _ => None,
        })
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_percentiles_without_spans_have_no_value_but_counts_are_zero() {
        let w = 60 * 1_000_000_000;
        assert_eq!(span_value(AlertMetric::ErrorRate, Stats::default(), w), None);
        assert_eq!(span_value(AlertMetric::P95LatencyMs, Stats::default(), w), None);
        assert_eq!(span_value(AlertMetric::ErrorCount, Stats::default(), w), Some(0.0));
        let s = Stats { count: 120, errors: 30, ..Stats::default() };
        assert_eq!(span_value(AlertMetric::ErrorRate, s.clone(), w), Some(0.25));
        assert_eq!(span_value(AlertMetric::RequestRate, s, w), Some(2.0));
    }

    #[test]
    fn a_host_metric_is_the_highest_latest_sample() {
        let host = |name: &str, cpu: Option<f64>| HostMetric {
            hostname: name.into(),
            cpu_percent: cpu,
            ..HostMetric::default()
        };
        let hosts = vec![host("a", Some(20.0)), host("b", Some(95.5)), host("c", None)];
        assert_eq!(host_value(AlertMetric::CpuPercent, hosts.clone().into_iter()), Some(95.5));
        assert_eq!(host_value(AlertMetric::DiskUsedPercent, hosts.into_iter()), None);
    }
}
