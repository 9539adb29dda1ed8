//! Rows applied since the last flush. Readers see them at once; a flush freezes the buffer
//! and writes it out as segments.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;
use sextant_model::row::{Encoded, RowBatch};
use sextant_proto::convert::persist_row::{decode_ingest, DecodeError};

use super::table::{Row, RowRef, Table};

pub struct BufferedRow {
    pub project: Arc<str>,
    pub row: Row,
    pub batch_id: u128,
}

pub struct Buffer {
    pub rows: Vec<BufferedRow>,
    /// Hash of (project, trace id) -> positions of its spans in `rows`; readers check the ids
    /// of the rows it points to (a hash shared by two traces only costs a comparison).
    traces: FxHashMap<u64, Vec<u32>>,
    batches: HashSet<u128>,
    /// Projects with rows here.
    projects: HashSet<Arc<str>>,
    /// Batches aborted while still here: skipped by reads and by the flush.
    pub aborted: HashSet<u128>,
    /// Approximate heap size, for flush-by-size.
    pub bytes: usize,
    /// When the first row came, on the shard's monotonic clock: for flush-by-age.
    pub since: Duration,
}

impl Default for Buffer {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            traces: FxHashMap::default(),
            batches: HashSet::new(),
            projects: HashSet::new(),
            aborted: HashSet::new(),
            bytes: 0,
            since: Duration::ZERO,
        }
    }
}

impl Buffer {
    /// An empty buffer with room for `rows` rows of `traces` traces.
    pub fn with_capacity(rows: usize, traces: usize) -> Self {
        let mut buffer = Buffer::default();
        buffer.rows.reserve_exact(rows);
        buffer.traces.reserve(traces);
        buffer
    }

    /// How many traces have spans here.
    pub fn trace_count(&self) -> usize {
        self.traces.len()
    }

    /// Adds a batch; `now` is the shard clock's monotonic reading.
    pub fn push(&mut self, batch_id: u128, batch: RowBatch<Encoded>, encoded_len: usize, now: Duration) -> u64 {
        if self.rows.is_empty() {
            self.since = now;
        }
        let project: Arc<str> = Arc::from(batch.project_id.as_str());
        let before = self.rows.len();
        let rows = batch
            .spans
            .into_iter()
            .map(Row::Span)
            .chain(batch.logs.into_iter().map(Row::Log))
            .chain(batch.host_metrics.into_iter().map(Row::HostMetric))
            .chain(batch.events.into_iter().map(Row::Event))
            .chain(batch.replay_events.into_iter().map(Row::Replay));
        for row in rows {
            if let Row::Span(s) = &row {
                self.traces.entry(trace_key(&project, &s.trace_id)).or_default().push(self.rows.len() as u32);
            }
            self.rows.push(BufferedRow { project: project.clone(), row, batch_id });
        }
        self.batches.insert(batch_id);
        if self.rows.len() > before {
            self.projects.insert(project);
        }
        // Rows take roughly three times their protobuf size: the entry they were decoded
        // from (attributes are slices of it), a 32-byte handle per attribute, their strings.
        self.bytes += encoded_len * 3;
        (self.rows.len() - before) as u64
    }

    pub fn contains(&self, batch_id: u128) -> bool {
        self.batches.contains(&batch_id)
    }

    /// The projects with rows here.
    pub fn projects(&self) -> impl Iterator<Item = &str> {
        self.projects.iter().map(|p| &**p)
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Spans of one trace, except those of aborted batches and of `hidden` ones.
    pub fn trace(&self, project: &str, trace_id: &str, hidden: &dyn Fn(u128) -> bool) -> Vec<Row> {
        self.traces
            .get(&trace_key(project, trace_id))
            .into_iter()
            .flatten()
            .map(|&i| &self.rows[i as usize])
            .filter(|r| *r.project == *project && matches!(&r.row, Row::Span(s) if s.trace_id == trace_id))
            .filter(|r| !self.aborted.contains(&r.batch_id) && !hidden(r.batch_id))
            .map(|r| r.row.clone())
            .collect()
    }

    /// The live rows of `project` in `table` (trace summaries: derived from its spans), as
    /// record batches ready for [`Scan::apply`](super::Scan::apply).
    pub fn scan_rows(&self, scan: &super::Scan, hidden: &dyn Fn(u128) -> bool) -> Vec<arrow_array::RecordBatch> {
        let source = if scan.table == Table::TraceSummaries { Table::Spans } else { scan.table };
        let mut live: Vec<&BufferedRow> = self
            .rows
            .iter()
            .filter(|r| {
                r.row.table() == source
                    && *r.project == *scan.project
                    && scan.may_select(&r.row)
                    && !self.aborted.contains(&r.batch_id)
                    && !hidden(r.batch_id)
            })
            .collect();
        if live.is_empty() {
            return Vec::new();
        }
        let rows: Vec<Row>;
        let refs: Vec<RowRef<'_>> = if scan.table == Table::TraceSummaries {
            live.sort_by(|a, b| a.row.sort_key().cmp(&b.row.sort_key()));
            let spans: Vec<RowRef<'_>> =
                live.iter().map(|r| RowRef { project: &r.project, row: &r.row, batch: 0 }).collect();
            rows = super::summary::summary_rows(&spans).into_iter().map(|(_, r)| r).collect();
            rows.iter().map(|row| RowRef { project: &scan.project, row, batch: 0 }).collect()
        } else {
            live.iter().map(|r| RowRef { project: &r.project, row: &r.row, batch: 0 }).collect()
        };
        let mut out = Vec::new();
        for chunk in refs.chunks(8192) {
            let rb = super::table::to_record_batch(scan.table, chunk).expect("rows match their table's schema");
            if let Some(kept) = scan.apply(&rb, &|_| false).expect("filtering a batch of its own schema") {
                out.push(kept);
            }
        }
        out
    }

    /// Rows of `project` that [`scan_rows`](Self::scan_rows) would consider (by table, time
    /// and event name, without building them), and their share of the buffer's bytes.
    pub fn estimate(&self, scan: &super::Scan) -> (u64, u64) {
        let source = if scan.table == Table::TraceSummaries { Table::Spans } else { scan.table };
        let rows = self
            .rows
            .iter()
            .filter(|r| r.row.table() == source && *r.project == *scan.project && scan.may_select(&r.row))
            .count();
        let bytes = (self.bytes as u128 * rows as u128 / self.rows.len().max(1) as u128) as u64;
        (rows as u64, bytes)
    }

    /// The live rows grouped by (table, time bucket), each group sorted in segment order,
    /// with the list of batch ids the rows' ordinals point into.
    pub fn time_buckets(&self) -> Vec<(Table, i64, Vec<RowRef<'_>>, Vec<u128>)> {
        let mut groups: FxHashMap<(Table, i64), Vec<&BufferedRow>> = FxHashMap::default();
        for r in self.rows.iter().filter(|r| !self.aborted.contains(&r.batch_id)) {
            groups.entry((r.row.table(), bucket_start(r.row.table(), r.row.time_ns()))).or_default().push(r);
        }
        let mut out: Vec<_> = groups
            .into_iter()
            .map(|((table, hour), mut rows)| {
                rows.sort_by(|a, b| (&a.project, a.row.sort_key()).cmp(&(&b.project, b.row.sort_key())));
                let mut ordinals: FxHashMap<u128, u32> = FxHashMap::default();
                let mut batches = Vec::new();
                let refs = rows
                    .into_iter()
                    .map(|r| {
                        let batch = *ordinals.entry(r.batch_id).or_insert_with(|| {
                            batches.push(r.batch_id);
                            (batches.len() - 1) as u32
                        });
                        RowRef { project: &r.project, row: &r.row, batch }
                    })
                    .collect();
                (table, hour, refs, batches)
            })
            .collect();
        out.sort_by_key(|(t, h, _, _)| (*t, *h));
        out
    }
}

/// Decodes an ingest payload for [`Buffer::push`]. Attributes stay slices of `payload`, each
/// checked to be an attribute in the form prost writes (see [`super::attribute`]).
pub fn decode_batch(payload: Vec<u8>) -> Result<RowBatch<Encoded>, DecodeError> {
    let mut batch = decode_ingest(bytes::Bytes::from(payload))?;
    let attributes = (batch.spans.iter_mut().map(|s| &mut s.attributes))
        .chain(batch.logs.iter_mut().map(|l| &mut l.attributes))
        .chain(batch.host_metrics.iter_mut().map(|m| &mut m.attributes));
    for a in attributes {
        super::attribute::canonicalize(&mut a.0)?;
    }
    Ok(batch)
}

fn trace_key(project: &str, trace_id: &str) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = rustc_hash::FxBuildHasher.build_hasher();
    (project, trace_id).hash(&mut h);
    h.finish()
}

/// Start of the time bucket of `table` holding `ns`, in unix seconds.
pub fn bucket_start(table: Table, ns: i64) -> i64 {
    let width = table.bucket_seconds();
    ns.div_euclid(1_000_000_000).div_euclid(width) * width
}
