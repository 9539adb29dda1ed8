//! A Sextant storage node: replicas of the meta group and of data shards, each an openraft
//! group, sharing one durable log (with group commit) and one gRPC server.

pub mod admission;
pub mod archive;
mod bootstrap;
pub mod disk;
pub mod durable;
pub mod failpoint;
pub mod host;
pub mod http;
pub mod identity;
pub mod log_store;
pub mod meta;
pub mod meta_client;
pub mod metrics;
pub mod network;
mod persist;
pub mod placement;
pub mod query;
pub mod segment;
pub mod service;
pub mod shard;
pub mod state_machine;
pub mod types;
pub mod zone;

pub use host::{NodeConfig, NodeHost, RunningNode};
pub use metrics::NodeMetrics;
