//! Calendar buckets in a time zone (docs/API.md, "Product analytics reads", `interval` and `tz`):
//! the instants where hours, days, ISO weeks (Monday) or months begin, computed with the zone's
//! rules so a day across a daylight-saving change is 23 or 25 hours long, not 24. The router
//! computes them; shards only place events between given instants.

use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, Zoned};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interval {
    Hour,
    Day,
    Week,
    Month,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    #[error("unknown time zone `{0}`")]
    UnknownZone(String),
    #[error("`{0}` is not hour, day, week or month")]
    UnknownInterval(String),
    #[error("the range holds more than {0} buckets; use a longer interval")]
    TooManyBuckets(usize),
    #[error("the time is out of range")]
    OutOfRange,
}

pub const MAX_BUCKETS: usize = 10_000;

impl Interval {
    pub fn parse(s: &str) -> Result<Interval, CalendarError> {
        Ok(match s {
            "hour" => Interval::Hour,
            "day" => Interval::Day,
            "week" => Interval::Week,
            "month" => Interval::Month,
            other => return Err(CalendarError::UnknownInterval(other.to_owned())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Interval::Hour => "hour",
            Interval::Day => "day",
            Interval::Week => "week",
            Interval::Month => "month",
        }
    }

    fn step(self) -> Span {
        match self {
            Interval::Hour => Span::new().hours(1),
            Interval::Day => Span::new().days(1),
            Interval::Week => Span::new().weeks(1),
            Interval::Month => Span::new().months(1),
        }
    }

    /// The start of the bucket holding `z`.
    fn floor(self, z: &Zoned) -> Result<Zoned, jiff::Error> {
        match self {
            // Hours are absolute: an hour bucket is 60 minutes even across a DST change.
            Interval::Hour => {
                let ns = z.timestamp().as_nanosecond();
                let hour = 3_600_000_000_000i128;
                Ok(Timestamp::from_nanosecond(ns.div_euclid(hour) * hour)?.to_zoned(z.time_zone().clone()))
            }
            Interval::Day => z.start_of_day(),
            Interval::Week => {
                let monday = z.date() - Span::new().days(i64::from(z.weekday().to_monday_zero_offset()));
                monday.to_zoned(z.time_zone().clone())
            }
            Interval::Month => z.first_of_month()?.start_of_day(),
        }
    }
}

pub fn zone(name: Option<&str>) -> Result<TimeZone, CalendarError> {
    match name {
        None | Some("UTC") | Some("utc") => Ok(TimeZone::UTC),
        Some(n) => TimeZone::get(n).map_err(|_| CalendarError::UnknownZone(n.to_owned())),
    }
}

/// Start instants (unix nanoseconds) of every bucket overlapping `[from, to)`; the first
/// starts at or before `from`.
pub fn bucket_starts(from_ns: i64, to_ns: i64, interval: Interval, tz: &TimeZone) -> Result<Vec<i64>, CalendarError> {
    let at = |ns: i64| Timestamp::from_nanosecond(i128::from(ns)).map(|t| t.to_zoned(tz.clone()));
    let mut z =
        interval.floor(&at(from_ns).map_err(|_| CalendarError::OutOfRange)?).map_err(|_| CalendarError::OutOfRange)?;
    let mut out = Vec::new();
    loop {
        let ns = i64::try_from(z.timestamp().as_nanosecond()).map_err(|_| CalendarError::OutOfRange)?;
        if ns >= to_ns {
            break;
        }
        if out.len() == MAX_BUCKETS {
            return Err(CalendarError::TooManyBuckets(MAX_BUCKETS));
        }
        out.push(ns);
        z = z.checked_add(interval.step()).map_err(|_| CalendarError::OutOfRange)?;
        if interval != Interval::Hour {
            // Adding calendar units keeps the wall time; re-anchor at the bucket start (a day
            // can begin at 01:00 where midnight does not exist).
            z = interval.floor(&z).map_err(|_| CalendarError::OutOfRange)?;
        }
    }
    Ok(out)
}

/// A relative range (docs/API.md, "Product analytics reads": `range`, cohort `range`, active-users
/// `period`): an integer and a unit letter `m` (minutes), `h`, `d` or `w`; nanoseconds.
pub fn parse_range(s: &str) -> Option<i64> {
    let unit = s.chars().last()?;
    let n: i64 = s[..s.len() - unit.len_utf8()].parse().ok().filter(|n| *n > 0)?;
    let secs = match unit {
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return None,
    };
    n.checked_mul(secs)?.checked_mul(1_000_000_000)
}

/// The calendar date (`YYYY-MM-DD`) of an instant in `tz`.
pub fn date_of(ns: i64, tz: &TimeZone) -> String {
    Timestamp::from_nanosecond(i128::from(ns)).map(|t| t.to_zoned(tz.clone()).date().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_nanosecond() as i64
    }

    #[test]
    fn days_across_daylight_saving_changes_are_23_and_25_hours() {
        let paris = zone(Some("Europe/Paris")).unwrap();
        // Spring forward on 2026-03-29, fall back on 2026-10-25.
        let s = bucket_starts(ns("2026-03-28T12:00:00Z"), ns("2026-03-30T12:00:00Z"), Interval::Day, &paris).unwrap();
        assert_eq!(s, [ns("2026-03-27T23:00:00Z"), ns("2026-03-28T23:00:00Z"), ns("2026-03-29T22:00:00Z")]);
        let s = bucket_starts(ns("2026-10-25T00:00:00Z"), ns("2026-10-26T12:00:00Z"), Interval::Day, &paris).unwrap();
        assert_eq!(s, [ns("2026-10-24T22:00:00Z"), ns("2026-10-25T23:00:00Z")]);
        assert_eq!(date_of(ns("2026-10-25T22:30:00Z"), &paris), "2026-10-25");
    }

    #[test]
    fn relative_ranges() {
        assert_eq!(parse_range("30d"), Some(30 * 86_400 * 1_000_000_000));
        assert_eq!(parse_range("2w"), Some(14 * 86_400 * 1_000_000_000));
        assert_eq!(parse_range("90m"), Some(90 * 60 * 1_000_000_000));
        for bad in ["", "d", "0d", "-1d", "3y", "1.5d", "30"] {
            assert_eq!(parse_range(bad), None, "{bad}");
        }
    }

    #[test]
    fn weeks_start_on_monday_and_months_on_the_first() {
        let utc = zone(None).unwrap();
        // 2026-11-23 is a Monday.
        let w = bucket_starts(ns("2026-11-25T00:00:00Z"), ns("2026-12-01T00:00:00Z"), Interval::Week, &utc).unwrap();
        assert_eq!(w, [ns("2026-11-23T00:00:00Z"), ns("2026-11-30T00:00:00Z")]);
        let m = bucket_starts(ns("2026-01-31T00:00:00Z"), ns("2026-03-02T00:00:00Z"), Interval::Month, &utc).unwrap();
        assert_eq!(m, [ns("2026-01-01T00:00:00Z"), ns("2026-02-01T00:00:00Z"), ns("2026-03-01T00:00:00Z")]);
        let h = bucket_starts(ns("2026-01-01T00:30:00Z"), ns("2026-01-01T02:00:00Z"), Interval::Hour, &utc).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(zone(Some("Mars/Olympus")), Err(CalendarError::UnknownZone("Mars/Olympus".into())));
        assert!(matches!(
            bucket_starts(0, ns("2026-01-01T00:00:00Z"), Interval::Hour, &utc),
            Err(CalendarError::TooManyBuckets(_))
        ));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        #[test]
        fn relative_ranges_are_exact_positive_nanoseconds_or_none(n in proptest::num::i64::ANY, unit in "[mhdwsé]?") {
            let secs: Option<i128> = match unit.as_str() {
                "m" => Some(60),
                "h" => Some(3600),
                "d" => Some(86_400),
                "w" => Some(7 * 86_400),
                _ => None,
            };
            let want = secs
                .filter(|_| n > 0)
                .and_then(|s| i64::try_from(i128::from(n) * s * 1_000_000_000).ok());
            proptest::prop_assert_eq!(parse_range(&format!("{n}{unit}")), want);
        }

        #[test]
        fn any_text_is_a_range_or_none(s in "\\PC{0,24}") {
            if let Some(r) = parse_range(&s) {
                proptest::prop_assert!(r > 0);
            }
        }

        #[test]
        fn buckets_of_any_instants_are_increasing_and_cover_the_range_or_an_error(
            from in proptest::num::i64::ANY,
            span in 1i64..=31 * 86_400 * 1_000_000_000,
            interval in 0..4usize,
            zone_name in proptest::sample::select(vec!["UTC", "Europe/Paris", "Pacific/Kiritimati", "Pacific/Pago_Pago"]),
        ) {
            let interval = [Interval::Hour, Interval::Day, Interval::Week, Interval::Month][interval];
            let tz = zone(Some(zone_name)).unwrap();
            let to = from.saturating_add(span);
            if let Ok(starts) = bucket_starts(from, to, interval, &tz) {
                proptest::prop_assert!(starts.windows(2).all(|w| w[0] < w[1]));
                proptest::prop_assert!(starts.first().is_none_or(|f| *f <= from));
                proptest::prop_assert!(starts.last().is_none_or(|l| *l < to));
            }
            date_of(from, &tz);
            date_of(to, &tz);
        }
    }
}
