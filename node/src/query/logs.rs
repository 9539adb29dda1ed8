//! Log search: the token index prunes row groups, the scan checks the lines, and the shard
//! answers its newest `limit` matches after the cursor.

use sextant_model::ingest::parse_level;
use sextant_model::query::{KeyedLog, LogKey, LogList, LogSearchPlan, ShardQuery};
use sextant_model::row::{LogLevel, LogRecord};
use sextant_model::text::LogQuery;
use xxhash_rust::xxh3::Xxh3;

use super::{Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::attribute::decode_stored;
use crate::segment::table::Cols;
use crate::segment::{Filter, Scan, Table};
use crate::shard::ScanJob;

impl QueryKind for LogSearchPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let (plan, job) = (self.clone(), shard.scan(scan(req, self)?));
        Ok(Box::new(move |req, budget| Ok(run(req, &plan, job, budget)?.into())))
    }
}

pub fn scan(req: &ShardQuery, plan: &LogSearchPlan) -> Result<Scan, QueryError> {
    let query = LogQuery::parse(&plan.query).map_err(|e| QueryError::BadPlan(e.to_string()))?;
    let levels = plan.levels.iter().map(|l| l.code()).collect();
    let mut filter = Filter { services: plan.services.clone(), levels, ..Default::default() };
    // `field:value` terms the row mask does not evaluate itself are pushed down here when a
    // single value makes that exact; `run` checks every one of them on the rows anyway.
    if filter.services.is_empty() && query.services.len() == 1 {
        filter.services = query.services.clone();
    }
    filter.trace_id = query.trace_id.clone();
    filter.log_query = Some(query);
    // A page after a cursor holds lines at or before the cursor's time: later row groups
    // are not read (paging deep into a long range reads each line about once).
    let to_ns = match &plan.before {
        Some(b) => req.to_unix_nanos.min(b.unix_nanos.saturating_add(1)),
        None => req.to_unix_nanos,
    };
    Ok(Scan {
        table: Table::Logs,
        project: req.project_id.clone(),
        from_ns: req.from_unix_nanos,
        to_ns,
        filter,
        columns: Vec::new(),
        dictionaries: Vec::new(),
        stored_ids: false,
    })
}

pub fn run(req: &ShardQuery, plan: &LogSearchPlan, job: ScanJob, budget: &mut Budget) -> Result<LogList, QueryError> {
    let query = LogQuery::parse(&plan.query).map_err(|e| QueryError::BadPlan(e.to_string()))?;
    let mut levels = Vec::new();
    for l in &query.levels {
        // An unknown level in `q` matches nothing.
        levels.push(parse_level(l).map_or(-1, LogLevel::code));
    }
    // Row groups newest first: once a page of lines newer than everything left is kept, the
    // scan stops (a common term reads a few row groups, not every line of the range).
    let top = std::cell::RefCell::new(TopLines::new(plan.limit as usize, req.group, plan.before.as_ref()));
    let enough = |t: i64| top.borrow().rejects(t);
    job.run_newest_first(enough, |rb| {
        budget.take(rb.num_rows())?;
        let mut top = top.borrow_mut();
        let c = Cols(&rb);
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
            // Older than a full page: not hashed, not copied.
            if top.rejects(time.value(i)) {
                continue;
            }
            let mut h = Xxh3::new();
            for part in [service.value(i), message.value(i), trace.value(i), span.value(i)] {
                h.update(part.as_bytes());
                h.update(&[0]);
            }
            h.update(&level.value(i).to_le_bytes());
            h.update(attrs.value(i));
            top.offer(time.value(i), h.digest(), || LogRecord {
                unix_nanos: time.value(i),
                level: LogLevel::from_code(level.value(i)),
                service: service.value(i).to_owned(),
                message: message.value(i).to_owned(),
                trace_id: trace.value(i).to_owned(),
                span_id: span.value(i).to_owned(),
                attributes: decode_stored(attrs.value(i)).into_iter().map(Into::into).collect(),
            });
        }
        Ok::<(), QueryError>(())
    })?;
    let top = top.into_inner();
    Ok(LogList(top.into_page()))
}

/// The newest `limit` lines after the cursor, kept while scanning: identical lines (same
/// time and content hash) share one entry with a count, and a line is decoded only when it
/// can still make the page, so a common term costs a counter per match, not a copy.
struct TopLines<'a> {
    limit: usize,
    group: u64,
    before: Option<&'a LogKey>,
    /// (time, hash) → (copies, the line).
    entries: std::collections::BTreeMap<(i64, u64), (u32, LogRecord)>,
    /// Lines of `entries` after the cursor.
    visible: usize,
}

impl<'a> TopLines<'a> {
    fn new(limit: usize, group: u64, before: Option<&'a LogKey>) -> Self {
        Self { limit, group, before, entries: Default::default(), visible: 0 }
    }

    /// Copies of (t, h) at ranks the cursor already returned.
    fn hidden(&self, t: i64, h: u64) -> u32 {
        match self.before {
            Some(b) if (b.unix_nanos, b.group, b.content_hash) == (t, self.group, h) => b.duplicate + 1,
            _ => 0,
        }
    }

    /// Whether every line at time `t` or before is out of the page: the page is full and
    /// its oldest line is newer than `t`.
    fn rejects(&self, t: i64) -> bool {
        self.visible >= self.limit && self.entries.first_key_value().is_some_and(|(&(oldest, _), _)| t < oldest)
    }

    fn visible_of(&self, t: i64, h: u64, copies: u32) -> usize {
        copies.saturating_sub(self.hidden(t, h)) as usize
    }

    fn offer(&mut self, t: i64, h: u64, line: impl FnOnce() -> LogRecord) {
        // Newer than the cursor's line: on an earlier page.
        if self.before.is_some_and(|b| (t, self.group, h) > (b.unix_nanos, b.group, b.content_hash)) {
            return;
        }
        if let Some((copies, _)) = self.entries.get(&(t, h)) {
            let copies = *copies;
            let grown = self.visible_of(t, h, copies + 1) - self.visible_of(t, h, copies);
            self.entries.get_mut(&(t, h)).expect("present").0 = copies + 1;
            self.visible += grown;
        } else {
            let full = self.visible >= self.limit;
            if full && self.entries.first_key_value().is_some_and(|(oldest, _)| (t, h) < *oldest) {
                return;
            }
            self.entries.insert((t, h), (1, line()));
            self.visible += self.visible_of(t, h, 1);
        }
        // Drop the oldest entries the page no longer needs.
        while let Some((&(ot, oh), &(copies, _))) = self.entries.first_key_value() {
            let v = self.visible_of(ot, oh, copies);
            if self.visible - v < self.limit {
                break;
            }
            self.entries.pop_first();
            self.visible -= v;
        }
    }

    fn into_page(self) -> Vec<KeyedLog> {
        let mut out = Vec::new();
        for (&(t, h), (copies, line)) in self.entries.iter().rev() {
            for duplicate in self.hidden(t, h)..*copies {
                if out.len() >= self.limit {
                    return out;
                }
                let key = LogKey { unix_nanos: t, group: self.group, content_hash: h, duplicate };
                out.push(KeyedLog { key, log: line.clone() });
            }
        }
        out
    }
}
