//! Log search: the token index prunes row groups, the scan checks the lines, and the shard
//! answers its newest `limit` matches after the cursor.

use sextant_model::ingest::parse_level;
use sextant_model::text::LogQuery;
use sextant_proto::{KeyedLog, LogKey, LogRecord, LogSearchPartial, LogSearchPlan, QueryRequest};
use xxhash_rust::xxh3::Xxh3;

use super::{each_batch, Budget, QueryError};
use crate::segment::table::{decode_attributes, Cols};
use crate::segment::{Filter, Scan, Table};
use crate::shard::ScanJob;

pub fn scan(req: &QueryRequest, plan: &LogSearchPlan) -> Result<Scan, QueryError> {
    let query = LogQuery::parse(&plan.query).map_err(|e| QueryError::BadPlan(e.to_string()))?;
    let mut filter = Filter { services: plan.services.clone(), levels: plan.levels.clone(), ..Default::default() };
    // `field:value` terms the row mask does not evaluate itself are pushed down here when a
    // single value makes that exact; `run` checks every one of them on the rows anyway.
    if filter.services.is_empty() && query.services.len() == 1 {
        filter.services = query.services.clone();
    }
    filter.trace_id = query.trace_id.clone();
    filter.log_query = Some(query);
    Ok(Scan {
        table: Table::Logs,
        project: req.project_id.clone(),
        from_ns: req.from_unix_nanos,
        to_ns: req.to_unix_nanos,
        filter,
        columns: Vec::new(),
    })
}

/// The key's total order, newest first: (time, group, hash, duplicate) compared descending.
fn order(k: &LogKey) -> (i64, u64, u64, std::cmp::Reverse<u32>) {
    (k.unix_nanos, k.group, k.content_hash, std::cmp::Reverse(k.duplicate))
}

pub fn run(
    req: &QueryRequest,
    plan: &LogSearchPlan,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<LogSearchPartial, QueryError> {
    let query = LogQuery::parse(&plan.query).map_err(|e| QueryError::BadPlan(e.to_string()))?;
    let mut levels = Vec::new();
    for l in &query.levels {
        // An unknown level in `q` matches nothing.
        levels.push(parse_level(l).map_or(-1, |l| l as i32));
    }
    let mut rows: Vec<(i64, u64, LogRecord)> = Vec::new();
    each_batch(job, budget, |rb| {
        let c = Cols(rb);
        let (time, level, service, message, trace, span, attrs) = (
            c.i64("time_ns"),
            c.i32("level"),
            c.str("service"),
            c.str("message"),
            c.str("trace_id"),
            c.str("span_id"),
            c.bin("attributes"),
        );
        for i in 0..rb.num_rows() {
            if !query.services.iter().all(|s| s == service.value(i)) || !levels.iter().all(|l| *l == level.value(i)) {
                continue;
            }
            let mut h = Xxh3::new();
            for part in [service.value(i), message.value(i), trace.value(i), span.value(i)] {
                h.update(part.as_bytes());
                h.update(&[0]);
            }
            h.update(&level.value(i).to_le_bytes());
            h.update(attrs.value(i));
            rows.push((
                time.value(i),
                h.digest(),
                LogRecord {
                    unix_nanos: time.value(i),
                    level: level.value(i),
                    service: service.value(i).to_owned(),
                    message: message.value(i).to_owned(),
                    trace_id: trace.value(i).to_owned(),
                    span_id: span.value(i).to_owned(),
                    attributes: decode_attributes(attrs.value(i)),
                },
            ));
        }
        Ok(())
    })?;
    rows.sort_by(|a, b| (b.0, b.1).cmp(&(a.0, a.1)));
    let mut logs = Vec::new();
    let mut previous: Option<(i64, u64)> = None;
    let mut duplicate = 0;
    for (t, h, log) in rows {
        duplicate = if previous == Some((t, h)) { duplicate + 1 } else { 0 };
        previous = Some((t, h));
        let key = LogKey { unix_nanos: t, group: req.group, content_hash: h, duplicate };
        if plan.before.as_ref().is_some_and(|b| order(&key) >= order(b)) {
            continue;
        }
        logs.push(KeyedLog { key: Some(key), log: Some(log) });
        if logs.len() >= plan.limit as usize {
            break;
        }
    }
    Ok(LogSearchPartial { logs })
}
