//! Raft log entries, log ids, votes, memberships and snapshot meta.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use openraft::{BasicNode, CommittedLeaderId, EntryPayload};
use prost::Message;
use sextant_proto::persist as pb;

use super::{batch_id_bytes, batch_id_from, decode_error, invalid, missing, LOG_ENTRY, LOG_ID, STATE_FILE, VOTE};
use crate::types::{Command, Entry, LogId, Membership as StoredMembership, NodeId, SnapshotMeta, Vote};

type Membership = openraft::Membership<NodeId, BasicNode>;

pub(super) fn log_id_to_pb(id: &LogId) -> pb::LogId {
    pb::LogId { term: id.leader_id.term, node_id: id.leader_id.node_id, index: id.index }
}

pub(super) fn log_id_from_pb(id: pb::LogId) -> LogId {
    LogId::new(CommittedLeaderId::new(id.term, id.node_id), id.index)
}

pub(super) fn vote_to_pb(v: &Vote) -> pb::Vote {
    pb::Vote { term: v.leader_id.term, node_id: v.leader_id.node_id, committed: v.committed }
}

pub(super) fn vote_from_pb(v: pb::Vote) -> Vote {
    if v.committed {
        Vote::new_committed(v.term, v.node_id)
    } else {
        Vote::new(v.term, v.node_id)
    }
}

pub(super) fn required_vote(v: Option<pb::Vote>, what: &str) -> io::Result<Vote> {
    v.map(vote_from_pb).ok_or_else(|| missing(what, "vote"))
}

fn membership_to_pb(m: &Membership) -> pb::Membership {
    pb::Membership {
        configs: m.get_joint_config().iter().map(|c| pb::NodeIds { ids: c.iter().copied().collect() }).collect(),
        nodes: m.nodes().map(|(id, n)| pb::Node { id: *id, addr: n.addr.clone() }).collect(),
    }
}

fn membership_from_pb(m: pb::Membership) -> Membership {
    let configs: Vec<BTreeSet<NodeId>> = m.configs.into_iter().map(|c| c.ids.into_iter().collect()).collect();
    let nodes: BTreeMap<NodeId, BasicNode> = m.nodes.into_iter().map(|n| (n.id, BasicNode { addr: n.addr })).collect();
    Membership::new(configs, nodes)
}

fn stored_membership_to_pb(m: &StoredMembership) -> pb::StoredMembership {
    pb::StoredMembership {
        log_id: m.log_id().as_ref().map(log_id_to_pb),
        membership: Some(membership_to_pb(m.membership())),
    }
}

fn stored_membership_from_pb(m: pb::StoredMembership) -> StoredMembership {
    StoredMembership::new(m.log_id.map(log_id_from_pb), m.membership.map(membership_from_pb).unwrap_or_default())
}

pub(super) fn snapshot_meta_to_pb(m: &SnapshotMeta) -> pb::SnapshotMeta {
    pb::SnapshotMeta {
        last_log_id: m.last_log_id.as_ref().map(log_id_to_pb),
        last_membership: Some(stored_membership_to_pb(&m.last_membership)),
        snapshot_id: m.snapshot_id.clone(),
    }
}

pub(super) fn snapshot_meta_from_pb(m: pb::SnapshotMeta) -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: m.last_log_id.map(log_id_from_pb),
        last_membership: m.last_membership.map(stored_membership_from_pb).unwrap_or_default(),
        snapshot_id: m.snapshot_id,
    }
}

fn command_to_pb(c: Command) -> io::Result<pb::Command> {
    use pb::command::Kind;
    let kind = match c {
        Command::Ingest { batch_id, payload } => {
            Kind::Ingest(pb::Ingest { batch_id: batch_id_bytes(batch_id), payload })
        }
        Command::Abort { batch_id } => Kind::Abort(pb::Abort { batch_id: batch_id_bytes(batch_id) }),
        Command::Meta(m) => Kind::Meta(serde_json::to_vec(&m).map_err(io::Error::other)?),
    };
    Ok(pb::Command { kind: Some(kind) })
}

fn command_from_pb(c: pb::Command) -> io::Result<Command> {
    use pb::command::Kind;
    Ok(match c.kind.ok_or_else(|| missing("command", "kind"))? {
        Kind::Ingest(i) => Command::Ingest { batch_id: batch_id_from(&i.batch_id)?, payload: i.payload },
        Kind::Abort(a) => Command::Abort { batch_id: batch_id_from(&a.batch_id)? },
        Kind::Meta(json) => {
            Command::Meta(serde_json::from_slice(&json).map_err(|e| invalid(format!("malformed meta command: {e}")))?)
        }
    })
}

/// Takes the entry apart (an ingest payload moves, it is not copied).
pub(super) fn entry_to_pb(e: Entry) -> io::Result<pb::Entry> {
    use pb::entry::Payload;
    let payload = match e.payload {
        EntryPayload::Blank => Payload::Blank(pb::Blank {}),
        EntryPayload::Membership(m) => Payload::Membership(membership_to_pb(&m)),
        EntryPayload::Normal(c) => Payload::Command(command_to_pb(c)?),
    };
    Ok(pb::Entry { log_id: Some(log_id_to_pb(&e.log_id)), payload: Some(payload) })
}

pub(super) fn entry_from_pb(e: pb::Entry) -> io::Result<Entry> {
    use pb::entry::Payload;
    let log_id = log_id_from_pb(e.log_id.ok_or_else(|| missing("log entry", "log_id"))?);
    let payload = match e.payload.ok_or_else(|| missing("log entry", "payload"))? {
        Payload::Blank(_) => EntryPayload::Blank,
        Payload::Membership(m) => EntryPayload::Membership(membership_from_pb(m)),
        Payload::Command(c) => EntryPayload::Normal(command_from_pb(c)?),
    };
    Ok(Entry { log_id, payload })
}

/// A log entry as stored: the format header, then a `persist.v1.Entry`.
#[cfg(test)]
pub(crate) fn encode_entry(e: &Entry) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_entry_into(e, &mut out)?;
    Ok(out)
}

/// A log entry as stored (the format header, then a `persist.v1.Entry`), appended to `out`.
pub(crate) fn encode_entry_into(e: &Entry, out: &mut Vec<u8>) -> io::Result<()> {
    let out = &mut *out;
    LOG_ENTRY.write_header(out);
    match &e.payload {
        EntryPayload::Normal(Command::Ingest { batch_id, payload }) => {
            encode_ingest_entry(&e.log_id, *batch_id, payload, out)
        }
        EntryPayload::Blank => {
            pb::Entry { log_id: Some(log_id_to_pb(&e.log_id)), payload: Some(pb::entry::Payload::Blank(pb::Blank {})) }
                .encode(out)
                .map_err(io::Error::other)?
        }
        EntryPayload::Membership(m) => pb::Entry {
            log_id: Some(log_id_to_pb(&e.log_id)),
            payload: Some(pb::entry::Payload::Membership(membership_to_pb(m))),
        }
        .encode(out)
        .map_err(io::Error::other)?,
        EntryPayload::Normal(c) => entry_to_pb(Entry { log_id: e.log_id, payload: EntryPayload::Normal(c.clone()) })?
            .encode(out)
            .map_err(io::Error::other)?,
    }
    Ok(())
}

/// The same bytes as encoding `persist.v1.Entry { log_id, command: { ingest: { .. } } }`, with
/// the payload (a whole sub-batch) written straight from the borrowed entry, not cloned first.
fn encode_ingest_entry(log_id: &LogId, batch_id: u128, payload: &[u8], out: &mut Vec<u8>) {
    const LOG_ID_KEY: u8 = 1 << 3 | 2; // Entry.log_id
    const COMMAND_KEY: u8 = 4 << 3 | 2; // Entry.command
    const INGEST_KEY: u8 = 1 << 3 | 2; // Command.ingest
    const BATCH_ID_KEY: u8 = 1 << 3 | 2; // Ingest.batch_id
    const PAYLOAD_KEY: u8 = 2 << 3 | 2; // Ingest.payload
    let payload_field =
        if payload.is_empty() { 0 } else { 1 + prost::length_delimiter_len(payload.len()) + payload.len() };
    let ingest_len = 2 + 16 + payload_field;
    let command_len = 1 + prost::length_delimiter_len(ingest_len) + ingest_len;
    out.reserve(32 + command_len);
    out.push(LOG_ID_KEY);
    log_id_to_pb(log_id).encode_length_delimited(out).expect("a Vec grows");
    out.push(COMMAND_KEY);
    prost::encode_length_delimiter(command_len, out).expect("a Vec grows");
    out.push(INGEST_KEY);
    prost::encode_length_delimiter(ingest_len, out).expect("a Vec grows");
    out.push(BATCH_ID_KEY);
    out.push(16);
    out.extend_from_slice(&batch_id.to_le_bytes());
    if !payload.is_empty() {
        out.push(PAYLOAD_KEY);
        prost::encode_length_delimiter(payload.len(), out).expect("a Vec grows");
        out.extend_from_slice(payload);
    }
}

/// An ingest payload is left in place: a slice of `bytes`.
pub(crate) fn decode_entry(bytes: bytes::Bytes) -> io::Result<Entry> {
    entry_from_pb(LOG_ENTRY.decode_shared(bytes, "log entry")?)
}

pub(crate) fn encode_log_id(id: &LogId) -> Vec<u8> {
    LOG_ID.encode(&log_id_to_pb(id))
}

pub(crate) fn decode_log_id(bytes: &[u8]) -> io::Result<LogId> {
    Ok(log_id_from_pb(LOG_ID.decode(bytes, "log id")?))
}

pub(crate) fn encode_vote(v: &Vote) -> Vec<u8> {
    VOTE.encode(&vote_to_pb(v))
}

pub(crate) fn decode_vote(bytes: &[u8]) -> io::Result<Vote> {
    Ok(vote_from_pb(VOTE.decode(bytes, "vote")?))
}

/// The head of a state snapshot file: the format header, then a length-delimited
/// `persist.v1.SnapshotMeta`. Whatever follows is the state's own.
pub(crate) fn encode_snapshot_meta(meta: &SnapshotMeta, out: &mut Vec<u8>) {
    STATE_FILE.write_header(out);
    snapshot_meta_to_pb(meta).encode_length_delimited(out).expect("a Vec grows");
}

/// Reads the head written by [`encode_snapshot_meta`]; returns the meta and the rest.
pub(crate) fn decode_snapshot_meta(bytes: &[u8]) -> io::Result<(SnapshotMeta, &[u8])> {
    let mut body = STATE_FILE.body(bytes)?;
    let meta = pb::SnapshotMeta::decode_length_delimited(&mut body).map_err(|e| decode_error("snapshot meta", e))?;
    Ok((snapshot_meta_from_pb(meta), body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(3, 2), index)
    }

    #[test]
    fn an_ingest_entry_is_encoded_as_the_message_would_be() {
        for payload in [vec![], vec![7u8; 3], vec![1u8; 300]] {
            let entry = Entry {
                log_id: log_id(9),
                payload: EntryPayload::Normal(Command::Ingest { batch_id: u128::MAX - 5, payload: payload.into() }),
            };
            let mut expected = Vec::new();
            LOG_ENTRY.write_header(&mut expected);
            entry_to_pb(entry.clone()).unwrap().encode(&mut expected).unwrap();
            let bytes = encode_entry(&entry).unwrap();
            assert_eq!(bytes, expected);
            assert_eq!(decode_entry(bytes.into()).unwrap(), entry);
        }
    }

    #[test]
    fn every_entry_kind_round_trips() {
        let membership = Membership::new(
            vec![BTreeSet::from([1, 2]), BTreeSet::from([2, 3])],
            BTreeMap::from([
                (1, BasicNode::new("a:1")),
                (2, BasicNode::new("b:2")),
                (3, BasicNode::new("c:3")),
                (4, BasicNode::new("d:4")),
            ]),
        );
        let meta = sextant_model::meta::MetaCommand::RouterLeft { router_id: "r1".into() };
        for payload in [
            EntryPayload::Blank,
            EntryPayload::Membership(membership),
            EntryPayload::Normal(Command::Abort { batch_id: 42 }),
            EntryPayload::Normal(Command::Meta(meta)),
        ] {
            let entry = Entry { log_id: log_id(4), payload };
            assert_eq!(decode_entry(encode_entry(&entry).unwrap().into()).unwrap(), entry);
        }
        let vote = Vote::new_committed(5, 1);
        assert_eq!(decode_vote(&encode_vote(&vote)).unwrap(), vote);
        assert_eq!(decode_log_id(&encode_log_id(&log_id(8))).unwrap(), log_id(8));
        assert!(decode_vote(&encode_log_id(&log_id(8))).is_err(), "a log id is not a vote");
    }
}
