//! Rolls the shards' usage counters up into meta (docs/API.md, "Usage"): every
//! [`REPORT_EVERY`], each shard this node leads reports its cumulative counters per project
//! and month, with the log index they are at (`MetaCommand::ReportUsage`). Meta keeps the
//! newest report per group, so routers see usage at most a few seconds behind what was
//! committed. Only a changed shard reports again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use sextant_model::meta::MetaCommand;

use crate::host::NodeHost;
use crate::meta_client;

pub const REPORT_EVERY: Duration = Duration::from_secs(2);

pub fn spawn(host: Arc<NodeHost>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = crate::host::periodic(REPORT_EVERY);
        // Group -> (leader term, index) of the last report meta took.
        let mut reported: HashMap<u64, (u64, u64)> = HashMap::new();
        loop {
            tick.tick().await;
            for (group, shard) in host.shards() {
                let metrics = shard.raft.metrics().borrow().clone();
                if metrics.state != ServerState::Leader {
                    continue;
                }
                let (applied_index, usage) = shard.state.read().unwrap().state.usage_report();
                let at = (metrics.current_term, applied_index);
                if usage.is_empty() || reported.get(&group) == Some(&at) {
                    continue;
                }
                let command = MetaCommand::ReportUsage { group, applied_index, usage };
                match meta_client::command(&host, &command).await {
                    Ok(_) => drop(reported.insert(group, at)),
                    Err(e) => tracing::debug!(group, error = %e, "reporting usage to meta"),
                }
            }
        }
    })
}
