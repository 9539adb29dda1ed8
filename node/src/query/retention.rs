//! Retention on one shard (DESIGN A8): per user, the cohort periods (for `first_time` the
//! period of the user's first `start_event` ever, so users who did it before the first cohort
//! are in none; for `recurring` every period with it) and the periods with
//! `return_event`; reduced to per-cohort sizes and returning users per later period.

use std::collections::{BTreeSet, HashMap, HashSet};

use sextant_proto::{QueryRequest, RetentionCohort, RetentionPartial, RetentionPlan};

use super::{activity, each_batch, Budget, QueryError};
use crate::segment::table::Cols;
use crate::segment::{Filter, Scan, Table};
use crate::shard::ScanJob;

pub fn check(plan: &RetentionPlan) -> Result<(), QueryError> {
    activity::check_starts(&plan.bucket_starts)?;
    let (cohorts, periods) = (plan.cohorts as usize, plan.periods as usize);
    if cohorts == 0 || periods == 0 || cohorts > plan.bucket_starts.len() || periods > 366 {
        return Err(QueryError::BadPlan("retention needs cohorts within the buckets and 1 to 366 periods".into()));
    }
    Ok(())
}

#[derive(Default)]
struct User {
    starts: BTreeSet<usize>,
    returns: BTreeSet<usize>,
}

/// For `first_time`: the `start_event` rows before the first cohort. A user who did it then is
/// not new in any cohort, however long ago that was.
pub fn earlier_scan(req: &QueryRequest, plan: &RetentionPlan) -> Option<Scan> {
    plan.first_time.then(|| Scan {
        table: Table::Events,
        project: req.project_id.clone(),
        from_ns: 0,
        to_ns: plan.bucket_starts[0],
        filter: Filter { events: vec![plan.start_event.clone()], ..Default::default() },
        columns: vec!["distinct_id".into()],
        dictionaries: Vec::new(),
    })
}

/// `earlier`: the rows of [`earlier_scan`], for `first_time`.
pub fn run(
    plan: &RetentionPlan,
    job: ScanJob,
    earlier: Option<ScanJob>,
    budget: &mut Budget,
) -> Result<RetentionPartial, QueryError> {
    let starts = &plan.bucket_starts;
    let mut before: HashSet<String> = HashSet::new();
    if let Some(earlier) = earlier {
        each_batch(earlier, budget, |rb| {
            let ids = Cols(rb).str("distinct_id");
            for i in 0..rb.num_rows() {
                if !before.contains(ids.value(i)) {
                    before.insert(ids.value(i).to_owned());
                }
            }
            Ok(())
        })?;
    }
    let mut users: HashMap<String, User> = HashMap::new();
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (ids, times, names) = (c.str("distinct_id"), c.i64("time_ns"), c.str("event"));
        for i in 0..rb.num_rows() {
            let Some(b) = activity::bucket_of(starts, times.value(i)) else { continue };
            // Look up before allocating the key: most rows are of users already seen.
            if !users.contains_key(ids.value(i)) {
                users.insert(ids.value(i).to_owned(), User::default());
            }
            let Some(u) = users.get_mut(ids.value(i)) else { continue };
            // One event may be both (start and return events with the same name).
            if names.value(i) == plan.start_event && b < plan.cohorts as usize {
                u.starts.insert(b);
            }
            if names.value(i) == plan.return_event {
                u.returns.insert(b);
            }
        }
        Ok(())
    })?;
    let periods = plan.periods as usize;
    let mut cohorts: Vec<RetentionCohort> =
        (0..plan.cohorts).map(|_| RetentionCohort { size: 0, returned: vec![0; periods] }).collect();
    for (id, u) in &users {
        if plan.first_time && before.contains(id) {
            continue;
        }
        let cohort_periods: Vec<usize> = if plan.first_time {
            u.starts.iter().next().copied().into_iter().collect()
        } else {
            u.starts.iter().copied().collect()
        };
        for c in cohort_periods {
            let cohort = &mut cohorts[c];
            cohort.size += 1;
            cohort.returned[0] += 1;
            for j in 1..periods {
                if u.returns.contains(&(c + j)) {
                    cohort.returned[j] += 1;
                }
            }
        }
    }
    Ok(RetentionPartial { cohorts })
}
