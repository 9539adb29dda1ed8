//! Rollups, written beside every spans or events segment (like trace summaries, and replaced
//! with it) so that reads over long ranges read a row per key and time bucket instead of every
//! row. Span rollups: per (project, service, operation, minute), the totals of the spans
//! starting in that minute; event rollups: per (project, event name, hour), the events. Both
//! add up exactly, so a rollup answers what a scan of its rows would.

use std::io;

use prost::encoding::{decode_varint, encode_varint};
use rustc_hash::FxHashMap;
use sextant_model::query::SpanTotals;
use sextant_model::row::{EventRollup, SpanRollup, SpanStatus};
use sextant_model::sketch::LatencyBuckets;

use super::table::{Row, RowRef, Table};

pub const MINUTE_NS: i64 = 60_000_000_000;
pub const HOUR_NS: i64 = 60 * MINUTE_NS;

/// The start of the `width`-long bucket (from the epoch) holding `t`.
fn bucket_of(t: i64, width: i64) -> i64 {
    t.div_euclid(width).saturating_mul(width)
}

pub fn minute_of(t: i64) -> i64 {
    bucket_of(t, MINUTE_NS)
}

pub fn hour_of(t: i64) -> i64 {
    bucket_of(t, HOUR_NS)
}

/// The bucket width of a rollup table.
pub fn width(table: Table) -> i64 {
    match table {
        Table::EventRollups => HOUR_NS,
        _ => MINUTE_NS,
    }
}

/// The first start of a `width`-long bucket at or after `t`, if there is one.
pub fn bucket_at_or_after(t: i64, width: i64) -> Option<i64> {
    let m = bucket_of(t, width);
    if m >= t {
        Some(m)
    } else {
        m.checked_add(width)
    }
}

pub fn minute_at_or_after(t: i64) -> Option<i64> {
    bucket_at_or_after(t, MINUTE_NS)
}

/// Rows of rollup table `table` of its source rows among `rows` (a segment's being written),
/// sorted like a segment of `table`.
pub fn rollup_rows(table: Table, rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    match table {
        Table::EventRollups => event_rollups(rows),
        _ => span_rollups(rows),
    }
}

/// Per (project, minute, service, operation), the totals of the spans among `rows`.
fn span_rollups(rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    let mut groups: FxHashMap<(&str, i64, &str, &str), SpanTotals> = FxHashMap::default();
    for r in rows {
        if let Row::Span(s) = r.row {
            let key = (r.project, minute_of(s.start_unix_nanos), s.service_name.as_str(), s.operation.as_str());
            // As a scan reads the duration: the stored i64.
            groups.entry(key).or_default().add(s.duration_nanos as i64, s.status == SpanStatus::Error);
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    groups
        .into_iter()
        .map(|((project, minute, service, operation), totals)| {
            let r = SpanRollup {
                service: service.to_owned(),
                operation: operation.to_owned(),
                minute_unix_nanos: minute,
                totals,
            };
            (project.to_owned(), Row::SpanRollup(r))
        })
        .collect()
}

/// Per (project, hour, event name), the events among `rows`.
fn event_rollups(rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    let mut groups: FxHashMap<(&str, i64, &str), u64> = FxHashMap::default();
    for r in rows {
        if let Row::Event(e) = r.row {
            *groups.entry((r.project, hour_of(e.unix_nanos), e.event.as_str())).or_default() += 1;
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable();
    groups
        .into_iter()
        .map(|((project, hour, event), count)| {
            let r = EventRollup { event: event.to_owned(), hour_unix_nanos: hour, count };
            (project.to_owned(), Row::EventRollup(r))
        })
        .collect()
}

/// The columns a rollup table's consumers read from its source rows, and those read as
/// dictionaries.
pub fn source_columns(table: Table) -> (&'static [&'static str], Vec<&'static str>) {
    match table {
        Table::EventRollups => (&["time_ns"], vec![]),
        _ => (&["service", "operation", "duration_ns", "status"], vec!["service", "operation"]),
    }
}

/// Fewest source rows per stored rollup row for reading the rollup to pay: a span rollup row
/// (its durations decoded and added) costs about six spans (docs/BENCHMARKS.md, "Rollups").
pub const MIN_ROWS_PER_ROLLUP: u64 = 8;

/// Version of the stored form of a rollup's durations.
const DURATIONS_V1: u8 = 1;

/// A rollup's durations as a segment stores them (the `durations` column): a version byte,
/// the exact sum (i128, little-endian), the values at or under the sketch's minimum, the
/// extremes (f64, little-endian), then the non-empty buckets as key deltas (zigzag) and
/// counts, all varints.
pub fn encode_durations(t: &SpanTotals) -> Vec<u8> {
    let c = t.latency.counts();
    let mut out = Vec::with_capacity(40 + 4 * c.buckets.len());
    out.push(DURATIONS_V1);
    out.extend_from_slice(&t.duration_sum_ns.to_le_bytes());
    encode_varint(c.zeros, &mut out);
    out.extend_from_slice(&c.min.to_le_bytes());
    out.extend_from_slice(&c.max.to_le_bytes());
    encode_varint(c.buckets.len() as u64, &mut out);
    let mut previous = 0i64;
    for &(key, n) in &c.buckets {
        let delta = i64::from(key) - previous;
        encode_varint(((delta << 1) ^ (delta >> 63)) as u64, &mut out);
        encode_varint(n, &mut out);
        previous = i64::from(key);
    }
    out
}

/// Reads back [`encode_durations`]: the sum and the latency buckets of the totals.
pub fn decode_durations(bytes: &[u8]) -> io::Result<(i128, LatencyBuckets)> {
    let mut t = SpanTotals::default();
    add_durations(bytes, &mut t)?;
    Ok((t.duration_sum_ns, t.latency))
}

/// Adds the durations stored as [`encode_durations`] to `into` (its sum and latency buckets;
/// not its count and errors, stored beside them), without building them apart first: a long
/// APM range adds up a row per endpoint and minute.
pub fn add_durations(mut bytes: &[u8], into: &mut SpanTotals) -> io::Result<()> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("span rollup: {what}"));
    let mut fixed = |n: usize| -> io::Result<&[u8]> {
        if bytes.len() < n {
            return Err(bad("truncated"));
        }
        let (head, rest) = bytes.split_at(n);
        bytes = rest;
        Ok(head)
    };
    if fixed(1)?[0] != DURATIONS_V1 {
        return Err(bad("unknown version"));
    }
    let sum = i128::from_le_bytes(fixed(16)?.try_into().expect("16 bytes"));
    let mut rest = bytes;
    let varint = |rest: &mut &[u8]| decode_varint(rest).map_err(|_| bad("bad varint"));
    let zeros = varint(&mut rest)?;
    let f64_at = |b: &[u8], at: usize| b.get(at..at + 8).map(|s| f64::from_le_bytes(s.try_into().expect("8 bytes")));
    let (min, max) = match (f64_at(rest, 0), f64_at(rest, 8)) {
        (Some(min), Some(max)) => (min, max),
        _ => return Err(bad("truncated")),
    };
    rest = &rest[16..];
    let n = varint(&mut rest)?;
    // A row that does not decode fails the query: what it added meanwhile is never answered.
    into.duration_sum_ns += sum;
    into.latency.add_extremes(zeros, min, max);
    let (mut key, mut previous) = (0i64, None);
    for _ in 0..n {
        let z = varint(&mut rest)?;
        let count = varint(&mut rest)?;
        key += ((z >> 1) as i64) ^ -((z & 1) as i64);
        let k = i32::try_from(key).map_err(|_| bad("bucket key out of range"))?;
        if previous.is_some_and(|p| p >= k) {
            return Err(bad("bucket keys not increasing"));
        }
        previous = Some(k);
        into.latency.add_bucket(k, count);
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_round_down_and_up_also_before_1970() {
        assert_eq!(minute_of(MINUTE_NS + 5), MINUTE_NS);
        assert_eq!(minute_of(-5), -MINUTE_NS);
        assert_eq!(minute_at_or_after(MINUTE_NS), Some(MINUTE_NS));
        assert_eq!(minute_at_or_after(MINUTE_NS + 1), Some(2 * MINUTE_NS));
        assert_eq!(minute_at_or_after(i64::MAX), None);
        assert_eq!(minute_of(i64::MIN), i64::MIN);
    }

    #[test]
    fn durations_read_back_as_written() {
        let mut t = SpanTotals::default();
        for (ns, e) in
            [(0, false), (1, true), (2_500_000, false), (i64::MAX, false), (-7, false), (40_000_000_000, true)]
        {
            t.add(ns, e);
        }
        let (sum, latency) = decode_durations(&encode_durations(&t)).unwrap();
        assert_eq!((sum, &latency), (t.duration_sum_ns, &t.latency));
        let empty = SpanTotals::default();
        assert_eq!(decode_durations(&encode_durations(&empty)).unwrap().1, empty.latency);
        let bytes = encode_durations(&t);
        for cut in 0..bytes.len() {
            assert!(decode_durations(&bytes[..cut]).is_err(), "a prefix of {cut} bytes");
        }
        assert!(decode_durations(&[9]).is_err());
    }
}
