//! APM endpoints: per (service, operation) counts, error counts, total and a latency sketch.

use std::collections::HashMap;

use sextant_model::sketch::LatencySketch;
use sextant_proto::{ApmPartial, EndpointStats, SpanStatus};

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
    // service -> operation -> stats; looked up by borrowed strings, allocated once per key.
    let mut acc: HashMap<String, HashMap<String, Acc>> = HashMap::new();
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (service, operation, duration, status) =
            (c.str("service"), c.str("operation"), c.i64("duration_ns"), c.i32("status"));
        for i in 0..rb.num_rows() {
            entry(&mut acc, service.value(i), operation.value(i))
                .add(duration.value(i) as f64 / 1e6, status.value(i) == SpanStatus::Error as i32);
        }
        Ok(())
    })?;
    let endpoints = acc
        .into_iter()
        .flat_map(|(service, ops)| ops.into_iter().map(move |(operation, a)| (service.clone(), operation, a)))
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

/// The accumulator of `outer` → `inner`, created on first use.
pub fn entry<'a>(map: &'a mut HashMap<String, HashMap<String, Acc>>, outer: &str, inner: &str) -> &'a mut Acc {
    if !map.contains_key(outer) {
        map.insert(outer.to_owned(), HashMap::new());
    }
    let ops = map.get_mut(outer).expect("inserted above");
    if !ops.contains_key(inner) {
        ops.insert(inner.to_owned(), Acc::default());
    }
    ops.get_mut(inner).expect("inserted above")
}
