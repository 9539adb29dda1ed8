//! Tasks a node runs over all its shards: the flusher asks for checkpoints by size and age,
//! the compactor merges segments, and expiry keeps each shard's expiry policy (data TTL per
//! project) in line with meta.

pub mod compactor;
pub mod expiry;
pub mod flusher;
pub mod usage;
