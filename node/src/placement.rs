//! Moves replicas to where meta wants them (docs/ARCHITECTURE.md, "Membership, placement and
//! drains"). Every node runs this loop; it acts only on the groups it leads, because only a group's
//! leader can change its membership:
//!
//! - it reports the group's committed voters to meta (`ReportReplicas`), which is how meta
//!   learns that a move finished and how a restarted loop resumes: progress lives in meta and
//!   in the group's own membership, never in this task;
//! - it makes one change towards `desired` per group and round: add a missing node as a learner
//!   and wait until it caught up (log or snapshot, see `archive`), promote it (joint
//!   consensus), and only then remove a surplus voter, so a group never has fewer than its
//!   replication factor of voters. A leader that must go removes itself last: openraft 0.9 has
//!   no leadership transfer, and a leader whose removal is committed steps down, the others
//!   elect a new one within an election timeout.
//!
//! It also registers the node with meta at start, learns other nodes' addresses from meta, and
//! deletes replicas that meta no longer places here once their removal is committed.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, ChangeMembers, ServerState};
use sextant_model::meta::{ClusterView, MetaCommand, MetaQuery, NodeState};

use crate::host::NodeHost;
use crate::meta_client::{self, MetaCallError};
use crate::types::{GroupId, NodeId, Raft};

const EVERY: Duration = Duration::from_millis(500);
/// Bound on a learner's catch-up (snapshot transfer included) before the round gives up and
/// tries again later.
const CATCH_UP: Duration = Duration::from_secs(120);
/// A learner this close to the leader's last log index is promoted.
const CAUGHT_UP_ENTRIES: u64 = 64;

#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error(transparent)]
    Meta(#[from] MetaCallError),
    #[error("node {0} has no address in meta")]
    NoAddress(NodeId),
    #[error("membership change of group {group}: {message}")]
    Raft { group: GroupId, message: String },
}

pub async fn cluster_view(host: &NodeHost) -> Result<ClusterView, PlacementError> {
    Ok(meta_client::read(host, &MetaQuery::Cluster).await?)
}

pub fn spawn(host: Arc<NodeHost>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = crate::host::periodic(EVERY);
        // Groups meta did not place here in the previous round too: removed only when two
        // rounds agree, so a view read just before a placement change cannot remove a replica
        // that is being added back.
        let mut leaving: HashSet<GroupId> = HashSet::new();
        // The zone meta has for this node; a new one (a zone file that changed) registers again.
        let mut registered_zone: Option<Option<String>> = None;
        let mut zone = None;
        let mut zone_error = None;
        loop {
            tick.tick().await;
            let read = match host.config.zone.read() {
                Ok(None) if host.config.zone.is_file() => None,
                Ok(z) => {
                    zone_error = None;
                    Some(z)
                }
                Err(e) => {
                    // Logged once per new problem.
                    if zone_error.as_ref() != Some(&e.to_string()) {
                        tracing::warn!(error = %e, "reading this node's zone");
                    }
                    zone_error = Some(e.to_string());
                    None
                }
            };
            match read {
                Some(z) => zone = z,
                // An empty zone file (a pod whose annotation has not arrived yet) or a bad one
                // clears nothing: at the first registration, meta's record for this id stands.
                None if registered_zone.is_none() => match cluster_view(&host).await {
                    Ok(v) => zone = v.nodes.iter().find(|n| n.id == host.config.id).and_then(|n| n.zone.clone()),
                    Err(e) => {
                        tracing::debug!(error = %e, "reading this node's zone in meta");
                        continue;
                    }
                },
                None => {}
            }
            if !host.registered.load(Ordering::Relaxed) || registered_zone.as_ref() != Some(&zone) {
                match register(&host, zone.clone()).await {
                    Ok(()) => {
                        host.registered.store(true, Ordering::Relaxed);
                        registered_zone = Some(zone.clone());
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "registering with meta");
                        continue;
                    }
                }
            }
            let view = match cluster_view(&host).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(error = %e, "reading placement");
                    continue;
                }
            };
            learn_addresses(&host, &view);
            host.peer_incarnations.update(&view);
            if let Err(e) = host.confirm_identity(&view).await {
                tracing::warn!(error = %e, "taking the static placement");
            }
            for (group, raft) in host.rafts() {
                if raft.metrics().borrow().state != ServerState::Leader {
                    continue;
                }
                if let Err(e) = step(&host, group, &raft, &view).await {
                    tracing::warn!(group, error = %e, "placement step");
                }
            }
            if let Err(e) = remove_unplaced(&host, &view, &mut leaving).await {
                tracing::warn!(error = %e, "removing a replica");
            }
        }
    })
}

async fn register(host: &NodeHost, zone: Option<String>) -> Result<(), PlacementError> {
    let c = &host.config;
    let command = MetaCommand::RegisterNode {
        id: c.id,
        address: c.peers[&c.id].clone(),
        member: !c.join,
        replication_factor: c.replication_factor as u32,
        incarnation: host.identity.incarnation,
        zone: zone.clone(),
    };
    meta_client::command(host, &command).await?;
    tracing::info!(node = c.id, join = c.join, zone = zone.as_deref().unwrap_or(""), "registered with meta");
    Ok(())
}

/// Nodes that joined after this one started: Raft reaches them through the membership, but
/// routers learn them from `ClusterInfo`, which lists this address book. Drained nodes are
/// forgotten, so routers and meta calls stop trying a node that was stopped after its drain.
fn learn_addresses(host: &NodeHost, view: &ClusterView) {
    let mut book = host.addresses.write().unwrap();
    for n in &view.nodes {
        if n.id == host.config.id {
            continue;
        }
        if n.state == NodeState::Drained {
            book.remove(&n.id);
        } else if book.get(&n.id) != Some(&n.address) {
            book.insert(n.id, n.address.clone());
        }
    }
}

fn raft_err(group: GroupId) -> impl Fn(String) -> PlacementError {
    move |message| PlacementError::Raft { group, message }
}

/// One change of `group`'s membership towards meta's placement, on its leader.
async fn step(host: &NodeHost, group: GroupId, raft: &Raft, view: &ClusterView) -> Result<(), PlacementError> {
    let me = host.config.id;
    let err = raft_err(group);
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership().clone();
    let config_index = m.membership_config.log_id().map_or(0, |l| l.index);
    let committed = m.last_applied.is_some_and(|a| a.index >= config_index);
    if membership.get_joint_config().len() > 1 {
        // A change interrupted by a leader change: finish it as it was meant.
        let target = membership.get_joint_config().last().cloned().unwrap_or_default();
        raft.change_membership(ChangeMembers::ReplaceAllVoters(target), false).await.map_err(|e| err(e.to_string()))?;
        return Ok(());
    }
    if !committed {
        return Ok(());
    }
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let learners: BTreeSet<NodeId> = membership.learner_ids().collect();
    // Ids handed to a new incarnation whose old one this group must drop first.
    let replaced: BTreeSet<NodeId> = view
        .nodes
        .iter()
        .filter(|n| n.replacing.as_ref().is_some_and(|r| r.groups.contains(&group)))
        .map(|n| n.id)
        .collect();
    let reported = view.replicas.get(&group);
    let replaced_gone = replaced.iter().any(|n| !voters.contains(n) && !learners.contains(n));
    if replaced_gone || reported.is_none_or(|r| r.iter().copied().collect::<BTreeSet<_>>() != voters) {
        report(host, group, &voters, config_index).await?;
    }
    if let Some(&old) = replaced.iter().find(|n| **n != me && (voters.contains(n) || learners.contains(n))) {
        let next: BTreeSet<NodeId> = voters.iter().copied().filter(|v| *v != old).collect();
        tracing::info!(group, node = old, "removing a replaced incarnation");
        let change = if voters.contains(&old) {
            ChangeMembers::ReplaceAllVoters(next.clone())
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([old]))
        };
        let resp = raft.change_membership(change, false).await.map_err(|e| err(e.to_string()))?;
        return report(host, group, &next, resp.log_id.index).await;
    }
    let Some(desired) = view.desired.get(&group) else { return Ok(()) };
    let desired: BTreeSet<NodeId> = desired.iter().copied().collect();

    if let Some(&new) = desired.difference(&voters).next() {
        if !learners.contains(&new) {
            let addr = view.address_of(new).ok_or(PlacementError::NoAddress(new))?.to_owned();
            tracing::info!(group, node = new, "adding a learner");
            // Blocking: returns once the learner has caught up (after a snapshot if the log
            // it needs was purged). Bounded, so one slow transfer does not stall every group.
            match tokio::time::timeout(CATCH_UP, raft.add_learner(new, BasicNode::new(addr), true)).await {
                Ok(r) => {
                    r.map_err(|e| err(e.to_string()))?;
                }
                Err(_) => return Ok(()),
            }
        }
        if !caught_up(raft, new) {
            return Ok(());
        }
        let mut next = voters.clone();
        next.insert(new);
        tracing::info!(group, node = new, "promoting the learner to voter");
        let resp = raft
            .change_membership(ChangeMembers::ReplaceAllVoters(next.clone()), false)
            .await
            .map_err(|e| err(e.to_string()))?;
        return report(host, group, &next, resp.log_id.index).await;
    }
    // Surplus voters go only once every desired node votes; the leader itself goes last.
    let surplus: Vec<NodeId> = voters.difference(&desired).copied().collect();
    if let Some(&gone) = surplus.iter().find(|n| **n != me).or(surplus.first()) {
        let mut next = voters.clone();
        next.remove(&gone);
        tracing::info!(group, node = gone, "removing a voter");
        let resp = raft
            .change_membership(ChangeMembers::ReplaceAllVoters(next.clone()), false)
            .await
            .map_err(|e| err(e.to_string()))?;
        return report(host, group, &next, resp.log_id.index).await;
    }
    // Learners left behind by a placement that changed while they were being added.
    let stray: BTreeSet<NodeId> = learners.difference(&desired).copied().collect();
    if !stray.is_empty() {
        raft.change_membership(ChangeMembers::RemoveNodes(stray), false).await.map_err(|e| err(e.to_string()))?;
    }
    Ok(())
}

fn caught_up(raft: &Raft, node: NodeId) -> bool {
    let m = raft.metrics().borrow().clone();
    let last = m.last_log_index.unwrap_or(0);
    let matched = m.replication.as_ref().and_then(|r| r.get(&node).cloned()).flatten().map_or(0, |l| l.index);
    matched + CAUGHT_UP_ENTRIES >= last && matched > 0
}

async fn report(
    host: &NodeHost,
    group: GroupId,
    voters: &BTreeSet<NodeId>,
    log_index: u64,
) -> Result<(), PlacementError> {
    let command = MetaCommand::ReportReplicas { group, voters: voters.iter().copied().collect(), log_index };
    meta_client::command(host, &command).await?;
    Ok(())
}

/// Deletes replicas of groups that meta neither places here nor counts among the voters, and
/// that no leader keeps as a voter: their removal is committed, so nothing will ever
/// replicate to them again.
async fn remove_unplaced(
    host: &NodeHost,
    view: &ClusterView,
    leaving: &mut HashSet<GroupId>,
) -> Result<(), crate::host::HostError> {
    let me = host.config.id;
    let mut now_leaving = HashSet::new();
    for (group, raft) in host.rafts() {
        // Meta has not heard of the group yet (a cluster still starting): keep it.
        let Some(voters) = view.replicas.get(&group) else { continue };
        let placed = view.desired.get(&group).is_some_and(|d| d.contains(&me));
        let m = raft.metrics().borrow().clone();
        // Meta's record can lag a committed change (a leader that promoted this node and has
        // not reported yet): a replica that votes in its own configuration and hears from a
        // leader is kept; a removed one loses its leader within an election timeout, since
        // nobody replicates to it any more.
        let active_voter = m.current_leader.is_some() && m.membership_config.membership().voter_ids().any(|v| v == me);
        if voters.contains(&me) || placed || active_voter || m.state == ServerState::Leader {
            continue;
        }
        if leaving.contains(&group) {
            host.drop_group(group).await?;
        } else {
            now_leaving.insert(group);
        }
    }
    *leaving = now_leaving;
    Ok(())
}
