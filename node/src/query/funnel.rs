//! Funnels on one shard: every user's events (all on this shard) through
//! `model::funnel`, reduced to per-step user counts and time-to-convert sketches.

use arrow_array::RecordBatch;
use rustc_hash::FxHashSet;
use sextant_model::funnel::{Funnel, Order, StepEvent, MAX_STEPS, MIN_STEPS, NOT_A_STEP};
use sextant_model::query::{FunnelPlan, FunnelStep, FunnelSteps, ShardQuery};
use sextant_model::sketch::LatencySketch;

use super::cohort::Members;
use super::users::UserRows;
use super::{each_batch_holding, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::Cols;
use crate::segment::user_number::USER;
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
            &[USER, "time_ns", "event"],
            &EVENT_DICTIONARIES,
        ));
        let plan = self.clone();
        Ok(Box::new(move |_, budget| {
            let members = members.run(budget)?;
            Ok(run(&plan, members, job, budget)?.into())
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
    members: Option<FxHashSet<u32>>,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<FunnelSteps, QueryError> {
    // Times are packed as offsets from the range's start unless the range is too long for it.
    if i128::from(job.to_ns()) - i128::from(job.from_ns()) < 1 << OFFSET_BITS {
        progress::<Packed>(plan, members, job, budget)
    } else {
        progress::<StepEvent>(plan, members, job, budget)
    }
}

fn progress<K: Kept>(
    plan: &FunnelPlan,
    members: Option<FxHashSet<u32>>,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<FunnelSteps, QueryError> {
    let mut progress = Progress::<K>::new(plan, members, job.max_rows(), job.from_ns());
    each_batch_holding(job, budget, |rb| {
        progress.add(rb);
        Ok(progress.rows.bytes())
    })?;
    Ok(progress.partial())
}

/// The funnel's rows, batch by batch, then every user's progress. A row is kept as (user,
/// time and step), the user as its number on the shard: no allocation per row or per user,
/// and the users' events are grouped partition by partition ([`UserRows`]).
struct Progress<K> {
    funnel: Funnel,
    members: Option<FxHashSet<u32>>,
    rows: UserRows<K>,
    /// Where the scanned range starts.
    from_ns: i64,
}

/// How a row's time and step are kept until its user's rows are grouped.
trait Kept: Copy + Default {
    fn keep(from_ns: i64, time: i64, step: u8) -> Self;
    fn event(self, from_ns: i64) -> StepEvent;
}

impl Kept for StepEvent {
    fn keep(_: i64, time: i64, step: u8) -> Self {
        (time, step)
    }

    fn event(self, _: i64) -> StepEvent {
        self
    }
}

/// A row's time (nanoseconds after the scan's start) and step in one word: 8 bytes a row
/// where the pair takes 16 (a tenth of a funnel's CPU). Sixty bits of offset hold 36 years.
#[derive(Clone, Copy, Default)]
struct Packed(u64);

const STEP_BITS: u32 = 4;
const OFFSET_BITS: u32 = 64 - STEP_BITS;
/// [`NOT_A_STEP`] as packed (steps are 0 to 9).
const PACKED_NOT_A_STEP: u64 = (1 << STEP_BITS) - 1;

impl Kept for Packed {
    /// `time` is in the scanned range, whose length fits [`OFFSET_BITS`].
    fn keep(from_ns: i64, time: i64, step: u8) -> Self {
        let offset = time.wrapping_sub(from_ns) as u64;
        let step = if step == NOT_A_STEP { PACKED_NOT_A_STEP } else { u64::from(step) };
        Packed(offset << STEP_BITS | step)
    }

    fn event(self, from_ns: i64) -> StepEvent {
        let step = match self.0 & PACKED_NOT_A_STEP {
            PACKED_NOT_A_STEP => NOT_A_STEP,
            s => s as u8,
        };
        (from_ns.wrapping_add((self.0 >> STEP_BITS) as i64), step)
    }
}

impl<K: Kept> Progress<K> {
    /// `expected`: about how many rows will come; `from_ns`: the start of the scanned range.
    fn new(plan: &FunnelPlan, members: Option<FxHashSet<u32>>, expected: u64, from_ns: i64) -> Self {
        let order = if plan.strict { Order::Strict } else { Order::Ordered };
        let funnel = Funnel::new(plan.steps.clone(), plan.window_nanos, order, plan.range_from, plan.range_to);
        Progress { funnel, members, rows: UserRows::new(expected), from_ns }
    }

    /// Takes the rows of a batch with `user`, `time_ns` and `event`.
    fn add(&mut self, rb: &RecordBatch) {
        let c = Cols(rb);
        let times = c.i64("time_ns").values();
        let steps = c.strings("event").map(|name| self.funnel.step_of(name));
        for ((&user, &time), &step) in c.u32(USER).values().iter().zip(times.iter()).zip(&steps) {
            self.rows.push(user, K::keep(self.from_ns, time, step));
        }
    }

    fn partial(self) -> FunnelSteps {
        let Progress { funnel, members, rows, from_ns } = self;
        let n = funnel.steps.len();
        let mut counts = vec![0u64; n];
        let mut sketches: Vec<LatencySketch> = (0..n).map(|_| LatencySketch::default()).collect();
        let mut sums = vec![0f64; n];
        let only_starts = !funnel.repeats_first_step();
        let range = funnel.from_ns..funnel.to_ns;
        let mut events: Vec<StepEvent> = Vec::new();
        rows.each_user(|user, kept| {
            if members.as_ref().is_some_and(|m| !m.contains(&user)) {
                return;
            }
            events.clear();
            events.extend(kept.iter().map(|k| k.event(from_ns)));
            // Most users of a funnel never do a later step: one whose events are all of the
            // first step (or of no step) reaches step 1 exactly when one of them is inside the
            // range, with no time to convert (unless a later step has the first one's name:
            // then such an event may stand for more than the start).
            if only_starts && events.iter().all(|&(_, step)| step == 0 || step == NOT_A_STEP) {
                counts[0] += events.iter().any(|&(t, step)| step == 0 && range.contains(&t)) as u64;
                return;
            }
            let chain = funnel.progress_of_steps(&mut events);
            let chain = chain.times();
            for (k, t) in chain.iter().enumerate() {
                counts[k] += 1;
                if k > 0 {
                    let secs = (t - chain[k - 1]) as f64 / 1e9;
                    sketches[k].add(secs);
                    sums[k] += secs;
                }
            }
        });
        FunnelSteps(
            counts
                .into_iter()
                .zip(sketches)
                .zip(sums)
                .map(|((users, seconds), seconds_sum)| FunnelStep { users, seconds, seconds_sum })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, StringArray, UInt32Array};
    use proptest::prelude::*;

    use super::*;

    fn batch(rows: &[(u32, i64, String)]) -> RecordBatch {
        let users: ArrayRef = Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.0)));
        let times: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
        let names: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2.as_str())));
        RecordBatch::try_from_iter([(USER, users), ("time_ns", times), ("event", names)]).unwrap()
    }

    proptest! {
        /// Users numbered and grouped, events as step numbers: the same per-step counts and
        /// times to convert as every user's (time, name) events through `Funnel::progress`,
        /// whether rows are kept packed or as pairs, wherever the range starts.
        #[test]
        fn grouped_progress_equals_each_users_progress(
            rows in proptest::collection::vec((0u8..12, 0i64..60, 0u8..5), 0..200),
            cut in 0usize..200,
            steps in proptest::collection::vec(0u8..4, 2..5),
            strict in proptest::bool::ANY,
            cohort in proptest::bool::ANY,
            from_ns in prop_oneof![Just(0i64), Just(1_790_000_000_000_000_000), Just(-3_000_000_000_000_000_000)],
        ) {
            let rows: Vec<(u32, i64, String)> =
                rows.iter().map(|&(u, t, e)| (u32::from(u), from_ns + t * 1_000_000_000, format!("e{e}"))).collect();
            let plan = FunnelPlan {
                steps: steps.iter().map(|k| format!("e{k}")).collect(),
                window_nanos: 10_000_000_000,
                strict,
                range_from: from_ns + 5_000_000_000,
                range_to: from_ns + 40_000_000_000,
                cohort: None,
            };
            let members: FxHashSet<u32> = (0..12).step_by(2).collect();
            let members = cohort.then_some(members);
            let cut = cut.min(rows.len());
            fn grouped<K: Kept>(plan: &FunnelPlan, members: Option<FxHashSet<u32>>, rows: &[(u32, i64, String)], cut: usize, from_ns: i64) -> FunnelSteps {
                let mut progress = Progress::<K>::new(plan, members, rows.len() as u64 / 2, from_ns);
                progress.add(&batch(&rows[..cut]));
                progress.add(&batch(&rows[cut..]));
                progress.partial()
            }
            let got = grouped::<Packed>(&plan, members.clone(), &rows, cut, from_ns);
            let plain = grouped::<StepEvent>(&plan, members.clone(), &rows, cut, from_ns);

            let mut by_user: HashMap<u32, Vec<(i64, &str)>> = HashMap::new();
            for (u, t, e) in &rows {
                if members.as_ref().is_none_or(|m| m.contains(u)) {
                    by_user.entry(*u).or_default().push((*t, e.as_str()));
                }
            }
            let funnel = Progress::<StepEvent>::new(&plan, None, 0, 0).funnel;
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
            for got in [got, plain] {
                prop_assert_eq!(got.0.iter().map(|s| s.users).collect::<Vec<_>>(), counts.clone());
                // Whole seconds: the sums are exact whatever the order of the users.
                prop_assert_eq!(got.0.iter().map(|s| s.seconds_sum).collect::<Vec<_>>(), sums.clone());
            }
        }
    }
}
