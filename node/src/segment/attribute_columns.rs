//! Frequent attribute keys as columns of their own. In a segment, every attribute key that
//! many rows carry (`http.method`, `cloud.region`, `k8s.pod.name`…) becomes a nullable column
//! `attr:<key>` holding the protobuf-encoded value, dictionary-encoded and compressed with the
//! values of the same key; the `attributes` column keeps only the rest. Mixed into one
//! per-row blob, values of different keys compress poorly together (measured: 25 B of a
//! 52 B span were attributes); this is what ClickHouse's `LowCardinality` map columns and
//! Tempo's dedicated attribute columns do.
//!
//! Mostly distinct string values made of a few prefixes and a last word (`checkout-7f9c2`,
//! `10.0.3.17`, `u-48213`) are split in two more columns, `attr.head:<key>` (the text up to the
//! last word, dictionary-encoded: a few bits per value) and `attr.tail:<key>` (the last word),
//! and the value's own column holds null there. Whole, ZSTD has to spell out the prefix as a
//! match for every value, which costs about as much as the random part (measured: pod names
//! 5.2 B/span, for 2.5 B of random characters).
//!
//! Last words that are mostly decimal numbers without leading zeros (`u-48213`, `10.0.3.17`)
//! are stored as integers ([`Tail`]); a value whose last word is not of that form stays whole.
//! As text, a random number costs 1.5× its information after compression (measured, bytes per
//! span: user ids 1.94 → 1.62, the last byte of peer addresses 1.44 → 0.91). Hexadecimal words
//! of one width (`checkout-07f9c`) are not: as integers they took more (2.68 → 2.88).
//!
//! Keys whose values are mostly integers (`http.response_content_length`, `thread.id`) keep
//! those in `attr.int:<key>`, an integer column: as protobuf varints inside binary values, the
//! bytes of random numbers compress poorly (measured: content lengths 3.8 B per value, for
//! 17 bits of information).
//!
//! The split is physical only: [`super::layout::assemble`] puts the `attributes` column back
//! together as the table's schema has it before any reader sees the batch. Attributes are
//! stored sorted by key ([`super::attribute`]), so re-assembly gives back the
//! very same bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Int64Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType, Field};
use sextant_model::row::{Encoded, Value as DecodedValue};
use sextant_proto::convert::persist_row as persist;
use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};
use xxhash_rust::xxh3::xxh3_64;

use super::attribute::{self, Attribute, Kind, Value};
use super::table::RowRef;

pub const PREFIX: &str = "attr:";
/// Of a split key: the text of a value up to its last word.
pub const HEAD_PREFIX: &str = "attr.head:";
/// Of a split key: a value's last word.
pub const TAIL_PREFIX: &str = "attr.tail:";
/// Of an integer key: its integer values.
pub const INT_PREFIX: &str = "attr.int:";

/// Whether a segment column holds attribute values (of a key with columns of its own).
pub fn is_attribute_column(name: &str) -> bool {
    [PREFIX, HEAD_PREFIX, TAIL_PREFIX, INT_PREFIX].iter().any(|p| name.starts_with(p))
}

fn integer(value: Value<'_>) -> Option<i64> {
    match value.kind {
        Kind::Int(i) => Some(i),
        _ => None,
    }
}

/// Where a string value splits into head and last word: after its last character that is
/// not an ASCII letter or digit; `None` when the head would be empty.
fn split_point(value: &str) -> Option<usize> {
    let tail = value.bytes().rev().take_while(u8::is_ascii_alphanumeric).count();
    (tail < value.len()).then(|| value.len() - tail)
}

fn splittable(value: Value<'_>) -> Option<(&str, usize)> {
    match value.kind {
        Kind::Str(s) => Some((s, split_point(s)?)),
        _ => None,
    }
}
/// How a split key's last words are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tail {
    Text,
    /// Decimal numbers without leading zeros, as integers.
    Decimal,
}

/// Metadata key of an integer tail column: its [`Tail`] form (`dec`).
const TAIL_FORM: &str = "sextant.tail";

impl Tail {
    /// The number a last word stands for, if it is of this form (and so formats back to it).
    fn number(self, word: &str) -> Option<i64> {
        let canonical =
            word.len() <= 18 && word.bytes().all(|b| b.is_ascii_digit()) && (word.len() == 1 || !word.starts_with('0'));
        match self {
            Tail::Decimal if canonical => word.parse().ok(),
            _ => None,
        }
    }

    /// Whether a last word is stored in this form.
    fn fits(self, word: &str) -> bool {
        self == Tail::Text || self.number(word).is_some()
    }

    fn format(self, n: i64) -> String {
        n.to_string()
    }

    fn metadata(self) -> Option<String> {
        match self {
            Tail::Text => None,
            Tail::Decimal => Some("dec".into()),
        }
    }

    fn of_field(field: &Field) -> Result<Tail, ArrowError> {
        match field.metadata().get(TAIL_FORM).map(String::as_str) {
            None => Ok(Tail::Text),
            Some("dec") => Ok(Tail::Decimal),
            Some(form) => Err(ArrowError::SchemaError(format!("unknown tail form {form} of {}", field.name()))),
        }
    }
}

/// More columns cost footer bytes and decode work on every attribute read.
const MAX_COLUMNS: usize = 48;
/// A key gets a column when at least this share (1/n) of the segment's rows carry it.
const MIN_SHARE: usize = 16;
const MAX_KEY_BYTES: usize = 128;

/// An attribute key with a column of its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub name: String,
    /// Most of its values differ from each other (within the rows sampled).
    pub distinct: bool,
    /// Its string values are stored split into head and last word (see the module docs).
    pub split: bool,
    /// How the last words of a split key are stored.
    pub tail: Tail,
    /// Its integer values are stored in an integer column.
    pub ints: bool,
    /// Some of its values are stored whole, in [`Key::column`] (a column of nulls only would
    /// still cost its page headers: 0.04 B/span each).
    pub whole: bool,
}

impl Key {
    /// Whether `value` is stored whole (not split, not an integer of an integer key).
    fn stays_whole(&self, value: Value<'_>) -> bool {
        let split = self.split && splittable(value).is_some_and(|(text, at)| self.tail.fits(&text[at..]));
        let int = self.ints && integer(value).is_some();
        !split && !int
    }

    /// The segment column holding this key's values (those not split).
    pub fn column(&self) -> String {
        format!("{PREFIX}{}", self.name)
    }

    pub fn head_column(&self) -> String {
        format!("{HEAD_PREFIX}{}", self.name)
    }

    pub fn tail_column(&self) -> String {
        format!("{TAIL_PREFIX}{}", self.name)
    }

    pub fn int_column(&self) -> String {
        format!("{INT_PREFIX}{}", self.name)
    }

    /// The segment fields of this key, in the order [`Split::finish`] gives the columns.
    pub fn fields(&self) -> Vec<Field> {
        let mut fields = Vec::new();
        if self.whole {
            fields.push(Field::new(self.column(), DataType::Binary, true));
        }
        if self.split {
            fields.push(Field::new(self.head_column(), DataType::Utf8, true));
            fields.push(match self.tail.metadata() {
                None => Field::new(self.tail_column(), DataType::Utf8, true),
                Some(form) => Field::new(self.tail_column(), DataType::Int64, true)
                    .with_metadata(HashMap::from([(TAIL_FORM.to_owned(), form)])),
            });
        }
        if self.ints {
            fields.push(Field::new(self.int_column(), DataType::Int64, true));
        }
        fields
    }
}

/// Rows sampled, evenly spread, for how often a key occurs and how its values look.
const SAMPLE_ROWS: usize = 8192;

/// The keys of `rows` that get their own column, sorted by name, decided on a sample: a
/// column is only a way of storing, and any choice reads back the same.
pub fn choose(rows: &[RowRef<'_>]) -> Vec<Key> {
    #[derive(Default)]
    struct Seen {
        sampled: usize,
        /// Distinct values and heads are counted by their 64-bit hashes (no copy of each).
        values: FxHashSet<u64>,
        /// Sampled values that split, and their distinct heads.
        splittable: usize,
        heads: FxHashSet<u64>,
        /// Sampled last words that are decimal numbers.
        decimal: usize,
        ints: usize,
    }
    // Fx hashing: keys and sampled values are short, and SipHash was most of this function
    // at flush (the choice is made for every flush of every segment).
    let mut seen: FxHashMap<&str, Seen> = FxHashMap::default();
    let stride = rows.len().div_ceil(SAMPLE_ROWS).max(1);
    let sample = rows.iter().step_by(stride);
    let sampled_rows = sample.len();
    for r in sample {
        for kv in r.row.attributes().into_iter().flat_map(attribute::read) {
            if kv.key.len() <= MAX_KEY_BYTES {
                let s = seen.entry(kv.key).or_default();
                s.sampled += 1;
                if let Some(v) = kv.value() {
                    s.values.insert(xxh3_64(v.encoded));
                    s.ints += usize::from(integer(v).is_some());
                    if let Some((text, at)) = splittable(v) {
                        s.splittable += 1;
                        s.heads.insert(xxh3_64(text[..at].as_bytes()));
                        s.decimal += usize::from(Tail::Decimal.number(&text[at..]).is_some());
                    }
                }
            }
        }
    }
    let min = (sampled_rows / MIN_SHARE).max(1);
    let mut frequent: Vec<(&str, Seen)> = seen.into_iter().filter(|(_, s)| s.sampled >= min).collect();
    // The most frequent first, ties by key so every replica chooses alike.
    frequent.sort_by(|a, b| b.1.sampled.cmp(&a.1.sampled).then(a.0.cmp(b.0)));
    let mut keys: Vec<Key> = frequent
        .into_iter()
        .take(MAX_COLUMNS)
        .map(|(k, s)| {
            let distinct = s.values.len() * 4 > s.sampled * 3;
            // Split when most values split and their heads are few: each head then costs a
            // dictionary index, where ZSTD would spend a match on it.
            let split = distinct && s.splittable * 4 >= s.sampled * 3 && s.heads.len() * 8 <= s.splittable;
            let ints = s.ints * 4 >= s.sampled * 3;
            let tail = if split && s.decimal * 4 >= s.splittable * 3 { Tail::Decimal } else { Tail::Text };
            Key { name: k.to_owned(), distinct, split, tail, ints, whole: !split && !ints }
        })
        .collect();
    keys.sort();
    // Whether any sampled value stays whole. A value the sample missed that does not fit its
    // key's columns is kept with the rest of the attributes; passing over every row for
    // those was a fifth of a spans flush.
    if keys.iter().any(|k| !k.whole) {
        let finder = KeyFinder::new(&keys);
        let mut whole: Vec<bool> = keys.iter().map(|k| k.whole).collect();
        for r in rows.iter().step_by(stride) {
            for kv in r.row.attributes().into_iter().flat_map(attribute::read) {
                if let (Some(k), Some(value)) = (finder.find(kv.key), kv.value()) {
                    whole[k] = whole[k] || keys[k].stays_whole(value);
                }
            }
        }
        for (key, whole) in keys.iter_mut().zip(whole) {
            key.whole = whole;
        }
    }
    keys
}

/// Finds attribute keys among the chosen ones by name. Fx hashing takes a few instructions per
/// key; a binary search over the names compared strings four times or more (with the last
/// row's key order remembered, still a tenth of a flush for rows whose optional keys vary).
struct KeyFinder<'k>(FxHashMap<&'k str, usize>);

impl<'k> KeyFinder<'k> {
    fn new(keys: &'k [Key]) -> Self {
        KeyFinder(keys.iter().enumerate().map(|(i, k)| (k.name.as_str(), i)).collect())
    }

    /// The index in the keys of `name`.
    fn find(&self, name: &str) -> Option<usize> {
        self.0.get(name).copied()
    }
}

/// The last words of a split key being written, in the key's [`Tail`] form.
enum TailBuilder {
    Text(StringBuilder),
    Number(Int64Builder),
}

/// The columns of one key being written.
struct KeyColumns {
    whole: Option<BinaryBuilder>,
    /// Head and tail, for a split key.
    split: Option<(StringBuilder, TailBuilder)>,
    /// For an integer key.
    ints: Option<Int64Builder>,
}

impl KeyColumns {
    /// Adds a row's value (or a null); false when the value is not stored (none, or whole
    /// without a whole column): the caller keeps it with the rest of the attributes.
    fn push(&mut self, key: &Key, value: Option<Value<'_>>) -> bool {
        let value = value.filter(|v| self.whole.is_some() || !key.stays_whole(*v));
        let split =
            key.split.then(|| value.and_then(splittable)).flatten().filter(|(text, at)| key.tail.fits(&text[*at..]));
        let int = self.ints.is_some().then(|| value.and_then(integer)).flatten();
        if let Some(whole) = self.whole.as_mut() {
            match value.filter(|_| split.is_none() && int.is_none()) {
                Some(value) => whole.append_value(value.encoded),
                None => whole.append_null(),
            }
        }
        if let Some((head, tail)) = self.split.as_mut() {
            match split {
                Some((text, at)) => {
                    head.append_value(&text[..at]);
                    match tail {
                        TailBuilder::Text(t) => t.append_value(&text[at..]),
                        TailBuilder::Number(t) => t.append_option(key.tail.number(&text[at..])),
                    }
                }
                None => {
                    head.append_null();
                    match tail {
                        TailBuilder::Text(t) => t.append_null(),
                        TailBuilder::Number(t) => t.append_null(),
                    }
                }
            }
        }
        if let Some(ints) = self.ints.as_mut() {
            ints.append_option(int);
        }
        value.is_some()
    }
}

/// Splits rows' attributes between the `attr:` columns of `keys` and the remainder.
pub struct Split<'k> {
    keys: &'k [Key],
    columns: Vec<KeyColumns>,
    finder: KeyFinder<'k>,
    /// Per row: which keys it gave (reused).
    seen: Vec<bool>,
    /// The row's remaining attributes, in their stored form (reused).
    encoded_rest: Vec<u8>,
    /// Room for a row's remaining attributes, kept empty between rows.
    spare: Vec<Attribute<'static>>,
}

/// `list` emptied, its room kept for attributes of another lifetime.
fn recycled<'b>(mut list: Vec<Attribute<'_>>) -> Vec<Attribute<'b>> {
    list.clear();
    // Collecting an emptied vector into one of the same layout reuses its allocation.
    list.into_iter().map(|_| unreachable!("emptied")).collect()
}

impl<'k> Split<'k> {
    pub fn new(keys: &'k [Key], rows: usize) -> Self {
        let columns = keys
            .iter()
            .map(|k| KeyColumns {
                whole: k
                    .whole
                    .then(|| BinaryBuilder::with_capacity(rows, if k.split || k.ints { 0 } else { rows * 8 })),
                split: k.split.then(|| {
                    let tail = match k.tail {
                        Tail::Text => TailBuilder::Text(StringBuilder::with_capacity(rows, rows * 8)),
                        Tail::Decimal => TailBuilder::Number(Int64Builder::with_capacity(rows)),
                    };
                    (StringBuilder::with_capacity(rows, rows * 8), tail)
                }),
                ints: k.ints.then(|| Int64Builder::with_capacity(rows)),
            })
            .collect();
        Split {
            keys,
            columns,
            finder: KeyFinder::new(keys),
            seen: Vec::new(),
            encoded_rest: Vec::new(),
            spare: Vec::with_capacity(16),
        }
    }

    /// Adds one row: fills the key columns and returns the encoded remainder. Of a key given
    /// twice, the first goes to the columns (the rest keeps the later ones, in order), unless
    /// it has no value: nulls in the columns mean "not in the columns", so it stays in the rest.
    pub fn push(&mut self, attrs: &Encoded) -> &[u8] {
        self.encoded_rest.clear();
        let mut rest: Vec<Attribute<'_>> = recycled(std::mem::take(&mut self.spare));
        if self.keys.is_empty() {
            rest.extend(attribute::read(attrs));
            attribute::write_stored(&mut rest, &mut self.encoded_rest);
            self.spare = recycled(rest);
            return &self.encoded_rest;
        }
        self.seen.clear();
        self.seen.resize(self.keys.len(), false);
        for kv in attribute::read(attrs) {
            match self.finder.find(kv.key) {
                Some(k) if !self.seen[k] => {
                    self.seen[k] = true;
                    if !self.columns[k].push(&self.keys[k], kv.value()) {
                        rest.push(kv);
                    }
                }
                _ => rest.push(kv),
            }
        }
        for (k, seen) in self.seen.iter().enumerate() {
            if !seen {
                self.columns[k].push(&self.keys[k], None);
            }
        }
        attribute::write_stored(&mut rest, &mut self.encoded_rest);
        self.spare = recycled(rest);
        &self.encoded_rest
    }

    /// The key columns, in the order of the keys' [`Key::fields`] (as [`super::layout::Layout::schema`] lists them).
    pub fn finish(self) -> Vec<ArrayRef> {
        let mut out: Vec<ArrayRef> = Vec::new();
        for c in self.columns {
            if let Some(mut whole) = c.whole {
                out.push(Arc::new(whole.finish()));
            }
            if let Some((mut head, mut tail)) = c.split {
                out.push(Arc::new(head.finish()));
                out.push(match &mut tail {
                    TailBuilder::Text(t) => Arc::new(t.finish()),
                    TailBuilder::Number(t) => Arc::new(t.finish()),
                });
            }
            if let Some(mut ints) = c.ints {
                out.push(Arc::new(ints.finish()));
            }
        }
        out
    }
}

enum TailValues<'a> {
    Text(&'a StringArray),
    Number(&'a Int64Array, Tail),
}

/// The columns of one key in a batch read from a segment.
#[derive(Default)]
struct KeyValues<'a> {
    whole: Option<&'a BinaryArray>,
    head: Option<&'a StringArray>,
    tail: Option<TailValues<'a>>,
    ints: Option<&'a Int64Array>,
}

impl KeyValues<'_> {
    /// Appends the row's value as encoded to `out`; false if it has none.
    fn encode(&self, row: usize, out: &mut Vec<u8>) -> Result<bool, ArrowError> {
        if let Some(whole) = self.whole.filter(|c| c.is_valid(row)) {
            out.extend_from_slice(whole.value(row));
            return Ok(true);
        }
        Ok(match self.value(row)? {
            Some(v) => {
                persist::encode_value(v, out);
                true
            }
            None => false,
        })
    }

    /// The row's value of an integer or split column ([`Self::encode`] copies whole ones).
    fn value(&self, row: usize) -> Result<Option<DecodedValue>, ArrowError> {
        if let Some(ints) = self.ints.filter(|c| c.is_valid(row)) {
            return Ok(Some(DecodedValue::Int(ints.value(row))));
        }
        match (self.head.filter(|c| c.is_valid(row)), &self.tail) {
            (Some(head), Some(tail)) => {
                let text = match tail {
                    TailValues::Text(t) => [head.value(row), t.value(row)].concat(),
                    TailValues::Number(t, form) => [head.value(row), &form.format(t.value(row))].concat(),
                };
                Ok(Some(DecodedValue::String(text)))
            }
            (Some(_), None) => Err(ArrowError::SchemaError("an attribute head column without its tail".into())),
            _ => Ok(None),
        }
    }
}

/// The `attributes` column of a batch read from a segment, whole again: the `attributes`
/// column's remainders with the values of the key columns.
pub fn join(rb: &RecordBatch) -> Result<ArrayRef, ArrowError> {
    let schema = rb.schema();
    let rest =
        rb.column(schema.index_of("attributes")?).as_any().downcast_ref::<BinaryArray>().expect("binary attributes");
    let mut keys: BTreeMap<&str, KeyValues<'_>> = BTreeMap::new();
    for (i, f) in schema.fields().iter().enumerate() {
        let column = rb.column(i).as_any();
        let wrong = || ArrowError::SchemaError(format!("{} has the wrong type", f.name()));
        if let Some(key) = f.name().strip_prefix(PREFIX) {
            keys.entry(key).or_default().whole = Some(column.downcast_ref().ok_or_else(wrong)?);
        } else if let Some(key) = f.name().strip_prefix(HEAD_PREFIX) {
            keys.entry(key).or_default().head = Some(column.downcast_ref().ok_or_else(wrong)?);
        } else if let Some(key) = f.name().strip_prefix(TAIL_PREFIX) {
            keys.entry(key).or_default().tail = Some(match Tail::of_field(f)? {
                Tail::Text => TailValues::Text(column.downcast_ref().ok_or_else(wrong)?),
                form => TailValues::Number(column.downcast_ref().ok_or_else(wrong)?, form),
            });
        } else if let Some(key) = f.name().strip_prefix(INT_PREFIX) {
            keys.entry(key).or_default().ints = Some(column.downcast_ref().ok_or_else(wrong)?);
        }
    }
    let mut whole = BinaryBuilder::with_capacity(rb.num_rows(), rest.value_data().len() * 2);
    let (mut row, mut value) = (Vec::new(), Vec::new());
    for i in 0..rb.num_rows() {
        // Both sides are sorted by key (the columns by the map, the rest as stored), so the
        // row is their merge, copied as encoded. Column values go first among equal keys:
        // the stored form is sorted stably, and the columns hold the first of a repeated key.
        row.clear();
        let mut others = rest.value(i);
        let mut next = RestEntry::parse(&mut others);
        for (key, values) in &keys {
            while let Some(entry) = next.filter(|e| e.key < *key) {
                row.extend_from_slice(entry.raw);
                next = RestEntry::parse_after(&mut others, entry.key);
            }
            value.clear();
            if values.encode(i, &mut value)? {
                put_attribute(&mut row, key, &value);
            }
        }
        while let Some(entry) = next {
            row.extend_from_slice(entry.raw);
            next = RestEntry::parse_after(&mut others, entry.key);
        }
        if others.is_empty() {
            whole.append_value(&row);
        } else {
            // Not the shape this writer stores (unsorted or unreadable): the long way.
            // The columns' values, then the rest up to what does not read as an attribute
            // (each brought to the encoder's form), sorted again.
            let mut parts = Vec::new();
            for (key, values) in &keys {
                value.clear();
                if values.encode(i, &mut value)? {
                    put_attribute(&mut parts, key, &value);
                }
            }
            let mut others = rest.value(i);
            while let Some(entry) = attribute::next_stored(&mut others) {
                let Ok(a) = persist::reencode_attribute(entry) else { break };
                prost::encoding::encode_varint(a.len() as u64, &mut parts);
                parts.extend_from_slice(&a);
            }
            row.clear();
            attribute::write_stored(&mut attribute::read_stored(&parts).collect::<Vec<_>>(), &mut row);
            whole.append_value(&row);
        }
    }
    Ok(Arc::new(whole.finish()))
}

/// One attribute of a stored `attributes` value: its key and its bytes as stored (a
/// length-delimited attribute).
#[derive(Clone, Copy)]
struct RestEntry<'a> {
    key: &'a str,
    raw: &'a [u8],
}

impl<'a> RestEntry<'a> {
    /// The next entry of `bytes`, if it has one that reads as an attribute starting with its
    /// key (how prost writes one); `bytes` is left at the entry where reading stopped.
    fn parse(bytes: &mut &'a [u8]) -> Option<Self> {
        use prost::encoding::{decode_key, decode_varint, WireType};
        let all: &'a [u8] = bytes;
        let mut cursor = all;
        let mut body = attribute::next_stored(&mut cursor)?;
        let key = match decode_key(&mut body) {
            Ok((1, WireType::LengthDelimited)) => {
                let n = usize::try_from(decode_varint(&mut body).ok()?).ok()?;
                std::str::from_utf8(body.get(..n)?).ok()?
            }
            Ok((2, _)) => "",
            _ => return None,
        };
        *bytes = cursor;
        Some(RestEntry { key, raw: &all[..all.len() - cursor.len()] })
    }

    /// The next entry, unless it is out of key order after `previous` (then `bytes` stays
    /// non-empty and the caller takes the long way).
    fn parse_after(bytes: &mut &'a [u8], previous: &str) -> Option<Self> {
        let before: &'a [u8] = bytes;
        match Self::parse(bytes) {
            Some(e) if e.key >= previous => Some(e),
            _ => {
                *bytes = before;
                None
            }
        }
    }
}

/// Appends the attribute (`key`, the encoded `value`) in the stored form.
fn put_attribute(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
    let key_field = if key.is_empty() { 0 } else { key_len(1) + encoded_len_varint(key.len() as u64) + key.len() };
    let value_field = key_len(2) + encoded_len_varint(value.len() as u64) + value.len();
    encode_varint((key_field + value_field) as u64, out);
    if !key.is_empty() {
        encode_key(1, WireType::LengthDelimited, out);
        encode_varint(key.len() as u64, out);
        out.extend_from_slice(key.as_bytes());
    }
    encode_key(2, WireType::LengthDelimited, out);
    encode_varint(value.len() as u64, out);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::attribute::{decode_stored, encode_stored, from_stored, stored};
    use crate::segment::layout::{assemble, Layout};
    use crate::segment::table::{from_record_batch, to_segment_batch, Table};
    use crate::segment::table::{Row, SpanRow};
    use proptest::prelude::*;
    use sextant_model::row::Attribute as Decoded;
    use sextant_proto::convert::persist_row::{encode_attribute, encode_attributes};

    fn value(v: u8) -> Option<DecodedValue> {
        Some(match v % 4 {
            0 => DecodedValue::String(format!("v{v}")),
            1 => DecodedValue::Int(i64::from(v)),
            2 => DecodedValue::Bool(v % 8 == 2),
            _ => DecodedValue::Double(f64::from(v) / 3.0),
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
                .map(|attrs| Row::Span(SpanRow {
                    trace_id: "t".into(),
                    attributes: encode_attributes(attrs.iter().map(|(k, v)| Decoded { key: format!("k{k}"), value: value(*v) }).collect()),
                    ..Default::default()
                }))
                .collect();
            let refs: Vec<RowRef<'_>> = spans.iter().map(|row| RowRef::new("p", row, 0)).collect();
            let layout = Layout::choose(Table::Spans, &refs);
            let physical = to_segment_batch(Table::Spans, &refs, &layout).unwrap();
            prop_assert_eq!(physical.num_columns(), Table::Spans.schema().fields().len() + 1 + layout.attribute_keys.iter().map(|k| k.fields().len()).sum::<usize>());
            let back = from_record_batch(Table::Spans, &assemble(physical, false).unwrap());
            for ((_, got, _), want) in back.iter().zip(&spans) {
                let (Row::Span(got), Row::Span(want)) = (got, want) else { unreachable!() };
                prop_assert_eq!(&got.attributes, &from_stored(&stored(&want.attributes)));
            }
        }
    }

    /// A value of the split key: mostly head + distinct last word, sometimes a value that does
    /// not split (no head, ends in a separator, not a string, non-ASCII, empty, no value).
    fn split_value(kind: u8, n: u32) -> Option<DecodedValue> {
        let text = |s: String| Some(DecodedValue::String(s));
        match kind {
            // Hexadecimal of one width and of any width, decimal, decimal with a leading zero.
            0 | 4 => text(format!("checkout-{:05x}", n & 0xfffff)),
            1 => text(format!("10.0.3.{}", n % 256)),
            2 => text(format!("u-{n}")),
            3 => text(format!("a b/{n:x}")),
            5 => text(format!("u-0{}", n % 100)),
            6 => text(format!("{n}")),
            7 => text(format!("pod-{n}-")),
            8 => text(format!("zoë-{n}")),
            9 => text(String::new()),
            10 => Some(DecodedValue::Int(i64::from(n))),
            _ => None,
        }
    }

    proptest! {
        /// Values of a key whose values split and of one whose values are mostly integers read
        /// back exactly, whichever of them split or are integers, with keys repeated or without
        /// a value.
        #[test]
        fn split_values_read_back_exactly(rows in prop::collection::vec(
            prop::collection::vec((prop_oneof![8 => 0u8..6, 1 => 6u8..13], any::<u32>(), any::<bool>()), 0..4), 1..64)) {
            let spans: Vec<Row> = rows
                .iter()
                .map(|values| Row::Span(SpanRow {
                    trace_id: "t".into(),
                    attributes: encode_attributes(values
                        .iter()
                        .map(|(kind, n, count)| match (*count, *kind) {
                            // Mostly integers (another way values leave the whole column), a few not.
                            (true, 0..=5) => Decoded { key: "count".into(), value: Some(DecodedValue::Int(i64::from(*n as i32))) },
                            (true, _) => Decoded { key: "count".into(), value: split_value(*kind, *n) },
                            (false, _) => Decoded { key: "pod".into(), value: split_value(*kind, *n) },
                        })
                        .collect()),
                    ..Default::default()
                }))
                .collect();
            let refs: Vec<RowRef<'_>> = spans.iter().map(|row| RowRef::new("p", row, 0)).collect();
            let layout = Layout::choose(Table::Spans, &refs);
            let back = from_record_batch(Table::Spans, &assemble(to_segment_batch(Table::Spans, &refs, &layout).unwrap(), false).unwrap());
            for ((_, got, _), want) in back.iter().zip(&spans) {
                let (Row::Span(got), Row::Span(want)) = (got, want) else { unreachable!() };
                prop_assert_eq!(&got.attributes, &from_stored(&stored(&want.attributes)));
            }
            let both = layout.attribute_keys.iter().any(|k| k.split) && layout.attribute_keys.iter().any(|k| k.ints);
            SPLIT_CASES.fetch_add(u32::from(both), std::sync::atomic::Ordering::Relaxed);
        }
    }

    static SPLIT_CASES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

    #[test]
    fn the_split_property_sees_split_and_integer_keys() {
        split_values_read_back_exactly();
        assert!(SPLIT_CASES.load(std::sync::atomic::Ordering::Relaxed) > 20);
    }

    /// A key with a column of whole values and nothing else.
    fn kept_whole(name: &str) -> Key {
        Key { name: name.into(), distinct: false, split: false, tail: Tail::Text, ints: false, whole: true }
    }

    #[test]
    fn mostly_distinct_values_with_few_heads_are_split() {
        let rows: Vec<Row> = (0..200u32)
            .map(|i| {
                let pod = Decoded { key: "pod".into(), value: split_value((i % 3) as u8, i * 7919) };
                let region = Decoded { key: "region".into(), value: split_value(0, i % 2) };
                Row::Span(SpanRow { attributes: encode_attributes(vec![pod, region]), ..Default::default() })
            })
            .collect();
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
        let keys = choose(&refs);
        assert_eq!(
            keys,
            vec![
                Key { name: "pod".into(), distinct: true, split: true, tail: Tail::Text, ints: false, whole: false },
                kept_whole("region")
            ]
        );
        let layout = Layout::choose(Table::Spans, &refs);
        let physical = to_segment_batch(Table::Spans, &refs, &layout).unwrap();
        let heads = physical.column_by_name("attr.head:pod").unwrap();
        assert_eq!(heads.null_count(), 0);
        let back = from_record_batch(Table::Spans, &assemble(physical, false).unwrap());
        assert!(back.iter().zip(&rows).all(|((_, got, _), want)| got == want));
    }

    #[test]
    fn numeric_last_words_are_stored_as_integers_and_read_back_as_text() {
        let words = |i: u32| {
            let user = if i.is_multiple_of(50) { format!("u-0{i}") } else { format!("u-{}", i * 7919) };
            let pod = if i.is_multiple_of(40) {
                format!("checkout-{i:x}")
            } else {
                format!("checkout-{:05x}", (i * 7919) & 0xfffff)
            };
            [("pod", pod), ("user", user)]
        };
        let rows: Vec<Row> = (0..400u32)
            .map(|i| {
                let attributes = words(i)
                    .into_iter()
                    .map(|(k, v)| Decoded { key: k.into(), value: Some(DecodedValue::String(v)) })
                    .collect();
                Row::Span(SpanRow { attributes: encode_attributes(attributes), ..Default::default() })
            })
            .collect();
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
        let keys = choose(&refs);
        assert_eq!(keys.iter().map(|k| k.tail).collect::<Vec<_>>(), [Tail::Text, Tail::Decimal]);
        let layout = Layout::choose(Table::Spans, &refs);
        let physical = to_segment_batch(Table::Spans, &refs, &layout).unwrap();
        let tails = physical.column_by_name("attr.tail:user").unwrap();
        assert_eq!(tails.data_type(), &DataType::Int64);
        assert_eq!(tails.null_count(), 8, "the user ids with a leading zero stay whole");
        assert_eq!(physical.column_by_name("attr.tail:pod").unwrap().data_type(), &DataType::Utf8);
        assert!(physical.column_by_name("attr:pod").is_none(), "every pod name splits: no column of nulls");
        assert_eq!(physical.column_by_name("attr:user").unwrap().null_count(), 400 - 8);
        let back = from_record_batch(Table::Spans, &assemble(physical, false).unwrap());
        assert!(back.iter().zip(&rows).all(|((_, got, _), want)| got == want));
    }

    #[test]
    fn the_room_for_a_rows_remaining_attributes_is_kept_between_rows() {
        let mut list: Vec<Attribute<'_>> = Vec::with_capacity(16);
        let text = String::from("k");
        list.push(Attribute { key: &text, value: None, encoded: text.as_bytes() });
        let pointer = list.as_ptr() as usize;
        let again: Vec<Attribute<'static>> = recycled(list);
        assert!(again.is_empty() && again.capacity() >= 16);
        assert_eq!(again.as_ptr() as usize, pointer, "the same allocation");
    }

    /// Keys are chosen from the rows they are written with, but a value that would go to a
    /// whole column the key lacks is kept with the rest of the attributes, not lost.
    #[test]
    fn a_value_without_a_column_for_it_stays_with_the_rest() {
        let key = Key { name: "n".into(), distinct: true, split: false, tail: Tail::Text, ints: true, whole: false };
        let keys = [key];
        let mut split = Split::new(&keys, 2);
        let int = Decoded { key: "n".into(), value: Some(DecodedValue::Int(7)) };
        let text = Decoded { key: "n".into(), value: split_value(2, 5) };
        assert!(decode_stored(split.push(&encode_attributes(vec![int]))).is_empty());
        assert_eq!(decode_stored(split.push(&encode_attributes(vec![text.clone()]))), [text]);
        let columns = split.finish();
        assert_eq!(columns.len(), 1, "the integers only");
        assert_eq!(columns[0].null_count(), 1);
    }

    /// Re-assembly copies stored attributes as they are when they are in key order, and
    /// sorts them when they are not (a value this writer would not store, but a reader must
    /// not garble), placing a column's value before the stored ones of the same key.
    #[test]
    fn joined_attributes_are_in_key_order_whatever_the_stored_order() {
        let kv = |key: &str, v: u8| Decoded { key: key.into(), value: value(v) };
        let stored = |attrs: &[Decoded]| {
            let mut out = Vec::new();
            for a in attrs {
                let a = encode_attribute(a.clone());
                prost::encoding::encode_varint(a.len() as u64, &mut out);
                out.extend_from_slice(&a);
            }
            out
        };
        let mut column_value = Vec::new();
        persist::encode_value(value(9).unwrap(), &mut column_value);
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            Field::new("attributes", DataType::Binary, false),
            Field::new(format!("{PREFIX}m"), DataType::Binary, true),
        ]));
        let in_order = stored(&[kv("a", 1), kv("m", 2), kv("z", 3)]);
        let out_of_order = stored(&[kv("z", 3), kv("a", 1), kv("m", 2)]);
        let rb = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(BinaryArray::from(vec![in_order.as_slice(), out_of_order.as_slice(), b"".as_slice()])),
                Arc::new(BinaryArray::from(vec![Some(column_value.as_slice()), Some(column_value.as_slice()), None])),
            ],
        )
        .unwrap();
        let joined = join(&rb).unwrap();
        let joined = joined.as_any().downcast_ref::<BinaryArray>().unwrap();
        let expected = encode_stored(vec![kv("a", 1), kv("m", 9), kv("m", 2), kv("z", 3)]);
        assert_eq!(joined.value(0), expected.as_slice());
        assert_eq!(joined.value(1), expected.as_slice());
        assert!(joined.value(2).is_empty());
    }

    #[test]
    fn frequent_keys_get_columns_and_rare_ones_do_not() {
        let rows: Vec<Row> = (0..64)
            .map(|i| {
                let mut attributes = vec![Decoded { key: "region".into(), value: value(0) }];
                if i == 0 {
                    attributes.push(Decoded { key: "rare".into(), value: value(1) });
                }
                Row::Span(SpanRow { attributes: encode_attributes(attributes), ..Default::default() })
            })
            .collect();
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
        assert_eq!(choose(&refs), vec![kept_whole("region")]);
    }
}
