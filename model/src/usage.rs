//! Metering (docs/API.md, "Usage"): what each project ingested per calendar month (UTC),
//! counted by the shards where rows are committed and rolled up into meta.
//!
//! A month is named by its number `YYYYMM` (`202611`); a batch belongs to the month of its
//! receive time, which the router stamps on it ([`crate::row::RowBatch::received_unix_millis`]),
//! so every replica and every replay of the Raft log files it under the same month.

use serde::{Deserialize, Serialize};

/// What one project ingested in one month (or a sum of such).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageCounts {
    /// JSON size of the accepted observability and analytics objects.
    pub bytes: u64,
    pub spans: u64,
    pub logs: u64,
    /// Host metric rows.
    pub metric_samples: u64,
    pub events: u64,
    pub replay_events: u64,
}

impl UsageCounts {
    pub fn add(&mut self, o: &UsageCounts) {
        self.bytes += o.bytes;
        self.spans += o.spans;
        self.logs += o.logs;
        self.metric_samples += o.metric_samples;
        self.events += o.events;
        self.replay_events += o.replay_events;
    }

    /// Takes `o` away again (an aborted batch); never below zero.
    pub fn sub(&mut self, o: &UsageCounts) {
        self.bytes = self.bytes.saturating_sub(o.bytes);
        self.spans = self.spans.saturating_sub(o.spans);
        self.logs = self.logs.saturating_sub(o.logs);
        self.metric_samples = self.metric_samples.saturating_sub(o.metric_samples);
        self.events = self.events.saturating_sub(o.events);
        self.replay_events = self.replay_events.saturating_sub(o.replay_events);
    }

    pub fn is_zero(&self) -> bool {
        *self == UsageCounts::default()
    }
}

/// One project's counts in one month, as a shard group reports them and meta answers them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub project_id: String,
    /// `YYYYMM`.
    pub month: u32,
    pub counts: UsageCounts,
}

const DAY_MS: i64 = 86_400_000;

/// (year, month 1..=12, day) of a day number since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of (year, month, day).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The month (`YYYYMM`, UTC) holding the instant `unix_millis`.
pub fn month_of_millis(unix_millis: i64) -> u32 {
    let (y, m, _) = civil_from_days(unix_millis.div_euclid(DAY_MS));
    (y.clamp(0, 9999) as u32) * 100 + m
}

/// The instant (Unix milliseconds) at which `month` begins, 00:00 UTC on its first day.
pub fn month_start_millis(month: u32) -> i64 {
    days_from_civil(i64::from(month / 100), (month % 100).clamp(1, 12), 1) * DAY_MS
}

/// The month after `month`.
pub fn next_month(month: u32) -> u32 {
    if month % 100 >= 12 {
        (month / 100 + 1) * 100 + 1
    } else {
        month + 1
    }
}

/// The month before `month`.
pub fn previous_month(month: u32) -> u32 {
    if month % 100 <= 1 {
        // Year 0 has no month before: it stays (only a forged receive time gets there).
        (month / 100).checked_sub(1).map_or(month, |y| y * 100 + 12)
    } else {
        month - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_begin_at_midnight_utc_on_the_first() {
        // 2026-11-30T23:59:59.999Z and 2026-12-01T00:00:00Z.
        let dec = 1_796_083_200_000;
        assert_eq!(month_of_millis(dec - 1), 202611);
        assert_eq!(month_of_millis(dec), 202612);
        assert_eq!(month_start_millis(202612), dec);
        assert_eq!(month_of_millis(0), 197001);
        assert_eq!(month_start_millis(202403), 1_709_251_200_000, "after a leap February");
        assert_eq!((next_month(202612), previous_month(202701)), (202701, 202612));
        assert_eq!((next_month(202602), previous_month(202602)), (202603, 202601));
        assert_eq!((month_of_millis(i64::MIN / 2) / 100, previous_month(1)), (0, 1), "clamped, never a panic");
        for month in [197001, 200002, 202412, 209906] {
            assert_eq!(month_of_millis(month_start_millis(month)), month);
            assert_eq!(month_of_millis(month_start_millis(next_month(month)) - 1), month);
        }
    }
}
