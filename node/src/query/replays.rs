//! Session recordings: the sessions of a time range (one summary per session), and one
//! session's rrweb events in timestamp order for a player.

use std::collections::HashMap;

use sextant_model::query::{ReplayEvents, ReplayEventsPlan, ReplayListPlan, ReplaySession, ReplaySessions, ShardQuery};
use sextant_model::row::ReplayEvent;

use super::{each_batch_holding, scan_of, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::{from_record_batch, Cols};
use crate::segment::{Filter, Row, Table};
use crate::shard::ScanJob;

impl QueryKind for ReplayListPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let distinct_id = (!self.distinct_id.is_empty()).then(|| self.distinct_id.clone());
        let job = shard.scan(scan_of(
            req,
            Table::ReplayEvents,
            Filter { distinct_id, ..Default::default() },
            &["session_id", "distinct_id", "time_ns", "data"],
            &[],
        ));
        Ok(Box::new(move |_, budget| Ok(sessions(job, budget)?.into())))
    }
}

impl QueryKind for ReplayEventsPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        if self.session_id.is_empty() {
            return Err(QueryError::BadPlan("a session id is required".into()));
        }
        let filter = Filter { session_id: Some(self.session_id.clone()), ..Default::default() };
        let job = shard.scan(scan_of(req, Table::ReplayEvents, filter, &[], &[]));
        Ok(Box::new(move |_, budget| Ok(events(job, budget)?.into())))
    }
}

/// Memory of a session's summary while listing: its ids twice and its counters.
const SESSION_BYTES: u64 = 256;

pub fn sessions(job: ScanJob, budget: &mut Budget) -> Result<ReplaySessions, QueryError> {
    let mut sessions: HashMap<String, ReplaySession> = HashMap::new();
    each_batch_holding(job, budget, |rb| {
        let c = Cols(rb);
        let (ids, users, times, data) = (c.str("session_id"), c.str("distinct_id"), c.i64("time_ns"), c.str("data"));
        for i in 0..rb.num_rows() {
            let t = times.value(i);
            let s = sessions.entry(ids.value(i).to_owned()).or_insert_with(|| ReplaySession {
                session_id: ids.value(i).to_owned(),
                start_unix_nanos: t,
                end_unix_nanos: t,
                ..Default::default()
            });
            if s.distinct_id.is_empty() {
                s.distinct_id = users.value(i).to_owned();
            }
            s.start_unix_nanos = s.start_unix_nanos.min(t);
            s.end_unix_nanos = s.end_unix_nanos.max(t);
            s.event_count += 1;
            s.size_bytes += data.value(i).len() as u64;
        }
        Ok(sessions.len() as u64 * SESSION_BYTES)
    })?;
    Ok(ReplaySessions(sessions.into_values().collect()))
}

pub fn events(job: ScanJob, budget: &mut Budget) -> Result<ReplayEvents, QueryError> {
    let mut events: Vec<ReplayEvent> = Vec::new();
    let mut held = 0u64;
    each_batch_holding(job, budget, |rb| {
        let start = events.len();
        events.extend(from_record_batch(Table::ReplayEvents, rb).into_iter().filter_map(|(_, row, _)| match row {
            Row::Replay(e) => Some(e.into()),
            _ => None,
        }));
        held += events[start..].iter().map(|e| 128 + e.data_json.len() as u64).sum::<u64>();
        Ok(held)
    })?;
    // A stable sort: events of one request with equal timestamps keep the order they came in.
    events.sort_by_key(|e| e.unix_nanos);
    Ok(ReplayEvents(events))
}
