#!/usr/bin/env bash
# Memory under sustained ingest (issue 23 item 5, docs/BENCHMARKS.md "Memory under sustained
# ingest"). For each build given, in order: a fresh `sextant dev`, the load generator
# (1000-object batches, 8 in flight) for SECONDS, the process's memory sampled from
# /proc/PID/smaps_rollup every 2 s; one JSON line per build with the rate, the peak RSS and
# the means of the run's second half. Give builds alternately (A B A B).
#   scripts/bench_ingest_memory.sh spans|logs|events SECONDS BIN [BIN...]
set -euo pipefail
KIND=$1; SECS=$2; shift 2
. "$(dirname "$0")/dev_server.sh"
for BIN in "$@"; do
  start_dev "$BIN"
  (while kill -0 "$PID" 2>/dev/null; do
     awk '/^(Rss|Anonymous|Private_Clean):/ {printf "%s%d ", $1, $2 / 1024} END {print ""}' "/proc/$PID/smaps_rollup"
     sleep 2
   done) >"$WORK/samples" 2>/dev/null &
  SAMPLER=$!
  OUT=$("$BIN" loadgen --url "http://127.0.0.1:$PORT" --credentials "$WORK/d/credentials.json" --kind "$KIND" \
    --batch 1000 --concurrency 8 --seconds "$SECS" --json --no-ceiling)
  HWM=$(awk '/VmHWM/ {print $2}' "/proc/$PID/status")
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; kill "$SAMPLER" 2>/dev/null || true
  python3 - "$BIN" "$OUT" "$HWM" "$WORK/samples" <<'PY'
import json, re, sys
binary, out, hwm, samples = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), open(sys.argv[4]).read().splitlines()
def column(name):
    return [int(m.group(1)) for line in samples if (m := re.search(name + r":(\d+)", line))]
rss, anon, mapped = column("Rss"), column("Anonymous"), column("Private_Clean")
half = lambda xs: xs[len(xs) // 2:] or [0]
mean = lambda xs: round(sum(xs) / len(xs))
print(json.dumps({"bin": binary, "objects_per_sec": round(out["objects_per_sec"]), "errors": out["errors"],
                  "peak_rss_mib": hwm // 1024, "anonymous_peak_mib": max(anon or [0]),
                  "rss_second_half_mean_mib": mean(half(rss)), "anonymous_second_half_mean_mib": mean(half(anon)),
                  "file_backed_clean_last_mib": (mapped or [0])[-1], "samples": len(rss)}))
PY
  rm -rf "$WORK"
done
