//! Funnels on one shard: every user's events (all on this shard) through
//! `model::funnel`, reduced to per-step user counts and time-to-convert sketches.

use std::collections::{HashMap, HashSet};

use sextant_model::funnel::{Funnel, Order, MAX_STEPS, MIN_STEPS};
use sextant_model::sketch::LatencySketch;
use sextant_proto::{FunnelPartial, FunnelPlan, FunnelStep};

use super::{each_batch, Budget, QueryError};
use crate::segment::table::Cols;
use crate::shard::ScanJob;

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
) -> Result<FunnelPartial, QueryError> {
    // An event is kept as the index of the first step with its name (or `NOT_A_STEP`, for
    // strict funnels), not as a string: no allocation per row.
    const NOT_A_STEP: u8 = u8::MAX;
    let step_of = |name: &str| plan.steps.iter().position(|s| s == name).map_or(NOT_A_STEP, |k| k as u8);
    let mut users: HashMap<String, Vec<(i64, u8)>> = HashMap::new();
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (ids, times, names) = (c.str("distinct_id"), c.i64("time_ns"), c.str("event"));
        for i in 0..rb.num_rows() {
            let id = ids.value(i);
            if members.is_some_and(|m| !m.contains(id)) {
                continue;
            }
            let event = (times.value(i), step_of(names.value(i)));
            match users.get_mut(id) {
                Some(events) => events.push(event),
                None => {
                    users.insert(id.to_owned(), vec![event]);
                }
            }
        }
        Ok(())
    })?;
    // Event names are never empty, so "" stands for any event that is not a step.
    let name = |k: u8| plan.steps.get(k as usize).map_or("", String::as_str);
    let funnel = Funnel {
        steps: plan.steps.clone(),
        window_ns: plan.window_nanos,
        order: if plan.strict { Order::Strict } else { Order::Ordered },
        from_ns: plan.range_from,
        to_ns: plan.range_to,
    };
    let mut counts = vec![0u64; plan.steps.len()];
    let mut sketches: Vec<LatencySketch> = (0..plan.steps.len()).map(|_| LatencySketch::default()).collect();
    let mut sums = vec![0f64; plan.steps.len()];
    for events in users.values() {
        let refs: Vec<(i64, &str)> = events.iter().map(|&(t, k)| (t, name(k))).collect();
        let chain = funnel.progress(&refs);
        for (k, t) in chain.iter().enumerate() {
            counts[k] += 1;
            if k > 0 {
                let secs = (t - chain[k - 1]) as f64 / 1e9;
                sketches[k].add(secs);
                sums[k] += secs;
            }
        }
    }
    let steps = counts
        .into_iter()
        .zip(sketches)
        .zip(sums)
        .map(|((users, sketch), seconds_sum)| FunnelStep { users, seconds_sketch: sketch.encode(), seconds_sum })
        .collect();
    Ok(FunnelPartial { steps })
}
