//! Disk admission on a real small filesystem: a `sextant dev` whose data directory is a
//! size-limited tmpfs refuses writes with 503 `disk_full` once the disk passes its high-water
//! mark, keeps answering reads, and takes writes again when space returns.

use std::time::Duration;

use crate::common::nemesis::Tmpfs;
use crate::common::*;
use serde_json::Value;

async fn post(dev: &Dev, prefix: &str) -> reqwest::Response {
    post_spans(&dev.url, dev.api_key(), &spans_batch(prefix, 2, 2)).await
}

#[tokio::test]
async fn a_full_disk_refuses_writes_with_503_keeps_reads_and_takes_writes_again_when_space_returns() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let holder = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&holder.path().join("fs"), 96);
    let dir = fs.at.join("data");
    std::fs::create_dir(&dir).unwrap();
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
