//! The tables of a shard and their columnar layout: rows (as the router encoded them) to Arrow
//! record batches and back. Every row carries its project; `batch` is the row's index into
//! the segment's list of Raft batch ids, so an abort can hide rows already flushed.

use std::sync::Arc;

use super::layout::Layout;
use arrow_array::builder::{
    BinaryBuilder, Float64Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BinaryArray, Float64Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use sextant_model::row::{
    Encoded, Event, EventRollup, HostMetric, HostRollup, LogLevel, LogRecord, ReplayEvent, Span, SpanRollup,
    SpanStatus, TraceSummary,
};

use super::attribute;
use sextant_model::query::{SpanTotals, HOST_METRICS};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Table {
    Spans,
    /// Derived from spans at flush and compaction; one summary segment per spans segment.
    TraceSummaries,
    /// Derived from spans at flush and compaction; one rollup segment per spans segment.
    SpanRollups,
    /// Span rollups per hour instead of minute; one per spans segment.
    SpanHourRollups,
    /// Span rollups per day, added up by compaction from the hour rollups of a past day's
    /// spans segments (listed in its `covers`); one per day.
    SpanDayRollups,
    Logs,
    HostMetrics,
    /// Derived from host metrics at flush and compaction; one rollup segment per segment.
    HostRollups,
    Events,
    /// Derived from events at flush and compaction; one rollup segment per events segment.
    EventRollups,
    ReplayEvents,
}

fn utf8(n: &str) -> Field {
    Field::new(n, DataType::Utf8, false)
}
fn int64(n: &str) -> Field {
    Field::new(n, DataType::Int64, false)
}
fn opt(n: &str, t: DataType) -> Field {
    Field::new(n, t, true)
}

impl Table {
    pub const ALL: [Table; 11] = [
        Table::Spans,
        Table::TraceSummaries,
        Table::SpanRollups,
        Table::SpanHourRollups,
        Table::SpanDayRollups,
        Table::Logs,
        Table::HostMetrics,
        Table::HostRollups,
        Table::Events,
        Table::EventRollups,
        Table::ReplayEvents,
    ];

    /// Tables whose rows are derived from another's when it is written.
    pub fn is_derived(self) -> bool {
        self.source() != self
    }

    /// The table a derived table's rows come from (itself for the others).
    pub fn source(self) -> Table {
        match self {
            Table::TraceSummaries | Table::SpanRollups | Table::SpanHourRollups | Table::SpanDayRollups => Table::Spans,
            Table::EventRollups => Table::Events,
            Table::HostRollups => Table::HostMetrics,
            other => other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Table::Spans => "spans",
            Table::TraceSummaries => "trace_summaries",
            Table::SpanRollups => "span_rollups",
            Table::SpanHourRollups => "span_hour_rollups",
            Table::SpanDayRollups => "span_day_rollups",
            Table::Logs => "logs",
            Table::HostMetrics => "host_metrics",
            Table::HostRollups => "host_rollups",
            Table::Events => "events",
            Table::EventRollups => "event_rollups",
            Table::ReplayEvents => "replay_events",
        }
    }

    /// The column holding the row's time (unix nanoseconds), used for time buckets and pruning.
    pub fn time_column(self) -> &'static str {
        match self {
            Table::Spans | Table::TraceSummaries => "start_ns",
            Table::SpanRollups | Table::HostRollups => "minute_ns",
            Table::EventRollups | Table::SpanHourRollups => "hour_ns",
            Table::SpanDayRollups => "day_ns",
            _ => "time_ns",
        }
    }

    pub fn schema(self) -> SchemaRef {
        let mut fields = vec![utf8("project")];
        fields.extend(match self {
            Table::Spans => vec![
                utf8("trace_id"),
                int64("start_ns"),
                utf8("span_id"),
                utf8("parent_span_id"),
                utf8("service"),
                utf8("operation"),
                int64("duration_ns"),
                Field::new("status", DataType::Int32, false),
                Field::new("attributes", DataType::Binary, false),
            ],
            Table::TraceSummaries => vec![
                utf8("trace_id"),
                int64("start_ns"),
                int64("end_ns"),
                utf8("root_service"),
                utf8("root_operation"),
                Field::new("span_count", DataType::UInt32, false),
                Field::new("error_count", DataType::UInt32, false),
                Field::new("services", DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))), false),
            ],
            Table::SpanRollups | Table::SpanHourRollups | Table::SpanDayRollups => vec![
                utf8("service"),
                utf8("operation"),
                int64(self.time_column()),
                Field::new("count", DataType::UInt64, false),
                Field::new("errors", DataType::UInt64, false),
                Field::new("durations", DataType::Binary, false),
            ],
            Table::Logs => vec![
                int64("time_ns"),
                Field::new("level", DataType::Int32, false),
                utf8("service"),
                utf8("message"),
                utf8("trace_id"),
                utf8("span_id"),
                Field::new("attributes", DataType::Binary, false),
            ],
            Table::HostMetrics => vec![
                utf8("hostname"),
                int64("time_ns"),
                opt("cpu_percent", DataType::Float64),
                opt("memory_used_bytes", DataType::UInt64),
                opt("memory_total_bytes", DataType::UInt64),
                opt("disk_used_percent", DataType::Float64),
                opt("network_rx_bytes_per_sec", DataType::Float64),
                opt("network_tx_bytes_per_sec", DataType::Float64),
                Field::new("attributes", DataType::Binary, false),
            ],
            Table::HostRollups => {
                let mut fields = vec![utf8("hostname"), int64("minute_ns")];
                for m in HOST_METRICS {
                    let [sum, count] = super::rollup::host_columns(m);
                    fields.extend([
                        Field::new(sum, DataType::Float64, false),
                        Field::new(count, DataType::UInt64, false),
                    ]);
                }
                fields
            }
            Table::Events => {
                vec![utf8("distinct_id"), int64("time_ns"), utf8("event"), utf8("uuid"), utf8("properties")]
            }
            Table::EventRollups => {
                vec![utf8("event"), int64("hour_ns"), Field::new("count", DataType::UInt64, false)]
            }
            Table::ReplayEvents => vec![
                utf8("session_id"),
                int64("time_ns"),
                utf8("distinct_id"),
                utf8("window_id"),
                Field::new("event_type", DataType::Int32, false),
                utf8("data"),
                utf8("uuid"),
            ],
        });
        fields.push(Field::new("batch", DataType::UInt32, false));
        Arc::new(Schema::new(fields))
    }

    /// Width of a segment's time bucket, in seconds. Analytics queries and host charts span
    /// weeks and months; hour buckets would give them thousands of small segments per shard
    /// (30 days: 720 per shard, each read costing far more than its rows), so events, replays
    /// and host metrics are bucketed by day.
    pub fn bucket_seconds(self) -> i64 {
        match self.source() {
            Table::Events | Table::ReplayEvents | Table::HostMetrics => 86_400,
            _ => 3_600,
        }
    }

    /// Columns the segment is sorted by, in order (also its Parquet sorting columns).
    pub fn sort_columns(self) -> &'static [&'static str] {
        match self {
            // A trace is read whole: keeping its spans together makes lookups touch one page
            // and lets trace ids compress to almost nothing.
            Table::Spans | Table::TraceSummaries => &["project", "trace_id", "start_ns"],
            Table::Logs => &["project", "time_ns"],
            Table::SpanRollups => &["project", "minute_ns"],
            Table::EventRollups | Table::SpanHourRollups => &["project", "hour_ns"],
            Table::SpanDayRollups => &["project", "day_ns"],
            Table::HostMetrics => &["project", "hostname", "time_ns"],
            Table::HostRollups => &["project", "hostname", "minute_ns"],
            // All events of a user together: funnels and retention read one user at a time.
            Table::Events => &["project", "distinct_id", "time_ns"],
            Table::ReplayEvents => &["project", "session_id", "time_ns"],
        }
    }
}

/// A span as a shard holds it: attributes encoded (see [`attribute`]).
pub type SpanRow = Span<Encoded>;
pub type LogRow = LogRecord<Encoded>;
pub type HostMetricRow = HostMetric<Encoded>;

/// One row of any table, as applied (attributes encoded, see [`attribute`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    Span(SpanRow),
    TraceSummary(TraceSummary),
    SpanRollup(SpanRollup),
    SpanHourRollup(SpanRollup),
    SpanDayRollup(SpanRollup),
    Log(LogRow),
    HostMetric(HostMetricRow),
    HostRollup(HostRollup),
    Event(Event),
    EventRollup(EventRollup),
    Replay(ReplayEvent),
}

impl Row {
    pub fn table(&self) -> Table {
        match self {
            Row::Span(_) => Table::Spans,
            Row::TraceSummary(_) => Table::TraceSummaries,
            Row::SpanRollup(_) => Table::SpanRollups,
            Row::SpanHourRollup(_) => Table::SpanHourRollups,
            Row::SpanDayRollup(_) => Table::SpanDayRollups,
            Row::Log(_) => Table::Logs,
            Row::HostMetric(_) => Table::HostMetrics,
            Row::HostRollup(_) => Table::HostRollups,
            Row::Event(_) => Table::Events,
            Row::EventRollup(_) => Table::EventRollups,
            Row::Replay(_) => Table::ReplayEvents,
        }
    }

    pub fn time_ns(&self) -> i64 {
        match self {
            Row::Span(s) => s.start_unix_nanos,
            Row::TraceSummary(s) => s.start_unix_nanos,
            Row::SpanRollup(r) | Row::SpanHourRollup(r) | Row::SpanDayRollup(r) => r.bucket_unix_nanos,
            Row::Log(l) => l.unix_nanos,
            Row::HostMetric(m) => m.unix_nanos,
            Row::HostRollup(r) => r.means.start_unix_nanos,
            Row::Event(e) => e.unix_nanos,
            Row::EventRollup(r) => r.hour_unix_nanos,
            Row::Replay(r) => r.unix_nanos,
        }
    }

    /// The row's attributes, in their stored encoding, for the tables that have them.
    pub fn attributes(&self) -> Option<&Encoded> {
        match self {
            Row::Span(s) => Some(&s.attributes),
            Row::Log(l) => Some(&l.attributes),
            Row::HostMetric(m) => Some(&m.attributes),
            _ => None,
        }
    }

    /// The sort key within a segment after the project (see [`Table::sort_columns`]).
    pub fn sort_key(&self) -> (&str, i64) {
        match self {
            Row::Span(s) => (&s.trace_id, s.start_unix_nanos),
            Row::TraceSummary(s) => (&s.trace_id, s.start_unix_nanos),
            Row::SpanRollup(r) | Row::SpanHourRollup(r) | Row::SpanDayRollup(r) => ("", r.bucket_unix_nanos),
            Row::Log(l) => ("", l.unix_nanos),
            Row::HostMetric(m) => (&m.hostname, m.unix_nanos),
            Row::HostRollup(r) => (&r.hostname, r.means.start_unix_nanos),
            Row::Event(e) => (&e.distinct_id, e.unix_nanos),
            Row::EventRollup(r) => ("", r.hour_unix_nanos),
            Row::Replay(r) => (&r.session_id, r.unix_nanos),
        }
    }

    /// What makes two rows the same object sent twice (a client retry), if anything does:
    /// spans are unique by (trace id, span id), events and replay events by their uuid when
    /// they have one.
    pub fn identity(&self) -> Option<(&str, &str)> {
        match self {
            Row::Span(s) => Some((&s.trace_id, &s.span_id)),
            Row::Event(e) if !e.uuid.is_empty() => Some(("", &e.uuid)),
            Row::Replay(r) if !r.uuid.is_empty() => Some(("", &r.uuid)),
            _ => None,
        }
    }

    /// The uuid an analytics row is stored once by (see `crate::segment::uuids`).
    pub fn uuid(&self) -> Option<&str> {
        match self {
            Row::Event(e) if !e.uuid.is_empty() => Some(&e.uuid),
            Row::Replay(r) if !r.uuid.is_empty() => Some(&r.uuid),
            _ => None,
        }
    }
}

/// A row with what the segment stores beside it.
pub struct RowRef<'a> {
    pub project: &'a str,
    pub row: &'a Row,
    pub batch: u32,
    /// A log line's index terms, when the buffer already found them at apply.
    pub terms: Option<&'a [u32]>,
}

impl<'a> RowRef<'a> {
    pub fn new(project: &'a str, row: &'a Row, batch: u32) -> Self {
        RowRef { project, row, batch, terms: None }
    }
}

/// Whether two rows' projects are the same. The rows of one batch share their project's
/// string, so most compare as a pointer, without reaching the text.
pub fn same_project(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Appends one column per kept schema field; `push` fills them row by row in schema order.
struct Columns {
    builders: Vec<Col>,
    /// Per schema field: whether it is built (a projection skips copying the others).
    keep: Vec<bool>,
}

enum Col {
    Str(StringBuilder),
    I64(Int64Builder),
    I32(Int32Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    F64(Float64Builder),
    Bin(BinaryBuilder),
    StrList(ListBuilder<StringBuilder>),
    /// Ids stored as bytes ([`super::hex_ids`]): the width, and scratch room to encode one.
    HexId(BinaryBuilder, usize, Vec<u8>),
}

/// One value for [`Columns::push`], in the column's type.
enum V<'a> {
    S(&'a str),
    I(i64),
    I4(i32),
    U4(u32),
    U(Option<u64>),
    F(Option<f64>),
    B(&'a [u8]),
    L(&'a [String]),
}

impl Columns {
    /// `hex_ids`: the columns built as ids stored as bytes, with their widths.
    fn new(schema: &Schema, n: usize, keep: Vec<bool>, hex_ids: &[(&str, usize)]) -> Self {
        let builders = schema
            .fields()
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(f, _)| match (f.data_type(), hex_ids.iter().find(|(name, _)| name == f.name())) {
                (DataType::Utf8, Some(&(_, width))) => {
                    Col::HexId(BinaryBuilder::with_capacity(n, n * width), width, Vec::with_capacity(2 * width + 1))
                }
                (DataType::Utf8, None) => Col::Str(StringBuilder::with_capacity(n, n * 16)),
                (DataType::Int64, _) => Col::I64(Int64Builder::with_capacity(n)),
                (DataType::Int32, _) => Col::I32(Int32Builder::with_capacity(n)),
                (DataType::UInt32, _) => Col::U32(UInt32Builder::with_capacity(n)),
                (DataType::UInt64, _) => Col::U64(UInt64Builder::with_capacity(n)),
                (DataType::Float64, _) => Col::F64(Float64Builder::with_capacity(n)),
                (DataType::Binary, _) => Col::Bin(BinaryBuilder::with_capacity(n, n * 32)),
                (DataType::List(_), _) => Col::StrList(ListBuilder::new(StringBuilder::new())),
                (other, _) => unreachable!("no table has a {other} column"),
            })
            .collect();
        Columns { builders, keep }
    }

    fn push(&mut self, values: &[V<'_>]) {
        debug_assert_eq!(values.len(), self.keep.len());
        let kept = values.iter().zip(&self.keep).filter(|(_, k)| **k).map(|(v, _)| v);
        for (b, v) in self.builders.iter_mut().zip(kept) {
            match (b, v) {
                (Col::Str(b), V::S(s)) => b.append_value(s),
                (Col::I64(b), V::I(x)) => b.append_value(*x),
                (Col::I32(b), V::I4(x)) => b.append_value(*x),
                (Col::U32(b), V::U4(x)) => b.append_value(*x),
                (Col::U64(b), V::U(x)) => b.append_option(*x),
                (Col::F64(b), V::F(x)) => b.append_option(*x),
                (Col::Bin(b), V::B(x)) => b.append_value(x),
                (Col::HexId(b, width, scratch), V::S(id)) => super::hex_ids::append(b, id, *width, scratch),
                (Col::StrList(b), V::L(items)) => {
                    for s in items.iter() {
                        b.values().append_value(s);
                    }
                    b.append(true);
                }
                _ => unreachable!("value of the wrong type for its column"),
            }
        }
    }

    fn finish(self) -> Vec<ArrayRef> {
        self.builders
            .into_iter()
            .map(|b| -> ArrayRef {
                match b {
                    Col::Str(mut b) => Arc::new(b.finish()),
                    Col::I64(mut b) => Arc::new(b.finish()),
                    Col::I32(mut b) => Arc::new(b.finish()),
                    Col::U32(mut b) => Arc::new(b.finish()),
                    Col::U64(mut b) => Arc::new(b.finish()),
                    Col::F64(mut b) => Arc::new(b.finish()),
                    Col::Bin(mut b) => Arc::new(b.finish()),
                    Col::StrList(mut b) => Arc::new(b.finish()),
                    Col::HexId(mut b, _, _) => Arc::new(b.finish()),
                }
            })
            .collect()
    }
}

/// Builds the record batch of `rows`, which must all belong to `table`.
pub fn to_record_batch(table: Table, rows: &[RowRef<'_>]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    to_segment_batch(table, rows, &Layout::default())
}

/// [`to_record_batch`] with only the named columns of the table's schema (in its order), the
/// others not built: how a scan of buffered rows reads only what it needs.
pub fn to_projected_batch(
    table: Table,
    rows: &[RowRef<'_>],
    columns: &[String],
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = table.schema();
    let keep: Vec<bool> = schema.fields().iter().map(|f| columns.iter().any(|c| c == f.name())).collect();
    let fields: Vec<_> = schema.fields().iter().zip(&keep).filter(|(_, k)| **k).map(|(f, _)| f.clone()).collect();
    let arrays = build_columns(table, rows, &Layout::default(), keep).0;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
}

/// How many rows ahead of the one being copied its texts and attributes are prefetched (twice
/// as far, the row itself).
const PREFETCH_AHEAD: usize = 8;

/// Rows are copied in the segment's order, not the order they were applied in, so each one
/// is far in memory from the last (docs/BENCHMARKS.md, "Rows prefetched at flush"). Asks for
/// the memory that copying the rows after row `i` will read, each step reading only what an
/// earlier one asked for.
fn prefetch_ahead(rows: &[RowRef<'_>], i: usize) {
    use super::prefetch::{line, slice, text, value};
    if let Some(r) = rows.get(i + 2 * PREFETCH_AHEAD) {
        value(r.row);
    }
    if let Some(r) = rows.get(i + PREFETCH_AHEAD) {
        match r.row {
            Row::Span(s) => {
                for t in [&s.trace_id, &s.span_id, &s.parent_span_id, &s.service_name, &s.operation] {
                    line(t.as_ptr());
                }
            }
            Row::Log(l) => {
                text(l.message.as_bytes());
                for t in [&l.service, &l.trace_id, &l.span_id] {
                    line(t.as_ptr());
                }
            }
            Row::Event(e) => {
                text(e.properties_json.as_bytes());
                for t in [&e.distinct_id, &e.event, &e.uuid] {
                    line(t.as_ptr());
                }
            }
            _ => {}
        }
        if let Some(attributes) = r.row.attributes() {
            slice(&attributes.0[..]);
        }
    }
}

/// The columns of `rows` that `keep` names (per schema field), the attribute columns `layout`
/// splits out, and the parent references it stores.
fn build_columns<'l>(
    table: Table,
    rows: &[RowRef<'_>],
    layout: &'l Layout,
    keep: Vec<bool>,
) -> (Vec<ArrayRef>, super::attribute_columns::Split<'l>, Vec<i32>) {
    let schema = table.schema();
    let attributes = schema.index_of("attributes").is_ok_and(|i| keep[i]);
    let hex_ids = if layout.hex_ids { super::layout::hex_id_columns(table) } else { &[] };
    let mut cols = Columns::new(&schema, rows.len(), keep, hex_ids);
    let mut split = super::attribute_columns::Split::new(&layout.attribute_keys, rows.len());
    let parent_refs = if layout.parent_refs { super::layout::parent_refs(rows) } else { Vec::new() };
    for (i, r) in rows.iter().enumerate() {
        prefetch_ahead(rows, i);
        let (p, b) = (V::S(r.project), V::U4(r.batch));
        match r.row {
            Row::Span(s) => cols.push(&[
                p,
                V::S(&s.trace_id),
                V::I(s.start_unix_nanos),
                V::S(&s.span_id),
                V::S(if parent_refs.get(i).is_some_and(|d| *d != 0) { "" } else { &s.parent_span_id }),
                V::S(&s.service_name),
                V::S(&s.operation),
                V::I(layout.stored_duration(s.duration_nanos)),
                V::I4(s.status.code()),
                V::B(if attributes { split.push(&s.attributes) } else { &[] }),
                b,
            ]),
            Row::TraceSummary(t) => cols.push(&[
                p,
                V::S(&t.trace_id),
                V::I(t.start_unix_nanos),
                V::I(t.end_unix_nanos),
                V::S(&t.root_service),
                V::S(&t.root_operation),
                V::U4(t.span_count),
                V::U4(t.error_count),
                V::L(&t.services),
                b,
            ]),
            Row::SpanRollup(r) | Row::SpanHourRollup(r) | Row::SpanDayRollup(r) => cols.push(&[
                p,
                V::S(&r.service),
                V::S(&r.operation),
                V::I(r.bucket_unix_nanos),
                V::U(Some(r.totals.count)),
                V::U(Some(r.totals.errors)),
                V::B(&super::rollup::encode_durations(&r.totals)),
                b,
            ]),
            Row::Log(l) => cols.push(&[
                p,
                V::I(l.unix_nanos),
                V::I4(l.level.code()),
                V::S(&l.service),
                V::S(&l.message),
                V::S(&l.trace_id),
                V::S(&l.span_id),
                V::B(if attributes { split.push(&l.attributes) } else { &[] }),
                b,
            ]),
            Row::HostMetric(m) => cols.push(&[
                p,
                V::S(&m.hostname),
                V::I(m.unix_nanos),
                V::F(m.cpu_percent),
                V::U(m.memory_used_bytes),
                V::U(m.memory_total_bytes),
                V::F(m.disk_used_percent),
                V::F(m.network_rx_bytes_per_sec),
                V::F(m.network_tx_bytes_per_sec),
                V::B(if attributes { split.push(&m.attributes) } else { &[] }),
                b,
            ]),
            Row::HostRollup(r) => {
                let mut values = vec![p, V::S(&r.hostname), V::I(r.means.start_unix_nanos)];
                for m in r.means.means() {
                    let m = m.unwrap_or_default();
                    values.extend([V::F(Some(m.sum)), V::U(Some(m.count))]);
                }
                values.push(b);
                cols.push(&values)
            }
            Row::Event(e) => cols.push(&[
                p,
                V::S(&e.distinct_id),
                V::I(e.unix_nanos),
                V::S(&e.event),
                V::S(&e.uuid),
                V::S(&e.properties_json),
                b,
            ]),
            Row::EventRollup(r) => cols.push(&[p, V::S(&r.event), V::I(r.hour_unix_nanos), V::U(Some(r.count)), b]),
            Row::Replay(r) => cols.push(&[
                p,
                V::S(&r.session_id),
                V::I(r.unix_nanos),
                V::S(&r.distinct_id),
                V::S(&r.window_id),
                V::I4(r.event_type),
                V::S(&r.data_json),
                V::S(&r.uuid),
                b,
            ]),
        }
        debug_assert_eq!(r.row.table(), table, "row of another table");
    }
    (cols.finish(), split, parent_refs)
}

/// The record batch of `rows` (one row group) as a segment of `layout` stores it.
pub fn to_segment_batch(
    table: Table,
    rows: &[RowRef<'_>],
    layout: &Layout,
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = table.schema();
    let (mut arrays, split, parent_refs) = build_columns(table, rows, layout, vec![true; schema.fields().len()]);
    if *layout == Layout::default() {
        return RecordBatch::try_new(schema, arrays);
    }
    if let (true, Ok(end), Ok(start)) = (layout.end_offsets, schema.index_of("end_ns"), schema.index_of("start_ns")) {
        let int64 = |i: usize| arrays[i].as_any().downcast_ref::<Int64Array>().expect("times are int64").values();
        let offsets: Vec<i64> = int64(end).iter().zip(int64(start)).map(|(e, s)| e.wrapping_sub(*s)).collect();
        arrays[end] = Arc::new(Int64Array::from(offsets));
    }
    if layout.parent_refs {
        arrays.push(Arc::new(Int32Array::from(parent_refs)));
    }
    arrays.extend(split.finish());
    RecordBatch::try_new(layout.schema(table), arrays)
}

/// Typed access to the columns of a record batch read from a segment (or projected from one).
pub struct Cols<'a>(pub &'a RecordBatch);

impl<'a> Cols<'a> {
    fn get<T: 'static>(&self, name: &str) -> &'a T {
        self.0
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<T>())
            .unwrap_or_else(|| panic!("segment column {name} missing or of the wrong type"))
    }
    pub fn str(&self, name: &str) -> &'a StringArray {
        self.get(name)
    }
    /// A string column read either way ([`super::Scan::dictionaries`]).
    pub fn strings(&self, name: &str) -> Strings<'a> {
        let column = self.0.column_by_name(name);
        match column.and_then(|c| c.as_dictionary_opt::<Int32Type>()) {
            Some(d) => Strings::Dictionary {
                keys: d.keys().values(),
                values: d.values().as_any().downcast_ref().expect("a dictionary of strings"),
            },
            None => Strings::Plain(self.str(name)),
        }
    }
    pub fn i64(&self, name: &str) -> &'a Int64Array {
        self.get(name)
    }
    pub fn i32(&self, name: &str) -> &'a Int32Array {
        self.get(name)
    }
    pub fn u32(&self, name: &str) -> &'a UInt32Array {
        self.get(name)
    }
    pub fn u64(&self, name: &str) -> &'a UInt64Array {
        self.get(name)
    }
    pub fn f64(&self, name: &str) -> &'a Float64Array {
        self.get(name)
    }
    pub fn bin(&self, name: &str) -> &'a BinaryArray {
        self.get(name)
    }
    /// A string column as bytes, also in a segment that stores it as bytes (ids,
    /// [`super::hex_ids`]), before [`super::layout::assemble`].
    pub fn bytes(&self, name: &str) -> Bytes<'a> {
        match self.0.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<BinaryArray>()) {
            Some(b) => Bytes::Stored(b),
            None => Bytes::Text(self.str(name)),
        }
    }
    pub fn list(&self, name: &str) -> &'a ListArray {
        self.get(name)
    }
}

/// A string column as read: one string per row, or a key per row into distinct values, which
/// lets a reader do its per-value work once per key.
#[derive(Clone, Copy)]
pub enum Strings<'a> {
    Plain(&'a StringArray),
    Dictionary { keys: &'a [i32], values: &'a StringArray },
}

impl<'a> Strings<'a> {
    pub fn value(&self, i: usize) -> &'a str {
        match self {
            Strings::Plain(a) => a.value(i),
            Strings::Dictionary { keys, values } => values.value(keys[i] as usize),
        }
    }

    /// `f` of every row's value; of a dictionary column, computed once per dictionary entry
    /// (an event name column holds a few dozen names over thousands of rows).
    pub fn map<T: Copy>(&self, f: impl Fn(&str) -> T) -> Vec<T> {
        match self {
            Strings::Plain(a) => (0..a.len()).map(|i| f(a.value(i))).collect(),
            Strings::Dictionary { keys, values } => {
                let per_entry: Vec<T> = (0..values.len()).map(|k| f(values.value(k))).collect();
                keys.iter().map(|&k| per_entry[k as usize]).collect()
            }
        }
    }
}

/// See [`Cols::bytes`].
pub enum Bytes<'a> {
    Text(&'a StringArray),
    Stored(&'a BinaryArray),
}

impl<'a> Bytes<'a> {
    /// `None`: null (an id stored as null, see [`super::layout::stored_value`]).
    pub fn value(&self, i: usize) -> Option<&'a [u8]> {
        match self {
            Bytes::Text(a) => Some(a.value(i).as_bytes()),
            Bytes::Stored(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }
}

pub(crate) fn opt_f(a: &Float64Array, i: usize) -> Option<f64> {
    a.is_valid(i).then(|| a.value(i))
}
pub(crate) fn opt_u(a: &UInt64Array, i: usize) -> Option<u64> {
    a.is_valid(i).then(|| a.value(i))
}

pub fn string_list(a: &ListArray, i: usize) -> Vec<String> {
    let v = a.value(i);
    let s = v.as_any().downcast_ref::<StringArray>().expect("list of strings");
    (0..s.len()).map(|j| s.value(j).to_owned()).collect()
}

/// Rows of a record batch read back from a segment: (project, row, batch ordinal). Each
/// column is looked up once, not once per row (compaction reads every row through here).
pub fn from_record_batch(table: Table, rb: &RecordBatch) -> Vec<(String, Row, u32)> {
    let c = Cols(rb);
    let (project, batch) = (c.str("project"), c.u32("batch"));
    let each = |row: &dyn Fn(usize) -> Row| -> Vec<(String, Row, u32)> {
        (0..rb.num_rows()).map(|i| (project.value(i).to_owned(), row(i), batch.value(i))).collect()
    };
    let text = |name: &str| {
        let a = c.str(name);
        move |i: usize| a.value(i).to_owned()
    };
    let attributes = |name: &str| {
        let a = c.bin(name);
        move |i: usize| attribute::from_stored(a.value(i))
    };
    match table {
        Table::Spans => {
            let (trace_id, span_id, parent, service, operation) =
                (text("trace_id"), text("span_id"), text("parent_span_id"), text("service"), text("operation"));
            let (start, duration, status, attrs) =
                (c.i64("start_ns"), c.i64("duration_ns"), c.i32("status"), attributes("attributes"));
            each(&|i| {
                Row::Span(SpanRow {
                    trace_id: trace_id(i),
                    span_id: span_id(i),
                    parent_span_id: parent(i),
                    service_name: service(i),
                    operation: operation(i),
                    start_unix_nanos: start.value(i),
                    duration_nanos: duration.value(i) as u64,
                    status: SpanStatus::from_code(status.value(i)),
                    attributes: attrs(i),
                })
            })
        }
        Table::TraceSummaries => {
            let (trace_id, root_service, root_operation) =
                (text("trace_id"), text("root_service"), text("root_operation"));
            let (start, end, spans, errors, services) =
                (c.i64("start_ns"), c.i64("end_ns"), c.u32("span_count"), c.u32("error_count"), c.list("services"));
            each(&|i| {
                Row::TraceSummary(TraceSummary {
                    trace_id: trace_id(i),
                    start_unix_nanos: start.value(i),
                    end_unix_nanos: end.value(i),
                    root_service: root_service(i),
                    root_operation: root_operation(i),
                    span_count: spans.value(i),
                    error_count: errors.value(i),
                    services: string_list(services, i),
                })
            })
        }
        Table::SpanRollups | Table::SpanHourRollups | Table::SpanDayRollups => {
            let (service, operation) = (text("service"), text("operation"));
            let (bucket, count, errors, durations) =
                (c.i64(table.time_column()), c.u64("count"), c.u64("errors"), c.bin("durations"));
            let row = super::rollup::span_rollup_row(table);
            each(&|i| {
                let (duration_sum_ns, latency) =
                    super::rollup::decode_durations(durations.value(i)).expect("rollups of a readable segment decode");
                row(SpanRollup {
                    service: service(i),
                    operation: operation(i),
                    bucket_unix_nanos: bucket.value(i),
                    totals: SpanTotals { count: count.value(i), errors: errors.value(i), duration_sum_ns, latency },
                })
            })
        }
        Table::Logs => {
            let (service, message, trace_id, span_id) =
                (text("service"), text("message"), text("trace_id"), text("span_id"));
            let (time, level, attrs) = (c.i64("time_ns"), c.i32("level"), attributes("attributes"));
            each(&|i| {
                Row::Log(LogRow {
                    unix_nanos: time.value(i),
                    level: LogLevel::from_code(level.value(i)),
                    service: service(i),
                    message: message(i),
                    trace_id: trace_id(i),
                    span_id: span_id(i),
                    attributes: attrs(i),
                })
            })
        }
        Table::HostMetrics => {
            let (hostname, attrs) = (text("hostname"), attributes("attributes"));
            let (time, cpu, used, total) =
                (c.i64("time_ns"), c.f64("cpu_percent"), c.u64("memory_used_bytes"), c.u64("memory_total_bytes"));
            let (disk, rx, tx) =
                (c.f64("disk_used_percent"), c.f64("network_rx_bytes_per_sec"), c.f64("network_tx_bytes_per_sec"));
            each(&|i| {
                Row::HostMetric(HostMetricRow {
                    unix_nanos: time.value(i),
                    hostname: hostname(i),
                    cpu_percent: opt_f(cpu, i),
                    memory_used_bytes: opt_u(used, i),
                    memory_total_bytes: opt_u(total, i),
                    disk_used_percent: opt_f(disk, i),
                    network_rx_bytes_per_sec: opt_f(rx, i),
                    network_tx_bytes_per_sec: opt_f(tx, i),
                    attributes: attrs(i),
                })
            })
        }
        Table::HostRollups => {
            let (hostname, rollups) = (text("hostname"), super::rollup::HostRollupColumns::of(&c));
            each(&|i| Row::HostRollup(HostRollup { hostname: hostname(i), means: rollups.bucket(i) }))
        }
        Table::Events => {
            let (uuid, event, distinct_id, properties) =
                (text("uuid"), text("event"), text("distinct_id"), text("properties"));
            let time = c.i64("time_ns");
            each(&|i| {
                Row::Event(Event {
                    uuid: uuid(i),
                    event: event(i),
                    distinct_id: distinct_id(i),
                    unix_nanos: time.value(i),
                    properties_json: properties(i),
                })
            })
        }
        Table::EventRollups => {
            let event = text("event");
            let (hour, count) = (c.i64("hour_ns"), c.u64("count"));
            each(&|i| {
                Row::EventRollup(EventRollup { event: event(i), hour_unix_nanos: hour.value(i), count: count.value(i) })
            })
        }
        Table::ReplayEvents => {
            let (session_id, distinct_id, window_id, data, uuid) =
                (text("session_id"), text("distinct_id"), text("window_id"), text("data"), text("uuid"));
            let (time, event_type) = (c.i64("time_ns"), c.i32("event_type"));
            each(&|i| {
                Row::Replay(ReplayEvent {
                    session_id: session_id(i),
                    distinct_id: distinct_id(i),
                    window_id: window_id(i),
                    unix_nanos: time.value(i),
                    event_type: event_type.value(i),
                    data_json: data(i),
                    uuid: uuid(i),
                })
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::row::{Attribute, Value};
    use sextant_proto::convert::persist_row::encode_attributes;

    fn every_table_row() -> Vec<Row> {
        let attrs = encode_attributes(vec![Attribute { key: "http.status_code".into(), value: Some(Value::Int(200)) }]);
        vec![
            Row::Span(Span {
                trace_id: "t".into(),
                span_id: "s".into(),
                parent_span_id: "p".into(),
                service_name: "api".into(),
                operation: "GET /".into(),
                start_unix_nanos: 5,
                duration_nanos: 7,
                status: SpanStatus::Error,
                attributes: attrs.clone(),
            }),
            Row::TraceSummary(TraceSummary {
                trace_id: "t".into(),
                start_unix_nanos: 1,
                end_unix_nanos: 9,
                root_service: "api".into(),
                root_operation: "GET /".into(),
                span_count: 3,
                error_count: 1,
                services: vec!["api".into(), "db".into()],
            }),
            Row::Log(LogRecord {
                unix_nanos: 3,
                level: LogLevel::Error,
                service: "api".into(),
                message: "boom".into(),
                trace_id: "t".into(),
                span_id: "s".into(),
                attributes: attrs.clone(),
            }),
            Row::HostMetric(HostMetric {
                unix_nanos: 4,
                hostname: "h".into(),
                cpu_percent: Some(12.5),
                memory_used_bytes: None,
                memory_total_bytes: Some(10),
                disk_used_percent: None,
                network_rx_bytes_per_sec: Some(1.0),
                network_tx_bytes_per_sec: None,
                attributes: attrs,
            }),
            Row::Event(Event {
                uuid: "u".into(),
                event: "signup".into(),
                distinct_id: "d".into(),
                unix_nanos: 8,
                properties_json: r#"{"plan":"pro"}"#.into(),
            }),
            Row::Replay(ReplayEvent {
                session_id: "sess".into(),
                distinct_id: "d".into(),
                window_id: "w".into(),
                unix_nanos: 6,
                event_type: 3,
                data_json: "{}".into(),
                uuid: "r".into(),
            }),
        ]
    }

    #[test]
    fn every_table_round_trips_through_arrow() {
        for row in every_table_row() {
            let table = row.table();
            let rb = to_record_batch(table, &[RowRef::new("p", &row, 4)]).unwrap();
            assert_eq!(rb.schema(), table.schema());
            assert_eq!(from_record_batch(table, &rb), vec![("p".to_owned(), row.clone(), 4)], "{}", table.name());
        }
    }

    /// A projected batch is the whole batch's projection, for every subset of columns of one
    /// to three (named in any order), of every table.
    #[test]
    fn a_projected_batch_equals_the_projection_of_the_whole_one() {
        for row in every_table_row() {
            let table = row.table();
            let rows = [RowRef::new("p", &row, 4)];
            let whole = to_record_batch(table, &rows).unwrap();
            let names: Vec<String> = table.schema().fields().iter().map(|f| f.name().clone()).collect();
            for a in 0..names.len() {
                for b in a..names.len() {
                    for c in b..names.len() {
                        let picked = vec![names[c].clone(), names[a].clone(), names[b].clone()];
                        let mut indices = vec![a, b, c];
                        indices.dedup();
                        let projected = to_projected_batch(table, &rows, &picked).unwrap();
                        assert_eq!(projected, whole.project(&indices).unwrap(), "{} {picked:?}", table.name());
                    }
                }
            }
        }
    }
}
