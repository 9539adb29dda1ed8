//! APM endpoints: per (service, operation) counts, error counts, total and a latency sketch.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use sextant_model::sketch::LatencySketch;
use sextant_proto::{ApmPartial, EndpointStats, SpanStatus};
use xxhash_rust::xxh3::xxh3_64;

use super::{each_batch, Budget, QueryError};
use crate::segment::table::Cols;
use crate::shard::ScanJob;

#[derive(Default)]
pub struct Acc {
    pub count: u64,
    pub errors: u64,
    pub sum_ms: f64,
    pub sketch: LatencySketch,
}

impl Acc {
    pub fn add(&mut self, ms: f64, error: bool) {
        self.count += 1;
        self.errors += u64::from(error);
        self.sum_ms += ms;
        self.sketch.add(ms);
    }
}

pub fn run(job: ScanJob, budget: &mut Budget) -> Result<ApmPartial, QueryError> {
    let mut acc = Endpoints::default();
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (service, operation, duration, status) =
            (c.str("service"), c.str("operation"), c.i64("duration_ns"), c.i32("status"));
        for i in 0..rb.num_rows() {
            acc.get(service.value(i), operation.value(i))
                .add(duration.value(i) as f64 / 1e6, status.value(i) == SpanStatus::Error as i32);
        }
        Ok(())
    })?;
    let endpoints = acc
        .list
        .into_iter()
        .map(|(service, operation, a)| EndpointStats {
            service,
            operation,
            count: a.count,
            error_count: a.errors,
            sum_ms: a.sum_ms,
            sketch: a.sketch.encode(),
        })
        .collect();
    Ok(ApmPartial { endpoints })
}

/// Accumulators per (service, operation), found through a 64-bit hash of both names (xxh3,
/// one shot each) and then compared by name: exact, and per span far cheaper than hashing two
/// strings with SipHash into nested maps.
#[derive(Default)]
struct Endpoints {
    slots: HashMap<u64, Vec<usize>, BuildHasherDefault<U64Identity>>,
    list: Vec<(String, String, Acc)>,
}

impl Endpoints {
    fn get(&mut self, service: &str, operation: &str) -> &mut Acc {
        let Self { slots, list } = self;
        let h = xxh3_64(service.as_bytes()) ^ xxh3_64(operation.as_bytes()).rotate_left(17);
        let ids = slots.entry(h).or_default();
        let i = match ids.iter().copied().find(|&i| list[i].0 == service && list[i].1 == operation) {
            Some(i) => i,
            None => {
                list.push((service.to_owned(), operation.to_owned(), Acc::default()));
                ids.push(list.len() - 1);
                list.len() - 1
            }
        };
        &mut list[i].2
    }
}

/// A hasher for keys that already are well-mixed 64-bit hashes.
#[derive(Default)]
struct U64Identity(u64);

impl Hasher for U64Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
