//! Retention on one shard (docs/API.md "Retention"): per user, the cohort periods (for
//! `first_time` the period of the user's first `start_event` ever, so users who did it before
//! the first cohort are in none; for `recurring` every period with it) and the periods with
//! `return_event`; reduced to per-cohort sizes and returning users per later period.

use sextant_model::query::{RetentionCohort, RetentionCohorts, RetentionPlan, ShardQuery};

use super::users::{ByUser, Users};
use super::{activity, bytes_of, each_batch_holding, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::Cols;
use crate::segment::{Filter, Scan, Table, EVENT_DICTIONARIES};
use crate::shard::ScanJob;

impl QueryKind for RetentionPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        check(self)?;
        let events = vec![self.start_event.clone(), self.return_event.clone()];
        let job = shard.scan(scan_of(
            req,
            Table::Events,
            Filter { events, ..Default::default() },
            &["distinct_id", "time_ns", "event"],
            &EVENT_DICTIONARIES,
        ));
        let earlier = earlier_scan(req, self).map(|s| shard.scan(s));
        let plan = self.clone();
        Ok(Box::new(move |_, budget| Ok(run(&plan, job, earlier, budget)?.into())))
    }
}

pub fn check(plan: &RetentionPlan) -> Result<(), QueryError> {
    activity::check_starts(&plan.bucket_starts)?;
    let (cohorts, periods) = (plan.cohorts as usize, plan.periods as usize);
    if cohorts == 0 || periods == 0 || cohorts > plan.bucket_starts.len() || periods > 366 {
        return Err(QueryError::BadPlan("retention needs cohorts within the buckets and 1 to 366 periods".into()));
    }
    Ok(())
}

/// For `first_time`: the `start_event` rows before the first cohort. A user who did it then is
/// not new in any cohort, however long ago that was.
pub fn earlier_scan(req: &ShardQuery, plan: &RetentionPlan) -> Option<Scan> {
    plan.first_time.then(|| Scan {
        table: Table::Events,
        project: req.project_id.clone(),
        from_ns: 0,
        to_ns: plan.bucket_starts[0],
        filter: Filter { events: vec![plan.start_event.clone()], ..Default::default() },
        columns: vec!["distinct_id".into()],
        dictionaries: EVENT_DICTIONARIES.to_vec(),
        stored_ids: false,
    })
}

/// A row's marks: its event is the start event (in a cohort period), the return event, or
/// both (they may have the same name).
const STARTS: u8 = 1;
const RETURNS: u8 = 2;

/// `earlier`: the rows of [`earlier_scan`], for `first_time`.
pub fn run(
    plan: &RetentionPlan,
    job: ScanJob,
    earlier: Option<ScanJob>,
    budget: &mut Budget,
) -> Result<RetentionCohorts, QueryError> {
    let starts = &plan.bucket_starts;
    let mut users = Users::default();
    // By user number: did the start event before the first cohort.
    let mut before: Vec<bool> = Vec::new();
    if let Some(earlier) = earlier {
        each_batch_holding(earlier, budget, |rb| {
            for u in users.numbers_of(Cols(rb).strings("distinct_id")) {
                before.resize(before.len().max(u as usize + 1), false);
                before[u as usize] = true;
            }
            Ok(users.bytes() + bytes_of(&before))
        })?;
    }
    // (user, (period, marks)) of every row in a period.
    let mut rows: Vec<(u32, (u32, u8))> = Vec::new();
    each_batch_holding(job, budget, |rb| {
        let c = Cols(rb);
        let (ids, times) = (c.strings("distinct_id"), c.i64("time_ns"));
        let name_marks = c.strings("event").map(|name| {
            (if name == plan.start_event { STARTS } else { 0 }) | (if name == plan.return_event { RETURNS } else { 0 })
        });
        for (i, u) in users.numbers_of(ids).enumerate() {
            let Some(b) = activity::bucket_of(starts, times.value(i)) else { continue };
            // A start counts only in a cohort period.
            let marks = name_marks[i] & if b < plan.cohorts as usize { STARTS | RETURNS } else { RETURNS };
            if marks != 0 {
                rows.push((u, (b as u32, marks)));
            }
        }
        // The rows twice: grouping by user copies them.
        Ok(users.bytes() + bytes_of(&before) + 2 * bytes_of(&rows))
    })?;
    before.resize(users.len(), false);
    let periods = plan.periods as usize;
    let mut cohorts: Vec<RetentionCohort> =
        (0..plan.cohorts).map(|_| RetentionCohort { size: 0, returned: vec![0; periods] }).collect();
    // One user's distinct cohort and return periods, ascending (reused between users).
    let (mut cohort_periods, mut returns) = (Vec::new(), Vec::new());
    for (u, marked) in ByUser::group(users.len(), &rows).each_mut() {
        if plan.first_time && before[u as usize] {
            continue;
        }
        marked.sort_unstable();
        cohort_periods.clear();
        returns.clear();
        for &(b, marks) in marked.iter() {
            if marks & STARTS != 0 && cohort_periods.last() != Some(&b) {
                cohort_periods.push(b);
            }
            if marks & RETURNS != 0 && returns.last() != Some(&b) {
                returns.push(b);
            }
        }
        if plan.first_time {
            cohort_periods.truncate(1);
        }
        for &c in &cohort_periods {
            let cohort = &mut cohorts[c as usize];
            cohort.size += 1;
            cohort.returned[0] += 1;
            for j in 1..periods {
                if returns.binary_search(&(c + j as u32)).is_ok() {
                    cohort.returned[j] += 1;
                }
            }
        }
    }
    Ok(RetentionCohorts(cohorts))
}
