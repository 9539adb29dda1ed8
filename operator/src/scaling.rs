//! Safe changes of `spec.storage.nodes` as a pure step function (docs/ARCHITECTURE.md,
//! "Membership, placement and drains").
//!
//! Each reconcile calls [`plan`] with the operation recorded in status and what it observes; it
//! gets the StatefulSet size to apply, the cluster calls to make and the operation to record.
//! Every transition is decided from observations, never from "I asked for it", and every action
//! is idempotent, so a crash between any two steps (losing the status write) repeats at most
//! the last step.

use std::collections::{BTreeMap, BTreeSet};

use crate::v1alpha1::{MembershipState, ScalingOperation, ScalingStep};

/// What the controller saw before planning.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The node StatefulSet, if it exists.
    pub statefulset: Option<StatefulSetState>,
    /// Membership by ordinal as the cluster reports it; `None` when the admin API is unreachable.
    pub membership: Option<BTreeMap<i32, MembershipState>>,
    /// Ordinals whose data volume (PVC) exists.
    pub volumes: BTreeSet<i32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatefulSetState {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.replicas`: pods that exist.
    pub current: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
}

/// A call to the cluster's admin API or the Kubernetes API beyond applying objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScalingAction {
    /// Ask meta to place replicas on nodes `0..nodes` and rebalance.
    PlaceReplicas { nodes: i32 },
    /// Ask meta to move every replica off this node.
    Drain { ordinal: i32 },
    /// Delete the data volume of a removed node.
    DeleteVolume { ordinal: i32 },
}

/// Why a plan emits an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    Started { from: i32, to: i32 },
    Blocked { message: String },
    NodeRemoved { ordinal: i32 },
    Completed { nodes: i32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScalingPlan {
    /// Replicas of the node StatefulSet to apply now.
    pub statefulset_replicas: i32,
    /// Nodes that are members after this step (recorded as `status.storageNodes`).
    pub member_nodes: i32,
    /// Nodes a new pod lists in `--peers`.
    pub peer_nodes: i32,
    pub operation: Option<ScalingOperation>,
    pub actions: Vec<ScalingAction>,
    /// Set when the requested size is refused.
    pub blocked: Option<String>,
    pub notices: Vec<Notice>,
}

/// The next step towards `target` nodes.
///
/// `recorded_nodes` is `status.storageNodes` when the operator wrote a status before; `None` for
/// a cluster seen for the first time (then the existing StatefulSet, or else the target, is
/// the current size: a new cluster starts at its full size without scaling steps).
pub fn plan(
    target: i32,
    replication_factor: i32,
    recorded_nodes: Option<i32>,
    operation: Option<&ScalingOperation>,
    observed: &Observed,
) -> ScalingPlan {
    let size = recorded_nodes.or(observed.statefulset.map(|s| s.replicas)).unwrap_or(target);
    let mut p = ScalingPlan {
        statefulset_replicas: size,
        member_nodes: size,
        peer_nodes: size,
        operation: operation.cloned(),
        actions: vec![],
        blocked: None,
        notices: vec![],
    };
    let membership = |ordinal: i32| observed.membership.as_ref().and_then(|m| m.get(&ordinal).copied());
    let Some(op) = operation else {
        if target > size {
            p.statefulset_replicas = target;
            p.peer_nodes = target;
            p.operation =
                Some(ScalingOperation { from: size, to: target, step: ScalingStep::GrowStatefulSet, node: None });
            p.notices.push(Notice::Started { from: size, to: target });
        } else if target < size && target < replication_factor {
            p.blocked = Some(format!(
                "cannot scale in to {target} nodes: replicationFactor is {replication_factor}, so at least \
                 {replication_factor} nodes must remain"
            ));
            p.notices.push(Notice::Blocked { message: p.blocked.clone().unwrap_or_default() });
        } else if target < size {
            p.operation = Some(drain(size, target, size - 1));
            p.actions.push(ScalingAction::Drain { ordinal: size - 1 });
            p.notices.push(Notice::Started { from: size, to: target });
        }
        return p;
    };
    match (op.step, op.node) {
        (ScalingStep::GrowStatefulSet, _) => {
            p.statefulset_replicas = op.to;
            p.peer_nodes = op.to;
            if observed.statefulset.is_some_and(|s| s.replicas == op.to && s.ready >= op.to) {
                p.operation = Some(ScalingOperation { step: ScalingStep::PlaceReplicas, ..op.clone() });
                p.actions.push(ScalingAction::PlaceReplicas { nodes: op.to });
            }
        }
        (ScalingStep::PlaceReplicas, _) => {
            p.statefulset_replicas = op.to;
            p.peer_nodes = op.to;
            if (0..op.to).all(|i| membership(i) == Some(MembershipState::Active)) {
                p.member_nodes = op.to;
                p.operation = None;
                p.notices.push(Notice::Completed { nodes: op.to });
            } else {
                p.actions.push(ScalingAction::PlaceReplicas { nodes: op.to });
            }
        }
        (ScalingStep::Drain, Some(node)) => {
            p.statefulset_replicas = node + 1;
            if membership(node) == Some(MembershipState::Drained) {
                // Shrink in the same step: applying node + 1 again after a lost status write
                // would bring the drained pod back for nothing.
                p.statefulset_replicas = node;
                p.operation = Some(ScalingOperation { step: ScalingStep::Shrink, ..op.clone() });
            } else {
                p.actions.push(ScalingAction::Drain { ordinal: node });
            }
        }
        (ScalingStep::Shrink, Some(node)) => {
            p.statefulset_replicas = node;
            if observed.statefulset.is_some_and(|s| s.replicas <= node && s.current <= node) {
                p.operation = Some(ScalingOperation { step: ScalingStep::DeleteVolume, ..op.clone() });
                p.actions.push(ScalingAction::DeleteVolume { ordinal: node });
            }
        }
        (ScalingStep::DeleteVolume, Some(node)) => {
            p.statefulset_replicas = node;
            if observed.volumes.contains(&node) {
                p.actions.push(ScalingAction::DeleteVolume { ordinal: node });
            } else {
                p.member_nodes = node;
                p.peer_nodes = node;
                p.notices.push(Notice::NodeRemoved { ordinal: node });
                if node > op.to {
                    p.operation = Some(drain(op.from, op.to, node - 1));
                    p.actions.push(ScalingAction::Drain { ordinal: node - 1 });
                } else {
                    p.operation = None;
                    p.notices.push(Notice::Completed { nodes: node });
                }
            }
        }
        // A scale-in step without its node cannot come from this planner; restart that node's
        // removal from the highest member, which is where it must have been.
        (ScalingStep::Drain | ScalingStep::Shrink | ScalingStep::DeleteVolume, None) => {
            p.operation = Some(drain(op.from, op.to, size - 1));
            p.actions.push(ScalingAction::Drain { ordinal: size - 1 });
        }
    }
    p
}

/// While the cluster is stopped nothing moves: the operation in progress waits.
pub fn hold(
    target: i32,
    recorded_nodes: Option<i32>,
    operation: Option<&ScalingOperation>,
    observed: &Observed,
) -> ScalingPlan {
    let size = recorded_nodes.or(observed.statefulset.map(|s| s.replicas)).unwrap_or(target);
    ScalingPlan {
        statefulset_replicas: size,
        member_nodes: size,
        peer_nodes: operation.map_or(size, |op| op.to.max(size)),
        operation: operation.cloned(),
        actions: vec![],
        blocked: None,
        notices: vec![],
    }
}

fn drain(from: i32, to: i32, node: i32) -> ScalingOperation {
    ScalingOperation { from, to, step: ScalingStep::Drain, node: Some(node) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A simulated Kubernetes + Sextant cluster executing scaling actions. Pods follow the
    /// StatefulSet one tick later; meta drains and places on request, one tick later.
    #[derive(Debug, Clone, PartialEq)]
    struct World {
        sts: Option<StatefulSetState>,
        membership: BTreeMap<i32, MembershipState>,
        volumes: BTreeSet<i32>,
        drain_requested: BTreeSet<i32>,
        place_requested: Option<i32>,
        // Persisted status of the SextantCluster.
        recorded: Option<i32>,
        operation: Option<ScalingOperation>,
    }

    impl World {
        fn running(nodes: i32) -> Self {
            Self {
                sts: Some(StatefulSetState { replicas: nodes, current: nodes, ready: nodes }),
                membership: (0..nodes).map(|i| (i, MembershipState::Active)).collect(),
                volumes: (0..nodes).collect(),
                drain_requested: BTreeSet::new(),
                place_requested: None,
                recorded: Some(nodes),
                operation: None,
            }
        }

        fn observe(&self) -> Observed {
            Observed { statefulset: self.sts, membership: Some(self.membership.clone()), volumes: self.volumes.clone() }
        }

        /// Applies the StatefulSet size; checks the safety invariant first.
        fn apply_statefulset(&mut self, replicas: i32) {
            let sts = self.sts.get_or_insert_with(StatefulSetState::default);
            for ordinal in replicas..sts.current {
                assert_eq!(
                    self.membership.get(&ordinal),
                    Some(&MembershipState::Drained),
                    "pod {ordinal} removed while it still holds replicas"
                );
            }
            sts.replicas = replicas;
        }

        fn execute(&mut self, action: ScalingAction) {
            match action {
                ScalingAction::Drain { ordinal } => {
                    self.drain_requested.insert(ordinal);
                }
                ScalingAction::PlaceReplicas { nodes } => self.place_requested = Some(nodes),
                ScalingAction::DeleteVolume { ordinal } => {
                    assert!(self.sts.is_none_or(|s| s.current <= ordinal), "volume of running pod {ordinal} deleted");
                    self.volumes.remove(&ordinal);
                    self.membership.remove(&ordinal);
                }
            }
        }

        /// Time passes: controllers of the simulated world converge by one step.
        fn tick(&mut self) {
            if let Some(sts) = self.sts.as_mut() {
                for ordinal in sts.replicas..sts.current {
                    self.drain_requested.remove(&ordinal);
                }
                for ordinal in sts.current..sts.replicas {
                    self.volumes.insert(ordinal);
                    self.membership.entry(ordinal).or_insert(MembershipState::Joining);
                }
                sts.current = sts.replicas;
                sts.ready = sts.replicas;
            }
            for ordinal in self.drain_requested.clone() {
                let state = self.membership.get_mut(&ordinal).expect("drain of an unknown node");
                *state = match *state {
                    MembershipState::Draining | MembershipState::Drained => MembershipState::Drained,
                    _ => MembershipState::Draining,
                };
            }
            if let Some(nodes) = self.place_requested.take() {
                let running = self.sts.map_or(0, |s| s.current);
                for ordinal in 0..nodes.min(running) {
                    self.membership.insert(ordinal, MembershipState::Active);
                }
            }
            let active = self.membership.values().filter(|s| **s != MembershipState::Drained).count();
            assert!(active >= 1, "cluster lost every active node");
        }

        /// One reconcile: plan, then execute `survive` of its effects in order (apply the
        /// StatefulSet, each action, write the status); a crash loses the rest.
        fn reconcile(&mut self, target: i32, rf: i32, survive: usize) {
            let plan = plan(target, rf, self.recorded, self.operation.as_ref(), &self.observe());
            let mut budget = survive;
            let step = |budget: &mut usize| {
                let ok = *budget > 0;
                *budget = budget.saturating_sub(1);
                ok
            };
            if !step(&mut budget) {
                return;
            }
            self.apply_statefulset(plan.statefulset_replicas);
            for action in &plan.actions {
                if !step(&mut budget) {
                    return;
                }
                self.execute(*action);
            }
            if step(&mut budget) {
                self.recorded = Some(plan.member_nodes);
                self.operation = plan.operation;
            }
        }

        fn settled(&self, target: i32) -> bool {
            self.operation.is_none() && self.recorded == Some(target)
        }
    }

    fn run(from: i32, target: i32, rf: i32, crashes: &[usize]) -> World {
        let mut w = World::running(from);
        let mut crashes = crashes.iter();
        for _ in 0..400 {
            let survive = crashes.next().copied().unwrap_or(usize::MAX);
            w.reconcile(target, rf, survive);
            w.tick();
            if w.settled(target) {
                return w;
            }
        }
        panic!("did not converge from {from} to {target}: {w:?}");
    }

    fn assert_final(w: &World, target: i32) {
        assert_eq!(w.sts.unwrap().replicas, target);
        assert_eq!(w.volumes, (0..target).collect::<BTreeSet<_>>());
        assert!(w.membership.iter().all(|(o, s)| *o < target && *s == MembershipState::Active), "{w:?}");
    }

    #[test]
    fn new_cluster_starts_at_full_size_without_steps() {
        let p = plan(3, 3, None, None, &Observed::default());
        assert_eq!((p.statefulset_replicas, p.member_nodes, p.operation.clone()), (3, 3, None));
        assert!(p.actions.is_empty());
    }

    #[test]
    fn scale_out_grows_then_places_replicas() {
        let w = run(3, 5, 3, &[]);
        assert_final(&w, 5);
        let first = plan(5, 3, Some(3), None, &World::running(3).observe());
        assert_eq!(first.statefulset_replicas, 5);
        assert_eq!(first.operation.unwrap().step, ScalingStep::GrowStatefulSet);
    }

    #[test]
    fn scale_in_drains_highest_ordinal_first_one_at_a_time() {
        let p = plan(3, 3, Some(5), None, &World::running(5).observe());
        assert_eq!(p.actions, vec![ScalingAction::Drain { ordinal: 4 }]);
        assert_eq!(p.statefulset_replicas, 5);
        assert_final(&run(5, 3, 3, &[]), 3);
    }

    #[test]
    fn scale_in_below_replication_factor_is_blocked() {
        let p = plan(2, 3, Some(3), None, &World::running(3).observe());
        assert!(p.blocked.is_some());
        assert!(p.operation.is_none());
        assert!(p.actions.is_empty());
        assert_eq!(p.statefulset_replicas, 3);
        assert!(matches!(p.notices[0], Notice::Blocked { .. }));
    }

    #[test]
    fn drained_node_is_shrunk_in_the_same_step() {
        let mut w = World::running(4);
        w.membership.insert(3, MembershipState::Drained);
        let op = drain(4, 3, 3);
        let p = plan(3, 3, Some(4), Some(&op), &w.observe());
        assert_eq!(p.statefulset_replicas, 3);
        assert_eq!(p.operation.unwrap().step, ScalingStep::Shrink);
    }

    #[test]
    fn volume_is_deleted_only_after_the_pod_is_gone() {
        let mut w = World::running(4);
        w.membership.insert(3, MembershipState::Drained);
        w.sts = Some(StatefulSetState { replicas: 3, current: 4, ready: 3 });
        let op = ScalingOperation { from: 4, to: 3, step: ScalingStep::Shrink, node: Some(3) };
        assert!(plan(3, 3, Some(4), Some(&op), &w.observe()).actions.is_empty());
        w.sts = Some(StatefulSetState { replicas: 3, current: 3, ready: 3 });
        assert_eq!(
            plan(3, 3, Some(4), Some(&op), &w.observe()).actions,
            vec![ScalingAction::DeleteVolume { ordinal: 3 }]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        /// A crash after any prefix of any reconcile's effects ends in the same state as a run
        /// without crashes, and never removes a node that still holds replicas.
        #[test]
        fn crash_between_any_two_steps_resumes_to_the_same_end_state(
            rf in 1i32..=3,
            from in 1i32..=7,
            target in 1i32..=7,
            crashes in proptest::collection::vec(0usize..4, 0..40),
        ) {
            prop_assume!(from >= rf);
            if target < from && target < rf {
                // Blocked: nothing moves, whatever happens.
                let mut w = World::running(from);
                for survive in &crashes { w.reconcile(target, rf, *survive); w.tick(); }
                prop_assert_eq!(w.sts.unwrap().replicas, from);
                prop_assert_eq!(w.volumes.len() as i32, from);
                prop_assert!(w.operation.is_none());
            } else {
                let clean = run(from, target, rf, &[]);
                let crashed = run(from, target, rf, &crashes);
                assert_final(&crashed, target);
                prop_assert_eq!(crashed.sts.unwrap().replicas, clean.sts.unwrap().replicas);
                prop_assert_eq!(&crashed.volumes, &clean.volumes);
                prop_assert_eq!(&crashed.membership, &clean.membership);
            }
        }

        /// Changing the target in the middle of an operation still converges to the last target.
        #[test]
        fn retargeting_mid_operation_converges(
            rf in 1i32..=3,
            from in 3i32..=6,
            first in 3i32..=6,
            second in 3i32..=6,
            switch_after in 0usize..12,
        ) {
            let mut w = World::running(from);
            for _ in 0..switch_after { w.reconcile(first, rf, usize::MAX); w.tick(); }
            for _ in 0..400 {
                w.reconcile(second, rf, usize::MAX);
                w.tick();
                if w.settled(second) { break; }
            }
            prop_assert!(w.settled(second), "{:?}", w);
            assert_final(&w, second);
        }
    }
}
