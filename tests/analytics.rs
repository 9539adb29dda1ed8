//! Product-analytics ingest against `sextant dev`: the native `/v1/batch` and
//! `/v1/replay/events`, PostHog-compatible capture, and every way a request can be refused.
//! Stored rows are counted through the node's `applied_rows` metric (the analytics read API
//! comes with its own tests).

use std::io::Write;

use crate::common::*;
use serde_json::{json, Value};

/// From `/metrics` at `url`, the internal address.
async fn applied_rows(url: &str) -> f64 {
    let text = http().get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("sextant_node_applied_rows_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn events(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"event": "page_view", "distinct_id": format!("user-{}", i % 7), "properties": {"path": "/"}}))
        .collect()
}

async fn post(url: &str, path: &str, body: &Value, token_header: Option<&str>) -> (u16, Value) {
    let mut req = http().post(format!("{url}{path}")).json(body);
    if let Some(t) = token_header {
        req = req.header("X-Analytics-Token", t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn events_and_replays_are_accepted_with_the_project_token_only() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let url = dev.url.clone();
    let internal = dev.internal_url.clone();
    let base = applied_rows(&internal).await;

    // Token in the body, then in the header.
    let (s, b) = post(&url, "/v1/batch", &json!({"token": token, "events": events(10)}), None).await;
    assert_eq!((s, &b), (200, &json!({"status": "ok", "accepted": 10})));
    let (s, _) = post(&url, "/v1/batch", &json!({"events": events(5)}), Some(&token)).await;
    assert_eq!(s, 200);

    let replay = json!({
        "token": token, "session_id": "sess-1", "distinct_id": "user-1", "window_id": "w",
        "events": [
            {"type": 4, "data": {"href": "https://example.com"}, "timestamp": 1700000000000i64},
            {"type": 2, "data": {"node": {}}, "timestamp": 1700000000100i64},
        ],
    });
    let (s, b) = post(&url, "/v1/replay/events", &replay, None).await;
    assert_eq!((s, b["accepted"].as_u64()), (200, Some(2)));

    // PostHog SDK shapes: batch with api_key, single event with the token in properties, and
    // a gzip-js body.
    let (s, b) = post(&url, "/batch/", &json!({"api_key": token, "batch": events(3)}), None).await;
    assert_eq!((s, b["status"].as_i64()), (200, Some(1)));
    let single = json!({"event": "$pageview", "properties": {"distinct_id": "u9", "token": token}});
    let (s, _) = post(&url, "/e/", &single, None).await;
    assert_eq!(s, 200);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(json!({"api_key": token, "batch": events(4)}).to_string().as_bytes()).unwrap();
    let resp = http()
        .post(format!("{url}/i/v0/e/?compression=gzip-js"))
        .header("Content-Type", "text/plain")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    let stored = 10.0 + 5.0 + 2.0 + 3.0 + 1.0 + 4.0;
    wait_for("rows applied", std::time::Duration::from_secs(10), || {
        let internal = internal.clone();
        async move { (applied_rows(&internal).await - base == stored).then_some(()) }
    })
    .await;

    // Refusals: each its status and code, nothing stored.
    let api_key = dev.api_key().to_owned();
    let cases: Vec<(&str, Value, Option<&str>, u16, &str)> = vec![
        ("/v1/batch", json!({"events": events(1)}), None, 401, "unauthorized"),
        ("/v1/batch", json!({"token": "sxp_0000000000000000_bad", "events": events(1)}), None, 401, "unauthorized"),
        // An observability API key is not an ingest token.
        ("/v1/batch", json!({"token": api_key, "events": events(1)}), None, 401, "unauthorized"),
        ("/v1/batch", json!({"token": token, "events": events(1001)}), None, 400, "batch_too_large"),
        (
            "/v1/batch",
            json!({"token": token, "events": [{"event": "", "distinct_id": "u"}]}),
            None,
            400,
            "validation_failed",
        ),
        ("/v1/batch", json!({"token": token, "events": "nope"}), None, 400, "validation_failed"),
        ("/batch/", json!({"batch": events(1)}), None, 401, "unauthorized"),
        (
            "/v1/replay/events",
            json!({"token": token, "session_id": "s", "events": (0..501).map(|i| json!({"type": 3, "data": {}, "timestamp": i})).collect::<Vec<_>>()}),
            None,
            413,
            "too_many_events",
        ),
        ("/v1/replay/events", json!({"token": token, "session_id": "", "events": []}), None, 400, "validation_failed"),
    ];
    for (path, body, header, status, code) in cases {
        let (s, b) = post(&url, path, &body, header).await;
        assert_eq!((s, b["error"]["code"].as_str()), (status, Some(code)), "{path} {body}");
    }
    let malformed = http()
        .post(format!("{url}/v1/batch"))
        .header("Content-Type", "application/json")
        .header("X-Analytics-Token", &token)
        .body("{\"events\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let too_big = http()
        .post(format!("{url}/v1/replay/events"))
        .header("Content-Type", "application/json")
        .body(vec![b' '; 11 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(too_big.status(), 413);
    assert_eq!(applied_rows(&internal).await - base, stored, "a refused request stored something");

    // Browser SDKs post from other origins: every ingest endpoint answers the preflight.
    for path in ["/v1/batch", "/v1/replay/events", "/e/", "/api/v1/ingest/spans"] {
        let preflight = http()
            .request(reqwest::Method::OPTIONS, format!("{url}{path}"))
            .header("Origin", "https://shop.example")
            .header("Access-Control-Request-Method", "POST")
            .send()
            .await
            .unwrap();
        assert_eq!(preflight.status(), 200, "{path}");
        let allowed = preflight.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok());
        assert_eq!(allowed, Some("*"), "{path}");
    }
    // Other methods get the contract's error shape.
    let resp = http().get(format!("{url}/v1/batch")).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "method_not_allowed");
}

#[tokio::test]
async fn recorded_sessions_are_listed_and_replayed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000"], &[]).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let url = dev.url.clone();
    let now = jiff::Timestamp::now().as_millisecond();
    // Session a: three events sent out of order over two requests; session b: one event, later.
    let send = |session: &str, user: &str, stamps: &[i64]| {
        json!({
            "token": token, "session_id": session, "distinct_id": user, "window_id": "w1",
            "events": stamps.iter().map(|t| json!({"type": 3, "data": {"at": t}, "timestamp": now - 60_000 + t})).collect::<Vec<_>>(),
        })
    };
    for body in [send("a", "ann", &[20, 0]), send("a", "ann", &[10]), send("b", "bob", &[30_000])] {
        let (s, _) = post(&url, "/v1/replay/events", &body, None).await;
        assert_eq!(s, 200);
    }
    let jwt = dev.token().await;
    let get = |path: String| {
        let (url, jwt) = (url.clone(), jwt.clone());
        async move { get_json(&url, &jwt, &path).await }
    };

    let (s, all) = get("/api/replays".into()).await;
    assert_eq!(s, 200);
    let ids: Vec<&str> = all["items"].as_array().unwrap().iter().map(|i| i["session_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["b", "a"], "newest first");
    let a = &all["items"][1];
    assert_eq!((a["distinct_id"].as_str(), a["event_count"].as_u64()), (Some("ann"), Some(3)));
    let size: usize = [r#"{"at":0}"#, r#"{"at":10}"#, r#"{"at":20}"#].iter().map(|d| d.len()).sum();
    assert_eq!(a["size_bytes"].as_u64(), Some(size as u64));

    // One per page: the cursor walks both sessions once, then stops.
    let (_, p1) = get("/api/replays?limit=1".into()).await;
    let cursor = p1["next_cursor"].as_str().expect("a second page").to_owned();
    let (_, p2) = get(format!("/api/replays?limit=1&cursor={cursor}")).await;
    assert_eq!((p1["items"][0]["session_id"].as_str(), p2["items"][0]["session_id"].as_str()), (Some("b"), Some("a")));
    assert!(p2["next_cursor"].is_null());

    let (_, bob) = get("/api/replays?distinct_id=bob".into()).await;
    assert_eq!(bob["items"].as_array().unwrap().len(), 1);

    let (s, replay) = get("/api/replays/a".into()).await;
    assert_eq!(s, 200);
    let at: Vec<i64> = replay["events"].as_array().unwrap().iter().map(|e| e["data"]["at"].as_i64().unwrap()).collect();
    assert_eq!(at, [0, 10, 20], "timestamp order for the player");
    assert_eq!(replay["events"][0]["type"], 3);
    assert_eq!(replay["events"][0]["timestamp"].as_i64(), Some(now - 60_000));

    let (s, missing) = get("/api/replays/nope".into()).await;
    assert_eq!((s, missing["error"]["code"].as_str()), (404, Some("not_found")));
    let (s, _) = get("/api/replays?cursor=bm9wZQ".into()).await;
    assert_eq!(s, 400);
    let resp = http().get(format!("{url}/api/replays")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
}

#[tokio::test]
async fn timeseries_and_active_users_count_events_and_distinct_users_per_day() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000"], &[]).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let url = dev.url.clone();
    const DAY: i64 = 86_400_000;
    let now = jiff::Timestamp::now().as_millisecond();
    let today = now - now.rem_euclid(DAY);
    // (user, event, day offset): u1 every day of the last three, twice today; u2 yesterday;
    // u3 ten days ago.
    let at = |d: i64| if d == 0 { now - 1000 } else { today + d * DAY + 3_600_000 };
    let rows = [("u1", "a", -2), ("u1", "a", -1), ("u1", "a", 0), ("u1", "b", 0), ("u2", "a", -1), ("u3", "a", -10)];
    let events: Vec<Value> =
        rows.iter().map(|(u, e, d)| json!({"event": e, "distinct_id": u, "timestamp": at(*d)})).collect();
    let (s, _) = post(&url, "/v1/batch", &json!({"token": token, "events": events}), None).await;
    assert_eq!(s, 200);
    let jwt = dev.token().await;
    let get = |path: String| {
        let (url, jwt) = (url.clone(), jwt.clone());
        async move { get_json(&url, &jwt, &path).await }
    };

    let from = today - 2 * DAY;
    let (s, ts) = get(format!("/api/events/timeseries?interval=day&from={from}&to={now}")).await;
    assert_eq!(s, 200, "{ts}");
    let points: Vec<(u64, u64)> = ts["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["count"].as_u64().unwrap(), p["unique_users"].as_u64().unwrap()))
        .collect();
    assert_eq!(points, [(1, 1), (2, 2), (2, 1)], "days -2, -1, 0");
    assert_eq!(ts["interval"], "day");
    let (_, only_b) = get(format!("/api/events/timeseries?event=b&interval=day&from={from}&to={now}")).await;
    assert_eq!(only_b["event"], "b");
    let counts: Vec<u64> = only_b["points"].as_array().unwrap().iter().map(|p| p["count"].as_u64().unwrap()).collect();
    assert_eq!(counts, [0, 0, 1], "empty buckets are included");
    // Hourly buckets over the same range: 49 to 72 of them, the events spread over three.
    let (_, hourly) = get(format!("/api/events/timeseries?interval=hour&from={from}&to={now}")).await;
    let total: u64 = hourly["points"].as_array().unwrap().iter().map(|p| p["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 5);

    let (s, active) = get("/api/users/active?period=3d".into()).await;
    assert_eq!(s, 200, "{active}");
    let last = active["points"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["date"].as_str().unwrap(), jiff::Timestamp::now().strftime("%Y-%m-%d").to_string());
    assert_eq!((last["dau"].as_u64(), last["wau"].as_u64(), last["mau"].as_u64()), (Some(1), Some(2), Some(3)));

    for (path, field) in [
        ("/api/events/timeseries?interval=fortnight", "interval"),
        ("/api/events/timeseries?tz=Mars/Olympus", "tz"),
        ("/api/events/timeseries?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "invalid_time_range"),
        ("/api/users/active?period=30y", "period"),
    ] {
        let (s, body) = get(path.into()).await;
        assert_eq!(s, 400, "{path}");
        let text = body.to_string();
        assert!(text.contains(field), "{path}: {text}");
    }
}

#[tokio::test]
async fn funnels_count_each_user_at_the_furthest_step_ordered_and_strict() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000", "--shards", "4"], &[]).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let url = dev.url.clone();
    const MIN: i64 = 60_000;
    const DAY: i64 = 86_400_000;
    let t = jiff::Timestamp::now().as_millisecond() - 25 * DAY;
    let rows = [
        ("u1", "a", 0),
        ("u1", "b", MIN),
        ("u1", "c", 2 * MIN),
        ("u2", "a", 0),
        ("u2", "b", MIN),
        ("u3", "a", 0),
        ("u3", "x", MIN / 2),
        ("u3", "b", MIN),
        ("u4", "b", 0),
        ("u4", "c", MIN),
        ("u5", "a", 0),
        ("u5", "c", MIN),
        ("u6", "a", 0),
        ("u6", "b", 20 * DAY),
    ];
    let events: Vec<Value> =
        rows.iter().map(|(u, e, dt)| json!({"event": e, "distinct_id": u, "timestamp": t + dt})).collect();
    let (s, _) = post(&url, "/v1/batch", &json!({"token": token, "events": events}), None).await;
    assert_eq!(s, 200);
    let jwt = dev.token().await;
    let get = |path: String| {
        let (url, jwt) = (url.clone(), jwt.clone());
        async move { get_json(&url, &jwt, &path).await }
    };
    let counts = |body: &Value| -> Vec<u64> {
        body["steps"].as_array().unwrap().iter().map(|s| s["count"].as_u64().unwrap()).collect()
    };

    let (s, ordered) = get("/api/funnel?steps=a,b,c&window=14&window_unit=day&range=30d".into()).await;
    assert_eq!(s, 200, "{ordered}");
    assert_eq!(counts(&ordered), [5, 3, 1]);
    let b = &ordered["steps"][1];
    assert_eq!(b["conversion_from_start"].as_f64(), Some(0.6));
    assert_eq!(b["conversion_from_previous"].as_f64(), Some(0.6));
    assert_eq!(b["avg_seconds_to_convert"].as_f64(), Some(60.0));
    let median = b["median_seconds_to_convert"].as_f64().unwrap();
    assert!((median - 60.0).abs() <= 0.6, "median {median} within 1% of 60");
    assert!(ordered["steps"][0]["median_seconds_to_convert"].is_null());
    assert_eq!(ordered["window_seconds"], 14 * 86_400);

    let (_, strict) = get("/api/funnel?steps=a,b,c&window=14&range=30d&order=strict".into()).await;
    assert_eq!(counts(&strict), [5, 2, 1], "x between a and b breaks u3's strict chain");
    // A one-minute window: u6's b (20 days later) and every two-minute chain fall out.
    let (_, short) = get("/api/funnel?steps=a,b,c&window=1&window_unit=minute&range=30d".into()).await;
    assert_eq!(counts(&short), [5, 3, 0]);

    for (path, field) in [
        ("/api/funnel?steps=a", "steps"),
        ("/api/funnel?steps=a,b,c,d,e,f,g,h,i,j,k", "steps"),
        ("/api/funnel?steps=a,b&window_unit=fortnight", "window_unit"),
        ("/api/funnel?steps=a,b&window=0", "window"),
        ("/api/funnel?steps=a,b&range=30y", "range"),
        ("/api/funnel?steps=a,b&order=random", "order"),
    ] {
        let (s, body) = get(path.into()).await;
        assert_eq!(s, 400, "{path}");
        assert!(body["error"]["message"].as_str().unwrap().contains(field), "{path}: {body}");
    }
}

#[tokio::test]
async fn retention_follows_each_cohort_and_needs_the_plan_feature() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000", "--auth-rps", "1000"], &[]).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let url = dev.url.clone();
    const DAY: i64 = 86_400_000;
    let now = jiff::Timestamp::now().as_millisecond();
    let today = now - now.rem_euclid(DAY);
    let rows = [
        ("u1", "signup", -3),
        ("u1", "login", -2),
        ("u1", "login", -1),
        ("u2", "signup", -3),
        ("u2", "login", -1),
        ("u3", "signup", -2),
        ("u3", "login", -1),
        ("u3", "signup", -1),
        ("u4", "login", -1),
    ];
    let events: Vec<Value> = rows
        .iter()
        .map(|(u, e, d)| json!({"event": e, "distinct_id": u, "timestamp": today + d * DAY + 3_600_000}))
        .collect();
    let (s, _) = post(&url, "/v1/batch", &json!({"token": token, "events": events}), None).await;
    assert_eq!(s, 200);
    let jwt = dev.token().await;
    let get = |path: String, jwt: String| {
        let url = url.clone();
        async move { get_json(&url, &jwt, &path).await }
    };
    let table = |body: &Value| -> Vec<(u64, Vec<u64>)> {
        body["cohorts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let values = c["values"].as_array().unwrap().iter().map(|v| v["count"].as_u64().unwrap()).collect();
                (c["size"].as_u64().unwrap(), values)
            })
            .collect()
    };
    let (from, to) = (today - 3 * DAY, today);
    let q = format!("/api/retention?start_event=signup&return_event=login&period=day&periods=3&from={from}&to={to}");
    let (s, first) = get(q.clone(), jwt.clone()).await;
    assert_eq!(s, 200, "{first}");
    assert_eq!(first["period"], "day");
    assert_eq!(table(&first), [(2, vec![2, 1, 2]), (1, vec![1, 1, 0]), (0, vec![0, 0, 0])]);
    assert_eq!(first["cohorts"][0]["values"][1]["rate"].as_f64(), Some(0.5));
    let (_, recurring) = get(format!("{q}&type=recurring"), jwt.clone()).await;
    assert_eq!(table(&recurring), [(2, vec![2, 1, 2]), (1, vec![1, 1, 0]), (1, vec![1, 0, 0])]);

    let (s, body) = get("/api/retention?return_event=login".into(), jwt.clone()).await;
    assert_eq!((s, body["error"]["message"].as_str().map(|m| m.contains("start_event"))), (400, Some(true)));
    let (s, _) = get("/api/retention?start_event=a&return_event=b&period=hour".into(), jwt.clone()).await;
    assert_eq!(s, 400);

    // A new org starts on the pro trial, which has no retention analytics.
    let signup = http()
        .post(format!("{url}/auth/signup"))
        .json(&json!({"email": "pro@example.com", "password": "correct horse battery", "name": "P", "org_name": "Pro"}))
        .send()
        .await
        .unwrap();
    assert_eq!(signup.status(), 201);
    let pro = signup.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned();
    let (s, body) = get(q, pro).await;
    assert_eq!((s, body["error"]["code"].as_str()), (403, Some("plan_feature_unavailable")));
}
