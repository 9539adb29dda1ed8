//! The uuids of a shard's analytics rows (events and replay events): a row whose uuid the
//! shard already holds is dropped when its batch is applied, so a retried batch is stored,
//! and read, once (docs/API.md, "Idempotency of analytics events").
//!
//! The set is what the applied state holds: rebuilt on open and on a snapshot install from
//! the segments (rows of tombstoned batches left out), then kept by apply (rows added, rows of
//! aborted batches removed). A Raft entry re-applied after a restart is not in the segments
//! (they hold entries up to their checkpoint only), so it is not taken for its own duplicate.
//!
//! Keys are 64-bit hashes of (table, project, uuid): 9 bytes per slot in the table, about
//! 10–21 bytes per row with the table's load factor (docs/BENCHMARKS.md). Two different uuids
//! share a key with probability n/2^64 per row; the later row is then dropped.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use xxhash_rust::xxh3::xxh3_64;

use super::table::{Row, Table};

/// The key of a row with `uuid` in `table` of `project`.
pub fn key(table: Table, project: &str, uuid: &str) -> u64 {
    let len = 9 + project.len() + uuid.len();
    // Built on the stack when it fits, as every project id and uuid of a client does: apply
    // computes a key for every analytics row.
    let mut stack = [0u8; 128];
    let mut heap = Vec::new();
    let buf = match stack.get_mut(..len) {
        Some(buf) => buf,
        None => {
            heap.resize(len, 0);
            &mut heap[..]
        }
    };
    buf[0] = table as u8;
    buf[1..9].copy_from_slice(&(project.len() as u64).to_le_bytes());
    buf[9..9 + project.len()].copy_from_slice(project.as_bytes());
    buf[9 + project.len()..].copy_from_slice(uuid.as_bytes());
    xxh3_64(buf)
}

/// The key of `row`, if it is stored once by its uuid.
pub fn row_key(project: &str, row: &Row) -> Option<u64> {
    row.uuid().map(|u| key(row.table(), project, u))
}

#[derive(Default)]
pub struct Uuids {
    keys: HashSet<u64, BuildHasherDefault<super::Prehashed>>,
}

impl Uuids {
    /// True if the key was not there (the row is new).
    pub fn insert(&mut self, key: u64) -> bool {
        self.keys.insert(key)
    }

    pub fn remove(&mut self, key: u64) {
        self.keys.remove(&key);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Heap bytes of the table: 8-byte keys and a control byte per slot (hashbrown), with
    /// slots a power of two holding at most 7/8 of them.
    pub fn heap_bytes(&self) -> usize {
        let cap = self.keys.capacity();
        if cap == 0 {
            return 0;
        }
        let slots = if cap < 8 { (cap + 1).next_power_of_two() } else { (cap * 8 / 7).next_power_of_two() };
        slots * 9 + 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key is the hash of (table, project length, project, uuid) whatever the length.
    #[test]
    fn keys_hash_the_table_project_and_uuid_short_or_long() {
        let expected = |table: Table, project: &str, uuid: &str| {
            let mut buf = vec![table as u8];
            buf.extend_from_slice(&(project.len() as u64).to_le_bytes());
            buf.extend_from_slice(project.as_bytes());
            buf.extend_from_slice(uuid.as_bytes());
            xxh3_64(&buf)
        };
        let long = "u".repeat(300);
        for (project, uuid) in [("p", "a"), ("proj", long.as_str()), ("", ""), (long.as_str(), "x")] {
            assert_eq!(key(Table::Events, project, uuid), expected(Table::Events, project, uuid));
        }
        assert_ne!(key(Table::Events, "ab", "c"), key(Table::Events, "a", "bc"));
        assert_ne!(key(Table::Events, "p", "u"), key(Table::ReplayEvents, "p", "u"));
    }
}
