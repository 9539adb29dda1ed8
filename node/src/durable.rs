//! Crash-safe file updates: a file is either its old or its new content after a crash, never
//! a mix, and a rename is durable once these functions return.

use std::io::{self, Write};
use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::archive::FileEntry;

/// Creates `dir` and its missing parents with mode 0700, and narrows an existing `dir` to 0700:
/// a data directory holds every tenant's data and credential hashes.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700).create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
    }
    #[cfg(not(unix))]
    builder.create(dir)
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `bytes` to `dir/name` atomically (temporary file, fsync, rename, directory fsync)
/// and returns its archive entry.
pub fn write_file_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<FileEntry> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)?;
    Ok(FileEntry { name: name.to_owned(), len: bytes.len() as u64, xxh3: xxh3_64(bytes) })
}

/// Bytes `path` and everything under it occupy on disk (allocated blocks, so sparse files
/// count what they hold); 0 if it does not exist. Files vanishing meanwhile are skipped.
pub fn disk_usage(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    #[cfg(unix)]
    let own = std::os::unix::fs::MetadataExt::blocks(&meta).saturating_mul(512);
    #[cfg(not(unix))]
    let own = meta.len();
    if !meta.is_dir() {
        return own;
    }
    let Ok(dir) = std::fs::read_dir(path) else { return own };
    dir.flatten().map(|e| disk_usage(&e.path())).fold(own, u64::saturating_add)
}
