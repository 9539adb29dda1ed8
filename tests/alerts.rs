//! Alerts end to end (docs/API.md, "Alerts"): one storage node and two routers evaluating every
//! second. An error-rate rule fires on generated traffic within two intervals; the router
//! holding the evaluator lease is killed while the rule fires; the other takes over and
//! resolves the rule when the traffic is clean, and `system.alert_triggered` is published once.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

const SECRETS: [(&str, &str); 2] = [
    ("SEXTANT_CLUSTER_SECRET", "test-cluster-secret-0123456789abcdef"),
    ("SEXTANT_JWT_SECRET", "test-jwt-secret-0123456789abcdef0123456789"),
];
const INTERVAL_SECS: u64 = 1;

struct Routers {
    _logs: LogsOnPanic,
    _node: Proc,
    procs: Vec<Proc>,
    urls: Vec<String>,
    internal: Vec<String>,
    creds: Value,
}

impl Routers {
    async fn start(dir: &std::path::Path) -> Routers {
        let logs = LogsOnPanic::new(dir);
        let grpc = format!("127.0.0.1:{}", free_port());
        let node = spawn_lone_node(dir, &grpc, &SECRETS[..1]);
        let creds = dir.join("credentials.json");
        let interval = INTERVAL_SECS.to_string();
        let extra =
            ["--alert-interval", &interval, "--webhook-allow-private", "--webhook-allow-http", "--api-rps", "100000"];
        let RouterProcs { procs, urls, internal } = spawn_routers(dir, &grpc, 2, &extra, &creds, &SECRETS);
        let creds = wait_routers_serve(&urls, &creds).await;
        Routers { _logs: logs, _node: node, procs, urls, internal, creds }
    }

    /// Evaluation rounds router `i` recorded under the lease (its `/metrics`).
    async fn rounds(&self, i: usize) -> Option<f64> {
        let text = http().get(format!("{}/metrics", self.internal[i])).send().await.ok()?.text().await.ok()?;
        text.lines().find_map(|l| l.strip_prefix("sextant_router_alert_evaluation_rounds_total ")?.trim().parse().ok())
    }
}

fn spans(service: &str, n: usize, status: &str, tag: &str) -> Value {
    let now = jiff::Timestamp::now().as_millisecond();
    let spans: Vec<Value> = (0..n)
        .map(|i| {
            json!({"trace_id": format!("{tag}-{i}"), "span_id": "s0", "service_name": service,
                   "operation": "GET /pay", "timestamp": now, "duration_ms": 5.0, "status": status})
        })
        .collect();
    json!({ "spans": spans })
}

async fn send(url: &str, key: &str, body: Value) {
    let resp = post_spans(url, key, &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
}

async fn post_json(url: &str, token: &str, path: &str, body: Value) -> (u16, Value) {
    let resp = http().post(format!("{url}{path}")).bearer_auth(token).json(&body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The rule once its state is `state`.
async fn rule_in(url: &str, token: &str, id: &str, state: &str, timeout: Duration) -> Value {
    wait_for(&format!("the rule to be {state}"), timeout, || async {
        let (status, rule) = get_json(url, token, &format!("/api/v1/alerts/{id}")).await;
        (status == 200 && rule["state"] == state).then_some(rule)
    })
    .await
}

fn millis(rfc3339: &Value) -> i64 {
    rfc3339.as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_rate_alert_fires_resolves_and_survives_the_evaluators_death_without_firing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut routers = Routers::start(dir.path()).await;
    let key = routers.creds["api_key"].as_str().unwrap().to_owned();
    let (email, password) = (routers.creds["email"].as_str().unwrap(), routers.creds["password"].as_str().unwrap());
    let url = routers.urls[0].clone();
    let token = login(&url, email, password).await;

    // Deliveries are counted in meta whether or not anything listens at the URL.
    let nobody = format!("http://127.0.0.1:{}/hook", free_port());
    let (status, hook) = post_json(
        &url,
        &token,
        "/api/webhooks",
        json!({"url": nobody, "events": ["system.alert_triggered", "system.alert_resolved"]}),
    )
    .await;
    assert_eq!(status, 201, "{hook}");
    let (status, rule) = post_json(
        &url,
        &token,
        "/api/v1/alerts",
        json!({"name": "payments failing", "metric": "error_rate", "filter": {"service": "payments"},
               "comparison": ">", "threshold": 0.5, "window_minutes": 1}),
    )
    .await;
    assert_eq!(status, 201, "{rule}");
    let id = rule["id"].as_str().unwrap().to_owned();
    rule_in(&url, &token, &id, "no_data", Duration::from_secs(30)).await;

    send(&url, &key, spans("payments", 20, "error", "bad")).await;
    let acked_ms = jiff::Timestamp::now().as_millisecond();
    let firing = rule_in(&url, &token, &id, "firing", Duration::from_secs(30)).await;
    assert_eq!(firing["last_value"], 1.0);
    let fired_at = millis(&firing["history"].as_array().unwrap().last().unwrap()["at"]);
    // Two intervals, and as long again for a round's own queries and commit on a busy machine.
    let bound = 2 * 2 * INTERVAL_SECS as i64 * 1000;
    assert!(fired_at - acked_ms <= bound, "fired {} ms after the traffic", fired_at - acked_ms);

    // Kill the router holding the lease while the rule fires.
    // The holder is the router whose count of rounds moves; the other's stays put.
    let seen = std::sync::Mutex::new((routers.rounds(0).await.unwrap(), routers.rounds(1).await.unwrap()));
    let holder = wait_for("one router to hold the lease", Duration::from_secs(30), || async {
        let now = (routers.rounds(0).await?, routers.rounds(1).await?);
        let mut seen = seen.lock().unwrap();
        let moved = (now.0 > seen.0, now.1 > seen.1);
        *seen = now;
        match moved {
            (true, false) => Some(0),
            (false, true) => Some(1),
            _ => None,
        }
    })
    .await;
    routers.procs[holder].kill();
    let killed = Instant::now();
    let other = 1 - holder;
    let url = routers.urls[other].clone();
    let token = login(&url, email, password).await;
    let before = routers.rounds(other).await.unwrap();
    send(&url, &key, spans("payments", 100, "ok", "good")).await;

    wait_for("the other router to take over", Duration::from_secs(30), || async {
        (routers.rounds(other).await? > before).then_some(())
    })
    .await;
    // The lease lasts two intervals; every router tries once per interval.
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(3 * INTERVAL_SECS + 3), "took over after {took:?}");
    let ok = rule_in(&url, &token, &id, "ok", Duration::from_secs(30)).await;
    let value = ok["last_value"].as_f64().unwrap();
    assert!((value - 20.0 / 120.0).abs() < 1e-9, "{value}");

    let transitions: Vec<(String, String)> = ok["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["from"].as_str().unwrap().to_owned(), t["to"].as_str().unwrap().to_owned()))
        .collect();
    let pairs: Vec<(&str, &str)> = transitions.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(pairs, [("ok", "no_data"), ("no_data", "firing"), ("firing", "ok")]);
    let (status, deliveries) =
        get_json(&url, &token, &format!("/api/webhooks/{}/deliveries", hook["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{deliveries}");
    let mut events: Vec<&str> =
        deliveries["items"].as_array().unwrap().iter().map(|d| d["event"].as_str().unwrap()).collect();
    events.sort();
    assert_eq!(events, ["system.alert_resolved", "system.alert_triggered"], "one event per transition");

    let (status, list) = get_json(&url, &token, "/api/v1/alerts").await;
    assert_eq!(status, 200);
    assert_eq!(list["items"][0]["id"], id.as_str());
    assert!(list["items"][0].get("history").is_none(), "lists leave the history out");
    let resp = http().delete(format!("{url}/api/v1/alerts/{id}")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(get_json(&url, &token, &format!("/api/v1/alerts/{id}")).await.0, 404);
}

async fn ingest(url: &str, key: &str, path: &str, body: Value) {
    let resp = http().post(format!("{url}{path}")).header("X-API-Key", key).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{path}: {}", resp.text().await.unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sextant_dev_evaluates_log_host_and_latency_rules_and_holds_pending_for_its_duration() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let dev = Dev::start_with(dir.path(), &["--alert-interval", "1"], &[]).await;
    let (url, key, token) = (dev.url.clone(), dev.api_key().to_owned(), dev.token().await);
    // "pager" is the timeouts rule's target; "all" subscribes to every alert of the project.
    let nobody = format!("http://127.0.0.1:{}/hook", free_port());
    let mut hooks = Vec::new();
    for events in [json!(["signup"]), json!(["system.alert_triggered"])] {
        let (status, hook) = post_json(&url, &token, "/api/webhooks", json!({"url": nobody, "events": events})).await;
        assert_eq!(status, 201, "{hook}");
        hooks.push(hook["id"].as_str().unwrap().to_owned());
    }
    let (pager, all) = (hooks[0].clone(), hooks[1].clone());
    let unknown = json!({"name": "x", "metric": "log_count", "comparison": ">", "threshold": 1,
                         "window_minutes": 5, "webhook_id": "not-a-webhook"});
    let (status, body) = post_json(&url, &token, "/api/v1/alerts", unknown).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("unknown_webhook")), "{body}");
    let mut ids = Vec::new();
    for rule in [
        json!({"name": "timeouts", "metric": "log_count", "filter": {"level": "ERROR,FATAL", "query": "timeout"},
               "comparison": ">", "threshold": 2, "window_minutes": 5, "webhook_id": pager}),
        json!({"name": "db cpu", "metric": "cpu_percent", "filter": {"hostname": "db-1"},
               "comparison": ">=", "threshold": 90, "window_minutes": 5}),
        json!({"name": "slow api", "metric": "p95_latency_ms", "filter": {"service": "api"},
               "comparison": ">", "threshold": 100, "window_minutes": 5, "for_seconds": 2}),
    ] {
        let (status, body) = post_json(&url, &token, "/api/v1/alerts", rule).await;
        assert_eq!(status, 201, "{body}");
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let line =
        |level: &str, message: &str| json!({"timestamp": now, "level": level, "service": "api", "message": message});
    let logs = vec![
        line("error", "upstream timeout after 30 s"),
        line("ERROR", "db timeout"),
        line("fatal", "timeout, giving up"),
        line("info", "timeout configured to 30 s"),
        line("error", "connection refused"),
    ];
    ingest(&url, &key, "/api/v1/ingest/logs", json!({ "logs": logs })).await;
    let host = |name: &str, cpu: f64| json!({"timestamp": now, "hostname": name, "cpu_percent": cpu});
    let metrics = vec![host("db-1", 95.5), host("web-1", 99.0)];
    ingest(&url, &key, "/api/v1/ingest/infrastructure", json!({ "metrics": metrics })).await;
    ingest(&url, &key, "/api/v1/ingest/spans", spans_of("api", 50, 500.0)).await;

    let timeouts = rule_in(&url, &token, &ids[0], "firing", Duration::from_secs(30)).await;
    assert_eq!(timeouts["last_value"], 3.0, "ERROR and FATAL lines with the word timeout");
    let cpu = rule_in(&url, &token, &ids[1], "firing", Duration::from_secs(30)).await;
    assert_eq!(cpu["last_value"], 95.5, "db-1's sample, not web-1's");
    let slow = rule_in(&url, &token, &ids[2], "firing", Duration::from_secs(30)).await;
    let p95 = slow["last_value"].as_f64().unwrap();
    assert!((p95 - 500.0).abs() <= 5.0, "{p95}");
    let history = slow["history"].as_array().unwrap();
    let to: Vec<&str> = history.iter().map(|t| t["to"].as_str().unwrap()).collect();
    assert_eq!(&to[to.len() - 2..], ["pending", "firing"]);
    let held = millis(&history[history.len() - 1]["at"]) - millis(&history[history.len() - 2]["at"]);
    assert!(held >= 2_000, "fired {held} ms after the condition first held");

    let triggered = |hook: &str| {
        let (url, token, path) = (&url, &token, format!("/api/webhooks/{hook}/deliveries"));
        async move {
            let (status, d) = get_json(url, token, &path).await;
            assert_eq!(status, 200, "{d}");
            d["items"].as_array().unwrap().iter().filter(|d| d["event"] == "system.alert_triggered").count()
        }
    };
    assert_eq!(triggered(&pager).await, 1, "the timeouts rule's alert, whatever pager subscribes to");
    assert_eq!(triggered(&all).await, 2, "the two untargeted rules' alerts only");
    let delete_hook = || http().delete(format!("{url}/api/webhooks/{pager}")).bearer_auth(&token).send();
    let resp = delete_hook().await.unwrap();
    assert_eq!(resp.status(), 409);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "webhook_in_use");
    let resp = http().delete(format!("{url}/api/v1/alerts/{}", ids[0])).bearer_auth(&token).send().await.unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(delete_hook().await.unwrap().status(), 204);
}

fn spans_of(service: &str, n: usize, duration_ms: f64) -> Value {
    let now = jiff::Timestamp::now().as_millisecond();
    let spans: Vec<Value> = (0..n)
        .map(|i| {
            json!({"trace_id": format!("slow-{i}"), "span_id": "s0", "service_name": service,
                   "operation": "GET /items", "timestamp": now, "duration_ms": duration_ms, "status": "ok"})
        })
        .collect();
    json!({ "spans": spans })
}
