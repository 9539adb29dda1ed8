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
    /// The zone the node last registered with; `None` counts as the one "unknown" zone.
    #[serde(default)]
    pub zone: Option<String>,
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
        zone: Option<String>,
    ) -> MetaCommandResult {
        // Nodes check their zone; meta bounds what it stores whatever the sender.
        let zone = zone.filter(|z| sextant_model::zone::parse_zone(z).ok().flatten().as_deref() == Some(z.as_str()));
        if self.replication_factor == 0 {
            self.replication_factor = replication_factor.max(1);
        }
        let holds = self.desired.values().chain(self.replicas.values().map(|(v, _)| v)).any(|r| r.contains(&id));
        match self.nodes.get_mut(&id) {
            Some(n) => {
                n.address = address;
                n.zone = zone;
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
                let record = NodeRecord { address, role, incarnation, needs_replacement: None, replacing: None, zone };
                self.nodes.insert(id, record);
                if member {
                    self.rebalance(false);
                }
            }
        }
        // A zone learned or changed may leave groups misplaced.
        self.settle();
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
        self.settle();
        Done
    }

    fn members(&self) -> Vec<NodeId> {
        self.nodes.iter().filter(|(_, n)| n.role == NodeRole::Member).map(|(id, _)| *id).collect()
    }

    fn zones(&self) -> BTreeMap<NodeId, Option<String>> {
        self.nodes.iter().map(|(id, n)| (*id, n.zone.clone())).collect()
    }

    /// Moves one misplaced group (two replicas in one zone while another zone has room) into
    /// the zone rule, and only once every group holds exactly what is placed on it: zones
    /// learned after the static initial placement, or changed, are repaired one group at a
    /// time, like a drain, never by moving every group at once.
    fn settle(&mut self) {
        let members = self.members();
        let rf = self.rf();
        if members.len() < rf || self.desired.values().flatten().any(|n| !self.nodes.contains_key(n)) {
            return;
        }
        let converged = self.desired.iter().all(|(g, want)| {
            self.replicas
                .get(g)
                .is_some_and(|(have, _)| have.iter().collect::<BTreeSet<_>>() == want.iter().collect::<BTreeSet<_>>())
        });
        if !converged {
            return;
        }
        let zones = self.zones();
        let spread = super::spread::Spread::new(&members, &zones, rf);
        let mut loads = spread.loads(&self.desired);
        let misplaced = self.desired.iter().find(|(_, r)| !spread.fits(r)).map(|(g, r)| (*g, r.clone()));
        if let Some((g, mut r)) = misplaced {
            if spread.repair(&mut r, &mut loads) {
                self.desired.insert(g, r);
            }
        }
    }

    /// Recomputes `desired` with as few moves as possible: replicas on nodes that are no longer
    /// members go to the least loaded members, groups short of replicas get more, then single
    /// replicas move from the most to the least loaded member until loads differ by at most one.
    /// Nothing changes while there are fewer members than the replication factor (the commands
    /// that would cause that are refused; a cluster still registering its nodes waits).
    /// Loads are evened out only when the member set changes (`balance`): the static initial
    /// placement is left as it is.
    fn rebalance(&mut self, balance: bool) {
        let members = self.members();
        let rf = self.rf();
        if members.len() < rf {
            return;
        }
        let zones = self.zones();
        let spread = super::spread::Spread::new(&members, &zones, rf);
        // Zones are repaired and loads evened out only once every node holding replicas has
        // registered: without their zones and loads, replicas about to be moved anyway would move.
        let all_known = self.desired.values().flatten().all(|n| self.nodes.contains_key(n));
        let groups: Vec<GroupId> = self.desired.keys().copied().collect();
        for g in &groups {
            // A node meta has not heard from yet (a static member still starting) keeps its
            // replicas; registered nodes that are not members give theirs up.
            let mut keep: Vec<NodeId> = self.desired[g]
                .iter()
                .copied()
                .filter(|n| members.contains(n) || !self.nodes.contains_key(n))
                .collect();
            let mut loads = spread.loads(&self.desired);
            // This group's current replicas are counted as they will be.
            for n in self.desired[g].iter().filter(|n| !keep.contains(n)) {
                if let Some(l) = loads.get_mut(n) {
                    *l = l.saturating_sub(1);
                }
            }
            spread.resize(&mut keep, &mut loads);
            if balance && all_known {
                spread.repair(&mut keep, &mut loads);
            }
            self.desired.insert(*g, keep);
        }
        if balance && all_known {
            spread.balance(&mut self.desired);
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
                    zone: n.zone.clone(),
                }
            })
            .collect();
        let members = self.members();
        let zones = self.zones();
        let spread = super::spread::Spread::new(&members, &zones, self.rf());
        ClusterView {
            replication_factor: self.replication_factor,
            nodes,
            desired: self.desired.clone(),
            replicas: self.replicas.iter().map(|(g, (v, _))| (*g, v.clone())).collect(),
            zones: spread.zone_count() as u32,
            misplaced: self.replicas.iter().filter(|(_, (v, _))| !spread.fits(v)).map(|(g, _)| *g).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(nodes: u64, groups: u64) -> ClusterState {
        let mut c = ClusterState::default();
        for id in 1..=nodes {
            c.register(id, format!("n{id}"), true, 3, id, None);
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
        c.register(4, "n4".into(), false, 3, 0, None);
        c.register(5, "n5".into(), false, 3, 0, None);
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
        c.register(4, "n4".into(), false, 3, 0, None);
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
            c.register(id, format!("n{id}"), true, 3, id, None);
        }
        // A static 5-node cluster: groups are on nodes 4 and 5 too, which register last.
        c.report(0, vec![1, 2, 3], 1);
        c.report(1, vec![2, 3, 4], 1);
        c.report(2, vec![3, 4, 5], 1);
        assert_eq!(c.desired[&2], vec![3, 4, 5]);
        c.register(4, "n4".into(), true, 3, 0, None);
        c.register(5, "n5".into(), true, 3, 0, None);
        assert_eq!(c.desired[&1], vec![2, 3, 4]);
        assert_eq!(c.desired[&2], vec![3, 4, 5]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A node registers (again), with one of three zones or none.
        Join(u64, Option<u8>),
        Place(Vec<u64>),
        Drain(u64),
        /// Every group's leader reports the desired voters as done.
        Converge,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (1u64..9, proptest::option::of(0u8..3)).prop_map(|(id, z)| Op::Join(id, z)),
            proptest::collection::vec(1u64..9, 0..8).prop_map(Op::Place),
            (1u64..9).prop_map(Op::Drain),
            Just(Op::Converge),
        ]
    }

    proptest::proptest! {
        /// Whatever sequence of joins (with zones), placements, drains and completed moves:
        /// every group is placed on exactly `rf` distinct members (or registered-never nodes),
        /// refusals change nothing, an accepted placement keeps the zone rule, and without
        /// zones loads then differ by at most one.
        #[test]
        fn placement_keeps_every_group_on_rf_members(ops in proptest::collection::vec(op(), 1..40)) {
            let mut c = cluster(3, 6);
            let mut index = 2;
            for op in ops {
                let before = c.desired.clone();
                let result = match &op {
                    Op::Join(id, z) => {
                        let zone = z.map(|z| format!("zone-{z}"));
                        c.register(*id, format!("n{id}"), false, 3, *id, zone)
                    }
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
                    let ids: Vec<NodeId> = members.iter().copied().collect();
                    let zones = c.zones();
                    let spread = super::super::spread::Spread::new(&ids, &zones, 3);
                    for (g, r) in &c.desired {
                        proptest::prop_assert!(spread.fits(r), "group {} on {:?} breaks the zone rule", g, r);
                    }
                }
                let zoneless = members.iter().all(|m| c.nodes[m].zone.is_none());
                if matches!(op, Op::Place(_)) && result == Done && zoneless {
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
        c.register(3, "n3".into(), true, 3, 3, None);
        assert_eq!(c.nodes[&3].needs_replacement, None, "a restart with its data");
        c.register(3, "n3".into(), true, 3, 33, None);
        assert_eq!(c.nodes[&3].incarnation, 3, "the old incarnation keeps the id");
        assert_eq!(c.nodes[&3].needs_replacement, Some(33));
        assert_eq!(c.view().nodes[2].needs_replacement, Some(33));
        assert_eq!(c.replace(1), Refused(Refusal::NotReplaceable), "nothing announced under id 1");
        assert_eq!(c.replace(9), Refused(Refusal::UnknownNode));
        c.register(3, "n3".into(), true, 3, 3, None);
        assert_eq!(c.nodes[&3].needs_replacement, None, "the old incarnation came back with its disk");
        assert_eq!(c.replace(3), Refused(Refusal::NotReplaceable));
    }

    #[test]
    fn a_replacement_completes_once_every_group_dropped_the_old_incarnation() {
        let mut c = cluster(3, 2);
        c.register(3, "n3".into(), true, 3, 33, None);
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
        c.register(3, "n3".into(), true, 3, 33, None);
        assert_eq!(c.nodes[&3].needs_replacement, None);
        c.report(1, vec![1, 2], 3);
        let n = &c.view().nodes[2];
        assert_eq!((n.incarnation, n.replacing.clone(), n.needs_replacement), (33, None, None));
    }

    #[test]
    fn an_id_without_replicas_takes_a_new_incarnation_at_once() {
        let mut c = cluster(4, 2);
        c.drain("n4");
        c.register(4, "n4".into(), true, 3, 44, None);
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

    fn zoned(zones: &[&str], groups: u64) -> ClusterState {
        let mut c = ClusterState::default();
        for (i, z) in zones.iter().enumerate() {
            let id = i as u64 + 1;
            c.register(id, format!("n{id}"), true, 3, id, Some(z.to_string()));
        }
        // The static initial placement: consecutive ids.
        let n = zones.len() as u64;
        for g in 0..groups {
            c.report(g, (0..3).map(|k| (g + k) % n + 1).collect(), 1);
        }
        c
    }

    fn zones_of(c: &ClusterState, group: &[NodeId]) -> BTreeSet<Option<String>> {
        group.iter().map(|n| c.nodes[n].zone.clone()).collect()
    }

    fn converge(c: &mut ClusterState, index: u64) {
        for (g, r) in c.desired.clone() {
            c.report(g, r, index);
        }
    }

    #[test]
    fn registration_records_the_zone_and_a_new_zone_replaces_it() {
        let mut c = cluster(3, 1);
        assert_eq!(c.view().nodes[0].zone, None);
        c.register(1, "n1".into(), true, 3, 1, Some("eu-1a".into()));
        assert_eq!(c.view().nodes[0].zone.as_deref(), Some("eu-1a"));
        c.register(1, "n1".into(), true, 3, 1, Some("eu-1b".into()));
        assert_eq!(c.view().nodes[0].zone.as_deref(), Some("eu-1b"));
        c.register(1, "n1".into(), true, 3, 1, None);
        assert_eq!(c.view().nodes[0].zone, None, "a zone that went away is gone");
        c.register(1, "n1".into(), true, 3, 1, Some("bad/zone".into()));
        assert_eq!(c.view().nodes[0].zone, None, "meta stores no name a node would refuse");
        c.register(1, "n1".into(), true, 3, 1, Some("x".repeat(64)));
        assert_eq!(c.view().nodes[0].zone, None);
    }

    #[test]
    fn misplaced_groups_are_repaired_one_at_a_time_once_moves_finish() {
        // Zones a a b b c c: the static placement puts groups 0 and 1 on two nodes of one zone.
        let mut c = zoned(&["a", "a", "b", "b", "c", "c"], 6);
        let v = c.view();
        assert_eq!(v.zones, 3);
        assert!(!v.misplaced.is_empty());
        let mut index = 2;
        for _ in 0..12 {
            let moving: Vec<GroupId> =
                c.desired.iter().filter(|(g, r)| c.replicas[g].0 != **r).map(|(g, _)| *g).collect();
            assert!(moving.len() <= 1, "groups {moving:?} move at once");
            if moving.is_empty() && c.view().misplaced.is_empty() {
                break;
            }
            // A registration (or any report) while a move runs starts no other one.
            c.register(1, "n1".into(), true, 3, 1, Some("a".into()));
            index += 1;
            converge(&mut c, index);
        }
        let v = c.view();
        assert!(v.misplaced.is_empty(), "{:?}", c.desired);
        for (g, r) in &c.desired {
            assert_eq!(zones_of(&c, r).len(), 3, "group {g} on {r:?}");
        }
    }

    #[test]
    fn zones_learned_late_move_nothing_while_a_scale_out_is_running() {
        let mut c = cluster(3, 3);
        c.register(4, "n4".into(), false, 3, 4, None);
        c.set_members(&["n1".into(), "n2".into(), "n3".into(), "n4".into()]);
        let placed = c.desired.clone();
        for (id, z) in [(1, "a"), (2, "a"), (3, "b"), (4, "c")] {
            c.register(id, format!("n{id}"), true, 3, id, Some(z.into()));
        }
        assert_eq!(c.desired, placed, "the scale-out's moves have not finished");
        converge(&mut c, 2);
        let misplaced = placed.values().filter(|r| zones_of(&c, r).len() < 3).count();
        let moving: Vec<&Vec<NodeId>> =
            c.desired.iter().filter(|(g, r)| c.replicas[g].0 != **r).map(|(_, r)| r).collect();
        assert!(misplaced >= 1, "{placed:?}");
        assert_eq!(moving.len(), 1, "then one group at a time");
        assert!(moving.iter().all(|r| zones_of(&c, r).len() == 3));
    }

    #[test]
    fn member_changes_place_over_zones_at_once() {
        let mut c = zoned(&["a", "a", "b", "b", "c", "c"], 6);
        for (id, z) in [(7, "a"), (8, "b"), (9, "c")] {
            c.register(id, format!("n{id}"), false, 3, id, Some(z.into()));
        }
        let all: Vec<String> = (1..=9).map(|i| format!("n{i}")).collect();
        assert_eq!(c.set_members(&all), Done);
        for (g, r) in &c.desired {
            assert_eq!(zones_of(&c, r).len(), 3, "group {g} on {r:?}");
        }
        // Drains and removals too: what is left still spans every zone.
        converge(&mut c, 2);
        assert_eq!(c.remove(9), Done);
        assert_eq!(c.drain("n8"), Done);
        for (g, r) in &c.desired {
            assert_eq!(zones_of(&c, r).len(), 3, "group {g} on {r:?}");
            assert!(!r.contains(&8) && !r.contains(&9));
        }
    }

    #[test]
    fn a_restart_does_not_undo_a_drain() {
        let mut c = cluster(4, 2);
        c.drain("n4");
        c.register(4, "n4-new-address".into(), true, 3, 0, None);
        assert_eq!(c.nodes[&4].role, NodeRole::Draining);
        assert_eq!(c.nodes[&4].address, "n4-new-address");
    }
}
