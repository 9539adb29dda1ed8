//! The web dashboard, end to end: `sextant dev` serves it (HTML, hashed assets, headers) without
//! taking any API path, and a real browser (Debian's Chromium, driven by playwright-core from
//! `web/node_modules`, both installed by scripts/test.sh) signs in and uses every page against
//! data ingested through the API (web/e2e/dashboard.mjs). Screenshots land in
//! `target/dashboard-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{get_json, http, Dev, LogsOnPanic};
use serde_json::{json, Value};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

async fn post(url: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Value {
    let mut req = http().post(format!("{url}{path}")).json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "POST {path}: {status} {body}");
    body
}

#[tokio::test]
async fn dashboard_is_served_with_its_headers_and_never_shadows_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start(dir.path()).await;
    let client = reqwest::Client::builder().no_gzip().build().unwrap();

    // The HTML at / and at every page of the application, never cached, with a CSP.
    for path in ["/", "/traces", "/traces/abc", "/settings/api-keys", "/login"] {
        let resp = client.get(format!("{}{path}", dev.url)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers().clone();
        assert_eq!(h["content-type"], "text/html; charset=utf-8", "{path}");
        assert_eq!(h["cache-control"], "no-cache");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
        let html = resp.text().await.unwrap();
        assert!(html.contains(r#"<div id="app">"#));
    }

    // Every asset the HTML references: immutable, typed, gzip on request.
    let html = client.get(format!("{}/", dev.url)).send().await.unwrap().text().await.unwrap();
    let assets: Vec<&str> = html.split('"').filter(|s| s.starts_with("/assets/")).collect();
    assert!(assets.iter().any(|a| a.ends_with(".js")) && assets.iter().any(|a| a.ends_with(".css")), "{html}");
    for a in assets {
        let plain = client.get(format!("{}{a}", dev.url)).send().await.unwrap();
        assert_eq!(plain.status(), 200, "{a}");
        assert_eq!(plain.headers()["cache-control"], "public, max-age=31536000, immutable");
        let ty = plain.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ty.starts_with(if a.ends_with(".js") { "text/javascript" } else { "text/css" }), "{a}: {ty}");
        let raw = plain.bytes().await.unwrap();
        let gz = client.get(format!("{}{a}", dev.url)).header("accept-encoding", "gzip").send().await.unwrap();
        assert_eq!(gz.headers()["content-encoding"], "gzip");
        let gz = gz.bytes().await.unwrap();
        assert!(gz.len() < raw.len());
        let mut unzipped = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut unzipped).unwrap();
        assert_eq!(unzipped, raw);
    }

    // API and capture paths keep their own answers: JSON errors, never the HTML.
    for (method, path, status) in [
        ("GET", "/api/v1/nope", 404),
        ("GET", "/api/v1/traces", 401),
        ("GET", "/projects", 401),
        ("GET", "/v1/batch", 405),
        ("GET", "/auth/login", 405),
        ("GET", "/assets/missing-00000000.js", 404),
        ("GET", "/nothing-here", 404),
        ("POST", "/traces", 405),
    ] {
        let resp = client.request(method.parse().unwrap(), format!("{}{path}", dev.url)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{method} {path}");
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(body["error"]["code"].is_string(), "{method} {path}: {body}");
    }
}

/// What the browser needs: Chromium, Node.js and playwright-core (scripts/test.sh installs
/// them). Missing ones fail the test with what to run; they are never skipped silently.
fn browser_tools() -> (PathBuf, PathBuf) {
    let chromium = PathBuf::from(std::env::var("SEXTANT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    let web = Path::new(ROOT).join("web");
    assert!(chromium.exists(), "{} is missing: apt-get install chromium (scripts/test.sh does)", chromium.display());
    assert!(
        web.join("node_modules/playwright-core").exists(),
        "web/node_modules is missing: (cd web && npm ci) (scripts/test.sh does)"
    );
    (chromium, web)
}

/// A webhook receiver on loopback that answers every request 200; its URL.
async fn webhook_receiver() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Requests are small JSON bodies: read what arrives, then answer.
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                loop {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                    let text = String::from_utf8_lossy(&got);
                    if let Some(head_end) = text.find("\r\n\r\n") {
                        let len = text[..head_end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= head_end + 4 + len {
                            break;
                        }
                    }
                }
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            });
        }
    });
    format!("http://{addr}/hooks/sextant")
}

/// A short rrweb recording: a page whose heading changes two seconds in, and mouse moves.
fn recording(t0: i64) -> Vec<Value> {
    let node = json!({"type": 0, "id": 1, "childNodes": [
        {"type": 1, "name": "html", "publicId": "", "systemId": "", "id": 2},
        {"type": 2, "tagName": "html", "attributes": {}, "id": 3, "childNodes": [
            {"type": 2, "tagName": "head", "attributes": {}, "id": 4, "childNodes": []},
            {"type": 2, "tagName": "body", "attributes": {"style": "font: 32px sans-serif; background: #fff"}, "id": 5, "childNodes": [
                {"type": 2, "tagName": "h1", "attributes": {}, "id": 6, "childNodes": [
                    {"type": 3, "textContent": "Welcome to the shop", "id": 7}]}]}]}]});
    let mut events = vec![
        json!({"type": 4, "data": {"href": "http://shop.example/", "width": 800, "height": 450}, "timestamp": t0}),
        json!({"type": 2, "data": {"node": node, "initialOffset": {"left": 0, "top": 0}}, "timestamp": t0 + 10}),
    ];
    for i in 1..=8 {
        events.push(json!({"type": 3, "timestamp": t0 + i * 500,
            "data": {"source": 1, "positions": [{"x": 40 * i, "y": 30 * i, "id": 5, "timeOffset": 0}]}}));
    }
    events.push(json!({"type": 3, "timestamp": t0 + 2000,
        "data": {"source": 0, "texts": [{"id": 7, "value": "Order confirmed"}], "attributes": [], "removes": [], "adds": []}}));
    events.sort_by_key(|e| e["timestamp"].as_i64());
    events
}

#[tokio::test]
async fn dashboard_pages_work_in_a_real_browser() {
    let (chromium, web) = browser_tools();
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev =
        Dev::start_with(dir.path(), &["--api-rps", "100000", "--auth-rps", "1000", "--alert-interval", "1"], &[]).await;
    let url = dev.url.clone();
    let hook_url = webhook_receiver().await;
    let key = dev.api_key().to_owned();
    let ptok = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let now = jiff::Timestamp::now().as_millisecond();

    // A trace across three services, with one failing database call.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let span = |id: &str, parent: Option<&str>, svc: &str, op: &str, off: i64, dur: f64, status: &str, attrs: Value| {
        json!({"trace_id": trace, "span_id": id, "parent_span_id": parent, "service_name": svc, "operation": op,
               "timestamp": now - 60_000 + off, "duration_ms": dur, "status": status, "attributes": attrs})
    };
    let spans = vec![
        span("a1", None, "frontend", "GET /checkout", 0, 180.0, "ok", json!({"http.method": "GET"})),
        span("b1", Some("a1"), "payments", "POST /charge", 20, 120.0, "ok", json!({})),
        span("c1", Some("b1"), "postgres", "SELECT orders", 30, 15.0, "ok", json!({"db.system": "postgresql"})),
        span(
            "c2",
            Some("b1"),
            "postgres",
            "UPDATE orders",
            60,
            70.0,
            "error",
            json!({"exception.type": "DeadlockDetected", "exception.message": "deadlock detected on orders"}),
        ),
    ];
    post(&url, "/api/v1/ingest/spans", &[("X-API-Key", &key)], &json!({"spans": spans})).await;
    let logs = vec![
        json!({"timestamp": now - 59_900, "level": "error", "service": "payments", "message": "Charge declined for order 4411", "trace_id": trace, "span_id": "b1"}),
        json!({"timestamp": now - 50_000, "level": "warn", "service": "payments", "message": "card declined, retrying", "attributes": {"attempt": 2}}),
        json!({"timestamp": now - 40_000, "level": "info", "service": "frontend", "message": "checkout page rendered"}),
    ];
    post(&url, "/api/v1/ingest/logs", &[("X-API-Key", &key)], &json!({"logs": logs})).await;
    // Enough lines for two pages of the log table.
    for chunk in 0..3i64 {
        let bulk: Vec<Value> = (0..500i64)
            .map(|i| {
                json!({"timestamp": now - 300_000 - (chunk * 500 + i) * 100, "level": "debug", "service": "worker",
                            "message": format!("bulk job {} finished", chunk * 500 + i)})
            })
            .collect();
        post(&url, "/api/v1/ingest/logs", &[("X-API-Key", &key)], &json!({"logs": bulk})).await;
    }
    let metrics: Vec<Value> = (0..30)
        .flat_map(|i| {
            ["web-1", "db-1"].map(|h| json!({"timestamp": now - (30 - i) * 60_000, "hostname": h,
                "cpu_percent": 20.0 + (i % 7) as f64 * 8.0, "memory_used_bytes": 2_000_000_000u64 + i as u64 * 10_000_000,
                "memory_total_bytes": 8_000_000_000u64, "disk_used_percent": 41.5,
                "network_rx_bytes_per_sec": 120_000.0, "network_tx_bytes_per_sec": 80_000.0}))
        })
        .collect();
    post(&url, "/api/v1/ingest/infrastructure", &[("X-API-Key", &key)], &json!({"metrics": metrics})).await;

    // Twelve users over six days: all sign up, eight activate, five of them buy, and those of
    // them who signed up more than a day ago buy again the next day.
    const DAY: i64 = 86_400_000;
    let mut events = Vec::new();
    for u in 0..12i64 {
        let t = now - DAY / 2 * u - 7_200_000;
        events.push(json!({"event": "signup", "distinct_id": format!("user-{u}"), "timestamp": t}));
        if u < 8 {
            events.push(json!({"event": "activate", "distinct_id": format!("user-{u}"), "timestamp": t + 600_000}));
        }
        if u < 5 {
            events.push(json!({"event": "purchase", "distinct_id": format!("user-{u}"), "timestamp": t + 1_200_000}));
            if t + DAY < now {
                events.push(json!({"event": "purchase", "distinct_id": format!("user-{u}"), "timestamp": t + DAY}));
            }
        }
    }
    let event_total = events.len();
    let purchases = events.iter().filter(|e| e["event"] == "purchase").count();
    post(&url, "/v1/batch", &[], &json!({"token": ptok, "events": events})).await;
    let replay = "session-7f3a";
    post(
        &url,
        "/v1/replay/events",
        &[],
        &json!({"token": ptok, "session_id": replay, "distinct_id": "user-0", "events": recording(now - 120_000)}),
    )
    .await;

    // The counts the browser must show are the API's.
    let jwt = dev.token().await;
    let (s, funnel) = get_json(
        &url,
        &jwt,
        "/api/funnel?steps=signup,activate,purchase&window=14&window_unit=day&range=30d&order=ordered",
    )
    .await;
    assert_eq!(s, 200, "{funnel}");
    let counts: Vec<u64> = funnel["steps"].as_array().unwrap().iter().map(|s| s["count"].as_u64().unwrap()).collect();
    assert_eq!(counts, [12, 8, 5]);

    let shots = Path::new(ROOT).join("target/dashboard-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let expect = json!({
        "email": dev.creds["email"], "password": dev.creds["password"], "api_key": key,
        "trace_id": trace, "trace_root": "GET /checkout", "trace_spans": 4,
        "exception_message": "deadlock detected on orders",
        "log_word": "declined", "log_matches": 2, "bulk_word": "bulk", "bulk_lines": 1500,
        "apm_operation": "POST /charge", "error_type": "DeadlockDetected", "host": "web-1",
        "event_total": event_total, "purchases": purchases, "users": 12,
        "funnel_steps": ["signup", "activate", "purchase"], "funnel_counts": counts,
        "hook_url": hook_url, "replay_id": replay, "replay_first_text": "Welcome to the shop", "replay_later_text": "Order confirmed",
    });
    // Off the runtime's thread: the webhook receiver must keep answering meanwhile.
    let browser = shots.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(web.join("e2e/dashboard.mjs"))
            .current_dir(&web)
            .env("SEXTANT_URL", &url)
            .env("SCREENSHOT_DIR", &browser)
            .env("CHROMIUM", &chromium)
            .env("DASHBOARD_EXPECT", expect.to_string())
            .output()
            .expect("run node (Node.js 20+; scripts/test.sh checks for it)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "browser test failed (screenshots in {}):\n{stdout}\n{stderr}", shots.display());
    assert!(stdout.contains("all pages passed"), "{stdout}");
}
