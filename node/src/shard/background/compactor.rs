//! Background work on segments: merges small segments (see `segment::compaction`), one shard
//! at a time, off the apply path; and refreshes the storage gauges.

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
                    match tokio::task::spawn_blocking(move || job.run()).await {
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
                            tracing::error!(group, error = %e, "compaction panicked");
                            break;
                        }
                    }
                }
            }
            refresh_gauges(&host);
        }
    })
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
