//! Hex ids stored as their bytes. Trace and span ids are almost always lowercase hex
//! (OpenTelemetry: 32 and 16 characters); as text each byte of the id costs two characters,
//! and ZSTD gets back only part of that (measured: a log's trace id took 10.3 B/line as text,
//! where its bytes are 16 at 60% presence, 12 of them random). A segment stores such a column
//! as binary, the column's width noted in the field's metadata ([`super::layout`]).
//!
//! The encoding is exact for every string, because readers must get back exactly the ids that
//! were written, whatever a client sends (uppercase, other lengths, UUIDs with dashes, empty):
//! - lowercase hex of exactly `2 × width` characters: its `width` bytes;
//! - any other string of exactly `width` bytes: those bytes and then `0xFF`, a byte that never
//!   occurs in UTF-8, so this cannot be confused with a stored string of `width + 1` bytes;
//! - anything else: its UTF-8 bytes (never `width` long).
//!
//! An empty id (a log line outside any trace) is stored as null: a definition level costs a
//! bit where a length costs several (measured: 0.4 B/line on each of a log's two ids).
//!
//! The bloom filter of an encoded column holds the encoded values, so a lookup probes it with
//! [`encode`]d ids.

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{Array, BinaryArray, StringArray};
use arrow_schema::ArrowError;

/// Marks a `width`-byte string that is not hex (see the module docs).
const NOT_HEX: u8 = 0xFF;

/// The value of each ASCII hex digit this encoding takes (lowercase), `0xFF` for other bytes.
const DIGIT_VALUES: [u8; 256] = {
    let mut table = [0xFF; 256];
    let mut c = 0;
    while c < 10 {
        table[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        table[b'a' as usize + c] = 10 + c as u8;
        c += 1;
    }
    table
};

/// `id` as stored in a column of ids `width` bytes wide.
pub fn encode(id: &str, width: usize, out: &mut Vec<u8>) {
    let text = id.as_bytes();
    if text.len() == 2 * width {
        let start = out.len();
        out.reserve(width);
        for pair in text.chunks_exact(2) {
            let (hi, lo) = (DIGIT_VALUES[usize::from(pair[0])], DIGIT_VALUES[usize::from(pair[1])]);
            if (hi | lo) > 15 {
                out.truncate(start);
                out.extend_from_slice(text);
                return;
            }
            out.push(hi << 4 | lo);
        }
        return;
    }
    out.extend_from_slice(text);
    if text.len() == width {
        out.push(NOT_HEX);
    }
}

/// The id that [`encode`] stored as `bytes`; `None` if no id is stored that way (a damaged
/// file).
pub fn decode(bytes: &[u8], width: usize, out: &mut String) -> Option<()> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    if bytes.len() == width {
        for b in bytes {
            out.push(DIGITS[usize::from(b >> 4)] as char);
            out.push(DIGITS[usize::from(b & 15)] as char);
        }
        return Some(());
    }
    let text = match bytes.split_last() {
        Some((&NOT_HEX, text)) if text.len() == width => text,
        _ => bytes,
    };
    out.push_str(std::str::from_utf8(text).ok()?);
    Some(())
}

/// Appends `id` to a column of ids as stored (ids `width` bytes wide): an empty id as null.
/// `scratch` is reused from call to call.
pub fn append(out: &mut BinaryBuilder, id: &str, width: usize, scratch: &mut Vec<u8>) {
    if id.is_empty() {
        out.append_null();
        return;
    }
    scratch.clear();
    encode(id, width, scratch);
    out.append_value(&scratch);
}

/// The ids of a stored column.
pub fn decode_column(stored: &BinaryArray, width: usize) -> Result<StringArray, ArrowError> {
    let mut out = StringBuilder::with_capacity(stored.len(), stored.len() * 2 * width);
    let mut id = String::with_capacity(2 * width);
    for bytes in stored.iter() {
        // Null: an empty id (which `decode` gives for no bytes).
        id.clear();
        decode(bytes.unwrap_or_default(), width, &mut id)
            .ok_or_else(|| ArrowError::ParseError("an id column holds an invalid value".into()))?;
        out.append_value(&id);
    }
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(id: &str, width: usize) -> (Vec<u8>, String) {
        let mut bytes = Vec::new();
        encode(id, width, &mut bytes);
        let mut back = String::new();
        decode(&bytes, width, &mut back).expect("decodable");
        (bytes, back)
    }

    #[test]
    fn lowercase_hex_of_the_width_is_stored_as_bytes() {
        let (bytes, back) = round_trip("00ff10a0b1c2d3e4", 8);
        assert_eq!(bytes, [0x00, 0xff, 0x10, 0xa0, 0xb1, 0xc2, 0xd3, 0xe4]);
        assert_eq!(back, "00ff10a0b1c2d3e4");
    }

    #[test]
    fn other_ids_are_stored_as_text() {
        for (id, width) in [
            ("00FF10A0B1C2D3E4", 8),   // uppercase
            ("00ff10a0b1c2d3e", 8),    // odd length
            ("00ff10a0b1c2d3e4aa", 8), // longer
            ("0xff10a0b1c2d3e4", 8),   // not hex
            ("abcdefgh", 8),           // the width in bytes, not hex
            ("é", 2),                  // the width in bytes, not ASCII
            ("", 8),
            ("4bf92f3577b34da6a3ce929d0e0e4736", 8),
            ("0af7651916cd43dd8448eb211c80319c-", 16),
        ] {
            let (bytes, back) = round_trip(id, width);
            assert_ne!(bytes.len(), width, "{id:?}");
            assert_eq!(back, id);
        }
    }

    proptest! {
        /// Any string, and strings built to be close to ids (hex digits of either case, the
        /// width in characters or in bytes, empty), read back exactly.
        #[test]
        fn every_id_reads_back_exactly(
            any_text in ".{0,40}",
            digits in prop::collection::vec(prop::sample::select(b"0123456789abcdefABCDEFxg-".to_vec()), 0..40),
            width in prop::sample::select(vec![1usize, 8, 16]),
        ) {
            let near_hex = String::from_utf8(digits).unwrap();
            let exact = near_hex.get(..(2 * width).min(near_hex.len())).unwrap_or_default().to_owned();
            let width_bytes = near_hex.get(..width.min(near_hex.len())).unwrap_or_default().to_owned();
            for id in [any_text.as_str(), &near_hex, &exact, &width_bytes, ""] {
                prop_assert_eq!(round_trip(id, width).1, id);
            }
        }

        /// Distinct ids are stored distinctly: a bloom filter or an equality on the stored form
        /// answers for the id.
        #[test]
        fn distinct_ids_are_stored_distinctly(a in "[0-9a-fA-F]{0,33}", b in "[0-9a-f]{16}|.{0,17}") {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            encode(&a, 8, &mut x);
            encode(&b, 8, &mut y);
            prop_assert_eq!(a == b, x == y);
        }
    }
}
