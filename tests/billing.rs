//! The payment provider as `sextant dev` configures it: the sandbox's pages are served by
//! default; Stripe replaces them, needs both secret files, and never prints them.

mod common;

use std::process::{Command, Stdio};

use common::*;

#[tokio::test]
async fn dev_serves_the_sandbox_payment_pages_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start(dir.path()).await;
    let resp = http().get(format!("{}/billing/sandbox/checkout/cs_sbx_unknown", dev.url)).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    // The sandbox's own page, not the API's JSON "no such endpoint".
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(resp.text().await.unwrap().contains("No such sandbox checkout"));
}

#[tokio::test]
async fn with_stripe_the_sandbox_pages_are_gone_and_the_secrets_stay_out_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let key = dir.path().join("stripe.key");
    let whsec = dir.path().join("stripe.whsec");
    std::fs::write(&key, "sk_test_never_logged_1234\n").unwrap();
    std::fs::write(&whsec, "whsec_never_logged_5678\n").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let dev = Dev::start_with(
        &data,
        &[
            "--billing-provider",
            "stripe",
            "--stripe-secret-key-file",
            key.to_str().unwrap(),
            "--stripe-webhook-secret-file",
            whsec.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let resp = http().get(format!("{}/billing/sandbox/checkout/cs_sbx_unknown", dev.url)).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let log = std::fs::read_to_string(data.join("dev.log")).unwrap();
    assert!(!log.contains("never_logged"), "a secret reached the log");
}

#[test]
fn stripe_without_its_webhook_secret_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("stripe.key");
    std::fs::write(&key, "sk_test_never_logged_1234").unwrap();
    let out = Command::new(BIN)
        .args(["dev", "--data-dir", dir.path().to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--internal-listen", "127.0.0.1:0", "--billing-provider", "stripe"])
        .args(["--stripe-secret-key-file", key.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("--stripe-webhook-secret-file"), "{text}");
    assert!(!text.contains("never_logged"), "{text}");
}
