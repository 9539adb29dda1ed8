//! Cohorts (docs/API.md, "Cohorts") against `sextant dev` with 4 shards: definitions stored per
//! project, sizes and member pages merged across shards, `cohort_id` filtering timeseries, funnels
//! and active users, and every refusal (bad fields, body size, foreign ids).

use crate::common::*;
use serde_json::{json, Value};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

struct Api {
    url: String,
    jwt: String,
}

impl Api {
    async fn get(&self, path: &str) -> (u16, Value) {
        self.get_in(path, None).await
    }

    async fn get_in(&self, path: &str, project: Option<&str>) -> (u16, Value) {
        let mut req = http().get(format!("{}{path}", self.url)).bearer_auth(&self.jwt);
        if let Some(p) = project {
            req = req.header("X-Project-Id", p);
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: &Value, project: Option<&str>) -> (u16, Value) {
        let mut req = http().post(format!("{}{path}", self.url)).bearer_auth(&self.jwt).json(body);
        if let Some(p) = project {
            req = req.header("X-Project-Id", p);
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
    }

    /// Creates a cohort and returns its id.
    async fn cohort(&self, name: &str, conditions: Value) -> String {
        let (s, body) = self.post("/api/cohorts", &json!({"name": name, "conditions": conditions}), None).await;
        assert_eq!(s, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// Every member of a cohort at `to`, walking pages of `limit`.
    async fn members(&self, id: &str, to: i64, limit: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = String::new();
        loop {
            let (s, page) = self.get(&format!("/api/cohorts/{id}/users?to={to}&limit={limit}{cursor}")).await;
            assert_eq!(s, 200, "{page}");
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= limit);
            out.extend(items.iter().map(|i| i["distinct_id"].as_str().unwrap().to_owned()));
            match page["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={c}"),
                None => return out,
            }
        }
    }

    async fn size(&self, id: &str, to: i64) -> u64 {
        let (s, body) = self.get(&format!("/api/cohorts/{id}?to={to}")).await;
        assert_eq!(s, 200, "{body}");
        body["size"].as_u64().unwrap()
    }
}

fn did(event: &str, op: &str, count: u64, range: &str) -> Value {
    json!({"type": "did", "event": event, "count_op": op, "count": count, "range": range})
}

#[tokio::test]
async fn cohorts_are_evaluated_per_shard_and_filter_reads() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start_with(dir.path(), &["--api-rps", "100000", "--auth-rps", "1000", "--shards", "4"], &[]).await;
    let token = dev.creds["ingest_token"].as_str().unwrap().to_owned();
    // The evaluation instant, an hour ago so that events "after" it are still in the past.
    let now = jiff::Timestamp::now().as_millisecond();
    let to = now - HOUR;
    let rows: Vec<(String, &str, i64)> = [
        ("u1", "buy", to - DAY),
        ("u1", "buy", to - 2 * DAY),
        ("u1", "view", to - 3 * DAY),
        ("u2", "buy", to - 10 * DAY),
        ("u2", "view", to - DAY),
        ("u3", "view", to - DAY),
        ("u4", "buy", to - 40 * DAY),
        ("u4", "view", to - 40 * DAY),
        ("u5", "signup", to - 5 * DAY),
        ("u5", "buy", to - DAY),
        // Range boundaries: the start is in, the instant itself is out.
        ("u6", "buy", to - 7 * DAY),
        ("u6", "buy", to - 7 * DAY - 1),
        ("u7", "buy", to - 7 * DAY),
        ("u7", "buy", to - 1),
        ("u8", "buy", to),
        ("u8", "buy", to + 1000),
    ]
    .into_iter()
    .map(|(u, e, t)| (u.to_owned(), e, t))
    .chain((0..30).map(|i| (format!("p{i:02}"), "page", to - 2 * DAY)))
    .collect();
    let events: Vec<Value> =
        rows.iter().map(|(u, e, t)| json!({"event": e, "distinct_id": u, "timestamp": t})).collect();
    let resp =
        http().post(format!("{}/v1/batch", dev.url)).json(&json!({"token": token, "events": events})).send().await;
    assert_eq!(resp.unwrap().status(), 200);
    let api = Api { url: dev.url.clone(), jwt: dev.token().await };

    let two_buys = api.cohort("two buys", json!({"logic": "and", "conditions": [did("buy", ">=", 2, "7d")]})).await;
    let viewers_who_bought = api
        .cohort(
            "viewers who bought",
            json!({"logic": "and", "conditions": [did("view", ">=", 1, "7d"), did("buy", ">=", 1, "30d")]}),
        )
        .await;
    // did_not with the defaults (>= 1): users with some event before the instant who never
    // bought within 30 days. u8's events are all at or after the instant: not a candidate.
    let never_bought =
        api.cohort("never bought", json!({"conditions": [{"type": "did_not", "event": "buy", "range": "30d"}]})).await;
    let either = api
        .cohort(
            "signed up or bought exactly twice",
            json!({"logic": "or", "conditions": [did("signup", ">=", 1, "7d"), did("buy", "=", 2, "7d")]}),
        )
        .await;
    let pages = api.cohort("pages", json!({"conditions": [did("page", ">", 0, "3d")]})).await;
    // "< 1" is "never": like did_not, it needs the whole history for its candidates.
    let no_view = api.cohort("no view", json!({"conditions": [did("view", "<", 1, "30d")]})).await;

    let page_users: Vec<String> = (0..30).map(|i| format!("p{i:02}")).collect();
    let with_pages = |users: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = users.iter().map(|u| u.to_string()).chain(page_users.iter().cloned()).collect();
        v.sort();
        v
    };
    let expected: [(&str, Vec<String>); 5] = [
        (&two_buys, vec!["u1".into(), "u7".into()]),
        (&viewers_who_bought, vec!["u1".into(), "u2".into()]),
        // The page users never bought either.
        (&never_bought, with_pages(&["u3", "u4"])),
        (&either, vec!["u1".into(), "u5".into(), "u7".into()]),
        // Everyone with an event before the instant except the viewers within 30 days (u1,
        // u2, u3; u4's view is 40 days old).
        (&no_view, with_pages(&["u4", "u5", "u6", "u7"])),
    ];
    for (id, want) in &expected {
        assert_eq!(api.members(id, to, 1000).await, *want, "cohort {id}");
        assert_eq!(api.size(id, to).await, want.len() as u64);
    }
    // Pages of 7 (and of 1) walk the 30 members spread over four shards, each once, in order.
    assert_eq!(api.members(&pages, to, 7).await, page_users);
    assert_eq!(api.members(&pages, to, 1).await, page_users);

    // One cohort as the API shows it; the list in creation order with sizes, paginated.
    let (s, one) = api.get(&format!("/api/cohorts/{viewers_who_bought}?to={to}")).await;
    assert_eq!(s, 200);
    assert_eq!(one["name"], "viewers who bought");
    assert_eq!(one["conditions"]["conditions"][1], did("buy", ">=", 1, "30d"));
    assert_eq!(one["conditions"]["logic"], "and");
    assert!(one["created_at"].as_str().unwrap().ends_with('Z'));
    let mut listed = Vec::new();
    let mut cursor = String::new();
    loop {
        let (s, page) = api.get(&format!("/api/cohorts?to={to}&limit=4{cursor}")).await;
        assert_eq!(s, 200, "{page}");
        listed.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| (c["id"].as_str().unwrap().to_owned(), c["size"].as_u64().unwrap())),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    let ids = [&two_buys, &viewers_who_bought, &never_bought, &either, &pages, &no_view];
    let sizes = [2, 2, 32, 3, 30, 34];
    assert_eq!(listed, ids.iter().zip(sizes).map(|(i, s)| (i.to_string(), s)).collect::<Vec<_>>());

    // Filters. Timeseries: only u1's and u2's events (3 + 2) in the last 30 days.
    let total = |body: &Value, field: &str| -> u64 {
        body["points"].as_array().unwrap().iter().map(|p| p[field].as_u64().unwrap()).sum()
    };
    let range = format!("from={}&to={to}", to - 30 * DAY);
    let (s, all) = api.get(&format!("/api/events/timeseries?{range}")).await;
    assert_eq!((s, total(&all, "count")), (200, 12 + 30), "{all}");
    let (s, ts) = api.get(&format!("/api/events/timeseries?{range}&cohort_id={viewers_who_bought}")).await;
    assert_eq!((s, total(&ts, "count")), (200, 5), "{ts}");
    let (_, ts) = api.get(&format!("/api/events/timeseries?{range}&event=buy&cohort_id={two_buys}")).await;
    assert_eq!(total(&ts, "count"), 4, "u1's two buys and u7's two");

    // Funnel view → buy: u1 converts, u2 bought before viewing, u3 never bought.
    let counts = |body: &Value| -> Vec<u64> {
        body["steps"].as_array().unwrap().iter().map(|s| s["count"].as_u64().unwrap()).collect()
    };
    let funnel = format!("/api/funnel?steps=view,buy&range=30d&to={to}");
    let (s, f) = api.get(&funnel).await;
    assert_eq!((s, counts(&f)), (200, vec![3, 1]), "{f}");
    let (s, f) = api.get(&format!("{funnel}&cohort_id={viewers_who_bought}")).await;
    assert_eq!((s, counts(&f)), (200, vec![2, 1]), "{f}");
    let (_, f) = api.get(&format!("{funnel}&cohort_id={never_bought}")).await;
    assert_eq!(counts(&f), [1, 0], "u3 viewed, u4's view is outside the range");

    // Active users on the instant's day: u3 was active yesterday, the page users two days ago,
    // u4 40 days ago.
    let (s, active) = api.get(&format!("/api/users/active?period=1d&to={to}&cohort_id={never_bought}")).await;
    assert_eq!(s, 200, "{active}");
    let last = active["points"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["dau"].as_u64(), last["wau"].as_u64(), last["mau"].as_u64()), (Some(0), Some(31), Some(31)));

    // Refusals, each naming what is wrong.
    let bad = [
        (
            json!({"name": "x", "conditions": {"conditions": [did("buy", "~", 1, "7d")]}}),
            "conditions.conditions[0].count_op",
        ),
        (
            json!({"name": "x", "conditions": {"conditions": [did("buy", ">", 1, "2y")]}}),
            "conditions.conditions[0].range",
        ),
        (
            json!({"name": "x", "conditions": {"logic": "xor", "conditions": [did("buy", ">", 1, "2d")]}}),
            "conditions.logic",
        ),
        (json!({"name": "x", "conditions": {"conditions": []}}), "conditions.conditions"),
        (json!({"name": "", "conditions": {"conditions": [did("buy", ">", 1, "2d")]}}), "name"),
        (
            json!({"name": "x", "conditions": {"conditions": (0..21).map(|_| did("a", ">", 1, "1d")).collect::<Vec<_>>()}}),
            "conditions.conditions",
        ),
    ];
    for (body, field) in bad {
        let (s, err) = api.post("/api/cohorts", &body, None).await;
        assert_eq!((s, err["error"]["code"].as_str()), (400, Some("validation_failed")), "{body}");
        assert_eq!(err["error"]["details"]["errors"][0]["field"], field, "{err}");
    }
    let (s, err) = api.post("/api/cohorts", &json!({"conditions": {"conditions": []}}), None).await;
    assert_eq!(s, 400, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("name"), "{err}");
    let huge = json!({"name": "x".repeat(20_000), "conditions": {"conditions": [did("a", ">", 1, "1d")]}});
    let (s, err) = api.post("/api/cohorts", &huge, None).await;
    assert_eq!((s, err["error"]["code"].as_str()), (413, Some("payload_too_large")));
    for path in ["/api/cohorts/nope", "/api/cohorts/nope/users"] {
        let (s, err) = api.get(path).await;
        assert_eq!((s, err["error"]["code"].as_str()), (404, Some("not_found")), "{path}");
    }
    for path in [
        format!("/api/cohorts/{two_buys}?to=yesterday"),
        format!("/api/cohorts/{two_buys}/users?to=0"),
        format!("/api/funnel?steps=a,b&to=0&cohort_id={two_buys}"),
    ] {
        let (s, err) = api.get(&path).await;
        assert_eq!(s, 400, "{path}: {err}");
        assert!(err["error"]["message"].as_str().unwrap().contains("`to`"), "{path}: {err}");
    }

    // Tenancy: a cohort of another project of the org, and another org, are not found.
    let (s, project) = api.post("/projects", &json!({"name": "shop"}), None).await;
    assert_eq!(s, 201, "{project}");
    let shop = project["id"].as_str().unwrap().to_owned();
    let (s, c) = api
        .post(
            "/api/cohorts",
            &json!({"name": "shop buyers", "conditions": {"conditions": [did("buy", ">=", 1, "7d")]}}),
            Some(&shop),
        )
        .await;
    assert_eq!((s, c["size"].as_u64()), (201, Some(0)), "the shop project has no events");
    let shop_cohort = c["id"].as_str().unwrap().to_owned();
    let (s, _) = api.get_in(&format!("/api/cohorts/{shop_cohort}"), Some(&shop)).await;
    assert_eq!(s, 200);
    for path in [
        format!("/api/cohorts/{shop_cohort}"),
        format!("/api/cohorts/{shop_cohort}/users"),
        format!("/api/events/timeseries?cohort_id={shop_cohort}"),
        format!("/api/funnel?steps=a,b&cohort_id={shop_cohort}"),
        format!("/api/users/active?cohort_id={shop_cohort}"),
    ] {
        let (s, _) = api.get(&path).await;
        assert_eq!(s, 404, "{path}");
    }
    let (s, shop_list) = api.get_in("/api/cohorts", Some(&shop)).await;
    assert_eq!((s, shop_list["items"].as_array().map(Vec::len)), (200, Some(1)));
    let signup = http()
        .post(format!("{}/auth/signup", dev.url))
        .json(
            &json!({"email": "eve@example.com", "password": "correct horse battery", "name": "Eve", "org_name": "Eve"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(signup.status(), 201);
    let eve = Api {
        url: dev.url.clone(),
        jwt: signup.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned(),
    };
    let (s, _) = eve.get(&format!("/api/cohorts/{two_buys}")).await;
    assert_eq!(s, 404);
    let (s, _) = eve.get_in(&format!("/api/cohorts/{two_buys}"), Some(&shop)).await;
    assert_eq!(s, 404, "a project of another org is not the caller's");
    let (s, list) = eve.get("/api/cohorts").await;
    assert_eq!((s, list["items"].as_array().map(Vec::len)), (200, Some(0)));
    let (s, _) =
        http().get(format!("{}/api/cohorts", dev.url)).send().await.map(|r| (r.status().as_u16(), ())).unwrap();
    assert_eq!(s, 401);
}
