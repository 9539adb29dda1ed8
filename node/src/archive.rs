//! How a checkpoint travels to a lagging or new replica: its files packed into one stream that
//! is read straight from the (immutable) files on disk, so a snapshot is never held in memory.
//!
//! Layout: `b"SXAR"`, u32 version, u64 header length, the header (a protobuf
//! `persist.v1.ArchiveHeader`, docs/ARCHITECTURE.md, "Persisted formats"), u64 xxh3 of the
//! header, then every file's bytes in header order. Each file's xxh3 is in the header and is
//! checked while unpacking, before anything replaces the receiver's state.

use std::io::{self, Read, Write};
use std::path::Path;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::types::SnapshotMeta;

const MAGIC: &[u8; 4] = b"SXAR";
/// Version 1 archives had a bincode header; they are refused.
const VERSION: u32 = 2;
/// Bounds what a peer can make us allocate for the header.
const MAX_HEADER: u64 = 64 << 20;

/// A file of a checkpoint, as recorded when it was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Plain file name, relative to the group directory.
    pub name: String,
    pub len: u64,
    pub xxh3: u64,
}

/// Snapshot data as openraft sees it: either an archive being sent or a file being received.
pub enum SnapshotStream {
    Outgoing(Outgoing),
    Incoming(tokio::fs::File),
}

pub struct Outgoing {
    header: Vec<u8>,
    files: Vec<(tokio::fs::File, u64)>,
    total: u64,
    pos: u64,
    /// The file whose OS cursor matches `pos`, if any.
    positioned: Option<usize>,
    seeking: bool,
}

impl SnapshotStream {
    /// Packs `files` (opened now, so later deletions by compaction cannot affect the stream).
    pub fn pack(meta: &SnapshotMeta, dir: &Path, files: &[FileEntry]) -> io::Result<Self> {
        let header_body = crate::persist::encode_archive_header(meta, files);
        let mut header = Vec::with_capacity(header_body.len() + 24);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&(header_body.len() as u64).to_le_bytes());
        header.extend_from_slice(&header_body);
        header.extend_from_slice(&xxh3_64(&header_body).to_le_bytes());
        let mut opened = Vec::with_capacity(files.len());
        for f in files {
            let file = std::fs::File::open(dir.join(&f.name))
                .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", f.name)))?;
            if file.metadata()?.len() != f.len {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} changed size", f.name)));
            }
            opened.push((tokio::fs::File::from_std(file), f.len));
        }
        let total = header.len() as u64 + files.iter().map(|f| f.len).sum::<u64>();
        Ok(Self::Outgoing(Outgoing { header, files: opened, total, pos: 0, positioned: None, seeking: false }))
    }
}

impl Outgoing {
    /// Which file `pos` falls in, and the offset inside it.
    fn locate(&self, pos: u64) -> Option<(usize, u64)> {
        let mut start = self.header.len() as u64;
        for (i, (_, len)) in self.files.iter().enumerate() {
            if pos < start + len {
                return Some((i, pos - start));
            }
            start += len;
        }
        None
    }
}

impl AsyncRead for SnapshotStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let out = match self.get_mut() {
            SnapshotStream::Incoming(f) => return Pin::new(f).poll_read(cx, buf),
            SnapshotStream::Outgoing(out) => out,
        };
        if out.pos < out.header.len() as u64 {
            let rest = &out.header[out.pos as usize..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            out.pos += n as u64;
            return Poll::Ready(Ok(()));
        }
        let Some((i, offset)) = out.locate(out.pos) else {
            return Poll::Ready(Ok(())); // end of the archive
        };
        if out.positioned != Some(i) {
            let file = &mut out.files[i].0;
            if !out.seeking {
                Pin::new(&mut *file).start_seek(io::SeekFrom::Start(offset))?;
                out.seeking = true;
            }
            ready!(Pin::new(file).poll_complete(cx))?;
            out.seeking = false;
            out.positioned = Some(i);
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut out.files[i].0).poll_read(cx, buf))?;
        let n = (buf.filled().len() - before) as u64;
        if n == 0 || offset + n > out.files[i].1 {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "a checkpoint file changed under us")));
        }
        out.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotStream {
    fn start_seek(self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        let out = match self.get_mut() {
            SnapshotStream::Incoming(f) => return Pin::new(f).start_seek(position),
            SnapshotStream::Outgoing(out) => out,
        };
        let target = match position {
            io::SeekFrom::Start(p) => Some(p),
            io::SeekFrom::End(d) => out.total.checked_add_signed(d),
            io::SeekFrom::Current(d) => out.pos.checked_add_signed(d),
        };
        out.pos = target.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before start"))?;
        out.positioned = None;
        out.seeking = false;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        match self.get_mut() {
            SnapshotStream::Incoming(f) => Pin::new(f).poll_complete(cx),
            SnapshotStream::Outgoing(out) => Poll::Ready(Ok(out.pos)),
        }
    }
}

fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "an outgoing snapshot is read-only")
}

impl AsyncWrite for SnapshotStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SnapshotStream::Incoming(f) => Pin::new(f).poll_write(cx, buf),
            SnapshotStream::Outgoing(_) => Poll::Ready(Err(read_only())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotStream::Incoming(f) => Pin::new(f).poll_flush(cx),
            SnapshotStream::Outgoing(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotStream::Incoming(f) => Pin::new(f).poll_shutdown(cx),
            SnapshotStream::Outgoing(_) => Poll::Ready(Ok(())),
        }
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Unpacks a received archive into `staging` (created empty), checking every checksum.
/// Returns the snapshot meta and the files written, in archive order.
pub fn unpack(input: &mut impl Read, staging: &Path) -> io::Result<(SnapshotMeta, Vec<FileEntry>)> {
    let mut fixed = [0u8; 16];
    input.read_exact(&mut fixed)?;
    if &fixed[..4] != MAGIC {
        return Err(invalid("not a snapshot archive"));
    }
    let version = u32::from_le_bytes(fixed[4..8].try_into().unwrap());
    if version != VERSION {
        return Err(invalid(format!("unsupported snapshot archive version {version} (this release reads {VERSION})")));
    }
    let header_len = u64::from_le_bytes(fixed[8..16].try_into().unwrap());
    if header_len > MAX_HEADER {
        return Err(invalid("snapshot header too large"));
    }
    let mut header_body = vec![0u8; header_len as usize];
    input.read_exact(&mut header_body)?;
    let mut digest = [0u8; 8];
    input.read_exact(&mut digest)?;
    if xxh3_64(&header_body).to_le_bytes() != digest {
        return Err(invalid("snapshot header checksum mismatch"));
    }
    let (meta, files) = crate::persist::decode_archive_header(&header_body)?;
    if staging.exists() {
        std::fs::remove_dir_all(staging)?;
    }
    crate::durable::create_private_dir(staging)?;
    let mut buf = vec![0u8; 1 << 20];
    for entry in &files {
        if entry.name.is_empty() || entry.name.contains(['/', '\\']) || entry.name.starts_with('.') {
            return Err(invalid(format!("bad file name in snapshot: {:?}", entry.name)));
        }
        let mut out = std::fs::File::create(staging.join(&entry.name))?;
        let mut hash = Xxh3::new();
        let mut left = entry.len;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            input.read_exact(&mut buf[..n])?;
            hash.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            left -= n as u64;
        }
        if hash.digest() != entry.xxh3 {
            return Err(invalid(format!("checksum mismatch for {}", entry.name)));
        }
        out.sync_all()?;
    }
    crate::durable::sync_dir(staging)?;
    Ok((meta, files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::write_file_atomic;
    use tokio::io::{AsyncReadExt, AsyncSeekExt};

    fn meta() -> SnapshotMeta {
        SnapshotMeta { snapshot_id: "t-1".into(), ..Default::default() }
    }

    #[tokio::test]
    async fn pack_seek_and_unpack_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_file_atomic(dir.path(), "a.bin", &vec![1u8; 300_000]).unwrap();
        let b = write_file_atomic(dir.path(), "b.bin", b"hello").unwrap();
        let empty = write_file_atomic(dir.path(), "e.bin", b"").unwrap();
        let files = vec![a, empty, b];

        let mut whole = Vec::new();
        SnapshotStream::pack(&meta(), dir.path(), &files).unwrap().read_to_end(&mut whole).await.unwrap();

        // openraft sends in chunks and may seek back to resend one: every offset must work.
        let mut s = SnapshotStream::pack(&meta(), dir.path(), &files).unwrap();
        for offset in [whole.len() as u64 - 3, 5, 250_000, 0] {
            s.seek(io::SeekFrom::Start(offset)).await.unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, whole[offset as usize..]);
        }

        let staging = dir.path().join("staging");
        let (m, got) = unpack(&mut whole.as_slice(), &staging).unwrap();
        assert_eq!(m.snapshot_id, "t-1");
        assert_eq!(got, files);
        assert_eq!(std::fs::read(staging.join("b.bin")).unwrap(), b"hello");

        // One flipped bit anywhere in a file is detected.
        let mut bad = whole.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(unpack(&mut bad.as_slice(), &staging).is_err());
    }
}
