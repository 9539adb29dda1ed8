//! A shard that cannot answer, for real (issue 5; docs/API.md, "Reads: time range, partial answers
//! and limits"): five `sextant node` processes (4 shards, replication factor 3) and a router.
//! Killing two of the three replicas of shard 1 — a pair chosen from the nodes' own Raft membership
//! so that the meta group and the other shards keep a majority — leaves shard 1 without a quorum.
//! Every scatter-gather read must then fail with `503 shards_unavailable` naming the missing shard,
//! unless the client asks for `allow_partial=true`: then it answers with exactly what the live
//! shards hold and says which shards are missing. Restarting the nodes brings complete answers
//! back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};
use sextant_model::partition::{default_table, partition_of};
use sextant_model::ProjectId;

const NODES: usize = 5;
const SHARDS: u32 = 4;
/// Traces generated per shard (ids are picked so that every shard holds this many).
const PER_SHARD: usize = 6;

async fn get(url: &str, token: &str, path_and_query: &str) -> (u16, Option<String>, Value) {
    let resp = http()
        .get(format!("{url}{path_and_query}"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, resp.json().await.unwrap_or(Value::Null))
}

fn trace_ids(body: &Value) -> BTreeSet<String> {
    body["items"].as_array().unwrap().iter().map(|t| t["trace_id"].as_str().unwrap().to_owned()).collect()
}

/// (service, operation) -> count of the APM endpoint list.
fn apm_counts(body: &Value) -> BTreeMap<(String, String), u64> {
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                (e["service"].as_str().unwrap().to_owned(), e["operation"].as_str().unwrap().to_owned()),
                e["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// (source, target) -> call_count of the service map.
fn edges(body: &Value) -> BTreeMap<(String, String), u64> {
    body["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                (e["source"].as_str().unwrap().to_owned(), e["target"].as_str().unwrap().to_owned()),
                e["call_count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The span-sourced error groups' total count.
fn span_errors(body: &Value) -> u64 {
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["source"] == "span")
        .map(|g| g["count"].as_u64().unwrap())
        .sum()
}

/// What each read must answer for the traces in `live`.
struct Expected {
    traces: BTreeSet<String>,
    apm: BTreeMap<(String, String), u64>,
    edges: BTreeMap<(String, String), u64>,
    errors: u64,
}

fn expected(live: &[&String], error: impl Fn(&str) -> bool) -> Expected {
    let n = live.len() as u64;
    let errors = live.iter().filter(|t| error(t)).count() as u64;
    let mut apm = BTreeMap::new();
    let mut edges = BTreeMap::new();
    if n > 0 {
        apm.insert(("api".to_owned(), "POST /pay".to_owned()), n);
        apm.insert(("web".to_owned(), "GET /checkout".to_owned()), n);
        edges.insert(("web".to_owned(), "api".to_owned()), n);
    }
    Expected { traces: live.iter().map(|t| t.to_string()).collect(), apm, edges, errors }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_without_quorum_fails_reads_unless_partial_answers_are_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), NODES, SHARDS, &[]).await;
    let url = cluster.url.clone();
    let key = cluster.creds["api_key"].as_str().unwrap().to_owned();
    let token =
        login(&url, cluster.creds["email"].as_str().unwrap(), cluster.creds["password"].as_str().unwrap()).await;
    let project: ProjectId = cluster.creds["project_id"].as_str().unwrap().parse().unwrap();

    // Trace ids whose partition (the bootstrap's default table) puts PER_SHARD on every shard.
    let table = default_table(SHARDS);
    let shard_of = |trace: &str| table[partition_of(&project, trace.as_bytes()) as usize];
    let mut by_shard: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for i in 0.. {
        let trace = format!("pt-{i}");
        let slot = by_shard.entry(shard_of(&trace)).or_default();
        if slot.len() < PER_SHARD {
            slot.push(trace);
        }
        if by_shard.len() == SHARDS as usize && by_shard.values().all(|v| v.len() == PER_SHARD) {
            break;
        }
    }
    let all: Vec<String> = by_shard.values().flatten().cloned().collect();
    // Every third trace's api span fails.
    let is_error = |trace: &str| trace[3..].parse::<u64>().unwrap() % 3 == 0;

    // Two spans per trace (web -> api) and a log line carrying the trace id (same shard).
    let now = jiff::Timestamp::now().as_millisecond();
    let base = now - 10 * 60 * 1000;
    let mut spans = Vec::new();
    let mut logs = Vec::new();
    for (k, trace) in all.iter().enumerate() {
        let t = base + k as i64 * 1000;
        let error = is_error(trace);
        spans.push(json!({"trace_id": trace, "span_id": "root", "service_name": "web",
            "operation": "GET /checkout", "timestamp": t, "duration_ms": 40 + k}));
        let mut api = json!({"trace_id": trace, "span_id": "api", "parent_span_id": "root", "service_name": "api",
            "operation": "POST /pay", "timestamp": t + 1, "duration_ms": 5 + k, "status": if error { "error" } else { "ok" }});
        if error {
            api["attributes"] =
                json!({"exception.type": "PaymentError", "exception.message": format!("card declined for order {k}")});
        }
        spans.push(api);
        logs.push(json!({"timestamp": t + 2, "level": "info", "service": "api", "trace_id": trace,
            "message": format!("partialprobe handled order {k}")}));
    }
    for (kind, body) in [("spans", json!({ "spans": spans })), ("logs", json!({ "logs": logs }))] {
        let resp = http()
            .post(format!("{url}/api/v1/ingest/{kind}"))
            .header("X-API-Key", &key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    }

    let range = format!("from={}&to={}", base - 60_000, now + 60_000);
    let reads: Vec<(&str, String)> = vec![
        ("traces", format!("/api/v1/traces?{range}&limit=1000")),
        ("logs", format!("/api/v1/logs/search?q=partialprobe&{range}&limit=1000")),
        ("apm", format!("/api/v1/apm/endpoints?{range}")),
        ("service-map", format!("/api/v1/service-map?{range}")),
        ("errors", format!("/api/v1/errors?{range}")),
    ];
    let check = |name: &str, body: &Value, want: &Expected| match name {
        "traces" | "logs" => assert_eq!(trace_ids(body), want.traces, "{name}: {body}"),
        "apm" => assert_eq!(apm_counts(body), want.apm, "{name}: {body}"),
        "service-map" => assert_eq!(edges(body), want.edges, "{name}: {body}"),
        "errors" => assert_eq!(span_errors(body), want.errors, "{name}: {body}"),
        _ => unreachable!(),
    };

    // Everything up: complete answers, never marked partial.
    let everything = expected(&all.iter().collect::<Vec<_>>(), is_error);
    assert!(everything.errors > 0);
    for (name, path) in &reads {
        let (status, _, body) = get(&url, &token, path).await;
        assert_eq!(status, 200, "{name}: {body}");
        check(name, &body, &everything);
        assert!(body.get("partial").is_none() && body.get("missing_shards").is_none(), "{name}: {body}");
    }

    // The replicas of every group, from the nodes' Raft membership.
    let status = wait_for("a node status", Duration::from_secs(30), || cluster.status(0)).await;
    let voters: BTreeMap<u64, BTreeSet<u64>> = status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group"].as_u64().unwrap(),
                g["voters"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect(),
            )
        })
        .collect();
    let voters = if voters.len() == SHARDS as usize + 1 {
        voters
    } else {
        // Node 1 does not host every group: ask every node.
        let mut all_voters = BTreeMap::new();
        for i in 0..NODES {
            let s = wait_for("a node status", Duration::from_secs(30), || cluster.status(i)).await;
            for g in s["groups"].as_array().unwrap() {
                all_voters.insert(
                    g["group"].as_u64().unwrap(),
                    g["voters"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect::<BTreeSet<u64>>(),
                );
            }
        }
        all_voters
    };
    assert_eq!(voters.len(), SHARDS as usize + 1, "groups seen: {voters:?}");
    // Groups left without a majority when `dead` nodes are down.
    let lost = |dead: &BTreeSet<u64>| -> BTreeSet<u64> {
        voters.iter().filter(|(_, v)| v.difference(dead).count() * 2 <= v.len()).map(|(g, _)| *g).collect()
    };
    // Two of shard 1's replicas, keeping the meta group (0) and as many shards as possible.
    let replicas: Vec<u64> = voters[&1].iter().copied().collect();
    assert_eq!(replicas.len(), 3, "shard 1 should have 3 replicas: {voters:?}");
    let victims: BTreeSet<u64> = (0..3)
        .flat_map(|a| ((a + 1)..3).map(move |b| (a, b)))
        .map(|(a, b)| BTreeSet::from([replicas[a], replicas[b]]))
        .filter(|dead| !lost(dead).contains(&0))
        .min_by_key(|dead| lost(dead).len())
        .expect("no pair of shard 1's replicas keeps the meta group alive");
    let missing: Vec<u64> = lost(&victims).into_iter().collect();
    assert!(missing.contains(&1) && missing.len() < SHARDS as usize, "missing {missing:?}, voters {voters:?}");
    eprintln!("killing nodes {victims:?}: shards {missing:?} lose their quorum");
    for &id in &victims {
        cluster.kill_node(id as usize - 1);
    }
    // The surviving shards have (or elect) a leader on a live node.
    for g in (1..=SHARDS as u64).filter(|g| !missing.contains(g)) {
        cluster.leader_of(g).await;
    }

    let live: Vec<&String> = all.iter().filter(|t| !missing.contains(&shard_of(t))).collect();
    assert!(!live.is_empty() && live.len() < all.len());
    let partial = expected(&live, is_error);

    // Without allow_partial: the contract's error, naming the missing shards, for every read.
    // (Each read waits for the dead shard's deadline, so they run concurrently.)
    let failed = futures::future::join_all(reads.iter().map(|(_, path)| get(&url, &token, path))).await;
    for ((name, _), (status, retry_after, body)) in reads.iter().zip(&failed) {
        assert_eq!(*status, 503, "{name}: {body}");
        assert_eq!(body["error"]["code"], "shards_unavailable", "{name}: {body}");
        assert_eq!(body["error"]["details"]["missing_shards"], json!(missing), "{name}: {body}");
        assert!(retry_after.is_some(), "{name}: no Retry-After");
    }
    // allow_partial=false is the same as not asking.
    let (status, _, body) = get(&url, &token, &format!("{}&allow_partial=false", reads[0].1)).await;
    assert_eq!((status, &body["error"]["code"]), (503, &json!("shards_unavailable")), "{body}");

    // With allow_partial=true: exactly what the live shards hold, and which shards are missing.
    let answered = futures::future::join_all(reads.iter().map(|(_, path)| {
        let path = format!("{path}&allow_partial=true");
        let (url, token) = (url.clone(), token.clone());
        async move { get(&url, &token, &path).await }
    }))
    .await;
    for ((name, _), (status, _, body)) in reads.iter().zip(&answered) {
        assert_eq!(*status, 200, "{name}: {body}");
        assert_eq!(body["partial"], true, "{name}: {body}");
        assert_eq!(body["missing_shards"], json!(missing), "{name}: {body}");
        check(name, body, &partial);
    }

    // A trace on a missing shard is unavailable (503, retry), not "not found"; others are served.
    let dead_trace = all.iter().find(|t| missing.contains(&shard_of(t))).unwrap();
    let (status, retry_after, body) = get(&url, &token, &format!("/api/v1/traces/{dead_trace}")).await;
    assert_eq!((status, &body["error"]["code"]), (503, &json!("unavailable")), "{body}");
    assert!(retry_after.is_some());
    let (status, _, body) = get(&url, &token, &format!("/api/v1/traces/{}", live[0])).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["spans"].as_array().unwrap().len(), 2, "{body}");

    // The nodes come back: complete answers again, without asking for partial ones.
    for &id in &victims {
        cluster.start_node(id as usize - 1);
    }
    for (name, path) in &reads {
        let body = wait_for("complete answers after the restart", Duration::from_secs(120), || {
            let (url, token, path) = (url.clone(), token.clone(), path.clone());
            async move {
                let (status, _, body) = get(&url, &token, &path).await;
                (status == 200).then_some(body)
            }
        })
        .await;
        check(name, &body, &everything);
        assert!(body.get("partial").is_none(), "{name}: {body}");
    }
}
