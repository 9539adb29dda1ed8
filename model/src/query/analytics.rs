//! Product analytics (docs/API.md, "Product analytics reads", "Funnels", "Retention",
//! "Cohorts"). Events are partitioned by user, so per-user distinct counts of different shards
//! are disjoint and add up. Partials are per plan position (bucket, day, step, cohort): they
//! add position by position, and [`fit`](EventBuckets::fit) shapes the sum to the plan.

use super::{add_positions, Merge};
use crate::cohort::Definition;
use crate::sketch::LatencySketch;

/// Only the users of a cohort evaluated at an instant.
#[derive(Clone, Debug, PartialEq)]
pub struct CohortFilter {
    pub definition: Definition,
    pub at_unix_nanos: i64,
}

/// Counts per calendar bucket: bucket i is `[bucket_starts[i], bucket_starts[i+1])`, the last
/// ends at the query's `to`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventBucketsPlan {
    /// Empty: every event.
    pub events: Vec<String>,
    pub bucket_starts: Vec<i64>,
    pub cohort: Option<CohortFilter>,
    /// Only counts (unique users are left 0): what hourly event rollups can answer.
    pub counts_only: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventBucket {
    pub count: u64,
    pub unique_users: u64,
}

#[derive(Debug, Default)]
pub struct EventBuckets(pub Vec<EventBucket>);

impl Merge for EventBuckets {
    fn merge(&mut self, other: Self) {
        add_positions(&mut self.0, other.0, |s, b| {
            s.count += b.count;
            s.unique_users += b.unique_users;
        });
    }
}

impl EventBuckets {
    /// Exactly `buckets` buckets: entries past them dropped, missing ones zero.
    pub fn fit(mut self, buckets: usize) -> Vec<EventBucket> {
        self.0.resize(buckets, EventBucket::default());
        self.0
    }
}

/// DAU/WAU/MAU: `day_starts` are consecutive days in the caller's time zone; days from
/// `first_reported` on are reported, each over the 1, 7 and 30 days ending with it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActiveUsersPlan {
    pub day_starts: Vec<i64>,
    pub first_reported: u32,
    pub cohort: Option<CohortFilter>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActiveDay {
    pub dau: u64,
    pub wau: u64,
    pub mau: u64,
}

/// Per reported day.
#[derive(Debug, Default)]
pub struct ActiveDays(pub Vec<ActiveDay>);

impl Merge for ActiveDays {
    fn merge(&mut self, other: Self) {
        add_positions(&mut self.0, other.0, |s, d| {
            s.dau += d.dau;
            s.wau += d.wau;
            s.mau += d.mau;
        });
    }
}

impl ActiveDays {
    /// Exactly `days` days.
    pub fn fit(mut self, days: usize) -> Vec<ActiveDay> {
        self.0.resize(days, ActiveDay::default());
        self.0
    }
}

/// A funnel: the query's range is `[range_from, range_to + window)`; step 1 must fall in
/// `[range_from, range_to)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FunnelPlan {
    pub steps: Vec<String>,
    pub window_nanos: i64,
    pub strict: bool,
    pub range_from: i64,
    pub range_to: i64,
    pub cohort: Option<CohortFilter>,
}

#[derive(Clone, Debug, Default)]
pub struct FunnelStep {
    /// Users whose furthest step is this one or a later one.
    pub users: u64,
    /// Seconds from the previous step (steps after the first).
    pub seconds: LatencySketch,
    pub seconds_sum: f64,
}

/// Per funnel step.
#[derive(Debug, Default)]
pub struct FunnelSteps(pub Vec<FunnelStep>);

impl Merge for FunnelSteps {
    fn merge(&mut self, other: Self) {
        add_positions(&mut self.0, other.0, |s, o| {
            s.users += o.users;
            s.seconds_sum += o.seconds_sum;
            s.seconds.absorb(o.seconds);
        });
    }
}

impl FunnelSteps {
    /// Exactly `steps` steps.
    pub fn fit(mut self, steps: usize) -> Vec<FunnelStep> {
        self.0.resize_with(steps, FunnelStep::default);
        self.0
    }
}

/// Retention: `bucket_starts` are consecutive calendar periods; the first `cohorts` of them
/// are cohort periods, and every cohort is followed for `periods` periods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RetentionPlan {
    pub start_event: String,
    pub return_event: String,
    pub bucket_starts: Vec<i64>,
    pub cohorts: u32,
    pub periods: u32,
    pub first_time: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionCohort {
    pub size: u64,
    /// Per period after the cohort's own; `[0]` is the cohort size.
    pub returned: Vec<u64>,
}

/// Per cohort.
#[derive(Debug, Default)]
pub struct RetentionCohorts(pub Vec<RetentionCohort>);

impl Merge for RetentionCohorts {
    fn merge(&mut self, other: Self) {
        add_positions(&mut self.0, other.0, |s, c| {
            s.size += c.size;
            add_positions(&mut s.returned, c.returned, |s, n| *s += n);
        });
    }
}

impl RetentionCohorts {
    /// Exactly `cohorts` cohorts of `periods` periods each.
    pub fn fit(mut self, cohorts: usize, periods: usize) -> Vec<RetentionCohort> {
        self.0.resize_with(cohorts, RetentionCohort::default);
        for c in &mut self.0 {
            c.returned.resize(periods, 0);
        }
        self.0
    }
}

/// Cohort sizes at an instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CohortSizesPlan {
    pub cohorts: Vec<Definition>,
    pub at_unix_nanos: i64,
}

/// Sizes of cohorts, in the order of the plan.
#[derive(Debug, Default)]
pub struct CohortSizes(pub Vec<u64>);

impl Merge for CohortSizes {
    fn merge(&mut self, other: Self) {
        add_positions(&mut self.0, other.0, |s, n| *s += n);
    }
}

impl CohortSizes {
    /// Exactly `cohorts` sizes.
    pub fn fit(mut self, cohorts: usize) -> Vec<u64> {
        self.0.resize(cohorts, 0);
        self.0
    }
}

/// Members with a distinct id after `after`, in byte order, at most `limit`.
#[derive(Clone, Debug, PartialEq)]
pub struct CohortUsersPlan {
    pub cohort: CohortFilter,
    pub after: String,
    pub limit: u32,
}

/// A cohort's members: every shard's first `limit + 1` after the cursor, its own users.
#[derive(Debug, Default)]
pub struct CohortMembers(pub Vec<String>);

impl Merge for CohortMembers {
    fn merge(&mut self, other: Self) {
        self.0.extend(other.0);
    }
}

impl CohortMembers {
    /// By distinct id, in byte order.
    pub fn sorted(mut self) -> Vec<String> {
        self.0.sort_unstable();
        self.0
    }
}
