#!/usr/bin/env python3
"""Host series over long ranges: Sextant's per-minute rollups vs its raw samples vs ClickHouse
(chdb), on the same samples, in one run.

1. ClickHouse (chdb, MergeTree ORDER BY (hostname, ts)) generates HOSTS hosts sending a sample
   every EVERY seconds over the last DAYS days, stores them, and writes them as 1000-sample
   request bodies, which are posted to a release `sextant dev` (4 shards) through
   `POST /api/v1/ingest/infrastructure`.
2. Once the server has used no CPU for 10 s (flushes and compactions done), one host's
   series over the whole range is asked RUNS times per step (after a warm-up): from
   a whole minute (Sextant reads its per-minute rollups), from a whole minute plus one second
   (not on minutes: Sextant reads every sample), and from ClickHouse (avg per step). Time is
   end to end through the HTTP API for Sextant (JWT auth included), in process for
   ClickHouse; the server's CPU per query is read from /proc. Every answer is compared with
   ClickHouse's (counts of points, means to 1e-9 relative).
3. The hosts list (each host's latest sample) over the last day and over the whole range,
   against ClickHouse's max(ts) and argMax per host.

Usage: scripts/bench_hosts.py [--bin target/release/sextant] [--hosts 20] [--days 30]
                              [--every 10] [--runs 5]
Needs: pip install chdb (the test venv's python: SEXTANT_PYTHON)
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import sys
import time
import urllib.parse

import chdb.session

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dev_server import DevServer  # noqa: E402
from generated_bodies import post_generated  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--bin", default="target/release/sextant")
p.add_argument("--hosts", type=int, default=20)
p.add_argument("--days", type=int, default=30)
p.add_argument("--every", type=int, default=10, help="seconds between a host's samples")
p.add_argument("--runs", type=int, default=5)
args = p.parse_args()

MINUTE_MS = 60_000
H, EVERY_MS = args.hosts, args.every * 1000
now_ms = int(time.time() * 1000)
T0 = (now_ms - args.days * 86_400_000) // MINUTE_MS * MINUTE_MS
N = args.days * 86_400_000 // EVERY_MS * H
HOST = "host-3"


def report(**row):
    print(json.dumps(row), flush=True)


# The samples, as ClickHouse computes them from n in [0, N): host n % H, its k-th sample at
# T0 + k * EVERY + a per-host offset; some metrics missing now and then.
TS = f"({T0} + intDiv(number, {H}) * {EVERY_MS} + (number % {H}) * 137)"
HOSTNAME = f"concat('host-', toString(number % {H}))"
CPU = "if(number % 11 = 0, NULL, (number * 7919 % 10000) / 100.0)"
USED = "toUInt64(1000000000 + number * 104729 % 1000000000)"
DISK = "40 + (number % 600) / 10.0"
RX = "if(number % 13 = 5, NULL, (number * 31 % 100000) / 7.0)"

tmp = tempfile.mkdtemp(prefix="bench-hosts-")
ch = chdb.session.Session(os.path.join(tmp, "ch"))
t = time.time()
ch.query(
    "CREATE TABLE host_metrics (hostname LowCardinality(String), ts UInt64, cpu Nullable(Float64), "
    "used UInt64, disk Float64, rx Nullable(Float64)) ENGINE = MergeTree ORDER BY (hostname, ts)"
)
ch.query(f"INSERT INTO host_metrics SELECT {HOSTNAME}, {TS}, {CPU}, {USED}, {DISK}, {RX} FROM numbers({N})")
ch.query("OPTIMIZE TABLE host_metrics FINAL")
report(step="clickhouse_load", samples=N, seconds=round(time.time() - t, 1))

dev = DevServer(args.bin, os.path.join(tmp, "sextant"), os.path.join(tmp, "dev.log"))
cpu_seconds = dev.cpu_seconds


def new_sender():
    c = dev.connection(timeout=600)

    def send(body):
        c.request("POST", "/api/v1/ingest/infrastructure", body,
                  {"Content-Type": "application/json", "Authorization": f"Bearer {dev.creds['api_key']}"})
        r = c.getresponse()
        text = r.read()
        return None if r.status == 200 else f"{r.status} {text[:200]!r}"

    return send


field = lambda name, v: f"if(isNull({v}), '', concat(',\"{name}\":', toString({v})))"  # noqa: E731
sample_json = (
    f"concat('{{\"hostname\":\"', {HOSTNAME}, '\",\"timestamp\":', toString({TS}), ',\"memory_used_bytes\":', "
    f"toString({USED}), ',\"disk_used_percent\":', toString({DISK}), {field('cpu_percent', CPU)}, "
    f"{field('network_rx_bytes_per_sec', RX)}, '}}')"
)
t = time.time()
errors = post_generated(ch, N, sample_json, "metrics", new_sender, senders=6)
if errors:
    dev.stop()
    raise SystemExit(f"ingest failed: {errors[:3]}")
secs = time.time() - t
report(step="sextant_load", samples=N, seconds=round(secs, 1), samples_per_second=round(N / secs))

# Queries once the flushes and compactions after the load are done: no CPU for 10 s.
dev.settle(window=10.0)
segments = sum(f.endswith(".parquet") for _, _, files in os.walk(dev.dir) for f in files)
report(step="settled", seconds=round(time.time() - t - secs, 1), segment_files=segments)


def get(path, **params):
    status, body = dev.request("GET", f"{path}?{urllib.parse.urlencode(params)}", headers=dev.bearer(), timeout=600)
    if status != 200:
        raise SystemExit(f"{status} {body[:500]!r}")
    return json.loads(body)


def sextant(from_ms, to_ms, step_s):
    body = get(f"/api/v1/infrastructure/hosts/{HOST}/metrics", **{"from": from_ms, "to": to_ms, "step": step_s})
    return {p["t"]: (p["cpu_percent"], p["memory_used_bytes"], p["disk_used_percent"], p["network_rx_bytes_per_sec"])
            for p in body["points"] if p["disk_used_percent"] is not None}


def clickhouse(from_ms, to_ms, step_s):
    step = step_s * 1000
    out = ch.query(
        f"SELECT {from_ms} + intDiv(ts - {from_ms}, {step}) * {step} AS b, avg(cpu), avg(used), avg(disk), avg(rx) "
        f"FROM host_metrics WHERE hostname = '{HOST}' AND ts >= {from_ms} AND ts < {to_ms} GROUP BY b ORDER BY b",
        "JSONCompact",
    )
    return {row[0]: tuple(row[1:]) for row in json.loads(str(out))["data"]}


def equal(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-9 * max(abs(b), 1.0)


def timed(f, cpu):
    f()
    times, used = [], 0.0
    for _ in range(args.runs):
        before = cpu() if cpu else 0
        t = time.perf_counter()
        answer = f()
        times.append(time.perf_counter() - t)
        used += (cpu() - before) if cpu else 0
    return statistics.median(times) * 1000, used / args.runs * 1000, answer


to_ms = now_ms
for step_s in (3600, 86_400, 300):
    from_ms = T0 if step_s != 300 else (now_ms - 86_400_000) // MINUTE_MS * MINUTE_MS
    rows = {}
    for name, start, engine in [("rollups", from_ms, "s"), ("samples", from_ms + 1000, "s"),
                                ("clickhouse", from_ms, "c"), ("clickhouse_shifted", from_ms + 1000, "c")]:
        if engine == "s":
            rows[name] = timed(lambda: sextant(start, to_ms, step_s), cpu_seconds)
        else:
            rows[name] = timed(lambda: clickhouse(start, to_ms, step_s), None)
    for name, want in [("rollups", "clickhouse"), ("samples", "clickhouse_shifted")]:
        got, expected = rows[name][2], rows[want][2]
        # ClickHouse averages byte counts as floats too; its times are milliseconds, Sextant's RFC 3339.
        if len(got) != len(expected):
            raise SystemExit(f"step {step_s} {name}: {len(got)} points, ClickHouse {len(expected)}")
        for (gv, (_, ev)) in zip([got[k] for k in sorted(got)], sorted(expected.items())):
            if not all(equal(g, e) for g, e in zip(gv, ev)):
                raise SystemExit(f"step {step_s} {name}: {gv} != {ev}")
    report(
        step="host_series", step_seconds=step_s, range_days=round((to_ms - from_ms) / 86_400_000, 2),
        points=len(rows["rollups"][2]),
        sextant_rollups_ms=round(rows["rollups"][0], 2), sextant_rollups_cpu_ms=round(rows["rollups"][1], 2),
        sextant_samples_ms=round(rows["samples"][0], 2), sextant_samples_cpu_ms=round(rows["samples"][1], 2),
        clickhouse_ms=round(rows["clickhouse"][0], 2),
        rollups_vs_samples=round(rows["rollups"][0] / rows["samples"][0], 3),
        rollups_vs_clickhouse=round(rows["rollups"][0] / rows["clickhouse"][0], 3),
    )


def sextant_hosts(from_ms, to_ms):
    body = get("/api/v1/infrastructure/hosts", **{"from": from_ms, "to": to_ms})
    return [(h["hostname"], h["last_seen"], h["disk_used_percent"]) for h in body["items"]]


def clickhouse_hosts(from_ms, to_ms):
    out = ch.query(
        f"SELECT hostname, max(ts), argMax(disk, ts) FROM host_metrics WHERE ts >= {from_ms} AND ts < {to_ms} "
        f"GROUP BY hostname ORDER BY hostname",
        "JSONCompact",
    )
    return [(h, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(t) // 1000)) + f".{int(t) % 1000:03d}Z", d)
            for h, t, d in json.loads(str(out))["data"]]


# The hosts list: each host's latest sample, over the last day (the default) and the whole range.
for days in (1, args.days):
    from_ms = now_ms - days * 86_400_000
    ours = timed(lambda: sextant_hosts(from_ms, to_ms), cpu_seconds)
    theirs = timed(lambda: clickhouse_hosts(from_ms, to_ms), None)
    if ours[2] != theirs[2]:
        raise SystemExit(f"hosts over {days} days: {ours[2][:3]} != {theirs[2][:3]}")
    report(step="hosts_list", range_days=days, hosts=len(ours[2]), sextant_ms=round(ours[0], 2),
           sextant_cpu_ms=round(ours[1], 2), clickhouse_ms=round(theirs[0], 2),
           vs_clickhouse=round(ours[0] / theirs[0], 3))
dev.stop()
subprocess.run(["rm", "-rf", tmp])
