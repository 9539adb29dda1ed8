//! Service map: a node per service, an edge per (parent service → child service) pair of
//! spans whose services differ. A trace lives on one shard, so a span's parent is found here.

use std::collections::HashMap;

use sextant_proto::{EdgeStats, ServiceMapPartial, ServiceStats, SpanStatus};
use xxhash_rust::xxh3::Xxh3;

use super::apm::Acc;
use super::{each_batch, Budget, QueryError};
use crate::segment::table::Cols;
use crate::shard::ScanJob;

/// A span's identity within the project: 128 bits of xxh3 over (trace id, span id). A
/// collision needs ~2^64 spans, so the join keeps a small fixed-size key per span instead
/// of two strings.
fn span_key(trace: &str, span: &str) -> u128 {
    let mut h = Xxh3::new();
    h.update(trace.as_bytes());
    h.update(&[0]);
    h.update(span.as_bytes());
    h.digest128()
}

struct Child {
    parent: u128,
    service: u32,
    ms: f64,
    error: bool,
}

pub fn run(job: ScanJob, budget: &mut Budget) -> Result<ServiceMapPartial, QueryError> {
    // Service names interned: every span refers to its service by index.
    let mut names: Vec<String> = Vec::new();
    let mut index: HashMap<String, u32> = HashMap::new();
    let mut service_of: HashMap<u128, u32> = HashMap::new();
    let mut children: Vec<Child> = Vec::new();
    let mut nodes: HashMap<u32, Acc> = HashMap::new();
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
            let name = service.value(i);
            let s = match index.get(name) {
                Some(s) => *s,
                None => {
                    names.push(name.to_owned());
                    index.insert(name.to_owned(), names.len() as u32 - 1);
                    names.len() as u32 - 1
                }
            };
            // A span stored twice (a retried batch) counts once.
            if service_of.insert(span_key(trace.value(i), span.value(i)), s).is_some() {
                continue;
            }
            let ms = duration.value(i) as f64 / 1e6;
            let error = status.value(i) == SpanStatus::Error as i32;
            nodes.entry(s).or_default().add(ms, error);
            if !parent.value(i).is_empty() {
                children.push(Child { parent: span_key(trace.value(i), parent.value(i)), service: s, ms, error });
            }
        }
        Ok(())
    })?;
    let mut edges: HashMap<(u32, u32), Acc> = HashMap::new();
    for c in children {
        // A parent outside the time range is not known: such a call is not counted.
        if let Some(&source) = service_of.get(&c.parent) {
            if source != c.service {
                edges.entry((source, c.service)).or_default().add(c.ms, c.error);
            }
        }
    }
    let name = |s: u32| names[s as usize].clone();
    Ok(ServiceMapPartial {
        nodes: nodes
            .into_iter()
            .map(|(s, a)| ServiceStats {
                service: name(s),
                span_count: a.count,
                error_count: a.errors,
                sketch: a.sketch.encode(),
            })
            .collect(),
        edges: edges
            .into_iter()
            .map(|((source, target), a)| EdgeStats {
                source: name(source),
                target: name(target),
                call_count: a.count,
                error_count: a.errors,
                sketch: a.sketch.encode(),
            })
            .collect(),
    })
}
