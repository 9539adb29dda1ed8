//! A storage node: the Raft groups it hosts, their shared log, and the gRPC server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Config, SnapshotPolicy};
use sextant_proto::client::{Channels, MAX_MESSAGE_BYTES};
use sextant_proto::internal_tls::InternalTls;
use sextant_proto::raft_server::RaftServer;
use sextant_proto::storage_server::StorageServer;
use sextant_proto::ClusterInfoRequest;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;

use crate::identity::{Identity, Standing};
use crate::log_store::LogDb;
use crate::meta::MetaState;
use crate::metrics::NodeMetrics;
use crate::network::{AddressBook, Network};
use crate::service::{secret_check, RaftService, StorageService};
use crate::shard::SegmentShard;
use crate::state_machine::{GroupStateMachine, GroupStore, SharedState, SnapshotEvent, Whole};
use crate::types::{GroupId, NodeId, Raft, META_GROUP};
use sextant_model::peer::PeerRole;

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: NodeId,
    /// Address the gRPC server binds (port 0 picks a free port).
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Every node of the cluster, this one included: id -> address peers use to reach it.
    pub peers: BTreeMap<NodeId, String>,
    pub shards: u32,
    pub replication_factor: usize,
    pub cluster_secret: String,
    /// A data group snapshots its state (and purges its log) every this many entries.
    pub snapshot_every: u64,
    /// Join a running cluster (reached through `peers`) instead of forming one: the node starts
    /// without replicas, registers with meta as joining, and receives replicas once the member
    /// set includes it. Without it, a node on an empty data directory takes its replicas from
    /// the static placement over `peers` (the initial member set).
    pub join: bool,
    /// Where time is read: data expiry and compaction.
    pub clock: sextant_model::Clock,
    /// Bytes the queries running on this node may hold at once in their per-user and
    /// per-group tables ([`crate::query::MemoryPool`]).
    pub query_memory_bytes: u64,
    /// Bytes of rows this node's shards may hold applied and not yet flushed, all together:
    /// past it the largest buffer flushes early (`shard::background::flusher`).
    pub buffer_memory_bytes: u64,
    /// Where this node's failure zone comes from; registered with meta, which spreads each
    /// group's replicas over zones.
    pub zone: crate::zone::ZoneSource,
    /// Mutual TLS on the gRPC server and on every call to peers; `None`: plain HTTP/2.
    pub internal_tls: Option<sextant_proto::internal_tls::InternalTlsFiles>,
}

/// The most [`default_query_memory_bytes`] gives queries: 4 GiB.
pub const DEFAULT_QUERY_MEMORY_BYTES: u64 = 4 << 30;

/// The most [`default_buffer_memory_bytes`] gives shard buffers: 2 GiB.
pub const DEFAULT_BUFFER_MEMORY_BYTES: u64 = 2 << 30;

/// The default of [`NodeConfig::query_memory_bytes`]: a quarter of the memory limit of the
/// node's container, at most [`DEFAULT_QUERY_MEMORY_BYTES`], so that a query refused for
/// memory is refused before the kernel kills the node (docs/ARCHITECTURE.md, "Memory of a
/// storage node").
pub fn default_query_memory_bytes() -> u64 {
    quarter_within(container_memory_limit(), DEFAULT_QUERY_MEMORY_BYTES)
}

/// The default of [`NodeConfig::buffer_memory_bytes`]: a quarter of the memory limit of the
/// node's container, at most [`DEFAULT_BUFFER_MEMORY_BYTES`].
pub fn default_buffer_memory_bytes() -> u64 {
    quarter_within(container_memory_limit(), DEFAULT_BUFFER_MEMORY_BYTES)
}

/// The memory limit of the node's container (cgroup v2 `memory.max`, or v1
/// `memory.limit_in_bytes`), if any.
fn container_memory_limit() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .and_then(|text| memory_limit(&text))
}

/// A cgroup memory limit file's bytes; `None` for no limit (`max`, or v1's near-2^63).
fn memory_limit(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&bytes| bytes < 1 << 60)
}

/// A quarter of `limit`, at most `most`; `most` without a limit.
fn quarter_within(limit: Option<u64>, most: u64) -> u64 {
    limit.map_or(most, |bytes| (bytes / 4).min(most))
}

pub(crate) const GROUPS_DIR: &str = "groups";
pub(crate) const RAFT_LOG_DIR: &str = "raft-log";
const DROPPED_SUFFIX: &str = ".dropped";

/// A ticker for a background loop: the first tick at once, later ones `period` apart, and a
/// late tick delays the next rather than bunching up.
pub(crate) fn periodic(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// The replicas of `group`: `replication_factor` distinct nodes, spread round-robin so that
/// leadership and load start out balanced.
pub fn placement(group: GroupId, nodes: &[NodeId], replication_factor: usize) -> Vec<NodeId> {
    let n = nodes.len();
    let rf = replication_factor.clamp(1, n.max(1));
    (0..rf).map(|k| nodes[(group as usize + k) % n]).collect()
}

pub struct Group<S> {
    pub raft: Raft,
    pub state: SharedState<S>,
}

// Cheap handles (both are `Arc`s inside): callers take a copy and release the host's lock.
impl<S> Clone for Group<S> {
    fn clone(&self) -> Self {
        Self { raft: self.raft.clone(), state: self.state.clone() }
    }
}

#[derive(Default)]
struct Groups {
    meta: Option<Group<Whole<MetaState>>>,
    shards: BTreeMap<GroupId, Group<SegmentShard>>,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("group {0} does not exist in this cluster")]
    NoSuchGroup(GroupId),
    #[error("starting group {group}: {source}")]
    Start { group: GroupId, source: anyhow::Error },
    #[error("removing the replica of group {group}: {source}")]
    Drop { group: GroupId, source: anyhow::Error },
}

pub struct NodeHost {
    pub config: NodeConfig,
    pub metrics: Arc<NodeMetrics>,
    pub addresses: AddressBook,
    /// Channels to peers (Raft traffic and node-to-node storage calls).
    pub channels: Arc<Channels>,
    /// The replicas hosted now: placement adds and removes them while the node runs.
    groups: std::sync::RwLock<Groups>,
    pub(crate) log_db: Arc<LogDb>,
    /// Serializes creating and removing replicas, so a Raft message arriving for a group being
    /// removed waits and then starts from an empty replica.
    lifecycle: tokio::sync::Mutex<()>,
    /// Set once meta has recorded this node (see `placement`).
    pub registered: std::sync::atomic::AtomicBool,
    /// What queries hold in memory on this node, against `config.query_memory_bytes`.
    pub query_memory: Arc<crate::query::MemoryPool>,
    /// Refuses new writes while the data directory's disk is above its high-water mark.
    pub disk: Arc<crate::disk::DiskGuard>,
    /// Room kept on that disk for this node's own restart.
    pub reserve: crate::disk::Reserve,
    /// Bounds the writes each shard has in flight and unflushed (`crate::admission`).
    pub writes: crate::admission::WriteAdmission,
    /// This data directory's incarnation and whether it may serve Raft under `config.id`.
    pub identity: Identity,
    /// Other nodes' incarnations as meta records them, refreshed by `crate::placement`.
    pub peer_incarnations: crate::identity::PeerIncarnations,
    /// What waits until meta confirms this fresh directory's identity.
    deferred: std::sync::Mutex<Deferred>,
    /// The cluster's initial member set as this node knows it (`crate::bootstrap`); empty:
    /// not known.
    initial_members: std::sync::RwLock<Vec<NodeId>>,
}

/// Start-up work of a fresh directory in a running cluster, done once meta confirms its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deferred {
    Nothing,
    /// The static initial placement, then the `bootstrapped` marker (a static member starting
    /// late).
    StaticPlacement,
    /// Only the marker: a replaced node gets its replicas from the leaders.
    Marker,
}

/// A started node; dropping it does not stop it, call [`RunningNode::shutdown`].
pub struct RunningNode {
    pub host: Arc<NodeHost>,
    pub addr: SocketAddr,
    /// Its gRPC services, for a router in the same process (`Channels::with_in_process`).
    pub services: tonic::service::Routes,
    /// Its storage service, which that router calls directly for writes (also through
    /// `Channels::with_in_process`).
    pub storage: Arc<StorageService>,
    server: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

/// A group that stops again this soon after being started again stops the process.
const RESTART_WINDOW: Duration = Duration::from_secs(60);

impl RunningNode {
    /// Starts again, in this process, a group whose Raft stopped on an error: openraft stops a
    /// group for good on a storage error, and on a race of its own (a snapshot sent on a
    /// replication stream that a higher vote had just ended). Resolves, after releasing the disk
    /// reserve (`crate::disk::Reserve`), with what stopped a group when that is not enough: the
    /// Raft log refuses writes (after a failed write or fsync, as on a disk full to the last
    /// byte), or the same group stopped again within [`RESTART_WINDOW`]. Its caller exits, and
    /// the supervisor (kubelet, systemd) starts the process again.
    pub async fn supervise(&self) -> String {
        let mut restarted: BTreeMap<GroupId, tokio::time::Instant> = BTreeMap::new();
        let mut tick = periodic(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let stopped: Vec<(GroupId, String)> = self
                .host
                .rafts()
                .into_iter()
                .filter_map(|(group, raft)| {
                    let metrics = raft.metrics();
                    let state = metrics.borrow().running_state.clone();
                    match state {
                        Err(openraft::error::Fatal::Stopped) => None,
                        // A core that panicked reports nothing: its metrics' sender is gone.
                        Ok(()) if metrics.has_changed().is_err() => Some((group, "its Raft core panicked".into())),
                        Ok(()) => None,
                        Err(e) => Some((group, e.to_string())),
                    }
                })
                .collect();
            for (group, reason) in stopped {
                let again = restarted.get(&group).is_some_and(|at| at.elapsed() < RESTART_WINDOW);
                let reason = format!("group {group}: {reason}");
                let give_up = again || {
                    // A synced write: off the runtime's threads.
                    let log = self.host.log_db.clone();
                    !tokio::task::spawn_blocking(move || log.writable()).await.unwrap_or(false)
                };
                if give_up {
                    self.host.reserve.release();
                    return reason;
                }
                tracing::error!(group, %reason, "a Raft group stopped on an error: starting it again");
                self.host.metrics.group_restarts.inc();
                if let Err(e) = self.host.restart_group(group).await {
                    self.host.reserve.release();
                    return format!("{reason}; starting it again: {e}");
                }
                restarted.insert(group, tokio::time::Instant::now());
            }
        }
    }

    pub async fn shutdown(self) {
        for (_, raft) in self.host.rafts() {
            let _ = raft.shutdown().await;
        }
        self.server.abort();
        self.background.iter().for_each(|t| t.abort());
    }
}

fn raft_config(group: GroupId, snapshot_every: u64) -> anyhow::Result<Arc<Config>> {
    // Meta is small and changes rarely: snapshot it often so restarts replay little.
    let snapshot_every = if group == META_GROUP { 1000 } else { snapshot_every.max(1) };
    let config = Config {
        cluster_name: format!("sextant-group-{group}"),
        // Failover within 3 s (docs/RELIABILITY.md, "Failover"): a follower stands for election
        // after hearing nothing for the leader lease (openraft: election_timeout_max) plus its
        // own timeout, 1.1 to 1.4 s, checked every 1.5 heartbeat intervals. The heartbeat
        // interval is also openraft's deadline of each AppendEntries, so not shorter.
        heartbeat_interval: 200,
        election_timeout_min: 400,
        election_timeout_max: 700,
        // Bounded appends: each entry is a whole sub-batch.
        max_payload_entries: 64,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every),
        // Keep a tail so a briefly lagging follower catches up from the log, not a snapshot.
        max_in_snapshot_log_to_keep: snapshot_every / 10,
        ..Default::default()
    };
    Ok(Arc::new(config.validate()?))
}

impl NodeHost {
    pub async fn start(mut config: NodeConfig, metrics: Arc<NodeMetrics>) -> anyhow::Result<RunningNode> {
        anyhow::ensure!(config.id > 0, "node ids start at 1");
        anyhow::ensure!(config.peers.contains_key(&config.id), "node {} is not in the peer list", config.id);
        sextant_proto::client::check_cluster_secret(&config.cluster_secret).map_err(anyhow::Error::msg)?;
        // Bad certificate files stop the start here, before anything is bound.
        let tls = config.internal_tls.as_ref().map(InternalTls::load).transpose()?;
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        // A node started on port 0 (embedded mode) is reached at the port it actually got.
        if let Some(own) = config.peers.get_mut(&config.id) {
            if own.ends_with(":0") {
                *own = addr.to_string();
            }
        }
        crate::durable::create_private_dir(&config.data_dir)?;
        let log_db = LogDb::open(&config.data_dir.join(RAFT_LOG_DIR), metrics.clone())?;
        let channels =
            Arc::new(Channels::new(&config.cluster_secret).map_err(anyhow::Error::msg)?.with_tls(tls.clone()));
        let addresses: AddressBook = Arc::new(std::sync::RwLock::new(config.peers.clone()));
        let node_ids: Vec<NodeId> = config.peers.keys().copied().collect();
        // Once bootstrapped, a start opens exactly the replicas that exist on disk (placement
        // may have moved some away, or brought new ones).
        let recorded = crate::bootstrap::read(&config.data_dir)?;
        let bootstrapped = recorded.is_some();
        let had_data =
            bootstrapped || std::fs::read_dir(config.data_dir.join(GROUPS_DIR)).is_ok_and(|mut d| d.next().is_some());
        let identity = Identity::open(&config.data_dir, had_data)?;
        let disk =
            crate::disk::DiskGuard::new(Box::new(crate::disk::Statvfs(config.data_dir.clone())), Default::default());
        let host = Arc::new(NodeHost {
            disk,
            reserve: crate::disk::Reserve::new(&config.data_dir),
            writes: Default::default(),
            identity,
            peer_incarnations: Default::default(),
            deferred: std::sync::Mutex::new(Deferred::Nothing),
            query_memory: crate::query::MemoryPool::new(config.query_memory_bytes),
            config,
            metrics,
            addresses,
            channels,
            groups: Default::default(),
            log_db,
            lifecycle: tokio::sync::Mutex::new(()),
            registered: Default::default(),
            initial_members: std::sync::RwLock::new(recorded.unwrap_or_default()),
        });
        let config = &host.config;

        // Replicas on disk, whatever placed them; finish removals a crash interrupted.
        let groups_dir = config.data_dir.join(GROUPS_DIR);
        crate::durable::create_private_dir(&groups_dir)?;
        let mut on_disk = Vec::new();
        for entry in std::fs::read_dir(&groups_dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(group) = name.strip_suffix(DROPPED_SUFFIX).and_then(|g| g.parse::<GroupId>().ok()) {
                host.log_db.drop_group(group)?;
                std::fs::remove_dir_all(groups_dir.join(&name))?;
            } else if let Ok(group) = name.parse::<GroupId>() {
                on_disk.push(group);
            }
        }
        for group in on_disk {
            host.host_group(group).await?;
        }

        let mut to_initialize = Vec::new();
        let mut deferred = false;
        if !bootstrapped {
            let probe = if config.join { Default::default() } else { probe_peers(&host).await };
            // Peers run groups with this id among the voters that have had a leader: the id
            // may have voted with a lost disk. Groups that never had one (a cluster forming
            // while this node starts) need its vote and it cannot have given any.
            let used = probe.active.iter().any(|g| probe.running.get(g).is_some_and(|v| v.contains(&config.id)));
            if host.identity.fresh && (config.join || used) {
                // No Raft until meta confirms the id (`crate::placement` does).
                host.identity.set(Standing::Unverified);
                deferred = !config.join;
                *host.deferred.lock().unwrap() = if deferred { Deferred::StaticPlacement } else { Deferred::Nothing };
                if deferred {
                    // Groups no peer runs yet are forming with this start: this directory cannot
                    // have voted in them, and they may need it (meta among them) to form at all.
                    to_initialize = host.static_replicas(&probe, &node_ids, true).await?;
                }
                tracing::info!(
                    node = config.id,
                    incarnation = %crate::identity::hex(host.identity.incarnation),
                    "empty data directory in a running cluster: waiting for meta to confirm this node id"
                );
            } else if !config.join {
                to_initialize = host.static_replicas(&probe, &node_ids, false).await?;
            }
        }

        let secret = &host.config.cluster_secret;
        let raft_svc = InterceptedService::new(
            RaftServer::new(RaftService::new(host.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            secret_check(secret, &[PeerRole::Node]),
        );
        let storage = Arc::new(StorageService::new(host.clone()));
        let storage_svc = InterceptedService::new(
            StorageServer::from_arc(storage.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            secret_check(secret, &PeerRole::ALL),
        );
        let services = tonic::service::Routes::new(raft_svc).add_service(storage_svc).prepare();
        let served = services.clone();
        let tls_reload = tls.as_ref().map(InternalTls::spawn_reload);
        let server = tokio::spawn(async move {
            let builder = tonic::transport::Server::builder().add_routes(served);
            let result = match tls {
                Some(tls) => {
                    let (incoming, accept) = tls.incoming(listener);
                    tokio::select! {
                        r = builder.serve_with_incoming(incoming) => r,
                        () = accept => Ok(()),
                    }
                }
                None => {
                    // The builder's `tcp_nodelay` only applies to listeners tonic binds itself:
                    // on these accepted sockets Nagle's algorithm would hold a reply's last
                    // small frame until the peer's delayed ACK (~40 ms on every RPC).
                    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
                    builder.serve_with_incoming(incoming).await
                }
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "gRPC server stopped");
            }
        });

        initialize(to_initialize).await?;
        if !bootstrapped && !deferred {
            crate::bootstrap::record(&host.config.data_dir, &host.initial_members())?;
        }
        tracing::info!(node = host.config.id, %addr, groups = host.rafts().len(), "storage node started");
        let mut background = vec![
            crate::shard::background::flusher::spawn(host.clone()),
            crate::shard::background::compactor::spawn(host.clone()),
            crate::shard::background::expiry::spawn(host.clone()),
            crate::shard::background::usage::spawn(host.clone()),
            crate::placement::spawn(host.clone()),
            crate::disk::spawn(host.clone()),
        ];
        background.extend(tls_reload);
        Ok(RunningNode { host, addr, services, storage, server, background })
    }

    /// The replicas a node on an empty directory takes from the static placement over the
    /// initial member set (`crate::bootstrap`), except for groups a peer already runs: there it
    /// follows the membership that peer reports. A node added to a running cluster takes
    /// none. Returns the groups to initialize.
    async fn static_replicas(
        &self,
        probe: &crate::bootstrap::Probe,
        node_ids: &[NodeId],
        only_forming: bool,
    ) -> anyhow::Result<Vec<(Raft, BTreeMap<NodeId, BasicNode>)>> {
        let config = &self.config;
        let role = crate::bootstrap::role(config.id, node_ids, probe);
        *self.initial_members.write().unwrap() = role.members().to_vec();
        let crate::bootstrap::Role::Initial { members } = role else {
            tracing::info!(
                node = config.id,
                initial = ?role.members(),
                running = ?probe.running.keys().collect::<Vec<_>>(),
                "not an initial member of the running cluster: forming nothing, waiting for placement"
            );
            return Ok(Vec::new());
        };
        let mut to_initialize = Vec::new();
        for group in 0..=config.shards as GroupId {
            let replicas = placement(group, &members, config.replication_factor);
            let running = probe.running.get(&group);
            let host_it = running.map_or(replicas.contains(&config.id), |voters| voters.contains(&config.id));
            if !host_it || (only_forming && running.is_some()) {
                continue;
            }
            if only_forming {
                self.identity.admit_forming(group);
            }
            let raft = self.host_group(group).await?;
            if running.is_none() && replicas[0] == config.id {
                let mut voters = BTreeMap::new();
                for id in &replicas {
                    let address = self.addresses.read().unwrap().get(id).cloned();
                    let address = address.ok_or_else(|| anyhow::anyhow!("initial member {id} is not in --peers"))?;
                    voters.insert(*id, BasicNode::new(address));
                }
                to_initialize.push((raft, voters));
            }
        }
        Ok(to_initialize)
    }

    /// The cluster's initial member set as this node knows it; empty: not known.
    pub fn initial_members(&self) -> Vec<NodeId> {
        self.initial_members.read().unwrap().clone()
    }

    /// Sets the standing meta's view gives this incarnation, logging changes. A fresh directory
    /// that meta confirms as a new id (a static member starting late) takes its static
    /// placement now; one that was replaced gets its replicas from the leaders.
    pub(crate) async fn confirm_identity(&self, view: &sextant_model::meta::ClusterView) -> anyhow::Result<()> {
        let standing = Standing::from_view(view, self.config.id, self.identity.incarnation);
        if self.identity.set(standing.clone()) {
            self.log_standing(&standing);
        }
        let pending = *self.deferred.lock().unwrap();
        match standing {
            Standing::NeedsReplacement { .. } | Standing::Replacing { .. } if pending == Deferred::StaticPlacement => {
                *self.deferred.lock().unwrap() = Deferred::Marker;
            }
            Standing::Verified if pending != Deferred::Nothing => {
                // Retried at the next view if this fails: hosting and initializing are idempotent.
                if pending == Deferred::StaticPlacement {
                    let node_ids: Vec<NodeId> = self.config.peers.keys().copied().collect();
                    let probe = probe_peers(self).await;
                    initialize(self.static_replicas(&probe, &node_ids, false).await?).await?;
                }
                crate::bootstrap::record(&self.config.data_dir, &self.initial_members())?;
                *self.deferred.lock().unwrap() = Deferred::Nothing;
            }
            _ => {}
        }
        Ok(())
    }

    fn log_standing(&self, standing: &Standing) {
        let me = self.config.id;
        let mine = crate::identity::hex(self.identity.incarnation);
        match standing {
            Standing::NeedsReplacement { known } => tracing::error!(
                node = me,
                incarnation = %mine,
                known = %crate::identity::hex(*known),
                "this node restarted on an empty data directory under an id the cluster knows: it does not \
                 vote and needs replacement (POST /admin/v1/cluster/replace, docs/RELIABILITY.md)"
            ),
            Standing::Replacing { groups } => {
                tracing::warn!(node = me, incarnation = %mine, waiting = groups.len(), "being replaced")
            }
            Standing::Verified => tracing::info!(node = me, incarnation = %mine, "node id confirmed by meta"),
            Standing::Unverified => {}
        }
    }

    pub fn raft(&self, group: GroupId) -> Option<Raft> {
        let groups = self.groups.read().unwrap();
        if group == META_GROUP {
            groups.meta.as_ref().map(|g| g.raft.clone())
        } else {
            groups.shards.get(&group).map(|g| g.raft.clone())
        }
    }

    /// Every hosted group's Raft, meta first.
    pub fn rafts(&self) -> Vec<(GroupId, Raft)> {
        let groups = self.groups.read().unwrap();
        let meta = groups.meta.iter().map(|g| (META_GROUP, g.raft.clone()));
        meta.chain(groups.shards.iter().map(|(id, g)| (*id, g.raft.clone()))).collect()
    }

    pub fn meta(&self) -> Option<Group<Whole<MetaState>>> {
        self.groups.read().unwrap().meta.clone()
    }

    pub fn shard(&self, group: GroupId) -> Option<Group<SegmentShard>> {
        self.groups.read().unwrap().shards.get(&group).cloned()
    }

    pub fn shards(&self) -> Vec<(GroupId, Group<SegmentShard>)> {
        self.groups.read().unwrap().shards.iter().map(|(id, g)| (*id, g.clone())).collect()
    }

    fn group_dir(&self, group: GroupId) -> PathBuf {
        self.config.data_dir.join(GROUPS_DIR).join(group.to_string())
    }

    /// The replica of `group` on this node, started (empty, uninitialized) if there is none:
    /// a leader that added this node as a learner sends it the log or a snapshot.
    pub async fn host_group(&self, group: GroupId) -> Result<Raft, HostError> {
        if let Some(raft) = self.raft(group) {
            return Ok(raft);
        }
        if group > self.config.shards as GroupId {
            return Err(HostError::NoSuchGroup(group));
        }
        let _lifecycle = self.lifecycle.lock().await;
        if let Some(raft) = self.raft(group) {
            return Ok(raft);
        }
        let dir = self.group_dir(group);
        let sender = crate::identity::sender_header(self.config.id, self.identity.incarnation)
            .parse()
            .expect("digits, a slash and hex digits are valid metadata");
        let network = Network::new(group, self.channels.clone(), self.addresses.clone(), sender);
        let start = async {
            if group == META_GROUP {
                let state = Whole::open(&dir, MetaState::default())?;
                let g = start_group(&self.config, group, &dir, network, &self.log_db, &self.metrics, state).await?;
                let raft = g.raft.clone();
                self.groups.write().unwrap().meta = Some(g);
                Ok(raft)
            } else {
                let state = SegmentShard::open(&dir)?.with_clock(self.config.clock.clone());
                let g = start_group(&self.config, group, &dir, network, &self.log_db, &self.metrics, state).await?;
                let raft = g.raft.clone();
                self.groups.write().unwrap().shards.insert(group, g);
                Ok(raft)
            }
        };
        let raft = start.await.map_err(|source| HostError::Start { group, source })?;
        tracing::info!(group, "hosting a replica");
        Ok(raft)
    }

    /// Takes `group`'s replica out of the hosted ones and stops it (the caller holds
    /// `lifecycle`): its Raft, then a shard's flush and compaction, which run off Raft's tasks
    /// and must be over before its directory is opened again or deleted. `None` if not hosted.
    async fn unhost(&self, group: GroupId) -> Option<Result<(), tokio::task::JoinError>> {
        let (raft, shard) = {
            let mut groups = self.groups.write().unwrap();
            if group == META_GROUP {
                (groups.meta.take()?.raft, None)
            } else {
                let g = groups.shards.remove(&group)?;
                (g.raft, Some(g.state))
            }
        };
        let stopped = raft.shutdown().await;
        if let Some(shard) = shard {
            let close = shard.read().unwrap().state.closer();
            let _ = tokio::task::spawn_blocking(close).await;
        }
        Some(stopped)
    }

    /// Starts `group`'s replica again from what is on disk, as a process restart would for this
    /// group alone (`RunningNode::supervise`).
    async fn restart_group(&self, group: GroupId) -> Result<Raft, HostError> {
        {
            let _lifecycle = self.lifecycle.lock().await;
            // It has stopped already: this only waits for its tasks.
            let _ = self.unhost(group).await;
        }
        self.host_group(group).await
    }

    /// Stops and deletes this node's replica of `group`, after its removal from the group's
    /// membership is committed. The directory is renamed first, so a crash half-way is finished
    /// at the next start instead of reopening a replica with a forgotten log.
    pub async fn drop_group(&self, group: GroupId) -> Result<(), HostError> {
        let _lifecycle = self.lifecycle.lock().await;
        let err = |e: anyhow::Error| HostError::Drop { group, source: e };
        let Some(stopped) = self.unhost(group).await else { return Ok(()) };
        stopped.map_err(|e| err(anyhow::anyhow!("{e}")))?;
        let dir = self.group_dir(group);
        let dropped = dir.with_file_name(format!("{group}{DROPPED_SUFFIX}"));
        std::fs::rename(&dir, &dropped).map_err(|e| err(e.into()))?;
        crate::durable::sync_dir(&self.config.data_dir.join(GROUPS_DIR)).map_err(|e| err(e.into()))?;
        self.log_db.drop_group(group).map_err(|e| err(anyhow::anyhow!("{e}")))?;
        std::fs::remove_dir_all(&dropped).map_err(|e| err(e.into()))?;
        tracing::info!(group, "removed the replica");
        Ok(())
    }

    /// True when meta knows this node under its incarnation and every hosted group has a known
    /// leader.
    pub fn ready(&self) -> bool {
        self.registered.load(std::sync::atomic::Ordering::Relaxed)
            && self.identity.standing() == Standing::Verified
            && self.rafts().iter().all(|(_, r)| r.metrics().borrow().current_leader.is_some())
    }

    /// Waits until every hosted group has a leader, or the timeout passes.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.ready() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

async fn initialize(groups: Vec<(Raft, BTreeMap<NodeId, BasicNode>)>) -> anyhow::Result<()> {
    for (raft, members) in groups {
        if !raft.is_initialized().await? {
            if let Err(e) = raft.initialize(members).await {
                tracing::warn!(error = %e, "initializing group");
            }
        }
    }
    Ok(())
}

/// What the reachable peers report: the groups they host and the initial member set.
async fn probe_peers(host: &NodeHost) -> crate::bootstrap::Probe {
    let peers: Vec<String> =
        host.config.peers.iter().filter(|(id, _)| **id != host.config.id).map(|(_, a)| a.clone()).collect();
    let probes = peers.iter().map(|addr| async move {
        let mut client = host.channels.storage(addr).ok()?;
        let info = tokio::time::timeout(Duration::from_secs(2), client.cluster_info(ClusterInfoRequest {})).await;
        host.channels.forget(addr);
        Some(info.ok()?.ok()?.into_inner())
    });
    let mut probe = crate::bootstrap::Probe::default();
    for info in futures::future::join_all(probes).await.into_iter().flatten() {
        if !info.initial_members.is_empty() {
            probe.initial.push(info.initial_members);
        }
        probe.retired.extend(info.retired_members);
        for g in info.groups.into_iter().filter(|g| !g.voters.is_empty()) {
            if g.leader != 0 || g.applied > 0 {
                probe.active.insert(g.group);
            }
            probe.running.insert(g.group, g.voters);
        }
    }
    probe
}

async fn start_group<S: GroupStore>(
    config: &NodeConfig,
    group: GroupId,
    dir: &Path,
    network: Network,
    log_db: &Arc<LogDb>,
    metrics: &Arc<NodeMetrics>,
    state: S,
) -> anyhow::Result<Group<S>> {
    let m = metrics.clone();
    let sm = GroupStateMachine::new(
        dir,
        state,
        Arc::new(move |event| match event {
            SnapshotEvent::Built(took) => {
                m.snapshots_built.inc();
                m.flush_seconds.observe(took.as_secs_f64());
            }
            SnapshotEvent::Installed => {
                m.snapshots_installed.inc();
            }
        }),
    );
    let state = sm.shared();
    let log = log_db.group(group).purged_within(sm.durable());
    let raft = Raft::new(config.id, raft_config(group, config.snapshot_every)?, network, log, sm).await?;
    Ok(Group { raft, state })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_buffers_get_a_quarter_of_the_containers_memory_limit_each_capped() {
        assert_eq!(memory_limit("max\n"), None, "cgroup v2 without a limit");
        assert_eq!(memory_limit("9223372036854771712\n"), None, "cgroup v1 without a limit");
        assert_eq!(memory_limit("4294967296\n"), Some(4 << 30));
        assert_eq!(quarter_within(None, DEFAULT_QUERY_MEMORY_BYTES), 4 << 30);
        assert_eq!(
            quarter_within(Some(4 << 30), DEFAULT_QUERY_MEMORY_BYTES),
            1 << 30,
            "the chart's default limit of 4Gi"
        );
        assert_eq!(quarter_within(Some(64 << 30), DEFAULT_QUERY_MEMORY_BYTES), 4 << 30);
        assert_eq!(quarter_within(Some(64 << 30), DEFAULT_BUFFER_MEMORY_BYTES), 2 << 30);
    }
}
