//! Frequent attribute keys as columns of their own. In a segment, every attribute key that
//! many rows carry (`http.method`, `cloud.region`, `k8s.pod.name`…) becomes a nullable column
//! `attr:<key>` holding the protobuf-encoded value, dictionary-encoded and compressed with the
//! values of the same key; the `attributes` column keeps only the rest. Mixed into one
//! per-row blob, values of different keys compress poorly together (measured: 25 B of a
//! 52 B span were attributes); this is what ClickHouse's `LowCardinality` map columns and
//! Tempo's dedicated attribute columns do.
//!
//! The split is physical only: [`assemble`] puts the `attributes` column back together as
//! the table's schema has it before any reader sees the batch. Attributes are stored sorted by
//! key ([`super::table::encode_attributes`]), so re-assembly gives back the very same bytes.

use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use prost::Message;
use sextant_proto::{AnyValue, KeyValue};

use super::table::{encode_attributes, Row, RowRef};

pub const PREFIX: &str = "attr:";
/// More columns cost footer bytes and decode work on every attribute read.
const MAX_COLUMNS: usize = 48;
/// A key gets a column when at least this share (1/n) of the segment's rows carry it.
const MIN_SHARE: usize = 16;
const MAX_KEY_BYTES: usize = 128;

pub fn attributes(row: &Row) -> Option<&[KeyValue]> {
    match row {
        Row::Span(s) => Some(&s.attributes),
        Row::Log(l) => Some(&l.attributes),
        Row::HostMetric(m) => Some(&m.attributes),
        _ => None,
    }
}

/// The keys of `rows` that get their own column, sorted.
pub fn choose(rows: &[RowRef<'_>]) -> Vec<String> {
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for r in rows {
        for kv in attributes(r.row).unwrap_or_default() {
            if kv.key.len() <= MAX_KEY_BYTES {
                *counts.entry(kv.key.as_str()).or_default() += 1;
            }
        }
    }
    let min = (rows.len() / MIN_SHARE).max(1);
    let mut frequent: Vec<(&str, usize)> = counts.into_iter().filter(|(_, n)| *n >= min).collect();
    // The most frequent first, ties by key so every replica chooses alike.
    frequent.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut keys: Vec<String> = frequent.into_iter().take(MAX_COLUMNS).map(|(k, _)| k.to_owned()).collect();
    keys.sort();
    keys
}

/// Splits rows' attributes between the `attr:` columns of `keys` and the remainder.
pub struct Split<'k> {
    keys: &'k [String],
    columns: Vec<BinaryBuilder>,
}

impl<'k> Split<'k> {
    pub fn new(keys: &'k [String], rows: usize) -> Self {
        Split { keys, columns: keys.iter().map(|_| BinaryBuilder::with_capacity(rows, rows * 8)).collect() }
    }

    /// Adds one row: fills the key columns and returns the encoded remainder. Of a key given
    /// twice, the first goes to the column (the rest keeps the later ones, in order), unless
    /// it has no value: a null in the column means "not in the column", so it stays in the rest.
    pub fn push(&mut self, attrs: &[KeyValue]) -> Vec<u8> {
        if self.keys.is_empty() {
            return encode_attributes(attrs);
        }
        let mut seen = vec![false; self.keys.len()];
        let mut rest = Vec::with_capacity(attrs.len());
        for kv in attrs {
            match self.keys.binary_search(&kv.key) {
                Ok(k) if !seen[k] => {
                    seen[k] = true;
                    match &kv.value {
                        Some(value) => self.columns[k].append_value(value.encode_to_vec()),
                        None => {
                            self.columns[k].append_null();
                            rest.push(kv.clone());
                        }
                    }
                }
                _ => rest.push(kv.clone()),
            }
        }
        for (k, seen) in seen.into_iter().enumerate() {
            if !seen {
                self.columns[k].append_null();
            }
        }
        encode_attributes(&rest)
    }

    /// The key columns, in the order of [`with_columns`].
    pub fn finish(self) -> Vec<ArrayRef> {
        self.columns.into_iter().map(|mut b| Arc::new(b.finish()) as ArrayRef).collect()
    }
}

/// A table's schema with the `attr:` columns of `keys` after its own.
pub fn with_columns(schema: &Schema, keys: &[String]) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(keys.iter().map(|k| Field::new(format!("{PREFIX}{k}"), DataType::Binary, true)));
    Arc::new(Schema::new(fields))
}

/// Indices of the `attr:` columns in a segment's schema.
pub fn column_indices(schema: &Schema) -> Vec<usize> {
    schema.fields().iter().enumerate().filter(|(_, f)| f.name().starts_with(PREFIX)).map(|(i, _)| i).collect()
}

/// A batch read from a segment with its `attributes` column whole again and no `attr:` columns.
pub fn assemble(rb: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let schema = rb.schema();
    let extra = column_indices(&schema);
    if extra.is_empty() {
        return Ok(rb);
    }
    let keep: Vec<usize> = (0..schema.fields().len()).filter(|i| !extra.contains(i)).collect();
    let Ok(attr_col) = schema.index_of("attributes") else {
        return rb.project(&keep);
    };
    let rest = rb.column(attr_col).as_any().downcast_ref::<BinaryArray>().expect("attributes are binary");
    let columns: Vec<(&str, &BinaryArray)> = extra
        .iter()
        .map(|&i| {
            let name = &schema.field(i).name()[PREFIX.len()..];
            (name, rb.column(i).as_any().downcast_ref::<BinaryArray>().expect("attribute columns are binary"))
        })
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
        attrs.extend(super::table::decode_attributes(rest.value(i)));
        whole.append_value(encode_attributes(&attrs));
    }
    let mut arrays: Vec<ArrayRef> = keep.iter().map(|&i| rb.column(i).clone()).collect();
    let fields: Vec<Field> = keep.iter().map(|&i| schema.field(i).clone()).collect();
    let pos = keep.iter().position(|&i| i == attr_col).expect("attributes kept");
    arrays[pos] = Arc::new(whole.finish());
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::table::{decode_attributes, from_record_batch, to_segment_batch, Table};
    use proptest::prelude::*;
    use sextant_proto::{any_value, Span};

    fn value(v: u8) -> Option<AnyValue> {
        Some(AnyValue {
            value: Some(match v % 4 {
                0 => any_value::Value::StringValue(format!("v{v}")),
                1 => any_value::Value::IntValue(i64::from(v)),
                2 => any_value::Value::BoolValue(v % 8 == 2),
                _ => any_value::Value::DoubleValue(f64::from(v) / 3.0),
            }),
        })
        .filter(|_| v != 255)
    }

    proptest! {
        /// Whatever the keys (frequent or rare, repeated, valueless) and their order, a row reads
        /// back with its attributes as stored without columns: sorted stably by key.
        #[test]
        fn attributes_read_back_as_stored(rows in prop::collection::vec(
            prop::collection::vec((0u8..6, any::<u8>()), 0..8), 1..64)) {
            let spans: Vec<Row> = rows
                .iter()
                .map(|attrs| Row::Span(Span {
                    trace_id: "t".into(),
                    attributes: attrs.iter().map(|(k, v)| KeyValue { key: format!("k{k}"), value: value(*v) }).collect(),
                    ..Default::default()
                }))
                .collect();
            let refs: Vec<RowRef<'_>> = spans.iter().map(|row| RowRef { project: "p", row, batch: 0 }).collect();
            let keys = choose(&refs);
            let physical = to_segment_batch(Table::Spans, &refs, &keys).unwrap();
            prop_assert_eq!(column_indices(&physical.schema()).len(), keys.len());
            let back = from_record_batch(Table::Spans, &assemble(physical).unwrap());
            for ((_, got, _), want) in back.iter().zip(&spans) {
                let (Row::Span(got), Row::Span(want)) = (got, want) else { unreachable!() };
                prop_assert_eq!(&got.attributes, &decode_attributes(&encode_attributes(&want.attributes)));
            }
        }
    }

    #[test]
    fn frequent_keys_get_columns_and_rare_ones_do_not() {
        let rows: Vec<Row> = (0..64)
            .map(|i| {
                let mut attributes = vec![KeyValue { key: "region".into(), value: value(0) }];
                if i == 0 {
                    attributes.push(KeyValue { key: "rare".into(), value: value(1) });
                }
                Row::Span(Span { attributes, ..Default::default() })
            })
            .collect();
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef { project: "p", row, batch: 0 }).collect();
        assert_eq!(choose(&refs), vec!["region".to_owned()]);
    }
}
