//! Zone-aware replica placement (docs/ARCHITECTURE.md, "Zones"): pure functions over a
//! placement (group -> nodes) that `membership` applies inside the meta state machine.
//!
//! The rule: a group has at most `cap` replicas in one zone, `cap` being the smallest number
//! the members' zones allow: 1 while there are at least `rf` zones, otherwise the least that
//! still fits `rf` replicas (3 replicas over 2 zones: 2 and 1). Nodes without a zone count as
//! one zone, "unknown": two unlabelled machines are not assumed to fail apart, and a cluster
//! where no node has a zone places exactly as before zones existed.

use std::collections::BTreeMap;

type NodeId = u64;
type GroupId = u64;

pub struct Spread<'a> {
    members: &'a [NodeId],
    /// Every registered node's zone; a node meta has not heard from is in the unknown zone.
    zones: &'a BTreeMap<NodeId, Option<String>>,
    rf: usize,
    cap: usize,
}

impl<'a> Spread<'a> {
    pub fn new(members: &'a [NodeId], zones: &'a BTreeMap<NodeId, Option<String>>, rf: usize) -> Self {
        let mut sizes: BTreeMap<Option<&str>, usize> = BTreeMap::new();
        for m in members {
            *sizes.entry(zones.get(m).and_then(|z| z.as_deref())).or_default() += 1;
        }
        // The smallest per-zone bound that still fits `rf` replicas on distinct members.
        let cap =
            (1..=rf.max(1)).find(|c| sizes.values().map(|s| (*s).min(*c)).sum::<usize>() >= rf).unwrap_or(rf.max(1));
        Self { members, zones, rf: rf.max(1), cap }
    }

    /// Distinct zones among the members (the unknown zone counts once).
    pub fn zone_count(&self) -> usize {
        self.members.iter().map(|m| self.zone(*m)).collect::<std::collections::BTreeSet<_>>().len()
    }

    fn zone(&self, node: NodeId) -> Option<&'a str> {
        self.zones.get(&node).and_then(|z| z.as_deref())
    }

    fn counts(&self, group: &[NodeId]) -> BTreeMap<Option<&'a str>, usize> {
        let mut counts = BTreeMap::new();
        for n in group {
            *counts.entry(self.zone(*n)).or_default() += 1;
        }
        counts
    }

    /// True when no zone holds more than its share of `group`.
    pub fn fits(&self, group: &[NodeId]) -> bool {
        self.counts(group).values().all(|c| *c <= self.cap)
    }

    pub fn loads(&self, desired: &BTreeMap<GroupId, Vec<NodeId>>) -> BTreeMap<NodeId, usize> {
        let mut load: BTreeMap<NodeId, usize> = self.members.iter().map(|m| (*m, 0)).collect();
        for r in desired.values().flatten() {
            if let Some(l) = load.get_mut(r) {
                *l += 1;
            }
        }
        load
    }

    /// Where one more replica of `group` goes: a member outside it in a zone below its share,
    /// the zone with the fewest replicas of the group first, then the least loaded member.
    /// Without such a member (possible only while unregistered nodes hold replicas), any member
    /// outside the group.
    fn add_target(&self, group: &[NodeId], loads: &BTreeMap<NodeId, usize>) -> Option<NodeId> {
        let counts = self.counts(group);
        let outside = || self.members.iter().copied().filter(|m| !group.contains(m));
        let load = |m: &NodeId| loads.get(m).copied().unwrap_or(0);
        outside()
            .filter(|m| counts.get(&self.zone(*m)).copied().unwrap_or(0) < self.cap)
            .min_by_key(|m| (counts.get(&self.zone(*m)).copied().unwrap_or(0), load(m), *m))
            .or_else(|| outside().min_by_key(|m| (load(m), *m)))
    }

    /// The replica of `group` to give up first: in the zone with the most replicas of the
    /// group, the most loaded node.
    fn drop_choice(&self, group: &[NodeId], loads: &BTreeMap<NodeId, usize>) -> Option<NodeId> {
        let counts = self.counts(group);
        group.iter().copied().max_by_key(|n| (counts[&self.zone(*n)], loads.get(n).copied().unwrap_or(0), *n))
    }

    /// Brings `group` to `rf` replicas: adds to the zones that have the fewest, removes from
    /// the zones that have the most. `loads` counts the change.
    pub fn resize(&self, group: &mut Vec<NodeId>, loads: &mut BTreeMap<NodeId, usize>) {
        while group.len() < self.rf {
            let Some(next) = self.add_target(group, loads) else { break };
            group.push(next);
            *loads.entry(next).or_default() += 1;
        }
        while group.len() > self.rf {
            let Some(gone) = self.drop_choice(group, loads) else { break };
            group.retain(|n| *n != gone);
            if let Some(l) = loads.get_mut(&gone) {
                *l = l.saturating_sub(1);
            }
        }
        group.sort_unstable();
    }

    /// Moves replicas of `group` out of zones above their share, one replica at a time, to
    /// the least loaded member of a zone below it. Returns whether anything moved.
    pub fn repair(&self, group: &mut Vec<NodeId>, loads: &mut BTreeMap<NodeId, usize>) -> bool {
        let mut moved = false;
        // Bounded: each move lowers the replicas above the share by one.
        for _ in 0..group.len() {
            if self.fits(group) {
                break;
            }
            let Some(gone) = self.drop_choice(group, loads) else { break };
            let rest: Vec<NodeId> = group.iter().copied().filter(|n| *n != gone).collect();
            let Some(to) = self.add_target(&rest, loads) else { break };
            if self.counts(&rest).get(&self.zone(to)).copied().unwrap_or(0) >= self.cap {
                break; // no zone has room: nothing better exists
            }
            *group = rest;
            group.push(to);
            group.sort_unstable();
            if let Some(l) = loads.get_mut(&gone) {
                *l = l.saturating_sub(1);
            }
            *loads.entry(to).or_default() += 1;
            moved = true;
        }
        moved
    }

    /// Would `group` still keep the rule with `from` replaced by `to`?
    fn move_fits(&self, group: &[NodeId], from: NodeId, to: NodeId) -> bool {
        if group.contains(&to) || !group.contains(&from) {
            return false;
        }
        if self.zone(from) == self.zone(to) {
            return true;
        }
        self.counts(group).get(&self.zone(to)).copied().unwrap_or(0) < self.cap
    }

    /// The single replica move that evens out loads: from a member at least two replicas
    /// above another, to that one, where the group keeps the zone rule. The least loaded
    /// target first (a new member), the most loaded source.
    pub fn balancing_move(
        &self,
        desired: &BTreeMap<GroupId, Vec<NodeId>>,
        loads: &BTreeMap<NodeId, usize>,
    ) -> Option<(GroupId, NodeId, NodeId)> {
        let mut targets: Vec<(usize, NodeId)> = loads.iter().map(|(n, l)| (*l, *n)).collect();
        targets.sort_unstable();
        let mut sources = targets.clone();
        sources.sort_unstable_by_key(|(l, n)| (std::cmp::Reverse(*l), *n));
        for (to_load, to) in &targets {
            for (_, from) in sources.iter().take_while(|(l, _)| *l >= to_load + 2) {
                if let Some((g, _)) = desired.iter().find(|(_, r)| self.move_fits(r, *from, *to)) {
                    return Some((*g, *from, *to));
                }
            }
        }
        None
    }

    /// Evens out loads with single moves that keep every group within the zone rule, until
    /// no such move lowers the spread.
    pub fn balance(&self, desired: &mut BTreeMap<GroupId, Vec<NodeId>>) {
        let mut loads = self.loads(desired);
        // Bounded: every move lowers the sum of squared loads.
        let replicas: usize = desired.values().map(Vec::len).sum();
        for _ in 0..replicas.saturating_mul(self.members.len()).max(1) {
            let Some((g, from, to)) = self.balancing_move(desired, &loads) else { break };
            let r = desired.get_mut(&g).expect("a placed group");
            r.retain(|n| *n != from);
            r.push(to);
            r.sort_unstable();
            *loads.get_mut(&from).expect("a member") -= 1;
            *loads.get_mut(&to).expect("a member") += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn zoned(zones: &[&str]) -> BTreeMap<NodeId, Option<String>> {
        zones.iter().enumerate().map(|(i, z)| (i as NodeId + 1, (!z.is_empty()).then(|| z.to_string()))).collect()
    }

    /// Places `groups` groups from nothing, as a member change does.
    fn place(zones: &BTreeMap<NodeId, Option<String>>, groups: u64, rf: usize) -> BTreeMap<GroupId, Vec<NodeId>> {
        let members: Vec<NodeId> = zones.keys().copied().collect();
        let s = Spread::new(&members, zones, rf);
        let mut desired: BTreeMap<GroupId, Vec<NodeId>> = (0..groups).map(|g| (g, vec![])).collect();
        for g in 0..groups {
            let mut loads = s.loads(&desired);
            let mut r = desired[&g].clone();
            s.resize(&mut r, &mut loads);
            desired.insert(g, r);
        }
        s.balance(&mut desired);
        desired
    }

    #[test]
    fn the_share_per_zone_is_the_least_the_zones_allow() {
        let cap = |z: &[&str], rf| {
            let zones = zoned(z);
            let members: Vec<NodeId> = zones.keys().copied().collect();
            Spread::new(&members, &zones, rf).cap
        };
        assert_eq!(cap(&["a", "b", "c"], 3), 1);
        assert_eq!(cap(&["a", "a", "b", "b"], 3), 2);
        assert_eq!(cap(&["a", "b", "b", "b"], 3), 2);
        assert_eq!(cap(&["a", "a", "a"], 3), 3);
        assert_eq!(cap(&["", "", "", "a"], 3), 2, "nodes without a zone are one zone");
        assert_eq!(cap(&["a", "b", "c", "c", "c"], 5), 3, "small zones push the rest into one");
    }

    #[test]
    fn two_zones_hold_three_replicas_two_and_one() {
        let zones = zoned(&["a", "a", "b", "b"]);
        let desired = place(&zones, 8, 3);
        for r in desired.values() {
            let z: BTreeSet<_> = r.iter().map(|n| zones[n].clone()).collect();
            assert_eq!(z.len(), 2, "{r:?}");
        }
    }

    #[test]
    fn a_misplaced_group_moves_one_replica_to_the_missing_zone() {
        let zones = zoned(&["a", "a", "b", "b", "c", "c"]);
        let members: Vec<NodeId> = zones.keys().copied().collect();
        let s = Spread::new(&members, &zones, 3);
        let mut group = vec![1, 2, 3];
        let mut loads = BTreeMap::new();
        assert!(s.repair(&mut group, &mut loads));
        assert_eq!(group.len(), 3);
        assert!(s.fits(&group));
        assert!(group.contains(&3), "the replica in a zone of its own stays: {group:?}");
        assert!(!s.repair(&mut group, &mut loads), "nothing to do once it fits");
    }

    fn zone_names() -> impl Strategy<Value = Vec<&'static str>> {
        zone_names_of(3)
    }

    fn zone_names_of(min: usize) -> impl Strategy<Value = Vec<&'static str>> {
        proptest::collection::vec(prop_oneof![Just(""), Just("a"), Just("b"), Just("c"), Just("d")], min..10)
    }

    fn distinct_zones(zones: &BTreeMap<NodeId, Option<String>>) -> usize {
        zones.values().collect::<BTreeSet<_>>().len()
    }

    proptest! {
        /// Every group gets rf distinct members, one per zone whenever there are at least rf
        /// zones, within the zones' shares otherwise; no single move could even out loads
        /// further, and with equally sized zones loads differ by at most one.
        #[test]
        fn placement_spreads_groups_over_zones_and_balances(z in zone_names(), groups in 1u64..24, rf in 1usize..=3) {
            let zones = zoned(&z);
            let desired = place(&zones, groups, rf);
            let members: Vec<NodeId> = zones.keys().copied().collect();
            let s = Spread::new(&members, &zones, rf);
            for (g, r) in &desired {
                prop_assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), rf, "group {} on {:?}", g, r);
                prop_assert!(s.fits(r), "group {} on {:?} breaks the zone rule", g, r);
                if distinct_zones(&zones) >= rf {
                    let spanned: BTreeSet<_> = r.iter().map(|n| &zones[n]).collect();
                    prop_assert_eq!(spanned.len(), rf, "group {} on {:?} shares a zone", g, r);
                }
            }
            let loads = s.loads(&desired);
            prop_assert!(s.balancing_move(&desired, &loads).is_none());
            let mut sizes: BTreeMap<&Option<String>, usize> = BTreeMap::new();
            for zone in zones.values() {
                *sizes.entry(zone).or_default() += 1;
            }
            let equal = sizes.values().collect::<BTreeSet<_>>().len() == 1;
            if equal && sizes.len() <= rf.max(1) || sizes.len() == 1 {
                let (min, max) = (loads.values().min().unwrap(), loads.values().max().unwrap());
                prop_assert!(max <= &(min + 1), "{:?}", loads);
            }
        }

        /// Adding members to a placed, balanced cluster moves replicas onto the new members:
        /// without zones only those, as many as they end up holding; with zones at most as
        /// many again between old members.
        #[test]
        fn scaling_out_moves_only_onto_new_members(z in zone_names(), extra in zone_names_of(1), groups in 1u64..24) {
            let rf = 3;
            let before = zoned(&z);
            let desired = place(&before, groups, rf);
            let mut after = before.clone();
            let first_new = before.len() as NodeId + 1;
            for (i, zone) in extra.iter().take(4).enumerate() {
                after.insert(first_new + i as NodeId, (!zone.is_empty()).then(|| zone.to_string()));
            }
            let members: Vec<NodeId> = after.keys().copied().collect();
            let s = Spread::new(&members, &after, rf);
            let mut next = desired.clone();
            // As `membership::rebalance` does after a member change.
            for g in desired.keys() {
                let mut loads = s.loads(&next);
                let mut r = next[g].clone();
                s.resize(&mut r, &mut loads);
                s.repair(&mut r, &mut loads);
                next.insert(*g, r);
            }
            s.balance(&mut next);
            let mut moves = 0;
            let mut onto_new = 0;
            for (g, r) in &next {
                for n in r.iter().filter(|n| !desired[g].contains(n)) {
                    moves += 1;
                    if *n >= first_new {
                        onto_new += 1;
                    }
                }
            }
            let old_cap = Spread::new(&before.keys().copied().collect::<Vec<_>>(), &before, rf).cap;
            if after.values().all(Option::is_none) {
                prop_assert_eq!(moves, onto_new, "{:?} -> {:?}", desired, next);
            } else if s.cap == old_cap {
                // Zones can leave a new member reachable only through a move between old ones.
                prop_assert!(moves <= 2 * onto_new, "{} moves, {} onto new members: {:?} -> {:?}", moves, onto_new, desired, next);
            }
            for r in next.values() {
                prop_assert!(s.fits(r));
            }
        }
    }
}
