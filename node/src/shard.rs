//! The first storage format of a data shard: applied batches kept in memory and written whole
//! into snapshots. It sits behind [`ShardStore`], which the segment engine will implement.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::sync::Arc;

use prost::Message;
use sextant_proto::{ShardBatch, Span};

use crate::state_machine::GroupState;
use crate::types::{Command, CommandResponse};

/// Queries a shard answers, whatever its storage format.
pub trait ShardStore: GroupState {
    /// All spans of one trace of one project.
    fn trace(&self, project_id: &str, trace_id: &str) -> Vec<Span>;
    fn row_count(&self) -> u64;
}

/// How many aborted batch ids a shard remembers, so a late retry of one is refused.
const ABORTED_MEMORY: usize = 100_000;

struct Chunk {
    batch_id: u128,
    batch: ShardBatch,
}

#[derive(Default)]
pub struct MemShard {
    /// Applied batches in apply order. Shared with snapshot writers.
    chunks: Vec<Arc<Chunk>>,
    /// batch id -> position in `chunks` (None once aborted).
    by_batch: HashMap<u128, usize>,
    aborted: HashSet<u128>,
    aborted_order: VecDeque<u128>,
    /// (project, trace id) -> (chunk, span index).
    traces: HashMap<(String, String), Vec<(u32, u32)>>,
    rows: u64,
}

impl MemShard {
    fn push(&mut self, chunk: Chunk) -> u64 {
        let pos = self.chunks.len();
        for (i, s) in chunk.batch.spans.iter().enumerate() {
            self.traces
                .entry((chunk.batch.project_id.clone(), s.trace_id.clone()))
                .or_default()
                .push((pos as u32, i as u32));
        }
        let rows = (chunk.batch.spans.len() + chunk.batch.logs.len() + chunk.batch.host_metrics.len()) as u64;
        self.rows += rows;
        self.by_batch.insert(chunk.batch_id, pos);
        self.chunks.push(Arc::new(chunk));
        rows
    }

    fn remember_abort(&mut self, batch_id: u128) {
        if self.aborted.insert(batch_id) {
            self.aborted_order.push_back(batch_id);
            if self.aborted_order.len() > ABORTED_MEMORY {
                if let Some(old) = self.aborted_order.pop_front() {
                    self.aborted.remove(&old);
                }
            }
        }
    }

    /// Removes an applied batch; rebuilding the trace index is fine for this rare path.
    fn remove(&mut self, batch_id: u128) {
        let Some(pos) = self.by_batch.remove(&batch_id) else {
            return;
        };
        let chunk = self.chunks.remove(pos);
        self.rows -= (chunk.batch.spans.len() + chunk.batch.logs.len() + chunk.batch.host_metrics.len()) as u64;
        let chunks = std::mem::take(&mut self.chunks);
        let (aborted, order) = (std::mem::take(&mut self.aborted), std::mem::take(&mut self.aborted_order));
        *self = MemShard { aborted, aborted_order: order, ..Default::default() };
        for c in chunks {
            self.push(Arc::try_unwrap(c).unwrap_or_else(|c| Chunk { batch_id: c.batch_id, batch: c.batch.clone() }));
        }
    }
}

impl GroupState for MemShard {
    fn apply(&mut self, _index: u64, command: Command) -> CommandResponse {
        match command {
            Command::Ingest { batch_id, payload } => {
                if self.aborted.contains(&batch_id) {
                    return CommandResponse::Refused;
                }
                if self.by_batch.contains_key(&batch_id) {
                    return CommandResponse::Ingested { duplicate: true, rows: 0 };
                }
                match ShardBatch::decode(payload.as_slice()) {
                    Ok(batch) => {
                        CommandResponse::Ingested { duplicate: false, rows: self.push(Chunk { batch_id, batch }) }
                    }
                    Err(e) => CommandResponse::Rejected(format!("undecodable batch: {e}")),
                }
            }
            Command::Abort { batch_id } => {
                self.remember_abort(batch_id);
                self.remove(batch_id);
                CommandResponse::Aborted
            }
            Command::Meta(_) => CommandResponse::Rejected("meta command sent to a data shard".into()),
        }
    }

    fn snapshot_writer(&self) -> Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync> {
        let chunks = self.chunks.clone();
        let aborted: Vec<u128> = self.aborted_order.iter().copied().collect();
        Box::new(move |w: &mut dyn Write| {
            w.write_all(&(aborted.len() as u64).to_le_bytes())?;
            for id in aborted {
                w.write_all(&id.to_le_bytes())?;
            }
            w.write_all(&(chunks.len() as u64).to_le_bytes())?;
            let mut buf = Vec::new();
            for c in chunks {
                buf.clear();
                c.batch.encode(&mut buf).map_err(io::Error::other)?;
                w.write_all(&c.batch_id.to_le_bytes())?;
                w.write_all(&(buf.len() as u64).to_le_bytes())?;
                w.write_all(&buf)?;
            }
            Ok(())
        })
    }

    fn restore(&mut self, input: &mut dyn Read) -> io::Result<()> {
        fn u64_of(r: &mut dyn Read) -> io::Result<u64> {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            Ok(u64::from_le_bytes(b))
        }
        fn u128_of(r: &mut dyn Read) -> io::Result<u128> {
            let mut b = [0u8; 16];
            r.read_exact(&mut b)?;
            Ok(u128::from_le_bytes(b))
        }
        let mut fresh = MemShard::default();
        for _ in 0..u64_of(input)? {
            fresh.remember_abort(u128_of(input)?);
        }
        let mut buf = Vec::new();
        for _ in 0..u64_of(input)? {
            let batch_id = u128_of(input)?;
            let len = u64_of(input)? as usize;
            buf.resize(len, 0);
            input.read_exact(&mut buf)?;
            let batch = ShardBatch::decode(buf.as_slice()).map_err(io::Error::other)?;
            fresh.push(Chunk { batch_id, batch });
        }
        *self = fresh;
        Ok(())
    }
}

impl ShardStore for MemShard {
    fn trace(&self, project_id: &str, trace_id: &str) -> Vec<Span> {
        self.traces
            .get(&(project_id.to_owned(), trace_id.to_owned()))
            .map(|locs| locs.iter().map(|&(c, i)| self.chunks[c as usize].batch.spans[i as usize].clone()).collect())
            .unwrap_or_default()
    }

    fn row_count(&self) -> u64 {
        self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(project: &str, trace: &str, n: usize) -> Vec<u8> {
        let spans =
            (0..n).map(|i| Span { trace_id: trace.into(), span_id: format!("s{i}"), ..Default::default() }).collect();
        ShardBatch { project_id: project.into(), spans, ..Default::default() }.encode_to_vec()
    }

    #[test]
    fn retried_batch_is_applied_once_and_abort_wins_over_late_arrival() {
        let mut s = MemShard::default();
        let r = s.apply(1, Command::Ingest { batch_id: 7, payload: batch("p", "t", 3) });
        assert_eq!(r, CommandResponse::Ingested { duplicate: false, rows: 3 });
        let r = s.apply(2, Command::Ingest { batch_id: 7, payload: batch("p", "t", 3) });
        assert_eq!(r, CommandResponse::Ingested { duplicate: true, rows: 0 });
        assert_eq!(s.trace("p", "t").len(), 3);
        assert!(s.trace("other-project", "t").is_empty());

        s.apply(3, Command::Abort { batch_id: 9 });
        assert_eq!(s.apply(4, Command::Ingest { batch_id: 9, payload: batch("p", "u", 1) }), CommandResponse::Refused);
        s.apply(5, Command::Abort { batch_id: 7 });
        assert!(s.trace("p", "t").is_empty());
        assert_eq!(s.row_count(), 0);
    }

    #[test]
    fn snapshot_round_trip_keeps_rows_dedup_and_aborts() {
        let mut s = MemShard::default();
        s.apply(1, Command::Ingest { batch_id: 1, payload: batch("p", "t", 2) });
        s.apply(2, Command::Ingest { batch_id: 2, payload: batch("p", "t2", 1) });
        s.apply(3, Command::Abort { batch_id: 3 });
        let mut bytes = Vec::new();
        (s.snapshot_writer())(&mut bytes).unwrap();
        let mut r = MemShard::default();
        r.restore(&mut bytes.as_slice()).unwrap();
        assert_eq!(r.trace("p", "t"), s.trace("p", "t"));
        assert_eq!(r.row_count(), 3);
        assert_eq!(
            r.apply(4, Command::Ingest { batch_id: 2, payload: batch("p", "t2", 1) }),
            CommandResponse::Ingested { duplicate: true, rows: 0 }
        );
        assert_eq!(r.apply(5, Command::Ingest { batch_id: 3, payload: batch("p", "t3", 1) }), CommandResponse::Refused);
    }
}
