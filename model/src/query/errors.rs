//! Error groups (docs/API.md, "Error groups").

use std::collections::HashMap;

use super::Merge;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorsPlan {
    pub services: Vec<String>,
    /// Empty: every group.
    pub fingerprint: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorOccurrence {
    pub unix_nanos: i64,
    pub trace_id: String,
    /// As sent, before normalisation.
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorGroup {
    /// A hash of source, service, type and normalised message, the same on every shard.
    pub fingerprint: String,
    pub service: String,
    pub kind: String,
    /// Normalised.
    pub message: String,
    pub count: u64,
    pub first_unix_nanos: i64,
    pub last_unix_nanos: i64,
    /// Of the latest occurrence that has one.
    pub sample_trace_id: String,
    pub sample_unix_nanos: i64,
    /// `span` or `log`.
    pub source: String,
    /// Only for a plan naming a fingerprint: its latest occurrences, newest first.
    pub recent: Vec<ErrorOccurrence>,
}

/// Occurrences in a group's detail (each shard sends at most this many).
pub const RECENT: usize = 20;

/// The latest [`RECENT`] occurrences, newest first (ties by trace id, then message, so
/// every shard and the router order them alike).
pub fn keep_recent(recent: &mut Vec<ErrorOccurrence>) {
    recent.sort_by(|a, b| (b.unix_nanos, &b.trace_id, &b.message).cmp(&(a.unix_nanos, &a.trace_id, &a.message)));
    recent.truncate(RECENT);
}

impl Merge for ErrorGroup {
    /// Counts add up, first/last seen are the min/max, the sample is the latest occurrence's
    /// trace (on equal times, the one merged first), the latest [`RECENT`] occurrences are
    /// kept.
    fn merge(&mut self, other: Self) {
        self.count += other.count;
        self.recent.extend(other.recent);
        keep_recent(&mut self.recent);
        self.first_unix_nanos = self.first_unix_nanos.min(other.first_unix_nanos);
        self.last_unix_nanos = self.last_unix_nanos.max(other.last_unix_nanos);
        if !other.sample_trace_id.is_empty()
            && (self.sample_trace_id.is_empty() || other.sample_unix_nanos > self.sample_unix_nanos)
        {
            self.sample_trace_id = other.sample_trace_id;
            self.sample_unix_nanos = other.sample_unix_nanos;
        }
    }
}

/// Error groups by fingerprint.
#[derive(Debug, Default)]
pub struct ErrorGroups(pub HashMap<String, ErrorGroup>);

impl Merge for ErrorGroups {
    fn merge(&mut self, other: Self) {
        for (fingerprint, g) in other.0 {
            match self.0.get_mut(&fingerprint) {
                Some(into) => into.merge(g),
                None => {
                    self.0.insert(fingerprint, g);
                }
            }
        }
    }
}

impl ErrorGroups {
    /// Adds one group, merged with the one of its fingerprint if any.
    pub fn add(&mut self, g: ErrorGroup) {
        match self.0.get_mut(&g.fingerprint) {
            Some(into) => into.merge(g),
            None => {
                self.0.insert(g.fingerprint.clone(), g);
            }
        }
    }

    /// Most frequent first, then most recent, then by fingerprint (a stable order).
    pub fn sorted(self) -> Vec<ErrorGroup> {
        let mut out: Vec<ErrorGroup> = self.0.into_values().collect();
        out.sort_by(|a, b| {
            (b.count, b.last_unix_nanos, &a.fingerprint).cmp(&(a.count, a.last_unix_nanos, &b.fingerprint))
        });
        out
    }
}
