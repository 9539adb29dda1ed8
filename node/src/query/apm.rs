//! APM endpoints: per (service, operation) counts, error counts, total and a latency sketch,
//! from span rollups per day for the whole days of the range, per hour for the whole hours
//! around them, per minute for the whole minutes around those, and from spans for the rest.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use arrow_array::Array;
use sextant_model::query::{self, ApmPlan, ShardQuery, SpanTotals};
use sextant_model::row::SpanStatus;
use xxhash_rust::xxh3::xxh3_64;

use super::{each_batch_holding, scan_of, Budget, Compute, Prehashed, QueryError, QueryKind, Scans};
use crate::segment::rollup::{add_durations, bucket_at_or_after, bucket_of, source_columns, width};
use crate::segment::table::{Cols, Strings};
use crate::segment::{Filter, Scan, Table};
use crate::shard::ScanJob;

impl QueryKind for ApmPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let filter = Filter { services: self.services.clone(), ..Default::default() };
        // What rollup scans hand out for segments without usable rollups, and buffered rows.
        let (span_columns, dictionaries) = source_columns(Table::SpanRollups);
        let jobs = pieces(req.from_unix_nanos, req.to_unix_nanos)
            .into_iter()
            .map(|(table, from_ns, to_ns)| {
                let columns = if table == Table::Spans { span_columns } else { &ROLLUP_COLUMNS };
                shard.scan(Scan { from_ns, to_ns, ..scan_of(req, table, filter.clone(), columns, &dictionaries) })
            })
            .collect();
        Ok(Box::new(move |_, budget| Ok(run(jobs, budget)?.into())))
    }
}

/// `[from, to)` cut into what each part is read from: whole days from span rollups per day,
/// whole hours around them from rollups per hour, whole minutes around those from rollups
/// per minute, the parts of a minute at either end from spans. Each rollup part starts and
/// ends on its buckets.
fn pieces(from: i64, to: i64) -> Vec<(Table, i64, i64)> {
    let mut out = Vec::new();
    let mut rest = vec![(from, to)];
    for table in [Table::SpanDayRollups, Table::SpanHourRollups, Table::SpanRollups] {
        let width = width(table).expect("a rollup table");
        rest = rest
            .into_iter()
            .flat_map(|(a, b)| {
                let (first, last) = (bucket_at_or_after(a, width).unwrap_or(i64::MAX), bucket_of(b, width));
                if first < last {
                    out.push((table, first, last));
                    vec![(a, first), (last, b)]
                } else {
                    vec![(a, b)]
                }
            })
            .filter(|(a, b)| a < b)
            .collect();
    }
    out.extend(rest.into_iter().map(|(a, b)| (Table::Spans, a, b)));
    out
}

const ROLLUP_COLUMNS: [&str; 5] = ["service", "operation", "count", "errors", "durations"];

/// Memory of an endpoint's accumulator while grouping: its names and latency buckets.
const ENDPOINT_BYTES: u64 = 4096;

/// Endpoint totals over `jobs`: scans of spans and of span rollups.
pub fn run(jobs: Vec<ScanJob>, budget: &mut Budget) -> Result<query::Endpoints, QueryError> {
    let mut endpoints = Endpoints::default();
    let mut rows = Vec::new();
    for job in jobs {
        each_batch_holding(job, budget, |rb| {
            let c = Cols(rb);
            endpoints.of_rows(c.strings("service"), c.strings("operation"), rb.num_rows(), &mut rows);
            if rb.column_by_name("durations").is_some() {
                let (count, errors, durations) = (c.u64("count"), c.u64("errors"), c.bin("durations"));
                for (i, &e) in rows.iter().enumerate() {
                    let totals = &mut endpoints.list[e as usize].2;
                    add_durations(durations.value(i), totals)?;
                    totals.count += count.value(i);
                    totals.errors += errors.value(i);
                }
            } else {
                let (duration, status) = (c.i64("duration_ns").values(), c.i32("status").values());
                for ((&e, &ns), &status) in rows.iter().zip(duration.iter()).zip(status.iter()) {
                    endpoints.list[e as usize].2.add(ns, status == SpanStatus::Error.code());
                }
            }
            Ok(endpoints.list.len() as u64 * ENDPOINT_BYTES)
        })?;
    }
    Ok(query::Endpoints(
        endpoints.list.into_iter().map(|(service, operation, t)| ((service, operation), t.stats())).collect(),
    ))
}

/// Service and operation dictionaries of a batch larger than this together (a dictionary
/// holds a row group's distinct values) resolve endpoints per row instead of per key pair.
const MAX_KEY_PAIRS: usize = 1 << 16;

/// Accumulators per (service, operation), found through a 64-bit hash of both names (xxh3,
/// one shot each) and then compared by name: exact, and far cheaper than hashing two strings
/// with SipHash into nested maps.
#[derive(Default)]
struct Endpoints {
    slots: HashMap<u64, Vec<u32>, BuildHasherDefault<Prehashed>>,
    list: Vec<(String, String, SpanTotals)>,
    /// Per batch of dictionaries: the endpoint of each (service key, operation key) pair,
    /// `u32::MAX` until a row has it.
    pairs: Vec<u32>,
}

impl Endpoints {
    /// The endpoint of each of the `n` rows, into `out`. With both columns as dictionaries
    /// (segments), each pair of keys of the batch is looked up once, not each row.
    fn of_rows(&mut self, service: Strings<'_>, operation: Strings<'_>, n: usize, out: &mut Vec<u32>) {
        out.clear();
        if let (
            Strings::Dictionary { keys: service_keys, values: services },
            Strings::Dictionary { keys: operation_keys, values: operations },
        ) = (service, operation)
        {
            let width = operations.len();
            if services.len() * width <= MAX_KEY_PAIRS {
                self.pairs.clear();
                self.pairs.resize(services.len() * width, u32::MAX);
                for (&s, &o) in service_keys.iter().zip(operation_keys) {
                    let pair = s as usize * width + o as usize;
                    let mut e = self.pairs[pair];
                    if e == u32::MAX {
                        e = self.get(services.value(s as usize), operations.value(o as usize));
                        self.pairs[pair] = e;
                    }
                    out.push(e);
                }
                return;
            }
        }
        out.extend((0..n).map(|i| self.get(service.value(i), operation.value(i))));
    }

    fn get(&mut self, service: &str, operation: &str) -> u32 {
        let Self { slots, list, .. } = self;
        let h = xxh3_64(service.as_bytes()) ^ xxh3_64(operation.as_bytes()).rotate_left(17);
        let ids = slots.entry(h).or_default();
        match ids.iter().copied().find(|&i| list[i as usize].0 == service && list[i as usize].1 == operation) {
            Some(i) => i,
            None => {
                list.push((service.to_owned(), operation.to_owned(), SpanTotals::default()));
                ids.push(list.len() as u32 - 1);
                list.len() as u32 - 1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::rollup::{DAY_NS, HOUR_NS, MINUTE_NS};

    proptest::proptest! {
        /// The parts cover the range exactly, without overlap; each rollup part starts and ends
        /// on its buckets, and no whole day is left to hours, whole hour to minutes nor whole
        /// minute to spans.
        #[test]
        fn a_range_is_cut_into_days_hours_minutes_and_spans_that_cover_it_once(
            from in -3 * HOUR_NS..3 * HOUR_NS,
            len in proptest::prop_oneof![0..4 * HOUR_NS, 0..4 * DAY_NS],
            far in -(1i64 << 60)..(1i64 << 60),
        ) {
            let from = from + far / DAY_NS * DAY_NS;
            let to = from + len;
            let holds_whole = |a: i64, b: i64, width: i64| bucket_at_or_after(a, width).is_some_and(|s| s + width <= b);
            let mut parts = pieces(from, to);
            parts.sort_by_key(|&(_, a, _)| a);
            let mut at = from;
            for &(table, a, b) in &parts {
                proptest::prop_assert_eq!(a, at);
                proptest::prop_assert!(a < b);
                at = b;
                match table {
                    Table::SpanDayRollups => proptest::prop_assert!(a % DAY_NS == 0 && b % DAY_NS == 0),
                    Table::SpanHourRollups => {
                        proptest::prop_assert!(a % HOUR_NS == 0 && b % HOUR_NS == 0);
                        proptest::prop_assert!(!holds_whole(a, b, DAY_NS), "a whole day left to hours");
                    }
                    Table::SpanRollups => {
                        proptest::prop_assert!(a % MINUTE_NS == 0 && b % MINUTE_NS == 0);
                        proptest::prop_assert!(!holds_whole(a, b, HOUR_NS), "a whole hour left to minutes");
                    }
                    _ => proptest::prop_assert!(!holds_whole(a, b, MINUTE_NS), "a whole minute left to spans"),
                }
            }
            proptest::prop_assert_eq!(at, to);
        }
    }
}
