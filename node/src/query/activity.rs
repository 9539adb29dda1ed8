//! Event counts per calendar bucket and active users (DAU/WAU/MAU). Distinct users are exact
//! per shard (a user's events all live on one shard), so the router's sums are exact too.

use rustc_hash::FxHashSet;
use sextant_model::query::{
    ActiveDay, ActiveDays, ActiveUsersPlan, EventBucket, EventBuckets, EventBucketsPlan, ShardQuery,
};

use super::cohort::Members;
use super::users::UserRows;
use super::{each_batch, each_batch_holding, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::rollup::{hour_of, HOUR_NS};
use crate::segment::table::Cols;
use crate::segment::user_number::USER;
use crate::segment::{Filter, Scan, Table, EVENT_DICTIONARIES};
use crate::shard::ScanJob;

impl QueryKind for EventBucketsPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        check_starts(&self.bucket_starts)?;
        let hourly = self.bucket_starts.iter().all(|s| s.rem_euclid(HOUR_NS) == 0);
        if self.counts_only && self.cohort.is_none() && hourly {
            return Ok(counts_from_rollups(self, req, shard));
        }
        let cohort = Members::of(self.cohort.as_ref())?;
        let members = Members::start(cohort, req, shard);
        let job = shard.scan(scan_of(
            req,
            Table::Events,
            Filter { events: self.events.clone(), ..Default::default() },
            &[USER, "time_ns"],
            &EVENT_DICTIONARIES,
        ));
        let starts = self.bucket_starts.clone();
        Ok(Box::new(move |_, budget| {
            let members = members.run(budget)?;
            Ok(buckets(&starts, members, job, budget)?.into())
        }))
    }
}

/// Counts only, every bucket a whole number of hours: the whole hours of the range from event
/// rollups, the partial hour at its end from events.
fn counts_from_rollups(plan: &EventBucketsPlan, req: &ShardQuery, shard: &dyn Scans) -> Compute {
    let filter = Filter { events: plan.events.clone(), ..Default::default() };
    let (first, to) = (plan.bucket_starts[0], req.to_unix_nanos);
    let last = hour_of(to).max(first);
    let mut jobs = Vec::new();
    if first < last {
        let rollups = Scan {
            from_ns: first,
            to_ns: last,
            ..scan_of(req, Table::EventRollups, filter.clone(), &["hour_ns", "count"], &[])
        };
        jobs.push(shard.scan(rollups));
    }
    if last < to {
        jobs.push(shard.scan(Scan {
            from_ns: last,
            to_ns: to,
            ..scan_of(req, Table::Events, filter, &["time_ns"], &[])
        }));
    }
    let starts = plan.bucket_starts.clone();
    Box::new(move |_, budget| {
        let mut counts = vec![0u64; starts.len()];
        for job in jobs {
            each_batch(job, budget, |rb| {
                let c = Cols(rb);
                if rb.column_by_name("count").is_some() {
                    for (&h, &n) in c.i64("hour_ns").values().iter().zip(c.u64("count").values().iter()) {
                        if let Some(b) = bucket_of(&starts, h) {
                            counts[b] += n;
                        }
                    }
                } else {
                    for &t in c.i64("time_ns").values().iter() {
                        if let Some(b) = bucket_of(&starts, t) {
                            counts[b] += 1;
                        }
                    }
                }
                Ok(())
            })?;
        }
        Ok(EventBuckets(counts.into_iter().map(|count| EventBucket { count, unique_users: 0 }).collect()).into())
    })
}

impl QueryKind for ActiveUsersPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let cohort = Members::of(self.cohort.as_ref())?;
        check_starts(&self.day_starts)?;
        let members = Members::start(cohort, req, shard);
        let columns = [USER, "time_ns"];
        let job = shard.scan(scan_of(req, Table::Events, Filter::default(), &columns, &EVENT_DICTIONARIES));
        let plan = self.clone();
        Ok(Box::new(move |_, budget| {
            let members = members.run(budget)?;
            Ok(active(&plan, members, job, budget)?.into())
        }))
    }
}

const MAX_BUCKETS: usize = 10_000;

pub fn check_starts(starts: &[i64]) -> Result<(), QueryError> {
    if starts.is_empty() || starts.len() > MAX_BUCKETS || starts.windows(2).any(|w| w[0] >= w[1]) {
        return Err(QueryError::BadPlan(format!("bucket starts must be 1 to {MAX_BUCKETS} increasing instants")));
    }
    Ok(())
}

/// Index of the bucket holding `t` (the scan's range starts at the first bucket).
pub(super) fn bucket_of(starts: &[i64], t: i64) -> Option<usize> {
    starts.partition_point(|s| *s <= t).checked_sub(1)
}

/// `members`: only these users' events count (a cohort filter).
pub fn buckets(
    starts: &[i64],
    members: Option<FxHashSet<u32>>,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<EventBuckets, QueryError> {
    let runs = runs_by_user(starts, job, budget, |bucket, rows| (bucket, rows))?;
    let mut counts = vec![0u64; starts.len()];
    let mut unique = vec![0u64; starts.len()];
    runs.each_user(|user, runs| {
        if members.as_ref().is_some_and(|m| !m.contains(&user)) {
            return;
        }
        runs.sort_unstable_by_key(|&(bucket, _)| bucket);
        let mut last = None;
        for &(bucket, rows) in runs.iter() {
            counts[bucket as usize] += u64::from(rows);
            if last != Some(bucket) {
                unique[bucket as usize] += 1;
                last = Some(bucket);
            }
        }
    });
    Ok(EventBuckets(
        counts.into_iter().zip(unique).map(|(count, unique_users)| EventBucket { count, unique_users }).collect(),
    ))
}

/// Every row of the scan in a bucket of `starts`, grouped by user a partition at a time, as
/// `value(bucket, rows)` per run of rows of one user and bucket. Segments are sorted by user
/// and time, so most of a user's rows of one bucket are adjacent and make one run; the
/// others make more runs of the same bucket.
fn runs_by_user<T: Copy + Default>(
    starts: &[i64],
    job: ScanJob,
    budget: &mut Budget,
    value: impl Fn(u32, u32) -> T,
) -> Result<UserRows<T>, QueryError> {
    let mut runs: UserRows<T> = UserRows::new(job.max_rows());
    each_batch_holding(job, budget, |rb| {
        let c = Cols(rb);
        let times = c.i64("time_ns").values();
        let mut run: Option<(u32, u32, u32)> = None;
        for (&user, &time) in c.u32(USER).values().iter().zip(times.iter()) {
            let Some(b) = bucket_of(starts, time) else { continue };
            let b = b as u32;
            match &mut run {
                Some((u, bucket, rows)) if *u == user && *bucket == b => *rows += 1,
                _ => {
                    if let Some((u, bucket, rows)) = run.replace((user, b, 1)) {
                        runs.push(u, value(bucket, rows));
                    }
                }
            }
        }
        if let Some((u, bucket, rows)) = run {
            runs.push(u, value(bucket, rows));
        }
        Ok(runs.bytes())
    })?;
    Ok(runs)
}

/// `members`: only these users count (a cohort filter).
pub fn active(
    plan: &ActiveUsersPlan,
    members: Option<FxHashSet<u32>>,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<ActiveDays, QueryError> {
    let days = &plan.day_starts;
    // (user, day index) of every counted row, grouped by user a partition at a time.
    let active_on = runs_by_user(days, job, budget, |day, _| day)?;
    let first = plan.first_reported as usize;
    let n = days.len();
    // A user counts for report day r when one of their days d has r - window < d <= r, i.e.
    // r in [d, d + window): per user, the union of those intervals is added to a difference
    // array, so the cost is per active day, not per (active day, covered day).
    let mut dau = vec![0u64; n];
    let (mut wau, mut mau) = (vec![0i64; n + 1], vec![0i64; n + 1]);
    active_on.each_user(|user, active_days| {
        if members.as_ref().is_some_and(|m| !m.contains(&user)) {
            return;
        }
        // Each user's active days, sorted and distinct.
        active_days.sort_unstable();
        let active_days = dedup_sorted(active_days);
        for &d in active_days.iter() {
            dau[d as usize] += 1;
        }
        cover(active_days, 7, &mut wau);
        cover(active_days, 30, &mut mau);
    });
    let (mut w, mut m) = (0i64, 0i64);
    let mut out = Vec::with_capacity(n.saturating_sub(first));
    for r in 0..n {
        w += wau[r];
        m += mau[r];
        if r >= first {
            out.push(ActiveDay { dau: dau[r], wau: w as u64, mau: m as u64 });
        }
    }
    Ok(ActiveDays(out))
}

/// The distinct values of a sorted slice, moved to its front.
fn dedup_sorted(sorted: &mut [u32]) -> &[u32] {
    let mut n = 0;
    for i in 0..sorted.len() {
        if n == 0 || sorted[i] != sorted[n - 1] {
            sorted[n] = sorted[i];
            n += 1;
        }
    }
    &sorted[..n]
}

/// Adds one to `diff` over the union of `[d, d + window)` for the sorted days `d`.
fn cover(sorted: &[u32], window: usize, diff: &mut [i64]) {
    let end = diff.len() - 1;
    let mut open: Option<(usize, usize)> = None;
    for &d in sorted {
        let (s, e) = (d as usize, (d as usize + window).min(end));
        open = match open {
            Some((os, oe)) if s <= oe => Some((os, oe.max(e))),
            Some((os, oe)) => {
                diff[os] += 1;
                diff[oe] -= 1;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((os, oe)) = open {
        diff[os] += 1;
        diff[oe] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_of_places_instants_between_starts() {
        let starts = [10, 20, 30];
        assert_eq!(
            [bucket_of(&starts, 9), bucket_of(&starts, 10), bucket_of(&starts, 29), bucket_of(&starts, 99)],
            [None, Some(0), Some(1), Some(2)]
        );
        assert!(check_starts(&[1, 1]).is_err() && check_starts(&[]).is_err() && check_starts(&[1, 2]).is_ok());
    }

    #[test]
    fn cover_counts_each_day_once_per_user() {
        let mut diff = vec![0i64; 11];
        // Windows of 3 from days 0, 1 and 6: [0, 4) and [6, 9).
        cover(&[0, 1, 6], 3, &mut diff);
        // Day 9 with a window reaching past the end: [9, 10).
        cover(&[9], 3, &mut diff);
        let mut covered = Vec::new();
        let mut sum = 0;
        for d in &diff[..10] {
            sum += d;
            covered.push(sum);
        }
        assert_eq!(covered, [1, 1, 1, 1, 0, 0, 1, 1, 1, 1]);
    }
}
