//! How a segment lays out a table on disk, where it differs from the table's schema: frequent
//! attribute keys in columns of their own ([`super::attribute_columns`]), and a span's parent
//! as a reference to the parent's row instead of its id.
//!
//! Parent references: a trace's spans are stored together (segments sort by trace id), and a
//! parent is almost always among them, so `parent_ref` = (row − parent's row) replaces the
//! parent id (64 random bits as 16 hex characters, ~5 B per span after compression) by a small
//! integer (well under 1 B). References never cross a row group, and readers get every row
//! group whole or a trace whole, so the parent's row is always in the same batch.
//!
//! Durations: when every span of a segment has a duration in whole microseconds or
//! milliseconds (JSON ingest takes milliseconds with three decimals), they are stored divided
//! by that unit, noted in the column's metadata; the low digits of `× 1000` otherwise cost
//! about a byte per span after compression.
//!
//! Readers never see this layout: [`assemble`] turns a batch read from a segment back into the
//! table's schema first.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{Array, ArrayRef, BinaryArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use prost::Message;
use sextant_proto::{AnyValue, KeyValue};

use super::attribute_columns::{self, Key, PREFIX};
use super::table::{decode_attributes, encode_attributes, Row, RowRef, Table};

pub const PARENT_REF: &str = "parent_ref";
/// Metadata key of the `duration_ns` field: nanoseconds per stored unit.
const DURATION_UNIT: &str = "sextant.unit";

/// The physical layout of one segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Attribute keys stored as `attr:<key>` columns, sorted by name.
    pub attribute_keys: Vec<Key>,
    /// Spans: parents as `parent_ref` where the parent is in the same row group.
    pub parent_refs: bool,
    /// Spans: durations are stored divided by this (nanoseconds per unit).
    pub duration_unit: Option<i64>,
}

impl Layout {
    /// The layout for a segment of `rows`.
    pub fn choose(table: Table, rows: &[RowRef<'_>]) -> Layout {
        let duration_unit = (table == Table::Spans)
            .then(|| {
                [1_000_000, 1_000].into_iter().find(|unit| {
                    rows.iter().all(|r| matches!(r.row, Row::Span(s) if s.duration_nanos % *unit as u64 == 0))
                })
            })
            .flatten();
        Layout { attribute_keys: attribute_columns::choose(rows), parent_refs: table == Table::Spans, duration_unit }
    }

    /// A span's duration as stored.
    pub fn stored_duration(&self, nanos: u64) -> i64 {
        nanos as i64 / self.duration_unit.unwrap_or(1)
    }

    /// The table's schema, then `parent_ref`, then the attribute columns.
    pub fn schema(&self, table: Table) -> SchemaRef {
        let schema = table.schema();
        if *self == Layout::default() {
            return schema;
        }
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        if let (Some(unit), Ok(i)) = (self.duration_unit, schema.index_of("duration_ns")) {
            fields[i] = fields[i].clone().with_metadata(HashMap::from([(DURATION_UNIT.to_owned(), unit.to_string())]));
        }
        if self.parent_refs {
            fields.push(Field::new(PARENT_REF, DataType::Int32, false));
        }
        fields.extend(self.attribute_keys.iter().map(|k| Field::new(k.column(), DataType::Binary, true)));
        Arc::new(Schema::new(fields))
    }
}

/// For each span of `rows` (sorted by project and trace, one row group), the distance back to
/// its parent's row (negative: forward), or 0 where the parent is not among them.
pub fn parent_refs(rows: &[RowRef<'_>]) -> Vec<i32> {
    let mut refs = vec![0; rows.len()];
    let span = |i: usize| match rows[i].row {
        Row::Span(s) => Some(s),
        _ => None,
    };
    let mut start = 0;
    while start < rows.len() {
        let key = |i: usize| (rows[i].project, span(i).map(|s| s.trace_id.as_str()));
        let end = (start..rows.len()).find(|&i| key(i) != key(start)).unwrap_or(rows.len());
        let by_id: HashMap<&str, usize> =
            (start..end).filter_map(|i| span(i).map(|s| (s.span_id.as_str(), i))).collect();
        for (i, slot) in refs.iter_mut().enumerate().take(end).skip(start) {
            let Some(s) = span(i).filter(|s| !s.parent_span_id.is_empty()) else { continue };
            if let Some(&p) = by_id.get(s.parent_span_id.as_str()).filter(|&&p| p != i) {
                *slot = i as i32 - p as i32;
            }
        }
        start = end;
    }
    refs
}

/// Columns to read beyond `requested` so that [`assemble`] can rebuild them.
pub fn companion_columns(requested: &[String], file: &Schema) -> Vec<usize> {
    let wants = |c: &str| requested.iter().any(|r| r == c);
    let mut out = Vec::new();
    if wants("attributes") {
        out.extend(file.fields().iter().enumerate().filter(|(_, f)| f.name().starts_with(PREFIX)).map(|(i, _)| i));
    }
    if wants("parent_span_id") {
        out.extend([PARENT_REF, "span_id"].iter().filter_map(|c| file.index_of(c).ok()));
    }
    out
}

/// A batch read from a segment in the table's schema (restricted to the columns read).
pub fn assemble(rb: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let schema = rb.schema();
    let physical = |name: &str| name == PARENT_REF || name.starts_with(PREFIX);
    let scaled = |f: &Field| f.metadata().contains_key(DURATION_UNIT);
    if !schema.fields().iter().any(|f| physical(f.name()) || scaled(f)) {
        return Ok(rb);
    }
    let keep: Vec<usize> = (0..schema.fields().len()).filter(|&i| !physical(schema.field(i).name())).collect();
    let mut arrays: Vec<ArrayRef> = keep.iter().map(|&i| rb.column(i).clone()).collect();
    let position = |name: &str| keep.iter().position(|&i| schema.field(i).name() == name);
    if let Some(pos) = position("attributes") {
        arrays[pos] = whole_attributes(&rb)?;
    }
    if let (Some(pos), Ok(refs)) = (position("parent_span_id"), schema.index_of(PARENT_REF)) {
        arrays[pos] = parents(&rb, refs)?;
    }
    if let Some(pos) = position("duration_ns") {
        if let Some(unit) = schema.field(keep[pos]).metadata().get(DURATION_UNIT) {
            let unit: i64 = unit.parse().map_err(|_| ArrowError::SchemaError(format!("duration unit {unit}")))?;
            let stored = arrays[pos].as_any().downcast_ref::<Int64Array>().expect("duration_ns is int64");
            arrays[pos] = Arc::new(stored.unary::<_, arrow_array::types::Int64Type>(|d| d * unit));
        }
    }
    // The table's fields, without the layout's metadata.
    let fields: Vec<Field> = keep.iter().map(|&i| schema.field(i).clone().with_metadata(HashMap::new())).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
}

fn binary(rb: &RecordBatch, i: usize) -> &BinaryArray {
    rb.column(i).as_any().downcast_ref::<BinaryArray>().expect("binary column")
}

fn whole_attributes(rb: &RecordBatch) -> Result<ArrayRef, ArrowError> {
    let schema = rb.schema();
    let rest = binary(rb, schema.index_of("attributes")?);
    let columns: Vec<(&str, &BinaryArray)> = schema
        .fields()
        .iter()
        .enumerate()
        .filter_map(|(i, f)| Some((f.name().strip_prefix(PREFIX)?, binary(rb, i))))
        .collect();
    let mut whole = BinaryBuilder::with_capacity(rb.num_rows(), rest.value_data().len() * 2);
    for i in 0..rb.num_rows() {
        let mut attrs = Vec::with_capacity(columns.len() + 4);
        for (key, col) in &columns {
            if col.is_valid(i) {
                let value = AnyValue::decode(col.value(i)).map_err(|e| ArrowError::ParseError(e.to_string()))?;
                attrs.push(KeyValue { key: (*key).to_owned(), value: Some(value) });
            }
        }
        // Column values first: `encode_attributes` sorts stably by key, and a column holds the
        // first of a repeated key.
        attrs.extend(decode_attributes(rest.value(i)));
        whole.append_value(encode_attributes(&attrs));
    }
    Ok(Arc::new(whole.finish()))
}

fn parents(rb: &RecordBatch, refs: usize) -> Result<ArrayRef, ArrowError> {
    let schema = rb.schema();
    let strings = |name: &str| -> Result<&StringArray, ArrowError> {
        rb.column(schema.index_of(name)?)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| ArrowError::SchemaError(format!("{name} is not a string column")))
    };
    let (stored, ids) = (strings("parent_span_id")?, strings("span_id")?);
    let refs = rb.column(refs).as_any().downcast_ref::<Int32Array>().expect("parent_ref is int32");
    let mut out = StringBuilder::with_capacity(rb.num_rows(), ids.value_data().len());
    for i in 0..rb.num_rows() {
        match refs.value(i) {
            0 => out.append_value(stored.value(i)),
            d => {
                let p = usize::try_from(i as i64 - i64::from(d))
                    .ok()
                    .filter(|&p| p < rb.num_rows())
                    .ok_or_else(|| ArrowError::ComputeError("a parent reference leaves its batch".into()))?;
                out.append_value(ids.value(p));
            }
        }
    }
    Ok(Arc::new(out.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::table::{from_record_batch, to_segment_batch};
    use proptest::prelude::*;
    use sextant_proto::Span;

    proptest! {
        /// Parents within the trace, missing, empty, the span itself, or ids that repeat
        /// within a trace or across traces: every span reads back with its own parent id.
        #[test]
        fn spans_read_back_with_their_parents(spans in prop::collection::vec((0u8..3, 0u8..12, 0u8..14), 1..80)) {
            let mut rows: Vec<(String, Row)> = spans
                .iter()
                .map(|(t, id, parent)| {
                    let project = if *t == 2 { "q" } else { "p" }.to_owned();
                    let span = Span {
                        duration_nanos: u64::from(*id) * if *parent % 3 == 0 { 1_000_000 } else { 1_000 } + u64::from(*t == 1),
                        trace_id: format!("t{}", t % 2),
                        span_id: format!("s{id}"),
                        parent_span_id: if *parent >= 12 { String::new() } else { format!("s{parent}") },
                        ..Default::default()
                    };
                    (project, Row::Span(span))
                })
                .collect();
            rows.sort_by(|a, b| (a.0.as_str(), a.1.sort_key()).cmp(&(b.0.as_str(), b.1.sort_key())));
            let refs: Vec<RowRef<'_>> = rows.iter().map(|(p, row)| RowRef { project: p, row, batch: 0 }).collect();
            let layout = Layout::choose(Table::Spans, &refs);
            let back = from_record_batch(Table::Spans, &assemble(to_segment_batch(Table::Spans, &refs, &layout).unwrap()).unwrap());
            let back: Vec<(String, Row)> = back.into_iter().map(|(p, row, _)| (p, row)).collect();
            prop_assert_eq!(back, rows);
        }
    }

    #[test]
    fn parents_in_the_same_trace_become_references() {
        let span = |id: &str, parent: &str| {
            Row::Span(Span {
                trace_id: "t".into(),
                span_id: id.into(),
                parent_span_id: parent.into(),
                ..Default::default()
            })
        };
        let rows = [span("a", ""), span("b", "a"), span("c", "a"), span("d", "elsewhere"), span("e", "c")];
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef { project: "p", row, batch: 0 }).collect();
        assert_eq!(parent_refs(&refs), vec![0, 1, 2, 0, 2]);
    }

    /// Through a real segment file: the layout (units in field metadata, parent references,
    /// attribute columns) survives Parquet and comes back as the rows written.
    #[test]
    fn a_segment_file_reads_back_the_rows_written() {
        let dir = tempfile::tempdir().unwrap();
        for unit in [1_000_000u64, 1_000, 1] {
            let rows: Vec<Row> = (0..20u64)
                .map(|i| {
                    Row::Span(Span {
                        trace_id: format!("t{}", i / 5),
                        span_id: format!("s{i}"),
                        parent_span_id: if i % 5 == 0 { String::new() } else { format!("s{}", i - 1) },
                        duration_nanos: (i + 1) * unit + u64::from(unit == 1),
                        attributes: vec![KeyValue {
                            key: "k".into(),
                            value: Some(AnyValue { value: Some(sextant_proto::any_value::Value::IntValue(i as i64)) }),
                        }],
                        ..Default::default()
                    })
                })
                .collect();
            let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef { project: "p", row, batch: 0 }).collect();
            let meta = crate::segment::file::write(dir.path(), unit, Table::Spans, 0, &refs, &[7]).unwrap();
            let segment = crate::segment::Segment::open(dir.path(), meta).unwrap();
            let back: Vec<Row> = segment.read(None).unwrap().into_iter().map(|(_, row, _)| row).collect();
            assert_eq!(back, rows, "unit {unit}");
            let trace: Vec<Row> = segment.trace("p", "t1").unwrap().into_iter().map(|(row, _)| row).collect();
            assert_eq!(trace, rows[5..10]);
        }
    }
}
