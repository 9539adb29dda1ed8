#!/usr/bin/env bash
# Reproduces docs/BENCHMARKS.md: ingest throughput (standalone RF 1 and a local 3-node RF 3
# cluster) with the load generator, then bytes on disk and trace lookups of the segment
# engine against ClickHouse (chdb) and DuckDB on the same rows.
#   scripts/bench.sh [SECONDS] [STORAGE_OBJECTS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
OBJECTS=${2:-1000000}
BIN=${SEXTANT_BIN:-target/release/sextant}
[ -x "$BIN" ] || cargo build --release --bin sextant
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1/readyz" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; return 1; }

echo "## standalone (sextant dev, RF 1)"
P=$(port)
"$BIN" dev --data-dir "$WORK/dev" --listen 127.0.0.1:$P --api-rps 1000000 --ingest-rps 1000000 >"$WORK/dev.log" 2>&1 &
PIDS+=($!)
wait_ready http://127.0.0.1:$P
for _ in $(seq 1 300); do [ -s "$WORK/dev/credentials.json" ] && break; sleep 0.1; done
for kind in spans logs; do
  "$BIN" loadgen --url http://127.0.0.1:$P --credentials "$WORK/dev/credentials.json" --kind $kind \
    --batch 1000 --concurrency 8 --seconds "$SECS" --json
done
kill -9 "${PIDS[0]}"; PIDS=()

echo "## cluster (3 nodes, RF 3, one router)"
export SEXTANT_CLUSTER_SECRET=$(openssl rand -hex 32) SEXTANT_JWT_SECRET=$(openssl rand -hex 32)
G1=$(port); G2=$(port); G3=$(port); R=$(port)
PEERS=1=127.0.0.1:$G1,2=127.0.0.1:$G2,3=127.0.0.1:$G3
i=1; for g in $G1 $G2 $G3; do
  "$BIN" node --id $i --listen 127.0.0.1:$g --data-dir "$WORK/n$i" --peers $PEERS --shards 4 >"$WORK/n$i.log" 2>&1 &
  PIDS+=($!); i=$((i+1))
done
"$BIN" router --listen 127.0.0.1:$R --nodes 127.0.0.1:$G1,127.0.0.1:$G2,127.0.0.1:$G3 \
  --bootstrap-credentials "$WORK/creds.json" --ingest-rps 1000000 >"$WORK/router.log" 2>&1 &
PIDS+=($!)
wait_ready http://127.0.0.1:$R
for _ in $(seq 1 300); do [ -s "$WORK/creds.json" ] && break; sleep 0.1; done
"$BIN" loadgen --url http://127.0.0.1:$R --credentials "$WORK/creds.json" --kind spans \
  --batch 1000 --concurrency 8 --seconds "$SECS" --json --no-ceiling
for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; PIDS=()

echo "## storage engine (bytes per object, trace lookups) and peers on the same rows"
python3 -c 'import chdb, duckdb' 2>/dev/null || pip install -q chdb duckdb
for kind in spans logs; do
  OUT=$("$BIN" bench-storage --kind $kind --objects "$OBJECTS" --dir "$WORK/storage-$kind" --ndjson "$WORK/$kind.ndjson")
  echo "$OUT"
  PER=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["disk_bytes_per_object"])' <<<"$OUT")
  python3 scripts/bench_storage_peers.py $kind "$WORK/$kind.ndjson" "$PER"
  rm -rf "$WORK/storage-$kind" "$WORK/$kind.ndjson"
done
