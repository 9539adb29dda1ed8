//! Files written by format 1, committed under `fixtures/`, that every later build must read
//! (docs/ARCHITECTURE.md, "Persisted formats"). The tests read the committed bytes; to write
//! them again after a deliberate format change (with a new version), run
//! `cargo test -p sextant-node write_format_1_fixtures -- --ignored`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use openraft::{BasicNode, CommittedLeaderId, EntryPayload};
use sextant_model::meta::{MetaCommand, Project};
use xxhash_rust::xxh3::xxh3_64;

use crate::archive::{FileEntry, SnapshotStream};
use crate::segment::{Dedup, Manifest, SegmentMeta, Table};
use crate::types::{Command, Entry, LogId, Membership, SnapshotMeta, Vote};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/persist/fixtures")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(2, 1), index)
}

fn membership() -> openraft::Membership<u64, BasicNode> {
    openraft::Membership::new(
        vec![BTreeSet::from([1, 2, 3])],
        BTreeMap::from([
            (1, BasicNode::new("node-1:7001")),
            (2, BasicNode::new("node-2:7001")),
            (3, BasicNode::new("node-3:7001")),
            (4, BasicNode::new("node-4:7001")),
        ]),
    )
}

const PROJECT_ID: &str = "6f1c1a52-9d8e-4b6f-8d0b-2c8b1e0d9a11";
const ORG_ID: &str = "0b7e5b1e-3c4d-4e5f-9a6b-7c8d9e0f1a2b";

/// The entries of `fixtures/log-v1/`, in index order.
pub(crate) fn log_entries() -> Vec<(&'static str, Entry)> {
    let project = Project {
        id: PROJECT_ID.parse().unwrap(),
        org_id: ORG_ID.parse().unwrap(),
        name: "checkout".into(),
        created_at_ms: 1_700_000_000_000,
        managed_by: None,
        key: None,
    };
    vec![
        ("1-blank", Entry { log_id: log_id(1), payload: EntryPayload::Blank }),
        ("2-membership", Entry { log_id: log_id(2), payload: EntryPayload::Membership(membership()) }),
        (
            "3-ingest",
            Entry {
                log_id: log_id(3),
                payload: EntryPayload::Normal(Command::Ingest {
                    batch_id: 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
                    payload: b"rows of one sub-batch".to_vec().into(),
                }),
            },
        ),
        (
            "4-abort",
            Entry {
                log_id: log_id(4),
                payload: EntryPayload::Normal(Command::Abort { batch_id: 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210 }),
            },
        ),
        (
            "5-meta",
            Entry {
                log_id: log_id(5),
                payload: EntryPayload::Normal(Command::Meta(MetaCommand::CreateProject {
                    project,
                    credentials: vec![],
                })),
            },
        ),
    ]
}

fn snapshot_meta() -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(log_id(5)),
        last_membership: Membership::new(Some(log_id(2)), membership()),
        snapshot_id: "2-5-77".into(),
    }
}

fn manifest() -> Manifest {
    Manifest {
        checkpoint: Some(snapshot_meta()),
        segments: vec![SegmentMeta {
            id: 7,
            table: Table::Spans,
            hour: 1_700_000_400 / 3600 * 3600,
            rows: 1200,
            min_ns: 1_700_000_400_000_000_000,
            max_ns: 1_700_000_500_000_000_000,
            file: FileEntry { name: "seg-000000000007.parquet".into(), len: 4096, xxh3: 0xfeed_beef_0000_0001 },
            summarizes: None,
            covers: Vec::new(),
            projects: vec![PROJECT_ID.into()],
            draft: false,
        }],
        next_segment: 8,
        dedup: Dedup::from_lists(vec![11, 12, u128::MAX], vec![13]),
        tombstones: BTreeSet::from([13]),
        usage: Default::default(),
    }
}

fn assert_snapshot_meta(m: &SnapshotMeta) {
    assert_eq!(m.last_log_id, Some(log_id(5)));
    assert_eq!(m.last_log_id.unwrap().leader_id.term, 2);
    assert_eq!(m.last_log_id.unwrap().leader_id.node_id, 1);
    assert_eq!(*m.last_membership.log_id(), Some(log_id(2)));
    assert_eq!(m.last_membership.voter_ids().collect::<Vec<_>>(), vec![1, 2, 3]);
    let nodes: Vec<(u64, String)> = m.last_membership.nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
    assert_eq!(nodes[3], (4, "node-4:7001".into()), "node 4 is a learner");
    assert_eq!(nodes.len(), 4);
    assert_eq!(m.snapshot_id, "2-5-77");
}

#[test]
fn a_log_written_by_format_1_still_reads() {
    let read_entry = |name: &str| super::decode_entry(read(&format!("log-v1/{name}")).into()).unwrap();

    let blank = read_entry("1-blank");
    assert_eq!((blank.log_id.leader_id.term, blank.log_id.leader_id.node_id, blank.log_id.index), (2, 1, 1));
    assert!(matches!(blank.payload, EntryPayload::Blank));

    let EntryPayload::Membership(m) = read_entry("2-membership").payload else { panic!("not a membership") };
    assert_eq!(m.get_joint_config(), &vec![BTreeSet::from([1, 2, 3])]);
    assert_eq!(m.nodes().map(|(id, n)| (*id, n.addr.as_str())).collect::<Vec<_>>()[0], (1, "node-1:7001"));
    assert_eq!(m.nodes().count(), 4);

    let ingest = read_entry("3-ingest");
    assert_eq!(ingest.log_id.index, 3);
    let EntryPayload::Normal(Command::Ingest { batch_id, payload }) = ingest.payload else { panic!("not an ingest") };
    assert_eq!(batch_id, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
    assert_eq!(payload, &b"rows of one sub-batch"[..]);

    let EntryPayload::Normal(Command::Abort { batch_id }) = read_entry("4-abort").payload else {
        panic!("not an abort")
    };
    assert_eq!(batch_id, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);

    let meta = read_entry("5-meta");
    assert_eq!(meta.log_id.index, 5);
    let EntryPayload::Normal(Command::Meta(MetaCommand::CreateProject { project, credentials })) = meta.payload else {
        panic!("not a CreateProject")
    };
    assert_eq!(project.id.to_string(), PROJECT_ID);
    assert_eq!(project.org_id.to_string(), ORG_ID);
    assert_eq!(project.name, "checkout");
    assert_eq!(project.created_at_ms, 1_700_000_000_000);
    assert_eq!((project.managed_by, project.key), (None, None), "fields added later take their defaults");
    assert!(credentials.is_empty());

    let vote = super::decode_vote(&read("log-v1/vote")).unwrap();
    assert_eq!((vote.leader_id.term, vote.leader_id.node_id, vote.committed), (2, 1, true));
    let purged = super::decode_log_id(&read("log-v1/purged")).unwrap();
    assert_eq!((purged.leader_id.term, purged.leader_id.node_id, purged.index), (2, 1, 1));
}

#[test]
fn a_manifest_written_by_format_1_still_reads() {
    let m = Manifest::decode(&read("MANIFEST-v1")).unwrap();
    assert_snapshot_meta(m.checkpoint.as_ref().unwrap());
    assert_eq!(m.next_segment, 8);
    let [s] = &m.segments[..] else { panic!("one segment expected") };
    assert_eq!((s.id, s.table, s.hour, s.rows), (7, Table::Spans, 1_699_999_200, 1200));
    assert_eq!((s.min_ns, s.max_ns), (1_700_000_400_000_000_000, 1_700_000_500_000_000_000));
    assert_eq!(s.file, FileEntry { name: "seg-000000000007.parquet".into(), len: 4096, xxh3: 0xfeed_beef_0000_0001 });
    assert_eq!(s.summarizes, None);
    assert_eq!(s.projects, vec![PROJECT_ID.to_string()]);
    assert!(!s.draft, "written before drafts: compressed at the stored level");
    assert_eq!(m.dedup.applied_in_order().collect::<Vec<_>>(), vec![11, 12, u128::MAX]);
    assert!(m.dedup.is_applied(u128::MAX) && m.dedup.is_aborted(13) && !m.dedup.is_aborted(11));
    assert_eq!(m.tombstones, BTreeSet::from([13]));
    assert!(m.usage.totals.is_empty(), "written before metering: nothing counted");
}

#[test]
fn a_draft_segment_is_still_a_draft_once_its_manifest_is_read_back() {
    let mut m = manifest();
    m.segments[0].draft = true;
    let tmp = tempfile::tempdir().unwrap();
    m.store(tmp.path()).unwrap();
    let (read, _) = Manifest::load(tmp.path()).unwrap().unwrap();
    assert!(read.segments[0].draft);
}

#[test]
fn an_archive_written_by_format_1_still_unpacks() {
    let staging = tempfile::tempdir().unwrap();
    let bytes = read("archive-v1.sxar");
    let (meta, files) = crate::archive::unpack(&mut bytes.as_slice(), &staging.path().join("s")).unwrap();
    assert_snapshot_meta(&meta);
    assert_eq!(files.iter().map(|f| (f.name.as_str(), f.len)).collect::<Vec<_>>(), vec![("a.bin", 5), ("b.bin", 3)]);
    assert_eq!(files[0].xxh3, xxh3_64(b"hello"));
    assert_eq!(std::fs::read(staging.path().join("s/b.bin")).unwrap(), b"abc");
}

#[test]
fn a_state_snapshot_written_by_format_1_still_reads() {
    let bytes = read("state-v1.bin");
    let (body, digest) = bytes.split_at(bytes.len() - 8);
    assert_eq!(xxh3_64(body).to_le_bytes(), digest);
    let (meta, state) = super::decode_snapshot_meta(body).unwrap();
    assert_snapshot_meta(&meta);
    assert_eq!(state, b"{\"state\":true}");
}

const INCARNATION: u64 = 0x5e77_a47c_0ffe_e001;

#[test]
fn an_incarnation_written_by_format_1_still_reads() {
    assert_eq!(super::decode_incarnation(&read("incarnation-v1")).unwrap(), INCARNATION);
    assert_eq!(super::encode_incarnation(INCARNATION), read("incarnation-v1"), "the encoding is stable");
}

#[test]
fn a_bootstrap_record_written_by_format_1_still_reads() {
    assert_eq!(super::decode_bootstrap(&read("bootstrapped-v1")).unwrap(), vec![1, 2, 3, 4, 5]);
    assert_eq!(super::encode_bootstrap(&[1, 2, 3, 4, 5]), read("bootstrapped-v1"), "the encoding is stable");
    // Written before the record: bootstrapped, members not known.
    assert_eq!(super::decode_bootstrap(b"part of a cluster\n").unwrap(), Vec::<u64>::new());
    let err = super::decode_bootstrap(b"part of a clusteR\n").unwrap_err().to_string();
    assert!(err.contains("unsupported bootstrap record format"), "{err}");
}

/// A blob written before format 1 (bincode, no header) is refused by name, never misread.
#[test]
fn data_written_before_format_1_is_refused() {
    // The first bytes of a bincode log entry: term 2, node 1, index 3 as little-endian u64s.
    let mut old = Vec::new();
    for v in [2u64, 1, 3] {
        old.extend_from_slice(&v.to_le_bytes());
    }
    let err = super::decode_entry(old.clone().into()).unwrap_err().to_string();
    assert!(err.contains("unsupported Raft log entry format"), "{err}");
    let err = super::decode_vote(&old).unwrap_err().to_string();
    assert!(err.contains("unsupported Raft vote format"), "{err}");
    let digest = xxh3_64(&old).to_le_bytes();
    let err = Manifest::decode(&[old.clone(), digest.to_vec()].concat()).unwrap_err().to_string();
    assert!(err.contains("unsupported segment manifest format"), "{err}");
}

#[test]
#[ignore = "writes the fixtures; run only after a deliberate format change"]
fn write_format_1_fixtures() {
    let dir = fixtures();
    std::fs::create_dir_all(dir.join("log-v1")).unwrap();
    for (name, entry) in log_entries() {
        std::fs::write(dir.join("log-v1").join(name), super::encode_entry(&entry).unwrap()).unwrap();
    }
    std::fs::write(dir.join("log-v1/vote"), super::encode_vote(&Vote::new_committed(2, 1))).unwrap();
    std::fs::write(dir.join("log-v1/purged"), super::encode_log_id(&log_id(1))).unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let entry = manifest().store(tmp.path()).unwrap();
    std::fs::copy(tmp.path().join(&entry.name), dir.join("MANIFEST-v1")).unwrap();

    let a = crate::durable::write_file_atomic(tmp.path(), "a.bin", b"hello").unwrap();
    let b = crate::durable::write_file_atomic(tmp.path(), "b.bin", b"abc").unwrap();
    let mut archive = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        use tokio::io::AsyncReadExt;
        SnapshotStream::pack(&snapshot_meta(), tmp.path(), &[a, b]).unwrap().read_to_end(&mut archive).await.unwrap();
    });
    std::fs::write(dir.join("archive-v1.sxar"), archive).unwrap();

    let mut state = Vec::new();
    super::encode_snapshot_meta(&snapshot_meta(), &mut state);
    state.extend_from_slice(b"{\"state\":true}");
    let digest = xxh3_64(&state);
    state.extend_from_slice(&digest.to_le_bytes());
    std::fs::write(dir.join("state-v1.bin"), state).unwrap();
    std::fs::write(dir.join("incarnation-v1"), super::encode_incarnation(INCARNATION)).unwrap();
    std::fs::write(dir.join("bootstrapped-v1"), super::encode_bootstrap(&[1, 2, 3, 4, 5])).unwrap();
}
