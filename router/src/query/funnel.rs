//! `GET /api/funnel?steps=a,b,c&window=14&window_unit=day&range=30d&order=ordered|strict`
//! (docs/API.md, "Funnels"). Shards compute each user's furthest step (`model::funnel`) and
//! answer per-step counts with time-to-convert sketches; the router sums and merges.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sextant_model::calendar;
use sextant_model::funnel::{MAX_STEPS, MIN_STEPS};
use sextant_model::query::{FunnelPlan, FunnelSteps};
use sextant_model::time::format_nanos;

use super::params::{self, invalid, Params};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

const SECOND_NS: i64 = 1_000_000_000;
/// Longest conversion window.
const MAX_WINDOW_NS: i64 = 365 * 86_400 * SECOND_NS;

/// The parameters of `GET /api/funnel`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FunnelQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    /// The event names of the steps, comma-separated, in order (2 to 10).
    #[param(required = true)]
    pub steps: Option<String>,
    pub window: Option<String>,
    pub window_unit: Option<String>,
    /// `ordered` (default) or `strict`.
    pub order: Option<String>,
    /// Where step 1 may happen: a relative range ending at `to` (default 30 days).
    pub range: Option<String>,
    pub cohort_id: Option<String>,
}

fn window_ns(q: &FunnelQuery) -> Result<i64, ApiError> {
    let n: i64 = match q.window.as_deref() {
        None => 14,
        Some(v) => v.parse().ok().filter(|n| *n > 0).ok_or_else(|| invalid("window", "must be a positive integer"))?,
    };
    let unit = match q.window_unit.as_deref().unwrap_or("day") {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        _ => return Err(invalid("window_unit", "must be second, minute, hour, day or week")),
    };
    n.checked_mul(unit * SECOND_NS)
        .filter(|w| *w <= MAX_WINDOW_NS)
        .ok_or_else(|| invalid("window", "may be at most 365 days"))
}

/// `[from, to)` where step 1 may happen: `range` ending at `to` (default now).
fn step_one_range(q: &FunnelQuery, now_ns: i64) -> Result<(i64, i64), ApiError> {
    let range = calendar::parse_range(q.range.as_deref().unwrap_or("30d"))
        .ok_or_else(|| invalid("range", "must be a positive integer and a unit m, h, d or w"))?;
    let to = q.params.to()?.unwrap_or(now_ns);
    let from = to.checked_sub(range).ok_or_else(|| invalid("range", "reaches outside the supported time range"))?;
    Ok((from, to))
}

/// A step of `GET /api/funnel`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FunnelStep {
    pub event: String,
    /// Users who reached this step (within the window, in order).
    pub count: u64,
    pub conversion_from_start: f64,
    pub conversion_from_previous: f64,
    /// From the previous step; null for the first step and for a step nobody reached.
    pub median_seconds_to_convert: Option<f64>,
    pub avg_seconds_to_convert: Option<f64>,
}

/// `GET /api/funnel`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Funnel {
    pub steps: Vec<FunnelStep>,
    pub window_seconds: i64,
    pub from: String,
    pub to: String,
}

#[utoipa::path(
    get, path = "/api/funnel", tag = "analytics", summary = "A conversion funnel",
    params(crate::query::params::Params, FunnelQuery),
    responses((status = 200, description = "A conversion funnel.", body = crate::query::scatter::Answer<Funnel>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn funnel(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Funnel>>, ApiError> {
    let q: FunnelQuery = params::parse(raw.as_deref())?;
    let steps: Vec<String> = q
        .steps
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if !(MIN_STEPS..=MAX_STEPS).contains(&steps.len()) {
        return Err(invalid("steps", &format!("must list {MIN_STEPS} to {MAX_STEPS} event names, comma-separated")));
    }
    if steps.iter().any(|s| s.chars().count() > 200) {
        return Err(invalid("steps", "event names have at most 200 characters"));
    }
    let window = window_ns(&q)?;
    let strict = match q.order.as_deref().unwrap_or("ordered") {
        "ordered" => false,
        "strict" => true,
        _ => return Err(invalid("order", "must be ordered or strict")),
    };
    let (from, to) = step_one_range(&q, app.clock.now_nanos())?;
    let cohort = crate::query::cohorts::filter(&app, &session, q.cohort_id.as_deref(), to).await?;
    let plan =
        FunnelPlan { steps: steps.clone(), window_nanos: window, strict, range_from: from, range_to: to, cohort };
    // Later steps may happen up to a window after the range.
    let scan_range = (from, to.saturating_add(window));
    let mut gathered = scatter(&app, &session.project_id, scan_range, q.params.allow_partial()?, plan).await?;
    let merged = gathered.fold::<FunnelSteps>().fit(steps.len());
    let users: Vec<u64> = merged.iter().map(|s| s.users).collect();
    let rate = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let steps = steps
        .into_iter()
        .zip(&merged)
        .enumerate()
        .map(|(k, (event, step))| {
            let (median, avg) = if k == 0 || users[k] == 0 {
                (None, None)
            } else {
                (step.seconds.quantile(0.5), Some(step.seconds_sum / users[k] as f64))
            };
            FunnelStep {
                event,
                count: users[k],
                conversion_from_start: rate(users[k], users[0]),
                conversion_from_previous: rate(users[k], if k == 0 { users[0] } else { users[k - 1] }),
                median_seconds_to_convert: median,
                avg_seconds_to_convert: avg,
            }
        })
        .collect();
    Ok(gathered.answer(Funnel {
        steps,
        window_seconds: window / SECOND_NS,
        from: format_nanos(from),
        to: format_nanos(to),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The clock's reading in these tests: 2026-11-22T10:15:30Z.
    const NOW: i64 = 1_795_342_530 * 1_000_000_000;

    fn range(q: &str) -> Result<(i64, i64), ApiError> {
        step_one_range(&params::parse(Some(q)).unwrap(), NOW)
    }

    #[test]
    fn a_funnel_ending_before_1970_is_a_400_not_an_empty_plan() {
        // `to - range` wrapped past `to`, and the shards refused the plan: a 500.
        let err = range("steps=a,b&to=1677-09-21T00:12:44Z").unwrap_err();
        assert!(matches!(err, ApiError::BadRequest("invalid_parameter", _)), "{err:?}");
        assert_eq!(range("to=1000&range=1m").unwrap(), (1_000_000_000 - 60_000_000_000, 1_000_000_000));
        // 90 days and more are a range like any other; a count of weeks past i64 is a 400.
        assert_eq!(range("range=90d").unwrap(), (NOW - 90 * 86_400 * SECOND_NS, NOW));
        assert_eq!(range("range=400d").unwrap(), (NOW - 400 * 86_400 * SECOND_NS, NOW));
        assert!(matches!(range("range=99999999999999w"), Err(ApiError::BadRequest("invalid_parameter", _))));
        assert!(matches!(range("range=-5d"), Err(ApiError::BadRequest("invalid_parameter", _))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn step_one_ranges_end_at_an_accepted_instant_or_are_a_400(
            to in prop_oneof![any::<i64>().prop_map(|v| v.to_string()), any::<f64>().prop_map(|v| v.to_string())],
            n in any::<i64>(),
            unit in "[mhdwy]",
            window in any::<i64>(),
            window_unit in "second|minute|hour|day|week|year",
        ) {
            let q = format!("to={to}&range={n}{unit}&window={window}&window_unit={window_unit}");
            let params: FunnelQuery = params::parse(Some(&q)).unwrap();
            match step_one_range(&params, NOW) {
                Ok((from, to)) => {
                    prop_assert!(from < to && sextant_model::time::check_instant(to).is_ok());
                    prop_assert!(to.checked_sub(from).is_some());
                }
                Err(e) => prop_assert!(matches!(e, ApiError::BadRequest("invalid_parameter", _))),
            }
            match window_ns(&params) {
                Ok(w) => prop_assert!(w > 0 && w <= MAX_WINDOW_NS),
                Err(e) => prop_assert!(matches!(e, ApiError::BadRequest("invalid_parameter", _))),
            }
        }
    }
}
