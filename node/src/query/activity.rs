//! Event counts per calendar bucket and active users (DAU/WAU/MAU). Distinct users are exact
//! per shard (a user's events all live on one shard), so the router's sums are exact too.

use std::collections::{HashMap, HashSet};

use sextant_proto::{ActiveDay, ActiveUsersPartial, ActiveUsersPlan, EventBucket, EventBucketsPartial};

use super::{each_batch, Budget, QueryError};
use crate::segment::table::Cols;
use crate::shard::ScanJob;

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
    members: Option<&HashSet<String>>,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<EventBucketsPartial, QueryError> {
    let mut counts = vec![0u64; starts.len()];
    let mut users: Vec<HashSet<String>> = vec![HashSet::new(); starts.len()];
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (ids, times) = (c.str("distinct_id"), c.i64("time_ns"));
        for i in 0..rb.num_rows() {
            if members.is_some_and(|m| !m.contains(ids.value(i))) {
                continue;
            }
            if let Some(b) = bucket_of(starts, times.value(i)) {
                counts[b] += 1;
                if !users[b].contains(ids.value(i)) {
                    users[b].insert(ids.value(i).to_owned());
                }
            }
        }
        Ok(())
    })?;
    let buckets =
        counts.into_iter().zip(users).map(|(count, u)| EventBucket { count, unique_users: u.len() as u64 }).collect();
    Ok(EventBucketsPartial { buckets })
}

/// `members`: only these users count (a cohort filter).
pub fn active(
    plan: &ActiveUsersPlan,
    members: Option<&HashSet<String>>,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<ActiveUsersPartial, QueryError> {
    let days = &plan.day_starts;
    // Each user's active days, as sorted day indices.
    let mut seen: HashMap<String, Vec<u32>> = HashMap::new();
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (ids, times) = (c.str("distinct_id"), c.i64("time_ns"));
        for i in 0..rb.num_rows() {
            if members.is_some_and(|m| !m.contains(ids.value(i))) {
                continue;
            }
            if let Some(d) = bucket_of(days, times.value(i)) {
                let v = seen.entry(ids.value(i).to_owned()).or_default();
                if !v.contains(&(d as u32)) {
                    v.push(d as u32);
                }
            }
        }
        Ok(())
    })?;
    let first = plan.first_reported as usize;
    let mut out = vec![ActiveDay::default(); days.len().saturating_sub(first)];
    for active_days in seen.values() {
        // A user counts for report day r when one of their days d has r - window < d <= r.
        let mut wau_days = HashSet::new();
        let mut mau_days = HashSet::new();
        for &d in active_days {
            let d = d as usize;
            if d >= first {
                out[d - first].dau += 1;
            }
            for r in d..(d + 7).min(days.len()) {
                if r >= first {
                    wau_days.insert(r);
                }
            }
            for r in d..(d + 30).min(days.len()) {
                if r >= first {
                    mau_days.insert(r);
                }
            }
        }
        wau_days.into_iter().for_each(|r| out[r - first].wau += 1);
        mau_days.into_iter().for_each(|r| out[r - first].mau += 1);
    }
    Ok(ActiveUsersPartial { days: out })
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
}
