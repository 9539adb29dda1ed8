//! `GET /api/events/timeseries` and `GET /api/users/active` (DESIGN A8): counts and distinct
//! users per calendar bucket of the caller's time zone, and DAU/WAU/MAU per day. Buckets are
//! computed here (`model::calendar`, DST-aware) and sent to the shards as instants; shards
//! count per user-disjoint partition, so the sums are exact.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::{json, Value};
use sextant_model::calendar::{self, CalendarError, Interval};
use sextant_model::time::{format_nanos, now_nanos, parse_query_time};
use sextant_proto::{query_reply, query_request, ActiveDay, ActiveUsersPlan, EventBucket, EventBucketsPlan};

use crate::auth::Session;
use crate::error::ApiError;
use crate::query::{invalid, scatter, Params, HOUR_NS};
use crate::AppState;

const DAY_NS: i64 = 24 * HOUR_NS;
/// Longest active-users period.
const MAX_PERIOD_NS: i64 = 366 * DAY_NS;

pub(crate) fn calendar_error(field: &str, e: CalendarError) -> ApiError {
    invalid(field, &e.to_string())
}

pub(crate) fn zone(params: &Params) -> Result<jiff::tz::TimeZone, ApiError> {
    calendar::zone(params.get("tz")).map_err(|e| calendar_error("tz", e))
}

pub async fn timeseries(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let interval =
        Interval::parse(params.get("interval").unwrap_or("day")).map_err(|e| calendar_error("interval", e))?;
    let tz = zone(&params)?;
    let (from, to) = params.range_or(30 * DAY_NS)?;
    let events = params.list("event")?;
    let starts = calendar::bucket_starts(from, to, interval, &tz).map_err(|e| calendar_error("interval", e))?;
    let cohort = crate::cohorts::filter(&app, &session, &params, to).await?;
    let plan = query_request::Plan::EventBuckets(EventBucketsPlan {
        events: events.clone(),
        bucket_starts: starts.clone(),
        cohort,
    });
    let gathered = scatter(&app, &session.project_id, (starts[0], to), params.allow_partial()?, plan).await?;
    let mut sums = vec![EventBucket::default(); starts.len()];
    for (_, p) in &gathered.partials {
        if let query_reply::Partial::EventBuckets(b) = p {
            for (sum, b) in sums.iter_mut().zip(&b.buckets) {
                sum.count += b.count;
                sum.unique_users += b.unique_users;
            }
        }
    }
    let points: Vec<Value> = starts
        .iter()
        .zip(&sums)
        .map(|(t, b)| json!({ "t": format_nanos(*t), "count": b.count, "unique_users": b.unique_users }))
        .collect();
    let event = match events.as_slice() {
        [] => Value::Null,
        [one] => json!(one),
        many => json!(many),
    };
    let mut body = json!({ "event": event, "interval": interval.name(), "points": points });
    gathered.annotate(&mut body);
    Ok(Json(body))
}

pub async fn active_users(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    let tz = zone(&params)?;
    let period = calendar::parse_range(params.get("period").unwrap_or("30d"))
        .filter(|p| *p <= MAX_PERIOD_NS)
        .ok_or_else(|| invalid("period", "must be an integer and a unit m, h, d or w, at most 366 days"))?;
    // Not `Params::range`: the period may be longer than a query range (it is bounded above).
    let to = match params.get("to") {
        Some(v) => parse_query_time(v).map_err(|r| invalid("to", &format!("{r} (RFC 3339 or epoch milliseconds)")))?,
        None => now_nanos(),
    };
    // Reported days: those of (to - period, to]; 29 days before them feed the first MAU.
    let reported =
        calendar::bucket_starts(to - period, to, Interval::Day, &tz).map_err(|e| calendar_error("period", e))?;
    let lead = calendar::bucket_starts(reported[0] - 29 * DAY_NS - 2 * HOUR_NS, reported[0], Interval::Day, &tz)
        .map_err(|e| calendar_error("period", e))?;
    let mut lead: Vec<i64> = lead.into_iter().filter(|d| *d < reported[0]).collect();
    lead.drain(..lead.len().saturating_sub(29));
    let first_reported = lead.len() as u32;
    let day_starts: Vec<i64> = lead.into_iter().chain(reported.iter().copied()).collect();
    let cohort = crate::cohorts::filter(&app, &session, &params, to).await?;
    let plan =
        query_request::Plan::ActiveUsers(ActiveUsersPlan { day_starts: day_starts.clone(), first_reported, cohort });
    let gathered = scatter(&app, &session.project_id, (day_starts[0], to), params.allow_partial()?, plan).await?;
    let mut sums = vec![ActiveDay::default(); reported.len()];
    for (_, p) in &gathered.partials {
        if let query_reply::Partial::ActiveUsers(a) = p {
            for (sum, d) in sums.iter_mut().zip(&a.days) {
                sum.dau += d.dau;
                sum.wau += d.wau;
                sum.mau += d.mau;
            }
        }
    }
    let points: Vec<Value> = reported
        .iter()
        .zip(&sums)
        .map(|(d, a)| json!({ "date": calendar::date_of(*d, &tz), "dau": a.dau, "wau": a.wau, "mau": a.mau }))
        .collect();
    let mut body = json!({ "points": points });
    gathered.annotate(&mut body);
    Ok(Json(body))
}
