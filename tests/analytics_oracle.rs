//! Product analytics against ClickHouse as the oracle (issue 6, "Correctness"): seeded random
//! data sets with same-timestamp events, events outside the ranges, users repeating steps and
//! gaps exactly at the window are loaded into a 3-node, 4-shard Sextant cluster and into chdb
//! (`tests/chdb_oracle.py`), and every answer must be identical:
//! - `ordered` funnels = `windowFunnel(window)` with step 1 restricted to the range;
//! - `strict` funnels = a brute-force reference written here;
//! - retention (first_time, recurring) = ClickHouse's `retention` function;
//! - DAU/WAU/MAU, timeseries and cohort sizes = `uniqExact` / `count` SQL, cohort members =
//!   the SQL's sorted list; the `cohort_id` filter = the same queries restricted to the SQL
//!   cohort.
//!
//! A second data set spans 400 days (issue 23, "Long ranges"): weekly and monthly retention,
//! a year of weekly and monthly timeseries (also counts only, from hourly rollups), 366 days
//! of active users and 90-day funnels.
//!
//! chdb is installed by `scripts/test.sh`; without it this test fails with a message saying so
//! (`SEXTANT_PYTHON` may name a python that has it).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::common::*;
use serde_json::{json, Value};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;
/// 2026-09-01T00:00:00Z: data spans the 46 days from here.
const F: i64 = 1_788_220_800_000;
const NAMES: [&str; 5] = ["a", "b", "c", "d", "x"];

type Event = (String, &'static str, i64);

/// Users with bursts of events on a 30-minute grid: many equal timestamps, gaps of exactly
/// 30 min, 2 h and a day (the windows below), repeated steps, and sparse events all over the
/// 46 days so that every range has events before, inside and after it.
fn dataset(seed: u64, users: u64) -> Vec<Event> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for u in 0..users {
        let user = format!("u{u:04}");
        for _ in 0..rng.below(4) {
            let mut t = F + rng.below(46) as i64 * DAY + rng.below(48) as i64 * 30 * MIN;
            for _ in 0..1 + rng.below(8) {
                // a, b and c more often than d and x, so funnels go deep.
                let name = NAMES[[0, 0, 1, 1, 2, 2, 3, 4][rng.below(8) as usize]];
                out.push((user.clone(), name, t));
                t += [0, 0, 30 * MIN, 30 * MIN, HOUR, 2 * HOUR, 2 * HOUR, DAY][rng.below(8) as usize];
            }
        }
        for _ in 0..rng.below(5) {
            let t = F + rng.below(46) as i64 * DAY + rng.below(24) as i64 * HOUR;
            out.push((user.clone(), NAMES[rng.below(5) as usize], t));
        }
    }
    out
}

/// Runs SQL over the events in chdb: `{name: rows}`.
fn clickhouse(dir: &Path, events: &[Event], queries: &BTreeMap<String, String>) -> HashMap<String, Value> {
    let rows: Vec<Value> = events.iter().map(|(u, e, t)| json!({"distinct_id": u, "event": e, "ts": t})).collect();
    clickhouse_over(dir, None, &rows, queries)
}

fn as_u64(v: &Value) -> u64 {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Funnel order `strict` (docs/API.md, "Funnels"), by brute force: every event of the user in time
/// order (equal times: step events in step order, other events after them); the longest run of
/// consecutive events that are steps 1, 2, … in order, starts in the range and ends within the
/// window.
fn strict_reference(events: &[(i64, &str)], steps: &[&str], window: i64, from: i64, to: i64) -> usize {
    let rank = |e: &str| steps.iter().position(|s| *s == e).unwrap_or(steps.len());
    let mut ev: Vec<(i64, usize, &str)> = events.iter().map(|&(t, e)| (t, rank(e), e)).collect();
    ev.sort();
    let mut best = 0;
    for i in 0..ev.len() {
        if !(from..to).contains(&ev[i].0) {
            continue;
        }
        for len in (1..=steps.len()).rev() {
            let run = ev.get(i..i + len);
            if run.is_some_and(|r| r.iter().zip(steps).all(|(e, s)| e.2 == *s) && r[len - 1].0 - r[0].0 <= window) {
                best = best.max(len);
                break;
            }
        }
    }
    best
}

/// A cohort condition: (type, event, count_op, count, range, range in ms).
struct Cond(&'static str, &'static str, &'static str, u64, &'static str, i64);

struct CohortDef {
    logic: &'static str,
    conds: Vec<Cond>,
}

impl CohortDef {
    fn body(&self, name: &str) -> Value {
        let conditions: Vec<Value> = self
            .conds
            .iter()
            .map(|c| json!({"type": c.0, "event": c.1, "count_op": c.2, "count": c.3, "range": c.4}))
            .collect();
        json!({"name": name, "conditions": {"logic": self.logic, "conditions": conditions}})
    }

    /// Members at `at` in SQL: users with an event before `at` whose counts satisfy it.
    fn sql_members(&self, at: i64) -> String {
        let preds: Vec<String> = self
            .conds
            .iter()
            .map(|Cond(kind, event, op, count, _, range)| {
                let p = format!("(countIf(event = '{event}' AND ts >= {}) {op} {count})", at - range);
                if *kind == "did_not" {
                    format!("NOT {p}")
                } else {
                    p
                }
            })
            .collect();
        let joined = preds.join(if self.logic == "or" { " OR " } else { " AND " });
        format!("SELECT distinct_id FROM events WHERE ts < {at} GROUP BY distinct_id HAVING {joined}")
    }
}

fn funnel_sql(steps: &[&str], window: i64, from: i64, to: i64, cohort: Option<&str>) -> String {
    let conds: Vec<String> =
        steps
            .iter()
            .enumerate()
            .map(|(k, s)| {
                if k == 0 {
                    format!("event = '{s}' AND ts >= {from} AND ts < {to}")
                } else {
                    format!("event = '{s}'")
                }
            })
            .collect();
    let users = cohort.map(|c| format!(" AND distinct_id IN ({c})")).unwrap_or_default();
    format!(
        "SELECT level, count() FROM (SELECT distinct_id, windowFunnel({window})(ts, {}) AS level FROM events \
         WHERE ts >= {from} AND ts < {} {users} GROUP BY distinct_id) GROUP BY level ORDER BY level",
        conds.join(", "),
        to + window
    )
}

/// Each user's (time, event) pairs.
fn events_by_user(events: &[Event]) -> HashMap<&str, Vec<(i64, &'static str)>> {
    let mut by_user: HashMap<&str, Vec<(i64, &'static str)>> = HashMap::new();
    for (u, e, t) in events {
        by_user.entry(u.as_str()).or_default().push((*t, *e));
    }
    by_user
}

/// Users reaching each step of a strict funnel, by the brute force.
fn strict_levels(
    by_user: &HashMap<&str, Vec<(i64, &'static str)>>,
    steps: &[&str],
    window: i64,
    from: i64,
    to: i64,
) -> Vec<u64> {
    let mut levels = vec![0u64; steps.len()];
    for evs in by_user.values() {
        for level in levels.iter_mut().take(strict_reference(evs, steps, window, from, to)) {
            *level += 1;
        }
    }
    levels
}

/// Each step's count from our `/api/funnel` answer.
fn steps_of(body: &Value) -> Vec<u64> {
    body["steps"].as_array().unwrap().iter().map(|s| s["count"].as_u64().unwrap()).collect()
}

/// Users reaching each step, from ClickHouse's (level, users) rows.
fn funnel_counts(rows: &Value, steps: usize) -> Vec<u64> {
    let mut at_level = vec![0u64; steps + 1];
    for r in rows.as_array().unwrap() {
        at_level[as_u64(&r[0]) as usize] += as_u64(&r[1]);
    }
    (1..=steps).map(|k| at_level[k..].iter().sum()).collect()
}

/// Each cohort's counts per period from our `/api/retention` answer.
fn retention_counts(body: &Value) -> Vec<Vec<u64>> {
    body["cohorts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["values"].as_array().unwrap().iter().map(|v| v["count"].as_u64().unwrap()).collect())
        .collect()
}

/// ClickHouse's retention() rows for `cohorts` cohorts, queried as `{prefix}{first_time}_{c}`,
/// each padded to `periods`.
fn oracle_retention(
    ch: &HashMap<String, Value>,
    prefix: &str,
    first_time: bool,
    cohorts: usize,
    periods: usize,
) -> Vec<Vec<u64>> {
    (0..cohorts)
        .map(|c| {
            let row = ch[&format!("{prefix}{}_{c}", first_time as u8)][0][0].as_array().cloned().unwrap_or_default();
            let mut v: Vec<u64> = row.iter().map(as_u64).collect();
            v.resize(periods, 0);
            v
        })
        .collect()
}

fn retention_sql(start: &str, ret: &str, cohort_start: i64, periods: usize, first_time: bool) -> String {
    let conds: Vec<String> = (0..periods as i64)
        .map(|j| {
            let (e, s) = if j == 0 { (start, cohort_start) } else { (ret, cohort_start + j * DAY) };
            format!("event = '{e}' AND ts >= {s} AND ts < {}", s + DAY)
        })
        .collect();
    // first_time: the user's first start event ever falls in the cohort's period.
    let new_users = if first_time {
        format!(
            "WHERE distinct_id IN (SELECT distinct_id FROM events WHERE event = '{start}' GROUP BY distinct_id \
             HAVING min(ts) >= {cohort_start} AND min(ts) < {})",
            cohort_start + DAY
        )
    } else {
        String::new()
    };
    format!(
        "SELECT sumForEach(r) FROM (SELECT retention({}) AS r FROM events {new_users} GROUP BY distinct_id)",
        conds.join(", ")
    )
}

/// Reads of one project.
struct Api {
    url: String,
    jwt: String,
    project: String,
}

impl Api {
    async fn get(&self, path: &str) -> Value {
        let resp = http()
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.jwt)
            .header("X-Project-Id", &self.project)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 200, "{path}: {body}");
        body
    }
}

#[tokio::test]
async fn analytics_answers_equal_clickhouse_on_random_data() {
    let dir = tempfile::tempdir().unwrap();
    // Three node processes, four shards, three replicas each: per-user work runs on the shards'
    // leaders, spread over the nodes, and the router merges.
    let cluster = Cluster::start(dir.path(), 3, 4, &[]).await;
    let jwt = cluster.token().await;
    // Two data sets, each in its own project: different seeds and sizes.
    for (seed, users) in [(0x5E57_A27u64, 400u64), (0xC0FFEE, 250)] {
        let resp = http()
            .post(format!("{}/projects", cluster.url))
            .bearer_auth(&jwt)
            .json(&json!({"name": format!("oracle-{seed:x}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let project: Value = resp.json().await.unwrap();
        let api =
            Api { url: cluster.url.clone(), jwt: jwt.clone(), project: project["id"].as_str().unwrap().to_owned() };
        let work = dir.path().join(format!("oracle-{seed:x}"));
        std::fs::create_dir_all(&work).unwrap();
        check_dataset(&api, project["token"].as_str().unwrap(), &work, dataset(seed, users)).await;
    }
}

/// Loads `events` into the API's project and into ClickHouse and compares every answer.
async fn check_dataset(api: &Api, token: &str, work: &Path, events: Vec<Event>) {
    assert!(events.len() > 2000, "{} events", events.len());
    // Each event its own uuid, as SDKs send: equal events at equal times are separate events
    // here, as in ClickHouse (without uuids they would be one, docs/API.md "Idempotency of
    // analytics events").
    for (c, chunk) in events.chunks(1000).enumerate() {
        let batch: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, (u, e, t))| json!({"event": e, "distinct_id": u, "timestamp": t, "uuid": format!("oracle-{c}-{i}")}))
            .collect();
        let resp =
            http().post(format!("{}/v1/batch", api.url)).json(&json!({"token": token, "events": batch})).send().await;
        assert_eq!(resp.unwrap().status(), 200);
    }
    let mut sql: BTreeMap<String, String> = BTreeMap::new();

    // Funnels: (steps, window, window parameters); range: the 14 days ending at day 24.
    let (f_from, f_to) = (F + 10 * DAY, F + 24 * DAY);
    let funnels: [(&[&str], i64, &str); 3] = [
        (&["a", "b", "c"], 2 * HOUR, "window=2&window_unit=hour"),
        (&["a", "b", "c", "d"], DAY, "window=1&window_unit=day"),
        (&["x", "a", "b"], 30 * MIN, "window=30&window_unit=minute"),
    ];
    for (i, (steps, window, _)) in funnels.iter().enumerate() {
        sql.insert(format!("funnel{i}"), funnel_sql(steps, *window, f_from, f_to, None));
    }

    // Cohorts, evaluated at `at` (not on a day boundary).
    let at = F + 30 * DAY + 5 * HOUR;
    let cohorts = [
        CohortDef {
            logic: "and",
            conds: vec![Cond("did", "a", ">=", 2, "7d", 7 * DAY), Cond("did_not", "d", ">=", 1, "2w", 14 * DAY)],
        },
        CohortDef {
            logic: "or",
            conds: vec![Cond("did", "b", "=", 1, "3d", 3 * DAY), Cond("did", "x", ">", 2, "30d", 30 * DAY)],
        },
        // Matches users without any c: candidates come from the whole history.
        CohortDef { logic: "and", conds: vec![Cond("did", "c", "<", 1, "10d", 10 * DAY)] },
        CohortDef { logic: "and", conds: vec![Cond("did_not", "a", ">=", 1, "90m", 90 * MIN)] },
        CohortDef {
            logic: "and",
            conds: vec![Cond("did", "a", "!=", 0, "2w", 14 * DAY), Cond("did", "b", "<=", 3, "30d", 30 * DAY)],
        },
    ];
    for (i, c) in cohorts.iter().enumerate() {
        sql.insert(
            format!("cohort{i}"),
            format!("SELECT groupArray(distinct_id) FROM ({} ORDER BY distinct_id)", c.sql_members(at)),
        );
        sql.insert(
            format!("cohort_size{i}"),
            format!("SELECT uniqExact(distinct_id) FROM events WHERE distinct_id IN ({})", c.sql_members(at)),
        );
    }
    // The first cohort as a filter, evaluated at each query's end.
    sql.insert(
        "funnel_cohort".into(),
        funnel_sql(funnels[0].0, funnels[0].1, f_from, f_to, Some(&cohorts[0].sql_members(f_to))),
    );

    // Retention: 7 daily cohorts from day 20, 5 periods each; a before b.
    let (r_from, r_cohorts, r_periods) = (F + 20 * DAY, 7usize, 5usize);
    for first_time in [true, false] {
        for c in 0..r_cohorts {
            sql.insert(
                format!("retention{}_{c}", first_time as u8),
                retention_sql("a", "b", r_from + c as i64 * DAY, r_periods, first_time),
            );
        }
    }

    // DAU/WAU/MAU over the 40 days before day 40 (longer than a query range; MAU reaches back
    // before the data), and the same for the users of cohort 2.
    let a_to = F + 40 * DAY;
    let days: Vec<String> = (0..40).map(|i| (a_to - (40 - i) * DAY).to_string()).collect();
    let active = |filter: &str| {
        format!(
            "SELECT d, uniqExactIf(distinct_id, ts >= d AND ts < d + {DAY}), \
             uniqExactIf(distinct_id, ts >= d - {} AND ts < d + {DAY}), \
             uniqExactIf(distinct_id, ts >= d - {} AND ts < d + {DAY}) \
             FROM events ARRAY JOIN [{}] AS d WHERE ts < {a_to} {filter} GROUP BY d ORDER BY d",
            6 * DAY,
            29 * DAY,
            days.join(",")
        )
    };
    sql.insert("active".into(), active(""));
    sql.insert("active_cohort".into(), active(&format!("AND distinct_id IN ({})", cohorts[2].sql_members(a_to))));

    // Daily events and distinct users over 30 days, all events and only b.
    let (t_from, t_to) = (F + 5 * DAY, F + 35 * DAY);
    for (name, filter) in [("timeseries", ""), ("timeseries_b", "AND event = 'b'")] {
        sql.insert(
            name.into(),
            format!(
                "SELECT intDiv(ts - {t_from}, {DAY}) AS day, count(), uniqExact(distinct_id) FROM events \
                 WHERE ts >= {t_from} AND ts < {t_to} {filter} GROUP BY day ORDER BY day"
            ),
        );
    }

    let ch = clickhouse(work, &events, &sql);

    // Funnels: ordered = windowFunnel, strict = the brute force.
    let by_user = events_by_user(&events);
    for (i, (steps, window, params)) in funnels.iter().enumerate() {
        let q = format!("/api/funnel?steps={}&{params}&range=14d&to={f_to}", steps.join(","));
        let ours = steps_of(&api.get(&q).await);
        let oracle = funnel_counts(&ch[&format!("funnel{i}")], steps.len());
        assert_eq!(ours, oracle, "ordered funnel {steps:?} vs windowFunnel");
        assert!(oracle[1] > 0, "the data reaches step 2 of {steps:?}");
        let levels = strict_levels(&by_user, steps, *window, f_from, f_to);
        let strict = steps_of(&api.get(&format!("{q}&order=strict")).await);
        assert_eq!(strict, levels, "strict funnel {steps:?} vs brute force");
        assert_ne!(strict, ours, "the data tells strict from ordered for {steps:?}");
    }

    // Cohorts: sizes (= uniqExact), members (every page), and as filters.
    let mut ids = Vec::new();
    for (i, c) in cohorts.iter().enumerate() {
        let resp = http()
            .post(format!("{}/api/cohorts", api.url))
            .bearer_auth(&api.jwt)
            .header("X-Project-Id", &api.project)
            .json(&c.body(&format!("cohort {i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
        let size = api.get(&format!("/api/cohorts/{id}?to={at}")).await["size"].as_u64().unwrap();
        assert_eq!(size, as_u64(&ch[&format!("cohort_size{i}")][0][0]), "size of cohort {i}");
        let mut members: Vec<Value> = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = api.get(&format!("/api/cohorts/{id}/users?to={at}&limit=97{cursor}")).await;
            members.extend(page["items"].as_array().unwrap().iter().map(|m| m["distinct_id"].clone()));
            match page["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={c}"),
                None => break,
            }
        }
        assert_eq!(Value::Array(members), ch[&format!("cohort{i}")][0][0], "members of cohort {i}");
        assert!(size > 0, "cohort {i} has members in this data");
        ids.push(id);
    }
    let q = format!(
        "/api/funnel?steps={}&{}&range=14d&to={f_to}&cohort_id={}",
        funnels[0].0.join(","),
        funnels[0].2,
        ids[0]
    );
    assert_eq!(
        steps_of(&api.get(&q).await),
        funnel_counts(&ch["funnel_cohort"], funnels[0].0.len()),
        "funnel of cohort 0"
    );

    // Retention.
    for first_time in [true, false] {
        let kind = if first_time { "first_time" } else { "recurring" };
        let body = api
            .get(&format!(
                "/api/retention?start_event=a&return_event=b&period=day&periods={r_periods}&from={r_from}&to={}&type={kind}",
                r_from + r_cohorts as i64 * DAY
            ))
            .await;
        let ours = retention_counts(&body);
        let oracle = oracle_retention(&ch, "retention", first_time, r_cohorts, r_periods);
        assert_eq!(ours, oracle, "{kind} retention vs ClickHouse retention()");
        let sizes: Vec<u64> = body["cohorts"].as_array().unwrap().iter().map(|c| c["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, oracle.iter().map(|v| v[0]).collect::<Vec<_>>());
        assert!(oracle.iter().any(|v| v[1] > 0), "someone returns in {kind}");
    }

    // Active users.
    let active_rows = |name: &str| -> Vec<(u64, u64, u64)> {
        ch[name].as_array().unwrap().iter().map(|r| (as_u64(&r[1]), as_u64(&r[2]), as_u64(&r[3]))).collect()
    };
    let ours_active = |body: Value| -> Vec<(u64, u64, u64)> {
        body["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["dau"].as_u64().unwrap(), p["wau"].as_u64().unwrap(), p["mau"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(ours_active(api.get(&format!("/api/users/active?period=40d&to={a_to}")).await), active_rows("active"));
    assert_eq!(
        ours_active(api.get(&format!("/api/users/active?period=40d&to={a_to}&cohort_id={}", ids[2])).await),
        active_rows("active_cohort"),
        "active users of cohort 2"
    );

    // Timeseries: every day listed, empty ones 0.
    for (name, filter) in [("timeseries", ""), ("timeseries_b", "&event=b")] {
        let mut want = vec![(0u64, 0u64); 30];
        for r in ch[name].as_array().unwrap() {
            want[as_u64(&r[0]) as usize] = (as_u64(&r[1]), as_u64(&r[2]));
        }
        let body = api.get(&format!("/api/events/timeseries?interval=day&from={t_from}&to={t_to}{filter}")).await;
        let ours: Vec<(u64, u64)> = body["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["count"].as_u64().unwrap(), p["unique_users"].as_u64().unwrap()))
            .collect();
        assert_eq!(ours, want, "{name}");
    }
}

/// Unix milliseconds of midnight UTC on the first of `month` (1–12) of `year`.
fn month_start(year: i16, month: i8) -> i64 {
    let (year, month) = (year + i16::from((month - 1) / 12), (month - 1) % 12 + 1);
    jiff::civil::date(year, month, 1).to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp().as_millisecond()
}

/// 2025-08-01T00:00:00Z: the year's data spans the 400 days from here.
fn year_origin() -> i64 {
    month_start(2025, 8)
}

/// Users active on random days of 400: sessions of a few events on a 30-minute grid (equal
/// times, repeated steps), so that weekly and monthly periods, 90-day funnels and a year of
/// active users all see returns, gaps and users outside their ranges.
fn year_dataset(seed: u64, users: u64) -> Vec<Event> {
    let mut rng = Rng(seed);
    let origin = year_origin();
    let mut out = Vec::new();
    for u in 0..users {
        let user = format!("y{u:04}");
        // Some users come back all year, most for a few sessions.
        let sessions = if rng.below(5) == 0 { 20 + rng.below(40) } else { 1 + rng.below(8) };
        let first_day = rng.below(400) as i64;
        for _ in 0..sessions {
            let day = (first_day + rng.below(120) as i64 * if rng.below(3) == 0 { 3 } else { 1 }) % 400;
            let mut t = origin + day * DAY + rng.below(48) as i64 * 30 * MIN;
            for _ in 0..1 + rng.below(5) {
                let name = NAMES[[0, 0, 1, 1, 2, 2, 3, 4][rng.below(8) as usize]];
                out.push((user.clone(), name, t));
                t += [0, 30 * MIN, 2 * HOUR, DAY, 3 * DAY][rng.below(5) as usize];
            }
        }
    }
    out
}

/// `retention()` over explicit periods: `bounds[j]..bounds[j + 1]` is period j of the cohort
/// whose period is `bounds[0]..bounds[1]`.
fn retention_bounds_sql(start: &str, ret: &str, bounds: &[i64], first_time: bool) -> String {
    let conds: Vec<String> = bounds
        .windows(2)
        .enumerate()
        .map(|(j, w)| format!("event = '{}' AND ts >= {} AND ts < {}", if j == 0 { start } else { ret }, w[0], w[1]))
        .collect();
    let new_users = if first_time {
        format!(
            "WHERE distinct_id IN (SELECT distinct_id FROM events WHERE event = '{start}' GROUP BY distinct_id \
             HAVING min(ts) >= {} AND min(ts) < {})",
            bounds[0], bounds[1]
        )
    } else {
        String::new()
    };
    format!(
        "SELECT sumForEach(r) FROM (SELECT retention({}) AS r FROM events {new_users} GROUP BY distinct_id)",
        conds.join(", ")
    )
}

/// Events and distinct users per period `bounds[i]..bounds[i + 1]`, one row per period with
/// events: (period start, count, users).
fn buckets_sql(bounds: &[i64], filter: &str) -> String {
    let periods: Vec<String> = bounds.windows(2).map(|w| format!("({}, {})", w[0], w[1])).collect();
    format!(
        "SELECT b.1, count(), uniqExact(distinct_id) FROM events ARRAY JOIN [{}] AS b \
         WHERE ts >= b.1 AND ts < b.2 {filter} GROUP BY b.1 ORDER BY b.1",
        periods.join(", ")
    )
}

#[tokio::test]
async fn a_year_of_analytics_equals_clickhouse_over_weeks_months_and_quarters() {
    let dir = tempfile::tempdir().unwrap();
    // Frequent flushes: most events are read from segments and their rollups.
    let cluster = Cluster::start(dir.path(), 3, 4, &["--snapshot-every", "4"]).await;
    let jwt = cluster.token().await;
    let resp = http()
        .post(format!("{}/projects", cluster.url))
        .bearer_auth(&jwt)
        .json(&json!({"name": "oracle-year"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let project: Value = resp.json().await.unwrap();
    let api = Api { url: cluster.url.clone(), jwt: jwt.clone(), project: project["id"].as_str().unwrap().to_owned() };
    let work = dir.path().join("oracle-year");
    std::fs::create_dir_all(&work).unwrap();
    let events = year_dataset(0x7EA5, 600);
    assert!(events.len() > 10_000, "{} events", events.len());
    let token = project["token"].as_str().unwrap();
    for (c, chunk) in events.chunks(1000).enumerate() {
        let batch: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(
                |(i, (u, e, t))| json!({"event": e, "distinct_id": u, "timestamp": t, "uuid": format!("year-{c}-{i}")}),
            )
            .collect();
        let resp =
            http().post(format!("{}/v1/batch", api.url)).json(&json!({"token": token, "events": batch})).send().await;
        assert_eq!(resp.unwrap().status(), 200);
    }

    // Periods, all in UTC: 12 weekly cohorts from Monday 2025-09-01 followed for 8 weeks, 12
    // monthly cohorts from 2025-09 followed for 4 months; 52 weeks and 12 months of events.
    let week0 = month_start(2025, 9);
    let weeks: Vec<i64> = (0..=60).map(|w| week0 + w * 7 * DAY).collect();
    let months: Vec<i64> = (0..=16).map(|m| month_start(2025, 9 + m as i8)).collect();
    let (w_cohorts, w_periods, m_cohorts, m_periods) = (12usize, 8usize, 12usize, 4usize);
    let mut sql: BTreeMap<String, String> = BTreeMap::new();
    for first_time in [true, false] {
        for c in 0..w_cohorts {
            let bounds = &weeks[c..=c + w_periods];
            sql.insert(format!("week{}_{c}", first_time as u8), retention_bounds_sql("a", "b", bounds, first_time));
        }
        for c in 0..m_cohorts {
            let bounds = &months[c..=c + m_periods];
            sql.insert(format!("month{}_{c}", first_time as u8), retention_bounds_sql("a", "b", bounds, first_time));
        }
    }
    sql.insert("weekly".into(), buckets_sql(&weeks[..=52], ""));
    sql.insert("monthly".into(), buckets_sql(&months[..=12], ""));
    sql.insert("monthly_c".into(), buckets_sql(&months[..=12], "AND event = 'c'"));
    // A year of active users ending 2026-09-01: 366 days, MAU reaching 29 days before them.
    let a_to = month_start(2026, 9);
    let days: Vec<String> = (0..366).map(|i| (a_to - (366 - i) * DAY).to_string()).collect();
    sql.insert(
        "active".into(),
        format!(
            "SELECT d, uniqExactIf(distinct_id, ts >= d AND ts < d + {DAY}), \
             uniqExactIf(distinct_id, ts >= d - {} AND ts < d + {DAY}), \
             uniqExactIf(distinct_id, ts >= d - {} AND ts < d + {DAY}) \
             FROM events ARRAY JOIN [{}] AS d WHERE ts < {a_to} GROUP BY d ORDER BY d",
            6 * DAY,
            29 * DAY,
            days.join(",")
        ),
    );
    // Funnels whose first step falls in the 90 days before 2026-06-01.
    let (f_to, f_from) = (month_start(2026, 6), month_start(2026, 6) - 90 * DAY);
    let funnels: [(&[&str], i64, &str); 2] = [
        (&["a", "b", "c"], DAY, "window=1&window_unit=day"),
        (&["a", "b", "c", "d"], 7 * DAY, "window=1&window_unit=week"),
    ];
    for (i, (steps, window, _)) in funnels.iter().enumerate() {
        sql.insert(format!("funnel{i}"), funnel_sql(steps, *window, f_from, f_to, None));
    }
    let ch = clickhouse(&work, &events, &sql);

    // Retention, weekly and monthly, first-time and recurring.
    for (period, bounds, cohorts, periods) in
        [("week", &weeks, w_cohorts, w_periods), ("month", &months, m_cohorts, m_periods)]
    {
        for first_time in [true, false] {
            let kind = if first_time { "first_time" } else { "recurring" };
            let body = api
                .get(&format!(
                    "/api/retention?start_event=a&return_event=b&period={period}&periods={periods}&from={}&to={}&type={kind}",
                    bounds[0], bounds[cohorts]
                ))
                .await;
            let ours = retention_counts(&body);
            let oracle = oracle_retention(&ch, period, first_time, cohorts, periods);
            assert_eq!(ours, oracle, "{period} {kind} retention vs ClickHouse retention()");
            assert!(oracle.iter().any(|v| v[1..].iter().any(|n| *n > 0)), "someone returns in {period} {kind}");
        }
    }

    // Timeseries: every week and month of the year, empty ones 0.
    for (name, interval, bounds, filter) in [
        ("weekly", "week", &weeks[..=52], ""),
        ("monthly", "month", &months[..=12], ""),
        ("monthly_c", "month", &months[..=12], "&event=c"),
    ] {
        let mut want = vec![(0u64, 0u64); bounds.len() - 1];
        for r in ch[name].as_array().unwrap() {
            let i = bounds.iter().position(|b| *b == r[0].as_i64().unwrap_or_else(|| as_u64(&r[0]) as i64)).unwrap();
            want[i] = (as_u64(&r[1]), as_u64(&r[2]));
        }
        assert!(want.iter().filter(|w| w.0 > 0).count() * 2 > want.len(), "{name}: most periods have events");
        let (from, to) = (bounds[0], bounds[bounds.len() - 1]);
        let series =
            |math: &str| format!("/api/events/timeseries?interval={interval}&from={from}&to={to}{filter}{math}");
        let body = api.get(&series("")).await;
        let ours: Vec<(u64, u64)> = body["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["count"].as_u64().unwrap(), p["unique_users"].as_u64().unwrap()))
            .collect();
        assert_eq!(ours, want, "{name}");
        // Counts only: from the hourly rollups of the flushed segments, the same counts.
        let body = api.get(&series("&math=total")).await;
        let counts: Vec<(u64, Value)> = body["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["count"].as_u64().unwrap(), p["unique_users"].clone()))
            .collect();
        let want_counts: Vec<(u64, Value)> = want.iter().map(|w| (w.0, Value::Null)).collect();
        assert_eq!(counts, want_counts, "{name}, math=total");
    }

    // DAU/WAU/MAU over 366 days.
    let body = api.get(&format!("/api/users/active?period=366d&to={a_to}")).await;
    let ours: Vec<(u64, u64, u64)> = body["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["dau"].as_u64().unwrap(), p["wau"].as_u64().unwrap(), p["mau"].as_u64().unwrap()))
        .collect();
    let oracle: Vec<(u64, u64, u64)> =
        ch["active"].as_array().unwrap().iter().map(|r| (as_u64(&r[1]), as_u64(&r[2]), as_u64(&r[3]))).collect();
    assert_eq!(ours.len(), 366);
    assert_eq!(ours, oracle, "a year of active users");
    assert!(oracle.iter().all(|d| d.2 > 0), "every day of the year has monthly active users");

    // 90-day funnels, ordered (= windowFunnel) and strict (= the brute force).
    let by_user = events_by_user(&events);
    for (i, (steps, window, params)) in funnels.iter().enumerate() {
        let q = format!("/api/funnel?steps={}&{params}&range=90d&to={f_to}", steps.join(","));
        let oracle = funnel_counts(&ch[&format!("funnel{i}")], steps.len());
        assert_eq!(steps_of(&api.get(&q).await), oracle, "90-day funnel {steps:?} vs windowFunnel");
        assert!(oracle[2] > 0, "the data reaches step 3 of {steps:?}");
        let levels = strict_levels(&by_user, steps, *window, f_from, f_to);
        assert_eq!(steps_of(&api.get(&format!("{q}&order=strict")).await), levels, "strict 90-day funnel {steps:?}");
    }
}
