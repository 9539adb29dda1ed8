//! The openraft state machine of a group, generic over what the group stores ([`GroupState`]).
//!
//! State lives in memory and is persisted by snapshots: a snapshot file holds the snapshot
//! meta, the state and an xxh3 checksum. After a restart the latest snapshot is loaded and
//! openraft re-applies the log entries that follow it.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{BasicNode, EntryPayload, OptionalSend, RaftSnapshotBuilder, StoredMembership};
use xxhash_rust::xxh3::Xxh3;

use crate::types::{io_err, Command, CommandResponse, Entry, LogId, NodeId, StorageError, TypeConfig};

/// What a Raft group stores. Implemented by the meta state and by the shard store; the storage
/// engine can replace the shard store without touching Raft plumbing.
pub trait GroupState: Send + Sync + 'static {
    /// Applies one committed command. Must be deterministic: every replica gets the same result.
    fn apply(&mut self, index: u64, command: Command) -> CommandResponse;
    /// A consistent, cheap-to-take view of the state that writes itself out later.
    fn snapshot_writer(&self) -> Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync>;
    /// Replaces the whole state with one read from a snapshot.
    fn restore(&mut self, input: &mut dyn Read) -> io::Result<()>;
}

/// Reported to the host for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotEvent {
    /// This replica wrote a snapshot of its own state.
    Built,
    /// This replica replaced its state with a snapshot sent by the leader.
    Installed,
}

type Membership = StoredMembership<NodeId, BasicNode>;
type Meta = SnapshotMeta<NodeId, BasicNode>;

pub struct Applied<S> {
    pub last_applied: Option<LogId>,
    pub membership: Membership,
    pub state: S,
}

/// Shared between the Raft core (which applies) and readers (which query).
pub type SharedState<S> = Arc<RwLock<Applied<S>>>;

pub struct GroupStateMachine<S: GroupState> {
    shared: SharedState<S>,
    dir: PathBuf,
    /// Serialises writers of `snapshot.bin` (builder task vs. snapshot install).
    snapshot_lock: Arc<tokio::sync::Mutex<Option<Meta>>>,
    on_snapshot: Arc<dyn Fn(SnapshotEvent) + Send + Sync>,
}

const SNAPSHOT_FILE: &str = "snapshot.bin";

impl<S: GroupState> GroupStateMachine<S> {
    /// Opens the state machine in `dir`, restoring the latest snapshot if there is one.
    pub fn open(
        dir: &Path,
        mut state: S,
        on_snapshot: Arc<dyn Fn(SnapshotEvent) + Send + Sync>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(SNAPSHOT_FILE);
        let (meta, last_applied, membership) = if path.exists() {
            let mut file = std::fs::File::open(&path)?;
            let meta = read_snapshot(&mut file, &mut state)?;
            (Some(meta.clone()), meta.last_log_id, meta.last_membership)
        } else {
            (None, None, Membership::default())
        };
        Ok(Self {
            shared: Arc::new(RwLock::new(Applied { last_applied, membership, state })),
            dir: dir.to_owned(),
            snapshot_lock: Arc::new(tokio::sync::Mutex::new(meta)),
            on_snapshot,
        })
    }

    pub fn shared(&self) -> SharedState<S> {
        self.shared.clone()
    }
}

/// File layout: `[u32 meta length][bincode meta][state ...][u64 xxh3 of all previous bytes]`.
fn write_snapshot(
    out: &mut dyn Write,
    meta: &Meta,
    state: Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync>,
) -> io::Result<()> {
    let mut w = HashingWriter { inner: out, hash: Xxh3::new() };
    let meta_bytes = bincode::serialize(meta).map_err(io::Error::other)?;
    w.write_all(&(meta_bytes.len() as u32).to_le_bytes())?;
    w.write_all(&meta_bytes)?;
    state(&mut w)?;
    let digest = w.hash.digest();
    w.inner.write_all(&digest.to_le_bytes())
}

/// Verifies the checksum, then restores `state`; returns the snapshot meta.
fn read_snapshot<S: GroupState>(file: &mut std::fs::File, state: &mut S) -> io::Result<Meta> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    if bytes.len() < 12 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot file is truncated"));
    }
    let (body, digest) = bytes.split_at(bytes.len() - 8);
    if xxhash_rust::xxh3::xxh3_64(body).to_le_bytes() != digest {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot checksum mismatch"));
    }
    let meta_len = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
    let meta: Meta = bincode::deserialize(&body[4..4 + meta_len]).map_err(io::Error::other)?;
    state.restore(&mut &body[4 + meta_len..])?;
    Ok(meta)
}

struct HashingWriter<'a> {
    inner: &'a mut dyn Write,
    hash: Xxh3,
}

impl Write for HashingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Moves a complete snapshot file into place atomically (rename + directory fsync).
fn publish(dir: &Path, tmp: &Path) -> io::Result<PathBuf> {
    let path = dir.join(SNAPSHOT_FILE);
    std::fs::rename(tmp, &path)?;
    sync_dir(dir)?;
    Ok(path)
}

pub struct SnapshotBuilder {
    meta: Meta,
    writer: Option<Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync>>,
    dir: PathBuf,
    lock: Arc<tokio::sync::Mutex<Option<Meta>>>,
    on_snapshot: Arc<dyn Fn(SnapshotEvent) + Send + Sync>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let writer = self.writer.take().ok_or_else(|| io_err("snapshot builder used twice"))?;
        let mut current = self.lock.lock().await;
        let (dir, meta) = (self.dir.clone(), self.meta.clone());
        let path = tokio::task::spawn_blocking(move || -> io::Result<PathBuf> {
            let tmp = dir.join(format!("snapshot.build-{}", meta.snapshot_id));
            let mut file = io::BufWriter::new(std::fs::File::create(&tmp)?);
            write_snapshot(&mut file, &meta, writer)?;
            file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            publish(&dir, &tmp)
        })
        .await
        .map_err(io_err)?
        .map_err(io_err)?;
        *current = Some(self.meta.clone());
        (self.on_snapshot)(SnapshotEvent::Built);
        let file = tokio::fs::File::open(path).await.map_err(io_err)?;
        Ok(Snapshot { meta: self.meta.clone(), snapshot: Box::new(file) })
    }
}

impl<S: GroupState> RaftStateMachine<TypeConfig> for GroupStateMachine<S> {
    type SnapshotBuilder = SnapshotBuilder;

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

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        let a = self.shared.read().unwrap();
        let last = a.last_applied;
        let meta = Meta {
            last_log_id: last,
            last_membership: a.membership.clone(),
            snapshot_id: format!(
                "{}-{}-{}",
                last.map_or(0, |l| l.leader_id.term),
                last.map_or(0, |l| l.index),
                rand::random::<u32>()
            ),
        };
        SnapshotBuilder {
            meta,
            writer: Some(a.state.snapshot_writer()),
            dir: self.dir.clone(),
            lock: self.snapshot_lock.clone(),
            on_snapshot: self.on_snapshot.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let path = self.dir.join("snapshot.receiving");
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .await
            .map_err(io_err)?;
        Ok(Box::new(file))
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Box<tokio::fs::File>) -> Result<(), StorageError> {
        let mut current = self.snapshot_lock.lock().await;
        let mut file = snapshot.into_std().await;
        file.sync_all().map_err(io_err)?;
        file.seek(SeekFrom::Start(0)).map_err(io_err)?;
        let shared = self.shared.clone();
        let dir = self.dir.clone();
        let meta2 = meta.clone();
        tokio::task::spawn_blocking(move || -> io::Result<()> {
            let mut a = shared.write().unwrap();
            let file_meta = read_snapshot(&mut file, &mut a.state)?;
            if file_meta.last_log_id != meta2.last_log_id {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot meta mismatch"));
            }
            a.last_applied = meta2.last_log_id;
            a.membership = meta2.last_membership.clone();
            publish(&dir, &dir.join("snapshot.receiving")).map(|_| ())
        })
        .await
        .map_err(io_err)?
        .map_err(io_err)?;
        *current = Some(meta.clone());
        (self.on_snapshot)(SnapshotEvent::Installed);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let current = self.snapshot_lock.lock().await;
        match current.as_ref() {
            None => Ok(None),
            Some(meta) => {
                let file = tokio::fs::File::open(self.dir.join(SNAPSHOT_FILE)).await.map_err(io_err)?;
                Ok(Some(Snapshot { meta: meta.clone(), snapshot: Box::new(file) }))
            }
        }
    }
}
