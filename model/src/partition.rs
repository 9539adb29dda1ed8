//! Hash partitioning (docs/ARCHITECTURE.md, "Ingest data flow", step 4). The hash and its seed
//! are part of the on-disk contract of a cluster: changing either would move existing keys to
//! other shards.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::ids::ProjectId;

/// Number of virtual partitions of every cluster. A partition maps to a shard through the
/// partition table stored in the meta group.
pub const PARTITIONS: u32 = 1024;
const SEED: u64 = 0x5e47_a471_0000_0001;

/// Virtual partition of `(project, key)`.
pub fn partition_of(project: &ProjectId, key: &[u8]) -> u32 {
    let project = project.0.as_bytes();
    let len = project.len() + key.len();
    // The hash of project and key as one text; on the stack for ids of usual length (every
    // span and event is partitioned).
    let mut stack = [0u8; 128];
    let mut heap = Vec::new();
    let text = if len <= stack.len() {
        &mut stack[..len]
    } else {
        heap.resize(len, 0);
        &mut heap[..]
    };
    text[..project.len()].copy_from_slice(project);
    text[project.len()..].copy_from_slice(key);
    (xxh3_64_with_seed(text, SEED) % PARTITIONS as u64) as u32
}

/// The data group holding `(project, key)`: its partition's entry in `table` (the partition
/// table kept in meta, one group per partition, as [`default_table`] builds it). The one key ->
/// group lookup, for writes and reads alike, so that a key is read where it was written.
/// `None` when the table has no entry for the partition (no table yet).
pub fn group_of(table: &[u64], project: &ProjectId, key: &[u8]) -> Option<u64> {
    table.get(partition_of(project, key) as usize).copied()
}

/// The default partition table for `shards` data shards (groups `1..=shards`).
pub fn default_table(shards: u32) -> Vec<u64> {
    (0..PARTITIONS).map(|p| 1 + (p % shards.max(1)) as u64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are placed by the hash of project id (16 bytes) and key as one text: where they
    /// were written before, whatever their length (112 bytes of key fill the stack buffer).
    #[test]
    fn a_key_is_placed_by_the_hash_of_project_and_key() {
        let p = ProjectId::random();
        for len in [0, 1, 32, 112, 113, 300] {
            let key = vec![b'k'; len];
            let whole = [&p.0.as_bytes()[..], &key].concat();
            let expected = (xxh3_64_with_seed(&whole, SEED) % PARTITIONS as u64) as u32;
            assert_eq!(partition_of(&p, &key), expected, "key of {len} bytes");
        }
    }

    #[test]
    fn same_key_same_partition_and_spread() {
        let p = ProjectId::random();
        assert_eq!(partition_of(&p, b"trace-1"), partition_of(&p, b"trace-1"));
        let table = default_table(4);
        let mut counts = [0u32; 5];
        for i in 0..4000 {
            counts[group_of(&table, &p, format!("t{i}").as_bytes()).unwrap() as usize] += 1;
        }
        assert_eq!(counts[0], 0);
        assert_eq!(group_of(&[], &p, b"trace-1"), None, "no table, no group");
        for c in &counts[1..] {
            assert!((800..1200).contains(c), "uneven spread: {counts:?}");
        }
    }

    #[test]
    fn hash_is_stable_across_releases() {
        // Pinned: a change here would strand data of existing clusters on the wrong shard.
        let p: ProjectId = "7f3c1a52-61b4-4b1e-9a57-0d3f8c2e9b10".parse().unwrap();
        // Values computed independently with the reference xxh3 (Python `xxhash` package).
        assert_eq!(partition_of(&p, b"abc"), 807);
        assert_eq!(partition_of(&p, b"trace-1"), 265);
        assert_eq!(partition_of(&p, b""), 19);
    }
}
