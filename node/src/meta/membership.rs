//! Storage membership and replica placement as meta keeps them (docs/ARCHITECTURE.md,
//! "Membership, placement and drains"): which nodes exist, which are members, where each
//! group's replicas should be (`desired`) and where they are (`replicas`, as each group's
//! leader reported its committed voters).
//!
//! Placement is computed here, inside the meta state machine, so that every replica of meta
//! derives the same answer from the same log and concurrent admin requests cannot race. The
//! moves themselves are made by each group's leader (`crate::placement`), one membership change
//! at a time, comparing `desired` with its own membership.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sextant_model::meta::{
    ClusterNodeView, ClusterView, MetaCommandResult, NodeReplacement, NodeRole, NodeState, Refusal,
};

type NodeId = u64;
type GroupId = u64;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub address: String,
    pub role: NodeRole,
    /// The incarnation this id belongs to; 0 until a node that has one registers.
    #[serde(default)]
    pub incarnation: u64,
    /// Another incarnation registered under this id: a restart on an empty data directory.
    #[serde(default)]
    pub needs_replacement: Option<u64>,
    #[serde(default)]
    pub replacing: Option<Replacing>,
}

/// The replacement of an id by a new incarnation: groups whose leader has not yet reported a
/// membership without the id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replacing {
    pub incarnation: u64,
    pub groups: BTreeSet<GroupId>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClusterState {
    #[serde(default)]
    replication_factor: u32,
    #[serde(default)]
    nodes: BTreeMap<NodeId, NodeRecord>,
    #[serde(default)]
    desired: BTreeMap<GroupId, Vec<NodeId>>,
    /// Reported voters and the membership log index they were committed at.
    #[serde(default)]
    replicas: BTreeMap<GroupId, (Vec<NodeId>, u64)>,
}

use MetaCommandResult::{Done, Refused};

impl ClusterState {
    pub fn register(
        &mut self,
        id: NodeId,
        address: String,
        member: bool,
        replication_factor: u32,
        incarnation: u64,
    ) -> MetaCommandResult {
        if self.replication_factor == 0 {
            self.replication_factor = replication_factor.max(1);
        }
        let holds = self.desired.values().chain(self.replicas.values().map(|(v, _)| v)).any(|r| r.contains(&id));
        match self.nodes.get_mut(&id) {
            Some(n) => {
                n.address = address;
                // An id that holds no replica has nothing to forget: a new incarnation takes it.
                if n.incarnation == 0 || !holds {
                    n.incarnation = incarnation;
                    n.needs_replacement = None;
                } else if incarnation == n.incarnation {
                    // The old incarnation is back (its disk was not lost after all).
                    n.needs_replacement = None;
                } else if incarnation != 0
                    && incarnation != n.incarnation
                    && n.replacing.as_ref().is_none_or(|r| r.incarnation != incarnation)
                {
                    n.needs_replacement = Some(incarnation);
                }
            }
            None => {
                let role = if member { NodeRole::Member } else { NodeRole::Joining };
                let record = NodeRecord { address, role, incarnation, needs_replacement: None, replacing: None };
                self.nodes.insert(id, record);
                if member {
                    self.rebalance(false);
                }
            }
        }
        Done
    }

    /// Starts handing `id` to the incarnation that announced itself under it: each group that
    /// has the id as a replica must first report a membership without it.
    pub fn replace(&mut self, id: NodeId) -> MetaCommandResult {
        let Some(n) = self.nodes.get(&id) else { return Refused(Refusal::UnknownNode) };
        let Some(incarnation) = n.needs_replacement else {
            // Repeating an accepted request changes nothing.
            return if n.replacing.is_some() { Done } else { Refused(Refusal::NotReplaceable) };
        };
        // Placed there too: a move to the id that its leader has not reported yet.
        let groups: BTreeSet<GroupId> = self
            .replicas
            .iter()
            .filter(|(_, (voters, _))| voters.contains(&id))
            .map(|(g, _)| *g)
            .chain(self.desired.iter().filter(|(_, r)| r.contains(&id)).map(|(g, _)| *g))
            .collect();
        let n = self.nodes.get_mut(&id).expect("looked up above");
        n.needs_replacement = None;
        if groups.is_empty() {
            n.incarnation = incarnation;
            n.replacing = None;
        } else {
            n.replacing = Some(Replacing { incarnation, groups });
        }
        Done
    }

    /// Moves every replica off a node given by id, for a node that is gone.
    pub fn remove(&mut self, id: NodeId) -> MetaCommandResult {
        let Some(address) = self.nodes.get(&id).map(|n| n.address.clone()) else {
            return Refused(Refusal::UnknownNode);
        };
        self.drain(&address)
    }

    fn id_of(&self, address: &str) -> Option<NodeId> {
        self.nodes.iter().find(|(_, n)| n.address == address).map(|(id, _)| *id)
    }

    fn rf(&self) -> usize {
        self.replication_factor.max(1) as usize
    }

    pub fn set_members(&mut self, addresses: &[String]) -> MetaCommandResult {
        let mut members = BTreeSet::new();
        for a in addresses {
            match self.id_of(a) {
                Some(id) => members.insert(id),
                None => return Refused(Refusal::UnknownNode),
            };
        }
        if members.len() < self.rf() {
            return Refused(Refusal::TooFewNodes);
        }
        for (id, n) in self.nodes.iter_mut() {
            if members.contains(id) {
                n.role = NodeRole::Member;
            } else if n.role == NodeRole::Member {
                n.role = NodeRole::Draining;
            }
        }
        self.rebalance(true);
        Done
    }

    pub fn drain(&mut self, address: &str) -> MetaCommandResult {
        let Some(id) = self.id_of(address) else { return Refused(Refusal::UnknownNode) };
        let remaining = self.nodes.iter().filter(|(n, r)| **n != id && r.role == NodeRole::Member).count();
        if self.nodes[&id].role == NodeRole::Member && remaining < self.rf() {
            return Refused(Refusal::TooFewNodes);
        }
        if let Some(n) = self.nodes.get_mut(&id) {
            if n.role != NodeRole::Draining {
                n.role = NodeRole::Draining;
                self.rebalance(true);
            }
        }
        Done
    }

    pub fn report(&mut self, group: GroupId, mut voters: Vec<NodeId>, log_index: u64) -> MetaCommandResult {
        voters.sort_unstable();
        if self.replicas.get(&group).is_some_and(|(_, at)| *at > log_index) {
            return Done;
        }
        self.replicas.insert(group, (voters.clone(), log_index));
        // A replaced id left this group's membership: the new incarnation may come back, and
        // once it has left every group, the id is the new incarnation's.
        for (id, n) in self.nodes.iter_mut() {
            if let Some(r) = n.replacing.as_mut() {
                if r.groups.contains(&group) && !voters.contains(id) {
                    r.groups.remove(&group);
                }
                if r.groups.is_empty() {
                    n.incarnation = r.incarnation;
                    n.replacing = None;
                }
            }
        }
        // A group seen for the first time stays where it is (the static initial placement)
        // until the member set changes.
        if let std::collections::btree_map::Entry::Vacant(e) = self.desired.entry(group) {
            e.insert(voters);
            self.rebalance(false);
        }
        Done
    }

    /// Recomputes `desired` with as few moves as possible: replicas on nodes that are no longer
    /// members go to the least loaded members, groups short of replicas get more, then single
    /// replicas move from the most to the least loaded member until loads differ by at most one.
    /// Nothing changes while there are fewer members than the replication factor (the commands
    /// that would cause that are refused; a cluster still registering its nodes waits).
    /// Loads are evened out only when the member set changes (`balance`): the static initial
    /// placement is left as it is.
    fn rebalance(&mut self, balance: bool) {
        let members: Vec<NodeId> =
            self.nodes.iter().filter(|(_, n)| n.role == NodeRole::Member).map(|(id, _)| *id).collect();
        let rf = self.rf();
        if members.len() < rf {
            return;
        }
        let load = |desired: &BTreeMap<GroupId, Vec<NodeId>>| {
            let mut load: BTreeMap<NodeId, usize> = members.iter().map(|m| (*m, 0)).collect();
            for r in desired.values().flatten() {
                if let Some(l) = load.get_mut(r) {
                    *l += 1;
                }
            }
            load
        };
        let groups: Vec<GroupId> = self.desired.keys().copied().collect();
        for g in &groups {
            // A node meta has not heard from yet (a static member still starting) keeps its
            // replicas; registered nodes that are not members give theirs up.
            let mut keep: Vec<NodeId> = self.desired[g]
                .iter()
                .copied()
                .filter(|n| members.contains(n) || !self.nodes.contains_key(n))
                .collect();
            while keep.len() < rf {
                let loads = load(&self.desired);
                let Some(next) = members.iter().filter(|m| !keep.contains(m)).min_by_key(|m| (loads[m], **m)).copied()
                else {
                    break;
                };
                keep.push(next);
                // Count the new replica before choosing the next one.
                self.desired.insert(*g, keep.clone());
            }
            while keep.len() > rf {
                let loads = load(&self.desired);
                let Some(most) = keep.iter().copied().max_by_key(|m| (loads[m], *m)) else { break };
                keep.retain(|n| *n != most);
                self.desired.insert(*g, keep.clone());
            }
            keep.sort_unstable();
            self.desired.insert(*g, keep);
        }
        // Balancing waits until every node holding replicas has registered: loads counted
        // without them would move replicas that are about to be balanced anyway.
        if !balance || self.desired.values().flatten().any(|n| !self.nodes.contains_key(n)) {
            return;
        }
        // Bounded: every move lowers the spread of loads.
        for _ in 0..groups.len() * members.len() {
            let loads = load(&self.desired);
            let Some((&max_node, &max)) = loads.iter().max_by_key(|(id, l)| (**l, std::cmp::Reverse(**id))) else {
                break;
            };
            let Some((&min_node, &min)) = loads.iter().min_by_key(|(id, l)| (**l, **id)) else { break };
            if max <= min + 1 {
                break;
            }
            let Some(g) = groups.iter().find(|g| {
                let r = &self.desired[g];
                r.contains(&max_node) && !r.contains(&min_node)
            }) else {
                break;
            };
            let r = self.desired.get_mut(g).unwrap();
            r.retain(|n| *n != max_node);
            r.push(min_node);
            r.sort_unstable();
        }
    }

    pub fn view(&self) -> ClusterView {
        let nodes = self
            .nodes
            .iter()
            .map(|(id, n)| {
                let in_desired = self.desired.values().any(|r| r.contains(id));
                let in_replicas = self.replicas.values().any(|(r, _)| r.contains(id));
                let converged = self.desired.iter().all(|(g, want)| {
                    want.contains(id) == self.replicas.get(g).is_some_and(|(have, _)| have.contains(id))
                });
                let state = match n.role {
                    NodeRole::Joining => NodeState::Joining,
                    NodeRole::Member if converged && in_replicas => NodeState::Active,
                    NodeRole::Member => NodeState::Joining,
                    NodeRole::Draining if in_desired || in_replicas => NodeState::Draining,
                    NodeRole::Draining => NodeState::Drained,
                };
                ClusterNodeView {
                    id: *id,
                    address: n.address.clone(),
                    role: n.role,
                    state,
                    incarnation: n.incarnation,
                    needs_replacement: n.needs_replacement,
                    replacing: n.replacing.as_ref().map(|r| NodeReplacement {
                        incarnation: r.incarnation,
                        groups: r.groups.iter().copied().collect(),
                    }),
                }
            })
            .collect();
        ClusterView {
            replication_factor: self.replication_factor,
            nodes,
            desired: self.desired.clone(),
            replicas: self.replicas.iter().map(|(g, (v, _))| (*g, v.clone())).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(nodes: u64, groups: u64) -> ClusterState {
        let mut c = ClusterState::default();
        for id in 1..=nodes {
            c.register(id, format!("n{id}"), true, 3, id);
        }
        for g in 0..groups {
            c.report(g, vec![1, 2, 3], 1);
        }
        c
    }

    fn loads(c: &ClusterState) -> BTreeMap<NodeId, usize> {
        let mut l = BTreeMap::new();
        for r in c.desired.values().flatten() {
            *l.entry(*r).or_default() += 1;
        }
        l
    }

    #[test]
    fn initial_placement_is_adopted_and_new_members_get_a_fair_share() {
        let mut c = cluster(3, 5);
        assert!(c.desired.values().all(|r| r == &vec![1, 2, 3]));
        c.register(4, "n4".into(), false, 3, 0);
        c.register(5, "n5".into(), false, 3, 0);
        assert!(c.desired.values().all(|r| r == &vec![1, 2, 3]), "joining nodes hold nothing");
        let all: Vec<String> = (1..=5).map(|i| format!("n{i}")).collect();
        assert_eq!(c.set_members(&all), Done);
        let l = loads(&c);
        assert_eq!(l.values().sum::<usize>(), 15);
        assert!(l.values().all(|n| *n == 3), "{l:?}");
        assert!(c.desired.values().all(|r| r.len() == 3 && r.iter().collect::<BTreeSet<_>>().len() == 3));
        // Nothing reported yet for the new placement: new members are still joining.
        let v = c.view();
        assert_eq!(v.nodes.iter().find(|n| n.id == 4).unwrap().state, NodeState::Joining);
        for (g, r) in c.desired.clone() {
            c.report(g, r, 2);
        }
        assert!(c.view().nodes.iter().all(|n| n.state == NodeState::Active));
    }

    #[test]
    fn drains_move_everything_and_refuse_below_the_replication_factor() {
        let mut c = cluster(3, 4);
        c.register(4, "n4".into(), false, 3, 0);
        c.set_members(&["n1".into(), "n2".into(), "n3".into(), "n4".into()]);
        for (g, r) in c.desired.clone() {
            c.report(g, r, 2);
        }
        assert_eq!(c.drain("n4"), Done);
        assert!(c.desired.values().all(|r| r == &vec![1, 2, 3]));
        assert_eq!(c.view().nodes[3].state, NodeState::Draining);
        for (g, r) in c.desired.clone() {
            c.report(g, r, 3);
        }
        assert_eq!(c.view().nodes[3].state, NodeState::Drained);
        assert_eq!(c.drain("n3"), Refused(Refusal::TooFewNodes));
        assert_eq!(c.drain("n9"), Refused(Refusal::UnknownNode));
        assert_eq!(c.set_members(&["n1".into(), "n2".into()]), Refused(Refusal::TooFewNodes));
        // A stale report (older membership) does not overwrite a newer one.
        c.report(0, vec![1, 2, 4], 2);
        assert_eq!(c.view().replicas[&0], vec![1, 2, 3]);
    }

    #[test]
    fn static_members_that_register_late_keep_their_replicas() {
        let mut c = ClusterState::default();
        for id in 1..=3 {
            c.register(id, format!("n{id}"), true, 3, id);
        }
        // A static 5-node cluster: groups are on nodes 4 and 5 too, which register last.
        c.report(0, vec![1, 2, 3], 1);
        c.report(1, vec![2, 3, 4], 1);
        c.report(2, vec![3, 4, 5], 1);
        assert_eq!(c.desired[&2], vec![3, 4, 5]);
        c.register(4, "n4".into(), true, 3, 0);
        c.register(5, "n5".into(), true, 3, 0);
        assert_eq!(c.desired[&1], vec![2, 3, 4]);
        assert_eq!(c.desired[&2], vec![3, 4, 5]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join(u64),
        Place(Vec<u64>),
        Drain(u64),
        /// Every group's leader reports the desired voters as done.
        Converge,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (1u64..9).prop_map(Op::Join),
            proptest::collection::vec(1u64..9, 0..8).prop_map(Op::Place),
            (1u64..9).prop_map(Op::Drain),
            Just(Op::Converge),
        ]
    }

    proptest::proptest! {
        /// Whatever sequence of joins, placements, drains and completed moves: every group is
        /// placed on exactly `rf` distinct members (or registered-never nodes), refusals change
        /// nothing, and after an accepted placement loads differ by at most one.
        #[test]
        fn placement_keeps_every_group_on_rf_members(ops in proptest::collection::vec(op(), 1..40)) {
            let mut c = cluster(3, 6);
            let mut index = 2;
            for op in ops {
                let before = c.desired.clone();
                let result = match &op {
                    Op::Join(id) => c.register(*id, format!("n{id}"), false, 3, *id),
                    Op::Place(ids) => {
                        let addrs: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
                        c.set_members(&addrs)
                    }
                    Op::Drain(id) => c.drain(&format!("n{id}")),
                    Op::Converge => {
                        index += 1;
                        for (g, r) in c.desired.clone() {
                            c.report(g, r, index);
                        }
                        Done
                    }
                };
                if result != Done {
                    proptest::prop_assert_eq!(&before, &c.desired, "a refused {:?} changed the placement", op);
                }
                let members: BTreeSet<NodeId> =
                    c.nodes.iter().filter(|(_, n)| n.role == NodeRole::Member).map(|(id, _)| *id).collect();
                proptest::prop_assert!(members.len() >= 3, "{:?} left {} members", op, members.len());
                for (g, r) in &c.desired {
                    let distinct: BTreeSet<_> = r.iter().collect();
                    proptest::prop_assert_eq!(r.len(), 3, "group {} on {:?} after {:?}", g, r, op);
                    proptest::prop_assert_eq!(distinct.len(), 3);
                    proptest::prop_assert!(r.iter().all(|n| members.contains(n)), "group {} on non-members {:?}", g, r);
                }
                if matches!(op, Op::Place(_)) && result == Done {
                    let l = loads(&c);
                    let (min, max) = members.iter().fold((usize::MAX, 0), |(lo, hi), m| {
                        let n = l.get(m).copied().unwrap_or(0);
                        (lo.min(n), hi.max(n))
                    });
                    proptest::prop_assert!(max <= min + 1, "unbalanced after {:?}: {:?}", op, l);
                }
            }
        }
    }

    #[test]
    fn an_empty_restart_under_a_known_id_waits_for_replacement() {
        let mut c = cluster(3, 2);
        assert_eq!(c.nodes[&3].incarnation, 3);
        c.register(3, "n3".into(), true, 3, 3);
        assert_eq!(c.nodes[&3].needs_replacement, None, "a restart with its data");
        c.register(3, "n3".into(), true, 3, 33);
        assert_eq!(c.nodes[&3].incarnation, 3, "the old incarnation keeps the id");
        assert_eq!(c.nodes[&3].needs_replacement, Some(33));
        assert_eq!(c.view().nodes[2].needs_replacement, Some(33));
        assert_eq!(c.replace(1), Refused(Refusal::NotReplaceable), "nothing announced under id 1");
        assert_eq!(c.replace(9), Refused(Refusal::UnknownNode));
        c.register(3, "n3".into(), true, 3, 3);
        assert_eq!(c.nodes[&3].needs_replacement, None, "the old incarnation came back with its disk");
        assert_eq!(c.replace(3), Refused(Refusal::NotReplaceable));
    }

    #[test]
    fn a_replacement_completes_once_every_group_dropped_the_old_incarnation() {
        let mut c = cluster(3, 2);
        c.register(3, "n3".into(), true, 3, 33);
        assert_eq!(c.replace(3), Done);
        assert_eq!(c.replace(3), Done, "a repeated request changes nothing");
        let r = c.view().nodes[2].replacing.clone().unwrap();
        assert_eq!((r.incarnation, r.groups), (33, vec![0, 1]));
        assert_eq!(c.desired[&0], vec![1, 2, 3], "the id keeps its place: the new incarnation comes back");
        // A report still listing the old voter clears nothing; a newer one without it does.
        c.report(0, vec![1, 2, 3], 2);
        c.report(0, vec![1, 2], 3);
        assert_eq!(c.view().nodes[2].replacing.as_ref().unwrap().groups, vec![1]);
        // The new incarnation registering again while being replaced is not a second amnesia.
        c.register(3, "n3".into(), true, 3, 33);
        assert_eq!(c.nodes[&3].needs_replacement, None);
        c.report(1, vec![1, 2], 3);
        let n = &c.view().nodes[2];
        assert_eq!((n.incarnation, n.replacing.clone(), n.needs_replacement), (33, None, None));
    }

    #[test]
    fn an_id_without_replicas_takes_a_new_incarnation_at_once() {
        let mut c = cluster(4, 2);
        c.drain("n4");
        c.register(4, "n4".into(), true, 3, 44);
        assert_eq!((c.nodes[&4].incarnation, c.nodes[&4].needs_replacement), (44, None));
    }

    #[test]
    fn a_dead_node_is_removed_by_id() {
        let mut c = cluster(4, 4);
        c.set_members(&["n1".into(), "n2".into(), "n3".into(), "n4".into()]);
        assert_eq!(c.remove(4), Done);
        assert!(c.desired.values().all(|r| !r.contains(&4)));
        assert_eq!(c.remove(3), Refused(Refusal::TooFewNodes));
        assert_eq!(c.remove(7), Refused(Refusal::UnknownNode));
    }

    #[test]
    fn a_restart_does_not_undo_a_drain() {
        let mut c = cluster(4, 2);
        c.drain("n4");
        c.register(4, "n4-new-address".into(), true, 3, 0);
        assert_eq!(c.nodes[&4].role, NodeRole::Draining);
        assert_eq!(c.nodes[&4].address, "n4-new-address");
    }
}
