//! Flushes shard buffers by size and by age. The Raft snapshot policy alone flushes every N
//! entries, which bounds neither memory (entries vary in size) nor restart replay time (a
//! quiet shard may never reach N); this loop asks a shard's Raft for a snapshot (which *is*
//! the flush, see `state_machine`) as soon as its buffer is too big or too old.

use std::sync::Arc;
use std::time::Duration;

use crate::host::NodeHost;

const CHECK_EVERY: Duration = Duration::from_millis(500);

pub fn spawn(host: Arc<NodeHost>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = crate::host::periodic(CHECK_EVERY);
        loop {
            tick.tick().await;
            for (group, shard) in host.shards() {
                let due = shard.state.read().unwrap().state.wants_flush();
                if due {
                    if let Err(e) = shard.raft.trigger().snapshot().await {
                        tracing::warn!(group, error = %e, "could not trigger a flush");
                    }
                }
            }
        }
    })
}
