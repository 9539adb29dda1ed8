//! When to replace a storage node that restarted on an empty volume under its old id
//! (docs/RELIABILITY.md, "Replacing a node"), as a pure function of what the admin API reports
//! (`GET /admin/v1/cluster/identities`). The call it decides on is
//! `POST /admin/v1/cluster/replace`; repeating it changes nothing, so a crash between planning
//! and recording repeats at most that call.
//!
//! Also the removal of dead nodes listed in `spec.storage.failedNodes.remove`
//! ([`plan_removals`], `POST /admin/v1/cluster/remove`, as idempotent).

use std::collections::BTreeSet;

use sextant_model::admin::NodeIdentity;

use crate::v1alpha1::MembershipState;

/// One node id as `GET /admin/v1/cluster/identities` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentityState {
    pub id: u64,
    /// A new incarnation announced itself under this id and waits (`needs_replacement`).
    pub needs_replacement: bool,
    /// A replacement of this id runs (`replacing`).
    pub replacing: bool,
}

impl From<&NodeIdentity> for IdentityState {
    fn from(n: &NodeIdentity) -> Self {
        Self { id: n.id, needs_replacement: n.needs_replacement.is_some(), replacing: n.replacing.is_some() }
    }
}

/// Which waiting nodes may be replaced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Every one (`failedNodes.automaticReplacement`).
    pub automatic: bool,
    /// These ids (`failedNodes.replace`, by ordinal).
    pub approved: BTreeSet<u64>,
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
    /// Nodes wait for replacement, but automatic replacement is off and none is listed.
    NotApproved { ids: Vec<u64> },
}

/// Nodes that lost their data a group of `replication_factor` voters survives: the others still
/// form a majority of the old and of the reduced membership while one is removed.
pub fn tolerable_losses(replication_factor: u32) -> usize {
    (replication_factor.saturating_sub(1) / 2) as usize
}

/// The next replacement step. `identities` is `None` when the admin API did not answer;
/// `scaling` is true while a scaling operation is in progress (it changes memberships too).
pub fn plan(
    identities: Option<&[IdentityState]>,
    replication_factor: u32,
    scaling: bool,
    policy: &Policy,
) -> ReplacementDecision {
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
    match waiting.iter().find(|id| policy.automatic || policy.approved.contains(id)) {
        Some(&id) => ReplacementDecision::Replace { id },
        None if waiting.is_empty() => ReplacementDecision::Idle,
        None => ReplacementDecision::NotApproved { ids: waiting.into_iter().collect() },
    }
}

/// A node listed for removal, as observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovalCandidate {
    pub ordinal: i32,
    /// Its node id; `None`: it never registered (holds nothing).
    pub id: Option<u64>,
    pub state: Option<MembershipState>,
    /// Whether its pod is ready; `None`: not known.
    pub pod_ready: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Holds nothing any more (drained, or never registered).
    Done { ordinal: i32 },
    /// Its replicas are moving off.
    InProgress { ordinal: i32 },
    /// Ask the cluster to move its replicas off now.
    Remove { ordinal: i32, id: u64 },
    /// Later: another removal, a replacement or a scaling step runs.
    Wait { ordinal: i32, reason: String },
    /// Not while it would be unsafe; the reason says why.
    Refused { ordinal: i32, reason: String },
}

/// What to do about each listed node: at most one removal starts at a time, only of a node
/// whose pod is known not to be ready (a healthy node leaves by scaling in), and only while
/// `replication_factor` members not listed stay `Active`. `busy`: a scaling step or a
/// replacement runs.
pub fn plan_removals(
    candidates: &[RemovalCandidate],
    membership: &std::collections::BTreeMap<i32, MembershipState>,
    replication_factor: u32,
    busy: bool,
) -> Vec<Removal> {
    let listed: BTreeSet<i32> = candidates.iter().map(|c| c.ordinal).collect();
    let staying = membership.iter().filter(|(o, s)| !listed.contains(o) && **s == MembershipState::Active).count();
    let mut running = candidates.iter().any(|c| c.id.is_some() && c.state == Some(MembershipState::Draining));
    let mut out = vec![];
    for c in candidates {
        let ordinal = c.ordinal;
        out.push(match (c.id, c.state) {
            (None, _) | (_, Some(MembershipState::Drained)) => Removal::Done { ordinal },
            (_, Some(MembershipState::Draining)) => Removal::InProgress { ordinal },
            (Some(_), _) if c.pod_ready != Some(false) => Removal::Refused {
                ordinal,
                reason: format!(
                    "node {ordinal} is {}: a healthy node leaves by scaling in, not by removal",
                    if c.pod_ready == Some(true) { "ready" } else { "of unknown readiness" }
                ),
            },
            (Some(_), _) if staying < replication_factor as usize => Removal::Refused {
                ordinal,
                reason: format!(
                    "removing node {ordinal} would leave {staying} active nodes, fewer than replicationFactor {replication_factor}"
                ),
            },
            (Some(_), _) if busy || running => {
                Removal::Wait { ordinal, reason: "another membership change is in progress".into() }
            }
            (Some(id), _) => {
                running = true;
                Removal::Remove { ordinal, id }
            }
        });
    }
    out
}

/// Nodes below `size` that were taken out (drained) and are no longer listed for removal:
/// the members to place replicas on again. A scale-in's or a cancelled scale-out's drained
/// nodes are at or above `size`, so only a removal leaves one here.
pub fn to_restore(
    membership: &std::collections::BTreeMap<i32, MembershipState>,
    size: i32,
    listed: &BTreeSet<i32>,
) -> Vec<i32> {
    membership
        .iter()
        .filter(|(o, s)| {
            **o < size && !listed.contains(o) && matches!(s, MembershipState::Draining | MembershipState::Drained)
        })
        .map(|(o, _)| *o)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(id: u64, needs_replacement: bool, replacing: bool) -> IdentityState {
        IdentityState { id, needs_replacement, replacing }
    }

    fn auto() -> Policy {
        Policy { automatic: true, approved: BTreeSet::new() }
    }

    #[test]
    fn a_node_waiting_for_replacement_is_replaced_once_nothing_else_runs() {
        let nodes = [node(1, false, false), node(2, false, false), node(3, true, false)];
        assert_eq!(plan(Some(&nodes), 3, false, &auto()), ReplacementDecision::Replace { id: 3 });
        assert!(matches!(plan(Some(&nodes), 3, true, &auto()), ReplacementDecision::Wait { .. }), "scaling first");
        assert!(matches!(plan(None, 3, false, &auto()), ReplacementDecision::Wait { .. }));
        let healthy = [node(1, false, false), node(2, false, false)];
        assert_eq!(plan(Some(&healthy), 3, false, &auto()), ReplacementDecision::Idle);
    }

    #[test]
    fn losses_a_group_cannot_survive_block_replacement() {
        let two = [node(1, false, false), node(2, true, false), node(3, true, false)];
        let ReplacementDecision::Blocked { reason } = plan(Some(&two), 3, false, &auto()) else {
            panic!("not blocked")
        };
        assert!(reason.contains("nodes 2, 3 lost their data"), "{reason}");
        assert_eq!(
            plan(Some(&two), 5, false, &auto()),
            ReplacementDecision::Replace { id: 2 },
            "five replicas survive two"
        );
        let single = [node(1, true, false)];
        assert!(matches!(plan(Some(&single), 1, false, &auto()), ReplacementDecision::Blocked { .. }));
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
            automatic in any::<bool>(),
            approved in proptest::collection::btree_set(1u64..12, 0..4),
        ) {
            let policy = Policy { automatic, approved: approved.clone() };
            let decision = plan(Some(&nodes), rf, scaling, &policy);
            prop_assert_eq!(&decision, &plan(Some(&nodes), rf, scaling, &policy), "deterministic");
            let lost = nodes.iter().filter(|n| n.needs_replacement || n.replacing).count();
            let running = nodes.iter().any(|n| n.replacing);
            match &decision {
                ReplacementDecision::Replace { id } => {
                    prop_assert!(nodes.iter().any(|n| n.id == *id && n.needs_replacement));
                    prop_assert!(automatic || approved.contains(id), "replaced without approval");
                    prop_assert!(!running && !scaling);
                    prop_assert!(lost <= tolerable_losses(rf));
                }
                ReplacementDecision::Idle => prop_assert_eq!(lost, 0),
                ReplacementDecision::Blocked { .. } => prop_assert!(lost > tolerable_losses(rf)),
                ReplacementDecision::Wait { .. } => prop_assert!(running || scaling),
                ReplacementDecision::NotApproved { ids } => {
                    prop_assert!(!automatic);
                    prop_assert!(ids.iter().all(|id| !approved.contains(id)));
                }
            }
        }

        /// Meta as the operator sees it, with the operator crashing before or after its call
        /// at any reconcile: every lost node is replaced, one at a time, and `replace` is never
        /// sent for an id that does not wait for it (which meta would refuse with 409).
        #[test]
        fn replacement_resumes_after_any_crash_and_never_touches_a_healthy_node(
            rf in prop_oneof![Just(3u32), Just(5)],
            wiped in proptest::collection::btree_set(1u64..=5, 1..=2),
            groups in 1usize..4,
            crashes in proptest::collection::vec(any::<bool>(), 0..30),
        ) {
            prop_assume!(wiped.len() <= tolerable_losses(rf));
            // id → (needs_replacement, groups left while replacing)
            let mut meta: std::collections::BTreeMap<u64, (bool, Option<usize>)> =
                (1..=rf as u64).map(|id| (id, (wiped.contains(&id), None))).collect();
            let mut crashes = crashes.into_iter();
            for _ in 0..200 {
                let view: Vec<IdentityState> = meta
                    .iter()
                    .map(|(id, (waiting, left))| node(*id, *waiting, left.is_some()))
                    .collect();
                if let ReplacementDecision::Replace { id } = plan(Some(&view), rf, false, &auto()) {
                    let entry = meta.get_mut(&id).unwrap();
                    prop_assert!(entry.0, "replace sent for node {} that does not wait", id);
                    prop_assert!(meta.values().all(|(_, left)| left.is_none()), "two replacements at once");
                    // A crash before the call loses it; the next reconcile decides the same.
                    if !crashes.next().unwrap_or(false) {
                        *meta.get_mut(&id).unwrap() = (false, Some(groups));
                    }
                }
                // Group leaders report, one group per round.
                for entry in meta.values_mut() {
                    if let Some(left) = entry.1 {
                        entry.1 = left.checked_sub(1).filter(|l| *l > 0);
                    }
                }
                if meta.values().all(|(w, l)| !w && l.is_none()) {
                    return Ok(());
                }
            }
            prop_assert!(false, "did not finish: {:?}", meta);
        }

        /// Removal never starts for a ready or unknown pod, never leaves fewer than the
        /// replication factor of active unlisted nodes, and starts at most one at a time.
        #[test]
        fn removal_is_refused_for_healthy_nodes_and_below_the_replication_factor(
            states in proptest::collection::vec(
                prop_oneof![Just(MembershipState::Active), Just(MembershipState::Draining), Just(MembershipState::Drained)],
                1..8,
            ),
            listed in proptest::collection::btree_set(0i32..8, 0..4),
            ready in proptest::collection::vec(prop_oneof![Just(None), Just(Some(true)), Just(Some(false))], 8),
            rf in 1u32..=3,
            busy in any::<bool>(),
        ) {
            let membership: std::collections::BTreeMap<i32, MembershipState> =
                states.iter().enumerate().map(|(o, s)| (o as i32, *s)).collect();
            let candidates: Vec<RemovalCandidate> = listed
                .iter()
                .map(|o| RemovalCandidate {
                    ordinal: *o,
                    id: membership.contains_key(o).then_some(*o as u64 + 1),
                    state: membership.get(o).copied(),
                    pod_ready: ready[*o as usize],
                })
                .collect();
            let out = plan_removals(&candidates, &membership, rf, busy);
            prop_assert_eq!(out.len(), candidates.len());
            let staying = membership.iter().filter(|(o, s)| !listed.contains(o) && **s == MembershipState::Active).count();
            let draining = candidates.iter().any(|c| c.state == Some(MembershipState::Draining));
            let started: Vec<_> = out.iter().filter(|r| matches!(r, Removal::Remove { .. })).collect();
            prop_assert!(started.len() <= 1);
            for (c, r) in candidates.iter().zip(&out) {
                if let Removal::Remove { id, .. } = r {
                    prop_assert_eq!(Some(*id), c.id);
                    prop_assert_eq!(c.pod_ready, Some(false));
                    prop_assert!(staying >= rf as usize && !busy && !draining);
                    prop_assert_eq!(c.state, Some(MembershipState::Active));
                }
            }
        }
    }

    #[test]
    fn only_an_unlisted_drained_node_below_the_size_is_restored() {
        use MembershipState::*;
        let membership = [(0, Active), (1, Drained), (2, Draining), (3, Joining), (4, Drained)].into_iter().collect();
        assert_eq!(to_restore(&membership, 4, &BTreeSet::from([2])), vec![1]);
        assert_eq!(to_restore(&membership, 4, &BTreeSet::new()), vec![1, 2]);
    }

    #[test]
    fn nodes_waiting_without_approval_are_reported_not_replaced() {
        let nodes = [node(1, false, false), node(2, true, false), node(3, false, false)];
        let manual = Policy { automatic: false, approved: BTreeSet::new() };
        assert_eq!(plan(Some(&nodes), 3, false, &manual), ReplacementDecision::NotApproved { ids: vec![2] });
        let listed = Policy { automatic: false, approved: BTreeSet::from([2]) };
        assert_eq!(plan(Some(&nodes), 3, false, &listed), ReplacementDecision::Replace { id: 2 });
    }

    #[test]
    fn a_dead_node_is_removed_once_and_a_ready_one_never() {
        let membership = (0..4).map(|o| (o, MembershipState::Active)).collect();
        let dead =
            RemovalCandidate { ordinal: 3, id: Some(4), state: Some(MembershipState::Active), pod_ready: Some(false) };
        assert_eq!(plan_removals(&[dead], &membership, 3, false), vec![Removal::Remove { ordinal: 3, id: 4 }]);
        let draining = RemovalCandidate { state: Some(MembershipState::Draining), ..dead };
        assert_eq!(plan_removals(&[draining], &membership, 3, false), vec![Removal::InProgress { ordinal: 3 }]);
        let ready = RemovalCandidate { pod_ready: Some(true), ..dead };
        assert!(matches!(plan_removals(&[ready], &membership, 3, false)[0], Removal::Refused { .. }));
        assert!(matches!(plan_removals(&[dead], &membership, 4, false)[0], Removal::Refused { .. }), "3 would stay");
        let never = RemovalCandidate { id: None, state: None, ..dead };
        assert_eq!(plan_removals(&[never], &membership, 3, false), vec![Removal::Done { ordinal: 3 }]);
    }
}
