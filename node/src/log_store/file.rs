//! The files of the Raft log, in the format of docs/ARCHITECTURE.md, "Persisted formats": a
//! header (`SXWL`, the format version and the file's sequence number, 16 bytes), then records
//! one after another. A record is its body's length (u32 LE), its kind (u8), its group (u64
//! LE), the xxh3-64 of kind, group and body (u64 LE), then the body. Format 2 seeds that hash
//! with the file's sequence number (format 1 with 0): files are reused, and the records of a
//! file's earlier life never read as its own.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use xxhash_rust::xxh3::Xxh3;

use crate::types::GroupId;

const MAGIC: [u8; 4] = *b"SXWL";
pub const VERSION: u32 = 2;
pub const FILE_HEADER: usize = 16;
pub const RECORD_HEADER: usize = 21;
/// Bytes of an entry record's body before the entry: its index (u64 LE).
pub const ENTRY_PREFIX: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Body: the index, then the entry (`SXLE`).
    Entry,
    /// Body: the vote (`SXVO`).
    Vote,
    /// Body: the committed log id (`SXLI`); empty for none.
    Committed,
    /// Body: the log id purged up to (`SXLI`).
    Purged,
    /// Body: the first index removed (u64 LE): every entry from it on is gone.
    Truncate,
    /// No body: everything of the group is gone.
    Drop,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Entry => 1,
            Kind::Vote => 2,
            Kind::Committed => 3,
            Kind::Purged => 4,
            Kind::Truncate => 5,
            Kind::Drop => 6,
        }
    }

    fn of(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::Entry,
            2 => Kind::Vote,
            3 => Kind::Committed,
            4 => Kind::Purged,
            5 => Kind::Truncate,
            6 => Kind::Drop,
            _ => return None,
        })
    }

    /// Whether a record of this kind removes entries written before it (in older files too).
    pub fn removes(self) -> bool {
        matches!(self, Kind::Truncate | Kind::Drop)
    }
}

pub fn name(seq: u64) -> String {
    format!("{seq:020}.sxwl")
}

/// A file no longer part of the log, kept to be written over as a later one.
pub fn spare_name(seq: u64) -> String {
    format!("{seq:020}.spare")
}

/// The sequence number of a spare's name.
pub fn spare_seq_of(name: &str) -> Option<u64> {
    numbered(name, ".spare")
}

/// The sequence number of a log file's name.
pub fn seq_of(name: &str) -> Option<u64> {
    numbered(name, ".sxwl")
}

/// The number of a name of twenty digits and `suffix`.
fn numbered(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok()).flatten()
}

pub fn header(seq: u64) -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[..4].copy_from_slice(&MAGIC);
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..].copy_from_slice(&seq.to_le_bytes());
    h
}

/// The seed of the checksums of file `seq`'s records, as format `version` writes them.
pub fn seed(version: u32, seq: u64) -> u64 {
    if version == 1 {
        0
    } else {
        seq
    }
}

/// Checks a file's header and gives the seed of its records' checksums; `Ok(None)` when it is
/// shorter than a header (torn at creation).
pub fn check_header(bytes: &[u8], seq: u64) -> io::Result<Option<u64>> {
    if bytes.len() < FILE_HEADER {
        return Ok(None);
    }
    if bytes[..4] != MAGIC {
        return Err(io::Error::other("not a Sextant Raft log file"));
    }
    let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if !(1..=VERSION).contains(&version) {
        return Err(io::Error::other(format!(
            "unsupported Raft log file format {version} (this build reads 1 to {VERSION})"
        )));
    }
    let named = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if named != seq {
        return Err(io::Error::other(format!("the file says it is number {named}")));
    }
    Ok(Some(seed(version, seq)))
}

/// Appends a record to `out`, its checksum left to [`seal`] once the file it goes to is
/// known; `body` writes its body (so an entry is encoded in place).
pub fn put(
    out: &mut Vec<u8>,
    kind: Kind,
    group: GroupId,
    body: impl FnOnce(&mut Vec<u8>) -> io::Result<()>,
) -> io::Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER]);
    body(out)?;
    let len = u32::try_from(out.len() - start - RECORD_HEADER)
        .map_err(|_| io::Error::other("a Raft log record of 4 GiB or more"))?;
    let record = &mut out[start..];
    record[..4].copy_from_slice(&len.to_le_bytes());
    record[4] = kind.code();
    record[5..13].copy_from_slice(&group.to_le_bytes());
    Ok(())
}

/// Sets the checksum of every record of `records` (whole records, as [`put`] wrote them or
/// [`read_at`] read them) for a file whose records are seeded with `seed`.
pub fn seal(records: &mut [u8], seed: u64) {
    let mut rest = records;
    while !rest.is_empty() {
        let len = RECORD_HEADER + u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let (record, after) = rest.split_at_mut(len);
        let sum = checksum(seed, &record[4..13], &record[RECORD_HEADER..]);
        record[13..21].copy_from_slice(&sum.to_le_bytes());
        rest = after;
    }
}

fn checksum(seed: u64, kind_group: &[u8], body: &[u8]) -> u64 {
    let mut h = Xxh3::with_seed(seed);
    h.update(kind_group);
    h.update(body);
    h.digest()
}

/// One record read back.
pub struct Record<'a> {
    pub kind: Kind,
    pub group: GroupId,
    pub body: &'a [u8],
    /// Bytes the whole record takes.
    pub len: usize,
}

/// The record at the start of `bytes`, of a file whose records are seeded with `seed`:
/// `Ok(None)` at the end, an error for a record that is cut short or does not match its
/// checksum (a torn write, damage, or the bytes of the file's earlier life).
pub fn parse(bytes: &[u8], seed: u64) -> io::Result<Option<Record<'_>>> {
    if bytes.is_empty() {
        return Ok(None);
    }
    if bytes.len() < RECORD_HEADER {
        return Err(io::Error::other("a record cut short"));
    }
    let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
    let total = RECORD_HEADER.checked_add(len).filter(|t| *t <= bytes.len());
    let total = total.ok_or_else(|| io::Error::other("a record cut short"))?;
    let body = &bytes[RECORD_HEADER..total];
    let sum = u64::from_le_bytes(bytes[13..21].try_into().expect("8 bytes"));
    if checksum(seed, &bytes[4..13], body) != sum {
        return Err(io::Error::other("a record that does not match its checksum"));
    }
    let kind = Kind::of(bytes[4]).ok_or_else(|| io::Error::other(format!("a record of unknown kind {}", bytes[4])))?;
    let group = u64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes"));
    Ok(Some(Record { kind, group, body, len: total }))
}

/// Reads the record of `len` bytes at `offset` of `file` (seeded with `seed`), checked.
pub fn read_at(file: &File, seed: u64, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)?;
    match parse(&buf, seed)? {
        Some(r) if r.len == len => Ok(buf),
        _ => Err(io::Error::other("a record of another length than indexed")),
    }
}

/// Creates log file `seq` in `dir` holding its header and `records` (sealed here), durably
/// (file and directory synced).
pub fn create(dir: &Path, seq: u64, records: &mut [u8]) -> io::Result<File> {
    let file =
        std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(dir.join(name(seq)))?;
    begin(&file, seq, records)?;
    crate::durable::sync_dir(dir)?;
    Ok(file)
}

/// Makes `spare` (a file of `dir` named by [`spare_name`], open for writing) log file `seq`,
/// holding its header and `records` (sealed here) over the bytes it held, durably. What follows
/// them is the file's earlier life, whose checksums fail: a replay ends the file there.
/// Writing over pages the kernel holds already, on blocks the file has, took about half the
/// CPU of writing a new file in a benchmark of the log's writes (docs/BENCHMARKS.md, "Raft
/// log files written over").
pub fn reuse(dir: &Path, spare: u64, file: &File, seq: u64, records: &mut [u8]) -> io::Result<()> {
    begin(file, seq, records)?;
    std::fs::rename(dir.join(spare_name(spare)), dir.join(name(seq)))?;
    crate::durable::sync_dir(dir)
}

fn begin(file: &File, seq: u64, records: &mut [u8]) -> io::Result<()> {
    seal(records, seed(VERSION, seq));
    let mut bytes = Vec::with_capacity(FILE_HEADER + records.len());
    bytes.extend_from_slice(&header(seq));
    bytes.extend_from_slice(records);
    file.write_all_at(&bytes, 0)?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry record of group 7 whose body is `entry`, not sealed yet.
    fn entry_record() -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, Kind::Entry, 7, |b| {
            b.extend_from_slice(b"entry");
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn a_record_reads_back_and_any_damage_is_caught() {
        let mut out = entry_record();
        put(&mut out, Kind::Drop, 9, |_| Ok(())).unwrap();
        seal(&mut out, 4);
        fn parse(bytes: &[u8]) -> io::Result<Option<Record<'_>>> {
            super::parse(bytes, 4)
        }
        let first = parse(&out).unwrap().unwrap();
        assert_eq!(
            (first.kind, first.group, first.body, first.len),
            (Kind::Entry, 7, &b"entry"[..], RECORD_HEADER + 5)
        );
        let second = parse(&out[first.len..]).unwrap().unwrap();
        assert_eq!((second.kind, second.group, second.body.len()), (Kind::Drop, 9, 0));
        assert!(parse(&out[first.len + second.len..]).unwrap().is_none());
        for cut in 1..first.len {
            assert!(parse(&out[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..first.len {
            let mut damaged = out.clone();
            damaged[at] ^= 0x10;
            assert!(
                parse(&damaged).map(|r| r.map(|r| (r.kind, r.group, r.body.to_vec()))).ok()
                    != Some(Some((Kind::Entry, 7, b"entry".to_vec()))),
                "byte {at} flipped"
            );
        }
    }

    /// A file written over keeps the bytes of its earlier life after its own records; their
    /// checksums, seeded with another sequence number, end the file there.
    #[test]
    fn a_record_of_another_file_does_not_read_as_this_ones() {
        let mut out = entry_record();
        seal(&mut out, 4);
        assert!(parse(&out, 4).unwrap().is_some());
        let err = parse(&out, 5).err().unwrap().to_string();
        assert!(err.contains("checksum"), "{err}");
        // Format 1's seed: a file of format 2 (sequence numbers from 1) never has it.
        assert!(parse(&out, seed(1, 4)).is_err());
        seal(&mut out, seed(VERSION, 4));
        assert!(parse(&out, 4).unwrap().is_some());
    }

    #[test]
    fn file_names_sort_by_sequence() {
        assert_eq!(seq_of(&name(42)), Some(42));
        assert_eq!(seq_of(&name(u64::MAX)), Some(u64::MAX));
        assert!(name(9) < name(10));
        assert_eq!(seq_of("42.sxwl"), None);
        assert_eq!(seq_of("journal.jnl"), None);
        assert_eq!(seq_of(&spare_name(42)), None);
        assert_eq!(spare_seq_of(&spare_name(42)), Some(42));
        assert_eq!(spare_seq_of(&spare_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(spare_seq_of(&name(42)), None);
        assert_eq!(spare_seq_of("x.spare"), None);
        // Twenty digits beyond a u64: not a spare, not a panic.
        assert_eq!(spare_seq_of("99999999999999999999.spare"), None);
    }
}
