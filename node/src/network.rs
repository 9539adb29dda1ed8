//! Raft transport between nodes: openraft's RPCs inside the `Raft` gRPC service, encoded as in
//! docs/ARCHITECTURE.md, "Persisted formats" (the entries they carry are the log's).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use sextant_proto::client::Channels;
use sextant_proto::RaftRequest;
use tonic::metadata::{Ascii, MetadataValue};

use crate::persist;
use crate::types::{GroupId, NodeId, TypeConfig};

/// Node id -> address, from the node's configuration. Preferred over the address recorded in
/// the Raft membership so that a node can move without rewriting every group's membership.
pub type AddressBook = Arc<RwLock<BTreeMap<NodeId, String>>>;

#[derive(Clone)]
pub struct Network {
    group: GroupId,
    channels: Arc<Channels>,
    addresses: AddressBook,
    /// This node's id and incarnation ([`crate::identity::SENDER_HEADER`]).
    sender: MetadataValue<Ascii>,
}

impl Network {
    pub fn new(group: GroupId, channels: Arc<Channels>, addresses: AddressBook, sender: MetadataValue<Ascii>) -> Self {
        Self { group, channels, addresses, sender }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        let addr = self.addresses.read().unwrap().get(&target).cloned().unwrap_or_else(|| node.addr.clone());
        Connection { group: self.group, target, addr, channels: self.channels.clone(), sender: self.sender.clone() }
    }
}

pub struct Connection {
    group: GroupId,
    target: NodeId,
    addr: String,
    channels: Arc<Channels>,
    sender: MetadataValue<Ascii>,
}

#[derive(Clone, Copy)]
enum Rpc {
    Append,
    Vote,
    Snapshot,
}

impl Connection {
    async fn call<Resp, E>(
        &self,
        rpc: Rpc,
        body: std::io::Result<Vec<u8>>,
        decode: impl FnOnce(&[u8]) -> std::io::Result<Result<Resp, RaftError<NodeId, E>>>,
        timeout: Duration,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        E: std::error::Error,
    {
        let body = body.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut client = self.channels.raft(&self.addr).map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let mut request = tonic::Request::new(RaftRequest { group: self.group, body: body.into() });
        request.metadata_mut().insert(crate::identity::SENDER_HEADER, self.sender.clone());
        let fut = async {
            match rpc {
                Rpc::Append => client.append_entries(request).await,
                Rpc::Vote => client.vote(request).await,
                Rpc::Snapshot => client.install_snapshot(request).await,
            }
        };
        let reply = match tokio::time::timeout(timeout, fut).await {
            Err(elapsed) => return Err(RPCError::Network(NetworkError::new(&elapsed))),
            Ok(Err(status)) => {
                if status.code() == tonic::Code::Unavailable {
                    self.channels.forget(&self.addr);
                    return Err(RPCError::Unreachable(Unreachable::new(&status)));
                }
                return Err(RPCError::Network(NetworkError::new(&status)));
            }
            Ok(Ok(reply)) => reply.into_inner(),
        };
        let result = decode(&reply.body).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body = persist::encode_append_request(rpc);
        self.call(Rpc::Append, body, persist::decode_append_response, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        let body = Ok(persist::encode_snapshot_request(rpc));
        self.call(Rpc::Snapshot, body, persist::decode_snapshot_response, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body = Ok(persist::encode_vote_request(&rpc));
        self.call(Rpc::Vote, body, persist::decode_vote_response, option.hard_ttl()).await
    }
}
