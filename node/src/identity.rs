//! Which incarnation of its node id this process is, and whether the cluster lets it take part
//! in Raft under that id (docs/RELIABILITY.md, "Replacing a node").
//!
//! A data directory gets a random incarnation when it is first initialised. A node that starts
//! on an empty directory while the cluster runs has forgotten every vote and log entry its id
//! acknowledged: until meta confirms that the id is this incarnation's, it serves no Raft RPC.
//! If meta knows the id under another incarnation, the node waits for an administrator to
//! replace it: each group's leader removes the old incarnation, adds this one back as a
//! learner (caught up by log or snapshot) and promotes it.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::RwLock;

use sextant_model::meta::{ClusterView, NodeRole};

use crate::types::{GroupId, NodeId};

const INCARNATION_FILE: &str = "incarnation";

/// Whether this incarnation may serve Raft RPCs under its node id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Meta records this id with this incarnation.
    Verified,
    /// Started on an empty data directory in a running cluster; meta has not confirmed yet.
    Unverified,
    /// Meta knows the id under another incarnation: the node waits to be replaced.
    NeedsReplacement { known: u64 },
    /// Being replaced: the groups whose leader has not yet removed the old incarnation.
    Replacing { groups: BTreeSet<GroupId> },
}

/// A Raft RPC this node receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaftCall {
    Vote,
    Append,
    Snapshot,
}

impl Standing {
    /// What meta's view says about incarnation `mine` of node `me`.
    pub fn from_view(view: &ClusterView, me: NodeId, mine: u64) -> Standing {
        let Some(n) = view.nodes.iter().find(|n| n.id == me) else { return Standing::Unverified };
        if n.incarnation == mine {
            return Standing::Verified;
        }
        match &n.replacing {
            Some(r) if r.incarnation == mine => Standing::Replacing { groups: r.groups.iter().copied().collect() },
            _ if n.incarnation == 0 => Standing::Unverified,
            _ => Standing::NeedsReplacement { known: n.incarnation },
        }
    }

    /// Whether `call` for `group` may be served. Votes wait until the id is this incarnation's;
    /// during a replacement, appends and snapshots are taken for the groups whose leader has
    /// already removed the old incarnation (it adds this one back as a learner).
    pub fn admits(&self, call: RaftCall, group: GroupId) -> bool {
        match self {
            Standing::Verified => true,
            Standing::Replacing { groups } => call != RaftCall::Vote && !groups.contains(&group),
            Standing::Unverified | Standing::NeedsReplacement { .. } => false,
        }
    }
}

#[derive(Debug)]
pub struct Identity {
    pub incarnation: u64,
    /// The data directory was empty at this start.
    pub fresh: bool,
    standing: RwLock<Standing>,
    /// Groups no peer ran when this fresh directory started unverified: a cluster forming, whose
    /// votes this directory cannot have given. They are served while the id waits for meta.
    forming: RwLock<BTreeSet<GroupId>>,
}

impl Identity {
    /// The incarnation of `data_dir`, created (random, never 0) when the directory has none.
    /// `had_data`: the directory holds replicas or was part of a formed cluster; without, it
    /// is fresh (even if an earlier start wrote its incarnation).
    pub fn open(data_dir: &Path, had_data: bool) -> anyhow::Result<Identity> {
        let path = data_dir.join(INCARNATION_FILE);
        let incarnation = match std::fs::read(&path) {
            Ok(bytes) => crate::persist::decode_incarnation(&bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let incarnation = loop {
                    let n: u64 = rand::random();
                    if n != 0 {
                        break n;
                    }
                };
                let bytes = crate::persist::encode_incarnation(incarnation);
                crate::durable::write_file_atomic(data_dir, INCARNATION_FILE, &bytes)?;
                incarnation
            }
            Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", path.display())),
        };
        Ok(Identity {
            incarnation,
            fresh: !had_data,
            standing: RwLock::new(Standing::Verified),
            forming: RwLock::new(BTreeSet::new()),
        })
    }

    pub fn standing(&self) -> Standing {
        self.standing.read().unwrap().clone()
    }

    /// Sets the standing; true when it changed.
    pub fn set(&self, standing: Standing) -> bool {
        let mut s = self.standing.write().unwrap();
        let changed = *s != standing;
        *s = standing;
        changed
    }

    pub fn admits(&self, call: RaftCall, group: GroupId) -> bool {
        let standing = self.standing.read().unwrap();
        standing.admits(call, group)
            || (*standing == Standing::Unverified && self.forming.read().unwrap().contains(&group))
    }

    /// Serves `group` while unverified: no peer ran it when this directory started.
    pub fn admit_forming(&self, group: GroupId) {
        self.forming.write().unwrap().insert(group);
    }
}

/// gRPC metadata on every Raft RPC a node sends: `<node id>/<incarnation hex>`.
pub const SENDER_HEADER: &str = "x-sextant-sender";

pub fn sender_header(id: NodeId, incarnation: u64) -> String {
    format!("{id}/{}", hex(incarnation))
}

fn parse_sender(value: &str) -> Option<(NodeId, u64)> {
    let (id, incarnation) = value.split_once('/')?;
    if incarnation.len() != 16 {
        return None;
    }
    Some((id.parse().ok()?, u64::from_str_radix(incarnation, 16).ok()?))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    accepted: u64,
    replacing: Option<u64>,
    /// Draining or drained: holds, or will hold, no replica.
    retired: bool,
}

/// The incarnations meta records for the nodes, so that Raft RPCs sent by an incarnation the
/// cluster does not know under that id are refused by the receiver too, and the drained ids.
#[derive(Debug, Default)]
pub struct PeerIncarnations(RwLock<std::collections::BTreeMap<NodeId, Known>>);

impl PeerIncarnations {
    pub fn update(&self, view: &ClusterView) {
        let known = view
            .nodes
            .iter()
            .map(|n| {
                let known = Known {
                    accepted: n.incarnation,
                    replacing: n.replacing.as_ref().map(|r| r.incarnation),
                    retired: n.role == NodeRole::Draining,
                };
                (n.id, known)
            })
            .collect();
        *self.0.write().unwrap() = known;
    }

    /// Ids meta lists as draining or drained (`crate::bootstrap`: not initial members any more).
    pub fn retired(&self) -> Vec<NodeId> {
        self.0.read().unwrap().iter().filter(|(_, k)| k.retired).map(|(id, _)| *id).collect()
    }

    /// Whether a `call` carrying sender header `header` is taken. Senders of releases without the
    /// header, ids meta has no incarnation for, and views not read yet are let through.
    pub fn admits(&self, header: Option<&str>, call: RaftCall) -> Result<(), String> {
        let Some(value) = header else { return Ok(()) };
        let (id, incarnation) = parse_sender(value).ok_or_else(|| format!("malformed {SENDER_HEADER}"))?;
        let Some(k) = self.0.read().unwrap().get(&id).copied() else { return Ok(()) };
        if k.accepted == 0 || k.accepted == incarnation || (k.replacing == Some(incarnation) && call != RaftCall::Vote)
        {
            return Ok(());
        }
        Err(format!("node {id} incarnation {} is not the one the cluster knows under that id", hex(incarnation)))
    }
}

/// The incarnation as the admin API and logs show it.
pub fn hex(incarnation: u64) -> String {
    format!("{incarnation:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::meta::{ClusterNodeView, NodeReplacement, NodeRole, NodeState};

    fn view(incarnation: u64, replacing: Option<NodeReplacement>) -> ClusterView {
        let node = ClusterNodeView {
            id: 3,
            address: "n3".into(),
            role: NodeRole::Member,
            state: NodeState::Active,
            incarnation,
            needs_replacement: None,
            replacing,
            zone: None,
        };
        ClusterView { nodes: vec![node], ..Default::default() }
    }

    #[test]
    fn an_incarnation_meta_does_not_know_serves_no_raft_rpc() {
        let s = Standing::from_view(&view(7, None), 3, 9);
        assert_eq!(s, Standing::NeedsReplacement { known: 7 });
        for call in [RaftCall::Vote, RaftCall::Append, RaftCall::Snapshot] {
            assert!(!s.admits(call, 1), "{call:?}");
        }
        assert_eq!(Standing::from_view(&view(7, None), 4, 9), Standing::Unverified, "not registered yet");
        assert!(!Standing::Unverified.admits(RaftCall::Append, 0));
    }

    #[test]
    fn an_unverified_directory_serves_only_the_groups_forming_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let id = Identity::open(dir.path(), false).unwrap();
        id.set(Standing::Unverified);
        id.admit_forming(0);
        assert!(id.admits(RaftCall::Vote, 0) && id.admits(RaftCall::Append, 0), "meta forms with it");
        assert!(!id.admits(RaftCall::Vote, 1), "a group peers already ran");
        id.set(Standing::NeedsReplacement { known: 7 });
        assert!(!id.admits(RaftCall::Append, 0), "a replaced id serves nothing");
    }

    #[test]
    fn the_recorded_incarnation_serves_everything() {
        let s = Standing::from_view(&view(9, None), 3, 9);
        assert_eq!(s, Standing::Verified);
        assert!(s.admits(RaftCall::Vote, 0) && s.admits(RaftCall::Append, 5));
    }

    #[test]
    fn a_replacement_admits_appends_only_where_the_old_incarnation_was_removed() {
        let s = Standing::from_view(&view(7, Some(NodeReplacement { incarnation: 9, groups: vec![0, 2] })), 3, 9);
        assert!(s.admits(RaftCall::Append, 1) && s.admits(RaftCall::Snapshot, 1));
        assert!(!s.admits(RaftCall::Append, 2), "the old incarnation is still a voter of group 2");
        assert!(!s.admits(RaftCall::Vote, 1), "no vote until the id is this incarnation's");
        // Another incarnation's replacement is not this one's.
        let other = Standing::from_view(&view(7, Some(NodeReplacement { incarnation: 8, groups: vec![] })), 3, 9);
        assert_eq!(other, Standing::NeedsReplacement { known: 7 });
    }

    #[test]
    fn peers_refuse_raft_rpcs_from_an_incarnation_they_do_not_know() {
        let peers = PeerIncarnations::default();
        let header = |inc| sender_header(3, inc);
        assert_eq!(peers.admits(Some(&header(9)), RaftCall::Vote), Ok(()), "no view read yet");
        peers.update(&view(7, None));
        assert_eq!(peers.admits(Some(&header(7)), RaftCall::Vote), Ok(()));
        assert!(peers.admits(Some(&header(9)), RaftCall::Vote).unwrap_err().contains("node 3 incarnation"));
        assert!(peers.admits(Some(&header(9)), RaftCall::Append).is_err());
        assert_eq!(peers.admits(None, RaftCall::Vote), Ok(()), "a sender from before incarnations");
        assert_eq!(peers.admits(Some(&sender_header(4, 9)), RaftCall::Vote), Ok(()), "an id meta does not know");
        assert!(peers.admits(Some("3/xyz"), RaftCall::Append).is_err());
        // During its replacement the new incarnation's appends are taken, its vote requests not.
        peers.update(&view(7, Some(NodeReplacement { incarnation: 9, groups: vec![1] })));
        assert_eq!(peers.admits(Some(&header(9)), RaftCall::Append), Ok(()));
        assert!(peers.admits(Some(&header(9)), RaftCall::Vote).is_err());
        peers.update(&view(9, None));
        assert!(peers.admits(Some(&header(7)), RaftCall::Vote).is_err(), "the replaced incarnation is out");
    }

    #[test]
    fn the_incarnation_is_kept_and_a_new_directory_is_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let first = Identity::open(dir.path(), false).unwrap();
        assert!(first.fresh);
        assert_ne!(first.incarnation, 0);
        let unformed = Identity::open(dir.path(), false).unwrap();
        assert_eq!((unformed.incarnation, unformed.fresh), (first.incarnation, true), "a restart before forming");
        let again = Identity::open(dir.path(), true).unwrap();
        assert_eq!((again.incarnation, again.fresh), (first.incarnation, false));
        let upgraded = tempfile::tempdir().unwrap();
        assert!(!Identity::open(upgraded.path(), true).unwrap().fresh, "data from before incarnations");
        let other = Identity::open(tempfile::tempdir().unwrap().path(), false).unwrap();
        assert_ne!(other.incarnation, first.incarnation);
    }

    #[test]
    fn a_corrupt_incarnation_file_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(INCARNATION_FILE), b"SXIN\x01\0\0\0\0\0\0\0\0").unwrap();
        assert!(Identity::open(dir.path(), true).unwrap_err().to_string().contains("must not be 0"));
        std::fs::write(dir.path().join(INCARNATION_FILE), b"garbage").unwrap();
        assert!(Identity::open(dir.path(), true).is_err());
    }
}
