//! Hosts: the latest sample of each host, and one host's metrics averaged per time step.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use sextant_model::query::{
    HostBucket, HostSeries, HostSeriesPlan, HostsPlan, LatestHosts, Merge, ShardQuery, HOST_METRICS,
};

use super::{each_batch, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::rollup::{host_columns, minute_of, source_columns, HostRollupColumns, MINUTE_NS};
use crate::segment::table::{from_record_batch, opt_f, opt_u, Cols};
use crate::segment::{Filter, Row, Scan, Table};
use crate::shard::ScanJob;

impl QueryKind for HostsPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        // Each host's latest minute from the rollups first (every minute the range touches):
        // no sample before the earliest of those can be a host's latest.
        let (from, to) = (req.from_unix_nanos, req.to_unix_nanos);
        let minutes = shard.scan(Scan {
            from_ns: minute_of(from),
            to_ns: minute_of(to.saturating_sub(1)).saturating_add(MINUTE_NS),
            ..scan_of(req, Table::HostRollups, Filter::default(), &["hostname", "minute_ns"], &[])
        });
        let newest = Filter { newest_per_host: true, ..Default::default() };
        let samples = shard.scan(scan_of(req, Table::HostMetrics, newest, &[], &[]));
        Ok(Box::new(move |req, budget| {
            let bound = latest_bound(req, minutes, budget)?;
            Ok(latest(samples.starting_at(bound), budget)?.into())
        }))
    }
}

impl QueryKind for HostSeriesPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        if self.step_nanos <= 0 {
            return Err(QueryError::BadPlan("step must be positive".into()));
        }
        let filter = Filter { hostname: Some(self.hostname.clone()), ..Default::default() };
        let (from, to) = (req.from_unix_nanos, req.to_unix_nanos);
        let (sample_columns, _) = source_columns(Table::HostRollups);
        let samples = |from_ns: i64, to_ns: i64| Scan {
            from_ns,
            to_ns,
            ..scan_of(req, Table::HostMetrics, filter.clone(), sample_columns, &[])
        };
        // When every step starts on a minute: whole minutes from the rollups, the partial
        // minute at the end from samples.
        let on_minutes = from.rem_euclid(MINUTE_NS) == 0 && self.step_nanos % MINUTE_NS == 0;
        let last = minute_of(to).max(from);
        let mut jobs = Vec::new();
        if on_minutes && from < last {
            let columns: Vec<String> = std::iter::once("minute_ns".to_owned())
                .chain(HOST_METRICS.into_iter().flat_map(host_columns))
                .collect();
            let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
            jobs.push(shard.scan(Scan {
                from_ns: from,
                to_ns: last,
                ..scan_of(req, Table::HostRollups, filter.clone(), &columns, &[])
            }));
            if last < to {
                jobs.push(shard.scan(samples(last, to)));
            }
        } else {
            jobs.push(shard.scan(samples(from, to)));
        }
        let plan = self.clone();
        Ok(Box::new(move |req, budget| Ok(series(req, &plan, jobs, budget)?.into())))
    }
}

/// A time at or after which every host with samples in the range has one: per host, the
/// start of its latest minute wholly inside the range, or the range's start for a host seen
/// only in minutes crossing its ends; samples read in place of rollups (without hostnames)
/// stand for their hosts with their own times.
fn latest_bound(req: &ShardQuery, minutes: ScanJob, budget: &mut Budget) -> Result<i64, QueryError> {
    let range = req.from_unix_nanos..req.to_unix_nanos;
    let mut hosts: HashMap<String, i64> = HashMap::new();
    let mut unnamed = i64::MAX;
    each_batch(minutes, budget, |rb| {
        let c = Cols(rb);
        if rb.column_by_name("minute_ns").is_none() {
            let times = c.i64("time_ns").values().iter().filter(|t| range.contains(t));
            unnamed = times.fold(unnamed, |a, &t| a.min(t));
            return Ok(());
        }
        for (name, &minute) in c.str("hostname").iter().zip(c.i64("minute_ns").values()) {
            let inside = range.contains(&minute) && minute.checked_add(MINUTE_NS).is_some_and(|end| end <= range.end);
            let seen = if inside { minute } else { range.start };
            match hosts.get_mut(name.unwrap_or_default()) {
                Some(latest) => *latest = (*latest).max(seen),
                None => {
                    hosts.insert(name.unwrap_or_default().to_owned(), seen);
                }
            }
        }
        Ok(())
    })?;
    Ok(hosts.into_values().fold(unnamed, i64::min))
}

pub fn latest(job: ScanJob, budget: &mut Budget) -> Result<LatestHosts, QueryError> {
    let mut hosts = LatestHosts::default();
    each_batch(job, budget, |rb| {
        // Each host's newest row of the batch, if newer than its newest so far: only those
        // rows are made into samples (a batch holds thousands, of a few hosts).
        let c = Cols(rb);
        let (names, times) = (c.str("hostname"), c.i64("time_ns").values());
        let mut newest: FxHashMap<&str, usize> = FxHashMap::default();
        for (i, (name, &t)) in names.iter().zip(times).enumerate() {
            let name = name.unwrap_or_default();
            match newest.get_mut(name) {
                Some(row) if t > times[*row] => *row = i,
                Some(_) => {}
                None if hosts.0.get(name).is_none_or(|h| t > h.unix_nanos) => {
                    newest.insert(name, i);
                }
                None => {}
            }
        }
        let mut rows: Vec<usize> = newest.drain().map(|(_, row)| row).collect();
        rows.sort_unstable();
        for row in rows {
            for (_, sample, _) in from_record_batch(Table::HostMetrics, &rb.slice(row, 1)) {
                if let Row::HostMetric(m) = sample {
                    hosts.offer(m.map_attributes(|a| crate::segment::attribute::decode(&a)));
                }
            }
        }
        Ok(())
    })?;
    Ok(hosts)
}

/// One host's buckets over `jobs`: scans of host rollups and of samples.
pub fn series(
    req: &ShardQuery,
    plan: &HostSeriesPlan,
    jobs: Vec<ScanJob>,
    budget: &mut Budget,
) -> Result<HostSeries, QueryError> {
    let mut buckets: HashMap<i64, HostBucket> = HashMap::new();
    // In i128: a plan's range and step are checked by the router, not trusted here.
    let (from, step) = (i128::from(req.from_unix_nanos), i128::from(plan.step_nanos));
    let start_of = |t: i64| i64::try_from(from + (i128::from(t) - from).div_euclid(step) * step).ok();
    for job in jobs {
        each_batch(job, budget, |rb| {
            let c = Cols(rb);
            if rb.column_by_name("minute_ns").is_some() {
                for minute in HostRollupColumns::of(&c).buckets() {
                    let Some(start) = start_of(minute.start_unix_nanos) else { continue };
                    bucket_at(&mut buckets, start).merge(minute);
                }
            } else {
                let time = c.i64("time_ns");
                let (cpu, used, total) =
                    (c.f64("cpu_percent"), c.u64("memory_used_bytes"), c.u64("memory_total_bytes"));
                let (disk, rx, tx) =
                    (c.f64("disk_used_percent"), c.f64("network_rx_bytes_per_sec"), c.f64("network_tx_bytes_per_sec"));
                let u = |a, i| opt_u(a, i).map(|v| v as f64);
                for (i, &t) in time.values().iter().enumerate() {
                    let Some(start) = start_of(t) else { continue };
                    bucket_at(&mut buckets, start).add_sample([
                        opt_f(cpu, i),
                        u(used, i),
                        u(total, i),
                        opt_f(disk, i),
                        opt_f(rx, i),
                        opt_f(tx, i),
                    ]);
                }
            }
            Ok(())
        })?;
    }
    Ok(HostSeries(buckets.into_iter().collect()))
}

fn bucket_at(buckets: &mut HashMap<i64, HostBucket>, start: i64) -> &mut HostBucket {
    buckets.entry(start).or_insert_with(|| HostBucket { start_unix_nanos: start, ..Default::default() })
}
