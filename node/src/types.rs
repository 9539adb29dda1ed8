//! The Raft type configuration shared by the meta group and every data shard.

use openraft::BasicNode;
use sextant_model::meta::MetaCommand;

pub type NodeId = u64;
/// Raft group id: 0 is the meta group, `1..=S` are data shards.
pub type GroupId = u64;
pub const META_GROUP: GroupId = 0;

/// The replicated command of every group. One `Ingest` entry carries a whole per-shard
/// sub-batch (docs/ARCHITECTURE.md, "Ingest data flow"), encoded once by the router and never
/// re-encoded. Stored and sent as in docs/ARCHITECTURE.md, "Persisted formats".
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Ingest {
        batch_id: u128,
        payload: bytes::Bytes,
    },
    /// Drops the rows of `batch_id` (or refuses them if they arrive later).
    Abort {
        batch_id: u128,
    },
    Meta(MetaCommand),
}

/// Returned to the proposer on the same node; never stored or sent.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandResponse {
    /// `duplicate` is true when the batch had already been applied (a retry).
    Ingested {
        duplicate: bool,
        rows: u64,
    },
    Aborted,
    /// The batch was refused because it had been aborted before it arrived.
    Refused,
    Meta(Vec<u8>),
    /// A command the group does not accept (e.g. ingest sent to meta); nothing changed.
    Rejected(String),
}

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Command,
        R = CommandResponse,
        NodeId = NodeId,
        Node = BasicNode,
        SnapshotData = crate::archive::SnapshotStream,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, BasicNode>;
pub type Membership = openraft::StoredMembership<NodeId, BasicNode>;

pub(crate) fn io_err(e: impl std::fmt::Display) -> StorageError {
    openraft::StorageError::IO { source: openraft::StorageIOError::write(openraft::AnyError::error(e.to_string())) }
}
