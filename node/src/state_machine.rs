//! The openraft state machine of a group, generic over how the group keeps its state
//! ([`GroupStore`]).
//!
//! A Raft snapshot *is* a checkpoint of the store: building one makes everything applied so
//! far durable (for a data shard: flushes its buffer into segments and rewrites its manifest),
//! after which openraft purges the log up to that point. Sending a snapshot streams the
//! checkpoint's files ([`crate::archive`]); installing one checks and swaps them in.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StoredMembership};
use xxhash_rust::xxh3::xxh3_64;

use crate::archive::{self, FileEntry, SnapshotStream};
use crate::durable::write_file_atomic;
use crate::types::{
    io_err, Command, CommandResponse, Entry, LogId, Membership, SnapshotMeta, StorageError, TypeConfig,
};

/// The slow half of a checkpoint, run off the apply path.
pub type CheckpointJob = Box<dyn FnOnce() -> io::Result<()> + Send + Sync>;

/// Opens the latest checkpoint's files for sending, run off the apply path.
pub type CheckpointOpener = Box<dyn FnOnce() -> io::Result<Option<(SnapshotMeta, SnapshotStream)>> + Send>;

/// How a group keeps its applied state and makes it durable.
pub trait GroupStore: Send + Sync + 'static {
    /// Applies one committed command. Must be deterministic: every replica gets the same result.
    fn apply(&mut self, index: u64, command: Command) -> CommandResponse;
    /// Called under the apply lock: sets aside everything applied so far (cheaply) and returns
    /// the slow part, run off the apply path, that makes it durable together with `meta`.
    fn begin_checkpoint(&mut self, meta: SnapshotMeta) -> CheckpointJob;
    /// The latest durable checkpoint: its meta and files (in the group directory).
    fn checkpoint(&self) -> Option<(SnapshotMeta, Vec<FileEntry>)>;
    /// Packs the latest durable checkpoint for sending. The files are listed and opened under
    /// the lock their writers take, so a compaction or a newer checkpoint cannot replace one
    /// in between (once open, a file stays readable after it is deleted).
    fn checkpoint_opener(&self) -> CheckpointOpener;
    /// Replaces the whole state with the checked files of a received checkpoint in `staging`.
    fn install(&mut self, meta: &SnapshotMeta, staging: &Path, files: &[FileEntry]) -> io::Result<()>;
}

/// State that lives in memory and is written out whole (the meta group).
pub trait GroupState: Send + Sync + 'static {
    /// Applies one committed command. Must be deterministic: every replica gets the same result.
    fn apply(&mut self, index: u64, command: Command) -> CommandResponse;
    /// A consistent, cheap-to-take view of the state that writes itself out later.
    fn snapshot_writer(&self) -> Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync>;
    /// Replaces the whole state with one read from a snapshot.
    fn restore(&mut self, input: &mut dyn Read) -> io::Result<()>;
}

pub struct Applied<S> {
    pub last_applied: Option<LogId>,
    pub membership: Membership,
    pub state: S,
}

/// Shared between the Raft core (which applies) and readers (which query).
pub type SharedState<S> = Arc<RwLock<Applied<S>>>;

/// Reported to the host for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotEvent {
    /// This replica checkpointed its own state (flushed its buffer), taking this long.
    Built(std::time::Duration),
    /// This replica replaced its state with a snapshot sent by the leader.
    Installed,
}

/// How far a group's state is durable: the last log id of its latest checkpoint, built or
/// installed. The group's log never purges past it ([`crate::log_store::GroupLog::purged_within`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Durable {
    pub upto: Option<LogId>,
    /// An install of a leader's snapshot failed: what waits for it will never see it.
    pub install_failed: bool,
}

impl Durable {
    pub fn covers(&self, id: &LogId) -> bool {
        self.upto.is_some_and(|upto| upto.index >= id.index)
    }
}

fn advance(durable: &tokio::sync::watch::Sender<Durable>, upto: Option<LogId>) {
    durable.send_if_modified(|d| {
        let newer = upto.map(|u| u.index) > d.upto.map(|u| u.index);
        if newer {
            d.upto = upto;
        }
        newer
    });
}

pub struct GroupStateMachine<S: GroupStore> {
    durable: Arc<tokio::sync::watch::Sender<Durable>>,
    shared: SharedState<S>,
    dir: PathBuf,
    /// Serialises checkpoints and installs.
    checkpoint_lock: Arc<tokio::sync::Mutex<()>>,
    /// Snapshots installed so far. A checkpoint set aside before an install and written after
    /// it is stale: the installed state already holds its entries and more.
    installs: Arc<AtomicU64>,
    on_snapshot: Arc<dyn Fn(SnapshotEvent) + Send + Sync>,
}

/// Where releases before 2026-11-28 received a leader's snapshot.
const LEGACY_RECEIVING: &str = "snapshot.receiving";

impl<S: GroupStore> GroupStateMachine<S> {
    /// Wraps a store opened on `dir`; the Raft position is that of its latest checkpoint, and
    /// openraft re-applies the log entries that follow it.
    pub fn new(dir: &Path, state: S, on_snapshot: Arc<dyn Fn(SnapshotEvent) + Send + Sync>) -> Self {
        let (last_applied, membership) = match state.checkpoint() {
            Some((meta, _)) => (meta.last_log_id, meta.last_membership),
            None => (None, Membership::default()),
        };
        // Releases before unnamed stream files received snapshots into this file; one left by an
        // interrupted install would never be reused or removed now.
        let _ = std::fs::remove_file(dir.join(LEGACY_RECEIVING));
        Self {
            durable: Arc::new(tokio::sync::watch::Sender::new(Durable { upto: last_applied, install_failed: false })),
            shared: Arc::new(RwLock::new(Applied { last_applied, membership, state })),
            dir: dir.to_owned(),
            checkpoint_lock: Arc::new(tokio::sync::Mutex::new(())),
            installs: Arc::new(AtomicU64::new(0)),
            on_snapshot,
        }
    }

    pub fn shared(&self) -> SharedState<S> {
        self.shared.clone()
    }

    pub fn durable(&self) -> tokio::sync::watch::Receiver<Durable> {
        self.durable.subscribe()
    }
}

/// The latest checkpoint, opened for sending. Opening may wait for a running flush (which
/// holds the manifest's lock), so it runs on a blocking thread.
async fn snapshot_of<S: GroupStore>(shared: &SharedState<S>) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
    let opener = shared.read().unwrap().state.checkpoint_opener();
    let opened = tokio::task::spawn_blocking(opener).await.map_err(io_err)?;
    let opened = opened.map_err(|e| io_err(format!("opening the checkpoint to send: {e}")))?;
    Ok(opened.map(|(meta, stream)| Snapshot { meta, snapshot: Box::new(stream) }))
}

pub struct SnapshotBuilder<S: GroupStore> {
    durable: Arc<tokio::sync::watch::Sender<Durable>>,
    job: Option<CheckpointJob>,
    shared: SharedState<S>,
    lock: Arc<tokio::sync::Mutex<()>>,
    installs: Arc<AtomicU64>,
    /// `installs` when the job was set aside.
    installs_before: u64,
    on_snapshot: Arc<dyn Fn(SnapshotEvent) + Send + Sync>,
}

impl<S: GroupStore> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<S> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let job = self.job.take().ok_or_else(|| io_err("snapshot builder used twice"))?;
        let _guard = self.lock.lock().await;
        // openraft may install a leader's snapshot between setting this checkpoint aside and
        // building it. Writing it then would put its older state (or, for a data shard, a second
        // copy of its rows) over the installed one; the installed checkpoint is the snapshot.
        if self.installs.load(Ordering::Acquire) == self.installs_before {
            let started = std::time::Instant::now();
            let built = tokio::task::spawn_blocking(job).await.map_err(io_err)?;
            built.map_err(|e| io_err(format!("writing a checkpoint: {e}")))?;
            (self.on_snapshot)(SnapshotEvent::Built(started.elapsed()));
        }
        let snapshot =
            snapshot_of(&self.shared).await?.ok_or_else(|| io_err("checkpoint vanished after it was written"))?;
        advance(&self.durable, snapshot.meta.last_log_id);
        Ok(snapshot)
    }
}

impl<S: GroupStore> RaftStateMachine<TypeConfig> for GroupStateMachine<S> {
    type SnapshotBuilder = SnapshotBuilder<S>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        let a = self.shared.read().unwrap();
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut a = self.shared.write().unwrap();
        let mut out = Vec::new();
        for entry in entries {
            if matches!(entry.payload, EntryPayload::Normal(Command::Ingest { .. }))
                && crate::failpoint::once(crate::failpoint::APPLY_INGEST)
            {
                return Err(io_err("failpoint: applying an ingest batch failed"));
            }
            a.last_applied = Some(entry.log_id);
            out.push(match entry.payload {
                EntryPayload::Blank => CommandResponse::Aborted,
                EntryPayload::Normal(cmd) => a.state.apply(entry.log_id.index, cmd),
                EntryPayload::Membership(m) => {
                    a.membership = StoredMembership::new(Some(entry.log_id), m);
                    CommandResponse::Aborted
                }
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder<S> {
        let mut a = self.shared.write().unwrap();
        let last = a.last_applied;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: a.membership.clone(),
            snapshot_id: format!(
                "{}-{}-{}",
                last.map_or(0, |l| l.leader_id.term),
                last.map_or(0, |l| l.index),
                rand::random::<u32>()
            ),
        };
        let job = a.state.begin_checkpoint(meta);
        SnapshotBuilder {
            durable: self.durable.clone(),
            job: Some(job),
            shared: self.shared.clone(),
            lock: self.checkpoint_lock.clone(),
            installs: self.installs.clone(),
            installs_before: self.installs.load(Ordering::Acquire),
            on_snapshot: self.on_snapshot.clone(),
        }
    }

    /// Each stream gets a file of its own with no name: openraft may begin a new stream (a
    /// leader's retry, a new leader) while it hands a finished one to `install_snapshot`, and a
    /// shared, truncated file cut the finished one short. Its space goes with its last handle.
    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotStream>, StorageError> {
        let dir = self.dir.clone();
        let file = tokio::task::spawn_blocking(move || tempfile::tempfile_in(dir)).await.map_err(io_err)?;
        Ok(Box::new(SnapshotStream::Incoming(tokio::fs::File::from_std(file.map_err(io_err)?))))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotStream>,
    ) -> Result<(), StorageError> {
        let SnapshotStream::Incoming(file) = *snapshot else {
            return Err(io_err("asked to install an outgoing snapshot"));
        };
        let _guard = self.checkpoint_lock.lock().await;
        let mut file = file.into_std().await;
        let (shared, dir, meta) = (self.shared.clone(), self.dir.clone(), meta.clone());
        let installs = self.installs.clone();
        let upto = meta.last_log_id;
        let installed = tokio::task::spawn_blocking(move || -> io::Result<()> {
            use std::io::Seek;
            file.seek(io::SeekFrom::Start(0))?;
            let staging = dir.join("snapshot.staging");
            let (archived, files) = archive::unpack(&mut io::BufReader::new(file), &staging)?;
            if archived.last_log_id != meta.last_log_id {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot meta mismatch"));
            }
            crate::failpoint::hit(crate::failpoint::INSTALL_BEFORE_STATE);
            let mut a = shared.write().unwrap();
            a.state.install(&meta, &staging, &files)?;
            installs.fetch_add(1, Ordering::AcqRel);
            a.last_applied = meta.last_log_id;
            a.membership = meta.last_membership.clone();
            drop(a);
            let _ = std::fs::remove_dir_all(&staging);
            Ok(())
        })
        .await
        .map_err(io_err)
        .and_then(|r| r.map_err(|e| io_err(format!("installing a snapshot: {e}"))));
        match installed {
            Ok(()) => advance(&self.durable, upto),
            Err(e) => {
                self.durable.send_modify(|d| d.install_failed = true);
                return Err(e);
            }
        }
        (self.on_snapshot)(SnapshotEvent::Installed);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        snapshot_of(&self.shared).await
    }
}

/// A [`GroupState`] kept whole in memory and checkpointed into one file,
/// `[format header][length-delimited protobuf meta][state][u64 xxh3 of all previous bytes]`
/// (docs/ARCHITECTURE.md, "Persisted formats").
pub struct Whole<S> {
    state: S,
    dir: PathBuf,
    checkpoint: Arc<RwLock<Option<(SnapshotMeta, FileEntry)>>>,
}

const WHOLE_FILE: &str = "state.bin";

impl<S: GroupState> Whole<S> {
    /// Opens the state in `dir`, restoring its checkpoint if there is one.
    pub fn open(dir: &Path, mut state: S) -> io::Result<Self> {
        crate::durable::create_private_dir(dir)?;
        let path = dir.join(WHOLE_FILE);
        let checkpoint = if path.exists() {
            let bytes = std::fs::read(&path)?;
            let meta = Self::decode(&bytes, &mut state)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            Some((meta, FileEntry { name: WHOLE_FILE.into(), len: bytes.len() as u64, xxh3: xxh3_64(&bytes) }))
        } else {
            None
        };
        Ok(Self { state, dir: dir.to_owned(), checkpoint: Arc::new(RwLock::new(checkpoint)) })
    }

    fn decode(bytes: &[u8], state: &mut S) -> io::Result<SnapshotMeta> {
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_owned());
        if bytes.len() < 12 {
            return Err(bad("state file is truncated"));
        }
        let (body, digest) = bytes.split_at(bytes.len() - 8);
        if xxh3_64(body).to_le_bytes() != digest {
            return Err(bad("state file checksum mismatch"));
        }
        let (meta, mut rest) = crate::persist::decode_snapshot_meta(body)?;
        state.restore(&mut rest)?;
        Ok(meta)
    }
}

impl<S> std::ops::Deref for Whole<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.state
    }
}

impl<S: GroupState> GroupStore for Whole<S> {
    fn apply(&mut self, index: u64, command: Command) -> CommandResponse {
        self.state.apply(index, command)
    }

    fn begin_checkpoint(&mut self, meta: SnapshotMeta) -> CheckpointJob {
        let writer = self.state.snapshot_writer();
        let (dir, checkpoint) = (self.dir.clone(), self.checkpoint.clone());
        Box::new(move || {
            let mut bytes = Vec::new();
            crate::persist::encode_snapshot_meta(&meta, &mut bytes);
            writer(&mut bytes)?;
            let digest = xxh3_64(&bytes);
            bytes.extend_from_slice(&digest.to_le_bytes());
            // Replaced under the lock an opener holds, so it never opens the new file as the old.
            let mut current = checkpoint.write().unwrap();
            *current = Some((meta, write_file_atomic(&dir, WHOLE_FILE, &bytes)?));
            Ok(())
        })
    }

    fn checkpoint(&self) -> Option<(SnapshotMeta, Vec<FileEntry>)> {
        self.checkpoint.read().unwrap().as_ref().map(|(m, f)| (m.clone(), vec![f.clone()]))
    }

    fn checkpoint_opener(&self) -> CheckpointOpener {
        let (dir, checkpoint) = (self.dir.clone(), self.checkpoint.clone());
        Box::new(move || {
            let current = checkpoint.read().unwrap();
            let Some((meta, entry)) = current.as_ref() else { return Ok(None) };
            Ok(Some((meta.clone(), SnapshotStream::pack(meta, &dir, std::slice::from_ref(entry))?)))
        })
    }

    fn install(&mut self, meta: &SnapshotMeta, staging: &Path, files: &[FileEntry]) -> io::Result<()> {
        let [entry] = files else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "expected exactly one state file"));
        };
        let bytes = std::fs::read(staging.join(&entry.name))?;
        // `decode` checks the checksum before it touches the live state.
        Self::decode(&bytes, &mut self.state)?;
        let mut current = self.checkpoint.write().unwrap();
        std::fs::rename(staging.join(&entry.name), self.dir.join(WHOLE_FILE))?;
        crate::durable::sync_dir(&self.dir)?;
        *current = Some((meta.clone(), entry.clone()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Counter(u64);

    impl GroupState for Counter {
        fn apply(&mut self, _index: u64, _command: Command) -> CommandResponse {
            self.0 += 1;
            CommandResponse::Aborted
        }
        fn snapshot_writer(&self) -> Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync> {
            let v = self.0;
            Box::new(move |w: &mut dyn Write| w.write_all(&v.to_le_bytes()))
        }
        fn restore(&mut self, input: &mut dyn Read) -> io::Result<()> {
            let mut b = [0u8; 8];
            input.read_exact(&mut b)?;
            self.0 = u64::from_le_bytes(b);
            Ok(())
        }
    }

    #[test]
    fn whole_state_checkpoint_reopens_and_installs_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Whole::open(dir.path(), Counter::default()).unwrap();
        assert!(w.checkpoint().is_none());
        w.apply(1, Command::Abort { batch_id: 1 });
        w.apply(2, Command::Abort { batch_id: 2 });
        let meta = SnapshotMeta { snapshot_id: "s".into(), ..Default::default() };
        w.begin_checkpoint(meta.clone())().unwrap();
        let (m, files) = w.checkpoint().unwrap();
        assert_eq!(m.snapshot_id, "s");

        let reopened = Whole::open(dir.path(), Counter::default()).unwrap();
        assert_eq!(reopened.0, 2);
        assert_eq!(reopened.checkpoint().unwrap().1, files);

        let other = tempfile::tempdir().unwrap();
        let staging = other.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::copy(dir.path().join(WHOLE_FILE), staging.join(WHOLE_FILE)).unwrap();
        let mut target = Whole::open(&other.path().join("g"), Counter::default()).unwrap();
        target.install(&meta, &staging, &files).unwrap();
        assert_eq!(target.0, 2);
        assert_eq!(Whole::open(&other.path().join("g"), Counter::default()).unwrap().0, 2);
    }

    fn entries(range: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
        range
            .map(|i| Entry {
                log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), i),
                payload: EntryPayload::Normal(Command::Abort { batch_id: i as u128 }),
            })
            .collect()
    }

    fn counting_machine(dir: &Path) -> GroupStateMachine<Whole<Counter>> {
        GroupStateMachine::new(dir, Whole::open(dir, Counter::default()).unwrap(), Arc::new(|_| {}))
    }

    /// A leader's snapshot after five entries, and its bytes as sent.
    async fn snapshot_of_five_entries() -> (Snapshot<TypeConfig>, Vec<u8>) {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let mut leader = counting_machine(dir.path());
        leader.apply(entries(1..=5)).await.unwrap();
        let mut sent = leader.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let mut bytes = Vec::new();
        sent.snapshot.read_to_end(&mut bytes).await.unwrap();
        (sent, bytes)
    }

    /// openraft may install a leader's snapshot after a follower set its own checkpoint aside and
    /// before it wrote it: the late checkpoint must not move the state back (nor, for a data
    /// shard, add a second copy of rows the installed snapshot holds).
    #[tokio::test]
    async fn a_checkpoint_overtaken_by_an_installed_snapshot_is_not_written() {
        use tokio::io::AsyncWriteExt;
        let follower_dir = tempfile::tempdir().unwrap();
        let (sent, bytes) = snapshot_of_five_entries().await;

        let mut follower = counting_machine(follower_dir.path());
        follower.apply(entries(1..=2)).await.unwrap();
        let mut late = follower.get_snapshot_builder().await;
        let mut incoming = follower.begin_receiving_snapshot().await.unwrap();
        incoming.write_all(&bytes).await.unwrap();
        incoming.flush().await.unwrap();
        follower.install_snapshot(&sent.meta, incoming).await.unwrap();
        let built = late.build_snapshot().await.unwrap();

        assert_eq!(built.meta.last_log_id, sent.meta.last_log_id, "the snapshot offered is the installed one");
        assert_eq!(follower.shared.read().unwrap().state.0, 5);
        let reopened = Whole::open(follower_dir.path(), Counter::default()).unwrap();
        assert_eq!(reopened.0, 5, "the checkpoint on disk is the installed state");
        assert_eq!(reopened.checkpoint().unwrap().0.last_log_id, sent.meta.last_log_id);
    }

    /// openraft releases a finished stream before installing it, so a chunk of another stream
    /// can begin receiving meanwhile; the finished one must still install whole.
    #[tokio::test]
    async fn a_snapshot_received_whole_installs_though_another_stream_began_meanwhile() {
        use tokio::io::AsyncWriteExt;
        let follower_dir = tempfile::tempdir().unwrap();
        let (sent, bytes) = snapshot_of_five_entries().await;

        let mut follower = counting_machine(follower_dir.path());
        let mut finished = follower.begin_receiving_snapshot().await.unwrap();
        finished.write_all(&bytes).await.unwrap();
        finished.flush().await.unwrap();
        let mut next = follower.begin_receiving_snapshot().await.unwrap();
        next.write_all(&bytes[..7]).await.unwrap();
        follower.install_snapshot(&sent.meta, finished).await.unwrap();
        assert_eq!(follower.shared.read().unwrap().state.0, 5);
        assert!(!follower.durable().borrow().install_failed);
        let left: Vec<_> = std::fs::read_dir(follower_dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from(WHOLE_FILE)], "no stream leaves a file behind");
    }

    #[test]
    fn a_snapshot_file_an_older_release_left_is_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LEGACY_RECEIVING), b"half a snapshot").unwrap();
        counting_machine(dir.path());
        assert!(!dir.path().join(LEGACY_RECEIVING).exists());
    }
}
