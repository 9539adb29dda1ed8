//! Storage benchmark: writes objects from the load generator's data generator into one data
//! shard's segment engine (the same apply → buffer → flush → compaction path as a node, without
//! Raft or HTTP), then reports bytes on disk per object against the objects' JSON size, and
//! trace lookup latency. `--ndjson` also writes the objects as JSON lines so a peer database
//! (ClickHouse via chdb, see `scripts/bench_storage_peers.py`) can store the very same rows.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;
use rand::seq::SliceRandom;
use serde_json::{json, Value};
use sextant_model::ingest::{validate_all, validate_log, validate_span, LogsBody, SpansBody};
use sextant_model::row::RowBatch;
use sextant_node::segment::Table;
use sextant_node::shard::SegmentShard;
use sextant_node::state_machine::GroupStore;
use sextant_node::types::{Command, SnapshotMeta};
use sextant_proto::convert::persist_row::{encode_ingest, encode_ingest_decoded};

#[derive(clap::Args)]
pub struct StorageBenchArgs {
    /// `spans` or `logs`.
    #[arg(long, default_value = "spans")]
    pub kind: String,
    /// Objects to write (in batches of 1000).
    #[arg(long, default_value_t = 1_000_000)]
    pub objects: usize,
    /// Directory for the shard (must not exist or be empty).
    #[arg(long)]
    pub dir: PathBuf,
    /// Also write every object as one JSON line here, for peer databases.
    #[arg(long)]
    pub ndjson: Option<PathBuf>,
    /// Trace lookups to time (spans only).
    #[arg(long, default_value_t = 2000)]
    pub lookups: usize,
    /// Only write the objects to `--ndjson` (no storage engine): the data set of the read
    /// benchmarks (`scripts/bench_reads.sh`), which load it into `sextant dev` and ClickHouse.
    #[arg(long, requires = "ndjson")]
    pub ndjson_only: bool,
    /// Time lookups on the shard an earlier run left in `--dir` instead of writing one (a 10M
    /// data set takes minutes to write).
    #[arg(long)]
    pub lookups_only: bool,
    /// With `--ndjson-only`: number the batches from this one, so that data sets written in
    /// parts (a part per run) are the parts of one large data set, ids unique across them.
    #[arg(long, default_value_t = 0, requires = "ndjson_only")]
    pub first_batch: u32,
    /// Hand each batch's rows to the shard with its payload, as `sextant dev`'s router does,
    /// instead of having apply decode the payload.
    #[arg(long)]
    pub handoff: bool,
}

/// What a later `--lookups-only` run needs of the data set: its project and some trace ids.
#[derive(serde::Serialize, serde::Deserialize)]
struct LookupTargets {
    project: String,
    trace_ids: Vec<String>,
}

fn time_lookups(shard: &SegmentShard, targets: &LookupTargets, lookups: usize) -> anyhow::Result<Value> {
    let mut rng = rand::thread_rng();
    let mut hist = Histogram::<u64>::new(3)?;
    let mut found = 0usize;
    for _ in 0..lookups {
        let id = targets.trace_ids.choose(&mut rng).expect("non-empty");
        let t = Instant::now();
        let spans = shard.trace(&targets.project, id).run()?;
        hist.record(t.elapsed().as_micros() as u64)?;
        found += usize::from(!spans.is_empty());
    }
    anyhow::ensure!(found == lookups, "a stored trace was not found");
    Ok(json!({ "p50": hist.value_at_quantile(0.5), "p99": hist.value_at_quantile(0.99), "max": hist.max() }))
}

const BATCH: usize = 1000;

/// The batches `run` would store, seeded the same way, as JSON lines only.
fn write_ndjson(args: &StorageBenchArgs) -> anyhow::Result<()> {
    let path = args.ndjson.as_ref().expect("clap requires --ndjson");
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut objects = 0u64;
    let first = u64::from(args.first_batch);
    for b in first..first + args.objects.div_ceil(BATCH) as u64 {
        let body = crate::loadgen::templates(&args.kind, BATCH, 1, b)?.remove(0).render(b);
        let value: Value = serde_json::from_slice(&body)?;
        for o in value[args.kind.as_str()].as_array().into_iter().flatten() {
            serde_json::to_writer(&mut out, o)?;
            out.write_all(b"\n")?;
            objects += 1;
        }
    }
    out.flush()?;
    println!("{}", json!({ "kind": args.kind, "objects": objects, "ndjson": path }));
    Ok(())
}

pub fn run(args: StorageBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.kind == "spans" || args.kind == "logs", "--kind must be spans or logs");
    if args.ndjson_only {
        return write_ndjson(&args);
    }
    let shard_dir = args.dir.join("shard");
    let targets_file = args.dir.join("lookup-targets.json");
    if args.lookups_only {
        let shard = SegmentShard::open(&shard_dir)?;
        let targets: LookupTargets = serde_json::from_slice(&std::fs::read(&targets_file)?)?;
        let report = json!({ "trace_lookup_us": time_lookups(&shard, &targets, args.lookups)? });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    anyhow::ensure!(!shard_dir.exists(), "{} already exists", shard_dir.display());
    let mut shard = SegmentShard::open(&shard_dir)?;
    let project = sextant_model::ProjectId::random().to_string();
    let mut ndjson = args.ndjson.as_ref().map(std::fs::File::create).transpose()?.map(std::io::BufWriter::new);
    let (mut json_bytes, mut objects, mut index) = (0u64, 0u64, 0u64);
    let mut trace_ids = Vec::new();
    let started = Instant::now();
    // The flushes run on this thread: their CPU time is this thread's while they run.
    let mut flush_cpu = 0.0;
    let mut checkpoint = |shard: &mut SegmentShard, index: u64| -> anyhow::Result<()> {
        let meta = SnapshotMeta { snapshot_id: format!("bench-{index}"), ..Default::default() };
        let cpu = crate::loadgen::thread_cpu_seconds();
        shard.begin_checkpoint(meta)()?;
        flush_cpu += crate::loadgen::thread_cpu_seconds() - cpu;
        Ok(())
    };
    for b in 0..args.objects.div_ceil(BATCH) {
        // A fresh body per batch (seeded by its number): nothing repeats across batches, so
        // compression sees realistic variety.
        let body = crate::loadgen::templates(&args.kind, BATCH, 1, b as u64)?.remove(0).render(b as u64);
        let value: Value = serde_json::from_slice(&body)?;
        let items = value[args.kind.as_str()].as_array().cloned().unwrap_or_default();
        json_bytes += items.iter().map(|o| serde_json::to_vec(o).map_or(0, |v| v.len() as u64)).sum::<u64>();
        objects += items.len() as u64;
        if let Some(out) = ndjson.as_mut() {
            for o in &items {
                serde_json::to_writer(&mut *out, o)?;
                out.write_all(b"\n")?;
            }
        }
        let mut batch = RowBatch { project_id: project.clone(), ..Default::default() };
        if args.kind == "spans" {
            let parsed: SpansBody = serde_json::from_slice(&body)?;
            let spans = parsed.spans.into_items().map_err(|n| anyhow::anyhow!("{n} spans in one batch"))?;
            batch.spans = validate_all(spans, validate_span).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            trace_ids.extend(batch.spans.iter().step_by(50).map(|s| s.trace_id.clone()));
        } else {
            let parsed: LogsBody = serde_json::from_slice(&body)?;
            let logs = parsed.logs.into_items().map_err(|n| anyhow::anyhow!("{n} logs in one batch"))?;
            batch.logs = validate_all(logs, validate_log).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        index += 1;
        let batch_id = index as u128;
        if args.handoff {
            let decoded = Arc::new(encode_ingest_decoded(batch));
            let payload = decoded.payload.to_vec();
            let _held = shard.handoffs().hold(batch_id, decoded);
            shard.apply(index, Command::Ingest { batch_id, payload: payload.into() });
        } else {
            shard.apply(index, Command::Ingest { batch_id, payload: encode_ingest(batch).into() });
        }
        if shard.wants_flush() {
            checkpoint(&mut shard, index)?;
        }
    }
    checkpoint(&mut shard, index)?;
    let mut merges = 0;
    while let Some(job) = shard.compaction(i64::MAX) {
        job.run()?;
        merges += 1;
    }
    let write_secs = started.elapsed().as_secs_f64();
    if let Some(mut out) = ndjson {
        out.flush()?;
    }

    let tables: &[Table] = if args.kind == "spans" { &[Table::Spans, Table::TraceSummaries] } else { &[Table::Logs] };
    let mut disk = json!({});
    let mut total = 0u64;
    for t in tables {
        let (segments, bytes) = shard.segment_stats(*t);
        let columns: serde_json::Map<String, Value> = shard
            .column_bytes(*t)
            .into_iter()
            .map(|(name, b)| (name, json!((b as f64 / objects as f64 * 100.0).round() / 100.0)))
            .collect();
        disk[t.name()] = json!({ "segments": segments, "bytes": bytes, "column_bytes_per_object": columns });
        total += bytes;
    }
    let mut report = json!({
        "kind": args.kind,
        "objects": objects,
        "json_bytes_per_object": json_bytes as f64 / objects as f64,
        "disk": disk,
        "disk_bytes_per_object": total as f64 / objects as f64,
        "disk_to_json_ratio": total as f64 / json_bytes as f64,
        "write_objects_per_sec": objects as f64 / write_secs,
        "flush_cpu_us_per_object": 1e6 * flush_cpu / objects.max(1) as f64,
        "merges": merges,
    });

    if args.kind == "spans" && !trace_ids.is_empty() {
        let targets = LookupTargets { project, trace_ids };
        std::fs::write(&targets_file, serde_json::to_vec(&targets)?)?;
        if args.lookups > 0 {
            report["trace_lookup_us"] = time_lookups(&shard, &targets, args.lookups)?;
        }
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
