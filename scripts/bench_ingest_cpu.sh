#!/usr/bin/env bash
# The server's CPU per ingested object against serde_json's cost of parsing the same bodies
# (issue 23 item 5, docs/BENCHMARKS.md "Ingest CPU per object"). For each build given, in
# order: a fresh `sextant dev`, the load generator (1000-object batches, 8 in flight) for
# SECONDS, the server's user+system CPU over the run from /proc, and its peak RSS. Give builds
# alternately (A B A B) so that both see the same machine load.
#   scripts/bench_ingest_cpu.sh spans|logs|events SECONDS BIN [BIN...]
# Runs under a minute hold at most one flush per shard and leave the last buffer unflushed:
# 60 s or more for the steady-state cost (docs/BENCHMARKS.md, "Ingest in steady state").
# The segments the server holds when the run ends show whether compaction kept up.
# LOADGEN=BIN: the load generator of that build for every run (default: each build's own).
# The parse cost per object is the CPU time the load generator's serde_json ceiling (every
# core parsing the same bodies, before the run) spent per object.
set -euo pipefail
KIND=$1; SECS=$2; shift 2
TCK=$(getconf CLK_TCK)
. "$(dirname "$0")/dev_server.sh"
for BIN in "$@"; do
  start_dev "$BIN"
  cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
  BEFORE=$(cpu)
  OUT=$("${LOADGEN:-$BIN}" loadgen --url "http://127.0.0.1:$PORT" --credentials "$WORK/d/credentials.json" --kind "$KIND" \
    --batch 1000 --concurrency 8 --seconds "$SECS" --json)
  AFTER=$(cpu)
  HWM=$(awk '/VmHWM/ {print $2}' "/proc/$PID/status")
  SEGMENTS=$(curl -sf "http://127.0.0.1:$INTERNAL/metrics" | awk '/^sextant_node_segments\{/ {s += $2} END {print s + 0}')
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; rm -rf "$WORK"
  python3 - "$BIN" "$OUT" "$BEFORE" "$AFTER" "$TCK" "$HWM" "$SEGMENTS" <<'PY'
import json, sys
binary, out, before, after, tck, hwm, segments = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:])
server = (after - before) / tck
per_object = 1e6 * server / out["objects"]
parse = out["serde_json_cpu_us_per_object"]
print(json.dumps({"bin": binary, "objects_per_sec": round(out["objects_per_sec"]), "errors": out["errors"], "server_cpu_s": server,
                  "server_us_per_object": round(per_object, 2), "parse_us_per_object": round(parse, 2),
                  "cpu_over_parse": round(per_object / parse, 1), "peak_rss_mib": hwm // 1024,
                  "segments": segments}))
PY
done
