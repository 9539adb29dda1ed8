//! Service map: a node per service, an edge per (parent service → child service) pair of
//! spans whose services differ. A trace lives on one shard, so a span's parent is found here.

use std::collections::HashMap;

use sextant_proto::{EdgeStats, ServiceMapPartial, ServiceStats, SpanStatus};

use super::apm::{entry, Acc};
use super::{each_batch, Budget, QueryError};
use crate::segment::table::Cols;
use crate::shard::ScanJob;

pub fn run(job: ScanJob, budget: &mut Budget) -> Result<ServiceMapPartial, QueryError> {
    // (trace, span) -> service, and the spans that have a parent: (trace, parent, service, ms, error).
    let mut services: HashMap<(String, String), String> = HashMap::new();
    let mut children: Vec<(String, String, String, f64, bool)> = Vec::new();
    let mut nodes: HashMap<String, HashMap<String, Acc>> = HashMap::new();
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (trace, span, parent, service, duration, status) = (
            c.str("trace_id"),
            c.str("span_id"),
            c.str("parent_span_id"),
            c.str("service"),
            c.i64("duration_ns"),
            c.i32("status"),
        );
        for i in 0..rb.num_rows() {
            let ms = duration.value(i) as f64 / 1e6;
            let error = status.value(i) == SpanStatus::Error as i32;
            // A span stored twice (a retried batch) counts once.
            let first = services
                .insert((trace.value(i).to_owned(), span.value(i).to_owned()), service.value(i).to_owned())
                .is_none();
            if !first {
                continue;
            }
            entry(&mut nodes, service.value(i), "").add(ms, error);
            if !parent.value(i).is_empty() {
                children.push((
                    trace.value(i).to_owned(),
                    parent.value(i).to_owned(),
                    service.value(i).to_owned(),
                    ms,
                    error,
                ));
            }
        }
        Ok(())
    })?;
    let mut edges: HashMap<String, HashMap<String, Acc>> = HashMap::new();
    for (trace, parent, service, ms, error) in children {
        // A parent outside the time range is not known: such a call is not counted.
        if let Some(source) = services.get(&(trace, parent)) {
            if *source != service {
                entry(&mut edges, source, &service).add(ms, error);
            }
        }
    }
    Ok(ServiceMapPartial {
        nodes: nodes
            .into_iter()
            .flat_map(|(service, mut m)| m.remove("").map(|a| (service, a)))
            .map(|(service, a)| ServiceStats {
                service,
                span_count: a.count,
                error_count: a.errors,
                sketch: a.sketch.encode(),
            })
            .collect(),
        edges: edges
            .into_iter()
            .flat_map(|(source, m)| m.into_iter().map(move |(target, a)| (source.clone(), target, a)))
            .map(|(source, target, a)| EdgeStats {
                source,
                target,
                call_count: a.count,
                error_count: a.errors,
                sketch: a.sketch.encode(),
            })
            .collect(),
    })
}
