//! The uuids of a shard's analytics rows (events and replay events): a row whose uuid the
//! shard already holds is dropped when its batch is applied, so a retried batch is stored,
//! and read, once (docs/API.md, "Idempotency of analytics events").
//!
//! The set is what the applied state holds: rebuilt on open and on a snapshot install from
//! the segments (rows of tombstoned batches left out), then kept by apply (rows added, rows of
//! aborted batches removed). A Raft entry re-applied after a restart is not in the segments
//! (they hold entries up to their checkpoint only), so it is not taken for its own duplicate.
//!
//! Keys are 64-bit hashes of (table, project, uuid), the uuid's hash seeded by the table and
//! project's; they live in memory only, never in a file. 9 bytes per slot in the table, about
//! 10–21 bytes per row with the table's load factor (docs/BENCHMARKS.md). Two different uuids
//! share a key with probability n/2^64 per row; the later row is then dropped.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::table::{Row, Table};

/// The keys of the rows of one table of one project: the hash of a row's uuid, seeded by the
/// hash of the table and project (computed once for all of a batch's rows).
#[derive(Clone, Copy)]
pub struct Keys {
    seed: u64,
}

impl Keys {
    pub fn new(table: Table, project: &str) -> Keys {
        Keys { seed: xxh3_64_with_seed(project.as_bytes(), table as u64) }
    }

    pub fn of(&self, uuid: &str) -> u64 {
        xxh3_64_with_seed(uuid.as_bytes(), self.seed)
    }
}

/// The key of a row with `uuid` in `table` of `project`.
pub fn key(table: Table, project: &str, uuid: &str) -> u64 {
    Keys::new(table, project).of(uuid)
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

    #[test]
    fn keys_tell_apart_tables_projects_and_uuids_short_or_long() {
        let long = "u".repeat(300);
        let rows = [("p", "a"), ("proj", long.as_str()), ("", ""), (long.as_str(), "x"), ("ab", "c"), ("a", "bc")];
        let mut keys = std::collections::HashSet::new();
        for table in [Table::Events, Table::ReplayEvents] {
            for (project, uuid) in rows {
                assert_eq!(key(table, project, uuid), Keys::new(table, project).of(uuid));
                assert!(keys.insert(key(table, project, uuid)), "{table:?} {project} {uuid}");
            }
        }
    }
}
