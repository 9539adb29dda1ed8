//! The persisted formats of a node (docs/ARCHITECTURE.md, "Persisted formats"): the conversions
//! between the messages of `sextant_proto::persist` and the domain and openraft types, one
//! module per message family, and the header every persisted blob starts with. No other
//! module names a persist message.

mod archive;
mod entry;
mod identity;
mod manifest;
mod raft_rpc;

#[cfg(test)]
pub(crate) mod golden;

use std::io;

pub(crate) use archive::{decode_archive_header, encode_archive_header};
#[cfg(test)]
pub(crate) use entry::encode_entry;
pub(crate) use entry::{
    decode_entry, decode_log_id, decode_snapshot_meta, decode_vote, encode_entry_into, encode_log_id,
    encode_snapshot_meta, encode_vote,
};
pub(crate) use identity::{decode_bootstrap, decode_incarnation, encode_bootstrap, encode_incarnation};
pub(crate) use manifest::{decode_manifest, encode_manifest};
pub(crate) use raft_rpc::{
    decode_append_request, decode_append_response, decode_snapshot_request, decode_snapshot_response,
    decode_vote_request, decode_vote_response, encode_append_request, encode_append_response, encode_snapshot_request,
    encode_snapshot_response, encode_vote_request, encode_vote_response,
};

/// What a blob is and the version of its encoding: every persisted blob starts with the four
/// magic bytes and the version byte, so that a file of another format or version is refused
/// with a clear error instead of being misread.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Format {
    magic: [u8; 4],
    version: u8,
    what: &'static str,
}

pub(crate) const LOG_ENTRY: Format = Format { magic: *b"SXLE", version: 1, what: "Raft log entry" };
pub(crate) const LOG_ID: Format = Format { magic: *b"SXLI", version: 1, what: "Raft log id" };
pub(crate) const VOTE: Format = Format { magic: *b"SXVO", version: 1, what: "Raft vote" };
pub(crate) const MANIFEST: Format = Format { magic: *b"SXMF", version: 1, what: "segment manifest" };
pub(crate) const STATE_FILE: Format = Format { magic: *b"SXST", version: 1, what: "state snapshot" };
pub(crate) const INCARNATION: Format = Format { magic: *b"SXIN", version: 1, what: "node incarnation" };
pub(crate) const BOOTSTRAP: Format = Format { magic: *b"SXBS", version: 1, what: "bootstrap record" };

pub(crate) const HEADER_LEN: usize = 5;

impl Format {
    pub(crate) fn write_header(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.magic);
        out.push(self.version);
    }

    /// `msg` as a blob of this format: the header, then the message.
    pub(crate) fn encode(&self, msg: &impl prost::Message) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + msg.encoded_len());
        self.write_header(&mut out);
        msg.encode(&mut out).expect("a Vec grows");
        out
    }

    /// The message of a blob of this format; `what` names it in errors.
    pub(crate) fn decode<M: prost::Message + Default>(&self, bytes: &[u8], what: &str) -> io::Result<M> {
        M::decode(self.body(bytes)?).map_err(|e| decode_error(what, e))
    }

    /// [`Format::decode`] of a shared buffer: `bytes` fields of the message are slices of it.
    pub(crate) fn decode_shared<M: prost::Message + Default>(&self, bytes: bytes::Bytes, what: &str) -> io::Result<M> {
        self.body(&bytes)?;
        M::decode(bytes.slice(HEADER_LEN..)).map_err(|e| decode_error(what, e))
    }

    /// The body after the header, or an error saying why the blob is not of this format.
    pub(crate) fn body<'a>(&self, bytes: &'a [u8]) -> io::Result<&'a [u8]> {
        let Some((head, body)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Err(self.unsupported("too short for a header"));
        };
        if head[..4] != self.magic {
            return Err(self.unsupported("no format header (written by a release before format 1?)"));
        }
        if head[4] != self.version {
            return Err(self.unsupported(&format!("format version {} (this release reads {})", head[4], self.version)));
        }
        Ok(body)
    }

    fn unsupported(&self, why: &str) -> io::Error {
        invalid(format!("unsupported {} format: {why}; see docs/RELIABILITY.md, \"Upgrades\"", self.what))
    }
}

pub(crate) fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn decode_error(what: &str, e: prost::DecodeError) -> io::Error {
    invalid(format!("malformed {what}: {e}"))
}

fn missing(what: &str, field: &str) -> io::Error {
    invalid(format!("malformed {what}: `{field}` is missing"))
}

fn batch_id_bytes(id: u128) -> Vec<u8> {
    id.to_le_bytes().to_vec()
}

fn batch_id_from(bytes: &[u8]) -> io::Result<u128> {
    let b: [u8; 16] = bytes.try_into().map_err(|_| invalid("a batch id must have 16 bytes"))?;
    Ok(u128::from_le_bytes(b))
}

/// Batch ids packed as 16 bytes each.
fn pack_batch_ids(ids: impl IntoIterator<Item = u128>) -> Vec<u8> {
    ids.into_iter().flat_map(u128::to_le_bytes).collect()
}

fn unpack_batch_ids(bytes: &[u8]) -> io::Result<Vec<u128>> {
    if bytes.len() % 16 != 0 {
        return Err(invalid("a list of batch ids is not a multiple of 16 bytes"));
    }
    Ok(bytes.chunks_exact(16).map(|c| u128::from_le_bytes(c.try_into().unwrap())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_of_another_format_or_version_is_refused_by_name() {
        let mut blob = Vec::new();
        VOTE.write_header(&mut blob);
        blob.push(7);
        assert_eq!(VOTE.body(&blob).unwrap(), [7]);
        let err = MANIFEST.body(&blob).unwrap_err().to_string();
        assert!(err.contains("unsupported segment manifest format"), "{err}");
        blob[4] = 2;
        let err = VOTE.body(&blob).unwrap_err().to_string();
        assert!(err.contains("format version 2 (this release reads 1)"), "{err}");
        assert!(VOTE.body(b"SXV").is_err());
    }

    #[test]
    fn batch_ids_pack_and_unpack() {
        let ids = vec![0, 1, u128::MAX, 1 << 100];
        assert_eq!(unpack_batch_ids(&pack_batch_ids(ids.clone())).unwrap(), ids);
        assert!(unpack_batch_ids(&[0; 15]).is_err());
        assert_eq!(batch_id_from(&batch_id_bytes(u128::MAX - 3)).unwrap(), u128::MAX - 3);
    }
}
