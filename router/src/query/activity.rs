//! `GET /api/events/timeseries` and `GET /api/users/active` (docs/API.md, "Event time series"
//! and "Active users"): counts and distinct users per calendar bucket of the caller's time
//! zone, and DAU/WAU/MAU per day. Buckets are computed here (`model::calendar`, DST-aware) and
//! sent to the shards as instants; shards count per user-disjoint partition, so the sums are
//! exact.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sextant_model::calendar::{self, CalendarError, Interval};
use sextant_model::query::{ActiveDays, ActiveUsersPlan, EventBuckets, EventBucketsPlan};
use sextant_model::time::format_nanos;

use super::params::{self, invalid, list_of, Params, HOUR_NS};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

const DAY_NS: i64 = 24 * HOUR_NS;
/// Longest active-users period: ten years of days (each day is a bucket of the plan).
const MAX_PERIOD_NS: i64 = 3660 * DAY_NS;

pub(crate) fn calendar_error(field: &str, e: CalendarError) -> ApiError {
    invalid(field, &e.to_string())
}

/// The caller's time zone: `tz`, an IANA name (default UTC).
pub(crate) fn zone(tz: Option<&str>) -> Result<jiff::tz::TimeZone, ApiError> {
    calendar::zone(tz).map_err(|e| calendar_error("tz", e))
}

/// Day starts for active users over `period` ending at `to`: 29 lead days feeding the first
/// MAU, then the reported days of `(to - period, to]`; and the index of the first reported.
fn active_days(to: i64, period: i64, tz: &jiff::tz::TimeZone) -> Result<(Vec<i64>, usize), ApiError> {
    let out_of_range = || invalid("period", "reaches outside the supported time range");
    let from = to.checked_sub(period).ok_or_else(out_of_range)?;
    let reported = calendar::bucket_starts(from, to, Interval::Day, tz).map_err(|e| calendar_error("period", e))?;
    let first = *reported.first().ok_or_else(out_of_range)?;
    let lead_from = first.checked_sub(29 * DAY_NS + 2 * HOUR_NS).ok_or_else(out_of_range)?;
    let lead = calendar::bucket_starts(lead_from, first, Interval::Day, tz).map_err(|e| calendar_error("period", e))?;
    let mut lead: Vec<i64> = lead.into_iter().filter(|d| *d < first).collect();
    lead.drain(..lead.len().saturating_sub(29));
    let first_reported = lead.len();
    Ok((lead.into_iter().chain(reported).collect(), first_reported))
}

/// A bucket of `GET /api/events/timeseries`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventPoint {
    pub t: String,
    pub count: u64,
    /// Null with `math=total`.
    pub unique_users: Option<u64>,
}

/// One event name, or several.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EventNames {
    One(String),
    Many(Vec<String>),
}

/// `GET /api/events/timeseries`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventSeries {
    /// The `event` filter: null for every event.
    pub event: Option<EventNames>,
    pub interval: &'static str,
    pub points: Vec<EventPoint>,
}

/// The parameters of `GET /api/events/timeseries`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TimeseriesQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    pub interval: Option<String>,
    pub tz: Option<String>,
    pub event: Option<String>,
    pub cohort_id: Option<String>,
    /// `total`: counts only (read from hourly rollups); default: counts and unique users.
    pub math: Option<String>,
}

#[utoipa::path(
    get, path = "/api/events/timeseries", tag = "analytics", summary = "Event counts and unique users per interval",
    params(crate::query::params::Params, TimeseriesQuery),
    responses((status = 200, description = "Event counts and unique users per interval.", body = crate::query::scatter::Answer<EventSeries>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn timeseries(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<EventSeries>>, ApiError> {
    let q: TimeseriesQuery = params::parse(raw.as_deref())?;
    let params = &q.params;
    let interval =
        Interval::parse(q.interval.as_deref().unwrap_or("day")).map_err(|e| calendar_error("interval", e))?;
    let tz = zone(q.tz.as_deref())?;
    let (from, to) = params.range_or(30 * DAY_NS, app.clock.now_nanos())?;
    let events = list_of("event", q.event.as_deref())?;
    let counts_only = match q.math.as_deref() {
        None | Some("") => false,
        Some("total") => true,
        Some(_) => return Err(invalid("math", "must be total, or absent for counts and unique users")),
    };
    let starts = calendar::bucket_starts(from, to, interval, &tz).map_err(|e| calendar_error("interval", e))?;
    let cohort = crate::query::cohorts::filter(&app, &session, q.cohort_id.as_deref(), to).await?;
    let plan = EventBucketsPlan { events: events.clone(), bucket_starts: starts.clone(), cohort, counts_only };
    let mut gathered = scatter(&app, &session.project_id, (starts[0], to), params.allow_partial()?, plan).await?;
    let sums = gathered.fold::<EventBuckets>().fit(starts.len());
    let points = starts
        .iter()
        .zip(&sums)
        .map(|(t, b)| EventPoint {
            t: format_nanos(*t),
            count: b.count,
            unique_users: (!counts_only).then_some(b.unique_users),
        })
        .collect();
    let event = match <[String; 1]>::try_from(events) {
        Ok([one]) => Some(EventNames::One(one)),
        Err(events) if events.is_empty() => None,
        Err(many) => Some(EventNames::Many(many)),
    };
    Ok(gathered.answer(EventSeries { event, interval: interval.name(), points }))
}

/// A day of `GET /api/users/active`: users active that day, in the 7 and in the 30 days
/// ending with it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActivePoint {
    pub date: String,
    pub dau: u64,
    pub wau: u64,
    pub mau: u64,
}

/// `GET /api/users/active`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActiveUsers {
    pub points: Vec<ActivePoint>,
}

/// The parameters of `GET /api/users/active`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ActiveUsersQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    pub tz: Option<String>,
    /// A relative range ending at `to`: an integer and a unit `m`, `h`, `d` or `w`.
    pub period: Option<String>,
    pub cohort_id: Option<String>,
}

#[utoipa::path(
    get, path = "/api/users/active", tag = "analytics", summary = "Daily, weekly and monthly active users",
    params(crate::query::params::Params, ActiveUsersQuery),
    responses((status = 200, description = "Daily, weekly and monthly active users.", body = crate::query::scatter::Answer<ActiveUsers>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn active_users(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<ActiveUsers>>, ApiError> {
    let q: ActiveUsersQuery = params::parse(raw.as_deref())?;
    let params = &q.params;
    let tz = zone(q.tz.as_deref())?;
    let period = calendar::parse_range(q.period.as_deref().unwrap_or("30d"))
        .filter(|p| *p <= MAX_PERIOD_NS)
        .ok_or_else(|| invalid("period", "must be an integer and a unit m, h, d or w, at most 3660 days"))?;
    // Not `Params::range`: the period may be longer than a query range (it is bounded above).
    let to = params.to()?.unwrap_or_else(|| app.clock.now_nanos());
    let (day_starts, first_reported) = active_days(to, period, &tz)?;
    let reported = &day_starts[first_reported..];
    let first_reported = first_reported as u32;
    let cohort = crate::query::cohorts::filter(&app, &session, q.cohort_id.as_deref(), to).await?;
    let plan = ActiveUsersPlan { day_starts: day_starts.clone(), first_reported, cohort };
    let mut gathered = scatter(&app, &session.project_id, (day_starts[0], to), params.allow_partial()?, plan).await?;
    let sums = gathered.fold::<ActiveDays>().fit(reported.len());
    let points = reported
        .iter()
        .zip(&sums)
        .map(|(d, a)| ActivePoint { date: calendar::date_of(*d, &tz), dau: a.dau, wau: a.wau, mau: a.mau })
        .collect();
    Ok(gathered.answer(ActiveUsers { points }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ZONES: [&str; 4] = ["UTC", "Europe/Paris", "Pacific/Kiritimati", "Pacific/Pago_Pago"];

    #[test]
    fn a_year_of_active_users_ending_at_the_epoch_has_366_reported_days() {
        let (days, first) = active_days(0, 366 * DAY_NS, &jiff::tz::TimeZone::UTC).unwrap();
        assert_eq!((days.len() - first, first), (366, 29));
        assert_eq!(days[first], -366 * DAY_NS);
    }

    #[test]
    fn an_instant_where_the_period_wraps_is_refused_not_a_panic() {
        // `to - period` wrapped to after `to`: no reported day, then an index out of bounds.
        let err = active_days(i64::MIN + DAY_NS, MAX_PERIOD_NS, &jiff::tz::TimeZone::UTC).unwrap_err();
        assert!(matches!(err, ApiError::BadRequest("invalid_parameter", _)), "{err:?}");
        let to = Params::parse(Some("period=366d&to=1677-09-21T00:12:44Z")).unwrap().to();
        assert!(matches!(to, Err(ApiError::BadRequest("invalid_parameter", _))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn active_days_are_reported_days_after_29_lead_days_or_a_400(
            to in prop_oneof![any::<i64>(), sextant_model::time::MIN_INSTANT_NS..sextant_model::time::END_INSTANT_NS],
            period in 1..=MAX_PERIOD_NS,
            zone in 0..ZONES.len(),
        ) {
            let tz = calendar::zone(Some(ZONES[zone])).unwrap();
            match active_days(to, period, &tz) {
                Ok((days, first)) => {
                    prop_assert!(first <= 29 && first < days.len());
                    prop_assert!(days.windows(2).all(|w| w[0] < w[1]));
                    prop_assert!(days[first] <= to - period && *days.last().unwrap() < to);
                }
                Err(e) => prop_assert!(matches!(e, ApiError::BadRequest(_, _))),
            }
        }
    }
}
