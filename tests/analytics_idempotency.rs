//! A retried analytics batch is counted once by every analytics read (docs/API.md, "Idempotency of
//! analytics events"): the same batch posted three times (as an SDK does after timeouts) against
//! `sextant dev` with four shards, with uuids, without uuids but with timestamps, and a replay
//! batch.

use crate::common::*;
use serde_json::{json, Value};

const USERS: usize = 10;

async fn post(url: &str, path: &str, body: &Value) -> Value {
    let resp = http().post(format!("{url}{path}")).json(body).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    resp.json().await.unwrap()
}

fn total(series: &Value) -> u64 {
    series["points"].as_array().unwrap().iter().map(|p| p["count"].as_u64().unwrap()).sum()
}

#[tokio::test]
async fn a_batch_posted_three_times_is_counted_once_by_every_analytics_read() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000", "--auth-rps", "1000", "--shards", "4"], &[]).await;
    let _logs = LogsOnPanic::new(dir.path());
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    let url = dev.url.clone();
    let now = jiff::Timestamp::now().as_millisecond();
    let (viewed, bought) = (now - 120_000, now - 60_000);
    // Views without uuids (one is derived from the content and the timestamp), purchases with.
    let views: Vec<Value> = (0..USERS)
        .map(|i| json!({"event": "view", "distinct_id": format!("u{i}"), "timestamp": viewed, "properties": {"page": i, "from": "ad"}}))
        .collect();
    let purchases: Vec<Value> = (0..USERS)
        .map(|i| json!({"event": "purchase", "distinct_id": format!("u{i}"), "timestamp": bought, "uuid": format!("00000000-0000-4000-8000-{i:012}")}))
        .collect();
    let replay = json!({
        "token": token, "session_id": "sess-1", "distinct_id": "u1", "window_id": "w1",
        "events": (0..3).map(|i| json!({"type": 3, "data": {"x": i}, "timestamp": viewed + i})).collect::<Vec<_>>(),
    });
    for _ in 0..3 {
        for events in [&views, &purchases] {
            let body = post(&url, "/v1/batch", &json!({"token": token, "events": events})).await;
            assert_eq!(body["accepted"].as_u64(), Some(USERS as u64), "every event is accepted, stored or not");
        }
        post(&url, "/v1/replay/events", &replay).await;
    }
    // And once more through PostHog capture: the uuid is what makes it the same purchase.
    post(&url, "/batch/", &json!({"api_key": token, "batch": purchases})).await;

    let jwt = dev.token().await;
    let get = |path: String| {
        let (url, jwt) = (url.clone(), jwt.clone());
        async move {
            let (s, body) = get_json(&url, &jwt, &path).await;
            assert_eq!(s, 200, "{path}: {body}");
            body
        }
    };
    let range = format!("from={}&to={}", now - 86_400_000, now + 1000);
    for (event, want) in [("", 2 * USERS), ("&event=purchase", USERS), ("&event=view", USERS)] {
        for interval in ["hour", "day"] {
            let series = get(format!("/api/events/timeseries?interval={interval}&{range}{event}")).await;
            assert_eq!(total(&series), want as u64, "timeseries {interval} {event}");
        }
    }

    let cohort = |event: &str, op: &str, count: u64| {
        let (url, jwt) = (url.clone(), jwt.clone());
        let body = json!({"name": format!("{event} {op} {count}"), "conditions": {"logic": "and", "conditions": [
            {"type": "did", "event": event, "count_op": op, "count": count, "range": "7d"}]}});
        async move {
            let resp = http().post(format!("{url}/api/cohorts")).bearer_auth(&jwt).json(&body).send().await.unwrap();
            assert_eq!(resp.status(), 201);
            resp.json::<Value>().await.unwrap()
        }
    };
    for (event, op, count, size) in
        [("purchase", ">=", 2, 0), ("view", ">=", 2, 0), ("purchase", "=", 1, USERS), ("view", "=", 1, USERS)]
    {
        let created = cohort(event, op, count).await;
        assert_eq!(created["size"].as_u64(), Some(size as u64), "did {event} {op} {count}");
        let id = created["id"].as_str().unwrap();
        let users = get(format!("/api/cohorts/{id}/users?limit=100")).await;
        assert_eq!(users["items"].as_array().unwrap().len(), size, "members of did {event} {op} {count}");
    }

    let funnel = get("/api/funnel?steps=view,purchase&window=1&window_unit=day&range=1d".into()).await;
    let counts: Vec<u64> = funnel["steps"].as_array().unwrap().iter().map(|s| s["count"].as_u64().unwrap()).collect();
    assert_eq!(counts, [USERS as u64, USERS as u64]);
    // Strict: a stored second view would come between a user's view and purchase.
    let strict = get("/api/funnel?steps=view,view&window=1&window_unit=day&range=1d&order=strict".into()).await;
    assert_eq!(strict["steps"][1]["count"].as_u64(), Some(0), "{strict}");

    let active = get("/api/users/active?period=1d".into()).await;
    let last = active["points"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["dau"].as_u64(), Some(USERS as u64), "{active}");

    let day = 86_400_000;
    let (from, to) = (now - now.rem_euclid(day) - day, now + 1000);
    let retention = get(format!(
        "/api/retention?start_event=view&return_event=purchase&period=day&periods=2&from={from}&to={to}&type=recurring"
    ))
    .await;
    let sizes: u64 = retention["cohorts"].as_array().unwrap().iter().map(|c| c["size"].as_u64().unwrap()).sum();
    assert_eq!(sizes, USERS as u64, "{retention}");

    let sessions = get("/api/replays".into()).await;
    let items = sessions["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{sessions}");
    assert_eq!(items[0]["event_count"].as_u64(), Some(3));
    let size: usize = (0..3).map(|i| format!(r#"{{"x":{i}}}"#).len()).sum();
    assert_eq!(items[0]["size_bytes"].as_u64(), Some(size as u64));
    let events = get("/api/replays/sess-1".into()).await;
    let xs: Vec<i64> = events["events"].as_array().unwrap().iter().map(|e| e["data"]["x"].as_i64().unwrap()).collect();
    assert_eq!(xs, [0, 1, 2]);
}
