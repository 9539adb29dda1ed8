//! Hosts: the latest sample of each host, and one host's metrics averaged per time step.

use std::collections::HashMap;

use sextant_model::query::{HostBucket, HostSeries, HostSeriesPlan, HostsPlan, LatestHosts, Mean, ShardQuery};

use super::{each_batch, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::from_record_batch;
use crate::segment::{Filter, Row, Table};
use crate::shard::ScanJob;

impl QueryKind for HostsPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let job = shard.scan(scan_of(req, Table::HostMetrics, Filter::default(), &[], &[]));
        Ok(Box::new(move |_, budget| Ok(latest(job, budget)?.into())))
    }
}

impl QueryKind for HostSeriesPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        if self.step_nanos <= 0 {
            return Err(QueryError::BadPlan("step must be positive".into()));
        }
        let filter = Filter { hostname: Some(self.hostname.clone()), ..Default::default() };
        let (plan, job) = (self.clone(), shard.scan(scan_of(req, Table::HostMetrics, filter, &[], &[])));
        Ok(Box::new(move |req, budget| Ok(series(req, &plan, job, budget)?.into())))
    }
}

pub fn latest(job: ScanJob, budget: &mut Budget) -> Result<LatestHosts, QueryError> {
    let mut hosts = LatestHosts::default();
    each_batch(job, budget, |rb| {
        for (_, row, _) in from_record_batch(Table::HostMetrics, rb) {
            if let Row::HostMetric(m) = row {
                if hosts.0.get(&m.hostname).is_none_or(|h| m.unix_nanos > h.unix_nanos) {
                    hosts.offer(m.map_attributes(|a| crate::segment::attribute::decode(&a)));
                }
            }
        }
        Ok(())
    })?;
    Ok(hosts)
}

fn add(mean: &mut Option<Mean>, v: Option<f64>) {
    if let Some(v) = v {
        let m = mean.get_or_insert_with(Mean::default);
        m.sum += v;
        m.count += 1;
    }
}

pub fn series(
    req: &ShardQuery,
    plan: &HostSeriesPlan,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<HostSeries, QueryError> {
    let mut buckets: HashMap<i64, HostBucket> = HashMap::new();
    each_batch(job, budget, |rb| {
        for (_, row, _) in from_record_batch(Table::HostMetrics, rb) {
            if let Row::HostMetric(m) = row {
                // In i128: a plan's range and step are checked by the router, not trusted here.
                let (from, step) = (i128::from(req.from_unix_nanos), i128::from(plan.step_nanos));
                let start = from + (i128::from(m.unix_nanos) - from).div_euclid(step) * step;
                let Ok(start) = i64::try_from(start) else { continue };
                let b = buckets
                    .entry(start)
                    .or_insert_with(|| HostBucket { start_unix_nanos: start, ..Default::default() });
                add(&mut b.cpu_percent, m.cpu_percent);
                add(&mut b.memory_used_bytes, m.memory_used_bytes.map(|v| v as f64));
                add(&mut b.memory_total_bytes, m.memory_total_bytes.map(|v| v as f64));
                add(&mut b.disk_used_percent, m.disk_used_percent);
                add(&mut b.network_rx_bytes_per_sec, m.network_rx_bytes_per_sec);
                add(&mut b.network_tx_bytes_per_sec, m.network_tx_bytes_per_sec);
            }
        }
        Ok(())
    })?;
    Ok(HostSeries(buckets.into_iter().collect()))
}
