//! Span rollups: per (project, service, operation, minute), the totals of the spans starting in
//! that minute, written beside every spans segment (like its trace summaries, and replaced
//! with it) so that APM over a long range reads a row per endpoint and minute instead of every
//! span. Totals merge exactly, so a rollup answers what a scan of its spans would.

use std::collections::BTreeMap;
use std::io;

use arrow_array::RecordBatch;
use prost::encoding::{decode_varint, encode_varint};
use sextant_model::query::SpanTotals;
use sextant_model::row::{SpanRollup, SpanStatus};
use sextant_model::sketch::{BucketCounts, LatencyBuckets};

use super::table::{Cols, Row, RowRef};

pub const MINUTE_NS: i64 = 60_000_000_000;

/// The start of the minute holding `t`.
pub fn minute_of(t: i64) -> i64 {
    t.div_euclid(MINUTE_NS).saturating_mul(MINUTE_NS)
}

/// The first minute start at or after `t`, if there is one.
pub fn minute_at_or_after(t: i64) -> Option<i64> {
    let m = minute_of(t);
    if m >= t {
        Some(m)
    } else {
        m.checked_add(MINUTE_NS)
    }
}

/// What a rollup needs of one span.
pub struct SpanFacts<'a> {
    pub project: &'a str,
    pub service: &'a str,
    pub operation: &'a str,
    pub start_ns: i64,
    /// As a scan reads it (the stored `i64`).
    pub duration_ns: i64,
    pub error: bool,
}

/// The rollups of `spans`, sorted by project, minute, service and operation.
pub fn rollup<'a>(spans: impl IntoIterator<Item = SpanFacts<'a>>) -> Vec<(String, SpanRollup)> {
    let mut groups: BTreeMap<(&str, i64, &str, &str), SpanTotals> = BTreeMap::new();
    for s in spans {
        groups
            .entry((s.project, minute_of(s.start_ns), s.service, s.operation))
            .or_default()
            .add(s.duration_ns, s.error);
    }
    groups
        .into_iter()
        .map(|((project, minute, service, operation), totals)| {
            let r = SpanRollup {
                service: service.to_owned(),
                operation: operation.to_owned(),
                minute_unix_nanos: minute,
                totals,
            };
            (project.to_owned(), r)
        })
        .collect()
}

/// Rollup rows of the spans among `rows` (buffered, or a segment's being written).
pub fn rollup_rows(rows: &[RowRef<'_>]) -> Vec<(String, Row)> {
    let spans = rows.iter().filter_map(|r| match r.row {
        Row::Span(s) => Some(SpanFacts {
            project: r.project,
            service: &s.service_name,
            operation: &s.operation,
            start_ns: s.start_unix_nanos,
            duration_ns: s.duration_nanos as i64,
            error: s.status == SpanStatus::Error,
        }),
        _ => None,
    });
    rollup(spans).into_iter().map(|(p, r)| (p, Row::SpanRollup(r))).collect()
}

/// The columns a scan of spans returns for [`rollup_batches`].
pub const SPAN_COLUMNS: [&str; 5] = ["service", "operation", "start_ns", "duration_ns", "status"];

/// Rollup rows of spans of `project` read by a scan returning [`SPAN_COLUMNS`].
pub fn rollup_batches(project: &str, batches: &[RecordBatch]) -> Vec<(String, Row)> {
    let mut facts = Vec::new();
    for rb in batches {
        let c = Cols(rb);
        let (service, operation) = (c.strings("service"), c.strings("operation"));
        let (start, duration, status) = (c.i64("start_ns"), c.i64("duration_ns"), c.i32("status"));
        facts.extend((0..rb.num_rows()).map(|i| SpanFacts {
            project,
            service: service.value(i),
            operation: operation.value(i),
            start_ns: start.value(i),
            duration_ns: duration.value(i),
            error: status.value(i) == SpanStatus::Error.code(),
        }));
    }
    rollup(facts).into_iter().map(|(p, r)| (p, Row::SpanRollup(r))).collect()
}

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
pub fn decode_durations(mut bytes: &[u8]) -> io::Result<(i128, LatencyBuckets)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("span rollup: {what}"));
    let mut take = |n: usize| -> io::Result<&[u8]> {
        if bytes.len() < n {
            return Err(bad("truncated"));
        }
        let (head, rest) = bytes.split_at(n);
        bytes = rest;
        Ok(head)
    };
    if take(1)?[0] != DURATIONS_V1 {
        return Err(bad("unknown version"));
    }
    let sum = i128::from_le_bytes(take(16)?.try_into().expect("16 bytes"));
    let mut rest = bytes;
    let zeros = decode_varint(&mut rest).map_err(|_| bad("bad varint"))?;
    let f64_at = |b: &[u8], at: usize| b.get(at..at + 8).map(|s| f64::from_le_bytes(s.try_into().expect("8 bytes")));
    let (min, max) =
        (f64_at(rest, 0).ok_or_else(|| bad("truncated"))?, f64_at(rest, 8).ok_or_else(|| bad("truncated"))?);
    rest = &rest[16..];
    let n = decode_varint(&mut rest).map_err(|_| bad("bad varint"))?;
    let mut buckets = Vec::with_capacity(n.min(4096) as usize);
    let mut key = 0i64;
    for _ in 0..n {
        let z = decode_varint(&mut rest).map_err(|_| bad("bad varint"))?;
        let count = decode_varint(&mut rest).map_err(|_| bad("bad varint"))?;
        key += ((z >> 1) as i64) ^ -((z & 1) as i64);
        let k = i32::try_from(key).map_err(|_| bad("bucket key out of range"))?;
        if buckets.last().is_some_and(|&(last, _)| last >= k) {
            return Err(bad("bucket keys not increasing"));
        }
        buckets.push((k, count));
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok((sum, LatencyBuckets::from_counts(&BucketCounts { zeros, min, max, buckets })))
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
