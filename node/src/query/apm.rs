//! APM endpoints: per (service, operation) counts, error counts, total and a latency sketch.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use arrow_array::Array;
use sextant_model::query::{self, ApmPlan, ShardQuery, Stats};
use sextant_model::row::SpanStatus;
use sextant_model::sketch::LatencyBuckets;
use xxhash_rust::xxh3::xxh3_64;

use super::{each_batch_holding, scan_of, Budget, Compute, Prehashed, QueryError, QueryKind, Scans};
use crate::segment::table::{Cols, Strings};
use crate::segment::{Filter, Table};
use crate::shard::ScanJob;

impl QueryKind for ApmPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let job = shard.scan(scan_of(
            req,
            Table::Spans,
            Filter { services: self.services.clone(), ..Default::default() },
            &["service", "operation", "duration_ns", "status"],
            &["service", "operation"],
        ));
        Ok(Box::new(move |_, budget| Ok(run(job, budget)?.into())))
    }
}

/// Statistics of one endpoint (or service, or edge of the service map) on this shard.
#[derive(Default)]
pub struct Acc {
    pub count: u64,
    pub errors: u64,
    pub sum_ms: f64,
    /// Made into the reply's sketch once, at the end of the scan.
    pub latency: LatencyBuckets,
}

impl Acc {
    #[inline]
    pub fn add(&mut self, ms: f64, error: bool) {
        self.count += 1;
        self.errors += u64::from(error);
        self.sum_ms += ms;
        self.latency.add(ms);
    }

    /// The statistics to answer, the buckets made into a sketch.
    pub fn stats(&self) -> Stats {
        Stats { count: self.count, errors: self.errors, sum_ms: self.sum_ms, sketch: self.latency.to_sketch() }
    }
}

/// Memory of an endpoint's accumulator while grouping: its names and latency buckets.
const ENDPOINT_BYTES: u64 = 4096;

pub fn run(job: ScanJob, budget: &mut Budget) -> Result<query::Endpoints, QueryError> {
    let mut endpoints = Endpoints::default();
    let mut rows = Vec::new();
    each_batch_holding(job, budget, |rb| {
        let c = Cols(rb);
        endpoints.of_rows(c.strings("service"), c.strings("operation"), rb.num_rows(), &mut rows);
        let (duration, status) = (c.i64("duration_ns").values(), c.i32("status").values());
        for ((&e, &ns), &status) in rows.iter().zip(duration.iter()).zip(status.iter()) {
            endpoints.list[e as usize].2.add(ns as f64 / 1e6, status == SpanStatus::Error.code());
        }
        Ok(endpoints.list.len() as u64 * ENDPOINT_BYTES)
    })?;
    Ok(query::Endpoints(
        endpoints.list.into_iter().map(|(service, operation, a)| ((service, operation), a.stats())).collect(),
    ))
}

/// Service and operation dictionaries of a batch larger than this together (a dictionary
/// holds a row group's distinct values) resolve endpoints per row instead of per key pair.
const MAX_KEY_PAIRS: usize = 1 << 16;

/// Accumulators per (service, operation), found through a 64-bit hash of both names (xxh3,
/// one shot each) and then compared by name: exact, and far cheaper than hashing two strings
/// with SipHash into nested maps.
#[derive(Default)]
struct Endpoints {
    slots: HashMap<u64, Vec<u32>, BuildHasherDefault<Prehashed>>,
    list: Vec<(String, String, Acc)>,
    /// Per batch of dictionaries: the endpoint of each (service key, operation key) pair,
    /// `u32::MAX` until a row has it.
    pairs: Vec<u32>,
}

impl Endpoints {
    /// The endpoint of each of the `n` rows, into `out`. With both columns as dictionaries
    /// (segments), each pair of keys of the batch is looked up once, not each row.
    fn of_rows(&mut self, service: Strings<'_>, operation: Strings<'_>, n: usize, out: &mut Vec<u32>) {
        out.clear();
        if let (
            Strings::Dictionary { keys: service_keys, values: services },
            Strings::Dictionary { keys: operation_keys, values: operations },
        ) = (service, operation)
        {
            let width = operations.len();
            if services.len() * width <= MAX_KEY_PAIRS {
                self.pairs.clear();
                self.pairs.resize(services.len() * width, u32::MAX);
                for (&s, &o) in service_keys.iter().zip(operation_keys) {
                    let pair = s as usize * width + o as usize;
                    let mut e = self.pairs[pair];
                    if e == u32::MAX {
                        e = self.get(services.value(s as usize), operations.value(o as usize));
                        self.pairs[pair] = e;
                    }
                    out.push(e);
                }
                return;
            }
        }
        out.extend((0..n).map(|i| self.get(service.value(i), operation.value(i))));
    }

    fn get(&mut self, service: &str, operation: &str) -> u32 {
        let Self { slots, list, .. } = self;
        let h = xxh3_64(service.as_bytes()) ^ xxh3_64(operation.as_bytes()).rotate_left(17);
        let ids = slots.entry(h).or_default();
        match ids.iter().copied().find(|&i| list[i as usize].0 == service && list[i as usize].1 == operation) {
            Some(i) => i,
            None => {
                list.push((service.to_owned(), operation.to_owned(), Acc::default()));
                ids.push(list.len() as u32 - 1);
                list.len() as u32 - 1
            }
        }
    }
}
