//! The inverted index of a log segment, at row-group granularity: for each row group, the set
//! of (hashed) terms its lines contain — message words and attribute `key:value` pairs. A
//! search reads only the row groups that hold every required term, then checks the lines
//! themselves (hash collisions and phrase order are settled there).
//!
//! Why row groups and not row ids: a row group is the unit Parquet decodes anyway, and a term
//! set per 8192 lines costs a few bytes per line, against several times more for exact
//! postings, which matters for the bytes-per-line budget (issue 3 targets; docs/ARCHITECTURE.md,
//! "Data shards: the segment engine").
//!
//! Encoding: per row group, its terms reduced to the range `n × 2^RICE_BITS` (n: its number of
//! distinct terms), sorted, deduplicated, and their gaps Golomb–Rice coded — a Golomb-coded set,
//! about 9 bits per term, with a false positive rate of 1/128 per term and row group (a false
//! positive only costs reading a row group). The bit stream is stored 7 bits per character in
//! the segment's footer, which must be text. Segments written before kept exact 32-bit hashes
//! under [`LEGACY_FOOTER_KEY`] and are still read.

use base64::Engine;
use sextant_model::text::{attribute_term, tokens};

use super::attribute;
use super::table::LogRow;
use xxhash_rust::xxh3::xxh3_64;

pub const FOOTER_KEY: &str = "sextant.terms";
pub const LEGACY_FOOTER_KEY: &str = "sextant.tokens";
const RICE_BITS: u32 = 7;
/// Most a legacy index expands from its compressed bytes (see `decode_legacy`).
const LEGACY_MAX_EXPANSION: usize = 64;

pub fn term_hash(term: &str) -> u32 {
    xxh3_64(term.as_bytes()) as u32
}

/// The hashed terms of one log line: `term_hash` of each of its `tokens` and of each
/// `attribute_term`, without building those strings where the text is ASCII.
pub fn line_terms(log: &LogRow, out: &mut Vec<u32>) {
    message_terms(&log.message, out);
    for a in attribute::read(&log.attributes) {
        if let Some(text) = a.text() {
            out.push(attribute_term_hash(a.key, &text));
        }
    }
}

/// Tokens of an ASCII message are runs of ASCII alphanumerics or `_` (what `tokens` finds in
/// it), hashed as they are or lower-cased on the stack.
fn message_terms(message: &str, out: &mut Vec<u32>) {
    if !message.is_ascii() {
        out.extend(tokens(message).map(|t| term_hash(&t)));
        return;
    }
    let mut lower = [0u8; 64];
    let words = message.as_bytes().split(|b| !(b.is_ascii_alphanumeric() || *b == b'_')).filter(|w| !w.is_empty());
    for word in words {
        let hash = if !word.iter().any(u8::is_ascii_uppercase) {
            xxh3_64(word)
        } else if let Some(buf) = lower.get_mut(..word.len()) {
            buf.copy_from_slice(word);
            buf.make_ascii_lowercase();
            xxh3_64(buf)
        } else {
            xxh3_64(&word.to_ascii_lowercase())
        };
        out.push(hash as u32);
    }
}

/// `term_hash(&attribute_term(key, value))`, built on the stack when short.
fn attribute_term_hash(key: &str, value: &str) -> u32 {
    let mut stack = [0u8; 256];
    let Some(buf) = stack.get_mut(..key.len() + value.len() + 2) else {
        return term_hash(&attribute_term(key, value));
    };
    let (head, rest) = buf.split_at_mut(1 + key.len());
    head[0] = 1;
    head[1..].copy_from_slice(key.as_bytes());
    rest[0] = 1;
    rest[1..].copy_from_slice(value.as_bytes());
    xxh3_64(buf) as u32
}

/// The terms of one row group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    /// Terms are reduced to `0..range` (`1 << 32`: kept whole).
    range: u64,
    /// Sorted, unique.
    values: Vec<u32>,
}

impl TokenIndex {
    /// Heap bytes of its term lists.
    pub fn heap_bytes(&self) -> usize {
        self.groups.iter().map(|g| g.values.capacity() * 4).sum::<usize>()
            + self.groups.capacity() * std::mem::size_of::<Group>()
    }
}

impl Group {
    fn reduce(&self, term: u32) -> u32 {
        ((u64::from(term) * self.range) >> 32) as u32
    }

    fn may_contain(&self, term: u32) -> bool {
        self.values.binary_search(&self.reduce(term)).is_ok()
    }
}

/// Per row group, the set of its terms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenIndex {
    pub groups: Vec<Group>,
}

/// The legacy format's integers (written by tests only, now).
#[cfg(test)]
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

/// A bit stream written and read 7 bits per character (always valid UTF-8).
#[derive(Default)]
struct Bits {
    chars: Vec<u8>,
    acc: u32,
    filled: u32,
}

impl Bits {
    fn push(&mut self, value: u32, bits: u32) {
        for i in (0..bits).rev() {
            self.acc = (self.acc << 1) | ((value >> i) & 1);
            self.filled += 1;
            if self.filled == 7 {
                self.chars.push(self.acc as u8);
                (self.acc, self.filled) = (0, 0);
            }
        }
    }

    fn varint(&mut self, v: u32) {
        // Elias-gamma on v + 1: counts and sizes, rare next to the gaps.
        let v = v as u64 + 1;
        let len = 64 - v.leading_zeros();
        self.push(0, len - 1);
        for i in (0..len).rev() {
            self.push(((v >> i) & 1) as u32, 1);
        }
    }

    fn finish(mut self) -> String {
        if self.filled > 0 {
            self.chars.push((self.acc << (7 - self.filled)) as u8);
        }
        String::from_utf8(self.chars).expect("7-bit characters")
    }
}

struct BitReader<'a> {
    chars: &'a [u8],
    pos: usize,
}

impl BitReader<'_> {
    fn bit(&mut self) -> Option<u32> {
        let c = *self.chars.get(self.pos / 7)?;
        let bit = (c >> (6 - self.pos % 7)) & 1;
        self.pos += 1;
        Some(u32::from(bit))
    }

    fn bits(&mut self, n: u32) -> Option<u32> {
        (0..n).try_fold(0u32, |acc, _| Some((acc << 1) | self.bit()?))
    }

    fn varint(&mut self) -> Option<u32> {
        let mut zeros = 0;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 40 {
                return None;
            }
        }
        let mut v: u64 = 1;
        for _ in 0..zeros {
            v = (v << 1) | u64::from(self.bit()?);
        }
        u32::try_from(v - 1).ok()
    }
}

impl TokenIndex {
    /// Adds a row group made of `terms` (any order, duplicates allowed).
    pub fn push_group(&mut self, mut terms: Vec<u32>) {
        terms.sort_unstable();
        terms.dedup();
        let range = ((terms.len() as u64) << RICE_BITS).clamp(1, 1 << 32);
        let mut group = Group { range, values: Vec::with_capacity(terms.len()) };
        group.values = terms.iter().map(|&t| group.reduce(t)).collect();
        group.values.dedup();
        self.groups.push(group);
    }

    /// Whether row group `rg` may hold lines with all `terms`.
    pub fn may_contain_all(&self, rg: usize, terms: &[u32]) -> bool {
        self.groups.get(rg).is_none_or(|g| terms.iter().all(|&t| g.may_contain(t)))
    }

    pub fn encode(&self) -> String {
        let mut bits = Bits::default();
        bits.varint(self.groups.len() as u32);
        for g in &self.groups {
            bits.varint((g.range >> RICE_BITS) as u32);
            bits.varint(g.values.len() as u32);
            let mut prev = 0u32;
            for &v in &g.values {
                let gap = v - prev;
                // Quotient in unary (ones, then a zero), remainder in RICE_BITS bits.
                for _ in 0..gap >> RICE_BITS {
                    bits.push(1, 1);
                }
                bits.push(0, 1);
                bits.push(gap & ((1 << RICE_BITS) - 1), RICE_BITS);
                prev = v;
            }
        }
        bits.finish()
    }

    pub fn decode(text: &str) -> Option<TokenIndex> {
        let mut r = BitReader { chars: text.as_bytes(), pos: 0 };
        let n = r.varint()? as usize;
        let mut groups = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let range = (u64::from(r.varint()?) << RICE_BITS).clamp(1, 1 << 32);
            let len = r.varint()? as usize;
            // Each value takes at least RICE_BITS + 1 bits: a corrupt count cannot allocate more.
            if len > text.len() * 7 / (RICE_BITS as usize + 1) {
                return None;
            }
            let mut values = Vec::with_capacity(len);
            let mut prev = 0u32;
            for _ in 0..len {
                let mut q = 0u32;
                while r.bit()? == 1 {
                    q = q.checked_add(1)?;
                }
                let gap = (q.checked_shl(RICE_BITS)?) | r.bits(RICE_BITS)?;
                prev = prev.checked_add(gap)?;
                values.push(prev);
            }
            groups.push(Group { range, values });
        }
        Some(TokenIndex { groups })
    }

    /// The index of a segment written before the Golomb-coded sets: exact hashes, zstd, base64.
    pub fn decode_legacy(text: &str) -> Option<TokenIndex> {
        let framed = base64::engine::general_purpose::STANDARD_NO_PAD.decode(text).ok()?;
        let raw_len = u32::from_le_bytes(framed.get(..4)?.try_into().ok()?) as usize;
        // The length comes from the file: zstd would allocate it before reading a byte. Exact
        // hashes compress little, so a length far past the compressed size is corruption.
        if raw_len > framed.len().saturating_mul(LEGACY_MAX_EXPANSION) + 65536 {
            return None;
        }
        let raw = zstd::bulk::decompress(&framed[4..], raw_len).ok()?;
        let mut pos = 0;
        let n = get_varint(&raw, &mut pos)? as usize;
        let mut groups = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let len = get_varint(&raw, &mut pos)? as usize;
            let mut values = Vec::with_capacity(len.min(raw.len()));
            let mut prev = 0u32;
            for _ in 0..len {
                prev = prev.checked_add(get_varint(&raw, &mut pos)?)?;
                values.push(prev);
            }
            groups.push(Group { range: 1 << 32, values });
        }
        Some(TokenIndex { groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sextant_model::row::{Attribute, Value};
    use sextant_proto::convert::persist_row::encode_attributes;

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

    proptest! {
        /// The index of a line written without building its terms' strings holds the same
        /// hashes as one built from `tokens` and `attribute_term` (segments already written,
        /// and searches, hash those).
        #[test]
        fn line_terms_hash_the_tokens_and_attribute_terms(
            message in "([a-zA-Z_0-9]{0,70}[ ,.:=/ÉéΣσ€-]{0,2}){0,8}",
            key in "[a-zA-Zé.]{0,300}",
            value in "[a-zA-Z0-9 é]{0,30}",
        ) {
            let attributes = vec![
                Attribute { key: key.clone(), value: Some(Value::String(value.clone())) },
                Attribute { key: "n".into(), value: Some(Value::Int(-12)) },
            ];
            let log = LogRow { message: message.clone(), attributes: encode_attributes(attributes), ..Default::default() };
            let mut got = Vec::new();
            line_terms(&log, &mut got);
            let mut want: Vec<u32> = tokens(&message).map(|t| term_hash(&t)).collect();
            want.push(term_hash(&attribute_term(&key, &value)));
            want.push(term_hash(&attribute_term("n", "-12")));
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn lines_index_words_and_attribute_pairs() {
        let log = LogRow {
            message: "Disk FULL on /var".into(),
            attributes: encode_attributes(vec![Attribute {
                key: "region".into(),
                value: Some(Value::String("eu-1".into())),
            }]),
            ..Default::default()
        };
        let mut terms = Vec::new();
        line_terms(&log, &mut terms);
        let mut idx = TokenIndex::default();
        idx.push_group(terms);
        let has = |t: &str| idx.may_contain_all(0, &[term_hash(t)]);
        assert!(has("disk") && has("full") && has("var") && has(&attribute_term("region", "eu-1")));
        assert_eq!(TokenIndex::decode("\u{0}"), None, "a stream that ends inside a number");
        assert_eq!(TokenIndex::decode_legacy("not base64!"), None);
    }

    #[test]
    fn false_positives_stay_near_one_in_128() {
        let mut idx = TokenIndex::default();
        idx.push_group((0..8192u32).map(|i| term_hash(&format!("present-{i}"))).collect());
        let idx = TokenIndex::decode(&idx.encode()).unwrap();
        assert!((0..8192).all(|i| idx.may_contain_all(0, &[term_hash(&format!("present-{i}"))])));
        let false_hits = (0..100_000).filter(|i| idx.may_contain_all(0, &[term_hash(&format!("absent-{i}"))])).count();
        assert!(false_hits < 100_000 / 128 * 3 / 2, "{false_hits} false positives in 100000");
        // About 9 bits per term, in 7-bit characters.
        assert!(idx.encode().len() < 8192 * 11 / 8, "{} bytes", idx.encode().len());
    }

    #[test]
    fn legacy_indexes_still_read() {
        // Two groups, {5, 9} and {7}, as segments written before stored them.
        let mut raw = Vec::new();
        for v in [2, 2, 5, 4, 1, 7] {
            put_varint(&mut raw, v);
        }
        let mut framed = (raw.len() as u32).to_le_bytes().to_vec();
        framed.extend(zstd::bulk::compress(&raw, 3).unwrap());
        let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(framed);
        let idx = TokenIndex::decode_legacy(&text).unwrap();
        assert!(idx.may_contain_all(0, &[5, 9]) && idx.may_contain_all(1, &[7]));
        assert!(!idx.may_contain_all(0, &[7]) && !idx.may_contain_all(1, &[5]));
    }

    /// Found by fuzzing: a legacy index's length is read from the file, and a corrupted one
    /// (here 4 GiB) made zstd allocate it whole before decompressing.
    #[test]
    fn a_legacy_index_with_a_corrupted_length_is_unreadable() {
        let raw = [1u8, 1, 5];
        let mut framed = u32::MAX.to_le_bytes().to_vec();
        framed.extend(zstd::bulk::compress(&raw, 3).unwrap());
        let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(framed);
        assert_eq!(TokenIndex::decode_legacy(&text), None);
    }
}
