//! Service map: a node per service, an edge per (parent service → child service) pair of
//! spans whose services differ. A trace lives on one shard, so a span's parent is found here.
//!
//! Segments are read with their ids as stored and their parent references
//! ([`crate::segment::layout`]): a span whose parent is in its row group names the parent's
//! row, so most edges need no lookup; ids are keyed by their stored bytes, never turned into
//! text.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ops::Range;

use rustc_hash::FxHashMap;
use sextant_model::query::{ServiceMap, ServiceMapPlan, ShardQuery, SpanTotals};
use sextant_model::row::SpanStatus;
use xxhash_rust::xxh3::xxh3_64;

use super::names::Names;
use super::{bytes_of, each_batch_holding, scan_of, Budget, Compute, Prehashed, QueryError, QueryKind, Scans};
use crate::segment::hex_ids;
use crate::segment::layout::PARENT_REF;
use crate::segment::table::{Bytes, Cols};
use crate::segment::{Filter, Scan, Table};
use crate::shard::ScanJob;

impl QueryKind for ServiceMapPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let columns = ["trace_id", "span_id", "parent_span_id", PARENT_REF, "service", "duration_ns", "status"];
        let scan = scan_of(req, Table::Spans, Filter::default(), &columns, &["service"]);
        let job = shard.scan(Scan { stored_ids: true, ..scan });
        Ok(Box::new(move |_, budget| Ok(run(job, budget)?.into())))
    }
}

/// A span's identity within the project: xxh3 of its trace id and of its span id, both as
/// stored (a collision needs ~2^64 spans of one trace, or two traces colliding and then two
/// of their spans).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SpanKey(u64, u64);

impl Hash for SpanKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0 ^ self.1);
    }
}

type SpanKeys = HashMap<SpanKey, u32, BuildHasherDefault<Prehashed>>;

/// Keys of the ids of one column: stored bytes as they are, text encoded as a segment stores
/// it first (buffered rows), so both give one key.
struct IdKeys<'a> {
    ids: Bytes<'a>,
    width: usize,
    scratch: Vec<u8>,
}

impl<'a> IdKeys<'a> {
    fn new(ids: Bytes<'a>, width: usize) -> Self {
        IdKeys { ids, width, scratch: Vec::new() }
    }

    /// The id of row `i` as read (stored bytes or text); `None` when null.
    fn read(&self, i: usize) -> Option<&'a [u8]> {
        self.ids.value(i)
    }

    /// The id of row `i` as stored; `None` when empty.
    fn stored(&mut self, i: usize) -> Option<&[u8]> {
        match self.ids {
            Bytes::Stored(_) => self.ids.value(i).filter(|b| !b.is_empty()),
            Bytes::Text(_) => {
                let text = self.ids.value(i).filter(|b| !b.is_empty())?;
                self.scratch.clear();
                hex_ids::encode(std::str::from_utf8(text).expect("a string column"), self.width, &mut self.scratch);
                Some(&self.scratch)
            }
        }
    }

    fn key(&mut self, i: usize) -> Option<u64> {
        self.stored(i).map(xxh3_64)
    }
}

struct Child {
    parent: SpanKey,
    service: u32,
    duration_ns: i64,
    error: bool,
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

/// Runs of a trace longer than this find repeated spans through a table, shorter ones by
/// comparing with the run's earlier spans.
const SHORT_RUN: usize = 32;

pub fn run(job: ScanJob, budget: &mut Budget) -> Result<ServiceMap, QueryError> {
    let mut services = Names::default();
    let mut traces: HashMap<u64, Seen, BuildHasherDefault<Prehashed>> = HashMap::default();
    // Every span of a trace seen once, appended in scan order (sequential writes, sized once),
    // instead of a table of every span: only split traces need one.
    let mut spans: Vec<(SpanKey, u32)> = Vec::with_capacity(job.max_rows().min(budget.max) as usize);
    let mut split = SpanKeys::default();
    // The spans of the current batch, where it has no parent references (buffered rows), or
    // of its current trace if that is long.
    let mut in_batch = SpanKeys::default();
    let (mut batch_children, mut children) = (Vec::new(), Vec::new());
    let mut nodes: Vec<SpanTotals> = Vec::new();
    let mut edges: FxHashMap<(u32, u32), SpanTotals> = FxHashMap::default();
    let mut add_edge = |source: u32, target: u32, duration_ns: i64, error: bool| {
        if source != target {
            edges.entry((source, target)).or_default().add(duration_ns, error);
        }
    };
    let (mut rows, mut run_keys) = (Vec::new(), Vec::new());
    each_batch_holding(job, budget, |rb| {
        let c = Cols(rb);
        let (mut trace, mut span, mut parent) = (
            IdKeys::new(c.bytes("trace_id"), 16),
            IdKeys::new(c.bytes("span_id"), 8),
            IdKeys::new(c.bytes("parent_span_id"), 8),
        );
        let refs = rb.column_by_name(PARENT_REF).map(|_| c.i32(PARENT_REF).values());
        let (duration, status) = (c.i64("duration_ns"), c.i32("status"));
        services.of_rows(c.strings("service"), rb.num_rows(), &mut rows);
        nodes.resize_with(services.list.len(), SpanTotals::default);
        in_batch.clear();
        let mut start = 0;
        while start < rows.len() {
            let t = trace.read(start);
            let end = (start + 1..rows.len()).find(|&i| trace.read(i) != t).unwrap_or(rows.len());
            let trace_key = trace.key(start).unwrap_or(0);
            // A trace met again: its earlier spans join the table of split traces, where
            // duplicates and parents across runs are found. (A 64-bit collision of two
            // trace ids only sends both through that exact path.)
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
            let short = refs.is_some() && end - start <= SHORT_RUN;
            run_keys.clear();
            for i in start..end {
                let s = rows[i];
                let key = SpanKey(trace_key, span.key(i).unwrap_or(0));
                // A span stored twice (a retried batch) counts once.
                let repeated = if short {
                    let seen = run_keys.contains(&key);
                    run_keys.push(key);
                    seen
                } else {
                    in_batch.insert(key, s).is_some()
                };
                if repeated || (is_split && split.insert(key, s).is_some()) {
                    continue;
                }
                if !is_split {
                    spans.push((key, s));
                }
                let duration_ns = duration.value(i);
                let error = status.value(i) == SpanStatus::Error.code();
                nodes[s as usize].add(duration_ns, error);
                match refs.map_or(0, |r| r[i]) {
                    0 => {
                        if let Some(p) = parent.key(i) {
                            let child = Child { parent: SpanKey(trace_key, p), service: s, duration_ns, error };
                            // With references, a parent not referred to is not in this batch.
                            if refs.is_some() {
                                children.push(child)
                            } else {
                                batch_children.push(child)
                            }
                        }
                    }
                    d => {
                        let p = usize::try_from(i as i64 - i64::from(d)).ok().filter(|&p| p < rows.len());
                        let p = p.ok_or_else(|| {
                            std::io::Error::new(std::io::ErrorKind::InvalidData, "a parent reference leaves its batch")
                        })?;
                        add_edge(rows[p], s, duration_ns, error);
                    }
                }
            }
            if !is_split {
                traces.insert(trace_key, Seen::Once(first..spans.len()));
            }
            start = end;
        }
        for c in batch_children.drain(..) {
            match in_batch.get(&c.parent) {
                Some(&source) => add_edge(source, c.service, c.duration_ns, c.error),
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
            add_edge(source, c.service, c.duration_ns, c.error);
        }
    }
    let name = |s: u32| services.name(s).to_owned();
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
