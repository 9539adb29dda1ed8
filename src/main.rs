//! `sextant`: one binary for every role (docs/ARCHITECTURE.md, "Components").

mod cli;
mod loadgen;
mod storage_bench;

use clap::Parser;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts (`_RJEM_MALLOC_CONF` in the environment still
/// overrides them; `MALLOC_CONF` with the `system-jemalloc` feature). By default a request
/// over 8 MiB goes to an arena that hands freed memory back to the OS at once; analytics
/// queries build per-user tables of tens of MiB each time, and faulting those pages back in
/// was a tenth of a funnel's CPU. `oversize_threshold:0` keeps such memory in the ordinary
/// arenas, returned after the usual decay (10 s).
#[cfg_attr(not(feature = "system-jemalloc"), export_name = "_rjem_malloc_conf")]
#[cfg_attr(feature = "system-jemalloc", export_name = "malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"oversize_threshold:0".as_ptr());

#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);
// SAFETY: a pointer to a static, immutable C string.
unsafe impl Sync for MallocConf {}

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    cli::init_logging(&cli.log_format);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(cli::run(cli.command))
}
