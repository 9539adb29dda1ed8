//! Reads over long ranges against `sextant dev` (docs/API.md, "Reads: time range, partial
//! answers and limits"): every default a new user tries over a year answers, with the right
//! number of cohorts, buckets and days; what refuses a read is its estimated cost, 422
//! `query_too_large` with the estimate and the budget, except for the reads that stop at a
//! full page.

use crate::common::*;
use serde_json::{json, Value};

const DAY_MS: i64 = 86_400_000;

/// Events of 20 users every other day over the 400 days before now: a `signup` each, then
/// `view`s and `purchase`s.
fn a_year_of_events(now_ms: i64) -> Vec<Value> {
    let mut out = Vec::new();
    for u in 0..20i64 {
        for d in (0..400i64).step_by(2) {
            let name = match (d + u) % 10 {
                0 => "signup",
                1 | 2 => "purchase",
                _ => "view",
            };
            let t = now_ms - (400 - d) * DAY_MS + u * 60_000;
            out.push(json!({"event": name, "distinct_id": format!("user-{u}"), "timestamp": t,
                "uuid": format!("u{u}-d{d}")}));
        }
    }
    out
}

async fn ingest(dev: &Dev, events: &[Value]) {
    let token = dev.creds["ingest_token"].as_str().unwrap();
    for chunk in events.chunks(500) {
        let resp =
            http().post(format!("{}/v1/batch", dev.url)).json(&json!({"token": token, "events": chunk})).send().await;
        assert_eq!(resp.unwrap().status(), 200);
    }
}

fn len(body: &Value, key: &str) -> usize {
    body[key].as_array().unwrap_or_else(|| panic!("no {key} in {body}")).len()
}

#[tokio::test]
async fn every_default_over_a_year_answers_with_its_cohorts_buckets_and_days() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;
    let jwt = dev.token().await;
    let now = jiff::Timestamp::now().as_millisecond();
    let events = a_year_of_events(now);
    ingest(&dev, &events).await;
    let get = |path: String| {
        let (url, jwt) = (dev.url.clone(), jwt.clone());
        async move { get_json(&url, &jwt, &path).await }
    };

    // Retention: 8 weekly and 12 monthly cohorts by default, each followed for 8 periods
    // (recurring: every user signed up first over a year ago).
    for (period, cohorts) in [("week", 8), ("month", 12), ("day", 8)] {
        let q = format!("/api/retention?start_event=signup&return_event=purchase&period={period}&type=recurring");
        let (s, body) = get(q).await;
        assert_eq!(s, 200, "{period}: {body}");
        assert_eq!(len(&body, "cohorts"), cohorts, "{period}");
        assert!(body["cohorts"].as_array().unwrap().iter().all(|c| len(c, "values") == 8));
        assert!(body["cohorts"].as_array().unwrap().iter().any(|c| c["size"].as_u64().unwrap() > 0), "{period}");
    }

    // Weekly and monthly timeseries over the last 365 days: every bucket (the first starts at
    // or before `from`), every event from its start counted.
    let from = now - 365 * DAY_MS;
    for (interval, buckets) in [("week", 53..=54), ("month", 12..=13), ("day", 365..=366)] {
        let (s, body) = get(format!("/api/events/timeseries?interval={interval}&from={from}&to={now}")).await;
        assert_eq!(s, 200, "{interval}: {body}");
        assert!(buckets.contains(&len(&body, "points")), "{interval}: {} points", len(&body, "points"));
        let first: jiff::Timestamp = body["points"][0]["t"].as_str().unwrap().parse().unwrap();
        let first = first.as_millisecond();
        assert!(first <= from && from - first < 31 * DAY_MS, "{interval}");
        let want = events.iter().filter(|e| (first..now).contains(&e["timestamp"].as_i64().unwrap())).count();
        let total: u64 = body["points"].as_array().unwrap().iter().map(|p| p["count"].as_u64().unwrap()).sum();
        assert_eq!(total, want as u64, "{interval}");
    }

    // DAU/WAU/MAU over 366 days (and 400), one point a day the period touches: the day
    // holding now, and the one it began in unless that was midnight.
    for days in [366, 400] {
        let (s, body) = get(format!("/api/users/active?period={days}d")).await;
        assert_eq!(s, 200, "{body}");
        assert!((days..=days + 1).contains(&len(&body, "points")), "{days}: {}", len(&body, "points"));
        assert_eq!(body["points"].as_array().unwrap().last().unwrap()["mau"], 20);
    }

    // A 90-day funnel, and one over the whole 400 days.
    for range in ["90d", "400d"] {
        let (s, body) = get(format!("/api/funnel?steps=signup,view,purchase&range={range}&window=30")).await;
        assert_eq!(s, 200, "{range}: {body}");
        assert!(body["steps"][2]["count"].as_u64().unwrap() > 0, "{range}: {body}");
    }

    // Observability reads over 400 days answer (empty here).
    let from = now - 400 * DAY_MS;
    for path in ["/api/v1/logs/search", "/api/v1/traces", "/api/v1/apm/endpoints", "/api/v1/errors"] {
        let (s, body) = get(format!("{path}?from={from}")).await;
        assert_eq!(s, 200, "{path}: {body}");
    }
}

#[tokio::test]
async fn a_read_over_the_cost_budget_is_422_with_its_estimate_unless_it_stops_at_a_page() {
    let dir = tempfile::tempdir().unwrap();
    // A budget of 1000 rows per read.
    let dev = Dev::start_with(dir.path(), &["--query-max-rows", "1000"], &[]).await;
    let jwt = dev.token().await;
    let now = jiff::Timestamp::now().as_millisecond();
    let events = a_year_of_events(now);
    ingest(&dev, &events).await;

    let (s, body) = get_json(&dev.url, &jwt, "/api/users/active?period=400d").await;
    assert_eq!(s, 422, "{body}");
    assert_eq!(body["error"]["code"], "query_too_large");
    let details = &body["error"]["details"];
    assert!(details["estimated_rows"].as_u64().unwrap() >= events.len() as u64, "{body}");
    assert!(details["estimated_bytes"].as_u64().unwrap() > 0, "{body}");
    assert_eq!(details["max_rows"], 1000);
    assert_eq!(details["max_bytes"], 8u64 << 30);
    // A range holding fewer rows is within the budget.
    let (s, body) = get_json(&dev.url, &jwt, &format!("/api/events/timeseries?from={}", now - 30 * DAY_MS)).await;
    assert_eq!(s, 200, "{body}");

    // 300 traces of 5 spans: 1500 spans over the budget, 300 traces within it. The trace list
    // reads newest first and stops at a page, so its estimate does not refuse it; APM reads
    // every span.
    for half in ["a", "b"] {
        let resp = post_spans(&dev.url, dev.api_key(), &spans_batch(half, 150, 5)).await;
        assert_eq!(resp.status(), 200);
    }
    let (s, body) = get_json(&dev.url, &jwt, "/api/v1/traces?limit=10").await;
    assert_eq!((s, len(&body, "items")), (200, 10), "{body}");
    let (s, body) = get_json(&dev.url, &jwt, "/api/v1/apm/endpoints").await;
    assert_eq!(s, 422, "{body}");
    assert!(body["error"]["details"]["estimated_rows"].as_u64().unwrap() >= 1500, "{body}");
}

#[tokio::test]
async fn huge_and_reversed_ranges_are_a_400_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;
    let jwt = dev.token().await;
    for (path, code) in [
        ("/api/events/timeseries?from=2000&to=1000", "invalid_time_range"),
        ("/api/events/timeseries?from=-1", "invalid_parameter"),
        ("/api/events/timeseries?to=9223372036854775807", "invalid_parameter"),
        ("/api/events/timeseries?interval=hour&from=0", "invalid_parameter"),
        ("/api/users/active?period=9223372036854775807d", "invalid_parameter"),
        ("/api/users/active?period=4000d", "invalid_parameter"),
        ("/api/funnel?steps=a,b&range=99999999999999w", "invalid_parameter"),
        ("/api/funnel?steps=a,b&range=-1d", "invalid_parameter"),
        ("/api/funnel?steps=a,b&window=9223372036854775807&window_unit=week", "invalid_parameter"),
        ("/api/retention?start_event=a&return_event=b&period=month&to=0", "invalid_parameter"),
        ("/api/retention?start_event=a&return_event=b&periods=101", "invalid_parameter"),
        ("/api/v1/infrastructure/hosts/h/metrics?from=0&step=1", "invalid_parameter"),
    ] {
        let (s, body) = get_json(&dev.url, &jwt, path).await;
        assert_eq!((s, body["error"]["code"].as_str()), (400, Some(code)), "{path}: {body}");
    }
    // The whole accepted history is one read like any other.
    let (s, body) = get_json(&dev.url, &jwt, "/api/events/timeseries?interval=month&from=0").await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = get_json(&dev.url, &jwt, "/api/v1/logs/search?from=0").await;
    assert_eq!(s, 200, "{body}");
}

/// APM over 60 days equals ClickHouse over the same spans: the whole hours and minutes come
/// from the rollups written beside each flushed segment (a flush every few requests), the
/// partial minutes at both ends and the buffered spans from the spans themselves; and again
/// once compaction has added up the past days' hours into day rollups (issue 23, "Rollups
/// where they pay").
#[tokio::test]
async fn apm_over_sixty_days_from_rollups_equals_clickhouse_on_the_same_spans() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--snapshot-every", "2"], &[]).await;
    let jwt = dev.token().await;
    let now = jiff::Timestamp::now().as_millisecond();
    let (from, to) = (now - 60 * DAY_MS + 17_123, now - 10_000);
    let mut rng = Rng(23);
    let mut spans = Vec::new();
    let mut rows = Vec::new();
    for i in 0..4000u64 {
        // Mostly anywhere in the range and just outside it; some in the partial minutes at
        // both ends.
        let t = match i % 10 {
            0 => from + rng.below(60_000) as i64 - 20_000,
            1 => to - rng.below(60_000) as i64 + 5_000,
            _ => from - DAY_MS + rng.below(62 * DAY_MS as u64) as i64,
        };
        let service = ["web", "api", "db"][rng.below(3) as usize];
        let operation = format!("{service} op{}", rng.below(3));
        // Microseconds over five decades, and some zeros.
        let us = if i % 97 == 0 { 0 } else { 10f64.powf(1.0 + rng.below(5000) as f64 / 1000.0) as u64 };
        let error = rng.below(10) == 0;
        spans.push(json!({"trace_id": format!("tr{}", i / 4), "span_id": format!("s{i}"), "service_name": service,
            "operation": operation, "timestamp": t, "duration_ms": us as f64 / 1000.0,
            "status": if error { "error" } else { "ok" }}));
        if (from..to).contains(&t) {
            rows.push(json!({"service": service, "operation": operation, "duration_ns": us * 1000, "error": error}));
        }
    }
    for chunk in spans.chunks(200) {
        let resp = post_spans(&dev.url, dev.api_key(), &json!({ "spans": chunk })).await;
        assert_eq!(resp.status(), 200);
    }
    let table = json!({"name": "spans", "order": "(service, operation)", "columns": [
        ["service", "String"], ["operation", "String"], ["duration_ns", "UInt64"], ["error", "Bool"]]});
    let rank =
        |q: f64| format!("arrayElement(arraySort(groupArray(duration_ns)), toUInt64(floor({q} * (count() - 1))) + 1)");
    let sql = format!(
        "SELECT service, operation, count(), countIf(error), sum(duration_ns), max(duration_ns), {}, {}, {}, {} \
         FROM spans GROUP BY service, operation ORDER BY service, operation",
        rank(0.5),
        rank(0.9),
        rank(0.95),
        rank(0.99)
    );
    let queries = std::collections::BTreeMap::from([("apm".to_owned(), sql)]);
    let oracle = clickhouse_over(dir.path(), Some(&table), &rows, &queries);
    let expected = oracle["apm"].as_array().unwrap();
    let apm = || async {
        let (s, body) = get_json(&dev.url, &jwt, &format!("/api/v1/apm/endpoints?from={from}&to={to}")).await;
        assert_eq!(s, 200, "{body}");
        body
    };
    assert_apm_equals(&apm().await, expected);
    // About 60 days on each of the 4 shards get day rollups; at least 60 of them are read.
    wait_for("day rollups", std::time::Duration::from_secs(120), || async {
        let text = http().get(format!("{}/metrics", dev.internal_url)).send().await.ok()?.text().await.ok()?;
        let day_rollups = text
            .lines()
            .find(|l| l.starts_with("sextant_node_segments{table=\"span_day_rollups\"}"))?
            .rsplit(' ')
            .next()?
            .parse::<u64>()
            .ok()?;
        (day_rollups >= 60).then_some(())
    })
    .await;
    assert_apm_equals(&apm().await, expected);
}

/// `body`'s endpoints against ClickHouse's `expected` rows: counts, errors and the maximum
/// exactly, the mean to rounding, percentiles within the sketch's 1%.
fn assert_apm_equals(body: &Value, expected: &[Value]) {
    let mut items = body["items"].as_array().unwrap().clone();
    items.sort_by_key(|e| (e["service"].as_str().unwrap().to_owned(), e["operation"].as_str().unwrap().to_owned()));
    assert_eq!(items.len(), expected.len(), "{body}");
    let num = |v: &Value| v.as_f64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap();
    for (got, want) in items.iter().zip(expected) {
        let key = format!("{}/{}", got["service"], got["operation"]);
        assert_eq!((&got["service"], &got["operation"]), (&want[0], &want[1]), "{key}");
        let count = num(&want[2]);
        assert_eq!((num(&got["count"]), num(&got["error_count"])), (count, num(&want[3])), "{key}");
        let avg_ms = num(&want[4]) / count / 1e6;
        assert!(
            (num(&got["avg_ms"]) - avg_ms).abs() <= 0.0005 + avg_ms * 1e-12,
            "{key} avg {} vs {avg_ms}",
            got["avg_ms"]
        );
        assert_eq!(num(&got["max_ms"]), (num(&want[5]) / 1e3).round() / 1e3, "{key} max");
        for (field, w) in [("p50_ms", &want[6]), ("p90_ms", &want[7]), ("p95_ms", &want[8]), ("p99_ms", &want[9])] {
            let (g, w) = (num(&got[field]), num(w) / 1e6);
            assert!((g - w).abs() <= w * 0.01 + 0.0005, "{key} {field}: {g} vs {w}");
        }
    }
}

/// A host's series over 60 days, flushed as it goes: steps on whole minutes (read from
/// per-minute rollups, stored and buffered, plus samples for the partial minute at the end)
/// and not (read from samples); each step's means equal ClickHouse's averages of the same
/// samples, and steps without samples are null.
#[tokio::test]
async fn host_series_over_sixty_days_from_rollups_equals_clickhouse_on_the_same_samples() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--snapshot-every", "2"], &[]).await;
    let jwt = dev.token().await;
    let now = jiff::Timestamp::now().as_millisecond();
    let (from, to) = ((now - 60 * DAY_MS) / 60_000 * 60_000, now - 10_000);
    let mut rng = Rng(29);
    let (mut metrics, mut rows) = (Vec::new(), Vec::new());
    for i in 0..4000u64 {
        // Mostly anywhere in the range and just outside it; some in the minute at its end.
        let t = match i % 10 {
            0 => to - rng.below(90_000) as i64 + 5_000,
            _ => from - DAY_MS + rng.below(62 * DAY_MS as u64) as i64,
        };
        let host = ["h1", "h2"][(i % 2) as usize];
        let used = 1_000_000 + rng.below(1 << 40);
        let mut m = json!({"hostname": host, "timestamp": t, "memory_used_bytes": used});
        let cpu = (i % 7 != 0).then(|| rng.below(10_000) as f64 / 100.0);
        if let Some(cpu) = cpu {
            m["cpu_percent"] = json!(cpu);
        }
        metrics.push(m);
        rows.push(json!({"hostname": host, "ts": t, "cpu": cpu, "used": used}));
    }
    for chunk in metrics.chunks(200) {
        let resp = http()
            .post(format!("{}/api/v1/ingest/infrastructure", dev.url))
            .header("X-API-Key", dev.api_key())
            .json(&json!({ "metrics": chunk }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let cases = [(from, DAY_MS), (from, 3_600_000), (from + 1_000, DAY_MS)];
    let queries: std::collections::BTreeMap<String, String> = cases
        .iter()
        .enumerate()
        .map(|(k, (start, step))| {
            let sql = format!(
                "SELECT intDiv(ts - {start}, {step}) AS b, count(cpu), avg(cpu), avg(used) FROM hosts \
                 WHERE hostname = 'h1' AND ts >= {start} AND ts < {to} GROUP BY b ORDER BY b"
            );
            (k.to_string(), sql)
        })
        .collect();
    let table = json!({"name": "hosts", "order": "(hostname, ts)", "columns": [
        ["hostname", "String"], ["ts", "Int64"], ["cpu", "Nullable(Float64)"], ["used", "UInt64"]]});
    let oracle = clickhouse_over(dir.path(), Some(&table), &rows, &queries);
    let num = |v: &Value| v.as_f64().or_else(|| v.as_str().and_then(|s| s.parse().ok()));
    let close = |got: Option<f64>, want: Option<f64>| match (got, want) {
        (Some(g), Some(w)) => (g - w).abs() <= 1e-9 * w.abs().max(1.0),
        (g, w) => g == w,
    };
    for (k, (start, step)) in cases.iter().enumerate() {
        let path = format!("/api/v1/infrastructure/hosts/h1/metrics?from={start}&to={to}&step={}s", step / 1000);
        let (s, body) = get_json(&dev.url, &jwt, &path).await;
        assert_eq!(s, 200, "{body}");
        let points = body["points"].as_array().unwrap();
        assert_eq!(points.len() as i64, (to - start + step - 1) / step, "{path}");
        let mut expected: std::collections::HashMap<usize, &Value> = Default::default();
        for row in oracle[&k.to_string()].as_array().unwrap() {
            expected.insert(num(&row[0]).unwrap() as usize, row);
        }
        assert!(expected.len() > 10, "{path}: {} steps with samples", expected.len());
        for (b, p) in points.iter().enumerate() {
            let (cpu, used) = match expected.get(&b) {
                Some(w) => ((num(&w[1]) != Some(0.0)).then(|| num(&w[2])).flatten(), num(&w[3])),
                None => (None, None),
            };
            let case = format!("{path} step {b}: {p} vs {:?}", expected.get(&b));
            assert!(close(p["cpu_percent"].as_f64(), cpu), "{case}");
            assert!(close(p["memory_used_bytes"].as_f64(), used), "{case}");
        }
    }
}
