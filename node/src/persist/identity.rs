//! The incarnation file of a data directory (docs/RELIABILITY.md, "Replacing a node") and its
//! bootstrap record (`crate::bootstrap`).

use std::io;

use super::{invalid, BOOTSTRAP, INCARNATION};

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

/// What releases before the record wrote: bootstrapped, initial member set not known.
const BOOTSTRAP_BEFORE_FORMAT_1: &[u8] = b"part of a cluster\n";

/// The format header, then the initial member ids as little-endian u64s (none: not known).
pub(crate) fn encode_bootstrap(members: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(super::HEADER_LEN + 8 * members.len());
    BOOTSTRAP.write_header(&mut out);
    for id in members {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

pub(crate) fn decode_bootstrap(bytes: &[u8]) -> io::Result<Vec<u64>> {
    if bytes == BOOTSTRAP_BEFORE_FORMAT_1 {
        return Ok(Vec::new());
    }
    let body = BOOTSTRAP.body(bytes)?;
    let (ids, rest) = body.as_chunks::<8>();
    if !rest.is_empty() {
        return Err(invalid("a bootstrap record must hold whole 8-byte ids"));
    }
    Ok(ids.iter().map(|id| u64::from_le_bytes(*id)).collect())
}
