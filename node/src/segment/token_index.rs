//! The inverted index of a log segment, at row-group granularity: for each row group, the set
//! of (hashed) terms its lines contain — message words and attribute `key:value` pairs. A
//! search reads only the row groups that hold every required term, then checks the lines
//! themselves (hash collisions and phrase order are settled there).
//!
//! Why row groups and not row ids: a row group is the unit Parquet decodes anyway, and a term
//! set per 8192 lines costs about one byte per line, against several for exact postings,
//! which matters for the bytes-per-line budget (DESIGN B4, issue 3 targets).
//!
//! Encoding: for each row group, the sorted unique 32-bit term hashes as a varint count and
//! varint deltas; the whole thing zstd-compressed, stored base64 in the segment's footer.

use base64::Engine;
use sextant_model::text::{attribute_term, tokens};
use sextant_proto::LogRecord;

use super::scan::attribute_text;
use xxhash_rust::xxh3::xxh3_64;

pub const FOOTER_KEY: &str = "sextant.tokens";

pub fn term_hash(term: &str) -> u32 {
    xxh3_64(term.as_bytes()) as u32
}

/// The hashed terms of one log line.
pub fn line_terms(log: &LogRecord, out: &mut Vec<u32>) {
    out.extend(tokens(&log.message).map(|t| term_hash(&t)));
    for kv in &log.attributes {
        if let Some(text) = attribute_text(kv) {
            out.push(term_hash(&attribute_term(&kv.key, &text)));
        }
    }
}

/// Per row group, the sorted unique hashes of its terms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenIndex {
    pub groups: Vec<Vec<u32>>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], pos: &mut usize) -> Option<u32> {
    let mut v: u32 = 0;
    for shift in (0..35).step_by(7) {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        v |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl TokenIndex {
    /// Adds a row group made of `terms` (any order, duplicates allowed).
    pub fn push_group(&mut self, mut terms: Vec<u32>) {
        terms.sort_unstable();
        terms.dedup();
        self.groups.push(terms);
    }

    /// Whether row group `rg` may hold lines with all `terms`.
    pub fn may_contain_all(&self, rg: usize, terms: &[u32]) -> bool {
        self.groups.get(rg).is_none_or(|g| terms.iter().all(|t| g.binary_search(t).is_ok()))
    }

    pub fn encode(&self) -> String {
        let mut raw = Vec::new();
        put_varint(&mut raw, self.groups.len() as u32);
        for g in &self.groups {
            put_varint(&mut raw, g.len() as u32);
            let mut prev = 0u32;
            for &t in g {
                put_varint(&mut raw, t - prev);
                prev = t;
            }
        }
        let packed = zstd::bulk::compress(&raw, 3).expect("compressing into memory");
        let mut framed = (raw.len() as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(&packed);
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(framed)
    }

    pub fn decode(text: &str) -> Option<TokenIndex> {
        let framed = base64::engine::general_purpose::STANDARD_NO_PAD.decode(text).ok()?;
        let raw_len = u32::from_le_bytes(framed.get(..4)?.try_into().ok()?) as usize;
        // The length is checked against the footer size bound by the caller (the footer
        // itself is bounded); decompression never allocates more than it says.
        let raw = zstd::bulk::decompress(&framed[4..], raw_len).ok()?;
        let mut pos = 0;
        let n = get_varint(&raw, &mut pos)? as usize;
        let mut groups = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let len = get_varint(&raw, &mut pos)? as usize;
            let mut g = Vec::with_capacity(len.min(raw.len()));
            let mut prev = 0u32;
            for _ in 0..len {
                prev = prev.checked_add(get_varint(&raw, &mut pos)?)?;
                g.push(prev);
            }
            groups.push(g);
        }
        Some(TokenIndex { groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sextant_proto::any_value;

    proptest! {
        #[test]
        fn encode_decode_round_trip(groups in prop::collection::vec(prop::collection::vec(any::<u32>(), 0..200), 0..8)) {
            let mut idx = TokenIndex::default();
            for g in groups.clone() {
                idx.push_group(g);
            }
            prop_assert_eq!(TokenIndex::decode(&idx.encode()), Some(idx.clone()));
            for (rg, g) in groups.iter().enumerate() {
                prop_assert!(idx.may_contain_all(rg, &g.iter().copied().take(5).collect::<Vec<_>>()));
            }
        }
    }

    #[test]
    fn lines_index_words_and_attribute_pairs() {
        let log = LogRecord {
            message: "Disk FULL on /var".into(),
            attributes: vec![sextant_proto::KeyValue {
                key: "region".into(),
                value: Some(sextant_proto::AnyValue { value: Some(any_value::Value::StringValue("eu-1".into())) }),
            }],
            ..Default::default()
        };
        let mut terms = Vec::new();
        line_terms(&log, &mut terms);
        let mut idx = TokenIndex::default();
        idx.push_group(terms);
        let has = |t: &str| idx.may_contain_all(0, &[term_hash(t)]);
        assert!(has("disk") && has("full") && has("var") && has(&attribute_term("region", "eu-1")));
        assert!(!has("Disk") && !has("memory"));
        assert_eq!(TokenIndex::decode("not base64!"), None);
    }
}
