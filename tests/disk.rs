//! Disk admission on a real small filesystem: a `sextant dev` whose data directory is a
//! size-limited tmpfs refuses writes with 503 `disk_full` once the disk passes its high-water
//! mark, keeps answering reads, and takes writes again when space returns; a disk filled to its
//! last byte stops the node, which a restart recovers on its reserve.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::nemesis::Tmpfs;
use crate::common::*;
use serde_json::Value;

/// A data directory on a tmpfs of `mib` MiB (unmounted before its holder is deleted), or
/// `None` where mounting one is not allowed (not root): the test is then skipped.
fn small_disk(mib: u64) -> Option<(tempfile::TempDir, Tmpfs, PathBuf)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a tmpfs needs root");
        return None;
    }
    let holder = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&holder.path().join("fs"), mib);
    let dir = fs.at.join("data");
    std::fs::create_dir(&dir).unwrap();
    Some((holder, fs, dir))
}

async fn post(dev: &Dev, prefix: &str) -> reqwest::Response {
    post_spans(&dev.url, dev.api_key(), &spans_batch(prefix, 2, 2)).await
}

#[tokio::test]
async fn a_full_disk_refuses_writes_with_503_keeps_reads_and_takes_writes_again_when_space_returns() {
    let Some((_holder, fs, dir)) = small_disk(96) else { return };
    let flags = [
        "--shards",
        "1",
        "--disk-high-water",
        "60",
        "--disk-min-free-mib",
        "0",
        "--ingest-rps",
        "100000",
        "--api-rps",
        "100000",
    ];
    let dev = Dev::start_with(&dir, &flags, &[]).await;
    let token = dev.token().await;
    assert_eq!(post(&dev, "before").await.status(), 200);

    // 70 of 96 MiB: over the 60 % mark.
    let ballast = fs.at.join("ballast");
    std::fs::write(&ballast, vec![1u8; 70 << 20]).unwrap();
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let (refused, prefix): (Value, String) =
        wait_for("writes refused for disk space", Duration::from_secs(20), || async {
            // Batches sent before the next probe (every second) are still taken.
            let prefix = format!("during{}", attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            let resp = post(&dev, &prefix).await;
            if resp.status() != 503 {
                return None;
            }
            assert_eq!(resp.headers().get("retry-after").unwrap(), "5");
            Some((resp.json::<Value>().await.unwrap(), prefix))
        })
        .await;
    assert_eq!(refused["error"]["code"], "disk_full", "{refused}");
    assert_eq!(refused["error"]["details"]["retry_after_seconds"], 5);
    assert!(get_trace(&dev.url, &token, "before-t0").await.is_some(), "reads go on while writes are refused");
    assert_eq!(metric(&dev.internal_url, "sextant_node_disk_writes_refused").await, Some(1.0));
    let log = metric(&dev.internal_url, "sextant_node_disk_bytes{component=\"raft_log\"}").await.unwrap();
    assert!(log > 0.0, "the Raft log's disk use is reported");

    std::fs::remove_file(&ballast).unwrap();
    wait_for("writes taken again", Duration::from_secs(20), || async {
        (post(&dev, "after").await.status() == 200).then_some(())
    })
    .await;
    assert!(get_trace(&dev.url, &token, "after-t0").await.is_some());
    assert!(get_trace(&dev.url, &token, "before-t0").await.is_some());
    assert!(get_trace(&dev.url, &token, &format!("{prefix}-t0")).await.is_none(), "a refused batch is not stored");
}

/// Writes `path` until the filesystem has no byte left.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    for chunk in [1 << 20, 4096, 1] {
        let bytes = vec![7u8; chunk];
        while file.write_all(&bytes).is_ok() {}
    }
    let _ = file.sync_all();
}

/// A post that may find the process gone: the status, or None.
async fn try_post(dev: &Dev, prefix: &str) -> Option<u16> {
    let body = spans_batch(prefix, 2, 2);
    let resp = http().post(format!("{}/api/v1/ingest/spans", dev.url)).header("X-API-Key", dev.api_key()).json(&body);
    Some(resp.timeout(Duration::from_secs(10)).send().await.ok()?.status().as_u16())
}

/// The disk fills to its last byte with admission off (`--disk-high-water 100`: as when
/// something else fills the disk faster than a probe sees it). The write that finds no room
/// stops the node: it releases its reserve and exits with 75. Started again, as a supervisor
/// does, it recovers on the reserve's room, serves reads and refuses writes with 503
/// `disk_full`; once space returns it takes writes and reserves its room again, and every
/// acknowledged batch is there.
#[tokio::test]
async fn a_disk_full_to_the_last_byte_stops_the_node_and_a_restart_recovers_on_its_reserve() {
    let Some((_holder, fs, dir)) = small_disk(64) else { return };
    let flags = |mark| {
        ["--shards", "1", "--disk-high-water", mark, "--disk-min-free-mib", "0", "--disk-reserve-mib", "4"]
            .into_iter()
            .chain(["--ingest-rps", "100000", "--api-rps", "100000"])
            .collect::<Vec<_>>()
    };
    let mut dev = Dev::start_with(&dir, &flags("100"), &[]).await;
    let reserve = dir.join("node").join("reserve");
    wait_for("the reserve", Duration::from_secs(20), || async {
        (std::fs::metadata(&reserve).ok()?.len() == 4 << 20).then_some(())
    })
    .await;
    let mut acked = Vec::new();
    for b in 0..3 {
        let prefix = format!("before{b}");
        assert_eq!(post(&dev, &prefix).await.status(), 200);
        acked.push(prefix);
    }

    let ballast = fs.at.join("ballast");
    fill(&ballast);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = dev.proc.exit_status() {
            break status;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("dev.log")).unwrap_or_default();
            panic!("the node went on without disk space:\n{}", &log[log.len().saturating_sub(6000)..]);
        }
        let prefix = format!("full{}", acked.len());
        if try_post(&dev, &prefix).await == Some(200) {
            acked.push(prefix);
        }
    };
    assert_eq!(status.code(), Some(75), "{status}");
    assert!(!reserve.exists(), "the reserve was released");
    let log = std::fs::read_to_string(dir.join("dev.log")).unwrap();
    assert!(log.contains("storage stopped on an error"), "{log}");

    // Restarted with admission on, as it normally runs.
    let dev = Dev::start_with(&dir, &flags("60"), &[]).await;
    let token = dev.token().await;
    for prefix in &acked {
        assert!(get_trace(&dev.url, &token, &format!("{prefix}-t1")).await.is_some(), "{prefix} lost");
    }
    let refused = wait_for("writes refused for disk space", Duration::from_secs(20), || async {
        let resp = post(&dev, "refused").await;
        (resp.status() == 503).then_some(resp)
    })
    .await;
    assert_eq!(refused.json::<Value>().await.unwrap()["error"]["code"], "disk_full");

    std::fs::remove_file(&ballast).unwrap();
    wait_for("writes taken again", Duration::from_secs(20), || async {
        (post(&dev, "after").await.status() == 200).then_some(())
    })
    .await;
    acked.push("after".into());
    wait_for("the reserve made again", Duration::from_secs(20), || async {
        (std::fs::metadata(&reserve).ok()?.len() == 4 << 20).then_some(())
    })
    .await;
    for prefix in &acked {
        assert!(get_trace(&dev.url, &token, &format!("{prefix}-t1")).await.is_some(), "{prefix} lost");
    }
}
