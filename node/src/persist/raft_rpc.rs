//! openraft's RPCs between nodes (AppendEntries, Vote, InstallSnapshot), inside the bodies of
//! the `Raft` gRPC service. Each body starts with the format header, so that a node of a
//! release with another format is refused clearly.

use std::io;

use openraft::error::{Fatal, InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::SnapshotSegmentId;
use sextant_proto::persist as pb;

use super::entry::{
    entry_from_pb, entry_to_pb, log_id_from_pb, log_id_to_pb, required_vote, snapshot_meta_from_pb,
    snapshot_meta_to_pb, vote_from_pb, vote_to_pb,
};
use super::{missing, Format};
use crate::types::{io_err, NodeId, TypeConfig};

const RAFT_RPC: Format = Format { magic: *b"SXRP", version: 1, what: "Raft RPC" };

fn fatal_to_pb(f: &Fatal<NodeId>) -> pb::raft_error::Kind {
    use pb::raft_error::Kind;
    match f {
        Fatal::StorageError(e) => Kind::Storage(e.to_string()),
        Fatal::Panicked => Kind::Panicked(pb::Blank {}),
        Fatal::Stopped => Kind::Stopped(pb::Blank {}),
    }
}

/// The fatal error of a reply; `None` for a kind that is not one.
fn fatal_from_pb(kind: &pb::raft_error::Kind) -> Option<Fatal<NodeId>> {
    use pb::raft_error::Kind;
    Some(match kind {
        Kind::Storage(msg) => Fatal::StorageError(io_err(format!("on the remote node: {msg}"))),
        Kind::Panicked(_) => Fatal::Panicked,
        Kind::Stopped(_) => Fatal::Stopped,
        Kind::SnapshotMismatch(_) => return None,
    })
}

fn error_to_pb(e: &RaftError<NodeId>) -> pb::RaftError {
    let kind = match e {
        RaftError::APIError(never) => match *never {},
        RaftError::Fatal(f) => fatal_to_pb(f),
    };
    pb::RaftError { kind: Some(kind) }
}

fn error_from_pb(e: pb::RaftError, what: &str) -> io::Result<RaftError<NodeId>> {
    let kind = e.kind.ok_or_else(|| missing(what, "error.kind"))?;
    fatal_from_pb(&kind).map(RaftError::Fatal).ok_or_else(|| missing(what, "a fatal error"))
}

fn segment_to_pb(s: &SnapshotSegmentId) -> pb::SnapshotSegmentId {
    pb::SnapshotSegmentId { id: s.id.clone(), offset: s.offset }
}

fn segment_from_pb(s: Option<pb::SnapshotSegmentId>) -> SnapshotSegmentId {
    let s = s.unwrap_or_default();
    SnapshotSegmentId { id: s.id, offset: s.offset }
}

fn snapshot_error_to_pb(e: &RaftError<NodeId, InstallSnapshotError>) -> pb::RaftError {
    use pb::raft_error::Kind;
    let kind = match e {
        RaftError::APIError(InstallSnapshotError::SnapshotMismatch(m)) => {
            Kind::SnapshotMismatch(pb::SnapshotMismatch {
                expect: Some(segment_to_pb(&m.expect)),
                got: Some(segment_to_pb(&m.got)),
            })
        }
        RaftError::Fatal(f) => fatal_to_pb(f),
    };
    pb::RaftError { kind: Some(kind) }
}

fn snapshot_error_from_pb(e: pb::RaftError) -> io::Result<RaftError<NodeId, InstallSnapshotError>> {
    let kind = e.kind.ok_or_else(|| missing("install-snapshot reply", "error.kind"))?;
    if let pb::raft_error::Kind::SnapshotMismatch(m) = kind {
        let mismatch = SnapshotMismatch { expect: segment_from_pb(m.expect), got: segment_from_pb(m.got) };
        return Ok(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(mismatch)));
    }
    Ok(RaftError::Fatal(fatal_from_pb(&kind).expect("every other kind is fatal")))
}

pub(crate) fn encode_append_request(req: AppendEntriesRequest<TypeConfig>) -> io::Result<Vec<u8>> {
    Ok(RAFT_RPC.encode(&pb::AppendEntriesRequest {
        vote: Some(vote_to_pb(&req.vote)),
        prev_log_id: req.prev_log_id.as_ref().map(log_id_to_pb),
        entries: req.entries.into_iter().map(entry_to_pb).collect::<io::Result<_>>()?,
        leader_commit: req.leader_commit.as_ref().map(log_id_to_pb),
    }))
}

pub(crate) fn decode_append_request(bytes: &[u8]) -> io::Result<AppendEntriesRequest<TypeConfig>> {
    const WHAT: &str = "append-entries request";
    let m: pb::AppendEntriesRequest = RAFT_RPC.decode(bytes, WHAT)?;
    Ok(AppendEntriesRequest {
        vote: required_vote(m.vote, WHAT)?,
        prev_log_id: m.prev_log_id.map(log_id_from_pb),
        entries: m.entries.into_iter().map(entry_from_pb).collect::<io::Result<_>>()?,
        leader_commit: m.leader_commit.map(log_id_from_pb),
    })
}

pub(crate) fn encode_append_response(r: &Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>) -> Vec<u8> {
    use pb::append_entries_response::Result as R;
    let result = match r {
        Ok(AppendEntriesResponse::Success) => R::Success(pb::Blank {}),
        Ok(AppendEntriesResponse::PartialSuccess(m)) => {
            R::PartialSuccess(pb::PartialSuccess { matching: m.as_ref().map(log_id_to_pb) })
        }
        Ok(AppendEntriesResponse::Conflict) => R::Conflict(pb::Blank {}),
        Ok(AppendEntriesResponse::HigherVote(v)) => R::HigherVote(vote_to_pb(v)),
        Err(e) => R::Error(error_to_pb(e)),
    };
    RAFT_RPC.encode(&pb::AppendEntriesResponse { result: Some(result) })
}

pub(crate) fn decode_append_response(
    bytes: &[u8],
) -> io::Result<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>> {
    use pb::append_entries_response::Result as R;
    const WHAT: &str = "append-entries reply";
    let m: pb::AppendEntriesResponse = RAFT_RPC.decode(bytes, WHAT)?;
    Ok(match m.result.ok_or_else(|| missing(WHAT, "result"))? {
        R::Success(_) => Ok(AppendEntriesResponse::Success),
        R::PartialSuccess(p) => Ok(AppendEntriesResponse::PartialSuccess(p.matching.map(log_id_from_pb))),
        R::Conflict(_) => Ok(AppendEntriesResponse::Conflict),
        R::HigherVote(v) => Ok(AppendEntriesResponse::HigherVote(vote_from_pb(v))),
        R::Error(e) => Err(error_from_pb(e, WHAT)?),
    })
}

pub(crate) fn encode_vote_request(req: &VoteRequest<NodeId>) -> Vec<u8> {
    RAFT_RPC.encode(&pb::VoteRequest {
        vote: Some(vote_to_pb(&req.vote)),
        last_log_id: req.last_log_id.as_ref().map(log_id_to_pb),
    })
}

pub(crate) fn decode_vote_request(bytes: &[u8]) -> io::Result<VoteRequest<NodeId>> {
    const WHAT: &str = "vote request";
    let m: pb::VoteRequest = RAFT_RPC.decode(bytes, WHAT)?;
    Ok(VoteRequest { vote: required_vote(m.vote, WHAT)?, last_log_id: m.last_log_id.map(log_id_from_pb) })
}

pub(crate) fn encode_vote_response(r: &Result<VoteResponse<NodeId>, RaftError<NodeId>>) -> Vec<u8> {
    RAFT_RPC.encode(&match r {
        Ok(v) => pb::VoteResponse {
            vote: Some(vote_to_pb(&v.vote)),
            vote_granted: v.vote_granted,
            last_log_id: v.last_log_id.as_ref().map(log_id_to_pb),
            error: None,
        },
        Err(e) => pb::VoteResponse { error: Some(error_to_pb(e)), ..Default::default() },
    })
}

pub(crate) fn decode_vote_response(bytes: &[u8]) -> io::Result<Result<VoteResponse<NodeId>, RaftError<NodeId>>> {
    const WHAT: &str = "vote reply";
    let m: pb::VoteResponse = RAFT_RPC.decode(bytes, WHAT)?;
    if let Some(e) = m.error {
        return Ok(Err(error_from_pb(e, WHAT)?));
    }
    Ok(Ok(VoteResponse {
        vote: required_vote(m.vote, WHAT)?,
        vote_granted: m.vote_granted,
        last_log_id: m.last_log_id.map(log_id_from_pb),
    }))
}

pub(crate) fn encode_snapshot_request(req: InstallSnapshotRequest<TypeConfig>) -> Vec<u8> {
    RAFT_RPC.encode(&pb::InstallSnapshotRequest {
        vote: Some(vote_to_pb(&req.vote)),
        meta: Some(snapshot_meta_to_pb(&req.meta)),
        offset: req.offset,
        data: req.data,
        done: req.done,
    })
}

pub(crate) fn decode_snapshot_request(bytes: &[u8]) -> io::Result<InstallSnapshotRequest<TypeConfig>> {
    const WHAT: &str = "install-snapshot request";
    let m: pb::InstallSnapshotRequest = RAFT_RPC.decode(bytes, WHAT)?;
    Ok(InstallSnapshotRequest {
        vote: required_vote(m.vote, WHAT)?,
        meta: snapshot_meta_from_pb(m.meta.ok_or_else(|| missing(WHAT, "meta"))?),
        offset: m.offset,
        data: m.data,
        done: m.done,
    })
}

pub(crate) fn encode_snapshot_response(
    r: &Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
) -> Vec<u8> {
    RAFT_RPC.encode(&match r {
        Ok(v) => pb::InstallSnapshotResponse { vote: Some(vote_to_pb(&v.vote)), error: None },
        Err(e) => pb::InstallSnapshotResponse { vote: None, error: Some(snapshot_error_to_pb(e)) },
    })
}

pub(crate) fn decode_snapshot_response(
    bytes: &[u8],
) -> io::Result<Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>> {
    const WHAT: &str = "install-snapshot reply";
    let m: pb::InstallSnapshotResponse = RAFT_RPC.decode(bytes, WHAT)?;
    if let Some(e) = m.error {
        return Ok(Err(snapshot_error_from_pb(e)?));
    }
    Ok(Ok(InstallSnapshotResponse { vote: required_vote(m.vote, WHAT)? }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Command, Entry, LogId, SnapshotMeta, Vote};
    use openraft::{CommittedLeaderId, EntryPayload};

    fn log_id(i: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(2, 1), i)
    }

    #[test]
    fn append_entries_round_trips_with_every_reply() {
        let entries = vec![
            Entry { log_id: log_id(5), payload: EntryPayload::Blank },
            Entry {
                log_id: log_id(6),
                payload: EntryPayload::Normal(Command::Ingest { batch_id: 9, payload: vec![1, 2, 3].into() }),
            },
        ];
        let req = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(2, 1),
            prev_log_id: Some(log_id(4)),
            entries: entries.clone(),
            leader_commit: None,
        };
        let got = decode_append_request(&encode_append_request(req).unwrap()).unwrap();
        assert_eq!(got.vote, Vote::new_committed(2, 1));
        assert_eq!(got.prev_log_id, Some(log_id(4)));
        assert_eq!(got.entries, entries);
        assert_eq!(got.leader_commit, None);

        for r in [
            Ok(AppendEntriesResponse::Success),
            Ok(AppendEntriesResponse::PartialSuccess(Some(log_id(5)))),
            Ok(AppendEntriesResponse::PartialSuccess(None)),
            Ok(AppendEntriesResponse::Conflict),
            Ok(AppendEntriesResponse::HigherVote(Vote::new(3, 2))),
            Err(RaftError::Fatal(Fatal::Stopped)),
            Err(RaftError::Fatal(Fatal::Panicked)),
        ] {
            assert_eq!(decode_append_response(&encode_append_response(&r)).unwrap(), r);
        }
        let storage = Err(RaftError::Fatal(Fatal::StorageError(io_err("disk full"))));
        let got = decode_append_response(&encode_append_response(&storage)).unwrap().unwrap_err();
        assert!(got.to_string().contains("disk full"), "{got}");
    }

    #[test]
    fn vote_and_install_snapshot_round_trip() {
        let req = VoteRequest::new(Vote::new(7, 3), Some(log_id(10)));
        assert_eq!(decode_vote_request(&encode_vote_request(&req)).unwrap(), req);
        let granted = Ok(VoteResponse { vote: Vote::new(7, 3), vote_granted: true, last_log_id: None });
        assert_eq!(decode_vote_response(&encode_vote_response(&granted)).unwrap(), granted);
        let stopped = Err(RaftError::Fatal(Fatal::Stopped));
        assert_eq!(decode_vote_response(&encode_vote_response(&stopped)).unwrap(), stopped);

        let meta = SnapshotMeta { last_log_id: Some(log_id(10)), snapshot_id: "2-10-5".into(), ..Default::default() };
        let req = InstallSnapshotRequest::<TypeConfig> {
            vote: Vote::new_committed(7, 3),
            meta: meta.clone(),
            offset: 4096,
            data: vec![9; 10],
            done: true,
        };
        let got = decode_snapshot_request(&encode_snapshot_request(req)).unwrap();
        assert_eq!((got.meta, got.offset, got.data, got.done), (meta, 4096, vec![9; 10], true));
        let ok = Ok(InstallSnapshotResponse { vote: Vote::new_committed(7, 3) });
        assert_eq!(decode_snapshot_response(&encode_snapshot_response(&ok)).unwrap(), ok);
        let mismatch = Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
            expect: SnapshotSegmentId { id: "a".into(), offset: 0 },
            got: SnapshotSegmentId { id: "a".into(), offset: 99 },
        })));
        assert_eq!(decode_snapshot_response(&encode_snapshot_response(&mismatch)).unwrap(), mismatch);
    }

    #[test]
    fn a_body_of_another_format_is_refused() {
        let err = decode_vote_request(b"\x00\x01\x02\x03\x04\x05").unwrap_err().to_string();
        assert!(err.contains("unsupported Raft RPC format"), "{err}");
    }
}
