//! Reads as the domain knows them (docs/ARCHITECTURE.md, "Queries"): a plan runs on every
//! shard's leader, each answers a partial, and the router folds the partials with [`Merge`]
//! into one answer, then shapes the response. The RPC messages convert to and from these in
//! `sextant_proto::convert`.
//!
//! Partials of different shards are disjoint where the data is partitioned by the key that is
//! counted (a trace, a user, a session lives on one shard), so counts add up; latency sketches
//! merge bucket by bucket, so percentiles keep the sketch's relative error whatever the number
//! of shards.

mod analytics;
mod apm;
mod errors;
mod hosts;
mod logs;
mod replays;
mod traces;

pub use analytics::*;
pub use apm::*;
pub use errors::*;
pub use hosts::*;
pub use logs::*;
pub use replays::*;
pub use traces::*;

/// One shard's part of a read: the plan over the project's rows in `[from, to)` (unix
/// nanoseconds).
#[derive(Clone, Debug, PartialEq)]
pub struct ShardQuery {
    pub group: u64,
    pub project_id: String,
    pub from_unix_nanos: i64,
    pub to_unix_nanos: i64,
    /// Rows the shard may read; beyond it the reply has no partial.
    pub max_rows: u64,
    pub plan: Plan,
}

/// What a shard answers: its partial, or why it stopped without one.
#[derive(Debug)]
pub struct ShardReply {
    pub rows_scanned: u64,
    pub partial: Result<Partial, Refused>,
}

/// Why a shard stopped a query without a partial (a truncated one would be silently wrong).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// It read more than the query's `max_rows`.
    Rows,
    /// Its per-user or per-group tables needed more than the node's query memory budget
    /// (bytes), which the queries running at once share.
    Memory { budget_bytes: u64 },
}

/// What a plan would read on one shard, from segment metadata before any scan: the rows and
/// compressed bytes of the row groups its scans would open (after pruning by time, project
/// and the other statistics), and every buffered row. Summed over shards by [`Merge`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub rows: u64,
    pub bytes: u64,
    /// The plan reads newest first and stops at a full page (log search, trace list): it
    /// usually reads far less than this, and is bounded while it scans by `max_rows`.
    pub stops_early: bool,
}

impl Merge for Cost {
    fn merge(&mut self, other: Self) {
        self.rows = self.rows.saturating_add(other.rows);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.stops_early |= other.stops_early;
    }
}

/// A partial that shards' answers fold into: `merge` adds another shard's partial of the same
/// plan. With [`Default`] as the empty answer, folding in any shard order gives the same result
/// (up to float rounding of sums, and ties the kind documents).
pub trait Merge: Default {
    fn merge(&mut self, other: Self);
}

/// Every partial of `parts` merged, in order.
pub fn merge_all<P: Merge>(parts: impl IntoIterator<Item = P>) -> P {
    parts.into_iter().fold(P::default(), |mut acc, p| {
        acc.merge(p);
        acc
    })
}

/// A kind of partial, as one variant of [`Partial`].
pub trait PartialKind: Merge + Sized {
    /// This kind's partial; `None` for another kind.
    fn pick(partial: Partial) -> Option<Self>;
}

macro_rules! kinds {
    ($($variant:ident($plan:ty, $partial:ty)),* $(,)?) => {
        /// A typed query plan.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Plan {
            $($variant($plan),)*
        }

        /// A shard's answer to a [`Plan`] of the same variant.
        #[derive(Debug)]
        pub enum Partial {
            $($variant($partial),)*
        }

        $(
            impl PartialKind for $partial {
                fn pick(partial: Partial) -> Option<Self> {
                    match partial {
                        Partial::$variant(p) => Some(p),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }
            }

            impl From<$plan> for Plan {
                fn from(p: $plan) -> Self {
                    Plan::$variant(p)
                }
            }

            impl From<$partial> for Partial {
                fn from(p: $partial) -> Self {
                    Partial::$variant(p)
                }
            }
        )*
    };
}

kinds! {
    Traces(TraceListPlan, TraceList),
    Logs(LogSearchPlan, LogList),
    Apm(ApmPlan, Endpoints),
    ServiceMap(ServiceMapPlan, ServiceMap),
    Errors(ErrorsPlan, ErrorGroups),
    Hosts(HostsPlan, LatestHosts),
    HostSeries(HostSeriesPlan, HostSeries),
    Replays(ReplayListPlan, ReplaySessions),
    ReplayEvents(ReplayEventsPlan, ReplayEvents),
    EventBuckets(EventBucketsPlan, EventBuckets),
    ActiveUsers(ActiveUsersPlan, ActiveDays),
    Funnel(FunnelPlan, FunnelSteps),
    Retention(RetentionPlan, RetentionCohorts),
    CohortSizes(CohortSizesPlan, CohortSizes),
    CohortUsers(CohortUsersPlan, CohortMembers),
}

/// The first `limit` of `items` in descending `order`, and whether more remain.
fn first_page<T>(mut items: Vec<T>, limit: usize, order: impl Fn(&T, &T) -> std::cmp::Ordering) -> (Vec<T>, bool) {
    items.sort_by(|a, b| order(b, a));
    let more = items.len() > limit;
    items.truncate(limit);
    (items, more)
}

/// `into[i] += other[i]` over the longer of the two (sums per plan position).
fn add_positions<T: Default>(into: &mut Vec<T>, other: Vec<T>, add: impl Fn(&mut T, T)) {
    if into.len() < other.len() {
        into.resize_with(other.len(), T::default);
    }
    for (sum, o) in into.iter_mut().zip(other) {
        add(sum, o);
    }
}

#[cfg(test)]
mod tests;
