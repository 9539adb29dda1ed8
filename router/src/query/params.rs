//! The parameters every read shares (docs/API.md, "Query strings", "Lists and cursors" and
//! "Reads: time range, partial answers and limits"): time range, limit, cursor,
//! `allow_partial`, lists, and the 400s that name the parameter at fault. Each endpoint
//! declares its parameters in a struct that flattens [`Params`], read by [`parse`].

use serde::de::DeserializeOwned;
use serde::Deserialize;
use sextant_model::time::{check_instant, parse_query_time, MIN_INSTANT_NS};

use crate::http::error::ApiError;
use crate::http::listing::Paging;
pub use crate::http::listing::{bad_cursor, encode_cursor, DEFAULT_LIMIT, MAX_LIMIT};
use crate::http::query_string;

pub const HOUR_NS: i64 = 3600 * 1_000_000_000;
/// Longest query string (filters, `q`, cursor) of a read.
pub const MAX_QUERY_STRING: usize = 8192;
/// Most values of a list parameter (`service=a,b,…`).
pub const MAX_LIST: usize = 100;

pub fn invalid(field: &str, reason: &str) -> ApiError {
    ApiError::BadRequest("invalid_parameter", format!("query parameter `{field}` {reason}"))
}

/// The query string of a read, at most [`MAX_QUERY_STRING`] bytes, as `T` declares it.
pub fn parse<T: DeserializeOwned>(raw: Option<&str>) -> Result<T, ApiError> {
    if raw.is_some_and(|raw| raw.len() > MAX_QUERY_STRING) {
        return Err(ApiError::BadRequest(
            "query_too_long",
            format!("the query string may have at most {MAX_QUERY_STRING} bytes"),
        ));
    }
    query_string::parse(raw)
}

/// The parameters every read may take; each is checked when the endpoint asks for it.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Params {
    /// Start of the time range: RFC 3339 or Unix epoch milliseconds.
    pub from: Option<String>,
    /// End of the time range: RFC 3339 or Unix epoch milliseconds (default now).
    pub to: Option<String>,
    /// `true`: answer without the shards that did not answer (marked `partial`).
    #[param(value_type = Option<bool>)]
    pub allow_partial: Option<String>,
    #[param(ignore)]
    #[serde(flatten)]
    pub paging: Paging,
}

impl Params {
    /// A read's query string, for an endpoint without parameters of its own.
    pub fn parse(raw: Option<&str>) -> Result<Self, ApiError> {
        parse(raw)
    }

    pub fn limit(&self) -> Result<usize, ApiError> {
        self.paging.limit()
    }

    pub fn allow_partial(&self) -> Result<bool, ApiError> {
        match self.allow_partial.as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(_) => Err(invalid("allow_partial", "must be true or false")),
        }
    }

    /// `to`, if given.
    pub fn to(&self) -> Result<Option<i64>, ApiError> {
        instant("to", self.to.as_deref())
    }

    /// `[from, to)` in unix nanoseconds; by default the hour up to `now_ns`.
    pub fn range(&self, now_ns: i64) -> Result<(i64, i64), ApiError> {
        self.range_or(HOUR_NS, now_ns)
    }

    /// `[from, to)`, by default the `default_ns` up to `now_ns` (never before 1970). Any length
    /// within the accepted instants: what protects the cluster is the read's estimated cost
    /// (`scatter::QueryBudget`), not its range.
    pub fn range_or(&self, default_ns: i64, now_ns: i64) -> Result<(i64, i64), ApiError> {
        let from = instant("from", self.from.as_deref())?;
        let to = self.to()?.unwrap_or(now_ns);
        let from = match from {
            Some(from) => from,
            None => to.saturating_sub(default_ns).max(MIN_INSTANT_NS),
        };
        if from >= to {
            return Err(ApiError::BadRequest("invalid_time_range", "`from` must be before `to`".into()));
        }
        Ok((from, to))
    }
}

/// A time parameter (RFC 3339 or epoch milliseconds) within the accepted instants.
pub fn instant(name: &str, value: Option<&str>) -> Result<Option<i64>, ApiError> {
    value
        .map(|v| parse_query_time(v).map_err(|r| invalid(name, &format!("{r} (RFC 3339 or epoch milliseconds)"))))
        .transpose()
}

/// A non-negative number of milliseconds, in nanoseconds.
pub fn millis(name: &str, value: Option<&str>) -> Result<Option<i64>, ApiError> {
    value
        .map(|v| {
            v.parse::<f64>()
                .ok()
                .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms < 1e12)
                .map(|ms| (ms * 1e6) as i64)
                .ok_or_else(|| invalid(name, "must be a non-negative number of milliseconds"))
        })
        .transpose()
}

/// A list parameter (`service=a,b` and repeated keys both work): its distinct values, sorted,
/// at most [`MAX_LIST`].
pub fn list_of(name: &str, value: Option<&str>) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<String> =
        value.unwrap_or_default().split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect();
    out.sort();
    out.dedup();
    if out.len() > MAX_LIST {
        return Err(invalid(name, &format!("may list at most {MAX_LIST} values")));
    }
    Ok(out)
}

/// The key a read's cursor holds: the last item of the previous page.
pub fn decode_cursor(params: &Params) -> Result<Option<String>, ApiError> {
    params.paging.after()
}

/// The time a cursor holds, checked like a time parameter.
pub fn cursor_time(text: &str) -> Result<i64, ApiError> {
    text.parse().ok().and_then(|t| check_instant(t).ok()).ok_or_else(bad_cursor)
}

/// Milliseconds with microsecond precision, as JSON numbers.
pub fn ms(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock's reading in these tests: 2026-11-22T10:15:30Z.
    const NOW: i64 = 1_795_342_530 * 1_000_000_000;

    /// Parameters of a read of its own, besides the shared ones.
    #[derive(Deserialize)]
    struct Filters {
        service: Option<String>,
        min_duration_ms: Option<String>,
    }

    #[test]
    fn time_ranges_are_bounded_and_ordered() {
        let p = |q: &str| Params::parse(Some(q)).unwrap().range(NOW);
        // Long ranges are not refused for their length: 400 days, and all of the instants.
        let year = p("from=2025-10-18T00:00:00Z&to=2026-11-22T00:00:00Z").unwrap();
        assert_eq!(year.1 - year.0, 400 * 24 * HOUR_NS);
        let end = sextant_model::time::END_INSTANT_MS - 1;
        assert_eq!(p(&format!("from=0&to={end}")).unwrap(), (0, end * 1_000_000));
        assert!(matches!(p("from=2000&to=1000"), Err(ApiError::BadRequest("invalid_time_range", _))));
        assert!(matches!(p("from=yesterday"), Err(ApiError::BadRequest("invalid_parameter", _))));
        assert_eq!(p("from=1000&to=2000").unwrap(), (1_000_000_000, 2_000_000_000));
        assert_eq!(p("").unwrap(), (NOW - HOUR_NS, NOW), "by default the hour up to now");
        assert_eq!(
            p(&format!("from={}", NOW / 1_000_000 - 60_000)).unwrap(),
            (NOW - 60_000_000_000, NOW),
            "`to` defaults to now"
        );
        assert!(matches!(
            Params::parse(Some("limit=1001")).unwrap().limit(),
            Err(ApiError::BadRequest("invalid_limit", _))
        ));
        let many = (0..101).map(|i| format!("s{i}")).collect::<Vec<_>>().join(",");
        let q: Filters = parse(Some(&format!("service={many}"))).unwrap();
        let list = list_of("service", q.service.as_deref());
        assert!(matches!(list, Err(ApiError::BadRequest("invalid_parameter", _))));
        assert!(matches!(Params::parse(Some(&"q=x".repeat(3000))), Err(ApiError::BadRequest("query_too_long", _))));
    }

    /// The values a time parameter is tried with: every i64 as epoch milliseconds, every f64
    /// as text, every i64 nanosecond instant as RFC 3339, and hand-picked extremes.
    fn any_time_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<i64>().prop_map(|ms| ms.to_string()),
            (-1i64..sextant_model::time::END_INSTANT_MS + 2).prop_map(|ms| ms.to_string()),
            any::<u64>().prop_map(|bits| f64::from_bits(bits).to_string()),
            proptest::num::f64::ANY.prop_map(|v| v.to_string()),
            any::<i64>().prop_map(|ns| jiff::Timestamp::from_nanosecond(ns.into()).unwrap().to_string()),
            Just("1677-09-21T00:12:44Z".to_owned()),
            Just("2262-04-11T23:47:15Z".to_owned()),
            Just("NaN".to_owned()),
            Just("-inf".to_owned()),
            Just("-0".to_owned()),
        ]
    }

    #[test]
    fn the_wrapping_range_of_the_review_is_refused() {
        let p = |q: &str| Params::parse(Some(q)).unwrap().range(NOW);
        // `to - from` wrapped and passed the old 31-day check: instants outside the accepted
        // ones are refused themselves.
        let err = p("from=1677-09-21T00:12:44Z&to=2262-04-11T23:47:15Z").unwrap_err();
        assert!(matches!(&err, ApiError::BadRequest("invalid_parameter", m) if m.contains("`from`")), "{err:?}");
        let err = p(&format!("from=0&to={}", i64::MAX)).unwrap_err();
        assert!(matches!(&err, ApiError::BadRequest("invalid_parameter", m) if m.contains("`to`")), "{err:?}");
        assert!(matches!(p(&format!("from={}", i64::MIN)), Err(ApiError::BadRequest("invalid_parameter", _))));
        // The last accepted instant, with the default hour before it.
        let last = (sextant_model::time::END_INSTANT_MS - 1).to_string();
        assert_eq!(p(&format!("to={last}")).unwrap().1, sextant_model::time::END_INSTANT_NS - 1_000_000);
        // A default `from` stops at 1970: an hour ending at the epoch is empty.
        assert_eq!(p("to=1000").unwrap(), (0, 1_000_000_000));
        assert!(matches!(p("to=0"), Err(ApiError::BadRequest("invalid_time_range", _))));
    }

    #[test]
    fn cursors_holding_times_outside_the_range_are_refused() {
        assert_eq!(cursor_time("1000").unwrap(), 1000);
        for bad in ["-1", "9223372036854775807", "-9223372036854775808", "x", ""] {
            assert!(matches!(cursor_time(bad), Err(ApiError::BadRequest("invalid_cursor", _))), "{bad}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        #[test]
        fn ranges_are_within_the_accepted_instants_or_refused(
            from in proptest::option::of(any_time_text()),
            to in proptest::option::of(any_time_text()),
            default_ns in proptest::num::i64::ANY,
        ) {
            let mut q = Vec::new();
            for (k, v) in [("from", &from), ("to", &to)] {
                if let Some(v) = v {
                    q.push(format!("{k}={}", v.replace('+', "%2B")));
                }
            }
            match Params::parse(Some(&q.join("&"))).unwrap().range_or(default_ns.max(1), NOW) {
                Ok((from, to)) => {
                    proptest::prop_assert!(MIN_INSTANT_NS <= from && from < to);
                    proptest::prop_assert!(to < sextant_model::time::END_INSTANT_NS);
                    proptest::prop_assert!(to.checked_sub(from).is_some());
                }
                Err(e) => proptest::prop_assert!(matches!(e, ApiError::BadRequest(_, _)), "{:?}", e),
            }
        }

        #[test]
        fn time_parameters_are_instants_in_range_or_a_400(v in any_time_text()) {
            let q = format!("to={}", v.replace('+', "%2B"));
            match Params::parse(Some(&q)).unwrap().to() {
                Ok(Some(t)) => proptest::prop_assert!(check_instant(t).is_ok()),
                Ok(None) => proptest::prop_assert!(false, "{} was not read", v),
                Err(e) => proptest::prop_assert!(matches!(e, ApiError::BadRequest("invalid_parameter", _))),
            }
        }

        #[test]
        fn durations_in_milliseconds_never_overflow(v in any_time_text()) {
            let q = format!("min_duration_ms={}", v.replace('+', "%2B"));
            let q: Filters = parse(Some(&q)).unwrap();
            match millis("min_duration_ms", q.min_duration_ms.as_deref()) {
                Ok(Some(ns)) => proptest::prop_assert!((0..1_000_000_000_000_000_000).contains(&ns)),
                Ok(None) => proptest::prop_assert!(false, "{} was not read", v),
                Err(e) => proptest::prop_assert!(matches!(e, ApiError::BadRequest("invalid_parameter", _))),
            }
        }

        #[test]
        fn cursor_times_are_instants_in_range_or_a_bad_cursor(t in any_time_text()) {
            match cursor_time(&t) {
                Ok(t) => proptest::prop_assert!(check_instant(t).is_ok()),
                Err(e) => proptest::prop_assert!(matches!(e, ApiError::BadRequest("invalid_cursor", _))),
            }
        }
    }
}
