//! Crash points for durability tests: with `SEXTANT_FAILPOINT=<name>` in its environment, the
//! process aborts (as a kill -9 would stop it: no destructor, no flush) the first time it
//! reaches that point. Unset in production; reading it costs one check of a cached value.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// After a flush wrote and fsynced its segments, before the manifest names them.
pub const FLUSH_BEFORE_MANIFEST: &str = "flush-before-manifest";
/// After a flush replaced the manifest, before openraft purges the log.
pub const FLUSH_AFTER_MANIFEST: &str = "flush-after-manifest";
/// After a compaction wrote its output, before the manifest swaps it in.
pub const COMPACTION_BEFORE_MANIFEST: &str = "compaction-before-manifest";
/// After a leader's snapshot was received and unpacked, before it replaces the group's state.
pub const INSTALL_BEFORE_STATE: &str = "install-before-state";
/// After a compaction's manifest, before its inputs are deleted.
pub const COMPACTION_AFTER_MANIFEST: &str = "compaction-after-manifest";

pub fn hit(name: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    if ARMED.get_or_init(|| std::env::var("SEXTANT_FAILPOINT").ok()).as_deref() == Some(name) {
        eprintln!("failpoint {name}: aborting");
        std::process::abort();
    }
}

/// A shard's apply of an ingest batch fails with a storage error, which stops its Raft (see
/// [`once`]).
pub const APPLY_INGEST: &str = "apply-ingest";
/// Appending an ingest batch to a shard's Raft log panics, as a bug in the Raft core would:
/// the core's task ends without reporting an error (see [`once`]).
pub const APPEND_INGEST_PANICS: &str = "append-ingest-panics";

/// True the first time this process reaches `name` with `SEXTANT_FAILPOINT_ONCE=<name>` in its
/// environment; false otherwise and ever after.
pub fn once(name: &str) -> bool {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    static DONE: AtomicBool = AtomicBool::new(false);
    ARMED.get_or_init(|| std::env::var("SEXTANT_FAILPOINT_ONCE").ok()).as_deref() == Some(name)
        && !DONE.swap(true, Ordering::AcqRel)
}

/// Before a flush writes each segment: fails as a full disk would (see [`fail_next`]).
pub const FLUSH_OUT_OF_SPACE: &str = "flush-out-of-space";

static ANY_ARMED: AtomicBool = AtomicBool::new(false);
static ARMED_ERRORS: Mutex<Vec<(&'static str, u32)>> = Mutex::new(Vec::new());

/// Makes the next `times` passes through `name` fail with ENOSPC (tests of this process).
pub fn fail_next(name: &'static str, times: u32) {
    ARMED_ERRORS.lock().unwrap().push((name, times));
    ANY_ARMED.store(true, Ordering::Release);
}

/// An ENOSPC error if a test armed `name`; otherwise `Ok` at the cost of one atomic load.
pub fn fail(name: &str) -> io::Result<()> {
    if !ANY_ARMED.load(Ordering::Acquire) {
        return Ok(());
    }
    let mut armed = ARMED_ERRORS.lock().unwrap();
    if let Some(slot) = armed.iter_mut().find(|(n, left)| *n == name && *left > 0) {
        slot.1 -= 1;
        return Err(io::Error::from_raw_os_error(libc::ENOSPC));
    }
    Ok(())
}

/// A slow disk under the Raft log, for failover and nemesis tests: with
/// `SEXTANT_FAILPOINT_FSYNC_DELAY_MS=<n>` in a node's (or `sextant dev`'s) environment, the
/// `log-sync` thread sleeps n milliseconds before each fsync of the shared Raft log (one per
/// group-commit batch, votes and truncations included), so every group on that node sees its
/// log writes take n ms longer. Set it on one process to make that node the slow replica, e.g.
/// `SEXTANT_FAILPOINT_FSYNC_DELAY_MS=200 sextant node ...`. Unset or 0: no delay. Read once,
/// when the log opens; a value that is not a whole number of milliseconds stops the node.
pub const FSYNC_DELAY_ENV: &str = "SEXTANT_FAILPOINT_FSYNC_DELAY_MS";

/// The delay [`FSYNC_DELAY_ENV`] asks for, if any.
pub fn fsync_delay() -> io::Result<Option<Duration>> {
    parse_fsync_delay(std::env::var_os(FSYNC_DELAY_ENV).as_deref())
}

fn parse_fsync_delay(value: Option<&std::ffi::OsStr>) -> io::Result<Option<Duration>> {
    let Some(value) = value else { return Ok(None) };
    match value.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(0) => Ok(None),
        Some(ms) => Ok(Some(Duration::from_millis(ms))),
        None => Err(io::Error::other(format!("{FSYNC_DELAY_ENV}={value:?}: expected milliseconds"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fsync_delay_is_whole_milliseconds_or_nothing() {
        let parse = |v: &str| parse_fsync_delay(Some(std::ffi::OsStr::new(v)));
        assert_eq!(parse_fsync_delay(None).unwrap(), None);
        assert_eq!(parse("0").unwrap(), None);
        assert_eq!(parse(" 200 ").unwrap(), Some(Duration::from_millis(200)));
        for bad in ["", "200ms", "-5", "1.5"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
