//! The header of a snapshot archive (see [`crate::archive`] for the layout around it).

use std::io;

use prost::Message;
use sextant_proto::persist as pb;

use super::entry::{snapshot_meta_from_pb, snapshot_meta_to_pb};
use super::{decode_error, missing};
use crate::archive::FileEntry;
use crate::types::SnapshotMeta;

pub(super) fn file_to_pb(f: &FileEntry) -> pb::FileEntry {
    pb::FileEntry { name: f.name.clone(), len: f.len, xxh3: f.xxh3 }
}

pub(super) fn file_from_pb(f: pb::FileEntry) -> FileEntry {
    FileEntry { name: f.name, len: f.len, xxh3: f.xxh3 }
}

/// A `persist.v1.ArchiveHeader`.
pub(crate) fn encode_archive_header(meta: &SnapshotMeta, files: &[FileEntry]) -> Vec<u8> {
    pb::ArchiveHeader { meta: Some(snapshot_meta_to_pb(meta)), files: files.iter().map(file_to_pb).collect() }
        .encode_to_vec()
}

pub(crate) fn decode_archive_header(bytes: &[u8]) -> io::Result<(SnapshotMeta, Vec<FileEntry>)> {
    const WHAT: &str = "snapshot archive header";
    let h = pb::ArchiveHeader::decode(bytes).map_err(|e| decode_error(WHAT, e))?;
    let meta = snapshot_meta_from_pb(h.meta.ok_or_else(|| missing(WHAT, "meta"))?);
    Ok((meta, h.files.into_iter().map(file_from_pb).collect()))
}
