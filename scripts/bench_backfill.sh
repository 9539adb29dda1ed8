#!/usr/bin/env bash
# Server CPU for a backfill of past days (docs/BENCHMARKS.md, "Drafts cost more on a backfill"):
# for each build given, a fresh `sextant dev --shards 4` loads EVENTS events of USERS users
# with timestamps over 30 past days (scripts/bench_analytics.py with ONLY=zzz: the load, no
# queries), then idles; prints the server's CPU seconds at the end of the load and once it has
# used no CPU for 15 s (the compactions after the load), and the load rate. Give builds
# alternately (A B A B): this machine's speed moves from run to run.
#   scripts/bench_backfill.sh EVENTS USERS BIN [BIN...]
# Needs the test venv's chdb (SEXTANT_PYTHON, as for bench_analytics.py).
set -euo pipefail
N=$1; U=$2; shift 2
PY=${SEXTANT_PYTHON:-python3}
TCK=$(getconf CLK_TCK)
for BIN in "$@"; do
  W=$(mktemp -d)
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$BIN" dev --data-dir "$W/d" --listen "127.0.0.1:$PORT" --shards 4 --api-rps 1000000 \
    --analytics-rps 1000000 --ingest-rps 1000000 >"$W/dev.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && [ -s "$W/d/credentials.json" ] && break; sleep 0.1; done
  cpu() { awk -v t="$TCK" '{printf "%.2f", ($14 + $15) / t}' "/proc/$PID/stat"; }
  ONLY=zzz "$PY" "$(dirname "$0")/bench_analytics.py" "http://127.0.0.1:$PORT" "$W/d/credentials.json" "$N" "$U" >"$W/bench.out"
  LOADED=$(cpu); PREV=$LOADED; IDLE=0
  for _ in $(seq 1 600); do
    sleep 1; NOW=$(cpu)
    if awk -v a="$NOW" -v b="$PREV" 'BEGIN { exit !(a - b < 0.05) }'; then IDLE=$((IDLE + 1)); else IDLE=0; fi
    PREV=$NOW; [ "$IDLE" -ge 15 ] && break
  done
  echo "$BIN load_cpu_s=$LOADED settled_cpu_s=$PREV $(grep sextant_load "$W/bench.out")"
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; rm -rf "$W"
done
