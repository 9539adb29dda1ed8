#!/usr/bin/env python3
"""Observability reads, Sextant vs ClickHouse (chdb) on the same rows, in one run.

1. `sextant bench-storage --ndjson-only` writes N spans and N log lines of the load
   generator's data set as JSON lines.
2. The same lines are posted to a release `sextant dev` (4 shards) through the ingest API and
   inserted into ClickHouse (chdb, MergeTree, ZSTD(3), the schema and sort keys of
   scripts/bench_storage_peers.py; the log table also has the OpenTelemetry exporter's
   `tokenbf_v1` skip index on the message).
3. Each query runs once to warm up, then RUNS times on each engine, one at a time: Sextant
   end to end through its HTTP API (request sent to body received, JWT auth included),
   ClickHouse in process (query to result formatted as CSV). The answers are compared.

Usage: scripts/bench_reads.py --objects N [--runs R] [--work DIR] [--bin target/release/sextant]
                              [--spread-hours H] [--snapshot-every N] [--only NAME]
       scripts/bench_reads.py --objects 100000000 --parts 20 ...   (spans only, in parts)
With --work DIR the generated files, Sextant's data directory and the ClickHouse database are
kept there and reused by the next run (only the sextant process is restarted), so a changed
query path can be re-measured on the same data.
Needs: pip install chdb
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor, wait, FIRST_COMPLETED

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_storage_peers import ORDER, SCHEMAS  # noqa: E402
from dev_server import DevServer  # noqa: E402

SERVICE = "payments"  # trace list filter: a service that is never the root of a trace
COMMON_TERM = "payment"  # one log template in ten


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def loadavg():
    return os.getloadavg()[0]


# ---------------------------------------------------------------- data set

def generate(args, kind, path, part=0):
    if os.path.exists(path + ".done"):
        return json.load(open(path + ".done"))
    t = time.time()
    objects = args.objects // args.parts
    out = subprocess.run(
        [args.bin, "bench-storage", "--kind", kind, "--objects", str(objects), "--dir",
         os.path.join(args.work, "gen"), "--ndjson", path, "--ndjson-only",
         "--first-batch", str(part * objects // 1000)],
        check=True, capture_output=True, text=True).stdout
    info = json.loads(out)
    info["generated_at_ms"] = int(t * 1000)
    if kind == "spans" and args.spread_hours:
        spread(path, args.spread_hours)
        info["spread_hours"] = args.spread_hours
    json.dump(info, open(path + ".done", "w"))
    log(f"generated {info['objects']} {kind} in {time.time() - t:.0f}s")
    return info


def spread(path, hours):
    """Moves each trace back by up to `hours` (by a hash of its id, its spans together): the
    generator writes the last minute's traffic, a long-range read wants it spread out."""
    import calendar
    import zlib
    span_ns = int(hours * 3600e9)
    tmp = path + ".tmp"
    with open(path) as src, open(tmp, "w") as dst:
        for line in src:
            o = json.loads(line)
            m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z$", o["timestamp"])
            ns = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) * 10**9
            ns += int((m.group(2) or "0").ljust(9, "0")[:9])
            ns -= zlib.crc32(o["trace_id"].encode()) * 2654435761 % span_ns
            secs, frac = divmod(ns, 10**9)
            o["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"
            dst.write(json.dumps(o, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- sextant

class Sextant(DevServer):
    def __init__(self, args):
        super().__init__(args.bin, os.path.join(args.work, "sextant"), os.path.join(args.work, "sextant.log"),
                         ["--snapshot-every", str(args.snapshot_every)] if args.snapshot_every else [])

    def ingest(self, kind, path, batch=1000, threads=4):
        """Posts the JSON lines of `path` in batches; every batch must be fully accepted."""
        key = self.creds["api_key"]
        local = threading.local()

        def send(lines):
            body = b'{"' + kind.encode() + b'":[' + b",".join(lines) + b"]}"
            if not hasattr(local, "conn"):
                local.conn = self.connection()
            for attempt in range(50):
                status, data = self.request("POST", f"/api/v1/ingest/{kind}", body,
                                            {"X-API-Key": key, "Content-Type": "application/json"}, local.conn)
                if status == 200:
                    accepted = json.loads(data)["accepted"]
                    assert accepted == len(lines), data
                    return accepted
                assert status in (429, 503), (status, data[:500])
                time.sleep(0.1 * (attempt + 1))
            raise RuntimeError("ingest kept failing")

        t, sent, pending = time.time(), 0, set()
        with ThreadPoolExecutor(threads) as ex, open(path, "rb") as f:
            buf = []
            for line in f:
                buf.append(line.rstrip(b"\n"))
                if len(buf) == batch:
                    pending.add(ex.submit(send, buf))
                    buf = []
                    if len(pending) >= threads * 2:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        sent += sum(d.result() for d in done)
            if buf:
                pending.add(ex.submit(send, buf))
            sent += sum(d.result() for d in pending)
        secs = time.time() - t
        log(f"ingested {sent} {kind} into sextant in {secs:.0f}s ({sent / secs:.0f}/s)")
        return sent

    def get(self, path, conn):
        status, data = self.request("GET", path, None, self.bearer(), conn)
        assert status == 200, (path, status, data[:500])
        return data


# ---------------------------------------------------------------- clickhouse

LOG_INDEX = ", INDEX idx_message message TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 1"
JSON_SETTINGS = ("SETTINGS input_format_json_read_numbers_as_strings = 1, "
                 "input_format_json_read_bools_as_strings = 1, input_format_json_read_arrays_as_strings = 1")


def clickhouse_session(args):
    from chdb import session
    s = session.Session(os.path.join(args.work, "clickhouse"))
    if not os.path.exists(os.path.join(args.work, "clickhouse.done")):
        s.query("DROP DATABASE IF EXISTS b")
        s.query("CREATE DATABASE b")
        s.query(f"CREATE TABLE b.spans ({SCHEMAS['spans']}) ENGINE = MergeTree ORDER BY {ORDER['spans']}")
        s.query(f"CREATE TABLE b.logs ({SCHEMAS['logs']}{LOG_INDEX}) ENGINE = MergeTree ORDER BY {ORDER['logs']}")
    return s


def clickhouse(args, spans_path, logs_path, s=None):
    """Loads the files (either may be None) into ClickHouse, unless an earlier run did."""
    s = s or clickhouse_session(args)
    if not os.path.exists(os.path.join(args.work, "clickhouse.done")):
        t = time.time()
        # The same conversion as bench_storage_peers.rows(), done by ClickHouse itself.
        spans_path and s.query(f"""INSERT INTO b.spans SELECT trace_id, span_id, ifNull(parent_span_id, ''), service_name,
            operation, parseDateTime64BestEffort(timestamp, 9), toUInt64(round(duration_ms * 1e6)),
            ifNull(status, 'unset'), attributes
            FROM file('{spans_path}', 'JSONEachRow', 'trace_id String, span_id String,
              parent_span_id Nullable(String), service_name String, operation String, timestamp String,
              duration_ms Float64, status Nullable(String), attributes Map(String, String)') {JSON_SETTINGS}""")
        logs_path and s.query(f"""INSERT INTO b.logs SELECT parseDateTime64BestEffort(timestamp, 9), upper(level), service,
            message, ifNull(trace_id, ''), ifNull(span_id, ''), attributes
            FROM file('{logs_path}', 'JSONEachRow', 'timestamp String, level String, service String,
              message String, trace_id Nullable(String), span_id Nullable(String),
              attributes Map(String, String)') {JSON_SETTINGS}""")
        log(f"loaded clickhouse in {time.time() - t:.0f}s")
    return s


def clickhouse_done(args, s):
    if not os.path.exists(os.path.join(args.work, "clickhouse.done")):
        t = time.time()
        s.query("OPTIMIZE TABLE b.spans FINAL")
        s.query("OPTIMIZE TABLE b.logs FINAL")
        open(os.path.join(args.work, "clickhouse.done"), "w").write("ok")
        log(f"merged clickhouse's parts in {time.time() - t:.0f}s")
    return s


def bytes_on_disk(args, ch):
    """Bytes of stored rows in each engine: Sextant's segment files (with the trace summaries
    and rollups derived from them), ClickHouse's active parts."""
    ours = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(args.work, "sextant"))
               for f in fs if f.endswith(".parquet"))
    theirs = {r[0]: int(r[1]) for r in ch_rows(ch, "SELECT table, sum(bytes_on_disk) FROM system.parts "
                                                 "WHERE active AND database = 'b' GROUP BY table")} if ch else {}
    return {"sextant_segment_bytes": ours, "clickhouse_bytes": theirs}


def ch_rows(s, sql):
    # No query condition cache (ClickHouse ≥ 25.3 remembers which granules matched a WHERE and
    # skips the others when the same condition comes again): Sextant caches nothing either.
    setting = "use_query_condition_cache = 0"
    sql = sql + (f", {setting}" if " SETTINGS " in sql else f" SETTINGS {setting}")
    out = str(s.query(sql, "JSONCompact"))
    return json.loads(out)["data"] if out.strip() else []


# ---------------------------------------------------------------- queries

def apm_sql(f_ms, t_ms):
    w = f"ts >= fromUnixTimestamp64Milli(toInt64({f_ms})) AND ts < fromUnixTimestamp64Milli(toInt64({t_ms}))"
    return f"""SELECT service_name, operation, count() AS c, countIf(status = 'error') AS e, e / c,
        c / {(t_ms - f_ms) / 1000}, avg(duration_ns) / 1e6, quantiles(0.5, 0.9, 0.95, 0.99)(duration_ns),
        max(duration_ns) / 1e6 FROM b.spans WHERE {w} GROUP BY service_name, operation ORDER BY c DESC"""


def apm_over_days(f_ms, days):
    """APM over each of `days` whole days from the first day starting in the range."""
    day = 86_400_000
    first = -(-f_ms // day) * day
    return [(f"APM percentiles, {d} whole days", f"/api/v1/apm/endpoints?from={first}&to={first + d * day}",
             [[apm_sql(first, first + d * day)]]) for d in days]


def queries(rare, f_ms, t_ms):
    rng = f"from={f_ms}&to={t_ms}"
    w = f"ts >= fromUnixTimestamp64Milli(toInt64({f_ms})) AND ts < fromUnixTimestamp64Milli(toInt64({t_ms}))"
    apm = apm_sql(f_ms, t_ms)
    trace_cols = """trace_id, min(ts) AS start,
        (max(toUnixTimestamp64Nano(ts) + duration_ns) - toUnixTimestamp64Nano(start)) / 1e6 AS duration_ms,
        count() AS span_count, countIf(status = 'error') AS error_count,
        arraySort(groupUniqArray(service_name)) AS services,
        argMinIf(service_name, ts, parent_span_id = '') AS root_service,
        argMinIf(operation, ts, parent_span_id = '') AS root_operation"""
    traces = [
        # Every trace with a span of the service (found through the sort key), summarised.
        f"""SELECT {trace_cols} FROM b.spans
            WHERE trace_id IN (SELECT trace_id FROM b.spans WHERE service_name = '{SERVICE}')
            GROUP BY trace_id HAVING start >= fromUnixTimestamp64Milli(toInt64({f_ms}))
              AND start < fromUnixTimestamp64Milli(toInt64({t_ms}))
            ORDER BY start DESC, trace_id DESC LIMIT 100""",
        # One pass over all spans, grouped by trace.
        f"""SELECT {trace_cols} FROM b.spans WHERE {w}
            GROUP BY trace_id HAVING countIf(service_name = '{SERVICE}') > 0
            ORDER BY start DESC, trace_id DESC LIMIT 100""",
    ]

    def logs(term):
        q = f"""SELECT ts, level, service, message, trace_id, span_id, attributes FROM b.logs
            WHERE hasToken(message, '{term}') AND {w} ORDER BY ts DESC LIMIT 100"""
        return [q + " SETTINGS use_skip_indexes = 1", q + " SETTINGS use_skip_indexes = 0"]

    service_map = [
        f"""SELECT service_name, count() AS c, countIf(status = 'error') / c, quantile(0.95)(duration_ns)
            FROM b.spans WHERE {w} GROUP BY service_name""",
        f"""SELECT p.service_name AS source, c.service_name AS target, count() AS calls,
              countIf(c.status = 'error') AS errors, quantile(0.95)(c.duration_ns)
            FROM (SELECT trace_id, parent_span_id, service_name, status, duration_ns FROM b.spans
                  WHERE parent_span_id != '' AND {w}) AS c
            INNER JOIN (SELECT trace_id, span_id, service_name FROM b.spans WHERE {w}) AS p
              ON c.trace_id = p.trace_id AND c.parent_span_id = p.span_id
            WHERE source != target GROUP BY source, target ORDER BY calls DESC""",
    ]
    enc = urllib.parse.quote
    # Without log lines (`rare` None) there are no log searches.
    log_searches = [] if rare is None else [
        (f"log search, rare term ({rare})", f"/api/v1/logs/search?q={enc(rare)}&limit=100&{rng}", [[q] for q in logs(rare)]),
        (f"log search, common term ({COMMON_TERM})", f"/api/v1/logs/search?q={COMMON_TERM}&limit=100&{rng}",
         [[q] for q in logs(COMMON_TERM)]),
    ]
    return [
        ("APM percentiles, all endpoints", f"/api/v1/apm/endpoints?{rng}", [[apm]]),
        (f"trace list, service={SERVICE}", f"/api/v1/traces?service={SERVICE}&limit=100&{rng}", [[q] for q in traces]),
        *log_searches,
        ("service map", f"/api/v1/service-map?{rng}", [service_map]),
    ]


def agree(name, ours, theirs):
    """Checks that both engines answered the same thing (where the answer is exact)."""
    o = json.loads(ours)
    if name.startswith("APM"):
        a = {(e["service"], e["operation"]): e["count"] for e in o["items"]}
        b = {(r[0], r[1]): int(r[2]) for r in theirs[0]}
    elif name.startswith("trace list"):
        a = [t["trace_id"] for t in o["items"]]
        b = [r[0] for r in theirs[0]]
    elif name.startswith("log search"):
        # Lines with the same timestamp may be ordered differently: compare the times.
        a = sorted(nanos(t["timestamp"]) for t in o["items"])
        b = sorted(nanos(r[0]) for r in theirs[0])
    else:
        a = {(e["source"], e["target"]): e["call_count"] for e in o["edges"]}
        b = {(r[0], r[1]): int(r[2]) for r in theirs[1]}
    return a == b, len(a)


def nanos(ts):
    """'2026-11-23T04:20:00.123Z' or '2026-11-23 04:20:00.123000000' -> comparable key."""
    m = re.match(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d+))?Z?$", ts)
    assert m, ts
    return f"{m.group(1)} {m.group(2)}.{(m.group(3) or '').ljust(9, '0')}"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p * len(xs) + 0.5)) - 1))]


def measure(args, sx, ch, rare, f_ms, t_ms):
    results = []
    for name, path, variants in queries(rare, f_ms, t_ms) + apm_over_days(f_ms, args.apm_days):
        if args.only not in name:
            continue
        # A new connection per query: the router closes one left idle while ClickHouse ran the
        # previous query (minutes at 100M).
        conn = sx.connection()
        load_before = loadavg()
        ours, body = [], None
        try:
            for i in range(args.runs + 1):
                if i == 1:
                    cpu0 = sx.cpu_seconds()
                t = time.perf_counter()
                body = sx.get(path, conn)
                if i:
                    ours.append((time.perf_counter() - t) * 1000)
            ours_cpu = (sx.cpu_seconds() - cpu0) / args.runs
        except AssertionError as e:
            # Recorded, not hidden: e.g. a shard over the per-shard timeout answers 503.
            r = {"query": name, "path": path, "sextant_failed": str(e)[:300],
                 "sextant_failed_after_ms": (time.perf_counter() - t) * 1000}
            results.append(r)
            log(json.dumps(r))
            continue
        best, medians = None, []
        for sqls in ([] if args.sextant_only else variants):
            times, rows = [], None
            for i in range(args.runs + 1):
                if i == 1:
                    # chdb runs its threads in this process, which does nothing else meanwhile.
                    cpu0 = time.process_time()
                t = time.perf_counter()
                rows = [ch_rows(ch, q) for q in sqls]
                if i:
                    times.append((time.perf_counter() - t) * 1000)
            v = {"sql": sqls, "median_ms": statistics.median(times), "p95_ms": pct(times, 0.95), "rows": rows,
                 "cpu_s": (time.process_time() - cpu0) / args.runs}
            medians.append(round(v["median_ms"], 1))
            if best is None or v["median_ms"] < best["median_ms"]:
                best = v
        if best is None:
            r = {"query": name, "path": path, "sextant_median_ms": statistics.median(ours),
                 "sextant_p95_ms": pct(ours, 0.95), "sextant_cpu_s": ours_cpu, "load_avg_1m": [round(load_before, 2), round(loadavg(), 2)]}
            results.append(r)
            log(f"{name}: sextant {r['sextant_median_ms']:.1f} ms")
            continue
        same, n = agree(name, body, best["rows"])
        r = {
            "query": name, "path": path,
            "sextant_median_ms": statistics.median(ours), "sextant_p95_ms": pct(ours, 0.95),
            "sextant_cpu_s": ours_cpu, "clickhouse_cpu_s": best["cpu_s"],
            "clickhouse_median_ms": best["median_ms"], "clickhouse_p95_ms": best["p95_ms"],
            "clickhouse_sql": best["sql"],
            "clickhouse_variants_median_ms": medians,
            "same_answer": same, "answer_size": n,
            "load_avg_1m": [round(load_before, 2), round(loadavg(), 2)],
        }
        r["ratio_clickhouse_over_sextant"] = r["clickhouse_median_ms"] / r["sextant_median_ms"]
        results.append(r)
        log(json.dumps(r))
        log(f"{name}: sextant {r['sextant_median_ms']:.1f} ms, clickhouse {r['clickhouse_median_ms']:.1f} ms, "
            f"x{r['ratio_clickhouse_over_sextant']:.2f}, same answer: {same} ({n})")
    return results


def rare_term(path):
    """A 12-hex event id from the middle of the log lines: a needle that occurs about once."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(size // 2)
        f.readline()
        for line in f:
            m = re.search(rb"order\.created id=([0-9a-f]{12}) ", line)
            if m:
                return m.group(1).decode()
    raise RuntimeError("no event id found")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--work", default=None)
    ap.add_argument("--bin", default="target/release/sextant")
    ap.add_argument("--only", default="", help="only the queries whose name contains this")
    ap.add_argument("--snapshot-every", type=int, default=0,
                    help="flush a shard every N entries (reads of segments rather than the buffer)")
    ap.add_argument("--spread-hours", type=float, default=0,
                    help="spread the spans' traces over this many hours before the run (long-range reads)")
    ap.add_argument("--parts", type=int, default=1,
                    help="spans only, generated and loaded in this many parts (each file deleted once "
                         "both engines hold it): 100M spans are about 50 GB of JSON")
    ap.add_argument("--flushed", action="store_true",
                    help="time the reads once the buffers' age flush and compaction are done")
    ap.add_argument("--apm-days", type=lambda v: [int(d) for d in v.split(",")], default=[],
                    help="also time APM over these numbers of whole days, e.g. 1,5,9")
    ap.add_argument("--sextant-only", action="store_true",
                    help="time only Sextant (e.g. another build on the data of an earlier run)")
    args = ap.parse_args()
    temporary = args.work is None
    if temporary:
        import tempfile
        args.work = tempfile.mkdtemp(prefix="sextant-bench-reads-")
    os.makedirs(args.work, exist_ok=True)
    spans_path, logs_path = os.path.join(args.work, "spans.ndjson"), os.path.join(args.work, "logs.ndjson")
    with_logs = args.parts == 1
    if with_logs:
        gs = generate(args, "spans", spans_path)
        gl = generate(args, "logs", logs_path)
        f_ms = min(gs["generated_at_ms"], gl["generated_at_ms"]) - int(gs.get("spread_hours", 0) * 3_600_000)
    else:
        # The first part's start, kept for a later run on the same --work.
        start = os.path.join(args.work, "parts.from_ms")
        if not os.path.exists(start):
            open(start, "w").write(str(int((time.time() - args.spread_hours * 3600) * 1000)))
        f_ms = int(open(start).read())
    f_ms -= 5 * 60_000

    sx = Sextant(args)
    try:
        state = os.path.join(args.work, "sextant.done")
        ch = None
        if not with_logs and not os.path.exists(state):
            # One part at a time into both engines, its file deleted after.
            ch = clickhouse_session(args)
            for part in range(args.parts):
                path = os.path.join(args.work, f"spans.{part}.ndjson")
                generate(args, "spans", path, part)
                sx.ingest("spans", path)
                clickhouse(args, path, None, ch)
                os.remove(path)
                os.remove(path + ".done")
                log(f"part {part + 1}/{args.parts} in both engines")
            open(state, "w").write(str(int(time.time() * 1000)))
        if not os.path.exists(state):
            sx.ingest("spans", spans_path)
            sx.ingest("logs", logs_path)
            open(state, "w").write(str(int(time.time() * 1000)))
        t_ms = int(open(state).read()) + 5 * 60_000
        settled = sx.settle()
        if args.flushed:
            # The buffers flush 5 minutes after their first row (the last ingest's at the latest).
            time.sleep(max(0.0, t_ms / 1000 + 30 - time.time()))
            settled = sx.settle()
        if not settled:
            log("warning: sextant still busy after the settle bound")
        log("sextant settled")
        if not args.sextant_only:
            ch = clickhouse_done(args, ch or (clickhouse(args, spans_path, logs_path) if with_logs
                                              else clickhouse_session(args)))
        rare = rare_term(logs_path) if with_logs else None
        results = measure(args, sx, ch, rare, f_ms, t_ms)
        disk = bytes_on_disk(args, ch)
        log(json.dumps(disk))
    finally:
        sx.stop()
        if temporary:
            import shutil
            shutil.rmtree(args.work, ignore_errors=True)
    report = {"objects_per_kind": args.objects, "runs": args.runs, **disk, "from_ms": f_ms, "to_ms": t_ms,
              "cpus": os.cpu_count(), "results": results}
    print(json.dumps(report, indent=2))
    if args.sextant_only:
        return
    print("\n| query | Sextant median ms | p95 | CPU s | ClickHouse median ms | p95 | CPU s | ClickHouse / Sextant | same answer |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        if "sextant_failed" in r:
            print(f"| {r['query']} | failed after {r['sextant_failed_after_ms']:.0f} ms: {r['sextant_failed'][:80]} | | | | | | | | |")
            continue
        print(f"| {r['query']} | {r['sextant_median_ms']:.1f} | {r['sextant_p95_ms']:.1f} | {r['sextant_cpu_s']:.3f} | "
              f"{r['clickhouse_median_ms']:.1f} | {r['clickhouse_p95_ms']:.1f} | {r['clickhouse_cpu_s']:.3f} | "
              f"{r['ratio_clickhouse_over_sextant']:.2f} | {'yes' if r['same_answer'] else 'NO'} ({r['answer_size']}) |")


if __name__ == "__main__":
    main()
