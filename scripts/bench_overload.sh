#!/usr/bin/env bash
# Overload at 5x capacity (docs/RELIABILITY.md, "Overload"; docs/BENCHMARKS.md, "Overload"):
# one storage node (4 shards, RF 1) and one router as separate processes. First the sustainable
# rate: the closed-loop load generator at CONCURRENCY requests in flight. Then the open loop at
# FACTOR times that many requests per second, up to MAX_IN_FLIGHT at once: admitted latency,
# refusals (429/503 and their Retry-After), timeouts, and the peak RSS (VmHWM) of both.
#   scripts/bench_overload.sh [SECONDS] [FACTOR] [RUNS]
# Extra flags for the node and the router: NODE_ARGS, ROUTER_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
FACTOR=${2:-5}
RUNS=${3:-1}
KIND=${KIND:-spans}
BATCH=${BATCH:-1000}
CONCURRENCY=${CONCURRENCY:-8}
MAX_IN_FLIGHT=${MAX_IN_FLIGHT:-1024}
BIN=${SEXTANT_BIN:-target/release/sextant}
[ -x "$BIN" ] || cargo build --release --bin sextant
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1/readyz" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; return 1; }
peak_mib() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }

export SEXTANT_CLUSTER_SECRET=$(openssl rand -hex 32) SEXTANT_JWT_SECRET=$(openssl rand -hex 32)
for run in $(seq 1 "$RUNS"); do
  G=$(port); H=$(port); R=$(port); I=$(port)
  rm -rf "$WORK/n1" "$WORK/creds.json"
  # shellcheck disable=SC2086
  "$BIN" node --id 1 --listen 127.0.0.1:$G --http-listen 127.0.0.1:$H --data-dir "$WORK/n1" \
    --peers 1=127.0.0.1:$G --shards 4 \
    --replication-factor 1 ${NODE_ARGS:-} >"$WORK/node.log" 2>&1 &
  NODE=$!; PIDS+=($NODE)
  # The rate limit is raised: what sheds here is the overload control, not the per-key limit.
  # shellcheck disable=SC2086
  "$BIN" router --listen 127.0.0.1:$R --internal-listen 127.0.0.1:$I --otlp-grpc-listen 127.0.0.1:0 \
    --nodes 127.0.0.1:$G --bootstrap-credentials "$WORK/creds.json" --ingest-rps 1000000 \
    --analytics-rps 1000000 ${ROUTER_ARGS:-} >"$WORK/router.log" 2>&1 &
  ROUTER=$!; PIDS+=($ROUTER)
  wait_ready http://127.0.0.1:$R
  for _ in $(seq 1 300); do [ -s "$WORK/creds.json" ] && break; sleep 0.1; done
  BASE=$("$BIN" loadgen --url http://127.0.0.1:$R --credentials "$WORK/creds.json" --kind "$KIND" \
    --batch "$BATCH" --concurrency "$CONCURRENCY" --seconds "$SECS" --json --no-ceiling)
  echo "run $run sustainable: $BASE"
  RATE=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["objects_per_sec"]/r["batch"]*float(sys.argv[2]))' "$BASE" "$FACTOR")
  OVER=$("$BIN" loadgen --url http://127.0.0.1:$R --credentials "$WORK/creds.json" --kind "$KIND" \
    --batch "$BATCH" --rate "$RATE" --concurrency "$MAX_IN_FLIGHT" --seconds "$SECS" --timeout 60 --json)
  echo "run $run ${FACTOR}x: $OVER"
  echo "run $run peak RSS: router $(peak_mib $ROUTER) MiB, node $(peak_mib $NODE) MiB;" \
    "alive: router $(kill -0 $ROUTER 2>/dev/null && echo yes || echo NO), node $(kill -0 $NODE 2>/dev/null && echo yes || echo NO)"
  curl -s "http://127.0.0.1:$I/metrics" | grep -E '^sextant_router_rejected_requests' || true
  curl -s "http://127.0.0.1:$H/metrics" | grep -E '^sextant_node_writes_shed' || true
  kill -9 $ROUTER $NODE 2>/dev/null || true
  wait $ROUTER $NODE 2>/dev/null || true
  PIDS=()
done
