//! Crash points for durability tests: with `SEXTANT_FAILPOINT=<name>` in its environment, the
//! process aborts (as a kill -9 would stop it: no destructor, no flush) the first time it
//! reaches that point. Unset in production; reading it costs one check of a cached value.

use std::sync::OnceLock;

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
