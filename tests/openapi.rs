//! `/openapi.json` (docs/API.md, "OpenAPI document") against a real `sextant dev`: served
//! without credentials, and Schemathesis (PyPI, installed by scripts/test.sh; `SEXTANT_PYTHON`
//! may name a python that has it) sends every operation generated requests, authenticated
//! with the credentials each operation's security scheme names, and fails on any 5xx and on
//! any response its document does not describe (status, schema).

use std::time::Instant;

use crate::common::*;
use serde_json::Value;

/// Examples per operation and phase: about 50 operations, bounded for CI (see docs/API.md).
const EXAMPLES_PER_OPERATION: &str = "15";

#[tokio::test]
async fn openapi_json_is_served_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start(dir.path()).await;
    let resp = http().get(format!("{}/openapi.json", dev.url)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/api/v1/ingest/spans"]["post"]["requestBody"].is_object());
    assert!(doc["paths"]["/api/v1/traces"]["get"]["responses"]["200"].is_object());
}

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_response_outside_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    // Limits far above what the run sends, so its requests reach the handlers rather than a
    // 429 (which the document describes, and which other tests cover).
    let limits = ["--auth-rps", "100000", "--api-rps", "100000", "--ingest-rps", "100000", "--analytics-rps", "100000"];
    let dev = Dev::start_with(dir.path(), &limits, &[]).await;
    let jwt = dev.token().await;
    let ingest_token = dev.creds["ingest_token"].as_str().unwrap();
    // One block per security scheme of the document: Schemathesis sends, per operation, the
    // credential of the scheme that operation declares.
    let config = format!(
        r#"
[auth.openapi.jwt]
bearer = "{jwt}"

[auth.openapi.api_key]
api_key = "{key}"

[auth.openapi.api_key_bearer]
bearer = "{key}"

[auth.openapi.project_token]
api_key = "{ingest_token}"
"#,
        key = dev.api_key()
    );
    let config_path = dir.path().join("schemathesis.toml");
    std::fs::write(&config_path, config).unwrap();
    let python = std::env::var("SEXTANT_PYTHON").unwrap_or_else(|_| "python3".into());
    let started = Instant::now();
    let out = std::process::Command::new(&python)
        .current_dir(dir.path())
        .args(["-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())"])
        .args(["--config-file", config_path.to_str().unwrap(), "--no-color", "run"])
        .arg(format!("{}/openapi.json", dev.url))
        .args(["--checks", "not_a_server_error,status_code_conformance,response_schema_conformance"])
        .args(["--phases", "examples,coverage,fuzzing", "--max-examples", EXAMPLES_PER_OPERATION])
        // One worker: schemathesis's workers are threads, and CPython 3.11.7's ast module is not
        // thread-safe (hypothesis parses lambdas; "AST constructor recursion depth mismatch").
        .args(["--workers", "1", "--request-timeout", "30", "--seed", "1"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}; scripts/test.sh installs what the tests need"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("schemathesis took {:.0} s", started.elapsed().as_secs_f64());
    assert!(
        out.status.success(),
        "schemathesis found problems ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("No operations"), "schemathesis tested nothing:\n{stdout}");
}
