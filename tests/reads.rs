//! Observability reads end to end against `sextant dev` (4 shards; issue 5): generated data
//! with known answers, checked exactly (percentiles within 1% of the exact value), cursor
//! pagination over several pages, tenant isolation and bad parameters.

use std::path::Path;

use crate::common::*;
use serde_json::{json, Value};

async fn start_dev(dir: &Path) -> Dev {
    Dev::start_with(dir, &["--api-rps", "100000", "--auth-rps", "10000", "--ingest-rps", "10000"], &[]).await
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

fn rfc3339(ms: i64) -> String {
    sextant_model::time::format_nanos(ms * 1_000_000)
}

async fn ingest(dev: &Dev, kind: &str, body: Value) {
    let resp = http()
        .post(format!("{}/api/v1/ingest/{kind}", dev.url))
        .header("X-API-Key", dev.api_key())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

async fn get(dev: &Dev, token: &str, path_and_query: &str) -> (u16, Value) {
    get_json(&dev.url, token, path_and_query).await
}

async fn ok(dev: &Dev, token: &str, path_and_query: &str) -> Value {
    let (status, body) = get(dev, token, path_and_query).await;
    assert_eq!(status, 200, "{path_and_query}: {body}");
    body
}

async fn expect_error(dev: &Dev, token: &str, path_and_query: &str, status: u16, code: &str) {
    let (got, body) = get(dev, token, path_and_query).await;
    assert_eq!(got, status, "{path_and_query}: {body}");
    assert_eq!(body["error"]["code"], code, "{path_and_query}: {body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

/// Every item of a list, following `next_cursor`; also returns the number of pages.
async fn walk(dev: &Dev, token: &str, path: &str, query: &str) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut q = query.to_owned();
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={c}"));
        }
        let page = ok(dev, token, &format!("{path}?{q}")).await;
        pages += 1;
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(pages < 1000, "pagination does not end");
    }
    (items, pages)
}

/// A second org, signed up through the API: its token sees only its own (empty) project.
async fn other_org(dev: &Dev) -> String {
    let resp = http()
        .post(format!("{}/auth/signup", dev.url))
        .json(&json!({"email": "other@example.com", "password": "correct horse battery", "name": "O", "org_name": "Other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    resp.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned()
}

fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[tokio::test]
async fn trace_list_pages_filters_detail_isolation_and_bad_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let dev = start_dev(dir.path()).await;
    let token = dev.token().await;
    let base = now_ms() - 30 * 60 * 1000;
    let start = |i: i64| base + i * 1000;
    // 25 traces; children arrive in one batch and roots in a later one (out of order).
    let mut children = Vec::new();
    let mut roots = Vec::new();
    for i in 0..25i64 {
        let trace = format!("tr-{i}");
        roots.push(json!({"trace_id": trace, "span_id": "root", "service_name": "web",
            "operation": format!("GET /r{}", i % 3), "timestamp": start(i), "duration_ms": 10 + i}));
        children.push(json!({"trace_id": trace, "span_id": "api", "parent_span_id": "root", "service_name": "api",
            "operation": "POST /pay", "timestamp": start(i) + 5, "duration_ms": 3, "status": "ok"}));
        if i % 4 == 0 {
            children.push(json!({"trace_id": trace, "span_id": "db", "parent_span_id": "api", "service_name": "db",
                "operation": "SELECT", "timestamp": start(i) + 6, "duration_ms": 2, "status": "error"}));
        }
    }
    children.reverse();
    ingest(&dev, "spans", json!({ "spans": children })).await;
    ingest(&dev, "spans", json!({ "spans": roots })).await;

    let ids = |items: &[Value]| items.iter().map(|t| t["trace_id"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let expect = |pred: &dyn Fn(i64) -> bool| {
        (0..25i64).rev().filter(|i| pred(*i)).map(|i| format!("tr-{i}")).collect::<Vec<_>>()
    };

    // Default window (last hour), newest first, 7 per page: 4 pages, no skips or repeats.
    let (all, pages) = walk(&dev, &token, "/api/v1/traces", "limit=7").await;
    assert_eq!(ids(&all), expect(&|_| true));
    assert_eq!(pages, 4);
    let t4 = all.iter().find(|t| t["trace_id"] == "tr-4").unwrap();
    assert_eq!(
        *t4,
        json!({"trace_id": "tr-4", "root_service": "web", "root_operation": "GET /r1", "start_time": rfc3339(start(4)),
            "duration_ms": 14.0, "span_count": 3, "error_count": 1, "services": ["api", "db", "web"], "status": "error"})
    );

    let list = |q: &'static str| {
        let dev = &dev;
        let token = &token;
        async move { walk(dev, token, "/api/v1/traces", q).await.0 }
    };
    assert_eq!(ids(&list("status=error&limit=3").await), expect(&|i| i % 4 == 0));
    assert_eq!(ids(&list("service=db").await), expect(&|i| i % 4 == 0));
    assert_eq!(ids(&list("service=api,db").await), expect(&|_| true));
    assert_eq!(ids(&list("operation=GET%20/r1&limit=2").await), expect(&|i| i % 3 == 1));
    assert_eq!(ids(&list("min_duration_ms=30").await), expect(&|i| i >= 20));
    let window = format!("from={}&to={}", start(5), start(9));
    assert_eq!(ids(&walk(&dev, &token, "/api/v1/traces", &window).await.0), expect(&|i| (5..9).contains(&i)));

    // Detail: the A4 shape, spans by timestamp.
    let detail = ok(&dev, &token, "/api/v1/traces/tr-4").await;
    assert_eq!(detail["start_time"], rfc3339(start(4)));
    assert_eq!(detail["duration_ms"], 14.0);
    assert_eq!(detail["services"], json!(["api", "db", "web"]));
    let spans: Vec<&str> = detail["spans"].as_array().unwrap().iter().map(|s| s["span_id"].as_str().unwrap()).collect();
    assert_eq!(spans, ["root", "api", "db"]);
    expect_error(&dev, &token, "/api/v1/traces/nope", 404, "not_found").await;

    // Another org sees nothing, and naming this org's project is a 404.
    let other = other_org(&dev).await;
    assert_eq!(ok(&dev, &other, "/api/v1/traces").await, json!({"items": [], "next_cursor": null}));
    let project = dev.creds["project_id"].as_str().unwrap();
    expect_error(&dev, &other, &format!("/api/v1/traces?project_id={project}"), 404, "not_found").await;
    expect_error(&dev, &other, "/api/v1/traces/tr-4", 404, "not_found").await;
    // The owner naming their own project explicitly sees the same list.
    assert_eq!(ids(&walk(&dev, &token, "/api/v1/traces", &format!("project_id={project}")).await.0).len(), 25);

    for (q, code) in [
        ("limit=0", "invalid_limit"),
        ("limit=1001", "invalid_limit"),
        ("from=yesterday", "invalid_parameter"),
        ("from=2000&to=1000", "invalid_time_range"),
        ("from=1969-12-31T00:00:00Z", "invalid_parameter"),
        ("cursor=%21%21", "invalid_cursor"),
        ("cursor=bm9wZQ", "invalid_cursor"),
        ("status=bad", "invalid_parameter"),
        ("min_duration_ms=-1", "invalid_parameter"),
        ("allow_partial=maybe", "invalid_parameter"),
    ] {
        expect_error(&dev, &token, &format!("/api/v1/traces?{q}"), 400, code).await;
    }
    // No credential at all.
    let resp = http().get(format!("{}/api/v1/traces", dev.url)).send().await.unwrap();
    assert_eq!(resp.status(), 401);

    // kill -9 and start again: the same pages from the replayed shards.
    let Dev { mut proc, .. } = dev;
    proc.kill();
    let dev = start_dev(dir.path()).await;
    let token = dev.token().await;
    let (again, _) = walk(&dev, &token, "/api/v1/traces", "limit=7").await;
    assert_eq!(again, all);
}

const WORDS: [&str; 8] = ["alpha", "beta", "gamma", "delta", "timeout", "payment", "failed", "retry"];
const LEVELS: [&str; 6] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];
const SERVICES: [&str; 3] = ["api", "web", "worker"];

struct Line {
    ms: i64,
    level: &'static str,
    service: &'static str,
    message: String,
    region: &'static str,
}

/// A brute-force reading of the A4 query language over one line (terms, phrases, -term,
/// field:value), independent of the server's implementation.
fn matches(line: &Line, q: &[&str]) -> bool {
    let tokens: Vec<String> = line
        .message
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    q.iter().all(|term| {
        if let Some(t) = term.strip_prefix('-') {
            !tokens.iter().any(|w| w == t)
        } else if let Some(p) = term.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            let p: Vec<&str> = p.split(' ').collect();
            tokens.windows(p.len()).any(|w| w.iter().zip(&p).all(|(a, b)| a == b))
        } else if let Some((field, value)) = term.split_once(':') {
            match field {
                "service" => line.service == value,
                "level" => line.level.eq_ignore_ascii_case(value),
                "region" => line.region == value,
                _ => false,
            }
        } else {
            tokens.iter().any(|w| w == term)
        }
    })
}

#[tokio::test]
async fn log_search_matches_a_brute_force_reference_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let dev = start_dev(dir.path()).await;
    let token = dev.token().await;
    let base = now_ms() - 20 * 60 * 1000;
    let mut x: u64 = 0x2545F4914F6CDD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let lines: Vec<Line> = (0..600i64)
        .map(|i| {
            let n = 3 + next() % 4;
            let words: Vec<&str> = (0..n).map(|_| WORDS[(next() % 8) as usize]).collect();
            Line {
                ms: base + i * 100,
                level: LEVELS[(next() % 6) as usize],
                service: SERVICES[(next() % 3) as usize],
                message: format!("{} Order-{i}", words.join(" ")),
                region: if next() % 2 == 0 { "eu" } else { "us" },
            }
        })
        .collect();
    // Half with trace ids (partitioned by trace), half spread at random over the shards.
    let logs: Vec<Value> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut v = json!({"timestamp": rfc3339(l.ms), "level": l.level.to_lowercase(), "service": l.service,
                "message": l.message, "attributes": {"region": l.region}});
            if i % 2 == 0 {
                v["trace_id"] = json!(format!("lt-{}", i % 37));
            }
            v
        })
        .collect();
    for chunk in logs.chunks(250) {
        ingest(&dev, "logs", json!({ "logs": chunk })).await;
    }

    let cases: [(&str, &[&str], &str); 8] = [
        ("", &[], ""),
        ("timeout", &["timeout"], ""),
        ("timeout -retry", &["timeout", "-retry"], ""),
        ("\"payment failed\"", &["\"payment failed\""], ""),
        ("region:eu alpha", &["region:eu", "alpha"], ""),
        ("service:api GAMMA", &["service:api", "gamma"], ""),
        ("level:error beta", &["level:error", "beta"], ""),
        ("delta", &["delta"], "&service=web&level=ERROR,fatal"),
    ];
    for (q, terms, extra) in cases {
        let expected: Vec<String> = lines
            .iter()
            .rev()
            .filter(|l| matches(l, terms))
            .filter(|l| extra.is_empty() || (l.service == "web" && (l.level == "ERROR" || l.level == "FATAL")))
            .map(|l| l.message.clone())
            .collect();
        let (items, pages) = walk(&dev, &token, "/api/v1/logs/search", &format!("q={}&limit=40{extra}", enc(q))).await;
        let got: Vec<String> = items.iter().map(|l| l["message"].as_str().unwrap().to_owned()).collect();
        assert_eq!(got, expected, "q={q}{extra}");
        assert_eq!(pages, expected.len().div_ceil(40).max(1), "q={q}");
    }
    // One line in full.
    let (items, _) = walk(&dev, &token, "/api/v1/logs/search", "q=order-7").await;
    assert_eq!(items.len(), 1);
    let l = &lines[7];
    assert_eq!(
        items[0],
        json!({"timestamp": rfc3339(l.ms), "level": l.level, "service": l.service, "message": l.message,
            "trace_id": null, "span_id": null, "attributes": {"region": l.region}})
    );

    let other = other_org(&dev).await;
    assert_eq!(ok(&dev, &other, "/api/v1/logs/search").await, json!({"items": [], "next_cursor": null}));
    expect_error(&dev, &token, "/api/v1/logs/search?q=%22open", 400, "invalid_query").await;
    expect_error(&dev, &token, "/api/v1/logs/search?level=LOUD", 400, "invalid_parameter").await;
    expect_error(&dev, &token, "/api/v1/logs/search?cursor=abc", 400, "invalid_cursor").await;
}

/// The value at rank ⌊q·(n−1)⌋, the rank the sketches report.
fn exact(sorted: &[f64], q: f64) -> f64 {
    sorted[(q * (sorted.len() - 1) as f64) as usize]
}

fn close(got: &Value, want: f64, what: &str) {
    let got = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
    assert!((got - want).abs() <= want * 0.01, "{what}: {got} vs exact {want}");
}

#[tokio::test]
async fn apm_service_map_errors_and_hosts_have_exact_answers() {
    let dir = tempfile::tempdir().unwrap();
    let dev = start_dev(dir.path()).await;
    let token = dev.token().await;
    let now = now_ms();
    let base = now - 20 * 60 * 1000;
    let n = 600i64;
    // web → api → db per trace; api latency skewed over three decades; every 10th api fails.
    let api_ms = |i: i64| 0.5 * (1 + (i * i * 7919) % 2003) as f64 * if i % 7 == 0 { 3.0 } else { 1.0 };
    let mut spans = Vec::new();
    for i in 0..n {
        let (trace, t) = (format!("apm-{i}"), base + i * 1000);
        let error = i % 10 == 0;
        spans.push(json!({"trace_id": trace, "span_id": "db", "parent_span_id": "api", "service_name": "db",
            "operation": "SELECT", "timestamp": t + 2, "duration_ms": 1.5}));
        let mut api = json!({"trace_id": trace, "span_id": "api", "parent_span_id": "root", "service_name": "api",
            "operation": "POST /pay", "timestamp": t + 1, "duration_ms": api_ms(i), "status": if error { "error" } else { "ok" }});
        if error {
            api["attributes"] = json!({"exception.type": "PaymentError",
                "exception.message": format!("card 4111{i} declined for order {i}")});
        }
        spans.push(api);
        spans.push(json!({"trace_id": trace, "span_id": "root", "service_name": "web",
            "operation": "GET /checkout", "timestamp": t, "duration_ms": 2000}));
    }
    for chunk in spans.chunks(900) {
        ingest(&dev, "spans", json!({ "spans": chunk })).await;
    }
    let mut logs = Vec::new();
    for i in 0..30 {
        logs.push(json!({"timestamp": base + i * 500, "level": "error", "service": "api",
            "message": format!("timeout after {} ms calling 10.0.{i}.1", 100 + i), "trace_id": format!("apm-{i}")}));
    }
    for i in 0..5 {
        logs.push(json!({"timestamp": base + i * 700, "level": "FATAL", "service": "worker",
            "message": format!("disk full on volume 'vol-{i}'")}));
        logs.push(json!({"timestamp": base + i * 700, "level": "info", "service": "worker", "message": "all good"}));
    }
    ingest(&dev, "logs", json!({ "logs": logs })).await;
    let host = |ms: i64, name: &str, cpu: f64| {
        json!({"timestamp": ms, "hostname": name, "cpu_percent": cpu,
        "memory_used_bytes": 1000, "memory_total_bytes": 4000})
    };
    let t0 = now - 4 * 60 * 1000;
    ingest(
        &dev,
        "infrastructure",
        json!({"metrics": [
            host(t0 + 65_000, "web-1", 10.0), host(t0 + 125_000, "web-1", 20.0), host(t0 + 185_000, "web-1", 30.0),
            host(t0 + 186_000, "web-1", 40.0), host(now - 10 * 60 * 1000, "old-1", 5.0),
        ]}),
    )
    .await;

    let (from, to) = (base - 60_000, now + 60_000);
    let range = format!("from={from}&to={to}");
    let seconds = (to - from) as f64 / 1000.0;

    // APM: exact counts and rates, percentiles within 1% of the exact ones.
    let apm = ok(&dev, &token, &format!("/api/v1/apm/endpoints?{range}")).await;
    let items = apm["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    let endpoint = |service: &str| items.iter().find(|e| e["service"] == service).unwrap().clone();
    let api = endpoint("api");
    assert_eq!(
        (api["operation"].as_str(), api["count"].as_u64(), api["error_count"].as_u64()),
        (Some("POST /pay"), Some(600), Some(60))
    );
    assert_eq!(api["error_rate"], 0.1);
    close(&api["rps"], 600.0 / seconds, "rps");
    let mut sorted: Vec<f64> = (0..n).map(api_ms).collect();
    let avg = sorted.iter().sum::<f64>() / n as f64;
    close(&api["avg_ms"], avg, "avg_ms");
    sorted.sort_by(f64::total_cmp);
    for (field, q) in [("p50_ms", 0.5), ("p90_ms", 0.9), ("p95_ms", 0.95), ("p99_ms", 0.99)] {
        close(&api[field], exact(&sorted, q), field);
    }
    assert_eq!(api["max_ms"].as_f64(), sorted.last().copied());
    let web = endpoint("web");
    assert_eq!(
        (web["count"].as_u64(), web["error_count"].as_u64(), web["max_ms"].as_f64()),
        (Some(600), Some(0), Some(2000.0))
    );
    close(&web["p99_ms"], 2000.0, "web p99");
    let only_db = ok(&dev, &token, &format!("/api/v1/apm/endpoints?{range}&service=db")).await;
    assert_eq!(only_db["items"].as_array().unwrap().len(), 1);
    let by_errors = ok(&dev, &token, &format!("/api/v1/apm/endpoints?{range}&sort=error_rate")).await;
    assert_eq!(by_errors["items"][0]["service"], "api");
    expect_error(&dev, &token, "/api/v1/apm/endpoints?sort=nope", 400, "invalid_parameter").await;

    // Service map: an edge per parent/child pair of different services.
    let map = ok(&dev, &token, &format!("/api/v1/service-map?{range}")).await;
    let nodes: Vec<(String, u64, f64)> = map["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["service"].as_str().unwrap().to_owned(),
                n["span_count"].as_u64().unwrap(),
                n["error_rate"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(nodes, [("api".into(), 600, 0.1), ("db".into(), 600, 0.0), ("web".into(), 600, 0.0)]);
    let edges = map["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 2);
    assert_eq!(
        (&edges[0]["source"], &edges[0]["target"], &edges[0]["call_count"], &edges[0]["error_count"]),
        (&json!("api"), &json!("db"), &json!(600), &json!(0))
    );
    assert_eq!(
        (&edges[1]["source"], &edges[1]["target"], &edges[1]["call_count"], &edges[1]["error_count"]),
        (&json!("web"), &json!("api"), &json!(600), &json!(60))
    );
    close(&edges[1]["p95_ms"], exact(&sorted, 0.95), "edge p95");
    close(&edges[0]["p95_ms"], 1.5, "db p95");

    // Errors: three groups, variable parts normalised away.
    let errors = ok(&dev, &token, &format!("/api/v1/errors?{range}")).await;
    let groups = errors["items"].as_array().unwrap();
    let summary: Vec<(String, String, String, u64, String)> = groups
        .iter()
        .map(|g| {
            (
                g["service"].as_str().unwrap().into(),
                g["type"].as_str().unwrap().into(),
                g["message"].as_str().unwrap().into(),
                g["count"].as_u64().unwrap(),
                g["source"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("api".into(), "PaymentError".into(), "card <num> declined for order <num>".into(), 60, "span".into()),
            ("api".into(), "".into(), "timeout after <num> ms calling <num>".into(), 30, "log".into()),
            ("worker".into(), "".into(), "disk full on volume '<str>'".into(), 5, "log".into()),
        ]
    );
    let pay = &groups[0];
    assert_eq!(pay["first_seen"], rfc3339(base + 1));
    assert_eq!(pay["last_seen"], rfc3339(base + 590 * 1000 + 1));
    assert_eq!(pay["sample_trace_id"], "apm-590");
    assert_eq!(groups[1]["sample_trace_id"], "apm-29");
    assert_eq!(groups[2]["sample_trace_id"], Value::Null);
    let fp = pay["fingerprint"].as_str().unwrap();
    // The detail: the group and its latest occurrences as sent.
    let mut detail = ok(&dev, &token, &format!("/api/v1/errors/{fp}?{range}")).await;
    let occurrences = detail.as_object_mut().unwrap().remove("occurrences").unwrap();
    assert_eq!(detail, *pay);
    let recent: Vec<i64> = (0..n).rev().filter(|i| i % 10 == 0).take(20).collect();
    let want: Vec<Value> = recent
        .iter()
        .map(|i| {
            json!({"timestamp": rfc3339(base + i * 1000 + 1), "trace_id": format!("apm-{i}"),
            "message": format!("card 4111{i} declined for order {i}")})
        })
        .collect();
    assert_eq!(occurrences, json!(want));
    expect_error(&dev, &token, &format!("/api/v1/errors/0000000000000000?{range}"), 404, "not_found").await;
    let worker = ok(&dev, &token, &format!("/api/v1/errors?{range}&service=worker")).await;
    assert_eq!(worker["items"].as_array().unwrap().len(), 1);

    // Hosts: latest sample per host, stale after five minutes; a series with empty steps.
    // The default window (a day) holds both hosts too.
    assert_eq!(ok(&dev, &token, "/api/v1/infrastructure/hosts").await["items"].as_array().unwrap().len(), 2);
    let hosts = ok(&dev, &token, &format!("/api/v1/infrastructure/hosts?{range}")).await;
    let hosts = hosts["items"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    assert_eq!((&hosts[0]["hostname"], &hosts[0]["status"]), (&json!("old-1"), &json!("stale")));
    assert_eq!(
        hosts[1],
        json!({"hostname": "web-1", "last_seen": rfc3339(t0 + 186_000), "cpu_percent": 40.0, "memory_used_bytes": 1000,
            "memory_total_bytes": 4000, "disk_used_percent": null, "network_rx_bytes_per_sec": null,
            "network_tx_bytes_per_sec": null, "status": "ok"})
    );
    let series =
        ok(&dev, &token, &format!("/api/v1/infrastructure/hosts/web-1/metrics?from={t0}&to={}&step=1m", t0 + 240_000))
            .await;
    let cpu: Vec<Value> = series["points"].as_array().unwrap().iter().map(|p| p["cpu_percent"].clone()).collect();
    assert_eq!(cpu, [Value::Null, json!(10.0), json!(20.0), json!(35.0)]);
    assert_eq!(series["points"][1]["t"], rfc3339(t0 + 60_000));
    assert_eq!(series["step_seconds"], 60);
    expect_error(&dev, &token, "/api/v1/infrastructure/hosts/web-1/metrics?step=0", 400, "invalid_parameter").await;
    expect_error(
        &dev,
        &token,
        "/api/v1/infrastructure/hosts/web-1/metrics?step=1s&from=0&to=86400000",
        400,
        "invalid_parameter",
    )
    .await;

    // Nothing of this project through another org.
    let other = other_org(&dev).await;
    for path in ["/api/v1/apm/endpoints", "/api/v1/errors", "/api/v1/infrastructure/hosts"] {
        let body = ok(&dev, &other, &format!("{path}?{range}")).await;
        assert_eq!(body["items"], json!([]), "{path}");
    }
    assert_eq!(ok(&dev, &other, &format!("/api/v1/service-map?{range}")).await, json!({"nodes": [], "edges": []}));
    expect_error(&dev, &other, &format!("/api/v1/errors/{fp}?{range}"), 404, "not_found").await;
}
