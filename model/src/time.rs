//! Time parsing and formatting shared by every endpoint (docs/API.md, "Times").

use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// First accepted instant: 1970-01-01T00:00:00Z, in Unix nanoseconds.
pub const MIN_INSTANT_NS: i64 = 0;
/// End (excluded) of the accepted instants: 2262-01-01T00:00:00Z. 100 days below
/// `i64::MAX` nanoseconds, so an instant plus a span's duration or a query range still fits;
/// longer sums (funnel windows, retention horizons) saturate.
pub const END_INSTANT_NS: i64 = 9_214_646_400 * 1_000_000_000;
/// [`END_INSTANT_NS`] in milliseconds.
pub const END_INSTANT_MS: i64 = END_INSTANT_NS / 1_000_000;
/// Why an instant outside the accepted range is refused.
pub const OUT_OF_RANGE: &str = "must be from 1970-01-01T00:00:00Z up to, not including, 2262-01-01T00:00:00Z";

/// `ns` if it is an accepted instant (docs/API.md, "Times"), else why not. Every time a client
/// sends goes through here: query parameters, ingest timestamps, cursors.
pub fn check_instant(ns: i64) -> Result<i64, &'static str> {
    if (MIN_INSTANT_NS..END_INSTANT_NS).contains(&ns) {
        Ok(ns)
    } else {
        Err(OUT_OF_RANGE)
    }
}

/// A point in time as a client may send it: RFC 3339 text or Unix epoch milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub enum TimeInput {
    /// Text, read as it is parsed (no copy of it is kept): the instant, or why it is none.
    Text(Result<i64, &'static str>),
    EpochMillis(f64),
    /// OTLP sends nanoseconds; the JSON API never produces this variant.
    EpochNanos(i64),
}

impl TimeInput {
    /// Unix nanoseconds within the accepted range, or why the value is not such a time.
    pub fn to_unix_nanos(&self) -> Result<i64, &'static str> {
        match self {
            TimeInput::Text(read) => *read,
            TimeInput::EpochMillis(ms) => millis_to_nanos(*ms),
            TimeInput::EpochNanos(n) => check_instant(*n),
        }
    }

    /// A time sent as text: RFC 3339, or integer epoch milliseconds.
    pub fn text(text: &str) -> TimeInput {
        TimeInput::Text(parse_text(text))
    }
}

fn millis_to_nanos(ms: f64) -> Result<i64, &'static str> {
    if ms.is_nan() || ms.is_infinite() {
        return Err("must be a finite number of Unix epoch milliseconds");
    }
    // -0.0 is 0; the comparison also keeps the casts below exact.
    if !(0.0..END_INSTANT_MS as f64).contains(&ms) {
        return Err(OUT_OF_RANGE);
    }
    // Whole milliseconds exactly; only the fraction goes through floating point.
    let whole = (ms.trunc() as i64).checked_mul(1_000_000).ok_or(OUT_OF_RANGE)?;
    let fraction = (ms.fract() * 1e6).round() as i64;
    check_instant(whole.checked_add(fraction).ok_or(OUT_OF_RANGE)?)
}

fn parse_text(s: &str) -> Result<i64, &'static str> {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        // Integer milliseconds: checked in integers, whatever their size.
        let ms: i64 = s.parse().map_err(|_| OUT_OF_RANGE)?;
        return check_instant(ms.checked_mul(1_000_000).ok_or(OUT_OF_RANGE)?);
    }
    let ns = parse_rfc3339(s).ok_or("must be an RFC 3339 date-time")?;
    check_instant(ns.ok_or(OUT_OF_RANGE)?)
}

/// RFC 3339 `date-time` (section 5.6) in Unix nanoseconds: `None` if `s` is not one, `Some(None)`
/// if it is but lies outside what an `i64` holds. As the RFC allows: `t` or a space for `T`, `z`
/// for `Z`, any number of fraction digits (past nanoseconds ignored), and a leap second `:60`
/// (the second after `:59`). An offset may use U+2212 for its minus sign.
fn parse_rfc3339(s: &str) -> Option<Option<i64>> {
    fn number(d: &[u8]) -> Option<i64> {
        d.iter().all(u8::is_ascii_digit).then(|| d.iter().fold(0, |v, c| v * 10 + i64::from(c - b'0')))
    }
    let b = s.as_bytes();
    let separators = [(4, b"-" as &[u8]), (7, b"-"), (10, b"Tt "), (13, b":"), (16, b":")];
    if b.len() < 20 || !separators.iter().all(|(at, allowed)| allowed.contains(&b[*at])) {
        return None;
    }
    let (year, month, day) = (number(&b[0..4])?, number(&b[5..7])?, number(&b[8..10])?);
    let (hour, minute, second) = (number(&b[11..13])?, number(&b[14..16])?, number(&b[17..19])?);
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let kept = &fraction.as_bytes()[..n.min(9)];
        nanos = number(kept)? * 10i64.pow(9 - kept.len() as u32);
        rest = &fraction[n..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ => {
            let (sign, o) = match rest.chars().next()? {
                '+' => (1, &rest[1..]),
                '-' => (-1, &rest[1..]),
                '\u{2212}' => (-1, &rest['\u{2212}'.len_utf8()..]),
                _ => return None,
            };
            let o = o.as_bytes();
            if o.len() != 5 || o[2] != b':' {
                return None;
            }
            let (hours, minutes) = (number(&o[..2])?, number(&o[3..])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let date = jiff::civil::Date::new(year as i16, month as i8, day as i8).ok()?;
    let midnight = date.to_zoned(TimeZone::UTC).map(|z| z.timestamp().as_second());
    let Ok(midnight) = midnight else { return Some(None) };
    let seconds = midnight + hour * 3600 + minute * 60 + second - offset_s;
    Some(seconds.checked_mul(1_000_000_000).and_then(|ns| ns.checked_add(nanos)))
}

impl<'de> Deserialize<'de> for TimeInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TimeInput;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an RFC 3339 date-time string or Unix epoch milliseconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TimeInput, E> {
                Ok(TimeInput::text(v))
            }
            // Integers past 2^53 lose precision as f64, but all of them are out of range.
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TimeInput, E> {
                Ok(TimeInput::EpochMillis(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TimeInput, E> {
                Ok(TimeInput::EpochMillis(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<TimeInput, E> {
                Ok(TimeInput::EpochMillis(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses a query-string time parameter (`from`, `to`): RFC 3339 or integer epoch
/// milliseconds, within the accepted range.
pub fn parse_query_time(s: &str) -> Result<i64, &'static str> {
    parse_text(s)
}

/// RFC 3339 UTC with milliseconds: `2026-11-22T10:15:30.123Z`.
pub fn format_nanos(unix_nanos: i64) -> String {
    // Every i64 of nanoseconds is a jiff timestamp.
    let t = Timestamp::from_nanosecond(i128::from(unix_nanos)).expect("an i64 of nanoseconds is a timestamp");
    format!("{t:.3}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn in_range(ns: i64) -> bool {
        (MIN_INSTANT_NS..END_INSTANT_NS).contains(&ns)
    }

    #[test]
    fn accepts_rfc3339_and_epoch_millis() {
        let a = TimeInput::text("2026-11-22T10:15:30.123Z").to_unix_nanos().unwrap();
        let b = TimeInput::EpochMillis(1_795_342_530_123.0).to_unix_nanos().unwrap();
        assert_eq!(a, b);
        assert_eq!(format_nanos(a), "2026-11-22T10:15:30.123Z");
        assert_eq!(parse_query_time("1795342530123").unwrap(), a);
    }

    #[test]
    fn rfc3339_text_is_read_as_section_5_6_allows() {
        let at = parse_query_time("2026-11-22T10:15:30Z").unwrap();
        for same in [
            "2026-11-22t10:15:30z",
            "2026-11-22 10:15:30Z",
            "2026-11-22T11:15:30+01:00",
            "2026-11-22T09:15:30\u{2212}01:00",
        ] {
            assert_eq!(parse_query_time(same), Ok(at), "{same}");
        }
        // Nanoseconds kept, digits past them ignored; a leap second is the second after :59.
        assert_eq!(parse_query_time("2026-11-22T10:15:30.1234567899Z"), Ok(at + 123_456_789));
        assert_eq!(parse_query_time("2026-11-22T10:15:29.5Z"), Ok(at - 500_000_000));
        assert_eq!(parse_query_time("2026-11-22T10:14:60Z"), Ok(at - 30_000_000_000));
        for bad in [
            "2026-11-22T10:15Z",
            "2026-11-22T10:15:30",
            "2026-11-22T10:15:30.Z",
            "2026-11-22T10:15:30+0100",
            "2026-11-22T10:15:30+01",
            "2026-11-22T10:15:30+24:00",
            "2026-11-22T24:00:00Z",
            "2026-02-29T10:15:30Z",
            "2026-11-22T10:15:30 Z",
            "2026-11-22T10:15:30UTC",
            "+2026-11-22T10:15:30Z",
        ] {
            assert_eq!(parse_query_time(bad), Err("must be an RFC 3339 date-time"), "{bad}");
        }
        assert_eq!(format_nanos(at), "2026-11-22T10:15:30.000Z");
        assert_eq!(format_nanos(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn rejects_garbage() {
        assert!(TimeInput::text("yesterday").to_unix_nanos().is_err());
        assert!(TimeInput::EpochMillis(-1.0).to_unix_nanos().is_err());
        assert!(TimeInput::EpochMillis(f64::NAN).to_unix_nanos().is_err());
    }

    #[test]
    fn the_accepted_range_is_1970_up_to_2262() {
        let end = "2262-01-01T00:00:00Z".parse::<Timestamp>().unwrap().as_nanosecond() as i64;
        assert_eq!(END_INSTANT_NS, end);
        assert_eq!(parse_query_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_query_time("0"), Ok(0));
        assert_eq!(parse_query_time("-0"), Ok(0));
        assert_eq!(TimeInput::EpochMillis(-0.0).to_unix_nanos(), Ok(0));
        assert_eq!(parse_query_time("2261-12-31T23:59:59.999999999Z"), Ok(END_INSTANT_NS - 1));
        for bad in [
            "1969-12-31T23:59:59.999Z",
            "1970-01-01T00:30:00+01:00",
            "2262-01-01T00:00:00Z",
            "2261-12-31T23:00:00-01:00",
            "1677-09-21T00:12:44Z",
            "2262-04-11T23:47:15Z",
            "-1",
            "9214646400000",
            "9223372036854775807",
            "-9223372036854775808",
            "99999999999999999999999",
        ] {
            assert_eq!(parse_query_time(bad), Err(OUT_OF_RANGE), "{bad}");
        }
        assert_eq!(parse_query_time("9214646399999"), Ok(END_INSTANT_NS - 1_000_000));
    }

    #[test]
    fn epoch_millis_that_overflowed_nanoseconds_are_refused() {
        // Were stored as 1680-02-24 and 2245 when the product wrapped in i64.
        for ms in [9_300_000_000_000.0, 7e15, 9.3e12, i64::MAX as f64, f64::MAX, f64::INFINITY] {
            assert!(TimeInput::EpochMillis(ms).to_unix_nanos().is_err(), "{ms}");
        }
        let json: TimeInput = serde_json::from_str("9300000000000").unwrap();
        assert_eq!(json.to_unix_nanos(), Err(OUT_OF_RANGE));
        assert_eq!(TimeInput::EpochNanos(i64::MIN).to_unix_nanos(), Err(OUT_OF_RANGE));
        assert_eq!(TimeInput::EpochNanos(i64::MAX).to_unix_nanos(), Err(OUT_OF_RANGE));
        assert_eq!(TimeInput::EpochMillis(1.5).to_unix_nanos(), Ok(1_500_000));
        assert_eq!(TimeInput::EpochMillis(f64::MIN_POSITIVE / 2.0).to_unix_nanos(), Ok(0));
    }

    /// Any f64: the special values, subnormals and the full range of magnitudes, both signs.
    fn any_f64() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(0.0),
            Just(f64::MIN_POSITIVE / 3.0),
            Just(END_INSTANT_MS as f64),
            Just(END_INSTANT_MS as f64 - 0.0001),
            any::<u64>().prop_map(f64::from_bits),
            proptest::num::f64::ANY,
            (0.0..1e16f64),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn epoch_millis_are_within_range_or_refused(ms in any_f64()) {
            match TimeInput::EpochMillis(ms).to_unix_nanos() {
                Ok(ns) => {
                    prop_assert!(in_range(ns));
                    prop_assert!((0.0..END_INSTANT_MS as f64).contains(&ms));
                    prop_assert!((ns as f64 - ms * 1e6).abs() <= 1.0 + ms * 1e6 * f64::EPSILON);
                }
                Err(_) => prop_assert!(!(0.0..END_INSTANT_MS as f64 - 0.001).contains(&ms)),
            }
        }

        #[test]
        fn integer_strings_are_milliseconds_within_range(ms in prop_oneof![any::<i64>(), -1i64..END_INSTANT_MS + 1]) {
            let want = (0..END_INSTANT_MS).contains(&ms).then(|| ms * 1_000_000);
            prop_assert_eq!(parse_query_time(&ms.to_string()).ok(), want);
            // The same number as a JSON body field.
            let t: TimeInput = serde_json::from_str(&ms.to_string()).unwrap();
            prop_assert_eq!(t.to_unix_nanos().ok(), want);
        }

        #[test]
        fn epoch_nanos_outside_the_range_are_refused(ns in any::<i64>()) {
            prop_assert_eq!(TimeInput::EpochNanos(ns).to_unix_nanos().is_ok(), in_range(ns));
        }

        #[test]
        fn rfc3339_text_is_accepted_exactly_within_range(
            ns in any::<i64>(),
            offset_minutes in -(24 * 60 - 1)..(24 * 60),
        ) {
            // Every i64 instant, written in some offset.
            let offset = TimeZone::fixed(jiff::tz::Offset::from_seconds(offset_minutes * 60).unwrap());
            let t = Timestamp::from_nanosecond(i128::from(ns)).unwrap().to_zoned(offset);
            let text = t.strftime("%Y-%m-%dT%H:%M:%S%.f%:z").to_string();
            match parse_query_time(&text) {
                Ok(got) => prop_assert_eq!(got, ns),
                Err(_) => prop_assert!(!in_range(ns), "{} refused", text),
            }
        }

        #[test]
        fn any_text_is_an_instant_in_range_or_refused(s in "\\PC{0,40}|[-+]?[0-9]{1,30}|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,20}(Z|[-+][0-9]{2}:[0-9]{2})") {
            if let Ok(ns) = parse_query_time(&s) {
                prop_assert!(in_range(ns));
            }
        }

        #[test]
        fn json_numbers_are_instants_in_range_or_refused(ms in any_f64()) {
            if let Ok(t) = serde_json::from_str::<TimeInput>(&serde_json::json!(ms).to_string()) {
                if let Ok(ns) = t.to_unix_nanos() {
                    prop_assert!(in_range(ns));
                }
            }
        }
    }
}
