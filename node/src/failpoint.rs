//! Crash points for durability tests: with `SEXTANT_FAILPOINT=<name>` in its environment, the
//! process aborts (as a kill -9 would stop it: no destructor, no flush) the first time it
//! reaches that point. Unset in production; reading it costs one check of a cached value.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// After a flush wrote and fsynced its segments, before the manifest names them.
pub const FLUSH_BEFORE_MANIFEST: &str = "flush-before-manifest";
/// After a flush replaced the manifest, before openraft purges the log.
pub const FLUSH_AFTER_MANIFEST: &str = "flush-after-manifest";
/// After a compaction wrote its output, before the manifest swaps it in.
pub const COMPACTION_BEFORE_MANIFEST: &str = "compaction-before-manifest";
/// After a compaction's manifest, before its inputs are deleted.
pub const COMPACTION_AFTER_MANIFEST: &str = "compaction-after-manifest";

pub fn hit(name: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    if ARMED.get_or_init(|| std::env::var("SEXTANT_FAILPOINT").ok()).as_deref() == Some(name) {
        eprintln!("failpoint {name}: aborting");
        std::process::abort();
    }
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
