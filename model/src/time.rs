//! Time parsing and formatting shared by every endpoint (DESIGN A1).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A point in time as a client may send it: RFC 3339 text or Unix epoch milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub enum TimeInput {
    Text(String),
    EpochMillis(f64),
    /// OTLP sends nanoseconds; the JSON API never produces this variant.
    EpochNanos(i64),
}

impl TimeInput {
    /// Unix nanoseconds, or why the value is not a time.
    pub fn to_unix_nanos(&self) -> Result<i64, &'static str> {
        match self {
            TimeInput::Text(s) => parse_text(s),
            TimeInput::EpochMillis(ms) => {
                if !ms.is_finite() || *ms < 0.0 || *ms > 7.0e15 {
                    return Err("must be a valid Unix epoch in milliseconds");
                }
                // Whole milliseconds exactly; only the fraction goes through floating point.
                Ok(ms.trunc() as i64 * 1_000_000 + (ms.fract() * 1e6).round() as i64)
            }
            TimeInput::EpochNanos(n) => Ok(*n),
        }
    }
}

fn parse_text(s: &str) -> Result<i64, &'static str> {
    if let Ok(ms) = s.parse::<i64>() {
        return TimeInput::EpochMillis(ms as f64).to_unix_nanos();
    }
    let t = DateTime::parse_from_rfc3339(s).map_err(|_| "must be an RFC 3339 date-time")?;
    t.timestamp_nanos_opt().ok_or("is out of range")
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
                Ok(TimeInput::Text(v.to_owned()))
            }
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

/// Parses a query-string time parameter (`from`, `to`).
pub fn parse_query_time(s: &str) -> Result<i64, &'static str> {
    parse_text(s)
}

/// RFC 3339 UTC with milliseconds: `2026-11-22T10:15:30.123Z`.
pub fn format_nanos(unix_nanos: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(unix_nanos).to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub fn now_nanos() -> i64 {
    Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_rfc3339_and_epoch_millis() {
        let a = TimeInput::Text("2026-11-22T10:15:30.123Z".into()).to_unix_nanos().unwrap();
        let b = TimeInput::EpochMillis(1_795_342_530_123.0).to_unix_nanos().unwrap();
        assert_eq!(a, b);
        assert_eq!(format_nanos(a), "2026-11-22T10:15:30.123Z");
        assert_eq!(parse_query_time("1795342530123").unwrap(), a);
    }

    #[test]
    fn rejects_garbage() {
        assert!(TimeInput::Text("yesterday".into()).to_unix_nanos().is_err());
        assert!(TimeInput::EpochMillis(-1.0).to_unix_nanos().is_err());
        assert!(TimeInput::EpochMillis(f64::NAN).to_unix_nanos().is_err());
    }
}
