//! Trace lists (docs/API.md, "Traces").

use super::{first_page, Merge};
use crate::row::TraceSummary;

/// Newest first; `before` is the keyset cursor (exclusive).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceKey {
    pub start_unix_nanos: i64,
    pub trace_id: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceListPlan {
    /// The trace touches one of them (empty: any).
    pub services: Vec<String>,
    /// Root operation, empty = any.
    pub operation: String,
    pub errors_only: bool,
    pub min_duration_nanos: i64,
    pub limit: u32,
    pub before: Option<TraceKey>,
}

/// A trace's place in the list, which is newest first: (start, trace id), descending.
pub fn trace_key(t: &TraceSummary) -> (i64, &str) {
    (t.start_unix_nanos, t.trace_id.as_str())
}

/// Whole-trace summaries (a trace lives on one shard): every shard's newest `limit + 1` after
/// the cursor.
#[derive(Debug, Default)]
pub struct TraceList(pub Vec<TraceSummary>);

impl Merge for TraceList {
    fn merge(&mut self, other: Self) {
        self.0.extend(other.0);
    }
}

impl TraceList {
    /// The newest `limit`, and whether more remain.
    pub fn page(self, limit: usize) -> (Vec<TraceSummary>, bool) {
        first_page(self.0, limit, |a, b| trace_key(a).cmp(&trace_key(b)))
    }
}
