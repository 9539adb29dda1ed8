#!/usr/bin/env python3
"""Same-run A/B of two release builds (docs/BENCHMARKS.md, "Restructuring A/B"): span and log
ingest throughput, trace lookup latency and the 3-step funnel over the same 500k events. Each build runs on its own fresh
`sextant dev` (their data directories need not be compatible), builds alternate within every
round so both see the same machine load, and the load generator is NEW's for both.

  scripts/bench_ab.py OLD_BIN NEW_BIN [--rounds 3] [--seconds 15] [--lookups 300]

Prints one JSON line per build and round, then the medians and NEW/OLD ratios; the spread
of each build's own rounds (max/min - 1) is the noise to read the ratios against.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from dev_server import DevServer

class Dev(DevServer):
    def __init__(self, binary, work):
        data = tempfile.mkdtemp(dir=work)
        super().__init__(binary, data, data + ".log")
        self.auth = self.bearer()
        self.conn = self.connection()

    def timed_get(self, path):
        """Milliseconds for one read over a kept-alive connection; the answer must be 200."""
        started = time.perf_counter()
        self.conn.request("GET", path, None, self.auth)
        r = self.conn.getresponse()
        data = r.read()
        ms = (time.perf_counter() - started) * 1e3
        assert r.status == 200, (path, r.status, data[:300])
        return ms, json.loads(data)

    def loadgen(self, loadgen_bin, kind, seconds):
        out = subprocess.run(
            [loadgen_bin, "loadgen", "--url", self.url, "--credentials", self.creds_path,
             "--kind", kind, "--batch", "1000", "--concurrency", "8", "--seconds", str(seconds), "--json",
             "--no-ceiling"], check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        assert r["errors"] == 0, r
        return r["objects_per_sec"]

    def post_events(self, bodies):
        """Posts prepared `/v1/batch` bodies; every event must be accepted."""
        conn = self.connection()
        headers = {"Content-Type": "application/json", "X-Analytics-Token": self.creds["ingest_token"]}
        for body in bodies:
            conn.request("POST", "/v1/batch", body, headers)
            r = conn.getresponse()
            data = r.read()
            assert r.status == 200, (r.status, data[:300])
        conn.close()

    def stop(self):
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def funnel_events(args, end_ms):
    """The same events for both builds: a day of a shop's funnel before `end_ms`."""
    rng = random.Random(11)
    names = ["ab_view", "ab_cart", "ab_checkout", "ab_buy", "ab_other"]
    bodies = []
    for b in range(args.funnel_batches):
        events = [{"event": names[min(int(rng.expovariate(0.9)), 4)],
                   "distinct_id": f"user-{rng.randrange(args.funnel_users)}",
                   "timestamp": end_ms - rng.randrange(86_400_000),
                   "uuid": f"ab-{b:05d}-{i:04d}",
                   "properties": {"plan": rng.choice(["free", "pro"]), "cart_value": rng.randrange(50_000) / 100}}
                  for i in range(1000)]
        bodies.append(json.dumps({"events": events}).encode())
    return bodies


def measure(binary, loadgen_bin, args, work, funnel_bodies, funnel_end_ms):
    dev = Dev(binary, work)
    try:
        row = {"spans_per_sec": dev.loadgen(loadgen_bin, "spans", args.seconds),
               "logs_per_sec": dev.loadgen(loadgen_bin, "logs", args.seconds),
               "events_per_sec": dev.loadgen(loadgen_bin, "events", args.seconds)}
        dev.settle(window=3.0, bound=300)
        ids = []
        cursor = None
        while len(ids) < args.lookups:
            path = "/api/v1/traces?limit=100" + (f"&cursor={cursor}" if cursor else "")
            _, page = dev.timed_get(path)
            ids += [t["trace_id"] for t in page["items"]]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        assert ids, "no traces listed"
        random.Random(7).shuffle(ids)
        lookups = [dev.timed_get(f"/api/v1/traces/{t}")[0] for t in ids[:args.lookups]]
        row["trace_lookup_p50_ms"] = statistics.median(lookups)
        row["trace_lookup_p99_ms"] = pct(lookups, 0.99)
        dev.post_events(funnel_bodies)
        dev.settle(window=3.0, bound=300)
        funnel = f"/api/funnel?steps=ab_view,ab_cart,ab_buy&window=1&window_unit=hour&range=1d&to={funnel_end_ms}"
        first = dev.timed_get(funnel)[1]
        assert first["steps"][0]["count"] > 0, first
        runs = [dev.timed_get(funnel)[0] for _ in range(args.funnel_runs)]
        row["funnel_3_steps_ms"] = statistics.median(runs)
        return row
    finally:
        dev.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--lookups", type=int, default=300)
    p.add_argument("--funnel-runs", type=int, default=9)
    p.add_argument("--funnel-batches", type=int, default=500, help="of 1000 events")
    p.add_argument("--funnel-users", type=int, default=50_000)
    args = p.parse_args()
    work = tempfile.mkdtemp()
    funnel_end_ms = (int(time.time()) // 3600 - 48) * 3_600_000
    funnel_bodies = funnel_events(args, funnel_end_ms)
    rows = {"old": [], "new": []}
    try:
        for r in range(args.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for name in order:
                row = measure(getattr(args, name), args.new, args, work, funnel_bodies, funnel_end_ms)
                rows[name].append(row)
                print(json.dumps({"build": name, "round": r, "load": os.getloadavg()[0], **row}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for key in rows["old"][0]:
        old = [x[key] for x in rows["old"]]
        new = [x[key] for x in rows["new"]]
        summary[key] = {"old": round(statistics.median(old), 3), "new": round(statistics.median(new), 3),
                        "new_over_old": round(statistics.median(new) / statistics.median(old), 3),
                        "noise_old": round(max(old) / min(old) - 1, 3), "noise_new": round(max(new) / min(new) - 1, 3)}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    sys.exit(main())
