//! Log search (docs/API.md, "Log search").

use std::cmp::Reverse;

use super::{first_page, Merge};
use crate::row::{LogLevel, LogRecord};

/// Logs have no id: the key orders by time, then shard, then a hash of the content, then the
/// rank among identical lines, which makes it total and stable across pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogKey {
    pub unix_nanos: i64,
    pub group: u64,
    pub content_hash: u64,
    pub duplicate: u32,
}

impl LogKey {
    /// A line's place in the list, compared descending (shards use the same order).
    pub fn order(&self) -> (i64, u64, u64, Reverse<u32>) {
        (self.unix_nanos, self.group, self.content_hash, Reverse(self.duplicate))
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogSearchPlan {
    pub services: Vec<String>,
    pub levels: Vec<LogLevel>,
    /// The search (docs/API.md, "Log search syntax"), parsed by the shard.
    pub query: String,
    pub limit: u32,
    pub before: Option<LogKey>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyedLog {
    pub key: LogKey,
    pub log: LogRecord,
}

/// Log lines: every shard's newest `limit + 1` after the cursor.
#[derive(Debug, Default)]
pub struct LogList(pub Vec<KeyedLog>);

impl Merge for LogList {
    fn merge(&mut self, other: Self) {
        self.0.extend(other.0);
    }
}

impl LogList {
    /// The newest `limit`, and whether more remain.
    pub fn page(self, limit: usize) -> (Vec<KeyedLog>, bool) {
        first_page(self.0, limit, |a, b| a.key.order().cmp(&b.key.order()))
    }
}
