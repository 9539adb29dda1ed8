#!/usr/bin/env python3
"""The workload an instrumented build runs to profile itself (scripts/pgo_build.sh,
docs/BENCHMARKS.md "Built with a profile of its own work").

Usage: scripts/pgo_train.py BIN [--quick]
  BIN: a `sextant` built with -Cprofile-generate. A fresh `sextant dev` of it ingests with the
  load generator (spans, logs, host metrics, events, each with its serde_json ceiling, which
  the load generator of the same binary measures), takes OTLP/HTTP traces, then answers every
  kind of read several times; it is stopped with SIGTERM, so that it writes its profile.

  --quick: a second of each load, no ceilings, five exports, one round of reads: how the
  tests check that the workload still runs against the API (tests/standalone.rs).

Standard library only: it runs in the image's build stage.
"""
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

from dev_server import DevServer

BIN = sys.argv[1]
QUICK = "--quick" in sys.argv[2:]
# An instrumented build runs at about half speed; reads over more data than this can pass a
# shard's deadline there.
LOAD_SECONDS = {"spans": 12, "logs": 8, "metrics": 4, "events": 12}
EXPORTS, ROUNDS = 200, 3
if QUICK:
    LOAD_SECONDS = dict.fromkeys(LOAD_SECONDS, 1)
    EXPORTS, ROUNDS = 5, 1


def otlp_traces(n, now_ns):
    """An OTLP/JSON export request of `n` spans in traces of five."""
    spans = []
    for i in range(n):
        trace = f"{(now_ns // 1000 + i // 5):032x}"
        spans.append({
            "traceId": trace, "spanId": f"{now_ns + i:016x}"[-16:],
            "parentSpanId": "" if i % 5 == 0 else f"{now_ns + i - i % 5:016x}"[-16:],
            "name": ["GET /cart", "SELECT orders", "POST /pay"][i % 3], "kind": 2,
            "startTimeUnixNano": str(now_ns - 1_000_000 * (i % 1000)),
            "endTimeUnixNano": str(now_ns - 1_000_000 * (i % 1000) + 1_000 * (i % 977 + 1)),
            "status": {"code": 2 if i % 37 == 0 else 0},
            "attributes": [
                {"key": "http.method", "value": {"stringValue": "GET"}},
                {"key": "http.status_code", "value": {"intValue": str(200 + i % 3)}},
                {"key": "k8s.pod.name", "value": {"stringValue": f"cart-{i % 97:05x}"}},
            ],
        })
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "cart"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "pgo"}, "spans": spans}]}]}


def main():
    work = tempfile.mkdtemp(prefix="sextant-pgo-")
    try:
        dev = DevServer(BIN, f"{work}/d", f"{work}/dev.log")
    except RuntimeError as e:
        sys.exit(f"pgo_train: {e}")
    try:
        for kind, seconds in LOAD_SECONDS.items():
            subprocess.run([BIN, "loadgen", "--url", dev.url, "--credentials", dev.creds_path, "--kind", kind,
                            "--batch", "1000", "--concurrency", "8", "--seconds", str(seconds), "--json",
                            *(["--no-ceiling"] if QUICK else [])],
                           check=True, stdout=subprocess.DEVNULL)

        key = {"X-API-Key": dev.creds["api_key"], "Content-Type": "application/json"}
        for _ in range(EXPORTS):
            status, body = dev.request("POST", "/v1/traces", otlp_traces(500, time.time_ns()), key)
            if status != 200:
                sys.exit(f"pgo_train: OTLP traces answered {status}: {body[:200]!r}")

        auth = {**dev.bearer(), "Content-Type": "application/json"}
        status, body = dev.request("POST", "/api/cohorts", {"name": "pgo", "conditions": {"logic": "and", "conditions": [
            {"type": "did", "event": "$pageview", "count_op": ">=", "count": 1, "range": "30d"}]}}, auth)
        if status not in (200, 201):
            sys.exit(f"pgo_train: cohort answered {status}: {body[:200]!r}")
        cohort = json.loads(body)["id"]

        now = int(time.time() * 1000)
        day = 86_400_000
        steps = "$pageview,action_1,action_2"
        reads = [
            f"/api/funnel?steps={steps}&window=7&window_unit=day&range=30d",
            f"/api/funnel?steps={steps},action_3,action_4&window=1&window_unit=hour&range=30d",
            f"/api/funnel?steps={steps}&window=7&window_unit=day&range=30d&order=strict",
            f"/api/funnel?steps={steps}&window=7&window_unit=day&range=30d&cohort_id={cohort}",
            "/api/retention?start_event=$pageview&return_event=action_1&period=week",
            "/api/retention?start_event=$pageview&return_event=action_1&period=day&periods=7",
            "/api/users/active?period=90d",
            f"/api/events/timeseries?event=$pageview&interval=day&from={now - 30 * day}&to={now + day}",
            f"/api/events/timeseries?interval=hour&math=total&from={now - 7 * day}&to={now + day}",
            f"/api/events/timeseries?event=action_1&interval=week&from={now - 365 * day}&to={now + day}",
            f"/api/cohorts/{cohort}",
            "/api/v1/traces?limit=100",
            "/api/v1/traces?service=checkout&limit=100",
            "/api/v1/logs/search?q=timeout&limit=100",
            "/api/v1/logs/search?q=error+-retry&limit=100",
            "/api/v1/apm/endpoints",
            "/api/v1/service-map",
            "/api/v1/errors",
            "/api/v1/infrastructure/hosts",
            "/api/v1/usage",
        ]

        def get(path):
            status, body = dev.request("GET", urllib.parse.quote(path, safe="/?=&,+"), headers=auth)
            if status != 200:
                sys.exit(f"pgo_train: GET {path} answered {status}: {body[:200]!r}")
            return json.loads(body)

        for _ in range(ROUNDS):
            for path in reads:
                get(path)
            for t in get("/api/v1/traces?limit=20")["items"]:
                get(f"/api/v1/traces/{t['trace_id']}")
            for h in get("/api/v1/infrastructure/hosts")["items"][:5]:
                get(f"/api/v1/infrastructure/hosts/{h['hostname']}/metrics")
    finally:
        if not dev.stop(signal.SIGTERM):
            sys.exit("pgo_train: the server did not stop on SIGTERM (no profile written)")
    shutil.rmtree(work)
    print("pgo_train: done")


main()
