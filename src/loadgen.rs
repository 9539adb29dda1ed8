//! Load generator: realistic observability batches sent at a fixed concurrency for a fixed
//! time; reports acknowledged objects/s, MB/s and latency percentiles, plus the throughput of
//! parsing the same bodies with serde_json alone (the ceiling of any JSON ingest path).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

#[derive(clap::Args, Clone)]
pub struct LoadgenArgs {
    /// Router base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key; or read it from --credentials.
    #[arg(long, env = "SEXTANT_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// A credentials.json written by `sextant dev` or a bootstrapping router.
    #[arg(long)]
    pub credentials: Option<PathBuf>,
    /// `spans`, `logs`, `metrics` or `events` (product analytics, to `/v1/batch`).
    #[arg(long, default_value = "spans")]
    pub kind: String,
    /// Objects per request.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Requests in flight (closed loop); with --rate, the most in flight at once (connections).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Open loop: send this many requests per second whatever the answers' latency, with at
    /// most --concurrency in flight (a send due while all are busy is counted as not sent),
    /// and report admitted latency and what was refused (see docs/RELIABILITY.md, "Overload").
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds a request may take before it counts as timed out (unanswered).
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Seconds to run.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Distinct request bodies generated up front (ids are still unique per request).
    #[arg(long, default_value_t = 32)]
    pub pool: usize,
    /// Skip the serde_json ceiling measurement.
    #[arg(long)]
    pub no_ceiling: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Stands where a per-request unique id prefix goes.
const MARK: &[u8; 8] = b"@@@@@@@@";

const SERVICES: &[&str] =
    &["api-gateway", "checkout", "payments", "inventory", "users", "search", "notifications", "auth"];
const ROUTES: &[&str] = &[
    "GET /api/products",
    "GET /api/products/{id}",
    "POST /api/cart",
    "POST /api/checkout",
    "GET /api/users/{id}",
    "POST /api/login",
    "GET /api/search",
    "PUT /api/cart/{id}",
    "DELETE /api/cart/{id}",
    "GET /healthz",
];
const DB_OPS: &[&str] =
    &["SELECT products", "SELECT users", "INSERT orders", "UPDATE inventory", "redis GET", "redis SET"];
const REGIONS: &[&str] = &["eu-west-1", "us-east-1", "ap-south-1"];
const LOG_TEMPLATES: &[(&str, &str)] = &[
    ("INFO", "request completed method=GET path=/api/products/{n} status=200 duration_ms={n}"),
    ("INFO", "user {n} logged in from 10.{n}.{n}.{n}"),
    ("DEBUG", "cache miss for key product:{n}, fetching from database"),
    ("WARN", "slow query took {n} ms: SELECT * FROM orders WHERE customer_id = {n}"),
    ("ERROR", "payment declined for order {n}: card_declined (insufficient funds)"),
    ("INFO", "published event order.created id={hex} to topic orders"),
    ("ERROR", "upstream connect error or disconnect/reset before headers. retried {n} times"),
    ("INFO", "scheduled job cleanup-sessions removed {n} expired sessions"),
    ("WARN", "retrying request to inventory-service attempt={n} backoff_ms={n}"),
    ("FATAL", "out of memory: killed process {n} (worker)"),
];

fn hex(rng: &mut StdRng, n: usize) -> String {
    (0..n).map(|_| format!("{:x}", rng.gen_range(0..16u8))).collect()
}

fn trace_id(rng: &mut StdRng) -> String {
    format!("{}{}", std::str::from_utf8(MARK).unwrap(), hex(rng, 24))
}

fn attributes(rng: &mut StdRng, service: &str, route: &str) -> Value {
    let mut a = serde_json::Map::new();
    a.insert("service.version".into(), json!(format!("1.{}.{}", rng.gen_range(0..9), rng.gen_range(0..30))));
    a.insert("deployment.environment".into(), json!("production"));
    a.insert("cloud.region".into(), json!(REGIONS[rng.gen_range(0..REGIONS.len())]));
    a.insert("k8s.pod.name".into(), json!(format!("{service}-{}", hex(rng, 5))));
    a.insert("http.method".into(), json!(route.split(' ').next().unwrap_or("GET")));
    let extra = rng.gen_range(0..=10);
    let optional: [(&str, Value); 10] = [
        ("http.route", json!(route.split(' ').nth(1).unwrap_or("/"))),
        ("http.status_code", json!([200, 200, 200, 201, 404, 500][rng.gen_range(0..6)])),
        ("net.peer.name", json!(format!("10.0.{}.{}", rng.gen_range(0..255), rng.gen_range(0..255)))),
        ("user.id", json!(format!("u-{}", rng.gen_range(0..100_000)))),
        ("db.system", json!("postgresql")),
        ("thread.id", json!(rng.gen_range(1..64))),
        ("http.response_content_length", json!(rng.gen_range(0..100_000))),
        ("cache.hit", json!(rng.gen_bool(0.7))),
        ("feature_flags", json!(["new-checkout", "fast-search"])),
        ("sampling.ratio", json!(0.25)),
    ];
    for (k, v) in optional.into_iter().take(extra) {
        a.insert(k.into(), v);
    }
    Value::Object(a)
}

fn spans(rng: &mut StdRng, n: usize, now_ms: i64) -> Value {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let tid = trace_id(rng);
        let len = rng.gen_range(5..=15).min(n - out.len());
        let start = now_ms - rng.gen_range(0..60_000);
        let mut ids: Vec<String> = Vec::new();
        for i in 0..len {
            let service = SERVICES[if i == 0 { 0 } else { rng.gen_range(0..SERVICES.len()) }];
            let op = if i > 0 && rng.gen_bool(0.4) {
                DB_OPS[rng.gen_range(0..DB_OPS.len())]
            } else {
                ROUTES[rng.gen_range(0..ROUTES.len())]
            };
            let sid = hex(rng, 16);
            let parent = if i == 0 { Value::Null } else { json!(ids[rng.gen_range(0..ids.len())]) };
            let error = rng.gen_bool(0.03);
            let mut attrs = attributes(rng, service, op);
            if error {
                attrs["exception.type"] = json!("TimeoutError");
                attrs["exception.message"] = json!(format!("deadline exceeded after {} ms", rng.gen_range(100..5000)));
            }
            out.push(json!({
                "trace_id": tid,
                "span_id": sid,
                "parent_span_id": parent,
                "service_name": service,
                "operation": op,
                "timestamp": sextant_model::time::format_nanos((start + i as i64) * 1_000_000),
                "duration_ms": (rng.gen_range(0.1f64..2.0).powi(4) * 50.0 * 1000.0).round() / 1000.0,
                "status": if error { "error" } else { "ok" },
                "attributes": attrs,
            }));
            ids.push(sid);
        }
    }
    json!({ "spans": out })
}

fn logs(rng: &mut StdRng, n: usize, now_ms: i64) -> Value {
    let logs: Vec<Value> = (0..n)
        .map(|_| {
            let (level, template) = LOG_TEMPLATES[rng.gen_range(0..LOG_TEMPLATES.len())];
            let mut message = String::new();
            for (i, part) in template.split("{n}").enumerate() {
                if i > 0 {
                    message.push_str(&rng.gen_range(1..100_000).to_string());
                }
                message.push_str(part);
            }
            let message = message.replace("{hex}", &hex(rng, 12));
            let service = SERVICES[rng.gen_range(0..SERVICES.len())];
            let mut log = json!({
                "timestamp": sextant_model::time::format_nanos((now_ms - rng.gen_range(0..60_000)) * 1_000_000),
                "level": level,
                "service": service,
                "message": message,
                "attributes": {"k8s.pod.name": format!("{service}-{}", hex(rng, 5)), "cloud.region": REGIONS[rng.gen_range(0..REGIONS.len())]},
            });
            if rng.gen_bool(0.6) {
                log["trace_id"] = json!(trace_id(rng));
                log["span_id"] = json!(hex(rng, 16));
            }
            log
        })
        .collect();
    json!({ "logs": logs })
}

fn metrics(rng: &mut StdRng, n: usize, now_ms: i64) -> Value {
    let metrics: Vec<Value> = (0..n)
        .map(|i| {
            let total: u64 = [8u64, 16, 32, 64][rng.gen_range(0..4)] << 30;
            json!({
                "timestamp": sextant_model::time::format_nanos((now_ms - i as i64 * 10) * 1_000_000),
                "hostname": format!("{}-host-{}", std::str::from_utf8(MARK).unwrap(), rng.gen_range(0..200)),
                "cpu_percent": rng.gen_range(0.0..100.0),
                "memory_used_bytes": rng.gen_range(0..total),
                "memory_total_bytes": total,
                "disk_used_percent": rng.gen_range(5.0..95.0),
                "network_rx_bytes_per_sec": rng.gen_range(0.0..1e8),
                "network_tx_bytes_per_sec": rng.gen_range(0.0..1e8),
                "attributes": {"os.type": "linux", "cloud.region": REGIONS[rng.gen_range(0..REGIONS.len())]},
            })
        })
        .collect();
    json!({ "metrics": metrics })
}

/// Product-analytics events: 50 event names, users drawn from a million, 5 to 10 properties
/// each, and a uuid per event (idempotency), as an SDK sends them.
fn events(rng: &mut StdRng, n: usize, now_ms: i64) -> Value {
    let events: Vec<Value> = (0..n)
        .map(|i| {
            let browser = ["Chrome", "Firefox", "Safari", "Edge"][rng.gen_range(0..4)];
            let plan = ["free", "pro", "growth"][rng.gen_range(0..3)];
            let name =
                if rng.gen_bool(0.3) { "$pageview".to_owned() } else { format!("action_{}", rng.gen_range(0..49)) };
            json!({
                "event": name,
                "distinct_id": format!("user-{}", rng.gen_range(0..1_000_000)),
                "timestamp": now_ms - rng.gen_range(0..60_000),
                "uuid": format!("{}-{i:06}-{}", std::str::from_utf8(MARK).unwrap(), hex(rng, 12)),
                "properties": properties(rng, browser, plan),
            })
        })
        .collect();
    json!({ "events": events })
}

/// Between 5 and 10 properties, as a web SDK's autocapture and an app's own add them.
fn properties(rng: &mut StdRng, browser: &str, plan: &str) -> Value {
    let mut props = json!({
        "$current_url": format!("https://shop.example{}", ROUTES[rng.gen_range(0..ROUTES.len())].split(' ').nth(1).unwrap_or("/")),
        "$browser": browser,
        "plan": plan,
        "cart_value": rng.gen_range(0..50_000) as f64 / 100.0,
    });
    props["$os"] = json!(["Windows", "Mac OS X", "iOS", "Android", "Linux"][rng.gen_range(0..5)]);
    let extra: [(&str, fn(&mut StdRng) -> Value); 5] = [
        ("$screen_width", |r| json!([1280, 1440, 1920, 390, 414][r.gen_range(0..5)])),
        ("$referring_domain", |r| json!(["google.com", "$direct", "news.ycombinator.com", "t.co"][r.gen_range(0..4)])),
        ("utm_source", |r| json!(["newsletter", "ads", "partner"][r.gen_range(0..3)])),
        ("experiment_checkout", |r| json!(if r.gen_bool(0.5) { "control" } else { "test" })),
        ("is_returning", |r| json!(r.gen_bool(0.4))),
    ];
    for (key, value) in extra.iter().take(rng.gen_range(0..=extra.len())) {
        props[*key] = value(rng);
    }
    props
}

/// A request body with the offsets of its unique-id placeholders.
pub struct Template {
    pub bytes: Vec<u8>,
    marks: Vec<usize>,
}

impl Template {
    /// A copy of the body whose ids are unique to request number `seq`.
    pub fn render(&self, seq: u64) -> Vec<u8> {
        let mut body = self.bytes.clone();
        let tag = format!("{:08x}", seq as u32);
        for &m in &self.marks {
            body[m..m + 8].copy_from_slice(tag.as_bytes());
        }
        body
    }
}

pub fn templates(kind: &str, batch: usize, pool: usize, seed: u64) -> anyhow::Result<Vec<Template>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let now_ms = sextant_model::Clock::system().now_millis();
    (0..pool)
        .map(|_| {
            let value = match kind {
                "spans" => spans(&mut rng, batch, now_ms),
                "logs" => logs(&mut rng, batch, now_ms),
                "metrics" => metrics(&mut rng, batch, now_ms),
                "events" => events(&mut rng, batch, now_ms),
                other => anyhow::bail!("unknown kind `{other}`: use spans, logs, metrics or events"),
            };
            let bytes = serde_json::to_vec(&value)?;
            let marks = bytes.windows(MARK.len()).enumerate().filter(|(_, w)| *w == MARK).map(|(i, _)| i).collect();
            Ok(Template { bytes, marks })
        })
        .collect()
}

pub fn endpoint(kind: &str) -> &'static str {
    match kind {
        "logs" => "/api/v1/ingest/logs",
        "events" => "/v1/batch",
        "metrics" => "/api/v1/ingest/infrastructure",
        _ => "/api/v1/ingest/spans",
    }
}

/// serde_json parsing the same bodies into the ingest types, on every core for 3 s.
struct Ceiling {
    objects_per_sec: f64,
    /// CPU time per object (the threads' own, so other load on the machine does not count).
    cpu_us_per_object: f64,
}

pub(crate) fn thread_cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write to; the clock id is a constant the OS knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn ceiling(kind: &str, templates: &Arc<Vec<Template>>, batch: usize) -> Ceiling {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = Duration::from_secs(3);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let templates = templates.clone();
            let kind = kind.to_owned();
            std::thread::spawn(move || {
                let started = Instant::now();
                let cpu = thread_cpu_seconds();
                let mut parsed = 0u64;
                let mut i = t;
                while started.elapsed() < run {
                    let body = &templates[i % templates.len()].bytes;
                    let ok = match kind.as_str() {
                        "logs" => serde_json::from_slice::<sextant_model::ingest::LogsBody>(body).is_ok(),
                        "metrics" => serde_json::from_slice::<sextant_model::ingest::MetricsBody>(body).is_ok(),
                        "events" => serde_json::from_slice::<sextant_model::analytics::BatchBody>(body).is_ok(),
                        _ => serde_json::from_slice::<sextant_model::ingest::SpansBody>(body).is_ok(),
                    };
                    assert!(ok, "generated body does not parse");
                    parsed += batch as u64;
                    i += 1;
                }
                (parsed, started.elapsed().as_secs_f64(), thread_cpu_seconds() - cpu)
            })
        })
        .collect();
    let (mut rate, mut parsed, mut cpu) = (0.0, 0u64, 0.0);
    for h in handles {
        // A thread that panicked (a body that does not parse) counts nothing, as before.
        let Ok((n, secs, thread_cpu)) = h.join() else { continue };
        rate += n as f64 / secs;
        parsed += n;
        cpu += thread_cpu;
    }
    Ceiling { objects_per_sec: rate, cpu_us_per_object: 1e6 * cpu / parsed.max(1) as f64 }
}

/// What an open-loop run saw.
#[derive(Default)]
struct OpenLoop {
    admitted: u64,
    objects: u64,
    bytes: u64,
    /// Refusals by status: 429, 503 and others.
    status_429: u64,
    status_503: u64,
    other_status: u64,
    /// 429 and 503 answers without a `Retry-After` header (the contract says every one has it).
    missing_retry_after: u64,
    timed_out: u64,
    failed: u64,
    /// Refused answers' latency, to show that refusals are fast.
    refused_hist: Option<Histogram<u64>>,
    hist: Option<Histogram<u64>>,
}

async fn open_loop(
    args: &LoadgenArgs,
    rate: f64,
    client: reqwest::Client,
    url: String,
    key: String,
    templates: Arc<Vec<Template>>,
) -> anyhow::Result<()> {
    anyhow::ensure!(rate > 0.0 && rate.is_finite(), "--rate must be positive");
    let stats = Arc::new(std::sync::Mutex::new(OpenLoop {
        hist: Some(Histogram::new(3)?),
        refused_hist: Some(Histogram::new(3)?),
        ..Default::default()
    }));
    let slots = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let seq = Arc::new(AtomicU64::new(rand::random::<u32>() as u64));
    let started = Instant::now();
    let run = Duration::from_secs(args.seconds);
    let (mut due_sent, mut not_sent) = (0u64, 0u64);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut tasks = tokio::task::JoinSet::new();
    let batch = args.batch as u64;
    let events_kind = args.kind == "events";
    let timeout = Duration::from_secs(args.timeout);
    while started.elapsed() < run {
        tick.tick().await;
        let due = (started.elapsed().as_secs_f64() * rate) as u64;
        while due_sent < due {
            due_sent += 1;
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                not_sent += 1;
                continue;
            };
            let (client, url, key, stats) = (client.clone(), url.clone(), key.clone(), stats.clone());
            let n = seq.fetch_add(1, Ordering::Relaxed);
            let body = templates[n as usize % templates.len()].render(n);
            tasks.spawn(async move {
                let len = body.len() as u64;
                let t = Instant::now();
                let resp = client
                    .post(&url)
                    .header(if events_kind { "X-Analytics-Token" } else { "X-API-Key" }, &key)
                    .header("Content-Type", "application/json")
                    .timeout(timeout)
                    .body(body)
                    .send()
                    .await;
                let elapsed = t.elapsed().as_micros() as u64;
                let (status, retry_after) = match &resp {
                    Ok(r) => (Some(r.status().as_u16()), r.headers().contains_key("retry-after")),
                    Err(_) => (None, false),
                };
                let timed_out = resp.as_ref().err().is_some_and(|e| e.is_timeout());
                let resp_error = resp.as_ref().err().map(|e| format!("{e:?}"));
                // The body is read so that the connection is reused.
                if let Ok(r) = resp {
                    let _ = r.bytes().await;
                }
                let mut s = stats.lock().unwrap();
                match status {
                    Some(c) if (200..300).contains(&c) => {
                        s.admitted += 1;
                        s.objects += batch;
                        s.bytes += len;
                        s.hist.as_mut().unwrap().record(elapsed).ok();
                    }
                    Some(c) => {
                        match c {
                            429 => s.status_429 += 1,
                            503 => s.status_503 += 1,
                            _ => s.other_status += 1,
                        }
                        if (c == 429 || c == 503) && !retry_after {
                            s.missing_retry_after += 1;
                        }
                        s.refused_hist.as_mut().unwrap().record(elapsed).ok();
                    }
                    None if timed_out => s.timed_out += 1,
                    None => {
                        s.failed += 1;
                        if s.failed <= 3 {
                            eprintln!("request failed: {:?}", resp_error);
                        }
                    }
                }
                drop(slot);
            });
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    let s = stats.lock().unwrap();
    let (h, rh) = (s.hist.as_ref().unwrap(), s.refused_hist.as_ref().unwrap());
    let sent = due_sent - not_sent;
    let refused = s.status_429 + s.status_503;
    let ms = |h: &Histogram<u64>, q: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1e3 };
    let result = json!({
        "kind": args.kind, "batch": args.batch, "max_in_flight": args.concurrency, "seconds": secs,
        "offered_per_sec": rate, "sent": sent, "not_sent_client_busy": not_sent,
        "admitted": s.admitted, "admitted_per_sec": s.admitted as f64 / secs,
        "objects_per_sec": s.objects as f64 / secs, "mb_per_sec": s.bytes as f64 / secs / 1e6,
        "admitted_p50_ms": ms(h, 0.5), "admitted_p99_ms": ms(h, 0.99), "admitted_max_ms": h.max() as f64 / 1e3,
        "refused_429": s.status_429, "refused_503": s.status_503,
        "rejection_rate": if sent > 0 { refused as f64 / sent as f64 } else { 0.0 },
        "refused_p99_ms": ms(rh, 0.99), "missing_retry_after": s.missing_retry_after,
        "other_status": s.other_status, "timed_out": s.timed_out, "failed": s.failed,
    });
    if args.json {
        println!("{result}");
    } else {
        println!(
            "{} x{} offered {:.0}/s for {:.1}s (at most {} in flight): sent {}, admitted {} ({:.0}/s, {:.0} objects/s), \
             p50 {:.1} ms, p99 {:.1} ms; refused 429: {}, 503: {} (rate {:.1}%, p99 {:.1} ms, {} without Retry-After); \
             other {}, timed out {}, failed {}, not sent {}",
            args.kind, args.batch, rate, secs, args.concurrency, sent, s.admitted, s.admitted as f64 / secs,
            s.objects as f64 / secs, ms(h, 0.5), ms(h, 0.99), s.status_429, s.status_503,
            result["rejection_rate"].as_f64().unwrap_or(0.0) * 100.0, ms(rh, 0.99), s.missing_retry_after,
            s.other_status, s.timed_out, s.failed, not_sent
        );
    }
    Ok(())
}

pub async fn run(args: LoadgenArgs) -> anyhow::Result<()> {
    let api_key = match (&args.api_key, &args.credentials) {
        (Some(k), _) => k.clone(),
        (None, Some(path)) => {
            let creds: Value = serde_json::from_slice(&std::fs::read(path)?)?;
            // Analytics events authenticate with the project's ingest token.
            let field = if args.kind == "events" { "ingest_token" } else { "api_key" };
            creds[field].as_str().ok_or_else(|| anyhow::anyhow!("no {field} in {}", path.display()))?.to_owned()
        }
        (None, None) => anyhow::bail!("pass --api-key or --credentials"),
    };
    let templates = Arc::new(templates(&args.kind, args.batch, args.pool.max(1), 42)?);
    let client = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build()?;
    let url = format!("{}{}", args.url.trim_end_matches('/'), endpoint(&args.kind));
    if let Some(rate) = args.rate {
        return open_loop(&args, rate, client, url, api_key, templates).await;
    }
    let ceiling = if args.no_ceiling { None } else { Some(ceiling(&args.kind, &templates, args.batch)) };
    let seq = Arc::new(AtomicU64::new(rand::random::<u32>() as u64));
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (client, url, key, templates, seq) =
                (client.clone(), url.clone(), api_key.clone(), templates.clone(), seq.clone());
            let batch = args.batch as u64;
            let events_kind = args.kind == "events";
            tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new(3).expect("histogram");
                let (mut objects, mut bytes, mut errors) = (0u64, 0u64, 0u64);
                while Instant::now() < deadline {
                    let n = seq.fetch_add(1, Ordering::Relaxed);
                    let body = templates[n as usize % templates.len()].render(n);
                    let len = body.len() as u64;
                    let t = Instant::now();
                    let resp = client
                        .post(&url)
                        .header(if events_kind { "X-Analytics-Token" } else { "X-API-Key" }, &key)
                        .header("Content-Type", "application/json")
                        .body(body)
                        .send()
                        .await;
                    match resp {
                        Ok(r) if r.status().is_success() => {
                            hist.record(t.elapsed().as_micros() as u64).ok();
                            objects += batch;
                            bytes += len;
                        }
                        Ok(r) => {
                            errors += 1;
                            if errors <= 3 {
                                eprintln!("request failed: {} {}", r.status(), r.text().await.unwrap_or_default());
                            }
                        }
                        Err(e) => {
                            errors += 1;
                            if errors <= 3 {
                                eprintln!("request failed: {e}");
                            }
                        }
                    }
                }
                (hist, objects, bytes, errors)
            })
        })
        .collect();
    let mut hist = Histogram::<u64>::new(3)?;
    let (mut objects, mut bytes, mut errors) = (0u64, 0u64, 0u64);
    for w in workers {
        let (h, o, b, e) = w.await?;
        hist.add(h)?;
        objects += o;
        bytes += b;
        errors += e;
    }
    let secs = started.elapsed().as_secs_f64();
    let rate = objects as f64 / secs;
    let result = json!({
        "kind": args.kind, "batch": args.batch, "concurrency": args.concurrency, "seconds": secs,
        "objects": objects, "objects_per_sec": rate, "mb_per_sec": bytes as f64 / secs / 1e6,
        "p50_ms": hist.value_at_quantile(0.5) as f64 / 1e3, "p99_ms": hist.value_at_quantile(0.99) as f64 / 1e3,
        "max_ms": hist.max() as f64 / 1e3, "errors": errors,
        "serde_json_ceiling_objects_per_sec": ceiling.as_ref().map(|c| c.objects_per_sec),
        "serde_json_cpu_us_per_object": ceiling.as_ref().map(|c| c.cpu_us_per_object),
        "ratio_to_ceiling": ceiling.as_ref().map(|c| rate / c.objects_per_sec),
    });
    if args.json {
        println!("{result}");
    } else {
        println!(
            "{} x{} concurrency {} for {:.1}s: {:.0} objects/s acknowledged, {:.1} MB/s, p50 {:.1} ms, p99 {:.1} ms, {} errors",
            args.kind, args.batch, args.concurrency, secs, rate, result["mb_per_sec"].as_f64().unwrap_or(0.0),
            result["p50_ms"].as_f64().unwrap_or(0.0), result["p99_ms"].as_f64().unwrap_or(0.0), errors
        );
        if let Some(c) = ceiling {
            println!(
                "serde_json parse ceiling (same bodies, all cores): {:.0} objects/s ({:.2} CPU µs each); ratio {:.2}",
                c.objects_per_sec,
                c.cpu_us_per_object,
                rate / c.objects_per_sec
            );
        }
    }
    anyhow::ensure!(objects > 0, "no request succeeded");
    Ok(())
}
