//! The incarnation file of a data directory (docs/RELIABILITY.md, "Replacing a node").

use std::io;

use super::{invalid, INCARNATION};

/// The format header, then the incarnation as 8 little-endian bytes.
pub(crate) fn encode_incarnation(incarnation: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(super::HEADER_LEN + 8);
    INCARNATION.write_header(&mut out);
    out.extend_from_slice(&incarnation.to_le_bytes());
    out
}

pub(crate) fn decode_incarnation(bytes: &[u8]) -> io::Result<u64> {
    let body: [u8; 8] = INCARNATION.body(bytes)?.try_into().map_err(|_| invalid("an incarnation must have 8 bytes"))?;
    match u64::from_le_bytes(body) {
        0 => Err(invalid("an incarnation must not be 0")),
        n => Ok(n),
    }
}
