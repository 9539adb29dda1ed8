//! Retention on one shard (docs/API.md "Retention"): per user, the cohort periods (for
//! `first_time` the period of the user's first `start_event` ever, so users who did it before
//! the first cohort are in none; for `recurring` every period with it) and the periods with
//! `return_event`; reduced to per-cohort sizes and returning users per later period.

use sextant_model::query::{RetentionCohort, RetentionCohorts, RetentionPlan, ShardQuery};

use super::users::UserRows;
use super::{activity, bytes_of, each_batch_holding, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::Cols;
use crate::segment::user_number::USER;
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
            &[USER, "time_ns", "event"],
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
        columns: vec![USER.into()],
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
    // By user number: did the start event before the first cohort.
    let mut before: Vec<bool> = Vec::new();
    if let Some(earlier) = earlier {
        each_batch_holding(earlier, budget, |rb| {
            for &u in Cols(rb).u32(USER).values().iter() {
                if before.len() <= u as usize {
                    before.resize(u as usize + 1, false);
                }
                before[u as usize] = true;
            }
            Ok(bytes_of(&before))
        })?;
    }
    // (period, marks) of every row in a period, by user.
    let mut rows: UserRows<(u32, u8)> = UserRows::new(job.max_rows());
    each_batch_holding(job, budget, |rb| {
        let c = Cols(rb);
        let times = c.i64("time_ns").values();
        let name_marks = c.strings("event").map(|name| {
            (if name == plan.start_event { STARTS } else { 0 }) | (if name == plan.return_event { RETURNS } else { 0 })
        });
        for ((&u, &time), &marks) in c.u32(USER).values().iter().zip(times.iter()).zip(&name_marks) {
            let Some(b) = activity::bucket_of(starts, time) else { continue };
            // A start counts only in a cohort period.
            let marks = marks & if b < plan.cohorts as usize { STARTS | RETURNS } else { RETURNS };
            if marks != 0 {
                rows.push(u, (b as u32, marks));
            }
        }
        Ok(bytes_of(&before) + rows.bytes())
    })?;
    let periods = plan.periods as usize;
    let mut cohorts: Vec<RetentionCohort> =
        (0..plan.cohorts).map(|_| RetentionCohort { size: 0, returned: vec![0; periods] }).collect();
    // One user's distinct cohort and return periods, ascending (reused between users).
    let (mut cohort_periods, mut returns) = (Vec::new(), Vec::new());
    rows.each_user(|u, marked| {
        if plan.first_time && before.get(u as usize).copied().unwrap_or(false) {
            return;
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
    });
    Ok(RetentionCohorts(cohorts))
}
