//! How a node on an empty data directory takes part the first time it starts without `--join`
//! (docs/ARCHITECTURE.md, "Membership, placement and drains"): as one of the cluster's initial
//! members, which form the groups of the static placement, or as a node added to a running
//! cluster (a scale-out pod, started with a longer `--peers`), which forms nothing and waits
//! for placement. Every node records the initial member set with its data and reports it to
//! peers, so a member starting late is told apart from a scale-out pod by what the cluster
//! says, not guessed from which groups happen to run already.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::types::{GroupId, NodeId};

/// Written once a node took its part; holds the initial member set.
pub(crate) const BOOTSTRAPPED: &str = "bootstrapped";

/// What the reachable peers report at a first start.
#[derive(Clone, Debug, Default)]
pub(crate) struct Probe {
    /// Groups a peer hosts with an initialized membership, and that membership's voters.
    pub running: BTreeMap<GroupId, Vec<NodeId>>,
    /// Those of them that have had a leader (a known one, or applied entries).
    pub active: BTreeSet<GroupId>,
    /// The initial member sets peers recorded (empty ones left out).
    pub initial: Vec<Vec<NodeId>>,
    /// Ids meta lists as drained or draining, as peers last read them.
    pub retired: BTreeSet<NodeId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// One of the initial members: its replicas come from the static placement over `members`.
    Initial { members: Vec<NodeId> },
    /// Added to a running cluster: forms nothing. `members`: the initial set, if peers know it.
    Added { members: Vec<NodeId> },
}

impl Role {
    pub(crate) fn members(&self) -> &[NodeId] {
        match self {
            Role::Initial { members } | Role::Added { members } => members,
        }
    }
}

/// The part node `me`, started with `--peers` ids `peers`, takes given what its peers report.
/// An initial member's id that was drained (a scale-in, then a scale-out reusing the ordinal)
/// comes back as an added node: the static placement is no longer its own.
pub(crate) fn role(me: NodeId, peers: &[NodeId], probe: &Probe) -> Role {
    if probe.retired.contains(&me) {
        return Role::Added { members: probe.initial.first().cloned().unwrap_or_default() };
    }
    if let Some(members) = probe.initial.first() {
        if probe.initial.iter().any(|m| m != members) {
            tracing::warn!(sets = ?probe.initial, "peers recorded different initial member sets: using the first");
        }
        let members = members.clone();
        return if members.contains(&me) { Role::Initial { members } } else { Role::Added { members } };
    }
    // No peer records the set: none runs anything yet, or they run a release from before the
    // record, where a node that no running group counts is taken for an added one.
    if probe.running.is_empty() || probe.running.values().any(|v| v.contains(&me)) {
        Role::Initial { members: peers.to_vec() }
    } else {
        Role::Added { members: Vec::new() }
    }
}

/// The initial member set a bootstrapped directory recorded (empty: not known), or `None`
/// for a directory that has not bootstrapped.
pub(crate) fn read(data_dir: &Path) -> anyhow::Result<Option<Vec<NodeId>>> {
    let path = data_dir.join(BOOTSTRAPPED);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(
            crate::persist::decode_bootstrap(&bytes).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("reading {}: {e}", path.display())),
    }
}

/// From now on this directory belongs to a formed cluster: a restart never takes the static
/// placement again, even if no peer answers at that moment.
pub(crate) fn record(data_dir: &Path, members: &[NodeId]) -> anyhow::Result<()> {
    crate::durable::write_file_atomic(data_dir, BOOTSTRAPPED, &crate::persist::encode_bootstrap(members))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::placement;
    use proptest::prelude::*;

    const RF: usize = 3;

    /// Nodes that started, in order, each deciding from what the earlier ones report.
    #[derive(Default)]
    struct Cluster {
        /// Node -> (recorded initial set, groups it initialized with their voters).
        started: BTreeMap<NodeId, (Vec<NodeId>, BTreeMap<GroupId, Vec<NodeId>>)>,
    }

    impl Cluster {
        /// What the started nodes in `reachable` report: the record, and the groups they
        /// are voters of.
        fn probe(&self, reachable: &BTreeSet<NodeId>, groups: GroupId) -> Probe {
            let mut probe = Probe::default();
            for (id, (initial, _)) in self.started.iter().filter(|(id, _)| reachable.contains(id)) {
                if !initial.is_empty() {
                    probe.initial.push(initial.clone());
                }
                for g in 0..=groups {
                    if let Some(voters) = self.initialized(g).filter(|v| v.contains(id)) {
                        probe.running.insert(g, voters);
                    }
                }
            }
            probe
        }

        fn initialized(&self, g: GroupId) -> Option<Vec<NodeId>> {
            self.started.values().find_map(|(_, groups)| groups.get(&g).cloned())
        }

        /// Node `me` starts with `--peers` `peers`, reaching the started nodes in `reachable`.
        fn start(&mut self, me: NodeId, peers: &[NodeId], reachable: &BTreeSet<NodeId>, groups: GroupId) -> Role {
            let probe = self.probe(reachable, groups);
            let role = role(me, peers, &probe);
            let mut formed = BTreeMap::new();
            if let Role::Initial { members } = &role {
                for g in 0..=groups {
                    let replicas = placement(g, members, RF);
                    if !probe.running.contains_key(&g) && replicas[0] == me {
                        formed.insert(g, replicas);
                    }
                }
            }
            self.started.insert(me, (role.members().to_vec(), formed));
            role
        }

        /// Group -> every voter set it was initialized with.
        fn formations(&self) -> BTreeMap<GroupId, Vec<Vec<NodeId>>> {
            let mut out: BTreeMap<GroupId, Vec<Vec<NodeId>>> = BTreeMap::new();
            for (_, groups) in self.started.values() {
                for (g, voters) in groups {
                    out.entry(*g).or_default().push(voters.clone());
                }
            }
            out
        }
    }

    fn subset(of: &[NodeId], mask: u64) -> BTreeSet<NodeId> {
        of.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).map(|(_, id)| *id).collect()
    }

    proptest! {
        /// Initial members starting in any order, each reaching any subset of those already
        /// up, form every group exactly once, over the static placement; nodes added later
        /// with a longer `--peers`, reaching any non-empty subset of the running nodes, form
        /// nothing.
        #[test]
        fn every_group_forms_once_and_added_nodes_form_none(
            n in 3u64..=7,
            groups in 1u64..12,
            order in Just((1..=7).collect::<Vec<NodeId>>()).prop_shuffle(),
            masks in proptest::collection::vec(any::<u64>(), 7),
            added in 1u64..=3,
            added_masks in proptest::collection::vec(1u64.., 3),
        ) {
            let members: Vec<NodeId> = (1..=n).collect();
            let mut c = Cluster::default();
            for (k, me) in order.iter().copied().filter(|id| *id <= n).enumerate() {
                let up: Vec<NodeId> = c.started.keys().copied().collect();
                let role = c.start(me, &members, &subset(&up, masks[k]), groups);
                prop_assert_eq!(role, Role::Initial { members: members.clone() }, "node {} of {:?}", me, order);
            }
            let formed = c.formations();
            for g in 0..=groups {
                prop_assert_eq!(formed.get(&g), Some(&vec![placement(g, &members, RF)]), "group {}", g);
            }
            for (k, me) in (n + 1..=n + added).enumerate() {
                let peers: Vec<NodeId> = (1..=me).collect();
                let up: Vec<NodeId> = c.started.keys().copied().collect();
                let mut reach = subset(&up, added_masks[k]);
                if reach.is_empty() {
                    reach.insert(up[0]);
                }
                let role = c.start(me, &peers, &reach, groups);
                prop_assert_eq!(role, Role::Added { members: members.clone() });
            }
            prop_assert_eq!(c.formations(), formed);
        }
    }

    /// The hang this record fixes: node 5 of 5 starts after nodes 1 and 2 formed groups none
    /// of which counts it. Guessing from the running groups took it for an added node, and the
    /// groups only it initializes never formed.
    #[test]
    fn a_late_member_that_sees_only_groups_without_it_is_still_an_initial_member() {
        let members: Vec<NodeId> = (1..=5).collect();
        let running = BTreeMap::from([(0, vec![1, 2, 3]), (1, vec![2, 3, 4])]);
        let probe = Probe { running, active: BTreeSet::from([0]), initial: vec![members.clone()], ..Probe::default() };
        assert_eq!(role(5, &members, &probe), Role::Initial { members: members.clone() });
        // A scale-out pod sees the same and is told apart by the record.
        let longer: Vec<NodeId> = (1..=6).collect();
        assert_eq!(role(6, &longer, &probe), Role::Added { members });
    }

    /// A scale-in drained node 5, a scale-out reuses its ordinal on an empty volume while the
    /// groups it would initialize by the static placement live on peers it cannot reach: it
    /// forms none of them, because the peers it reaches say its id was drained.
    #[test]
    fn a_drained_initial_member_starting_empty_is_an_added_node() {
        let members: Vec<NodeId> = (1..=5).collect();
        let running = BTreeMap::from([(0, vec![1, 2, 4]), (1, vec![2, 3, 4])]);
        let retired = BTreeSet::from([5]);
        let probe = Probe { running, initial: vec![members.clone()], retired, ..Probe::default() };
        assert_eq!(role(5, &members, &probe), Role::Added { members: members.clone() });
        assert_eq!(role(4, &members, &probe), Role::Initial { members: members.clone() });
        let before_the_record = Probe { initial: vec![], ..probe };
        assert_eq!(role(5, &members, &before_the_record), Role::Added { members: vec![] });
    }

    #[test]
    fn peers_from_before_the_record_are_judged_by_their_groups() {
        let peers: Vec<NodeId> = (1..=4).collect();
        let running = BTreeMap::from([(0, vec![1, 2, 3])]);
        let probe = Probe { running: running.clone(), ..Probe::default() };
        assert_eq!(role(4, &peers, &probe), Role::Added { members: vec![] });
        assert_eq!(role(3, &peers, &probe), Role::Initial { members: peers.clone() });
        assert_eq!(role(4, &peers, &Probe::default()), Role::Initial { members: peers });
    }

    #[test]
    fn the_record_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        record(dir.path(), &[1, 2, 3]).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(vec![1, 2, 3]));
    }
}
