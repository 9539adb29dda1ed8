//! Flushes shard buffers by size, by age, and by the node's buffer budget. The Raft snapshot
//! policy alone flushes every N entries, which bounds neither memory (entries vary in size)
//! nor restart replay time (a quiet shard may never reach N); this loop asks a shard's Raft
//! for a snapshot (which *is* the flush, see `state_machine`) as soon as its buffer is too
//! big or too old, or the node's buffers together hold more than its budget.

use std::sync::Arc;
use std::time::Duration;

use crate::host::NodeHost;
use crate::types::GroupId;

const CHECK_EVERY: Duration = Duration::from_millis(500);

/// A buffer smaller than this is not flushed early for the node's budget: its segments would
/// be drafts, for little memory back.
pub const MIN_EARLY_FLUSH: u64 = 16 << 20;

/// One shard's buffers, as the flusher sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
    pub group: GroupId,
    /// Due on its own: by size, age, or rows of a deleted project.
    pub due: bool,
    /// The active buffer's bytes (as estimated for flush-by-size).
    pub active: u64,
    /// Frozen buffers still being written.
    pub frozen: u64,
}

/// The shards to flush now: every one due on its own, then, while what stays in active
/// buffers and what is being written pass `budget`, the largest active buffers (of at least
/// [`MIN_EARLY_FLUSH`]).
pub fn to_flush(shards: &[Buffers], budget: u64) -> Vec<&Buffers> {
    let mut picked: Vec<&Buffers> = shards.iter().filter(|s| s.due).collect();
    // What is being written counts until it is written; a buffer picked stops growing.
    let mut held =
        shards.iter().map(|s| s.frozen.saturating_add(if s.due { 0 } else { s.active })).fold(0, u64::saturating_add);
    let mut rest: Vec<&Buffers> = shards.iter().filter(|s| !s.due && s.active >= MIN_EARLY_FLUSH).collect();
    rest.sort_by_key(|s| std::cmp::Reverse(s.active));
    for s in rest {
        if held <= budget {
            break;
        }
        picked.push(s);
        held = held.saturating_sub(s.active);
    }
    picked
}

pub fn spawn(host: Arc<NodeHost>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = crate::host::periodic(CHECK_EVERY);
        loop {
            tick.tick().await;
            let shards = host.shards();
            let buffers: Vec<Buffers> = shards
                .iter()
                .map(|(group, shard)| {
                    let state = shard.state.read().unwrap();
                    let s = &state.state;
                    let active = s.active_bytes();
                    Buffers {
                        group: *group,
                        due: s.wants_flush(),
                        active,
                        frozen: s.unflushed_bytes().saturating_sub(active),
                    }
                })
                .collect();
            for b in to_flush(&buffers, host.config.buffer_memory_bytes) {
                let Some((group, shard)) = shards.iter().find(|(g, _)| *g == b.group) else { continue };
                match shard.raft.trigger().snapshot().await {
                    Err(e) => tracing::warn!(group, error = %e, "could not trigger a flush"),
                    Ok(()) if !b.due => {
                        host.metrics.early_flushes.inc();
                    }
                    Ok(()) => {}
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn buffers(group: GroupId, due: bool, active_mib: u64, frozen_mib: u64) -> Buffers {
        Buffers { group, due, active: active_mib * MIB, frozen: frozen_mib * MIB }
    }

    /// The groups [`to_flush`] picks, in its order.
    fn groups(shards: &[Buffers], budget: u64) -> Vec<GroupId> {
        to_flush(shards, budget).into_iter().map(|b| b.group).collect()
    }

    #[test]
    fn the_largest_buffer_flushes_early_when_the_node_passes_its_budget() {
        let shards = [buffers(1, false, 200, 0), buffers(2, false, 250, 0), buffers(3, false, 100, 0)];
        assert!(groups(&shards, 1024 * MIB).is_empty(), "550 MiB fit in 1 GiB");
        assert_eq!(groups(&shards, 512 * MIB), [2], "one flush brings 550 MiB to 300");
        assert_eq!(groups(&shards, 250 * MIB), [2, 1], "then the next largest");
    }

    #[test]
    fn buffers_being_written_count_against_the_budget_but_small_ones_are_not_flushed() {
        let shards = [buffers(1, false, 10, 900), buffers(2, false, 120, 0)];
        assert_eq!(groups(&shards, 1024 * MIB), [2], "900 MiB being written and 130 active");
        assert!(groups(&[buffers(1, false, 10, 2000)], 1024 * MIB).is_empty(), "10 MiB would be a draft");
    }

    #[test]
    fn a_due_buffer_flushes_whatever_the_budget() {
        let shards = [buffers(1, true, 1, 0), buffers(2, false, 300, 0)];
        assert_eq!(groups(&shards, 1 << 40), [1]);
        assert_eq!(groups(&shards, 100 * MIB), [1, 2]);
    }

    proptest! {
        /// After the flushes it asks for, the node holds at most its budget in buffers still
        /// filling and being written, unless only small buffers are left to flush; and it
        /// flushes no buffer it does not need to.
        #[test]
        fn flushes_bring_the_node_within_its_budget_and_no_further(
            shards in proptest::collection::vec((any::<bool>(), 0u64..400, 0u64..400), 0..12),
            budget_mib in 0u64..2048,
        ) {
            let shards: Vec<Buffers> =
                shards.into_iter().enumerate().map(|(i, (due, a, f))| buffers(i as GroupId, due, a, f)).collect();
            let budget = budget_mib * MIB;
            let picked = groups(&shards, budget);
            let growing = |s: &Buffers| if picked.contains(&s.group) { 0 } else { s.active };
            let held: u64 = shards.iter().map(|s| s.frozen + growing(s)).sum();
            let left_big = shards.iter().any(|s| !picked.contains(&s.group) && s.active >= MIN_EARLY_FLUSH);
            prop_assert!(held <= budget || !left_big);
            for s in shards.iter().filter(|s| s.due) {
                prop_assert!(picked.contains(&s.group));
            }
            // Without its last early pick the node would still be over budget.
            if let Some(last) = picked.iter().rev().find(|g| !shards.iter().any(|s| s.group == **g && s.due)) {
                let s = shards.iter().find(|s| s.group == *last).unwrap();
                prop_assert!(held + s.active > budget);
            }
        }
    }
}
