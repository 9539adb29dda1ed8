//! Safe changes of `spec.storage.nodes` as a pure step function (docs/ARCHITECTURE.md,
//! "Membership, placement and drains").
//!
//! Each reconcile calls [`plan`] with the operation recorded in status and what it observes; it
//! gets the StatefulSet size to apply, the cluster calls to make and the operation to record.
//! Every transition is decided from observations, never from "I asked for it", and every action
//! is idempotent, so a crash between any two steps (losing the status write) repeats at most
//! the last step.
//!
//! A scale-out waits for its new pods, then for replicas placed on them, at most
//! `scale_out_timeout` in all, then reports it ([`ScalingPlan::timed_out`]) and keeps
//! waiting; a target below its size cancels it: the added nodes are drained (those that
//! registered) and removed from the highest ordinal down, back to the size before, as a
//! scale-in that may also take nodes that never registered.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

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
    /// New pods of a scale-out that are not ready, by ordinal: the pod's name and why, when the
    /// controller looked (it looks once the timeout has passed).
    pub not_ready: BTreeMap<i32, String>,
    /// Ordinals kept out of replica placement (`failedNodes.remove`).
    pub excluded: BTreeSet<i32>,
}

/// The clock and the scale-out timeout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub now: Timestamp,
    pub scale_out_timeout: Duration,
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
    Started {
        from: i32,
        to: i32,
    },
    Blocked {
        message: String,
    },
    NodeRemoved {
        ordinal: i32,
    },
    Completed {
        nodes: i32,
    },
    /// A scale-out's new pods were not ready within the timeout.
    TimedOut {
        message: String,
    },
    /// A scale-out from `from` to `to` is being undone.
    Cancelled {
        from: i32,
        to: i32,
    },
}

/// A scale-out whose new pods are not ready after the timeout.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedOut {
    /// Seconds since the operation started.
    pub waited_seconds: i64,
    /// The new pods that are not ready, with why (empty when the controller did not look).
    pub pods: BTreeMap<i32, String>,
    /// For the `Scaling` condition and the Event.
    pub message: String,
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
    /// Set while a scale-out waits past its timeout.
    pub timed_out: Option<TimedOut>,
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
    timing: Timing,
) -> ScalingPlan {
    let size = recorded_nodes.or(observed.statefulset.map(|s| s.replicas)).unwrap_or(target);
    let mut p = ScalingPlan {
        statefulset_replicas: size,
        member_nodes: size,
        peer_nodes: size,
        operation: operation.cloned(),
        actions: vec![],
        blocked: None,
        timed_out: None,
        notices: vec![],
    };
    let membership = |ordinal: i32| observed.membership.as_ref().and_then(|m| m.get(&ordinal).copied());
    let started = Some(Time(timing.now));
    if let (None, Some(sts), Some(_)) = (operation, observed.statefulset, recorded_nodes) {
        if sts.replicas > size {
            // A scale-out whose record was lost (a crash between growing the StatefulSet and
            // writing status): take it up again, so that it finishes or is cancelled.
            let lost = ScalingOperation {
                from: size,
                to: sts.replicas,
                step: ScalingStep::GrowStatefulSet,
                node: None,
                started_at: started,
                cancelled: false,
            };
            return plan(target, replication_factor, recorded_nodes, Some(&lost), observed, timing);
        }
    }
    let Some(op) = operation else {
        if target > size {
            p.statefulset_replicas = target;
            p.peer_nodes = target;
            p.operation = Some(ScalingOperation {
                from: size,
                to: target,
                step: ScalingStep::GrowStatefulSet,
                node: None,
                started_at: started,
                cancelled: false,
            });
            p.notices.push(Notice::Started { from: size, to: target });
        } else if target < size && target < replication_factor {
            p.blocked = Some(format!(
                "cannot scale in to {target} nodes: replicationFactor is {replication_factor}, so at least \
                 {replication_factor} nodes must remain"
            ));
            p.notices.push(Notice::Blocked { message: p.blocked.clone().unwrap_or_default() });
        } else if target < size {
            p.operation = Some(ScalingOperation { started_at: started, ..drain(size, target, size - 1) });
            p.actions.push(ScalingAction::Drain { ordinal: size - 1 });
            p.notices.push(Notice::Started { from: size, to: target });
        }
        return p;
    };
    let growing = matches!(op.step, ScalingStep::GrowStatefulSet | ScalingStep::PlaceReplicas);
    if growing && !op.cancelled && op.to > op.from && target < op.to {
        // Undo the scale-out: take the added nodes out again, highest first, back to `from`.
        // Placement first puts the members back as they were, so that nothing moves onto an
        // added node while another one is drained.
        p.statefulset_replicas = op.to;
        p.peer_nodes = op.to;
        let node = op.to - 1;
        p.operation = Some(ScalingOperation {
            from: op.to,
            to: op.from,
            step: ScalingStep::Drain,
            node: Some(node),
            started_at: started,
            cancelled: true,
        });
        if op.step == ScalingStep::PlaceReplicas {
            p.actions.push(ScalingAction::PlaceReplicas { nodes: op.from });
        }
        if membership(node).is_some_and(|s| s != MembershipState::Drained) {
            p.actions.push(ScalingAction::Drain { ordinal: node });
        }
        p.notices.push(Notice::Cancelled { from: op.from, to: op.to });
        return p;
    }
    match (op.step, op.node) {
        (ScalingStep::GrowStatefulSet, _) => {
            p.statefulset_replicas = op.to;
            p.peer_nodes = op.to;
            if observed.statefulset.is_some_and(|s| s.replicas == op.to && s.ready >= op.to) {
                p.operation = Some(ScalingOperation { step: ScalingStep::PlaceReplicas, ..op.clone() });
                p.actions.push(ScalingAction::PlaceReplicas { nodes: op.to });
            } else if op.started_at.is_some() {
                if past_timeout(op, timing) {
                    let pods = observed.not_ready.clone();
                    let listed = if pods.is_empty() {
                        format!("{} new pods", op.to - op.from)
                    } else {
                        pods.values().cloned().collect::<Vec<_>>().join("; ")
                    };
                    p.time_out(op, timing, pods, |waited| format!(" not ready after {waited}s: {listed}"));
                }
            } else {
                // Recorded by an operator without timeouts: the timeout counts from now.
                p.operation = Some(ScalingOperation { started_at: started, ..op.clone() });
            }
        }
        (ScalingStep::PlaceReplicas, _) => {
            p.statefulset_replicas = op.to;
            p.peer_nodes = op.to;
            let waiting: Vec<String> = (0..op.to)
                .filter(|i| !observed.excluded.contains(i) && membership(*i) != Some(MembershipState::Active))
                .map(|i| format!("node {i} {}", membership(i).map_or("unknown".into(), |s| format!("{s:?}"))))
                .collect();
            if waiting.is_empty() {
                p.member_nodes = op.to;
                p.operation = None;
                p.notices.push(Notice::Completed { nodes: op.to });
            } else {
                p.actions.push(ScalingAction::PlaceReplicas { nodes: op.to });
                if past_timeout(op, timing) {
                    let waiting = waiting.join(", ");
                    p.time_out(op, timing, BTreeMap::new(), |waited| {
                        format!(": replicas not placed after {waited}s ({waiting})")
                    });
                }
            }
        }
        (ScalingStep::Drain, Some(node)) => {
            p.statefulset_replicas = node + 1;
            // An added node that never registered holds nothing (only a cancelled scale-out
            // removes nodes that may not have); an unknown membership proves nothing.
            let never_registered = op.cancelled && observed.membership.as_ref().is_some_and(|m| !m.contains_key(&node));
            if never_registered || membership(node) == Some(MembershipState::Drained) {
                // Shrink in the same step: applying node + 1 again after a lost status write
                // would bring the drained pod back for nothing.
                p.statefulset_replicas = node;
                p.operation = Some(ScalingOperation { step: ScalingStep::Shrink, ..op.clone() });
            } else if !op.cancelled || membership(node).is_some() {
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
                // A cancelled scale-out never made its nodes members: `size` stays the count.
                p.member_nodes = node.min(size);
                p.peer_nodes = node;
                p.notices.push(Notice::NodeRemoved { ordinal: node });
                if node > op.to {
                    let next = node - 1;
                    p.operation = Some(ScalingOperation { step: ScalingStep::Drain, node: Some(next), ..op.clone() });
                    if !op.cancelled || membership(next).is_some_and(|s| s != MembershipState::Drained) {
                        p.actions.push(ScalingAction::Drain { ordinal: next });
                    }
                } else {
                    p.operation = None;
                    p.notices.push(Notice::Completed { nodes: node });
                }
            }
        }
        // A scale-in step without its node cannot come from this planner; restart that node's
        // removal from the highest member, which is where it must have been.
        // A cancelled one restarts from the highest added node.
        (ScalingStep::Drain | ScalingStep::Shrink | ScalingStep::DeleteVolume, None) => {
            let node = if op.cancelled { op.from - 1 } else { size - 1 };
            p.operation = Some(ScalingOperation { step: ScalingStep::Drain, node: Some(node), ..op.clone() });
            if !op.cancelled || membership(node).is_some_and(|s| s != MembershipState::Drained) {
                p.actions.push(ScalingAction::Drain { ordinal: node });
            }
        }
    }
    p
}

/// Whether an operation started longer than the scale-out timeout ago.
pub fn past_timeout(op: &ScalingOperation, timing: Timing) -> bool {
    let limit = SignedDuration::try_from(timing.scale_out_timeout).unwrap_or(SignedDuration::MAX);
    op.started_at.as_ref().is_some_and(|Time(since)| timing.now.duration_since(*since) >= limit)
}

impl ScalingPlan {
    /// Reports a scale-out past its timeout (the Event and the `Scaling` condition); `what`
    /// says, from the seconds waited, what it still waits for.
    fn time_out(
        &mut self,
        op: &ScalingOperation,
        timing: Timing,
        pods: BTreeMap<i32, String>,
        what: impl FnOnce(i64) -> String,
    ) {
        let waited_seconds = op.started_at.as_ref().map_or(0, |Time(t)| timing.now.duration_since(*t).as_secs());
        let message = format!(
            "scale-out {} → {} nodes{}; set spec.storage.nodes back to {} to cancel",
            op.from,
            op.to,
            what(waited_seconds),
            op.from
        );
        self.notices.push(Notice::TimedOut { message: message.clone() });
        self.timed_out = Some(TimedOut { waited_seconds, pods, message });
    }
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
        timed_out: None,
        notices: vec![],
    }
}

fn drain(from: i32, to: i32, node: i32) -> ScalingOperation {
    ScalingOperation { from, to, step: ScalingStep::Drain, node: Some(node), started_at: None, cancelled: false }
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
        /// Pods from this ordinal on are never scheduled (stay Pending, never register).
        stuck_from: i32,
        /// Seconds on the simulated clock; ten pass per tick.
        now: i64,
        /// Every ordinal a drain was asked for, and the smallest StatefulSet applied.
        ever_drained: BTreeSet<i32>,
        smallest: i32,
        timed_out: bool,
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
                stuck_from: i32::MAX,
                now: 0,
                ever_drained: BTreeSet::new(),
                smallest: nodes,
                timed_out: false,
            }
        }

        fn observe(&self) -> Observed {
            Observed {
                statefulset: self.sts,
                membership: Some(self.membership.clone()),
                volumes: self.volumes.clone(),
                ..Observed::default()
            }
        }

        fn timing(&self) -> Timing {
            at(self.now)
        }

        /// Applies the StatefulSet size; checks the safety invariant first.
        fn apply_statefulset(&mut self, replicas: i32) {
            let sts = self.sts.get_or_insert_with(StatefulSetState::default);
            for ordinal in replicas..sts.current {
                // A pod that never registered holds nothing.
                let state = self.membership.get(&ordinal);
                assert!(
                    state == Some(&MembershipState::Drained) || (state.is_none() && ordinal >= self.stuck_from),
                    "pod {ordinal} removed while it still holds replicas ({state:?})"
                );
            }
            sts.replicas = replicas;
            self.smallest = self.smallest.min(replicas);
        }

        fn execute(&mut self, action: ScalingAction) {
            match action {
                ScalingAction::Drain { ordinal } => {
                    assert!(self.membership.contains_key(&ordinal), "drain of unregistered node {ordinal} (409)");
                    self.drain_requested.insert(ordinal);
                    self.ever_drained.insert(ordinal);
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
                    if ordinal < self.stuck_from {
                        self.membership.entry(ordinal).or_insert(MembershipState::Joining);
                    }
                }
                sts.current = sts.replicas;
                sts.ready = sts.replicas.min(self.stuck_from);
            }
            for ordinal in self.drain_requested.clone() {
                let state = self.membership.get_mut(&ordinal).expect("drain of an unknown node");
                *state = match *state {
                    MembershipState::Draining | MembershipState::Drained => MembershipState::Drained,
                    _ => MembershipState::Draining,
                };
            }
            if let Some(nodes) = self.place_requested.take() {
                // As meta's set_members: the listed nodes become members, the others drain.
                for (ordinal, state) in self.membership.iter_mut() {
                    if *ordinal < nodes {
                        *state = MembershipState::Active;
                    } else if *state != MembershipState::Drained {
                        self.drain_requested.insert(*ordinal);
                    }
                }
            }
            let active = self.membership.values().filter(|s| **s != MembershipState::Drained).count();
            assert!(active >= 1, "cluster lost every active node");
            self.now += 10;
        }

        /// One reconcile: plan, then execute `survive` of its effects in order (apply the
        /// StatefulSet, each action, write the status); a crash loses the rest.
        fn reconcile(&mut self, target: i32, rf: i32, survive: usize) {
            let plan = plan(target, rf, self.recorded, self.operation.as_ref(), &self.observe(), self.timing());
            self.timed_out |= plan.timed_out.is_some();
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
            self.operation.is_none() && self.recorded == Some(target) && self.sts.is_some_and(|s| s.replicas == target)
        }
    }

    fn at(seconds: i64) -> Timing {
        Timing { now: Timestamp::from_second(1_795_000_000 + seconds).unwrap(), scale_out_timeout: TIMEOUT }
    }

    const TIMEOUT: Duration = Duration::from_secs(600);

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
        let p = plan(3, 3, None, None, &Observed::default(), at(0));
        assert_eq!((p.statefulset_replicas, p.member_nodes, p.operation.clone()), (3, 3, None));
        assert!(p.actions.is_empty());
    }

    #[test]
    fn scale_out_grows_then_places_replicas() {
        let w = run(3, 5, 3, &[]);
        assert_final(&w, 5);
        let first = plan(5, 3, Some(3), None, &World::running(3).observe(), at(0));
        assert_eq!(first.statefulset_replicas, 5);
        assert_eq!(first.operation.unwrap().step, ScalingStep::GrowStatefulSet);
    }

    #[test]
    fn scale_in_drains_highest_ordinal_first_one_at_a_time() {
        let p = plan(3, 3, Some(5), None, &World::running(5).observe(), at(0));
        assert_eq!(p.actions, vec![ScalingAction::Drain { ordinal: 4 }]);
        assert_eq!(p.statefulset_replicas, 5);
        assert_final(&run(5, 3, 3, &[]), 3);
    }

    #[test]
    fn scale_in_below_replication_factor_is_blocked() {
        let p = plan(2, 3, Some(3), None, &World::running(3).observe(), at(0));
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
        let p = plan(3, 3, Some(4), Some(&op), &w.observe(), at(0));
        assert_eq!(p.statefulset_replicas, 3);
        assert_eq!(p.operation.unwrap().step, ScalingStep::Shrink);
    }

    #[test]
    fn volume_is_deleted_only_after_the_pod_is_gone() {
        let mut w = World::running(4);
        w.membership.insert(3, MembershipState::Drained);
        w.sts = Some(StatefulSetState { replicas: 3, current: 4, ready: 3 });
        let op = ScalingOperation { step: ScalingStep::Shrink, ..drain(4, 3, 3) };
        assert!(plan(3, 3, Some(4), Some(&op), &w.observe(), at(0)).actions.is_empty());
        w.sts = Some(StatefulSetState { replicas: 3, current: 3, ready: 3 });
        assert_eq!(
            plan(3, 3, Some(4), Some(&op), &w.observe(), at(0)).actions,
            vec![ScalingAction::DeleteVolume { ordinal: 3 }]
        );
    }

    fn growing(from: i32, to: i32, step: ScalingStep, started: i64) -> ScalingOperation {
        ScalingOperation { from, to, step, node: None, started_at: Some(Time(at(started).now)), cancelled: false }
    }

    #[test]
    fn a_scale_out_whose_pods_stay_pending_times_out_naming_them_and_keeps_waiting() {
        let mut w = World::running(3);
        w.sts = Some(StatefulSetState { replicas: 5, current: 5, ready: 4 });
        let op = growing(3, 5, ScalingStep::GrowStatefulSet, 0);
        let before = plan(5, 3, Some(3), Some(&op), &w.observe(), at(599));
        assert_eq!((before.timed_out, before.operation.as_ref()), (None, Some(&op)));
        let mut observed = w.observe();
        observed.not_ready.insert(4, "obs-node-4 is Pending: 0/3 nodes are available".into());
        let p = plan(5, 3, Some(3), Some(&op), &observed, at(600));
        assert_eq!(p.timed_out.as_ref().map(|t| t.waited_seconds), Some(600));
        assert_eq!((p.operation.as_ref(), p.statefulset_replicas, p.actions.len()), (Some(&op), 5, 0));
        let [Notice::TimedOut { message }] = p.notices.as_slice() else { panic!("{:?}", p.notices) };
        assert!(message.contains("obs-node-4 is Pending") && message.contains("back to 3"), "{message}");
        // Ready after all: the scale-out goes on.
        w.sts = Some(StatefulSetState { replicas: 5, current: 5, ready: 5 });
        let late = plan(5, 3, Some(3), Some(&op), &w.observe(), at(900));
        assert_eq!(late.operation.unwrap().step, ScalingStep::PlaceReplicas);
        assert!(late.timed_out.is_none());
    }

    /// Pods ready, but a move that never completes (a snapshot that keeps failing): the
    /// placement step times out too, naming the nodes not active, and keeps placing.
    #[test]
    fn a_placement_that_does_not_finish_times_out_naming_the_nodes() {
        let mut w = World::running(5);
        w.membership.insert(3, MembershipState::Active);
        w.membership.insert(4, MembershipState::Joining);
        let op = growing(3, 5, ScalingStep::PlaceReplicas, 0);
        let before = plan(5, 3, Some(3), Some(&op), &w.observe(), at(599));
        assert_eq!((before.timed_out, before.actions), (None, vec![ScalingAction::PlaceReplicas { nodes: 5 }]));
        let p = plan(5, 3, Some(3), Some(&op), &w.observe(), at(600));
        assert_eq!(p.timed_out.as_ref().map(|t| t.waited_seconds), Some(600));
        assert_eq!((p.operation.as_ref(), p.actions), (Some(&op), vec![ScalingAction::PlaceReplicas { nodes: 5 }]));
        let [Notice::TimedOut { message }] = p.notices.as_slice() else { panic!("{:?}", p.notices) };
        assert!(message.contains("node 4 Joining") && !message.contains("node 3") && message.contains("back to 3"));
        w.membership.insert(4, MembershipState::Active);
        let done = plan(5, 3, Some(3), Some(&op), &w.observe(), at(700));
        assert_eq!((done.operation, done.timed_out, done.member_nodes), (None, None, 5));
    }

    #[test]
    fn an_operation_recorded_without_a_start_time_starts_its_timeout_now() {
        let op = ScalingOperation { started_at: None, ..growing(3, 5, ScalingStep::GrowStatefulSet, 0) };
        let mut w = World::running(3);
        w.sts = Some(StatefulSetState { replicas: 5, current: 5, ready: 3 });
        let p = plan(5, 3, Some(3), Some(&op), &w.observe(), at(5000));
        assert!(p.timed_out.is_none());
        assert_eq!(p.operation.unwrap().started_at, Some(Time(at(5000).now)));
    }

    #[test]
    fn cancelling_after_placement_puts_members_back_and_drains_the_highest_added_node() {
        let mut w = World::running(5);
        w.membership.insert(3, MembershipState::Joining);
        w.membership.insert(4, MembershipState::Active);
        let op = growing(3, 5, ScalingStep::PlaceReplicas, 0);
        let p = plan(3, 3, Some(3), Some(&op), &w.observe(), at(60));
        assert_eq!(p.actions, vec![ScalingAction::PlaceReplicas { nodes: 3 }, ScalingAction::Drain { ordinal: 4 }]);
        let cancel = p.operation.unwrap();
        assert_eq!(
            (cancel.from, cancel.to, cancel.step, cancel.node, cancel.cancelled),
            (5, 3, ScalingStep::Drain, Some(4), true)
        );
        assert_eq!((p.statefulset_replicas, p.member_nodes), (5, 3));
        assert_eq!(p.notices, vec![Notice::Cancelled { from: 3, to: 5 }]);
    }

    #[test]
    fn a_cancelled_node_that_never_registered_is_removed_without_a_drain_but_not_while_membership_is_unknown() {
        let mut w = World::running(3);
        w.sts = Some(StatefulSetState { replicas: 4, current: 4, ready: 3 });
        let op = ScalingOperation { cancelled: true, started_at: None, ..drain(4, 3, 3) };
        let p = plan(3, 3, Some(3), Some(&op), &w.observe(), at(0));
        assert_eq!((p.statefulset_replicas, p.operation.unwrap().step), (3, ScalingStep::Shrink));
        assert!(p.actions.is_empty());
        let unknown = Observed { membership: None, ..w.observe() };
        let p = plan(3, 3, Some(3), Some(&op), &unknown, at(0));
        assert_eq!((p.statefulset_replicas, p.operation.unwrap().step), (4, ScalingStep::Drain));
        assert!(p.actions.is_empty(), "no drain of a node meta may not know");
    }

    #[test]
    fn setting_nodes_back_cancels_a_pending_scale_out_without_touching_the_old_nodes() {
        let mut w = World::running(3);
        w.stuck_from = 3;
        for _ in 0..70 {
            w.reconcile(5, 3, usize::MAX);
            w.tick();
        }
        assert!(w.timed_out, "{w:?}");
        assert_eq!(w.operation.as_ref().unwrap().step, ScalingStep::GrowStatefulSet, "still waiting");
        for _ in 0..100 {
            w.reconcile(3, 3, usize::MAX);
            w.tick();
            if w.settled(3) {
                break;
            }
        }
        assert!(w.settled(3), "{w:?}");
        assert_final(&w, 3);
        assert!(w.ever_drained.is_empty(), "nothing registered, nothing to drain: {w:?}");
        assert_eq!(w.smallest, 3);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

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

        /// A scale-out cancelled at any point, with some new pods never scheduled and crashes
        /// between any two effects, returns to the size before: only added nodes are drained
        /// and removed, the old ones never shrink away, and it ends as a clean run ends.
        #[test]
        fn a_cancelled_scale_out_returns_to_the_old_size_and_removes_only_added_nodes(
            rf in 1i32..=3,
            from in 1i32..=5,
            added in 1i32..=3,
            stuck in 0i32..=3,
            cancel_after in 0usize..120,
            crashes in proptest::collection::vec(0usize..5, 0..40),
        ) {
            prop_assume!(from >= rf);
            let mut w = World::running(from);
            w.stuck_from = from + (added - stuck).max(0);
            let crash_count = crashes.len();
            let mut crashes = crashes.iter();
            for _ in 0..cancel_after {
                w.reconcile(from + added, rf, crashes.next().copied().unwrap_or(usize::MAX));
                w.tick();
            }
            for _ in 0..400 {
                w.reconcile(from, rf, crashes.next().copied().unwrap_or(usize::MAX));
                w.tick();
                if w.settled(from) { break; }
            }
            prop_assert!(w.settled(from), "{:?}", w);
            assert_final(&w, from);
            prop_assert!(w.ever_drained.iter().all(|o| *o >= from), "an old node was drained: {:?}", w);
            prop_assert_eq!(w.smallest, from);
            // Each crash delays the recorded start by at most one round of ten seconds.
            if stuck > 0 && cancel_after >= 62 + crash_count { prop_assert!(w.timed_out); }
        }
    }
}
