//! The router's view of the storage cluster: where each group's leader is, calls that follow
//! leader changes (`Cluster`), and the cached meta view (`meta_cache`: credentials, projects,
//! partition table).

pub mod meta_cache;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sextant_model::meta::{MetaCommand, MetaCommandResult, MetaQuery, MetaView};
use sextant_model::query::{Cost, ShardQuery, ShardReply};
use sextant_model::row::{RowBatch, Span};
use sextant_model::ProjectId;
pub use sextant_proto::client::InProcessNode;
use sextant_proto::client::{Authed, Channels, LocalStorage};
use sextant_proto::convert::persist_row::{encode_ingest, encode_ingest_decoded, Packed};
use sextant_proto::storage_client::StorageClient;
use sextant_proto::{write_request, ClusterInfoRequest, MetaRequest, WriteRequest, LEADER_HEADER, OVERLOADED_HEADER};
use tokio::time::Instant;
use tonic::{Code, Status};

pub type GroupId = u64;
pub type NodeId = u64;
pub const META_GROUP: GroupId = 0;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No leader answered within the deadline; the client should retry.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
    /// The shard leader's disk is above its high-water mark; retry later.
    #[error("{0}")]
    DiskFull(String),
    /// The shard leader's write queue is full (`sextant_node::admission`); retry shortly.
    #[error("{0}")]
    Overloaded(String),
}

/// One shard's part of an ingest request, replicated under the request's batch id.
pub enum Write {
    Batch(RowBatch<Packed>),
    /// Drops the batch this id committed, when another shard could not commit its own.
    Abort,
}

/// A shard leader's answer to a [`Write`].
#[derive(Clone, Copy, Debug)]
pub struct Written {
    pub log_index: u64,
    /// The batch id had been applied before; this write changed nothing.
    pub duplicate: bool,
}

#[derive(Default)]
struct Topology {
    nodes: HashMap<NodeId, String>,
    voters: HashMap<GroupId, Vec<NodeId>>,
    leaders: HashMap<GroupId, NodeId>,
    /// The Raft term each of `leaders` was reported at (0: learned from a redirect).
    terms: HashMap<GroupId, u64>,
    /// Nodes that did not answer this router while their peers did, until when calls for the
    /// groups they lead go through another replica ([`Cluster::suspect`]).
    unreachable: HashMap<NodeId, Instant>,
    shard_count: u32,
}

/// Where one attempt of a call goes.
struct Target {
    /// The group's leader as far as this router knows (or a voter to ask, with none known).
    leader: NodeId,
    /// The address called: the leader's, or the relaying replica's.
    addr: String,
    /// Sent to another replica, which relays it to `leader` (`RELAY_HEADER`).
    relayed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Suspicion {
    Moved,
    Unreachable,
    Waiting,
}

/// Why an attempt was given up before its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Abandoned {
    Moved,
    Unreachable,
    TimedOut,
}

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Abandoned::Moved => "another replica leads the group now",
            Abandoned::Unreachable => "out of this router's reach while its peers answer",
            Abandoned::TimedOut => "timed out",
        })
    }
}

pub use meta_cache::MetaCache;

pub struct Cluster {
    channels: Channels,
    seeds: Vec<String>,
    topology: RwLock<Topology>,
    meta: RwLock<Option<Arc<MetaCache>>>,
    /// When each group's replicas were last asked for a new leader ([`Cluster::suspect`]).
    probes: std::sync::Mutex<HashMap<GroupId, Instant>>,
    /// When a credential this router did not know last made it reload the meta view
    /// ([`Cluster::reload_meta_for_unknown`]); held while that reload runs.
    unknown_reloads: tokio::sync::Mutex<Option<Instant>>,
    /// How long a call keeps looking for a leader before answering 503.
    pub deadline: Duration,
}

const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// A call unanswered this long starts asking the group's other replicas whether another one
/// leads it now: a frozen leader (a long pause, SIGSTOP) keeps its connections open and answers
/// nothing, and a slow but live leader must not be given up on for it. Well above a commit's
/// usual latency, so a healthy cluster is not probed (docs/RELIABILITY.md, "Failover").
const SUSPECT_AFTER: Duration = Duration::from_millis(250);
/// Then a group's other replicas are asked at most this often, however many calls wait on it.
const PROBE_INTERVAL: Duration = Duration::from_millis(200);
/// A credential this router does not know reloads the meta view at most this often, however
/// many requests present unknown ones.
const UNKNOWN_RELOAD_INTERVAL: Duration = Duration::from_millis(200);
/// Deadline of one node's `ClusterInfo` in a probe or a topology refresh: a frozen node must
/// not hold up the answers of the others for long.
const INFO_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a node that did not answer this router, while its peers did, is called through
/// another replica before it is tried directly again.
const UNREACHABLE_FOR: Duration = Duration::from_secs(5);
/// Longest pause between two attempts: a dead leader refuses connections at once, and a new
/// one is elected within about a second (`sextant_node::host`'s Raft timeouts).
const MAX_BACKOFF: Duration = Duration::from_millis(250);
/// Deadline of one shard's part of a query, and of each attempt at it: a scan of millions of
/// rows may take seconds on a busy node, and cutting it off only to start it again from
/// scratch (while the first one still runs) would never finish under load. The router's
/// per-shard timeout (`query::SHARD_TIMEOUT`, the same) decides when a shard is missing.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(15);

impl Cluster {
    /// `tls`: mutual TLS on every call to a node (`None`: plain HTTP/2); `in_process`: a node
    /// running in this process.
    pub fn new(
        seeds: Vec<String>,
        cluster_secret: &str,
        tls: Option<sextant_proto::internal_tls::InternalTls>,
        in_process: Option<InProcessNode>,
    ) -> Result<Arc<Self>, String> {
        let mut channels = Channels::new(cluster_secret)?.with_tls(tls);
        if let Some(node) = in_process {
            channels = channels.with_in_process(node);
        }
        Ok(Arc::new(Self {
            channels,
            seeds,
            topology: RwLock::new(Topology::default()),
            meta: RwLock::new(None),
            probes: Default::default(),
            unknown_reloads: Default::default(),
            deadline: Duration::from_secs(10),
        }))
    }

    /// Asks every known node for its view and merges them: a node is authoritative about the
    /// groups it leads.
    pub async fn refresh_topology(&self) -> Result<(), ClusterError> {
        let mut addrs: Vec<String> = self.seeds.clone();
        addrs.extend(self.topology.read().unwrap().nodes.values().cloned());
        addrs.sort();
        addrs.dedup();
        let replies = futures::future::join_all(addrs.iter().map(|addr| async move {
            let mut client = self.channels.storage(addr).ok()?;
            match tokio::time::timeout(INFO_TIMEOUT, client.cluster_info(ClusterInfoRequest {})).await {
                Ok(Ok(r)) => Some(r.into_inner()),
                _ => {
                    self.channels.forget(addr);
                    None
                }
            }
        }))
        .await;
        let mut topo = self.topology.write().unwrap();
        let mut any = false;
        let mut fresh_leaders = HashMap::new();
        // The nodes are whatever the answering nodes list: nodes that joined appear, nodes
        // that were drained and removed disappear (the seeds are always asked anyway).
        let mut nodes = HashMap::new();
        for reply in replies.into_iter().flatten() {
            any = true;
            topo.shard_count = reply.shard_count;
            for n in reply.nodes {
                nodes.insert(n.id, n.addr);
            }
            for g in reply.groups {
                topo.voters.insert(g.group, g.voters);
                // The newest term wins; in one term, the leader's own word over a follower's.
                let claim = (g.term, g.leader == reply.node_id);
                if g.leader != 0 && fresh_leaders.get(&g.group).is_none_or(|(_, best)| *best < claim) {
                    fresh_leaders.insert(g.group, (g.leader, claim));
                }
            }
        }
        if !any {
            return Err(ClusterError::Unavailable("no storage node answered".into()));
        }
        topo.nodes = nodes;
        topo.terms = fresh_leaders.iter().map(|(g, (_, (term, _)))| (*g, *term)).collect();
        topo.leaders = fresh_leaders.into_iter().map(|(g, (leader, _))| (g, leader)).collect();
        Ok(())
    }

    /// True when the meta view is loaded and every group has a known leader.
    pub fn ready(&self) -> bool {
        let topo = self.topology.read().unwrap();
        self.meta.read().unwrap().is_some()
            && topo.shard_count > 0
            && (0..=topo.shard_count as u64).all(|g| topo.leaders.contains_key(&g))
    }

    pub fn meta_cache(&self) -> Option<Arc<MetaCache>> {
        self.meta.read().unwrap().clone()
    }

    pub async fn refresh_meta(&self) -> Result<(), ClusterError> {
        let view: MetaView = self.meta_read(&MetaQuery::View).await?;
        let mut cache = self.meta.write().unwrap();
        // Two refreshes may finish out of order; never go back to an older view.
        if cache.as_ref().is_none_or(|c| c.version <= view.version) {
            *cache = Some(Arc::new(view.into()));
        }
        Ok(())
    }

    /// Reloads the meta view for a credential missing from the one seen at `seen_version`: one
    /// made through another router less than a refresh period ago. Requests that miss at once
    /// share one reload, and reloads start at most once per [`UNKNOWN_RELOAD_INTERVAL`], so
    /// made-up credentials cannot make this router hammer the meta group.
    pub async fn reload_meta_for_unknown(&self, seen_version: u64) -> Result<(), ClusterError> {
        let mut last = self.unknown_reloads.lock().await;
        if self.meta_cache().is_some_and(|c| c.version > seen_version) {
            return Ok(());
        }
        let now = Instant::now();
        if last.is_some_and(|t| now < t + UNKNOWN_RELOAD_INTERVAL) {
            return Ok(());
        }
        *last = Some(now);
        self.refresh_meta().await
    }

    /// Proposes a meta command and reloads this router's cache when it changed something, so
    /// the next request here sees it (others see it within a refresh period).
    pub async fn meta_change(&self, command: &MetaCommand) -> Result<MetaCommandResult, ClusterError> {
        let result: MetaCommandResult = self.meta_write(command).await?;
        if !matches!(result, MetaCommandResult::Refused(_)) {
            if let Err(e) = self.refresh_meta().await {
                // The periodic refresh catches up within a second.
                tracing::warn!(error = %e, "meta refresh after a change failed");
            }
        }
        Ok(result)
    }

    /// Tells meta this router is alive at `at_ms`, for limit shares.
    pub async fn heartbeat(&self, router_id: &str, at_ms: i64) -> Result<(), ClusterError> {
        let command = MetaCommand::RouterHeartbeat { router_id: router_id.to_owned(), at_ms };
        let _: MetaCommandResult = self.meta_write(&command).await?;
        Ok(())
    }

    /// Keeps topology and meta view fresh; credential revocations reach this router within
    /// one period.
    pub fn spawn_refresh(self: &Arc<Self>, period: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = me.refresh_topology().await {
                    tracing::warn!(error = %e, "topology refresh failed");
                }
                if let Err(e) = me.refresh_meta().await {
                    tracing::warn!(error = %e, "meta refresh failed");
                }
                tokio::time::sleep(period).await;
            }
        })
    }

    /// Asks `group`'s replicas who leads it, at most once per [`PROBE_INTERVAL`] per group, and
    /// records a replica that says it leads the group in a term at least as new as the known
    /// leader's. `suspect` is the node a call waits on: another node leads now
    /// ([`Suspicion::Moved`]), or it does not answer this router while other replicas do
    /// ([`Suspicion::Unreachable`]: a partition between this router and that node, or a frozen
    /// node), or neither yet.
    async fn suspect(&self, group: GroupId, suspect: NodeId) -> Suspicion {
        let verdict = || {
            let topo = self.topology.read().unwrap();
            if topo.leaders.get(&group).is_some_and(|l| *l != suspect) {
                Suspicion::Moved
            } else if topo.unreachable.get(&suspect).is_some_and(|until| Instant::now() < *until) {
                Suspicion::Unreachable
            } else {
                Suspicion::Waiting
            }
        };
        if verdict() == Suspicion::Moved {
            return Suspicion::Moved;
        }
        {
            let mut probes = self.probes.lock().unwrap();
            let now = Instant::now();
            if probes.get(&group).is_some_and(|last| now < *last + PROBE_INTERVAL) {
                return verdict();
            }
            probes.insert(group, now);
        }
        let (own, others): (Option<String>, Vec<String>) = {
            let topo = self.topology.read().unwrap();
            let voters = topo.voters.get(&group).map(Vec::as_slice).unwrap_or_default();
            let others = voters.iter().filter(|id| **id != suspect).filter_map(|id| topo.nodes.get(id).cloned());
            (topo.nodes.get(&suspect).cloned(), others.collect())
        };
        let info = |addr: String| async move {
            let mut client = self.channels.storage(&addr).ok()?;
            let reply = tokio::time::timeout(INFO_TIMEOUT, client.cluster_info(ClusterInfoRequest {})).await;
            reply.ok()?.ok().map(|r| r.into_inner())
        };
        let (own, replies) =
            futures::future::join(async { info(own?).await }, futures::future::join_all(others.into_iter().map(info)))
                .await;
        let others_answer = replies.iter().any(Option::is_some);
        let claim = replies
            .into_iter()
            .flatten()
            .flat_map(|r| {
                let me = r.node_id;
                r.groups.into_iter().filter(move |g| g.group == group && g.leader == me).map(|g| (g.term, g.leader))
            })
            .max();
        let mut topo = self.topology.write().unwrap();
        if let Some((term, leader)) = claim {
            if topo.terms.get(&group).is_none_or(|known| *known <= term) {
                topo.leaders.insert(group, leader);
                topo.terms.insert(group, term);
            }
        }
        match own {
            Some(_) => {
                topo.unreachable.remove(&suspect);
            }
            None if others_answer => {
                topo.unreachable.insert(suspect, Instant::now() + UNREACHABLE_FOR);
            }
            None => {}
        }
        drop(topo);
        verdict()
    }

    /// Runs one attempt `call` on `target`: its answer, or why it was given up: `limit` passed,
    /// or, once it has waited [`SUSPECT_AFTER`], another replica took over the group or the
    /// leader proved out of this router's reach (the caller retries there, or through another
    /// replica; the abandoned call, if it lands, is a duplicate the batch id absorbs).
    async fn attempt<T>(
        &self,
        group: GroupId,
        target: &Target,
        limit: Duration,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<Result<T, Status>, Abandoned> {
        let suspicion = async {
            tokio::time::sleep(SUSPECT_AFTER).await;
            loop {
                match self.suspect(group, target.leader).await {
                    Suspicion::Moved => return Abandoned::Moved,
                    Suspicion::Unreachable if !target.relayed => return Abandoned::Unreachable,
                    _ => tokio::time::sleep(PROBE_INTERVAL).await,
                }
            }
        };
        tokio::select! {
            reply = call => Ok(reply),
            why = suspicion => Err(why),
            _ = tokio::time::sleep(limit) => Err(Abandoned::TimedOut),
        }
    }

    /// Where the next attempt at `group` goes: its known leader, or through another replica
    /// when the leader is out of this router's reach; with no known leader, the voters in turn.
    fn target(&self, group: GroupId, attempt: usize) -> Option<Target> {
        let topo = self.topology.read().unwrap();
        let voters = topo.voters.get(&group).map(Vec::as_slice).unwrap_or_default();
        let reachable = |id: &NodeId| topo.unreachable.get(id).is_none_or(|until| Instant::now() >= *until);
        let leader = match topo.leaders.get(&group) {
            Some(id) => *id,
            None => {
                let mut pool: Vec<&NodeId> = voters.iter().filter(|id| reachable(id)).collect();
                if pool.is_empty() {
                    pool = voters.iter().collect();
                }
                **pool.get(attempt % pool.len().max(1))?
            }
        };
        if topo.leaders.contains_key(&group) && !reachable(&leader) {
            let relays: Vec<&NodeId> = voters.iter().filter(|id| **id != leader && reachable(id)).collect();
            if let Some(relay) = relays.get(attempt % relays.len().max(1)) {
                let addr = topo.nodes.get(relay)?.clone();
                return Some(Target { leader, addr, relayed: true });
            }
        }
        topo.nodes.get(&leader).map(|addr| Target { leader, addr: addr.clone(), relayed: false })
    }

    fn learn_leader(&self, group: GroupId, status: &Status) -> bool {
        let Some((id, addr)) = status
            .metadata()
            .get(LEADER_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.split_once('@'))
            .and_then(|(id, addr)| Some((id.parse::<NodeId>().ok()?, addr.to_owned())))
        else {
            return false;
        };
        let mut topo = self.topology.write().unwrap();
        topo.leaders.insert(group, id);
        topo.terms.insert(group, 0);
        if !addr.is_empty() {
            topo.nodes.insert(id, addr);
        }
        true
    }

    fn forget_leader(&self, group: GroupId) {
        let mut topo = self.topology.write().unwrap();
        topo.leaders.remove(&group);
        topo.terms.remove(&group);
    }

    /// Calls `op` on the leader of `group`, following redirects and retrying through leader
    /// changes until `self.deadline`. Every retried operation must be idempotent.
    async fn on_leader<T, F, Fut>(&self, group: GroupId, op: F) -> Result<T, ClusterError>
    where
        F: Fn(StorageClient<Authed>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.on_leader_within(group, self.deadline, ATTEMPT_TIMEOUT, |c, _| op(c)).await
    }

    /// [`on_leader`](Self::on_leader) with its own deadline and limit per attempt; `op` also
    /// gets the leader's storage service when that node runs in this process and is called
    /// directly, not relayed.
    async fn on_leader_within<T, F, Fut>(
        &self,
        group: GroupId,
        deadline: Duration,
        attempt_timeout: Duration,
        op: F,
    ) -> Result<T, ClusterError>
    where
        F: Fn(StorageClient<Authed>, Option<LocalStorage>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let deadline = Instant::now() + deadline;
        let mut backoff = Duration::from_millis(25);
        let mut last_error = String::from("no leader known");
        for attempt in 0.. {
            if Instant::now() >= deadline {
                break;
            }
            let Some(target) = self.target(group, attempt) else {
                let _ = self.refresh_topology().await;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            };
            let addr = &target.addr;
            let client = if target.relayed { self.channels.storage_relayed(addr) } else { self.channels.storage(addr) };
            let client = client.map_err(|e| ClusterError::Internal(e.to_string()))?;
            let local = if target.relayed { None } else { self.channels.local_storage(addr) };
            let remaining = deadline.saturating_duration_since(Instant::now()).min(attempt_timeout);
            match self.attempt(group, &target, remaining, op(client, local)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(status)) => match status.code() {
                    Code::FailedPrecondition if self.learn_leader(group, &status) => continue,
                    // Not retried here: the shard sheds load, and the client backs off.
                    Code::ResourceExhausted if status.metadata().contains_key(OVERLOADED_HEADER) => {
                        return Err(ClusterError::Overloaded(format!("group {group}: {}", status.message())));
                    }
                    Code::ResourceExhausted => {
                        return Err(ClusterError::DiskFull(format!("group {group}: {}", status.message())));
                    }
                    Code::InvalidArgument | Code::Unauthenticated | Code::Aborted => {
                        return Err(ClusterError::Internal(format!("group {group}: {}", status.message())));
                    }
                    _ => {
                        last_error = format!("group {group} at {addr}: {}", status.message());
                        if status.code() == Code::Unavailable {
                            self.channels.forget(&addr);
                        }
                    }
                },
                Err(why @ Abandoned::Unreachable) => {
                    last_error = format!("group {group} at {addr}: {why}");
                    continue;
                }
                Err(why) if self.topology.read().unwrap().leaders.get(&group).is_some_and(|l| *l != target.leader) => {
                    last_error = format!("group {group} at {addr}: {why}");
                    continue;
                }
                Err(why) => last_error = format!("group {group} at {addr}: {why}"),
            }
            self.forget_leader(group);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if attempt % 4 == 3 {
                let _ = self.refresh_topology().await;
            }
        }
        Err(ClusterError::Unavailable(last_error))
    }

    /// A node in this process is called without encoding the request, and gets the batch's
    /// rows with its payload (see [`sextant_proto::convert::persist_row::Decoded`]); a call
    /// over the network drops them.
    pub async fn write(&self, group: GroupId, batch_id: u128, write: Write) -> Result<Written, ClusterError> {
        let (op, decoded) = match write {
            Write::Batch(batch) if self.channels.has_in_process() => {
                let decoded = Arc::new(encode_ingest_decoded(batch));
                (write_request::Op::Batch(decoded.payload.clone()), Some(decoded))
            }
            Write::Batch(batch) => (write_request::Op::Batch(encode_ingest(batch).into()), None),
            Write::Abort => (write_request::Op::Abort(true), None),
        };
        let req = WriteRequest { group, batch_id: batch_id.to_le_bytes().to_vec(), op: Some(op) };
        let reply = self
            .on_leader_within(group, self.deadline, ATTEMPT_TIMEOUT, |mut c, local| {
                let mut req = tonic::Request::new(req.clone());
                if let Some(d) = &decoded {
                    req.extensions_mut().insert(d.clone());
                }
                async move {
                    match local {
                        Some(node) => node.write(req).await,
                        None => c.write(req).await,
                    }
                    .map(|r| r.into_inner())
                }
            })
            .await?;
        Ok(Written { log_index: reply.log_index, duplicate: reply.duplicate })
    }

    pub async fn get_trace(
        &self,
        group: GroupId,
        project: &ProjectId,
        trace_id: &str,
    ) -> Result<Vec<Span>, ClusterError> {
        let req =
            sextant_proto::GetTraceRequest { group, project_id: project.to_string(), trace_id: trace_id.to_owned() };
        let spans = self
            .on_leader(group, |mut c| {
                let req = req.clone();
                async move { c.get_trace(req).await.map(|r| r.into_inner().spans) }
            })
            .await?;
        Ok(spans.into_iter().map(Span::from).collect())
    }

    /// Runs a query plan on the leader of its group (a read: safe to retry).
    pub async fn query(&self, query: ShardQuery) -> Result<ShardReply, ClusterError> {
        let group = query.group;
        let req = sextant_proto::QueryRequest::from(query);
        let reply = self
            .on_leader_within(group, QUERY_DEADLINE, QUERY_DEADLINE, |mut c, _| {
                let req = req.clone();
                async move { c.query(req).await.map(|r| r.into_inner()) }
            })
            .await?;
        ShardReply::try_from(reply).map_err(|e| ClusterError::Internal(format!("group {group}: {e}")))
    }

    /// What a query plan would read on its group, estimated by the group's leader from segment
    /// metadata without scanning (a read: safe to retry). A node of a version without
    /// estimates (during a rolling upgrade) counts as reading nothing.
    pub async fn estimate(&self, query: ShardQuery) -> Result<Cost, ClusterError> {
        let group = query.group;
        let req = sextant_proto::QueryRequest::from(query);
        let cost = self
            .on_leader_within(group, QUERY_DEADLINE, QUERY_DEADLINE, |mut c, _| {
                let req = req.clone();
                async move {
                    match c.estimate(req).await {
                        Ok(r) => Ok(Some(r.into_inner())),
                        Err(s) if s.code() == Code::Unimplemented => Ok(None),
                        Err(s) => Err(s),
                    }
                }
            })
            .await?;
        Ok(cost.map(Cost::from).unwrap_or_default())
    }

    pub async fn meta_write<R: serde::de::DeserializeOwned>(&self, command: &MetaCommand) -> Result<R, ClusterError> {
        let json = serde_json::to_vec(command).map_err(|e| ClusterError::Internal(e.to_string()))?;
        let reply = self
            .on_leader(META_GROUP, |mut c| {
                let req = MetaRequest { json: json.clone() };
                async move { c.meta_write(req).await.map(|r| r.into_inner().json) }
            })
            .await?;
        serde_json::from_slice(&reply).map_err(|e| ClusterError::Internal(e.to_string()))
    }

    pub async fn meta_read<R: serde::de::DeserializeOwned>(&self, query: &MetaQuery) -> Result<R, ClusterError> {
        let json = serde_json::to_vec(query).map_err(|e| ClusterError::Internal(e.to_string()))?;
        let reply = self
            .on_leader(META_GROUP, |mut c| {
                let req = MetaRequest { json: json.clone() };
                async move { c.meta_read(req).await.map(|r| r.into_inner().json) }
            })
            .await?;
        serde_json::from_slice(&reply).map_err(|e| ClusterError::Internal(e.to_string()))
    }

    pub fn shard_count(&self) -> u32 {
        self.topology.read().unwrap().shard_count
    }
}
