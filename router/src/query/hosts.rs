//! `GET /api/v1/infrastructure/hosts` and `/hosts/{hostname}/metrics` (docs/API.md, "Hosts and
//! host metrics"): the latest sample per host (stale after 5 minutes), and one host's metrics
//! averaged per step (shards answer sums and counts per bucket, so the means merge exactly).

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sextant_model::query::{HostBucket, HostSeries, HostSeriesPlan, HostsPlan, LatestHosts, Mean};
use sextant_model::time::format_nanos;

use super::params::{self, invalid, Params, HOUR_NS};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::identity::auth::Session;
use crate::AppState;

pub const STALE_AFTER_NS: i64 = 5 * 60 * 1_000_000_000;
/// Most points one series may have.
pub const MAX_POINTS: i64 = 10_000;
const SECOND_NS: i64 = 1_000_000_000;

/// A host in `GET /api/v1/infrastructure/hosts`: its latest sample.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HostJson {
    pub hostname: String,
    pub last_seen: String,
    pub cpu_percent: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub disk_used_percent: Option<f64>,
    pub network_rx_bytes_per_sec: Option<f64>,
    pub network_tx_bytes_per_sec: Option<f64>,
    /// `stale` when the latest sample is older than 5 minutes, else `ok`.
    pub status: &'static str,
}

/// `GET /api/v1/infrastructure/hosts`: every host, unpaged.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HostList {
    pub items: Vec<HostJson>,
}

#[utoipa::path(
    get, path = "/api/v1/infrastructure/hosts", tag = "observability", summary = "Hosts with their latest sample",
    params(crate::query::params::Params),
    responses((status = 200, description = "Hosts with their latest sample.", body = crate::query::scatter::Answer<HostList>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<HostList>>, ApiError> {
    let params = Params::parse(raw.as_deref())?;
    // A day by default: a host that stopped reporting stays listed (as stale) for a while.
    let now = app.clock.now_nanos();
    let range = params.range_or(24 * HOUR_NS, now)?;
    let mut gathered = scatter(&app, &session.project_id, range, params.allow_partial()?, HostsPlan).await?;
    let latest = gathered.fold::<LatestHosts>().0;
    let items = latest
        .into_values()
        .map(|m| HostJson {
            last_seen: format_nanos(m.unix_nanos),
            cpu_percent: m.cpu_percent,
            memory_used_bytes: m.memory_used_bytes,
            memory_total_bytes: m.memory_total_bytes,
            disk_used_percent: m.disk_used_percent,
            network_rx_bytes_per_sec: m.network_rx_bytes_per_sec,
            network_tx_bytes_per_sec: m.network_tx_bytes_per_sec,
            status: if now.saturating_sub(m.unix_nanos) > STALE_AFTER_NS { "stale" } else { "ok" },
            hostname: m.hostname,
        })
        .collect();
    Ok(gathered.answer(HostList { items }))
}

/// `step`: seconds, or a number with unit `s`, `m`, `h`, `d`.
fn parse_step(v: &str) -> Option<i64> {
    let (n, unit) = match v.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&v[..i], c),
        _ => (v, 's'),
    };
    let n: i64 = n.parse().ok().filter(|n| *n > 0)?;
    let unit = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    n.checked_mul(unit)?.checked_mul(SECOND_NS)
}

/// Buckets of `step` over `[from, to)` (`from < to`, `step > 0`), rounded up, without overflow.
fn series_points(from: i64, to: i64, step: i64) -> i64 {
    let span = to.saturating_sub(from);
    span / step + i64::from(span % step != 0)
}

fn mean(m: &Option<Mean>) -> Option<f64> {
    m.as_ref().and_then(Mean::get)
}

/// One step of `GET /api/v1/infrastructure/hosts/{hostname}/metrics`: the means of the
/// samples in it, null where there were none.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HostPoint {
    pub t: String,
    pub cpu_percent: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub memory_total_bytes: Option<f64>,
    pub disk_used_percent: Option<f64>,
    pub network_rx_bytes_per_sec: Option<f64>,
    pub network_tx_bytes_per_sec: Option<f64>,
}

/// `GET /api/v1/infrastructure/hosts/{hostname}/metrics`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HostSeriesJson {
    pub hostname: String,
    pub step_seconds: i64,
    pub points: Vec<HostPoint>,
}

/// The parameters of `GET /api/v1/infrastructure/hosts/{hostname}/metrics`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MetricsQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    /// Seconds, or a number and a unit `s`, `m`, `h`, `d` (default 60 s).
    pub step: Option<String>,
}

#[utoipa::path(
    get, path = "/api/v1/infrastructure/hosts/{hostname}/metrics", tag = "observability", summary = "A host's metrics as a time series",
    params(("hostname" = String, Path, description = "The host."), crate::query::params::Params, MetricsQuery),
    responses((status = 200, description = "A host's metrics as a time series.", body = crate::query::scatter::Answer<HostSeriesJson>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn metrics(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(hostname): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<HostSeriesJson>>, ApiError> {
    let q: MetricsQuery = params::parse(raw.as_deref())?;
    if hostname.is_empty() || hostname.chars().count() > sextant_model::ingest::MAX_NAME_LEN {
        return Err(ApiError::NotFound("no such host".into()));
    }
    let (from, to) = q.params.range(app.clock.now_nanos())?;
    let step = match q.step.as_deref() {
        None => 60 * SECOND_NS,
        Some(v) => {
            parse_step(v).ok_or_else(|| invalid("step", "must be a positive duration such as 60, 30s, 5m or 1h"))?
        }
    };
    let points = series_points(from, to, step);
    if points > MAX_POINTS {
        return Err(invalid("step", &format!("gives {points} points; at most {MAX_POINTS} are allowed")));
    }
    let plan = HostSeriesPlan { hostname: hostname.clone(), step_nanos: step };
    let mut gathered = scatter(&app, &session.project_id, (from, to), q.params.allow_partial()?, plan).await?;
    let buckets = gathered.fold::<HostSeries>().0;
    // Every step of the range, empty ones with nulls, so charts show gaps.
    let empty = HostBucket::default();
    let points = (0..points)
        .map(|i| {
            let t = from + i * step;
            let b = buckets.get(&t).unwrap_or(&empty);
            HostPoint {
                t: format_nanos(t),
                cpu_percent: mean(&b.cpu_percent),
                memory_used_bytes: mean(&b.memory_used_bytes),
                memory_total_bytes: mean(&b.memory_total_bytes),
                disk_used_percent: mean(&b.disk_used_percent),
                network_rx_bytes_per_sec: mean(&b.network_rx_bytes_per_sec),
                network_tx_bytes_per_sec: mean(&b.network_tx_bytes_per_sec),
            }
        })
        .collect();
    Ok(gathered.answer(HostSeriesJson { hostname, step_seconds: step / SECOND_NS, points }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_accept_seconds_and_units() {
        assert_eq!(parse_step("60"), Some(60 * SECOND_NS));
        assert_eq!(parse_step("5m"), Some(300 * SECOND_NS));
        assert_eq!(parse_step("1h"), Some(3600 * SECOND_NS));
        for bad in ["0", "-5", "5x", "m", "", "1.5m"] {
            assert_eq!(parse_step(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_step_near_i64_max_is_one_point_not_an_overflow() {
        let step = parse_step("9223372036").unwrap();
        assert_eq!(series_points(0, 31 * 24 * crate::query::HOUR_NS, step), 1);
        assert_eq!(series_points(0, 10, 3), 4);
        assert_eq!(series_points(0, 9, 3), 3);
    }

    proptest::proptest! {
        #[test]
        fn any_step_gives_a_positive_duration_or_none(n in proptest::num::i64::ANY, unit in "[smhdx]?") {
            if let Some(step) = parse_step(&format!("{n}{unit}")) {
                proptest::prop_assert!(step > 0);
            }
        }

        #[test]
        fn points_never_overflow(from in proptest::num::i64::ANY, to in proptest::num::i64::ANY, step in 1..=i64::MAX) {
            let (from, to) = (from.min(to), from.max(to));
            let points = series_points(from, to, step);
            proptest::prop_assert!(points >= 0);
            if to.checked_sub(from).is_some() {
                proptest::prop_assert!((points as i128) * (step as i128) >= (to as i128) - (from as i128));
            }
        }
    }
}
