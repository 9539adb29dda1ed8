//! `GET /api/retention?start_event&return_event&period&periods&from&to&type&tz` (docs/API.md,
//! "Retention"): cohorts of users by the period they did `start_event` in (their first such
//! period for `first_time`, every one for `recurring`), and how many of each did `return_event`
//! j periods later. Only on plans with the `retention` feature. Periods are calendar buckets of
//! the caller's time zone; shards count per user and the router sums.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sextant_model::calendar::{self, Interval};
use sextant_model::query::{RetentionCohorts, RetentionPlan};
use sextant_model::subscription::{has_feature, FEATURE_RETENTION};
use sextant_model::time::{format_nanos, MIN_INSTANT_NS};

use super::params::{self, invalid, Params};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::query::activity::{calendar_error, zone};
use crate::AppState;

const MAX_PERIODS: u32 = 100;
/// Generous bound on a month, to find the buckets after the last cohort.
const MONTH_NS: i64 = 32 * 86_400 * 1_000_000_000;

fn require_feature(app: &AppState, session: &Session) -> Result<(), ApiError> {
    let cache = app.meta()?;
    if has_feature(cache.plan_of(&session.claims.org, app.clock.now_millis()), FEATURE_RETENTION) {
        Ok(())
    } else {
        Err(ApiError::Forbidden("plan_feature_unavailable", "retention analytics are not part of this plan"))
    }
}

/// The longest a period of `interval` may be.
fn period_ns(interval: Interval) -> i64 {
    match interval {
        Interval::Hour => 3600 * 1_000_000_000,
        Interval::Day => 86_400 * 1_000_000_000,
        Interval::Week => 7 * 86_400 * 1_000_000_000,
        Interval::Month => MONTH_NS,
    }
}

/// Cohorts of a retention without `from`: 8 days or weeks, 12 months.
fn default_cohorts(interval: Interval) -> usize {
    if interval == Interval::Month {
        12
    } else {
        8
    }
}

/// Where cohorts start without `from`: the start of the [`default_cohorts`]-th period back
/// from the one holding the instant before `to` (that one included; it may still be running).
fn default_from(to: i64, interval: Interval, tz: &jiff::tz::TimeZone) -> Result<i64, ApiError> {
    let n = default_cohorts(interval);
    let back = period_ns(interval).saturating_mul(n as i64 + 1);
    let starts = calendar::bucket_starts(to.saturating_sub(back).max(MIN_INSTANT_NS), to, interval, tz)
        .map_err(|e| calendar_error("to", e))?;
    // Near 1970 there are fewer periods before `to`: from the first.
    starts.get(starts.len().saturating_sub(n)).copied().ok_or_else(|| invalid("to", "must be after 1970"))
}

/// For cohorts over `[from, to)`: the cohort starts, the start of every bucket a cohort's
/// periods cover, and where the last bucket ends.
fn buckets(
    from: i64,
    to: i64,
    interval: Interval,
    periods: u32,
    tz: &jiff::tz::TimeZone,
) -> Result<(Vec<i64>, Vec<i64>, i64), ApiError> {
    let too_far = || invalid("periods", "reaches past the supported time range");
    let cohort_starts = calendar::bucket_starts(from, to, interval, tz).map_err(|e| calendar_error("period", e))?;
    let horizon = to.saturating_add(period_ns(interval).saturating_add(MONTH_NS).saturating_mul(i64::from(periods)));
    let mut all = calendar::bucket_starts(from, horizon, interval, tz).map_err(|_| too_far())?;
    let needed = cohort_starts.len() + periods as usize;
    if cohort_starts.is_empty() || all.len() < needed {
        return Err(too_far());
    }
    all.truncate(needed);
    let scan_end = all.pop().ok_or_else(too_far)?;
    Ok((cohort_starts, all, scan_end))
}

/// The parameters of `GET /api/retention`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RetentionQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    #[param(required = true)]
    pub start_event: Option<String>,
    #[param(required = true)]
    pub return_event: Option<String>,
    /// `day` (default), `week` or `month`.
    pub period: Option<String>,
    /// Periods followed after each cohort's own (default 8).
    pub periods: Option<String>,
    /// `first_time` (default) or `recurring`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub tz: Option<String>,
}

/// Returning users of a cohort `period` periods after its own.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RetentionValue {
    pub period: usize,
    pub count: u64,
    pub rate: f64,
}

/// Users who did `start_event` in one period.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RetentionCohortJson {
    pub cohort_start: String,
    pub size: u64,
    pub values: Vec<RetentionValue>,
}

/// `GET /api/retention`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Retention {
    pub period: &'static str,
    pub cohorts: Vec<RetentionCohortJson>,
}

#[utoipa::path(
    get, path = "/api/retention", tag = "analytics", summary = "Retention cohorts",
    params(crate::query::params::Params, RetentionQuery),
    responses((status = 200, description = "Retention cohorts.", body = crate::query::scatter::Answer<Retention>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn retention(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Retention>>, ApiError> {
    require_feature(&app, &session)?;
    let q: RetentionQuery = params::parse(raw.as_deref())?;
    let start_event = q.start_event.ok_or_else(|| invalid("start_event", "is required"))?;
    let return_event = q.return_event.ok_or_else(|| invalid("return_event", "is required"))?;
    let interval = Interval::parse(q.period.as_deref().unwrap_or("day"))
        .map_err(|_| invalid("period", "must be day, week or month"))?;
    if interval == Interval::Hour {
        return Err(invalid("period", "must be day, week or month"));
    }
    let periods: u32 = match q.periods.as_deref() {
        None => 8,
        Some(v) => v
            .parse()
            .ok()
            .filter(|n| (1..=MAX_PERIODS).contains(n))
            .ok_or_else(|| invalid("periods", "must be an integer from 1 to 100"))?,
    };
    let first_time = match q.kind.as_deref().unwrap_or("first_time") {
        "first_time" => true,
        "recurring" => false,
        _ => return Err(invalid("type", "must be first_time or recurring")),
    };
    let tz = zone(q.tz.as_deref())?;
    let now = app.clock.now_nanos();
    let to = q.params.to()?.unwrap_or(now);
    let (from, to) = q.params.range_or(to.saturating_sub(default_from(to, interval, &tz)?), now)?;
    let (cohort_starts, bucket_starts, scan_end) = buckets(from, to, interval, periods, &tz)?;
    let plan = RetentionPlan {
        start_event,
        return_event,
        bucket_starts: bucket_starts.clone(),
        cohorts: cohort_starts.len() as u32,
        periods,
        first_time,
    };
    let range = (bucket_starts[0], scan_end);
    let mut gathered = scatter(&app, &session.project_id, range, q.params.allow_partial()?, plan).await?;
    let sums = gathered.fold::<RetentionCohorts>().fit(cohort_starts.len(), periods as usize);
    let cohorts = cohort_starts
        .iter()
        .zip(&sums)
        .map(|(start, c)| {
            let values = c
                .returned
                .iter()
                .enumerate()
                .map(|(j, n)| {
                    let rate = if c.size == 0 { 0.0 } else { *n as f64 / c.size as f64 };
                    RetentionValue { period: j, count: *n, rate }
                })
                .collect();
            RetentionCohortJson { cohort_start: format_nanos(*start), size: c.size, values }
        })
        .collect();
    Ok(gathered.answer(Retention { period: interval.name(), cohorts }))
}

#[cfg(test)]
mod tests {
    use super::*;
    /// Longest span tried: about two years.
    const MAX_RANGE_NS: i64 = 800 * 86_400 * 1_000_000_000;
    use proptest::prelude::*;

    const ZONES: [&str; 3] = ["UTC", "Europe/Paris", "Pacific/Kiritimati"];

    #[test]
    fn default_cohorts_are_8_days_or_weeks_and_12_months_up_to_the_current_one() {
        // 2026-11-22T10:15:30Z, a Sunday.
        let now = 1_795_342_530 * 1_000_000_000;
        let utc = jiff::tz::TimeZone::UTC;
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap().as_nanosecond() as i64;
        for (interval, first, cohorts) in [
            (Interval::Day, "2026-11-15T00:00:00Z", 8),
            (Interval::Week, "2026-09-28T00:00:00Z", 8),
            (Interval::Month, "2025-12-01T00:00:00Z", 12),
        ] {
            let from = default_from(now, interval, &utc).unwrap();
            assert_eq!(from, at(first), "{interval:?}");
            let (starts, _, _) = buckets(from, now, interval, 8, &utc).unwrap();
            assert_eq!(starts.len(), cohorts, "{interval:?}");
        }
        // Ending exactly at a period's start: the periods before it, none after.
        let from = default_from(at("2026-11-01T00:00:00Z"), Interval::Month, &utc).unwrap();
        assert_eq!(from, at("2025-11-01T00:00:00Z"));
        // Near 1970, from the first period there is.
        assert_eq!(default_from(40 * 86_400_000_000_000, Interval::Month, &utc).unwrap(), 0);
    }

    #[test]
    fn periods_past_the_last_representable_instant_are_a_400() {
        let end = sextant_model::time::END_INSTANT_NS;
        let utc = jiff::tz::TimeZone::UTC;
        let err = buckets(end - 86_400_000_000_000, end - 1, Interval::Month, 100, &utc).unwrap_err();
        assert!(matches!(err, ApiError::BadRequest("invalid_parameter", _)), "{err:?}");
        let (cohorts, starts, end) = buckets(0, 2 * 86_400_000_000_000, Interval::Day, 3, &utc).unwrap();
        assert_eq!((cohorts.len(), starts.len()), (2, 4));
        assert_eq!(end, 4 * 86_400_000_000_000);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn buckets_cover_every_cohort_period_or_are_a_400(
            from in any::<i64>(),
            span in 1..=MAX_RANGE_NS,
            interval in 1..4usize,
            periods in 1..=MAX_PERIODS,
            zone in 0..ZONES.len(),
        ) {
            let interval = [Interval::Hour, Interval::Day, Interval::Week, Interval::Month][interval];
            let tz = calendar::zone(Some(ZONES[zone])).unwrap();
            match buckets(from, from.saturating_add(span), interval, periods, &tz) {
                Ok((cohorts, starts, end)) => {
                    prop_assert_eq!(starts.len(), cohorts.len() + periods as usize - 1);
                    prop_assert!(starts.windows(2).all(|w| w[0] < w[1]) && *starts.last().unwrap() < end);
                }
                Err(e) => prop_assert!(matches!(e, ApiError::BadRequest(_, _))),
            }
        }
    }
}
