//! `sextant`: one binary for every role (DESIGN B1).

mod cli;
mod loadgen;
mod storage_bench;

use clap::Parser;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    cli::init_logging(&cli.log_format);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(cli::run(cli.command))
}
