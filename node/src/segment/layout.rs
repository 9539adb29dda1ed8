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
//! Trace ends: a trace summary stores its end as the time since its start (a trace lasts
//! milliseconds to seconds; its end as a time costs as many bytes as its start).
//!
//! Ids: the id columns of [`hex_id_columns`] are stored as bytes ([`super::hex_ids`]), their
//! width in the field's metadata ([`stored_value`] gives a queried id in that form).
//!
//! Readers never see this layout: [`assemble`] turns a batch read from a segment back into the
//! table's schema first.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{Array, ArrayRef, BinaryArray, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use rustc_hash::FxHashMap;

use super::attribute_columns::{self, Key};
use super::hex_ids;
use super::table::{same_project, Row, RowRef, Table};
use super::user_number::{USER, USER_ID};

pub const PARENT_REF: &str = "parent_ref";
/// Metadata key of the `duration_ns` field: nanoseconds per stored unit.
const DURATION_UNIT: &str = "sextant.unit";
/// Metadata key of a time field stored as the time since another field's.
const OFFSET_FROM: &str = "sextant.offset_from";
/// Metadata key of an id field stored as bytes: the ids' width in bytes.
const HEX_ID_WIDTH: &str = "sextant.hex_id_bytes";

/// The id columns a segment of `table` stores as bytes, with the ids' width. Where statistics
/// or row filters read them (a span's trace id), they compare the stored form: lowercase hex
/// sorts like its bytes, so the spans' order by trace id is kept.
pub fn hex_id_columns(table: Table) -> &'static [(&'static str, usize)] {
    match table {
        Table::Spans => &[("trace_id", 16), ("span_id", 8), ("parent_span_id", 8)],
        Table::TraceSummaries => &[("trace_id", 16)],
        Table::Logs => &[("trace_id", 16), ("span_id", 8)],
        _ => &[],
    }
}

/// The width of the ids of `field` if it holds ids as bytes.
pub fn hex_id_width(field: &Field) -> Option<usize> {
    field.metadata().get(HEX_ID_WIDTH)?.parse().ok()
}

/// `value` of the table's column `column` as a segment with the (file) schema `file` stores
/// it: what its statistics, bloom filter and stored values compare with. `None`: stored as
/// null (an empty id), which statistics and bloom filters do not hold.
pub fn stored_value<'v>(file: &Schema, column: &str, value: &'v str) -> Option<std::borrow::Cow<'v, [u8]>> {
    match file.field_with_name(column).ok().and_then(hex_id_width) {
        Some(_) if value.is_empty() => None,
        Some(width) => {
            let mut out = Vec::with_capacity(width + 1);
            hex_ids::encode(value, width, &mut out);
            Some(out.into())
        }
        None => Some(value.as_bytes().into()),
    }
}

/// The physical layout of one segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Attribute keys stored as `attr:<key>` columns, sorted by name.
    pub attribute_keys: Vec<Key>,
    /// Spans: parents as `parent_ref` where the parent is in the same row group.
    pub parent_refs: bool,
    /// Spans: durations are stored divided by this (nanoseconds per unit).
    pub duration_unit: Option<i64>,
    /// The columns of [`hex_id_columns`] hold ids as bytes.
    pub hex_ids: bool,
    /// Trace summaries: `end_ns` holds the time since `start_ns`.
    pub end_offsets: bool,
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
        Layout {
            attribute_keys: attribute_columns::choose(rows),
            parent_refs: table == Table::Spans,
            duration_unit,
            hex_ids: !hex_id_columns(table).is_empty(),
            end_offsets: table == Table::TraceSummaries,
        }
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
        if self.hex_ids {
            for &(name, width) in hex_id_columns(table) {
                let i = schema.index_of(name).expect("id column of the table");
                // Nullable: empty ids are stored as nulls.
                fields[i] = Field::new(name, DataType::Binary, true)
                    .with_metadata(HashMap::from([(HEX_ID_WIDTH.to_owned(), width.to_string())]));
            }
        }
        if let (true, Ok(i)) = (self.end_offsets, schema.index_of("end_ns")) {
            fields[i] = fields[i].clone().with_metadata(HashMap::from([(OFFSET_FROM.to_owned(), "start_ns".into())]));
        }
        if self.parent_refs {
            fields.push(Field::new(PARENT_REF, DataType::Int32, false));
        }
        fields.extend(self.attribute_keys.iter().flat_map(Key::fields));
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
    // One map for every trace, cleared in between (traces are a handful of spans each).
    let mut by_id: FxHashMap<&str, usize> = FxHashMap::default();
    let mut start = 0;
    while start < rows.len() {
        let trace = |i: usize| span(i).map(|s| s.trace_id.as_str());
        let same = |i: usize| trace(i) == trace(start) && same_project(rows[i].project, rows[start].project);
        let end = (start..rows.len()).find(|&i| !same(i)).unwrap_or(rows.len());
        by_id.clear();
        by_id.extend((start..end).filter_map(|i| span(i).map(|s| (s.span_id.as_str(), i))));
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

/// Whether `file` (a segment's schema as read) is one a segment of `table` is written with:
/// every column of the table, each of its type or of its stored form, and metadata the
/// readers can use. A corrupted footer is refused here rather than met by readers.
pub fn check_schema(table: Table, file: &Schema) -> Result<(), String> {
    let expected = table.schema();
    for f in expected.fields() {
        file.field_with_name(f.name()).map_err(|_| format!("column {} is missing", f.name()))?;
    }
    for f in file.fields() {
        let name = f.name().as_str();
        let wrong = || Err(format!("column {name} has an unexpected type or metadata"));
        if name == PARENT_REF {
            if f.data_type() != &DataType::Int32 {
                return wrong();
            }
            continue;
        }
        if attribute_columns::is_attribute_column(name) {
            continue;
        }
        if name == USER {
            if table != Table::Events || f.data_type() != &DataType::UInt32 {
                return wrong();
            }
            continue;
        }
        let Ok(table_field) = expected.field_with_name(name) else { return Err(format!("unknown column {name}")) };
        let meta = f.metadata();
        let ok = if let Some(width) = meta.get(HEX_ID_WIDTH) {
            let written = hex_id_columns(table).iter().find(|(n, _)| *n == name).map(|(_, w)| w.to_string());
            f.data_type() == &DataType::Binary && written.as_ref() == Some(width)
        } else if let Some(unit) = meta.get(DURATION_UNIT) {
            name == "duration_ns" && f.data_type() == &DataType::Int64 && ["1000", "1000000"].contains(&unit.as_str())
        } else if let Some(from) = meta.get(OFFSET_FROM) {
            f.data_type() == &DataType::Int64
                && from != name
                && file.field_with_name(from).is_ok_and(|b| b.data_type() == &DataType::Int64)
        } else {
            f.data_type() == table_field.data_type()
        };
        if !ok {
            return wrong();
        }
    }
    Ok(())
}

/// Columns to read beyond `requested` so that [`assemble`] can rebuild them.
pub fn companion_columns(requested: &[String], file: &Schema) -> Vec<usize> {
    let wants = |c: &str| requested.iter().any(|r| r == c);
    let mut out = Vec::new();
    if wants("attributes") {
        out.extend(
            file.fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| attribute_columns::is_attribute_column(f.name()))
                .map(|(i, _)| i),
        );
    }
    if wants("parent_span_id") {
        out.extend([PARENT_REF, "span_id"].iter().filter_map(|c| file.index_of(c).ok()));
    }
    if wants(USER) {
        // Segments written before user numbers were stored: their ids, to be numbered.
        out.extend(file.index_of(USER).or_else(|_| file.index_of(USER_ID)));
    }
    for (i, f) in file.fields().iter().enumerate() {
        if let Some(from) = f.metadata().get(OFFSET_FROM).filter(|_| wants(f.name())) {
            out.extend(file.index_of(from).ok().filter(|&j| j != i));
        }
    }
    out
}

/// A batch read from a segment in the table's schema (restricted to the columns read).
/// With `stored_ids` ([`super::Scan::stored_ids`]), ids stay as stored and `parent_ref` is
/// kept beside a `parent_span_id` that holds only the ids it does not refer to.
pub fn assemble(rb: RecordBatch, stored_ids: bool) -> Result<RecordBatch, ArrowError> {
    let schema = rb.schema();
    let physical = |name: &str| (name == PARENT_REF && !stored_ids) || attribute_columns::is_attribute_column(name);
    let encoded =
        |f: &Field| [DURATION_UNIT, HEX_ID_WIDTH, OFFSET_FROM].into_iter().any(|k| f.metadata().contains_key(k));
    if !schema.fields().iter().any(|f| physical(f.name()) || encoded(f)) {
        return Ok(rb);
    }
    let keep: Vec<usize> = (0..schema.fields().len()).filter(|&i| !physical(schema.field(i).name())).collect();
    let mut arrays: Vec<ArrayRef> = keep.iter().map(|&i| rb.column(i).clone()).collect();
    // Ids first: parent references are resolved to the (decoded) span ids.
    for (pos, &i) in keep.iter().enumerate() {
        if let Some(width) = hex_id_width(schema.field(i)).filter(|_| !stored_ids) {
            let stored = arrays[pos]
                .as_any()
                .downcast_ref::<BinaryArray>()
                .ok_or_else(|| ArrowError::SchemaError(format!("{} is not a binary column", schema.field(i).name())))?;
            arrays[pos] = Arc::new(hex_ids::decode_column(stored, width)?);
        }
    }
    let position = |name: &str| keep.iter().position(|&i| schema.field(i).name() == name);
    if let Some(pos) = position("attributes") {
        arrays[pos] = attribute_columns::join(&rb)?;
    }
    if let (Some(pos), Some(ids), Ok(refs), false) =
        (position("parent_span_id"), position("span_id"), schema.index_of(PARENT_REF), stored_ids)
    {
        arrays[pos] = parents(&arrays[pos], &arrays[ids], rb.column(refs))?;
    }
    if let Some(pos) = position("duration_ns") {
        if let Some(unit) = schema.field(keep[pos]).metadata().get(DURATION_UNIT) {
            let unit: i64 = unit.parse().map_err(|_| ArrowError::SchemaError(format!("duration unit {unit}")))?;
            let stored = arrays[pos].as_any().downcast_ref::<Int64Array>().expect("duration_ns is int64");
            // Saturating: a corrupted stored duration must not overflow.
            arrays[pos] = Arc::new(stored.unary::<_, arrow_array::types::Int64Type>(|d| d.saturating_mul(unit)));
        }
    }
    for pos in 0..keep.len() {
        if let Some(from) = schema.field(keep[pos]).metadata().get(OFFSET_FROM) {
            let base = position(from).ok_or_else(|| ArrowError::SchemaError(format!("{from} was not read")))?;
            let offsets = arrays[pos].as_any().downcast_ref::<Int64Array>().expect("offsets are int64");
            let base = arrays[base].as_any().downcast_ref::<Int64Array>().expect("times are int64");
            let times = offsets.values().iter().zip(base.values()).map(|(o, b)| o.wrapping_add(*b));
            arrays[pos] = Arc::new(Int64Array::from_iter_values(times));
        }
    }
    // The table's fields (ids as text again), without the layout's metadata.
    let fields: Vec<Field> = keep
        .iter()
        .zip(&arrays)
        .map(|(&i, array)| {
            schema.field(i).clone().with_data_type(array.data_type().clone()).with_metadata(HashMap::new())
        })
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
}

/// `rb` (ids as stored, `parent_ref` kept: [`assemble`] with `stored_ids`) without the rows
/// `mask` drops, its references recomputed: a row whose parent is dropped holds the parent's
/// id instead (the parent may be read elsewhere, a second copy in another segment).
pub fn filter_with_parent_refs(rb: &RecordBatch, mask: &BooleanArray) -> Result<RecordBatch, ArrowError> {
    let kept = arrow_select::filter::filter_record_batch(rb, mask)?;
    let schema = rb.schema();
    let (Ok(r), Ok(p), Ok(s)) =
        (schema.index_of(PARENT_REF), schema.index_of("parent_span_id"), schema.index_of("span_id"))
    else {
        return Ok(kept);
    };
    let refs = rb.column(r).as_any().downcast_ref::<Int32Array>().expect("parent_ref is int32");
    // The row each kept row had, and each row's place among the kept ones.
    let mut new_row = vec![u32::MAX; rb.num_rows()];
    let mut old_rows = Vec::with_capacity(kept.num_rows());
    for (n, o) in mask.values().set_indices().enumerate() {
        new_row[o] = n as u32;
        old_rows.push(o);
    }
    let mut new_refs = Vec::with_capacity(old_rows.len());
    let mut parent_ids = Vec::with_capacity(old_rows.len());
    for (n, &o) in old_rows.iter().enumerate() {
        let d = refs.value(o);
        let parent = usize::try_from(o as i64 - i64::from(d)).ok().filter(|&p| d != 0 && p < rb.num_rows());
        match parent {
            Some(p) if new_row[p] != u32::MAX => {
                new_refs.push(n as i32 - new_row[p] as i32);
                parent_ids.push((0, o));
            }
            Some(p) => {
                new_refs.push(0);
                parent_ids.push((1, p));
            }
            None if d != 0 => return Err(ArrowError::ComputeError("a parent reference leaves its batch".into())),
            None => {
                new_refs.push(0);
                parent_ids.push((0, o));
            }
        }
    }
    let mut columns = kept.columns().to_vec();
    columns[r] = Arc::new(Int32Array::from(new_refs));
    columns[p] = arrow_select::interleave::interleave(&[rb.column(p).as_ref(), rb.column(s).as_ref()], &parent_ids)?;
    RecordBatch::try_new(kept.schema(), columns)
}

/// The parent ids of a batch: `stored` where the reference is 0, else the span id of the row
/// referred to.
fn parents(stored: &ArrayRef, ids: &ArrayRef, refs: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let strings = |a: &'_ ArrayRef| -> Result<StringArray, ArrowError> {
        a.as_any()
            .downcast_ref::<StringArray>()
            .cloned()
            .ok_or_else(|| ArrowError::SchemaError("parent or span ids are not strings".into()))
    };
    let (stored, ids) = (strings(stored)?, strings(ids)?);
    let refs = refs.as_any().downcast_ref::<Int32Array>().expect("parent_ref is int32");
    let rows = refs.len();
    let mut out = StringBuilder::with_capacity(rows, ids.value_data().len());
    for i in 0..rows {
        match refs.value(i) {
            0 => out.append_value(stored.value(i)),
            d => {
                let p = usize::try_from(i as i64 - i64::from(d))
                    .ok()
                    .filter(|&p| p < rows)
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
    use crate::segment::table::{LogRow, SpanRow};
    use proptest::prelude::*;
    use sextant_model::row::{Attribute, Value};
    use sextant_proto::convert::persist_row::encode_attributes;

    proptest! {
        /// Parents within the trace, missing, empty, the span itself, or ids that repeat
        /// within a trace or across traces: every span reads back with its own parent id.
        #[test]
        fn spans_read_back_with_their_parents(spans in prop::collection::vec((0u8..3, 0u8..12, 0u8..14), 1..80)) {
            let mut rows: Vec<(String, Row)> = spans
                .iter()
                .map(|(t, id, parent)| {
                    let project = if *t == 2 { "q" } else { "p" }.to_owned();
                    let span = SpanRow {
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
            let refs: Vec<RowRef<'_>> = rows.iter().map(|(p, row)| RowRef::new(p, row, 0)).collect();
            let layout = Layout::choose(Table::Spans, &refs);
            let back = from_record_batch(Table::Spans, &assemble(to_segment_batch(Table::Spans, &refs, &layout).unwrap(), false).unwrap());
            let back: Vec<(String, Row)> = back.into_iter().map(|(p, row, _)| (p, row)).collect();
            prop_assert_eq!(back, rows);
        }

        /// Rows dropped from a batch read with stored ids (a scan's time range cutting a
        /// trace): each kept span still finds its parent's id, by reference or stored.
        #[test]
        fn filtered_spans_keep_their_parents_in_the_stored_form(
            spans in prop::collection::vec((0u8..2, 0u8..12, 0u8..14), 1..60),
            keep in prop::collection::vec(any::<bool>(), 60),
        ) {
            let mut rows: Vec<Row> = spans
                .iter()
                .map(|(t, id, parent)| Row::Span(SpanRow {
                    trace_id: format!("{:032x}", t),
                    span_id: format!("{:016x}", id),
                    parent_span_id: if *parent >= 12 { String::new() } else { format!("{:016x}", parent) },
                    ..Default::default()
                }))
                .collect();
            rows.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
            let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
            let stored = to_segment_batch(Table::Spans, &refs, &Layout::choose(Table::Spans, &refs)).unwrap();
            let mask = BooleanArray::from(keep[..rows.len()].to_vec());
            let filtered = filter_with_parent_refs(&assemble(stored, true).unwrap(), &mask).unwrap();
            let c = crate::segment::table::Cols(&filtered);
            let (ids, parents, refs) = (c.bytes("span_id"), c.bytes("parent_span_id"), c.i32(PARENT_REF));
            let mut kept = rows.iter().zip(&keep).filter(|(_, k)| **k).map(|(r, _)| r);
            for i in 0..filtered.num_rows() {
                let Some(Row::Span(want)) = kept.next() else { unreachable!() };
                let parent = match refs.value(i) {
                    0 => parents.value(i).unwrap_or_default().to_vec(),
                    d => ids.value((i as i64 - i64::from(d)) as usize).unwrap().to_vec(),
                };
                let mut expected = Vec::new();
                if !want.parent_span_id.is_empty() {
                    hex_ids::encode(&want.parent_span_id, 8, &mut expected);
                }
                prop_assert_eq!(parent, expected);
            }
        }
    }

    #[test]
    fn parents_in_the_same_trace_become_references() {
        let span = |id: &str, parent: &str| {
            Row::Span(SpanRow {
                trace_id: "t".into(),
                span_id: id.into(),
                parent_span_id: parent.into(),
                ..Default::default()
            })
        };
        let rows = [span("a", ""), span("b", "a"), span("c", "a"), span("d", "elsewhere"), span("e", "c")];
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
        assert_eq!(parent_refs(&refs), vec![0, 1, 2, 0, 2]);
    }

    proptest! {
        /// A span points at the last span of its trace with its parent's id (ids repeat:
        /// retried spans), or nowhere when the parent is not in the trace or is the span itself.
        #[test]
        fn a_span_refers_to_the_last_span_with_its_parents_id(
            traces in prop::collection::vec(prop::collection::vec((0u8..24, 0u8..26), 1..40), 1..6)
        ) {
            let mut rows = Vec::new();
            for (t, spans) in traces.iter().enumerate() {
                for &(id, parent) in spans {
                    rows.push(Row::Span(SpanRow {
                        trace_id: format!("t{t}"),
                        span_id: format!("s{id}"),
                        // 24 and 25: no parent, a parent not in the trace.
                        parent_span_id: match parent { 24 => String::new(), 25 => "x".into(), p => format!("s{p}") },
                        ..Default::default()
                    }));
                }
            }
            let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
            let mut want = Vec::new();
            for spans in &traces {
                for (i, &(_, parent)) in spans.iter().enumerate() {
                    let last = spans.iter().rposition(|&(id, _)| id == parent && parent < 24);
                    want.push(last.filter(|&p| p != i).map_or(0, |p| i as i32 - p as i32));
                }
            }
            prop_assert_eq!(parent_refs(&refs), want);
        }
    }

    /// Found by fuzzing: a segment whose footer names or types a column otherwise (one
    /// corrupted byte) opened, and the first read panicked on the missing column. Only
    /// schemas a segment is written with pass.
    #[test]
    fn a_corrupted_segment_schema_is_refused_at_open() {
        for table in Table::ALL {
            assert_eq!(check_schema(table, &table.schema()), Ok(()));
        }
        let rows: Vec<Row> = (0..10u64)
            .map(|i| Row::Span(SpanRow { trace_id: format!("{i:032x}"), duration_nanos: 1_000, ..Default::default() }))
            .collect();
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
        let written = Layout::choose(Table::Spans, &refs).schema(Table::Spans);
        assert_eq!(check_schema(Table::Spans, &written), Ok(()));
        let with = |i: usize, f: Field| {
            let mut fields: Vec<Field> = written.fields().iter().map(|f| f.as_ref().clone()).collect();
            fields[i] = f;
            Schema::new(fields)
        };
        let trace = written.index_of("trace_id").unwrap();
        let duration = written.index_of("duration_ns").unwrap();
        let width = |w: &str| HashMap::from([(HEX_ID_WIDTH.to_owned(), w.to_owned())]);
        for bad in [
            with(trace, Field::new("trace_iD", DataType::Binary, true).with_metadata(width("16"))),
            with(trace, Field::new("trace_id", DataType::Utf8, false).with_metadata(width("16"))),
            with(trace, Field::new("trace_id", DataType::Binary, true).with_metadata(width("99999999999"))),
            with(
                duration,
                Field::new("duration_ns", DataType::Int64, false)
                    .with_metadata(HashMap::from([(DURATION_UNIT.to_owned(), "7".to_owned())])),
            ),
            with(duration, Field::new("duration_ns", DataType::Int32, false)),
        ] {
            assert!(check_schema(Table::Spans, &bad).is_err(), "{bad:?}");
        }
    }

    /// Through a real segment file: the layout (units in field metadata, parent references,
    /// attribute columns) survives Parquet and comes back as the rows written.
    #[test]
    fn a_segment_file_reads_back_the_rows_written() {
        let dir = tempfile::tempdir().unwrap();
        for unit in [1_000_000u64, 1_000, 1] {
            let rows: Vec<Row> = (0..20u64)
                .map(|i| {
                    Row::Span(SpanRow {
                        trace_id: format!("t{}", i / 5),
                        span_id: format!("s{i}"),
                        parent_span_id: if i % 5 == 0 { String::new() } else { format!("s{}", i - 1) },
                        duration_nanos: (i + 1) * unit + u64::from(unit == 1),
                        attributes: encode_attributes(vec![Attribute {
                            key: "k".into(),
                            value: Some(Value::Int(i as i64)),
                        }]),
                        ..Default::default()
                    })
                })
                .collect();
            let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
            let meta = crate::segment::file::write(
                dir.path(),
                unit,
                Table::Spans,
                0,
                &refs,
                &[7],
                None,
                crate::segment::file::Effort::Final,
            )
            .unwrap();
            let segment = crate::segment::Segment::open(dir.path(), meta).unwrap();
            let back: Vec<Row> = segment.read(None).unwrap().into_iter().map(|(_, row, _)| row).collect();
            assert_eq!(back, rows, "unit {unit}");
            let trace: Vec<Row> = segment.trace("p", "t1").unwrap().into_iter().map(|(row, _)| row).collect();
            assert_eq!(trace, rows[5..10]);
        }
    }

    /// Ids of every shape: hex of the width (stored as bytes), uppercase, other lengths, the
    /// width in bytes but not hex, empty.
    const IDS: [&str; 7] = [
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "4BF92F3577B34DA6A3CE929D0E0E4736",
        "00f067aa0ba902b7",
        "abcdefghijklmnop",
        "4bf92f3577b34da6a3ce929d0e0e473",
        "t-1",
        "",
    ];

    fn logs_and_spans() -> Vec<Row> {
        let mut rows: Vec<Row> = IDS
            .iter()
            .enumerate()
            .flat_map(|(i, id)| {
                let log = |n: usize| {
                    Row::Log(LogRow {
                        unix_nanos: (i * 10 + n) as i64,
                        message: format!("line {n}"),
                        trace_id: (*id).into(),
                        span_id: IDS[(i + n) % IDS.len()].into(),
                        ..Default::default()
                    })
                };
                [log(0), log(1)]
            })
            .collect();
        // One trace per id, its spans' ids and parents of every shape too.
        for id in &IDS[..6] {
            for (n, span_id) in IDS.iter().enumerate() {
                rows.push(Row::Span(SpanRow {
                    trace_id: (*id).into(),
                    span_id: (*span_id).into(),
                    parent_span_id: IDS[(n + 3) % IDS.len()].into(),
                    start_unix_nanos: n as i64,
                    ..Default::default()
                }));
            }
        }
        rows
    }

    /// Written with the current layout, or as segments were before any layout (the table's
    /// schema as is, every statistic): both read back the rows written, a trace lookup finds
    /// its spans and a log search by trace id its lines (through the bloom filter of the
    /// stored form).
    #[test]
    fn ids_of_every_shape_read_back_and_are_found_in_new_and_old_segments() {
        let dir = tempfile::tempdir().unwrap();
        let all = logs_and_spans();
        for (id, table) in [(1, Table::Logs), (2, Table::Spans), (3, Table::Logs), (4, Table::Spans)] {
            let rows: Vec<Row> = all.iter().filter(|r| r.table() == table).cloned().collect();
            let mut refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
            refs.sort_by(|a, b| a.row.sort_key().cmp(&b.row.sort_key()));
            let meta = if id <= 2 {
                crate::segment::file::write(
                    dir.path(),
                    id,
                    table,
                    0,
                    &refs,
                    &[7],
                    None,
                    crate::segment::file::Effort::Final,
                )
                .unwrap()
            } else {
                write_unlaid_out(dir.path(), id, table, &refs)
            };
            let segment = crate::segment::Segment::open(dir.path(), meta).unwrap();
            let back: Vec<Row> = segment.read(None).unwrap().into_iter().map(|(_, row, _)| row).collect();
            let sorted: Vec<Row> = refs.iter().map(|r| r.row.clone()).collect();
            assert_eq!(back, sorted, "{table:?} segment {id}");
            for trace in IDS {
                let want = sorted.iter().filter(|r| match r {
                    Row::Span(s) => s.trace_id == trace,
                    Row::Log(l) => l.trace_id == trace,
                    _ => false,
                });
                if table == Table::Spans {
                    let got: Vec<Row> = segment.trace("p", trace).unwrap().into_iter().map(|(row, _)| row).collect();
                    assert_eq!(got, want.cloned().collect::<Vec<_>>(), "trace {trace:?}");
                } else {
                    let scan = crate::segment::Scan {
                        table,
                        project: "p".into(),
                        from_ns: i64::MIN,
                        to_ns: i64::MAX,
                        filter: crate::segment::Filter { trace_id: Some(trace.into()), ..Default::default() },
                        columns: Vec::new(),
                        dictionaries: Vec::new(),
                        stored_ids: false,
                    };
                    let found: usize = segment.scan(&scan, &|_| false).unwrap().iter().map(|rb| rb.num_rows()).sum();
                    assert_eq!(found, want.count(), "log trace {trace:?}");
                }
            }
        }
    }

    /// A segment as written before segments had a layout: the table's schema, default
    /// writer properties (statistics and page index on every column).
    fn write_unlaid_out(
        dir: &std::path::Path,
        id: u64,
        table: Table,
        rows: &[RowRef<'_>],
    ) -> crate::segment::SegmentMeta {
        let name = crate::segment::file::file_name(id);
        let file = std::fs::File::create(dir.join(&name)).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, table.schema(), None).unwrap();
        writer.write(&crate::segment::table::to_record_batch(table, rows).unwrap()).unwrap();
        writer.close().unwrap();
        let len = std::fs::metadata(dir.join(&name)).unwrap().len();
        crate::segment::SegmentMeta {
            id,
            table,
            hour: 0,
            rows: rows.len() as u64,
            min_ns: i64::MIN,
            max_ns: i64::MAX,
            file: crate::archive::FileEntry { name, len, xxh3: 0 },
            summarizes: None,
            covers: Vec::new(),
            projects: vec!["p".into()],
            draft: false,
        }
    }
}
