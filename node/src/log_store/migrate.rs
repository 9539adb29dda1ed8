//! Moves a Raft log written by fjall (releases before the log files of [`super::file`]) into
//! log files, once, at startup. Keys were `group (8 B BE) ‖ index (8 B BE)` in the keyspace
//! `raft_log` and `group ‖ name` (`vote`, `committed`, `purged`) in `raft_state`; values
//! are the same encodings the records hold.
//!
//! Crash-safe in steps: the fjall directory is renamed to `<dir>.fjall`, the log files are
//! written into `<dir>.new`, which is renamed to `<dir>`, and only then is `<dir>.fjall`
//! deleted. A restart at any step goes on from it.

use std::io;
use std::path::{Path, PathBuf};

use super::file::{self, Kind};
use super::FILE_BYTES;
use crate::durable::sync_dir;

fn beside(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_owned();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

/// Whether `dir` holds a fjall database: anything, but no log file.
fn holds_fjall(dir: &Path) -> io::Result<bool> {
    let names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => {
            entries.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect::<io::Result<_>>()?
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    Ok(!names.is_empty() && !names.iter().any(|n| file::seq_of(n).is_some()))
}

pub(super) fn from_fjall(dir: &Path) -> anyhow::Result<()> {
    let (old, new) = (beside(dir, "fjall"), beside(dir, "new"));
    let parent = dir.parent().unwrap_or(Path::new("."));
    if !old.exists() {
        if !holds_fjall(dir)? {
            return Ok(());
        }
        tracing::info!(dir = %dir.display(), "moving the Raft log out of fjall into log files");
        std::fs::rename(dir, &old)?;
        sync_dir(parent)?;
    }
    if !dir.exists() {
        if new.exists() {
            std::fs::remove_dir_all(&new)?;
        }
        crate::durable::create_private_dir(&new)?;
        copy(&old, &new).map_err(|e| anyhow::anyhow!("moving the Raft log out of {}: {e}", old.display()))?;
        std::fs::rename(&new, dir)?;
        sync_dir(parent)?;
    }
    std::fs::remove_dir_all(&old)?;
    sync_dir(parent)?;
    Ok(())
}

fn group_of(key: &[u8]) -> io::Result<(u64, &[u8])> {
    let (group, rest) = key.split_at_checked(8).ok_or_else(|| io::Error::other("a key shorter than a group id"))?;
    Ok((u64::from_be_bytes(group.try_into().expect("8 bytes")), rest))
}

fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    let db = fjall::Database::builder(from).open()?;
    let entries = db.keyspace("raft_log", fjall::KeyspaceCreateOptions::default)?;
    let state = db.keyspace("raft_state", fjall::KeyspaceCreateOptions::default)?;
    let mut records = Vec::new();
    let mut seq = 1;
    let mut put = |records: &mut Vec<u8>, kind, group, parts: [&[u8]; 2]| -> io::Result<()> {
        file::put(records, kind, group, |b| {
            parts.iter().for_each(|p| b.extend_from_slice(p));
            Ok(())
        })?;
        if records.len() as u64 >= FILE_BYTES {
            file::create(to, seq, records)?;
            seq += 1;
            records.clear();
        }
        Ok(())
    };
    for kv in state.iter() {
        let (key, value) = kv.into_inner()?;
        let (group, name) = group_of(&key)?;
        let kind = match name {
            b"vote" => Kind::Vote,
            b"committed" => Kind::Committed,
            b"purged" => Kind::Purged,
            _ => continue,
        };
        put(&mut records, kind, group, [&value, &[]])?;
    }
    for kv in entries.iter() {
        let (key, value) = kv.into_inner()?;
        let (group, index) = group_of(&key)?;
        let index: [u8; 8] = index.try_into().map_err(|_| io::Error::other("an entry key of another length"))?;
        put(&mut records, Kind::Entry, group, [&u64::from_be_bytes(index).to_le_bytes(), &value])?;
    }
    if !records.is_empty() {
        file::create(to, seq, &mut records)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use openraft::storage::RaftLogStorage;
    use openraft::{CommittedLeaderId, RaftLogReader};

    use super::*;
    use crate::log_store::LogDb;
    use crate::metrics::NodeMetrics;
    use crate::types::{Command, Entry, LogId, Vote};

    fn id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(2, 1), index)
    }

    fn entry(index: u64) -> Entry {
        let payload =
            openraft::EntryPayload::Normal(Command::Ingest { batch_id: index.into(), payload: vec![9; 300].into() });
        Entry { log_id: id(index), payload }
    }

    /// A log as releases before the log files wrote it: entries of groups 0 and 3, group 3
    /// purged up to 2 (entries 1 and 2 still there, as a crash between mark and removal
    /// leaves them), a vote and a committed mark.
    fn write_fjall_log(dir: &Path) {
        let db = fjall::Database::builder(dir).open().unwrap();
        let entries = db.keyspace("raft_log", fjall::KeyspaceCreateOptions::default).unwrap();
        let state = db.keyspace("raft_state", fjall::KeyspaceCreateOptions::default).unwrap();
        let key = |group: u64, tail: &[u8]| [&group.to_be_bytes()[..], tail].concat();
        for (group, indexes) in [(0u64, 1..=4u64), (3, 1..=6)] {
            for i in indexes {
                entries.insert(key(group, &i.to_be_bytes()), crate::persist::encode_entry(&entry(i)).unwrap()).unwrap();
            }
        }
        state.insert(key(3, b"purged"), crate::persist::encode_log_id(&id(2))).unwrap();
        state.insert(key(3, b"vote"), crate::persist::encode_vote(&Vote::new_committed(2, 1))).unwrap();
        state.insert(key(0, b"committed"), crate::persist::encode_log_id(&id(4))).unwrap();
        state.insert(*b"writable", []).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }

    async fn assert_moved(dir: &Path) {
        let db = LogDb::open_with(dir, Arc::new(NodeMetrics::default()), false).unwrap();
        let (mut meta, mut shard) = (db.group(0), db.group(3));
        let indexes = |es: Vec<Entry>| es.iter().map(|e| e.log_id.index).collect::<Vec<_>>();
        assert_eq!(indexes(meta.try_get_log_entries(..).await.unwrap()), vec![1, 2, 3, 4]);
        assert_eq!(meta.read_committed().await.unwrap(), Some(id(4)));
        let got = shard.try_get_log_entries(..).await.unwrap();
        assert_eq!(got, (3..=6).map(entry).collect::<Vec<_>>());
        assert_eq!(shard.get_log_state().await.unwrap().last_purged_log_id, Some(id(2)));
        assert_eq!(shard.read_vote().await.unwrap(), Some(Vote::new_committed(2, 1)));
        assert!(!beside(dir, "fjall").exists() && !beside(dir, "new").exists());
    }

    #[tokio::test]
    async fn a_log_written_by_fjall_is_moved_into_log_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("raft-log");
        write_fjall_log(&dir);
        assert_moved(&dir).await;
        // Opened again, it is read as log files, not moved twice.
        assert_moved(&dir).await;
    }

    /// A restart at any step of the move goes on from that step.
    #[tokio::test]
    async fn a_move_cut_short_by_a_crash_goes_on_at_the_next_start() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("raft-log");
        // Renamed aside, and a half-written `.new`.
        write_fjall_log(&dir);
        std::fs::rename(&dir, beside(&dir, "fjall")).unwrap();
        std::fs::create_dir(beside(&dir, "new")).unwrap();
        std::fs::write(beside(&dir, "new").join(file::name(1)), b"SXWL").unwrap();
        assert_moved(&dir).await;

        // Moved, but the fjall copy not yet deleted.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("raft-log");
        write_fjall_log(&beside(&dir, "fjall"));
        std::fs::create_dir(beside(&dir, "new")).unwrap();
        copy(&beside(&dir, "fjall"), &beside(&dir, "new")).unwrap();
        std::fs::rename(beside(&dir, "new"), &dir).unwrap();
        assert_moved(&dir).await;
    }
}
