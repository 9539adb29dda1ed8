//! The segment manifest of a data shard.

use std::io;

use prost::Message;
use sextant_proto::persist as pb;

use super::archive::{file_from_pb, file_to_pb};
use super::entry::{snapshot_meta_from_pb, snapshot_meta_to_pb};
use super::{decode_error, invalid, missing, pack_batch_ids, unpack_batch_ids, MANIFEST};
use crate::segment::{Dedup, Manifest, SegmentMeta, Table};
use crate::shard::usage::{BatchUsage, Usage};
use sextant_model::usage::UsageCounts;

fn table_to_pb(t: Table) -> pb::Table {
    match t {
        Table::Spans => pb::Table::Spans,
        Table::TraceSummaries => pb::Table::TraceSummaries,
        Table::SpanRollups => pb::Table::SpanRollups,
        Table::SpanHourRollups => pb::Table::SpanHourRollups,
        Table::SpanDayRollups => pb::Table::SpanDayRollups,
        Table::EventRollups => pb::Table::EventRollups,
        Table::HostRollups => pb::Table::HostRollups,
        Table::Logs => pb::Table::Logs,
        Table::HostMetrics => pb::Table::HostMetrics,
        Table::Events => pb::Table::Events,
        Table::ReplayEvents => pb::Table::ReplayEvents,
    }
}

fn table_from_pb(t: i32) -> io::Result<Table> {
    Ok(match pb::Table::try_from(t).map_err(|_| invalid(format!("unknown segment table {t} in the manifest")))? {
        pb::Table::Spans => Table::Spans,
        pb::Table::TraceSummaries => Table::TraceSummaries,
        pb::Table::SpanRollups => Table::SpanRollups,
        pb::Table::SpanHourRollups => Table::SpanHourRollups,
        pb::Table::SpanDayRollups => Table::SpanDayRollups,
        pb::Table::EventRollups => Table::EventRollups,
        pb::Table::HostRollups => Table::HostRollups,
        pb::Table::Logs => Table::Logs,
        pb::Table::HostMetrics => Table::HostMetrics,
        pb::Table::Events => Table::Events,
        pb::Table::ReplayEvents => Table::ReplayEvents,
        pb::Table::Unspecified => return Err(invalid("a segment without a table in the manifest")),
    })
}

fn segment_to_pb(s: &SegmentMeta) -> pb::SegmentMeta {
    pb::SegmentMeta {
        id: s.id,
        table: table_to_pb(s.table).into(),
        bucket_start: s.hour,
        rows: s.rows,
        min_ns: s.min_ns,
        max_ns: s.max_ns,
        file: Some(file_to_pb(&s.file)),
        summarizes: s.summarizes,
        covers: s.covers.clone(),
        projects: s.projects.clone(),
        draft: s.draft,
    }
}

fn segment_from_pb(s: pb::SegmentMeta) -> io::Result<SegmentMeta> {
    Ok(SegmentMeta {
        id: s.id,
        table: table_from_pb(s.table)?,
        hour: s.bucket_start,
        rows: s.rows,
        min_ns: s.min_ns,
        max_ns: s.max_ns,
        file: file_from_pb(s.file.ok_or_else(|| missing("manifest", "segment file"))?),
        summarizes: s.summarizes,
        covers: s.covers,
        projects: s.projects,
        draft: s.draft,
    })
}

fn usage_to_pb(project_id: &str, month: u32, c: &UsageCounts) -> pb::UsageCount {
    pb::UsageCount {
        project_id: project_id.to_owned(),
        month,
        bytes: c.bytes,
        spans: c.spans,
        logs: c.logs,
        metric_samples: c.metric_samples,
        events: c.events,
        replay_events: c.replay_events,
    }
}

fn usage_from_pb(u: pb::UsageCount) -> (String, u32, UsageCounts) {
    let counts = UsageCounts {
        bytes: u.bytes,
        spans: u.spans,
        logs: u.logs,
        metric_samples: u.metric_samples,
        events: u.events,
        replay_events: u.replay_events,
    };
    (u.project_id, u.month, counts)
}

/// The format header, then a `persist.v1.Manifest`.
pub(crate) fn encode_manifest(m: &Manifest) -> Vec<u8> {
    let msg = pb::Manifest {
        checkpoint: m.checkpoint.as_ref().map(snapshot_meta_to_pb),
        segments: m.segments.iter().map(segment_to_pb).collect(),
        next_segment: m.next_segment,
        applied_batches: pack_batch_ids(m.dedup.applied_in_order()),
        aborted_batches: pack_batch_ids(m.dedup.aborted_in_order()),
        tombstones: pack_batch_ids(m.tombstones.iter().copied()),
        usage: m.usage.totals.iter().map(|((p, month), c)| usage_to_pb(p, *month, c)).collect(),
        recent_batch_usage: m
            .usage
            .recent()
            .map(|b| pb::BatchUsage {
                batch_id: pack_batch_ids([b.batch_id]),
                usage: Some(usage_to_pb(&b.project_id, b.month, &b.counts)),
            })
            .collect(),
    };
    let mut out = Vec::with_capacity(super::HEADER_LEN + msg.encoded_len() + 8);
    MANIFEST.write_header(&mut out);
    msg.encode(&mut out).expect("a Vec grows");
    out
}

pub(crate) fn decode_manifest(bytes: &[u8]) -> io::Result<Manifest> {
    let m = pb::Manifest::decode(MANIFEST.body(bytes)?).map_err(|e| decode_error("manifest", e))?;
    Ok(Manifest {
        checkpoint: m.checkpoint.map(snapshot_meta_from_pb),
        segments: m.segments.into_iter().map(segment_from_pb).collect::<io::Result<_>>()?,
        next_segment: m.next_segment,
        dedup: Dedup::from_lists(unpack_batch_ids(&m.applied_batches)?, unpack_batch_ids(&m.aborted_batches)?),
        tombstones: unpack_batch_ids(&m.tombstones)?.into_iter().collect(),
        usage: Usage::from_parts(
            m.usage.into_iter().map(usage_from_pb).map(|(p, month, c)| ((p, month), c)).collect(),
            m.recent_batch_usage
                .into_iter()
                .map(|b| {
                    let [batch_id] = unpack_batch_ids(&b.batch_id)?[..] else {
                        return Err(invalid("a batch usage without one batch id in the manifest"));
                    };
                    let (project_id, month, counts) =
                        usage_from_pb(b.usage.ok_or_else(|| missing("manifest", "batch usage"))?);
                    Ok(BatchUsage { batch_id, project_id, month, counts })
                })
                .collect::<io::Result<_>>()?,
        ),
    })
}
