//! Crash-safe file updates: a file is either its old or its new content after a crash, never
//! a mix, and a rename is durable once these functions return.

use std::io::{self, Write};
use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::archive::FileEntry;

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `bytes` to `dir/name` atomically (temporary file, fsync, rename, directory fsync)
/// and returns its archive entry.
pub fn write_file_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<FileEntry> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)?;
    Ok(FileEntry { name: name.to_owned(), len: bytes.len() as u64, xxh3: xxh3_64(bytes) })
}
