//! Funnels on one shard: every user's events (all on this shard) through
//! `model::funnel`, reduced to per-step user counts and time-to-convert sketches.

use std::collections::HashSet;

use arrow_array::RecordBatch;
use sextant_model::funnel::{Funnel, Order, StepEvent, MAX_STEPS, MIN_STEPS, NOT_A_STEP};
use sextant_model::query::{FunnelPlan, FunnelStep, FunnelSteps, ShardQuery};
use sextant_model::sketch::LatencySketch;

use super::cohort::Members;
use super::users::{Admitted, ByUser, Users};
use super::{bytes_of, each_batch_holding, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::Cols;
use crate::segment::{Filter, Table, EVENT_DICTIONARIES};
use crate::shard::ScanJob;

impl QueryKind for FunnelPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let cohort = Members::of(self.cohort.as_ref())?;
        check(self)?;
        let members = Members::start(cohort, req, shard);
        // Strict funnels must see every event of a user (nothing may come between steps).
        let events = if self.strict { Vec::new() } else { self.steps.clone() };
        let job = shard.scan(scan_of(
            req,
            Table::Events,
            Filter { events, ..Default::default() },
            &["distinct_id", "time_ns", "event"],
            &EVENT_DICTIONARIES,
        ));
        let plan = self.clone();
        Ok(Box::new(move |_, budget| {
            let members = members.run(budget)?;
            Ok(run(&plan, members.as_ref(), job, budget)?.into())
        }))
    }
}

pub fn check(plan: &FunnelPlan) -> Result<(), QueryError> {
    if !(MIN_STEPS..=MAX_STEPS).contains(&plan.steps.len())
        || plan.window_nanos <= 0
        || plan.range_from >= plan.range_to
    {
        return Err(QueryError::BadPlan("a funnel has 2 to 10 steps, a positive window and a range".into()));
    }
    Ok(())
}

/// `members`: only these users enter the funnel (a cohort filter).
pub fn run(
    plan: &FunnelPlan,
    members: Option<&HashSet<String>>,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<FunnelSteps, QueryError> {
    let mut progress = Progress::new(plan, members);
    // Sized once: growing it copied tens of MB and faulted in fresh pages. Capacity past what
    // is used stays untouched, so costs no memory, but address space: beyond MAX_RESERVED rows
    // (a small machine may refuse gigabytes at once) the list grows as it needs.
    progress.rows.reserve(job.max_rows().min(budget.max).min(MAX_RESERVED) as usize);
    each_batch_holding(job, budget, |rb| {
        progress.add(rb);
        // The rows twice: grouping by user copies them.
        Ok(progress.users.bytes() + 2 * bytes_of(&progress.rows))
    })?;
    Ok(progress.partial())
}

/// Rows reserved up front at most (384 MiB of address space).
const MAX_RESERVED: u64 = 1 << 24;

/// The funnel's rows, batch by batch, then every user's progress. A row is kept as
/// (user number, (time, step)): no allocation per row or per user, and the users' events are
/// grouped by a counting sort, not a map of vectors.
struct Progress<'a> {
    funnel: Funnel,
    users: Users,
    admitted: Admitted<'a>,
    rows: Vec<(u32, StepEvent)>,
}

impl<'a> Progress<'a> {
    fn new(plan: &FunnelPlan, members: Option<&'a HashSet<String>>) -> Self {
        let order = if plan.strict { Order::Strict } else { Order::Ordered };
        let funnel = Funnel::new(plan.steps.clone(), plan.window_nanos, order, plan.range_from, plan.range_to);
        Progress { funnel, users: Users::default(), admitted: Admitted::new(members), rows: Vec::new() }
    }

    /// Takes the rows of a batch with `distinct_id`, `time_ns` and `event`.
    fn add(&mut self, rb: &RecordBatch) {
        let c = Cols(rb);
        let (ids, times) = (c.strings("distinct_id"), c.i64("time_ns"));
        let steps = c.strings("event").map(|name| self.funnel.step_of(name));
        for (i, u) in self.users.numbers_of(ids).enumerate() {
            if self.admitted.admits(u, || ids.value(i)) {
                self.rows.push((u, (times.value(i), steps[i])));
            }
        }
    }

    fn partial(mut self) -> FunnelSteps {
        let n = self.funnel.steps.len();
        let mut counts = vec![0u64; n];
        let mut sketches: Vec<LatencySketch> = (0..n).map(|_| LatencySketch::default()).collect();
        let mut sums = vec![0f64; n];
        counts[0] += self.set_aside_users_who_only_start();
        for (_, events) in ByUser::group(self.users.len(), &self.rows).each_mut() {
            let chain = self.funnel.progress_of_steps(events);
            let chain = chain.times();
            for (k, t) in chain.iter().enumerate() {
                counts[k] += 1;
                if k > 0 {
                    let secs = (t - chain[k - 1]) as f64 / 1e9;
                    sketches[k].add(secs);
                    sums[k] += secs;
                }
            }
        }
        FunnelSteps(
            counts
                .into_iter()
                .zip(sketches)
                .zip(sums)
                .map(|((users, seconds), seconds_sum)| FunnelStep { users, seconds, seconds_sum })
                .collect(),
        )
    }

    /// Most users of a funnel never do a later step: a user whose rows are all of the first
    /// step (or of no step) reaches step 1 exactly when one of them is inside the range, with
    /// no time to convert. Those users are counted here and their rows dropped, so that only
    /// the others' are grouped and sorted (unless a later step has the first one's name: then
    /// such rows may stand for more than the start). Returns how many reached step 1 so.
    fn set_aside_users_who_only_start(&mut self) -> u64 {
        if self.funnel.repeats_first_step() {
            return 0;
        }
        let (mut later, mut started) = (vec![false; self.users.len()], vec![false; self.users.len()]);
        let range = self.funnel.from_ns..self.funnel.to_ns;
        for &(u, (t, step)) in &self.rows {
            match step {
                0 => started[u as usize] |= range.contains(&t),
                NOT_A_STEP => {}
                _ => later[u as usize] = true,
            }
        }
        self.rows.retain(|&(u, _)| later[u as usize]);
        started.iter().zip(&later).filter(|&(&s, &l)| s && !l).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use proptest::prelude::*;

    use super::*;

    fn batch(rows: &[(String, i64, String)]) -> RecordBatch {
        let ids: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0.as_str())));
        let times: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
        let names: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2.as_str())));
        RecordBatch::try_from_iter([("distinct_id", ids), ("time_ns", times), ("event", names)]).unwrap()
    }

    proptest! {
        /// Users numbered and grouped, events as step numbers: the same per-step counts and
        /// times to convert as every user's (time, name) events through `Funnel::progress`.
        #[test]
        fn grouped_progress_equals_each_users_progress(
            rows in proptest::collection::vec((0u8..12, 0i64..60, 0u8..5), 0..200),
            cut in 0usize..200,
            steps in proptest::collection::vec(0u8..4, 2..5),
            strict in proptest::bool::ANY,
            cohort in proptest::bool::ANY,
        ) {
            let rows: Vec<(String, i64, String)> =
                rows.iter().map(|&(u, t, e)| (format!("user-{u}"), t * 1_000_000_000, format!("e{e}"))).collect();
            let plan = FunnelPlan {
                steps: steps.iter().map(|k| format!("e{k}")).collect(),
                window_nanos: 10_000_000_000,
                strict,
                range_from: 5_000_000_000,
                range_to: 40_000_000_000,
                cohort: None,
            };
            let members: HashSet<String> = (0..12).step_by(2).map(|u| format!("user-{u}")).collect();
            let members = cohort.then_some(&members);
            let mut progress = Progress::new(&plan, members);
            let cut = cut.min(rows.len());
            progress.add(&batch(&rows[..cut]));
            progress.add(&batch(&rows[cut..]));
            let got = progress.partial();

            let mut by_user: HashMap<&str, Vec<(i64, &str)>> = HashMap::new();
            for (u, t, e) in &rows {
                if members.is_none_or(|m| m.contains(u)) {
                    by_user.entry(u.as_str()).or_default().push((*t, e.as_str()));
                }
            }
            let funnel = Progress::new(&plan, None).funnel;
            let mut counts = vec![0u64; steps.len()];
            let mut sums = vec![0f64; steps.len()];
            for events in by_user.values() {
                let chain = funnel.progress(events);
                for (k, t) in chain.iter().enumerate() {
                    counts[k] += 1;
                    if k > 0 {
                        sums[k] += (t - chain[k - 1]) as f64 / 1e9;
                    }
                }
            }
            prop_assert_eq!(got.0.iter().map(|s| s.users).collect::<Vec<_>>(), counts);
            // Whole seconds: the sums are exact whatever the order of the users.
            prop_assert_eq!(got.0.iter().map(|s| s.seconds_sum).collect::<Vec<_>>(), sums);
        }
    }
}
