//! Generated protobuf types and gRPC stubs for Sextant's internal protocol.

pub mod v1 {
    tonic::include_proto!("sextant.v1");
}

pub use v1::*;

/// What nodes persist (Raft log, manifests, archives), versioned apart from the RPC schema
/// (docs/ARCHITECTURE.md, "Persisted formats").
pub mod persist {
    tonic::include_proto!("sextant.persist.v1");
}

/// Metadata key carrying the cluster secret on every internal RPC.
pub const CLUSTER_SECRET_HEADER: &str = "x-sextant-cluster-secret";
/// Metadata key on a `FailedPrecondition` status naming the current leader as `id@addr`.
pub const LEADER_HEADER: &str = "x-sextant-leader";
/// Metadata key on a `ResourceExhausted` status saying the shard's write queue is full (retry
/// shortly), not its disk.
pub const OVERLOADED_HEADER: &str = "x-sextant-overloaded";
/// Metadata key of a storage call a router sends to a replica that is not the leader because it
/// cannot reach the leader itself: the replica relays it to the leader, one hop
/// (docs/RELIABILITY.md, "Failover").
pub const RELAY_HEADER: &str = "x-sextant-relay";

pub mod client;
pub mod convert;
pub mod internal_tls;
pub mod tls;
