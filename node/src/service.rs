//! gRPC services of a node: Raft transport (node <-> node) and the storage API (router -> node).
//! Both require the cluster secret and, over mutual TLS, a certificate of a role they admit.

use std::sync::Arc;
use std::time::Instant;

use openraft::error::{ClientWriteError, ForwardToLeader, RaftError};
use openraft::BasicNode;
use sextant_model::meta::{MetaCommand, MetaQuery};
use sextant_model::peer::PeerRole;
use sextant_proto::client::Authed;
use sextant_proto::convert::persist_row::Decoded;
use sextant_proto::raft_server::Raft as RaftRpc;
use sextant_proto::storage_client::StorageClient;
use sextant_proto::storage_server::Storage;
use sextant_proto::{
    write_request, ClusterInfoReply, ClusterInfoRequest, GetTraceReply, GetTraceRequest, GroupInfo, MetaReply,
    MetaRequest, NodeAddr, RaftReply, RaftRequest, WriteReply, WriteRequest, CLUSTER_SECRET_HEADER, LEADER_HEADER,
    OVERLOADED_HEADER, RELAY_HEADER,
};
use subtle::ConstantTimeEq;
use tonic::{Request, Response, Status};

use crate::host::{Group, NodeHost};
use crate::identity::RaftCall;
use crate::persist;
use crate::types::{Command, CommandResponse, GroupId, NodeId, Raft};

/// Metadata key of a `Query` answered from this replica's applied state, without the leader's
/// read barrier: how tests compare the replicas of a group (tests/nemesis.rs). Internal, like
/// every call here, behind the cluster secret.
pub const REPLICA_READ_HEADER: &str = "x-sextant-replica-read";

/// Server-side interceptor: constant-time comparison of the cluster secret. A request without
/// the header is refused, and so is every request when the expected secret is too short (the
/// node refuses to start with one; this holds whoever builds the server). Over mutual TLS the
/// client's certificate must name one of `roles` as well.
pub fn secret_check(
    secret: &str,
    roles: &'static [PeerRole],
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    let expected = secret.as_bytes().to_vec();
    let usable = sextant_proto::client::check_cluster_secret(secret).is_ok();
    move |req: Request<()>| {
        sextant_proto::internal_tls::check_role(req.extensions(), roles)?;
        let refused = || Status::unauthenticated("missing or wrong cluster secret");
        let given = req.metadata().get(CLUSTER_SECRET_HEADER).ok_or_else(refused)?;
        if usable && bool::from(given.as_bytes().ct_eq(&expected)) {
            Ok(req)
        } else {
            Err(refused())
        }
    }
}

fn bad(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

pub struct RaftService {
    host: Arc<NodeHost>,
}

impl RaftService {
    pub fn new(host: Arc<NodeHost>) -> Self {
        Self { host }
    }

    fn raft(&self, group: GroupId) -> Result<Raft, Status> {
        self.host.raft(group).ok_or_else(|| Status::not_found(format!("group {group} is not hosted here")))
    }

    /// Refuses Raft traffic this incarnation may not take part in, or that an incarnation the
    /// cluster does not know under its id sent (`crate::identity`).
    fn admit<T>(&self, req: &Request<T>, call: RaftCall, group: GroupId) -> Result<(), Status> {
        let sender = req.metadata().get(crate::identity::SENDER_HEADER).map(|v| v.to_str().unwrap_or("?"));
        self.host.peer_incarnations.admits(sender, call).map_err(Status::failed_precondition)?;
        if self.host.identity.admits(call, group) {
            return Ok(());
        }
        Err(Status::failed_precondition(format!(
            "node {} (incarnation {}) is not confirmed under this id: {:?}",
            self.host.config.id,
            crate::identity::hex(self.host.identity.incarnation),
            self.host.identity.standing()
        )))
    }

    /// The replica a leader replicates to, started empty when this node has none: that is how
    /// a node added as a learner gets its replica (the log or a snapshot follows).
    async fn replica(&self, group: GroupId) -> Result<Raft, Status> {
        self.host.host_group(group).await.map_err(|e| match e {
            crate::host::HostError::NoSuchGroup(_) => Status::not_found(e.to_string()),
            e => Status::internal(e.to_string()),
        })
    }
}

fn reply(body: Vec<u8>) -> Result<Response<RaftReply>, Status> {
    Ok(Response::new(RaftReply { body: body.into() }))
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.admit(&req, RaftCall::Append, req.get_ref().group)?;
        let req = req.into_inner();
        let rpc = persist::decode_append_request(&req.body).map_err(bad)?;
        reply(persist::encode_append_response(&self.replica(req.group).await?.append_entries(rpc).await))
    }

    async fn vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.admit(&req, RaftCall::Vote, req.get_ref().group)?;
        let req = req.into_inner();
        let rpc = persist::decode_vote_request(&req.body).map_err(bad)?;
        reply(persist::encode_vote_response(&self.raft(req.group)?.vote(rpc).await))
    }

    async fn install_snapshot(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.admit(&req, RaftCall::Snapshot, req.get_ref().group)?;
        let req = req.into_inner();
        let rpc = persist::decode_snapshot_request(&req.body).map_err(bad)?;
        reply(persist::encode_snapshot_response(&self.replica(req.group).await?.install_snapshot(rpc).await))
    }
}

pub struct StorageService {
    host: Arc<NodeHost>,
}

impl StorageService {
    pub fn new(host: Arc<NodeHost>) -> Self {
        Self { host }
    }

    fn shard(&self, group: GroupId) -> Result<Group<crate::shard::SegmentShard>, Status> {
        self.host.shard(group).ok_or_else(|| Status::not_found(format!("shard {group} is not hosted here")))
    }

    fn meta(&self) -> Result<Group<crate::state_machine::Whole<crate::meta::MetaState>>, Status> {
        self.host.meta().ok_or_else(|| Status::not_found("the meta group is not hosted here"))
    }

    /// The status that tells a router where the leader is (or that there is none yet).
    fn not_leader(&self, f: &ForwardToLeader<NodeId, BasicNode>) -> Status {
        let Some(id) = f.leader_id else {
            return Status::unavailable("no leader elected yet");
        };
        let addr = self
            .host
            .addresses
            .read()
            .unwrap()
            .get(&id)
            .cloned()
            .or_else(|| f.leader_node.as_ref().map(|n| n.addr.clone()))
            .unwrap_or_default();
        let mut status = Status::failed_precondition(format!("not the leader; leader is node {id}"));
        if let Ok(v) = format!("{id}@{addr}").parse() {
            status.metadata_mut().insert(LEADER_HEADER, v);
        }
        status
    }

    async fn propose(&self, raft: &Raft, command: Command) -> Result<(u64, CommandResponse), Status> {
        let started = Instant::now();
        match raft.client_write(command).await {
            Ok(resp) => {
                self.host.metrics.commit_seconds.observe(started.elapsed().as_secs_f64());
                Ok((resp.log_id.index, resp.data))
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(self.not_leader(&f)),
            Err(e) => Err(Status::unavailable(e.to_string())),
        }
    }

    /// Holds a place in `group`'s bounded write queue, or refuses with `RESOURCE_EXHAUSTED`
    /// marked as overload (the router answers 503 `overloaded`, not `disk_full`).
    fn admit(
        &self,
        group: GroupId,
        shard: &Group<crate::shard::SegmentShard>,
        bytes: usize,
    ) -> Result<crate::admission::Admitted, Status> {
        let unflushed = shard.state.read().unwrap().state.unflushed_bytes();
        self.host.writes.admit(group, bytes as u64, unflushed).map_err(|e| {
            self.host.metrics.writes_shed.get_or_create(&crate::metrics::ShedLabel { reason: e.reason() }).inc();
            let mut status = Status::resource_exhausted(e.to_string());
            status.metadata_mut().insert(OVERLOADED_HEADER, tonic::metadata::MetadataValue::from_static("1"));
            status
        })
    }

    /// The leader of `group`, when a router asked this replica to relay the call (it cannot
    /// reach the leader itself) and another node leads: the call goes there, one hop, and the
    /// leader's answer (a redirect included) goes back as it is.
    fn relay<T>(&self, req: &Request<T>, group: GroupId) -> Result<Option<StorageClient<Authed>>, Status> {
        if !req.metadata().contains_key(RELAY_HEADER) {
            return Ok(None);
        }
        let raft =
            self.host.raft(group).ok_or_else(|| Status::not_found(format!("group {group} is not hosted here")))?;
        let leader = raft.metrics().borrow().current_leader;
        match leader {
            Some(id) if id == self.host.config.id => Ok(None),
            Some(id) => {
                let addr = self.host.addresses.read().unwrap().get(&id).cloned();
                let addr = addr.ok_or_else(|| Status::unavailable(format!("no address for leader node {id}")))?;
                self.host.metrics.relayed_calls.inc();
                Ok(Some(self.host.channels.storage(&addr)?))
            }
            None => Err(Status::unavailable("no leader elected yet")),
        }
    }

    /// Linearizable read barrier: fails over to the leader like a write does.
    async fn read_barrier(&self, raft: &Raft) -> Result<(), Status> {
        match raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(f))) => {
                Err(self.not_leader(&f))
            }
            Err(e) => Err(Status::unavailable(e.to_string())),
        }
    }
}

#[tonic::async_trait]
impl Storage for StorageService {
    async fn write(&self, req: Request<WriteRequest>) -> Result<Response<WriteReply>, Status> {
        if let Some(mut leader) = self.relay(&req, req.get_ref().group)? {
            return leader.write(req.into_inner()).await;
        }
        // Only a router in this process can set it: extensions do not cross the network.
        let decoded = req.extensions().get::<Arc<Decoded>>().cloned();
        let req = req.into_inner();
        let shard = self.shard(req.group)?;
        let batch_id =
            u128::from_le_bytes(req.batch_id.as_slice().try_into().map_err(|_| bad("batch_id must have 16 bytes"))?);
        let command = match req.op {
            Some(write_request::Op::Batch(payload)) => {
                // Aborts still pass: they free what a refused sibling write would have kept.
                self.host
                    .disk
                    .admit(self.host.log_db.written())
                    .map_err(|e| Status::resource_exhausted(e.to_string()))?;
                Command::Ingest { batch_id, payload }
            }
            Some(write_request::Op::Abort(_)) => Command::Abort { batch_id },
            None => return Err(bad("write without an operation")),
        };
        let _admitted = match &command {
            Command::Ingest { payload, .. } => Some(self.admit(req.group, &shard, payload.len())?),
            _ => None,
        };
        let _held = match (&command, decoded) {
            (Command::Ingest { .. }, Some(d)) => Some(shard.state.read().unwrap().state.handoffs().hold(batch_id, d)),
            _ => None,
        };
        let (log_index, response) = self.propose(&shard.raft, command).await?;
        match response {
            CommandResponse::Ingested { duplicate, rows } => {
                self.host
                    .metrics
                    .applied_rows
                    .get_or_create(&crate::metrics::GroupLabel { group: req.group })
                    .inc_by(rows);
                if duplicate {
                    self.host.metrics.duplicate_batches.inc();
                }
                Ok(Response::new(WriteReply { log_index, duplicate }))
            }
            CommandResponse::Aborted => Ok(Response::new(WriteReply { log_index, duplicate: false })),
            CommandResponse::Refused => Err(Status::aborted("the batch had been aborted")),
            CommandResponse::Rejected(reason) => Err(bad(reason)),
            CommandResponse::Meta(_) => Err(Status::internal("unexpected meta response")),
        }
    }

    async fn get_trace(&self, req: Request<GetTraceRequest>) -> Result<Response<GetTraceReply>, Status> {
        if let Some(mut leader) = self.relay(&req, req.get_ref().group)? {
            return leader.get_trace(req.into_inner()).await;
        }
        let req = req.into_inner();
        let shard = self.shard(req.group)?;
        self.read_barrier(&shard.raft).await?;
        let lookup = shard.state.read().unwrap().state.trace(&req.project_id, &req.trace_id);
        let spans = tokio::task::spawn_blocking(move || lookup.run())
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(format!("reading segments: {e}")))?;
        Ok(Response::new(GetTraceReply { spans: spans.into_iter().map(Into::into).collect() }))
    }

    async fn query(
        &self,
        req: Request<sextant_proto::QueryRequest>,
    ) -> Result<Response<sextant_proto::QueryReply>, Status> {
        let replica_read = req.metadata().contains_key(REPLICA_READ_HEADER);
        if !replica_read {
            if let Some(mut leader) = self.relay(&req, req.get_ref().group)? {
                return leader.query(req.into_inner()).await;
            }
        }
        let req = sextant_model::query::ShardQuery::try_from(req.into_inner()).map_err(bad)?;
        let shard = self.shard(req.group)?;
        // Reads go to the leader, so an acknowledged write is visible to the next query.
        if !replica_read {
            self.read_barrier(&shard.raft).await?;
        }
        let prepared = crate::query::prepare(&shard.state.read().unwrap().state, req).map_err(bad)?;
        let memory = self.host.query_memory.clone();
        let reply = tokio::task::spawn_blocking(move || prepared.run(memory))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| match e {
                crate::query::QueryError::Io(e) => Status::internal(format!("reading segments: {e}")),
                other => bad(other),
            })?;
        Ok(Response::new(reply.into()))
    }

    async fn estimate(
        &self,
        req: Request<sextant_proto::QueryRequest>,
    ) -> Result<Response<sextant_proto::QueryCost>, Status> {
        if let Some(mut leader) = self.relay(&req, req.get_ref().group)? {
            return leader.estimate(req.into_inner()).await;
        }
        let req = sextant_model::query::ShardQuery::try_from(req.into_inner()).map_err(bad)?;
        let shard = self.shard(req.group)?;
        // No read barrier: an estimate reads metadata, and a row or two applied since does
        // not change it.
        let cost = crate::query::estimate(&shard.state.read().unwrap().state, &req).map_err(bad)?;
        Ok(Response::new(cost.into()))
    }

    async fn meta_write(&self, req: Request<MetaRequest>) -> Result<Response<MetaReply>, Status> {
        if let Some(mut leader) = self.relay(&req, crate::types::META_GROUP)? {
            return leader.meta_write(req.into_inner()).await;
        }
        let command: MetaCommand = serde_json::from_slice(&req.into_inner().json).map_err(bad)?;
        let meta = self.meta()?;
        match self.propose(&meta.raft, Command::Meta(command)).await? {
            (_, CommandResponse::Meta(json)) => Ok(Response::new(MetaReply { json })),
            (_, CommandResponse::Rejected(reason)) => Err(bad(reason)),
            _ => Err(Status::internal("unexpected response from the meta group")),
        }
    }

    async fn meta_read(&self, req: Request<MetaRequest>) -> Result<Response<MetaReply>, Status> {
        if let Some(mut leader) = self.relay(&req, crate::types::META_GROUP)? {
            return leader.meta_read(req.into_inner()).await;
        }
        let query: MetaQuery = serde_json::from_slice(&req.into_inner().json).map_err(bad)?;
        let meta = self.meta()?;
        self.read_barrier(&meta.raft).await?;
        let value = meta.state.read().unwrap().state.query(&query);
        Ok(Response::new(MetaReply { json: serde_json::to_vec(&value).map_err(|e| Status::internal(e.to_string()))? }))
    }

    async fn cluster_info(&self, _req: Request<ClusterInfoRequest>) -> Result<Response<ClusterInfoReply>, Status> {
        let groups = self
            .host
            .rafts()
            .into_iter()
            .map(|(group, raft)| {
                let m = raft.metrics().borrow().clone();
                GroupInfo {
                    group,
                    voters: m.membership_config.membership().voter_ids().collect(),
                    leader: m.current_leader.unwrap_or(0),
                    applied: m.last_applied.map_or(0, |l| l.index),
                    term: m.current_term,
                }
            })
            .collect();
        let nodes = self
            .host
            .addresses
            .read()
            .unwrap()
            .iter()
            .map(|(id, addr)| NodeAddr { id: *id, addr: addr.clone() })
            .collect();
        Ok(Response::new(ClusterInfoReply {
            node_id: self.host.config.id,
            shard_count: self.host.config.shards,
            groups,
            nodes,
            initial_members: self.host.initial_members(),
            retired_members: self.host.peer_incarnations.retired(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "test-cluster-secret-0123456789abcdef";

    fn with_header(value: &str) -> Request<()> {
        let mut req = Request::new(());
        req.metadata_mut().insert(CLUSTER_SECRET_HEADER, value.parse().unwrap());
        req
    }

    #[test]
    fn requests_without_the_secret_header_are_refused() {
        let mut check = secret_check(SECRET, &PeerRole::ALL);
        let status = check(Request::new(())).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
    }

    #[test]
    fn only_the_exact_secret_is_accepted() {
        let mut check = secret_check(SECRET, &PeerRole::ALL);
        assert!(check(with_header(SECRET)).is_ok());
        for wrong in ["", "test-cluster-secret-0123456789abcde", "test-cluster-secret-0123456789abcdefX"] {
            assert_eq!(check(with_header(wrong)).unwrap_err().code(), tonic::Code::Unauthenticated, "{wrong:?}");
        }
    }

    #[test]
    fn an_empty_expected_secret_refuses_everything() {
        let mut check = secret_check("", &PeerRole::ALL);
        assert!(check(Request::new(())).is_err(), "no header");
        assert!(check(with_header("")).is_err(), "an empty header");
    }
}
