#!/usr/bin/env bash
# Reproduces the product-analytics part of docs/BENCHMARKS.md in one run:
# 1. `/v1/batch` ingest with 1000-event batches on a standalone `sextant dev` (loadgen);
# 2. a fresh `sextant dev` (4 shards) and ClickHouse (chdb) loaded with the same EVENTS events
#    of USERS users over 30 days, then funnels (3 and 5 steps), 8-week retention, 90-day
#    DAU/WAU/MAU, a daily timeseries and a two-condition cohort timed on both (scripts/bench_analytics.py).
#   scripts/bench_analytics.sh [EVENTS] [USERS] [INGEST_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${1:-10000000}
USERS=${2:-1000000}
SECS=${3:-20}
BIN=${SEXTANT_BIN:-target/release/sextant}
[ -x "$BIN" ] || cargo build --release --bin sextant
python3 -c 'import chdb' 2>/dev/null || pip install -q chdb
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1/readyz" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; return 1; }
start_dev() { # DIR PORT
  "$BIN" dev --data-dir "$1" --listen 127.0.0.1:$2 --shards 4 --api-rps 1000000 --analytics-rps 1000000 \
    --ingest-rps 1000000 >"$1.log" 2>&1 &
  PIDS+=($!)
  wait_ready http://127.0.0.1:$2
  for _ in $(seq 1 300); do [ -s "$1/credentials.json" ] && break; sleep 0.1; done
}

echo "## /v1/batch ingest (standalone, 1000-event batches, 8 in flight, ${SECS}s)"
P=$(port)
start_dev "$WORK/ingest" $P
"$BIN" loadgen --url http://127.0.0.1:$P --credentials "$WORK/ingest/credentials.json" --kind events \
  --batch 1000 --concurrency 8 --seconds "$SECS" --json
kill -9 "${PIDS[0]}"; PIDS=(); rm -rf "$WORK/ingest"

echo "## queries: $EVENTS events, $USERS users, 30 days, 50 event names; Sextant vs ClickHouse (chdb)"
P=$(port)
start_dev "$WORK/queries" $P
python3 scripts/bench_analytics.py http://127.0.0.1:$P "$WORK/queries/credentials.json" "$EVENTS" "$USERS"
