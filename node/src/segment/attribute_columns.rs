//! Frequent attribute keys as columns of their own. In a segment, every attribute key that
//! many rows carry (`http.method`, `cloud.region`, `k8s.pod.name`…) becomes a nullable column
//! `attr:<key>` holding the protobuf-encoded value, dictionary-encoded and compressed with the
//! values of the same key; the `attributes` column keeps only the rest. Mixed into one
//! per-row blob, values of different keys compress poorly together (measured: 25 B of a
//! 52 B span were attributes); this is what ClickHouse's `LowCardinality` map columns and
//! Tempo's dedicated attribute columns do.
//!
//! The split is physical only: [`super::layout::assemble`] puts the `attributes` column back
//! together as the table's schema has it before any reader sees the batch. Attributes are
//! stored sorted by key ([`super::table::encode_attributes`]), so re-assembly gives back the
//! very same bytes.

use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::ArrayRef;
use prost::Message;
use sextant_proto::KeyValue;

use super::table::{encode_attributes, Row, RowRef};

pub const PREFIX: &str = "attr:";
/// More columns cost footer bytes and decode work on every attribute read.
const MAX_COLUMNS: usize = 48;
/// A key gets a column when at least this share (1/n) of the segment's rows carry it.
const MIN_SHARE: usize = 16;
const MAX_KEY_BYTES: usize = 128;

fn attributes(row: &Row) -> Option<&[KeyValue]> {
    match row {
        Row::Span(s) => Some(&s.attributes),
        Row::Log(l) => Some(&l.attributes),
        Row::HostMetric(m) => Some(&m.attributes),
        _ => None,
    }
}

/// An attribute key with a column of its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub name: String,
    /// Most of its values differ from each other (within the rows sampled).
    pub distinct: bool,
}

impl Key {
    /// The segment column holding this key's values.
    pub fn column(&self) -> String {
        format!("{PREFIX}{}", self.name)
    }
}

/// Rows sampled for the share of distinct values of a key.
const SAMPLE_ROWS: usize = 8192;

/// The keys of `rows` that get their own column, sorted by name.
pub fn choose(rows: &[RowRef<'_>]) -> Vec<Key> {
    #[derive(Default)]
    struct Seen {
        rows: usize,
        sampled: usize,
        values: std::collections::HashSet<Vec<u8>>,
    }
    let mut seen: std::collections::HashMap<&str, Seen> = std::collections::HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        for kv in attributes(r.row).unwrap_or_default() {
            if kv.key.len() <= MAX_KEY_BYTES {
                let s = seen.entry(kv.key.as_str()).or_default();
                s.rows += 1;
                if i < SAMPLE_ROWS {
                    s.sampled += 1;
                    if let Some(v) = &kv.value {
                        s.values.insert(v.encode_to_vec());
                    }
                }
            }
        }
    }
    let min = (rows.len() / MIN_SHARE).max(1);
    let mut frequent: Vec<(&str, Seen)> = seen.into_iter().filter(|(_, s)| s.rows >= min).collect();
    // The most frequent first, ties by key so every replica chooses alike.
    frequent.sort_by(|a, b| b.1.rows.cmp(&a.1.rows).then(a.0.cmp(b.0)));
    let mut keys: Vec<Key> = frequent
        .into_iter()
        .take(MAX_COLUMNS)
        .map(|(k, s)| Key { name: k.to_owned(), distinct: s.values.len() * 4 > s.sampled * 3 })
        .collect();
    keys.sort();
    keys
}

/// Splits rows' attributes between the `attr:` columns of `keys` and the remainder.
pub struct Split<'k> {
    keys: &'k [Key],
    columns: Vec<BinaryBuilder>,
}

impl<'k> Split<'k> {
    pub fn new(keys: &'k [Key], rows: usize) -> Self {
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
            match self.keys.binary_search_by(|k| k.name.as_str().cmp(&kv.key)) {
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

    /// The key columns, in the order of the keys (as [`super::layout::Layout::schema`] lists them).
    pub fn finish(self) -> Vec<ArrayRef> {
        self.columns.into_iter().map(|mut b| Arc::new(b.finish()) as ArrayRef).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::layout::{assemble, Layout};
    use crate::segment::table::{decode_attributes, from_record_batch, to_segment_batch, Table};
    use proptest::prelude::*;
    use sextant_proto::{any_value, AnyValue, Span};

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
            let layout = Layout::choose(Table::Spans, &refs);
            let physical = to_segment_batch(Table::Spans, &refs, &layout).unwrap();
            prop_assert_eq!(physical.num_columns(), Table::Spans.schema().fields().len() + 1 + layout.attribute_keys.len());
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
        assert_eq!(choose(&refs), vec![Key { name: "region".into(), distinct: false }]);
    }
}
