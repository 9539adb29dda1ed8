//! Service map: a node per service, an edge per (parent service → child service) pair of
//! spans whose services differ. A trace lives on one shard, so a span's parent is found here.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::Range;

use arrow_array::Array;
use sextant_model::query::{ServiceMap, ServiceMapPlan, ShardQuery};
use sextant_model::row::SpanStatus;
use xxhash_rust::xxh3::{xxh3_128, xxh3_64, Xxh3};

use super::{bytes_of, each_batch_holding, scan_of, Budget, Compute, Prehashed, QueryError, QueryKind, Scans};
use crate::segment::table::{Cols, Strings};
use crate::segment::{Filter, Table};
use crate::shard::ScanJob;
use sextant_model::query::SpanTotals;

impl QueryKind for ServiceMapPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let job = shard.scan(scan_of(
            req,
            Table::Spans,
            Filter::default(),
            &["trace_id", "span_id", "parent_span_id", "service", "duration_ns", "status"],
            &["service"],
        ));
        Ok(Box::new(move |_, budget| Ok(run(job, budget)?.into())))
    }
}

/// A span's identity within the project: 128 bits of xxh3 over (trace id, span id), as two
/// halves (a table entry aligned to 8, not 16, bytes). A collision needs ~2^64 spans, so the
/// join keeps a small fixed-size key per span instead of two strings.
type SpanKey = (u64, u64);

fn span_key(trace: &str, span: &str) -> SpanKey {
    // One shot over the ids on the stack (hex ids: 32 + 1 + 16 bytes): the streaming hasher
    // initializes a few hundred bytes of state per call.
    let mut buf = [0u8; 96];
    let n = trace.len() + 1 + span.len();
    let h = if n > buf.len() {
        let mut h = Xxh3::new();
        h.update(trace.as_bytes());
        h.update(&[0]);
        h.update(span.as_bytes());
        h.digest128()
    } else {
        buf[..trace.len()].copy_from_slice(trace.as_bytes());
        buf[trace.len() + 1..n].copy_from_slice(span.as_bytes());
        xxh3_128(&buf[..n])
    };
    (h as u64, (h >> 64) as u64)
}

type SpanKeys = HashMap<SpanKey, u32, BuildHasherDefault<Prehashed>>;

struct Child {
    parent: SpanKey,
    service: u32,
    duration_ns: i64,
    error: bool,
}

/// Service names interned: every span refers to its service by index.
#[derive(Default)]
struct Services {
    names: Vec<String>,
    index: HashMap<String, u32>,
    /// Per batch of a dictionary: the service of each key, `u32::MAX` until a row has it.
    of_key: Vec<u32>,
}

impl Services {
    /// The service of each of the `n` rows, into `out`; once per key for a dictionary.
    fn of_rows(&mut self, service: Strings<'_>, n: usize, out: &mut Vec<u32>) {
        out.clear();
        match service {
            Strings::Dictionary { keys, values } => {
                self.of_key.clear();
                self.of_key.resize(values.len(), u32::MAX);
                for &k in keys {
                    let mut s = self.of_key[k as usize];
                    if s == u32::MAX {
                        s = self.get(values.value(k as usize));
                        self.of_key[k as usize] = s;
                    }
                    out.push(s);
                }
            }
            Strings::Plain(_) => out.extend((0..n).map(|i| self.get(service.value(i)))),
        }
    }

    fn get(&mut self, name: &str) -> u32 {
        if let Some(&s) = self.index.get(name) {
            return s;
        }
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), self.names.len() as u32 - 1);
        self.names.len() as u32 - 1
    }
}

/// Where the spans of a trace are, as the scan goes: a trace's spans are stored together, so
/// almost every trace is one run of consecutive rows of one batch.
enum Seen {
    /// One run so far: its spans are this range of the scan's list.
    Once(Range<usize>),
    /// More than one run (a trace over two row groups or segments, or buffered rows): its
    /// spans are in the table of split traces.
    Split,
}

pub fn run(job: ScanJob, budget: &mut Budget) -> Result<ServiceMap, QueryError> {
    let mut services = Services::default();
    let mut traces: HashMap<u64, Seen, BuildHasherDefault<Prehashed>> = HashMap::default();
    // Every span of a trace seen once, appended in scan order (sequential writes, sized once),
    // instead of a table of every span: only split traces need one.
    let mut spans: Vec<(SpanKey, u32)> = Vec::with_capacity(job.max_rows().min(budget.max) as usize);
    let mut split = SpanKeys::default();
    // The spans of the current batch: most parents are found in this small table.
    let mut in_batch = SpanKeys::default();
    let (mut batch_children, mut children) = (Vec::new(), Vec::new());
    let mut nodes: Vec<SpanTotals> = Vec::new();
    let mut edges: HashMap<(u32, u32), SpanTotals> = HashMap::new();
    let mut add_edge = |source: u32, c: &Child| {
        if source != c.service {
            edges.entry((source, c.service)).or_default().add(c.duration_ns, c.error);
        }
    };
    let mut rows = Vec::new();
    each_batch_holding(job, budget, |rb| {
        let c = Cols(rb);
        let (trace, span, parent, duration, status) =
            (c.str("trace_id"), c.str("span_id"), c.str("parent_span_id"), c.i64("duration_ns"), c.i32("status"));
        services.of_rows(c.strings("service"), rb.num_rows(), &mut rows);
        nodes.resize_with(services.names.len(), SpanTotals::default);
        in_batch.clear();
        let mut start = 0;
        while start < rows.len() {
            let t = trace.value(start);
            let end = (start + 1..rows.len()).find(|&i| trace.value(i) != t).unwrap_or(rows.len());
            // A trace met again: its earlier spans join the table of split traces, where
            // duplicates and parents across runs are found. (A 64-bit collision of two
            // trace ids only sends both through that exact path.)
            let trace_key = xxh3_64(t.as_bytes());
            let is_split = match traces.get_mut(&trace_key) {
                None => false,
                Some(seen) => {
                    if let Seen::Once(earlier) = std::mem::replace(seen, Seen::Split) {
                        split.extend(spans[earlier].iter().copied());
                    }
                    true
                }
            };
            let first = spans.len();
            for (i, &s) in rows.iter().enumerate().take(end).skip(start) {
                let key = span_key(t, span.value(i));
                // A span stored twice (a retried batch) counts once.
                if in_batch.insert(key, s).is_some() || (is_split && split.insert(key, s).is_some()) {
                    continue;
                }
                if !is_split {
                    spans.push((key, s));
                }
                let duration_ns = duration.value(i);
                let error = status.value(i) == SpanStatus::Error.code();
                nodes[s as usize].add(duration_ns, error);
                if !parent.value(i).is_empty() {
                    batch_children.push(Child { parent: span_key(t, parent.value(i)), service: s, duration_ns, error });
                }
            }
            if !is_split {
                traces.insert(trace_key, Seen::Once(first..spans.len()));
            }
            start = end;
        }
        for c in batch_children.drain(..) {
            match in_batch.get(&c.parent) {
                Some(&source) => add_edge(source, &c),
                None => children.push(c),
            }
        }
        // A hash table entry costs about twice its key and value.
        let entry = |key: usize, n: usize| (2 * key * n) as u64;
        Ok(bytes_of(&spans)
            + bytes_of(&children)
            + entry(std::mem::size_of::<(u64, Seen)>(), traces.len())
            + entry(std::mem::size_of::<(SpanKey, u32)>(), split.len()))
    })?;
    for c in &children {
        // A parent in another run of a split trace. Otherwise the parent is outside the time
        // range (a trace seen once had all its spans in the child's batch): not counted.
        if let Some(&source) = split.get(&c.parent) {
            add_edge(source, c);
        }
    }
    let name = |s: u32| services.names[s as usize].clone();
    Ok(ServiceMap {
        nodes: nodes
            .iter()
            .enumerate()
            .filter(|(_, a)| a.count > 0)
            .map(|(s, a)| (name(s as u32), a.stats()))
            .collect(),
        edges: edges.iter().map(|(&(source, target), a)| ((name(source), name(target)), a.stats())).collect(),
    })
}
