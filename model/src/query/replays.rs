//! Session recordings (docs/API.md, "Session replays"). A session's events live on one shard
//! (partitioned by session id), so a shard's session summary is the whole session.

use super::{first_page, Merge};
use crate::row::ReplayEvent;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayListPlan {
    /// Empty: every user.
    pub distinct_id: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplaySession {
    pub session_id: String,
    pub distinct_id: String,
    pub start_unix_nanos: i64,
    pub end_unix_nanos: i64,
    pub event_count: u64,
    /// Of the events' `data`, as stored.
    pub size_bytes: u64,
}

/// A session's place in the list, which is newest first; the id makes the order total.
pub fn session_key(s: &ReplaySession) -> (i64, &str) {
    (s.start_unix_nanos, s.session_id.as_str())
}

/// Whole sessions.
#[derive(Debug, Default)]
pub struct ReplaySessions(pub Vec<ReplaySession>);

impl Merge for ReplaySessions {
    fn merge(&mut self, other: Self) {
        self.0.extend(other.0);
    }
}

impl ReplaySessions {
    /// The newest `limit` sessions that sort after `after` (the cursor's key), and whether
    /// more remain.
    pub fn page(self, after: Option<(i64, &str)>, limit: usize) -> (Vec<ReplaySession>, bool) {
        let rest = self.0.into_iter().filter(|s| after.is_none_or(|a| session_key(s) < a)).collect();
        first_page(rest, limit, |a, b| session_key(a).cmp(&session_key(b)))
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayEventsPlan {
    pub session_id: String,
}

/// One session's recorded events.
#[derive(Debug, Default)]
pub struct ReplayEvents(pub Vec<ReplayEvent>);

impl Merge for ReplayEvents {
    fn merge(&mut self, other: Self) {
        self.0.extend(other.0);
    }
}

impl ReplayEvents {
    /// In timestamp order, for a player (stable: equal timestamps keep their order).
    pub fn sorted(mut self) -> Vec<ReplayEvent> {
        self.0.sort_by_key(|e| e.unix_nanos);
        self.0
    }
}
