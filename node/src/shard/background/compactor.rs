//! Background work on segments: merges small segments (see `segment::compaction`), one shard
//! at a time, off the apply path and at a lower CPU priority; and refreshes the storage gauges.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::host::NodeHost;
use crate::metrics::TableLabel;
use crate::segment::Table;
use crate::shard::CompactionOutcome;

const EVERY: Duration = Duration::from_secs(5);

pub fn spawn(host: Arc<NodeHost>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = crate::host::periodic(EVERY);
        loop {
            tick.tick().await;
            let now_s = host.config.clock.now_secs();
            for (group, shard) in host.shards() {
                // Keep merging this shard while there is work, then move on.
                loop {
                    let Some(job) = shard.state.read().unwrap().state.compaction(now_s) else { break };
                    let started = Instant::now();
                    match yielding(move || job.run()).await {
                        Ok(Ok(CompactionOutcome::Merged { inputs, rows_in, rows_out, .. })) => {
                            host.metrics.compactions.inc();
                            host.metrics.compaction_seconds.observe(started.elapsed().as_secs_f64());
                            tracing::debug!(group, inputs, rows_in, rows_out, "merged segments");
                        }
                        Ok(Ok(CompactionOutcome::Superseded)) => break,
                        Ok(Err(e)) => {
                            tracing::warn!(group, error = %e, "compaction failed");
                            break;
                        }
                        Err(e) => {
                            tracing::error!(group, error = %e, "compaction did not finish");
                            break;
                        }
                    }
                }
            }
            refresh_gauges(&host);
        }
    })
}

/// Nice value of the compaction thread: a merge can wait, so queries and ingest take the cores
/// first (docs/ARCHITECTURE.md, "Compaction and expiry").
const NICE: libc::c_int = 10;

/// Runs `work` on a thread of its own at [`NICE`] (a thread's nice value cannot be raised back
/// without privileges, so no pool thread is lowered); an error if it cannot start or panics.
async fn yielding<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> std::io::Result<T> {
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("compaction".into()).spawn(move || {
        lower_priority();
        let _ = done.send(work());
    })?;
    result.await.map_err(|_| std::io::Error::other("the compaction thread panicked"))
}

/// Sets the calling thread's nice value to [`NICE`]; where that is refused (a sandbox), the
/// thread runs at the process's priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take no pointers; `who` is this thread's id.
        let refused = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICE) != 0
        };
        if refused {
            tracing::debug!(error = %std::io::Error::last_os_error(), "compaction runs at normal priority");
        }
    }
}

fn refresh_gauges(host: &NodeHost) {
    for table in Table::ALL {
        let (mut count, mut bytes) = (0i64, 0i64);
        for (_, shard) in host.shards() {
            let (c, b) = shard.state.read().unwrap().state.segment_stats(table);
            count += c as i64;
            bytes += b as i64;
        }
        let label = TableLabel { table: table.name() };
        host.metrics.segments.get_or_create(&label).set(count);
        host.metrics.segment_bytes.get_or_create(&label).set(bytes);
    }
    for (group, raft) in host.rafts() {
        let m = raft.metrics().borrow().clone();
        let committed = m.last_log_index.unwrap_or(0);
        let applied = m.last_applied.map_or(0, |l| l.index);
        host.metrics
            .apply_lag
            .get_or_create(&crate::metrics::GroupLabel { group })
            .set(committed.saturating_sub(applied) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    fn own_nice() -> libc::c_int {
        // SAFETY: as in `lower_priority`.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn merges_run_at_a_lower_priority_than_queries() {
        let before = own_nice();
        let during = yielding(own_nice).await.unwrap();
        assert_eq!(during, before.max(NICE), "a compaction thread runs niced");
        assert_eq!(own_nice(), before, "the caller's thread keeps its priority");
    }

    #[tokio::test]
    async fn a_panicking_merge_is_an_error_not_a_hang() {
        let result = yielding(|| -> u32 { panic!("merge failed") }).await;
        assert!(result.is_err());
    }
}
