//! A storage node: the Raft groups it hosts, their shared log, and the gRPC server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Config, SnapshotPolicy};
use sextant_proto::client::{Channels, MAX_MESSAGE_BYTES};
use sextant_proto::raft_server::RaftServer;
use sextant_proto::storage_server::StorageServer;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;

use crate::log_store::LogDb;
use crate::meta::MetaState;
use crate::metrics::NodeMetrics;
use crate::network::{AddressBook, Network};
use crate::service::{secret_check, RaftService, StorageService};
use crate::shard::SegmentShard;
use crate::state_machine::{GroupStateMachine, GroupStore, SharedState, SnapshotEvent, Whole};
use crate::types::{GroupId, NodeId, Raft, META_GROUP};

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
}

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

pub struct NodeHost {
    pub config: NodeConfig,
    pub meta: Option<Group<Whole<MetaState>>>,
    pub shards: BTreeMap<GroupId, Group<SegmentShard>>,
    pub metrics: Arc<NodeMetrics>,
    pub addresses: AddressBook,
    /// Channels to peers (Raft traffic and node-to-node storage calls).
    pub channels: Arc<Channels>,
    rafts: BTreeMap<GroupId, Raft>,
}

/// A started node; dropping it does not stop it, call [`RunningNode::shutdown`].
pub struct RunningNode {
    pub host: Arc<NodeHost>,
    pub addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningNode {
    pub async fn shutdown(self) {
        for raft in self.host.rafts.values() {
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
        heartbeat_interval: 250,
        election_timeout_min: 1500,
        election_timeout_max: 3000,
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
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        // A node started on port 0 (embedded mode) is reached at the port it actually got.
        if let Some(own) = config.peers.get_mut(&config.id) {
            if own.ends_with(":0") {
                *own = addr.to_string();
            }
        }
        std::fs::create_dir_all(&config.data_dir)?;
        let log_db = LogDb::open(&config.data_dir.join("raft-log"), metrics.clone())?;
        let channels = Arc::new(Channels::new(&config.cluster_secret).map_err(anyhow::Error::msg)?);
        let addresses: AddressBook = Arc::new(std::sync::RwLock::new(config.peers.clone()));
        let node_ids: Vec<NodeId> = config.peers.keys().copied().collect();

        let mut meta = None;
        let mut shards = BTreeMap::new();
        let mut rafts = BTreeMap::new();
        let mut to_initialize = Vec::new();
        for group in 0..=config.shards as GroupId {
            let replicas = placement(group, &node_ids, config.replication_factor);
            if !replicas.contains(&config.id) {
                continue;
            }
            let dir = config.data_dir.join("groups").join(group.to_string());
            let network = Network::new(group, channels.clone(), addresses.clone());
            let raft = if group == META_GROUP {
                let state = Whole::open(&dir, MetaState::default())?;
                let g = start_group(&config, group, &dir, network, &log_db, &metrics, state).await?;
                let raft = g.raft.clone();
                meta = Some(g);
                raft
            } else {
                let state = SegmentShard::open(&dir)?;
                let g = start_group(&config, group, &dir, network, &log_db, &metrics, state).await?;
                let raft = g.raft.clone();
                shards.insert(group, g);
                raft
            };
            if replicas[0] == config.id {
                let members: BTreeMap<NodeId, BasicNode> =
                    replicas.iter().map(|id| (*id, BasicNode::new(config.peers[id].clone()))).collect();
                to_initialize.push((raft.clone(), members));
            }
            rafts.insert(group, raft);
        }

        let host = Arc::new(NodeHost { config, meta, shards, metrics, addresses, channels, rafts });
        let check = secret_check(&host.config.cluster_secret);
        let raft_svc = InterceptedService::new(
            RaftServer::new(RaftService::new(host.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            check.clone(),
        );
        let storage_svc = InterceptedService::new(
            StorageServer::new(StorageService::new(host.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            check,
        );
        let server = tokio::spawn(async move {
            // The builder's `tcp_nodelay` only applies to listeners tonic binds itself: on
            // these accepted sockets Nagle's algorithm would hold a reply's last small frame
            // until the peer's delayed ACK (~40 ms on every RPC).
            let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let result = tonic::transport::Server::builder()
                .add_service(raft_svc)
                .add_service(storage_svc)
                .serve_with_incoming(incoming)
                .await;
            if let Err(e) = result {
                tracing::error!(error = %e, "gRPC server stopped");
            }
        });

        for (raft, members) in to_initialize {
            if !raft.is_initialized().await? {
                if let Err(e) = raft.initialize(members).await {
                    tracing::warn!(error = %e, "initializing group");
                }
            }
        }
        tracing::info!(node = host.config.id, %addr, groups = host.rafts.len(), "storage node started");
        let background = vec![
            crate::flusher::spawn(host.clone()),
            crate::compactor::spawn(host.clone()),
            crate::retention::spawn(host.clone()),
        ];
        Ok(RunningNode { host, addr, server, background })
    }

    pub fn raft(&self, group: GroupId) -> Option<&Raft> {
        self.rafts.get(&group)
    }

    pub fn rafts(&self) -> impl Iterator<Item = (&GroupId, &Raft)> {
        self.rafts.iter()
    }

    /// True when every hosted group has a known leader.
    pub fn ready(&self) -> bool {
        self.rafts.values().all(|r| r.metrics().borrow().current_leader.is_some())
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
    let raft =
        Raft::new(config.id, raft_config(group, config.snapshot_every)?, network, log_db.group(group), sm).await?;
    Ok(Group { raft, state })
}
