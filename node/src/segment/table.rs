//! The tables of a shard and their columnar layout: rows (as the router encoded them) to Arrow
//! record batches and back. Every row carries its project; `batch` is the row's index into
//! the segment's list of Raft batch ids, so an abort can hide rows already flushed.

use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int32Builder, Int64Builder, StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{
    Array, ArrayRef, BinaryArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array,
    UInt64Array,
};
use arrow_array::builder::BinaryBuilder;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use prost::Message;
use serde::{Deserialize, Serialize};
use sextant_proto::{HostMetric, KeyValue, LogRecord, Span};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Table {
    Spans,
    Logs,
    HostMetrics,
}

impl Table {
    pub const ALL: [Table; 3] = [Table::Spans, Table::Logs, Table::HostMetrics];

    pub fn name(self) -> &'static str {
        match self {
            Table::Spans => "spans",
            Table::Logs => "logs",
            Table::HostMetrics => "host_metrics",
        }
    }

    pub fn schema(self) -> SchemaRef {
        let s = |n: &str| Field::new(n, DataType::Utf8, false);
        let i64f = |n: &str| Field::new(n, DataType::Int64, false);
        let common_tail =
            [Field::new("attributes", DataType::Binary, false), Field::new("batch", DataType::UInt32, false)];
        let mut fields = match self {
            Table::Spans => vec![
                s("project"),
                s("trace_id"),
                i64f("start_ns"),
                s("span_id"),
                s("parent_span_id"),
                s("service"),
                s("operation"),
                i64f("duration_ns"),
                Field::new("status", DataType::Int32, false),
            ],
            Table::Logs => vec![
                s("project"),
                i64f("time_ns"),
                Field::new("level", DataType::Int32, false),
                s("service"),
                s("message"),
                s("trace_id"),
                s("span_id"),
            ],
            Table::HostMetrics => vec![
                s("project"),
                s("hostname"),
                i64f("time_ns"),
                Field::new("cpu_percent", DataType::Float64, true),
                Field::new("memory_used_bytes", DataType::UInt64, true),
                Field::new("memory_total_bytes", DataType::UInt64, true),
                Field::new("disk_used_percent", DataType::Float64, true),
                Field::new("network_rx_bytes_per_sec", DataType::Float64, true),
                Field::new("network_tx_bytes_per_sec", DataType::Float64, true),
            ],
        };
        fields.extend(common_tail);
        Arc::new(Schema::new(fields))
    }

    /// Columns the segment is sorted by, in order (also its Parquet sorting columns).
    pub fn sort_columns(self) -> &'static [&'static str] {
        match self {
            // A trace is read whole: keeping its spans together makes lookups touch one page
            // and lets trace ids compress to almost nothing.
            Table::Spans => &["project", "trace_id", "start_ns"],
            Table::Logs => &["project", "time_ns"],
            Table::HostMetrics => &["project", "hostname", "time_ns"],
        }
    }
}

/// One row of any table, as applied.
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    Span(Span),
    Log(LogRecord),
    HostMetric(HostMetric),
}

impl Row {
    pub fn table(&self) -> Table {
        match self {
            Row::Span(_) => Table::Spans,
            Row::Log(_) => Table::Logs,
            Row::HostMetric(_) => Table::HostMetrics,
        }
    }

    pub fn time_ns(&self) -> i64 {
        match self {
            Row::Span(s) => s.start_unix_nanos,
            Row::Log(l) => l.unix_nanos,
            Row::HostMetric(m) => m.unix_nanos,
        }
    }

    /// The sort key within a segment after the project (see [`Table::sort_columns`]).
    pub fn sort_key(&self) -> (&str, i64) {
        match self {
            Row::Span(s) => (&s.trace_id, s.start_unix_nanos),
            Row::Log(l) => ("", l.unix_nanos),
            Row::HostMetric(m) => (&m.hostname, m.unix_nanos),
        }
    }
}

pub fn encode_attributes(attrs: &[KeyValue]) -> Vec<u8> {
    let mut out = Vec::new();
    for kv in attrs {
        // Encoding into a Vec cannot fail.
        let _ = kv.encode_length_delimited(&mut out);
    }
    out
}

pub fn decode_attributes(mut bytes: &[u8]) -> Vec<KeyValue> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        match KeyValue::decode_length_delimited(&mut bytes) {
            Ok(kv) => out.push(kv),
            Err(_) => break,
        }
    }
    out
}

/// A row with what the segment stores beside it.
pub struct RowRef<'a> {
    pub project: &'a str,
    pub row: &'a Row,
    pub batch: u32,
}

/// Builds the record batch of `rows`, which must all belong to `table`.
pub fn to_record_batch(table: Table, rows: &[RowRef<'_>]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let n = rows.len();
    let mut project = StringBuilder::with_capacity(n, n * 36);
    let mut attributes = BinaryBuilder::with_capacity(n, n * 64);
    let mut batch = UInt32Builder::with_capacity(n);
    for r in rows {
        project.append_value(r.project);
        batch.append_value(r.batch);
    }
    let columns: Vec<ArrayRef> = match table {
        Table::Spans => {
            let (mut trace, mut start, mut span, mut parent) = (
                StringBuilder::with_capacity(n, n * 32),
                Int64Builder::with_capacity(n),
                StringBuilder::with_capacity(n, n * 16),
                StringBuilder::with_capacity(n, n * 16),
            );
            let (mut service, mut operation, mut duration, mut status) = (
                StringBuilder::with_capacity(n, n * 8),
                StringBuilder::with_capacity(n, n * 16),
                Int64Builder::with_capacity(n),
                Int32Builder::with_capacity(n),
            );
            for r in rows {
                let Row::Span(s) = r.row else { unreachable!("row of another table") };
                trace.append_value(&s.trace_id);
                start.append_value(s.start_unix_nanos);
                span.append_value(&s.span_id);
                parent.append_value(&s.parent_span_id);
                service.append_value(&s.service_name);
                operation.append_value(&s.operation);
                duration.append_value(s.duration_nanos as i64);
                status.append_value(s.status);
                attributes.append_value(encode_attributes(&s.attributes));
            }
            vec![
                Arc::new(project.finish()),
                Arc::new(trace.finish()),
                Arc::new(start.finish()),
                Arc::new(span.finish()),
                Arc::new(parent.finish()),
                Arc::new(service.finish()),
                Arc::new(operation.finish()),
                Arc::new(duration.finish()),
                Arc::new(status.finish()),
            ]
        }
        Table::Logs => {
            let (mut time, mut level, mut service, mut message, mut trace, mut span) = (
                Int64Builder::with_capacity(n),
                Int32Builder::with_capacity(n),
                StringBuilder::with_capacity(n, n * 8),
                StringBuilder::with_capacity(n, n * 100),
                StringBuilder::with_capacity(n, n * 32),
                StringBuilder::with_capacity(n, n * 16),
            );
            for r in rows {
                let Row::Log(l) = r.row else { unreachable!("row of another table") };
                time.append_value(l.unix_nanos);
                level.append_value(l.level);
                service.append_value(&l.service);
                message.append_value(&l.message);
                trace.append_value(&l.trace_id);
                span.append_value(&l.span_id);
                attributes.append_value(encode_attributes(&l.attributes));
            }
            vec![
                Arc::new(project.finish()),
                Arc::new(time.finish()),
                Arc::new(level.finish()),
                Arc::new(service.finish()),
                Arc::new(message.finish()),
                Arc::new(trace.finish()),
                Arc::new(span.finish()),
            ]
        }
        Table::HostMetrics => {
            let mut host = StringBuilder::with_capacity(n, n * 16);
            let mut time = Int64Builder::with_capacity(n);
            let (mut cpu, mut used, mut total) =
                (Float64Builder::with_capacity(n), UInt64Builder::with_capacity(n), UInt64Builder::with_capacity(n));
            let (mut disk, mut rx, mut tx) =
                (Float64Builder::with_capacity(n), Float64Builder::with_capacity(n), Float64Builder::with_capacity(n));
            for r in rows {
                let Row::HostMetric(m) = r.row else { unreachable!("row of another table") };
                host.append_value(&m.hostname);
                time.append_value(m.unix_nanos);
                cpu.append_option(m.cpu_percent);
                used.append_option(m.memory_used_bytes);
                total.append_option(m.memory_total_bytes);
                disk.append_option(m.disk_used_percent);
                rx.append_option(m.network_rx_bytes_per_sec);
                tx.append_option(m.network_tx_bytes_per_sec);
                attributes.append_value(encode_attributes(&m.attributes));
            }
            vec![
                Arc::new(project.finish()),
                Arc::new(host.finish()),
                Arc::new(time.finish()),
                Arc::new(cpu.finish()),
                Arc::new(used.finish()),
                Arc::new(total.finish()),
                Arc::new(disk.finish()),
                Arc::new(rx.finish()),
                Arc::new(tx.finish()),
            ]
        }
    };
    let mut columns = columns;
    columns.push(Arc::new(attributes.finish()));
    columns.push(Arc::new(batch.finish()));
    RecordBatch::try_new(table.schema(), columns)
}

fn col<'a, T: 'static>(rb: &'a RecordBatch, name: &str) -> &'a T {
    rb.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .unwrap_or_else(|| panic!("segment column {name} missing or of the wrong type"))
}

/// Rows of a record batch read back from a segment: (project, row, batch ordinal).
pub fn from_record_batch(table: Table, rb: &RecordBatch) -> Vec<(String, Row, u32)> {
    let project = col::<StringArray>(rb, "project");
    let attributes = col::<BinaryArray>(rb, "attributes");
    let batch = col::<UInt32Array>(rb, "batch");
    let opt_f = |a: &Float64Array, i: usize| a.is_valid(i).then(|| a.value(i));
    let opt_u = |a: &UInt64Array, i: usize| a.is_valid(i).then(|| a.value(i));
    (0..rb.num_rows())
        .map(|i| {
            let attrs = decode_attributes(attributes.value(i));
            let row = match table {
                Table::Spans => Row::Span(Span {
                    trace_id: col::<StringArray>(rb, "trace_id").value(i).to_owned(),
                    span_id: col::<StringArray>(rb, "span_id").value(i).to_owned(),
                    parent_span_id: col::<StringArray>(rb, "parent_span_id").value(i).to_owned(),
                    service_name: col::<StringArray>(rb, "service").value(i).to_owned(),
                    operation: col::<StringArray>(rb, "operation").value(i).to_owned(),
                    start_unix_nanos: col::<Int64Array>(rb, "start_ns").value(i),
                    duration_nanos: col::<Int64Array>(rb, "duration_ns").value(i) as u64,
                    status: col::<Int32Array>(rb, "status").value(i),
                    attributes: attrs,
                }),
                Table::Logs => Row::Log(LogRecord {
                    unix_nanos: col::<Int64Array>(rb, "time_ns").value(i),
                    level: col::<Int32Array>(rb, "level").value(i),
                    service: col::<StringArray>(rb, "service").value(i).to_owned(),
                    message: col::<StringArray>(rb, "message").value(i).to_owned(),
                    trace_id: col::<StringArray>(rb, "trace_id").value(i).to_owned(),
                    span_id: col::<StringArray>(rb, "span_id").value(i).to_owned(),
                    attributes: attrs,
                }),
                Table::HostMetrics => Row::HostMetric(HostMetric {
                    unix_nanos: col::<Int64Array>(rb, "time_ns").value(i),
                    hostname: col::<StringArray>(rb, "hostname").value(i).to_owned(),
                    cpu_percent: opt_f(col(rb, "cpu_percent"), i),
                    memory_used_bytes: opt_u(col(rb, "memory_used_bytes"), i),
                    memory_total_bytes: opt_u(col(rb, "memory_total_bytes"), i),
                    disk_used_percent: opt_f(col(rb, "disk_used_percent"), i),
                    network_rx_bytes_per_sec: opt_f(col(rb, "network_rx_bytes_per_sec"), i),
                    network_tx_bytes_per_sec: opt_f(col(rb, "network_tx_bytes_per_sec"), i),
                    attributes: attrs,
                }),
            };
            (project.value(i).to_owned(), row, batch.value(i))
        })
        .collect()
}
