//! Disk admission: a node refuses new writes while the filesystem of its data directory is
//! above a high-water mark, before it is full, so that flushes, compactions and the Raft log
//! still find room; reads go on. The free space is probed on a short interval.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::host::NodeHost;
use crate::metrics::ComponentLabel;
use crate::types::META_GROUP;

/// Space of a filesystem, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// Bytes an unprivileged writer may still use (`f_bavail`).
    pub available: u64,
    /// Bytes in use (`f_blocks - f_bfree`): blocks reserved for root are neither.
    pub used: u64,
}

/// Reports the space of the data directory's filesystem; tests inject their own.
pub trait FreeSpace: Send + Sync {
    fn space(&self) -> io::Result<Space>;
}

/// `statvfs(2)` of a path.
pub struct Statvfs(pub PathBuf);

impl FreeSpace for Statvfs {
    fn space(&self) -> io::Result<Space> {
        statvfs(&self.0)
    }
}

#[cfg(unix)]
fn statvfs(path: &Path) -> io::Result<Space> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `s` is written by statvfs before it is read.
    if unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `s`.
    let s = unsafe { s.assume_init() };
    let unit = s.f_frsize as u64;
    Ok(Space {
        available: (s.f_bavail as u64).saturating_mul(unit),
        used: (s.f_blocks as u64).saturating_sub(s.f_bfree as u64).saturating_mul(unit),
    })
}

#[cfg(not(unix))]
fn statvfs(_: &Path) -> io::Result<Space> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "free space is probed on Unix only"))
}

/// When writes are refused: used space over `max_used_percent` of what is used and available
/// (`df`'s Use%), or less than `min_free_bytes` available, whichever comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HighWater {
    pub max_used_percent: u8,
    pub min_free_bytes: u64,
}

impl Default for HighWater {
    /// 90 % used or under 1 GiB free: room for every shard's buffer to flush
    /// and for the segments a compaction writes before it deletes its inputs.
    fn default() -> Self {
        Self { max_used_percent: 90, min_free_bytes: 1 << 30 }
    }
}

impl HighWater {
    pub fn is_above(&self, s: Space) -> bool {
        let usable = u128::from(s.used) + u128::from(s.available);
        let over_percent = usable > 0 && u128::from(s.used) * 100 > usable * u128::from(self.max_used_percent);
        over_percent || s.available < self.min_free_bytes
    }
}

/// Disk bytes one byte appended to the Raft log may take until it is purged: it is written
/// once, and may be copied once more before its file is deleted (`crate::log_store`).
const LOG_AMPLIFICATION: u64 = 2;

/// The admission state: updated by [`DiskGuard::probe`], read by every write. Between two
/// probes, what the Raft log took since the last one is counted as used, so that a fast
/// ingest on a small disk is refused at the mark rather than a probe interval past it.
pub struct DiskGuard {
    source: RwLock<Box<dyn FreeSpace>>,
    high_water: RwLock<HighWater>,
    full: AtomicBool,
    available: AtomicU64,
    /// The last probe's reading and the Raft log's bytes written at that moment.
    probed: RwLock<Option<(Space, u64)>>,
}

/// A write refused because the disk is above its high-water mark.
#[derive(Debug, thiserror::Error)]
#[error("disk_full: the node's disk is above its high-water mark ({available} bytes free); retry later")]
pub struct DiskFull {
    pub available: u64,
}

impl DiskGuard {
    pub fn new(source: Box<dyn FreeSpace>, high_water: HighWater) -> Arc<Self> {
        Arc::new(Self {
            source: RwLock::new(source),
            high_water: RwLock::new(high_water),
            full: AtomicBool::new(false),
            available: AtomicU64::new(u64::MAX),
            probed: RwLock::new(None),
        })
    }

    /// Sets the mark (`--disk-high-water`, `--disk-min-free`); effective at the next probe.
    pub fn set_high_water(&self, high_water: HighWater) {
        *self.high_water.write().unwrap() = high_water;
    }

    /// Replaces what reports the free space (tests report a fake one).
    pub fn set_source(&self, source: Box<dyn FreeSpace>) {
        *self.source.write().unwrap() = source;
    }

    /// Reads the free space and updates the state; a failed probe keeps the last state.
    /// `log_written`: the Raft log's bytes written so far ([`crate::log_store::LogDb::written`]).
    pub fn probe(&self, log_written: u64) -> io::Result<Space> {
        let space = self.source.read().unwrap().space()?;
        *self.probed.write().unwrap() = Some((space, log_written));
        self.set_full(space);
        Ok(space)
    }

    fn set_full(&self, space: Space) {
        let full = self.high_water.read().unwrap().is_above(space);
        self.available.store(space.available, Ordering::Relaxed);
        if self.full.swap(full, Ordering::Relaxed) != full {
            if full {
                tracing::warn!(
                    available = space.available,
                    used = space.used,
                    "disk above its high-water mark: refusing writes"
                );
            } else {
                tracing::info!(available = space.available, "disk below its high-water mark again: accepting writes");
            }
        }
    }

    /// Whether a new write may be accepted, the Raft log having written `log_written` bytes.
    pub fn admit(&self, log_written: u64) -> Result<(), DiskFull> {
        if !self.full.load(Ordering::Relaxed) {
            let Some((space, at)) = *self.probed.read().unwrap() else { return Ok(()) };
            let taken = log_written.saturating_sub(at).saturating_mul(LOG_AMPLIFICATION);
            if taken == 0 {
                return Ok(());
            }
            let estimate =
                Space { available: space.available.saturating_sub(taken), used: space.used.saturating_add(taken) };
            if !self.high_water.read().unwrap().is_above(estimate) {
                return Ok(());
            }
            self.set_full(estimate);
        }
        Err(DiskFull { available: self.available.load(Ordering::Relaxed) })
    }

    pub fn high_water(&self) -> HighWater {
        *self.high_water.read().unwrap()
    }
}

/// Room a node keeps on its disk for its own restart (docs/RELIABILITY.md, "Disk"): a file of
/// 1 % of the filesystem (at most 1 GiB, or `--disk-reserve-mib`). A write the disk has no room
/// for stops a Raft group for good (the log refuses every write after a failed one), so the node
/// releases the file and exits; restarted, it has room to recover its log, elect and serve
/// reads while admission refuses writes. The file is made again once the disk is below its
/// high-water mark with the file counted.
pub struct Reserve {
    path: PathBuf,
    /// Bytes to keep; `None`: 1 % of the filesystem, at most 1 GiB.
    size: RwLock<Option<u64>>,
}

pub const RESERVE_FILE: &str = "reserve";

impl Reserve {
    pub fn new(data_dir: &Path) -> Self {
        Self { path: data_dir.join(RESERVE_FILE), size: RwLock::new(None) }
    }

    pub fn set_size(&self, bytes: Option<u64>) {
        *self.size.write().unwrap() = bytes;
    }

    fn target(&self, space: Space) -> u64 {
        self.size.read().unwrap().unwrap_or_else(|| (space.used.saturating_add(space.available) / 100).min(1 << 30))
    }

    /// Makes the file if it is missing or short and the disk stays below `mark` with it.
    /// Returns whether it was made.
    pub fn ensure(&self, space: Space, mark: HighWater) -> io::Result<bool> {
        let target = self.target(space);
        let have = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if have > target {
            std::fs::OpenOptions::new().write(true).open(&self.path)?.set_len(target)?;
        }
        if have >= target {
            return Ok(false);
        }
        let more = target - have;
        let after = Space { available: space.available.saturating_sub(more), used: space.used.saturating_add(more) };
        if mark.is_above(after) {
            return Ok(false);
        }
        allocate(&self.path, target)?;
        tracing::info!(bytes = target, path = %self.path.display(), "disk space reserved for a restart");
        Ok(true)
    }

    /// Deletes the file, giving its space back.
    pub fn release(&self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => tracing::warn!(path = %self.path.display(), "released the disk reserve"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::error!(error = %e, "could not release the disk reserve"),
        }
    }
}

/// A file of `bytes` with its blocks allocated (a sparse one would hold no room).
#[cfg(unix)]
fn allocate(path: &Path, bytes: u64) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new().create(true).write(true).truncate(false).open(path)?;
    let len = libc::off_t::try_from(bytes).map_err(io::Error::other)?;
    // SAFETY: the descriptor is open for writing for the duration of the call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc != 0 {
        let e = io::Error::from_raw_os_error(rc);
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    file.sync_all()
}

#[cfg(not(unix))]
fn allocate(_: &Path, _: u64) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "the disk reserve is made on Unix only"))
}

/// How often the free space is probed and the disk use per component measured.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Probes the free space of the node's data directory and publishes the bytes each component
/// occupies: `raft_log`, `segments` (the data shards' directories) and `meta`; and the heap
/// bytes the data shards hold (`sextant_node_memory_bytes`).
pub fn spawn(host: Arc<NodeHost>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = crate::host::periodic(PROBE_EVERY);
        loop {
            tick.tick().await;
            let h = host.clone();
            let done = tokio::task::spawn_blocking(move || {
                match h.disk.probe(h.log_db.written()) {
                    Ok(space) => {
                        if let Err(e) = h.reserve.ensure(space, h.disk.high_water()) {
                            tracing::warn!(error = %e, "could not reserve disk space for a restart");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not read the free space of the data directory"),
                }
                let (log, segments, meta) = component_bytes(&h.config.data_dir);
                let m = &h.metrics;
                m.disk_bytes.get_or_create(&ComponentLabel { component: "raft_log" }).set(gauge(log));
                m.disk_bytes.get_or_create(&ComponentLabel { component: "segments" }).set(gauge(segments));
                m.disk_bytes.get_or_create(&ComponentLabel { component: "meta" }).set(gauge(meta));
                m.disk_available_bytes.set(gauge(h.disk.available.load(Ordering::Relaxed)));
                let memory: crate::shard::ShardMemory =
                    h.shards().into_iter().map(|(_, g)| g.state.read().unwrap().state.memory()).sum();
                m.memory_bytes.get_or_create(&ComponentLabel { component: "buffers" }).set(gauge(memory.buffers));
                m.memory_bytes.get_or_create(&ComponentLabel { component: "uuid_sets" }).set(gauge(memory.uuids));
                m.memory_bytes.get_or_create(&ComponentLabel { component: "user_numbers" }).set(gauge(memory.users));
                m.memory_bytes
                    .get_or_create(&ComponentLabel { component: "segment_metadata" })
                    .set(gauge(memory.segments));
                m.disk_writes_refused.set(i64::from(h.disk.full.load(Ordering::Relaxed)));
            })
            .await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "the disk probe failed");
            }
        }
    })
}

fn gauge(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Bytes on disk of the Raft log, the data shards and the meta group under `data_dir`.
pub fn component_bytes(data_dir: &Path) -> (u64, u64, u64) {
    let log = crate::durable::disk_usage(&data_dir.join(crate::host::RAFT_LOG_DIR));
    let (mut segments, mut meta) = (0u64, 0u64);
    if let Ok(dir) = std::fs::read_dir(data_dir.join(crate::host::GROUPS_DIR)) {
        for entry in dir.flatten() {
            let bytes = crate::durable::disk_usage(&entry.path());
            if entry.file_name().to_str() == Some(&META_GROUP.to_string()) {
                meta = meta.saturating_add(bytes);
            } else {
                segments = segments.saturating_add(bytes);
            }
        }
    }
    (log, segments, meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Fake(Arc<Mutex<Space>>);
    impl FreeSpace for Fake {
        fn space(&self) -> io::Result<Space> {
            Ok(*self.0.lock().unwrap())
        }
    }

    #[test]
    fn writes_are_refused_above_the_high_water_mark_and_admitted_again_below_it() {
        let space = Arc::new(Mutex::new(Space { available: 50 << 30, used: 50 << 30 }));
        let guard = DiskGuard::new(Box::new(Fake(space.clone())), HighWater::default());
        guard.probe(0).unwrap();
        assert!(guard.admit(0).is_ok());
        *space.lock().unwrap() = Space { available: 9 << 30, used: 91 << 30 };
        guard.probe(0).unwrap();
        let err = guard.admit(0).unwrap_err();
        assert_eq!(err.available, 9 << 30);
        assert!(err.to_string().starts_with("disk_full"));
        *space.lock().unwrap() = Space { available: 11 << 30, used: 89 << 30 };
        guard.probe(0).unwrap();
        assert!(guard.admit(0).is_ok());
    }

    /// A probe a second ago saw room; the Raft log has written enough since to pass the mark.
    #[test]
    fn what_the_log_wrote_since_the_last_probe_counts_toward_the_mark() {
        let space = Arc::new(Mutex::new(Space { available: 40 << 20, used: 60 << 20 }));
        let mark = HighWater { max_used_percent: 80, min_free_bytes: 0 };
        let guard = DiskGuard::new(Box::new(Fake(space.clone())), mark);
        guard.probe(1000).unwrap();
        // 9 MiB appended take 18 MiB on disk until purged: 78 % used.
        assert!(guard.admit(1000 + (9 << 20)).is_ok());
        let err = guard.admit(1000 + (11 << 20)).unwrap_err();
        assert_eq!(err.available, 18 << 20);
        // Refused until a probe finds room again; the next probe counts from its own reading.
        assert!(guard.admit(1000).is_err());
        *space.lock().unwrap() = Space { available: 30 << 20, used: 70 << 20 };
        guard.probe(1000 + (11 << 20)).unwrap();
        assert!(guard.admit(1000 + (11 << 20)).is_ok());
    }

    #[test]
    fn the_reserve_is_made_below_the_mark_only_and_released_on_demand() {
        let dir = tempfile::tempdir().unwrap();
        let reserve = Reserve::new(dir.path());
        reserve.set_size(Some(1 << 20));
        let mark = HighWater { max_used_percent: 90, min_free_bytes: 0 };
        let path = dir.path().join(RESERVE_FILE);
        // With the file, the disk would pass the mark: not made.
        assert!(!reserve.ensure(Space { available: 10 << 20, used: 89 << 20 }, mark).unwrap());
        assert!(!path.exists());
        assert!(reserve.ensure(Space { available: 50 << 20, used: 50 << 20 }, mark).unwrap());
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 1 << 20);
        {
            use std::os::unix::fs::MetadataExt;
            assert!(meta.blocks() * 512 >= 1 << 20, "the reserve's blocks are allocated, not sparse");
        }
        assert!(!reserve.ensure(Space { available: 50 << 20, used: 50 << 20 }, mark).unwrap());
        reserve.release();
        assert!(!path.exists());
        reserve.release();
        // Without a size: 1 % of the filesystem, at most 1 GiB.
        let auto = Reserve::new(dir.path());
        assert_eq!(auto.target(Space { available: 60 << 20, used: 40 << 20 }), 1 << 20);
        assert_eq!(auto.target(Space { available: 900 << 30, used: 100 << 30 }), 1 << 30);
    }

    #[test]
    fn a_small_disk_is_full_below_its_minimum_free_bytes() {
        let hw = HighWater::default();
        assert!(hw.is_above(Space { available: (1 << 30) - 1, used: 1 << 30 }));
        assert!(!hw.is_above(Space { available: 1 << 30, used: 9 << 30 }));
        let percent_only = HighWater { max_used_percent: 95, min_free_bytes: 0 };
        assert!(!percent_only.is_above(Space { available: 5, used: 95 }));
        assert!(percent_only.is_above(Space { available: 4, used: 96 }));
        // As `df` counts: blocks reserved for root are neither used nor available.
        assert!(!HighWater::default().is_above(Space { available: 20 << 30, used: 72 << 30 }));
    }

    #[test]
    fn the_data_directory_filesystem_is_probed() {
        let dir = tempfile::tempdir().unwrap();
        let s = Statvfs(dir.path().to_owned()).space().unwrap();
        assert!(s.used > 0, "{s:?}");
    }
}
