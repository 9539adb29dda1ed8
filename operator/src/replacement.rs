//! When to replace a storage node that restarted on an empty volume under its old id
//! (docs/RELIABILITY.md, "Replacing a node"), as a pure function of what the admin API reports
//! (`GET /admin/v1/cluster/identities`). The call it decides on is
//! `POST /admin/v1/cluster/replace`; repeating it changes nothing, so a crash between planning
//! and recording repeats at most that call.
//!
//! Not yet called by the cluster controller.

use std::collections::BTreeSet;

/// One node id as `GET /admin/v1/cluster/identities` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentityState {
    pub id: u64,
    /// A new incarnation announced itself under this id and waits (`needs_replacement`).
    pub needs_replacement: bool,
    /// A replacement of this id runs (`replacing`).
    pub replacing: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplacementDecision {
    /// No node needs replacing.
    Idle,
    /// Replace this node id now.
    Replace { id: u64 },
    /// Nodes need replacing, later: another replacement or a scaling step runs, or the admin
    /// API did not answer.
    Wait { reason: String },
    /// Replacing would not be safe; a person must act (the reason says what was lost).
    Blocked { reason: String },
}

/// Nodes that lost their data a group of `replication_factor` voters survives: the others still
/// form a majority of the old and of the reduced membership while one is removed.
pub fn tolerable_losses(replication_factor: u32) -> usize {
    (replication_factor.saturating_sub(1) / 2) as usize
}

/// The next replacement step. `identities` is `None` when the admin API did not answer;
/// `scaling` is true while a scaling operation is in progress (it changes memberships too).
pub fn plan(identities: Option<&[IdentityState]>, replication_factor: u32, scaling: bool) -> ReplacementDecision {
    let Some(identities) = identities else {
        return ReplacementDecision::Wait { reason: "the admin API did not answer".into() };
    };
    let waiting: BTreeSet<u64> = identities.iter().filter(|n| n.needs_replacement).map(|n| n.id).collect();
    let replacing: BTreeSet<u64> = identities.iter().filter(|n| n.replacing).map(|n| n.id).collect();
    let lost = waiting.union(&replacing).count();
    if lost == 0 {
        return ReplacementDecision::Idle;
    }
    if lost > tolerable_losses(replication_factor) {
        let ids: Vec<String> = waiting.union(&replacing).map(u64::to_string).collect();
        return ReplacementDecision::Blocked {
            reason: format!(
                "nodes {} lost their data; groups of {replication_factor} replicas survive at most {} such \
                 losses, so some may have lost acknowledged writes: restore from a backup",
                ids.join(", "),
                tolerable_losses(replication_factor)
            ),
        };
    }
    if let Some(id) = replacing.first() {
        return ReplacementDecision::Wait { reason: format!("node {id} is being replaced") };
    }
    if scaling {
        return ReplacementDecision::Wait { reason: "a scaling operation is in progress".into() };
    }
    match waiting.first() {
        Some(&id) => ReplacementDecision::Replace { id },
        None => ReplacementDecision::Idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(id: u64, needs_replacement: bool, replacing: bool) -> IdentityState {
        IdentityState { id, needs_replacement, replacing }
    }

    #[test]
    fn a_node_waiting_for_replacement_is_replaced_once_nothing_else_runs() {
        let nodes = [node(1, false, false), node(2, false, false), node(3, true, false)];
        assert_eq!(plan(Some(&nodes), 3, false), ReplacementDecision::Replace { id: 3 });
        assert!(matches!(plan(Some(&nodes), 3, true), ReplacementDecision::Wait { .. }), "scaling first");
        assert!(matches!(plan(None, 3, false), ReplacementDecision::Wait { .. }));
        let healthy = [node(1, false, false), node(2, false, false)];
        assert_eq!(plan(Some(&healthy), 3, false), ReplacementDecision::Idle);
    }

    #[test]
    fn losses_a_group_cannot_survive_block_replacement() {
        let two = [node(1, false, false), node(2, true, false), node(3, true, false)];
        let ReplacementDecision::Blocked { reason } = plan(Some(&two), 3, false) else { panic!("not blocked") };
        assert!(reason.contains("nodes 2, 3 lost their data"), "{reason}");
        assert_eq!(plan(Some(&two), 5, false), ReplacementDecision::Replace { id: 2 }, "five replicas survive two");
        let single = [node(1, true, false)];
        assert!(matches!(plan(Some(&single), 1, false), ReplacementDecision::Blocked { .. }));
    }

    fn identities() -> impl Strategy<Value = Vec<IdentityState>> {
        proptest::collection::btree_map(
            1u64..12,
            (any::<bool>(), prop_oneof![4 => Just(false), 1 => Just(true)]),
            0..10,
        )
        .prop_map(|m| m.into_iter().map(|(id, (n, r))| node(id, n && !r, r)).collect())
    }

    proptest! {
        /// Whatever the cluster reports: only a node that announced a new incarnation is
        /// replaced, never while another replacement or a scaling step runs, never when more
        /// nodes lost data than a group survives; and a safe, idle cluster is never left waiting.
        #[test]
        fn replacement_is_one_at_a_time_and_only_when_safe(
            nodes in identities(),
            rf in prop_oneof![Just(1u32), Just(3), Just(5)],
            scaling in any::<bool>(),
        ) {
            let decision = plan(Some(&nodes), rf, scaling);
            prop_assert_eq!(&decision, &plan(Some(&nodes), rf, scaling), "deterministic");
            let lost = nodes.iter().filter(|n| n.needs_replacement || n.replacing).count();
            let running = nodes.iter().any(|n| n.replacing);
            match &decision {
                ReplacementDecision::Replace { id } => {
                    prop_assert!(nodes.iter().any(|n| n.id == *id && n.needs_replacement));
                    prop_assert!(!running && !scaling);
                    prop_assert!(lost <= tolerable_losses(rf));
                }
                ReplacementDecision::Idle => prop_assert_eq!(lost, 0),
                ReplacementDecision::Blocked { .. } => prop_assert!(lost > tolerable_losses(rf)),
                ReplacementDecision::Wait { .. } => prop_assert!(running || scaling),
            }
        }
    }
}
