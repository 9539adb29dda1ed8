#!/usr/bin/env bash
# Heap per buffered row against the buffers' estimate (docs/BENCHMARKS.md, "Attributes in one
# buffer per batch"). For each build given, in order: a fresh `sextant dev`, 160 batches of 1000
# objects sent in one second (fewer than a flush holds), then the growth of the process's
# anonymous memory and the buffers' estimate (`sextant_node_memory_bytes{component="buffers"}`).
#   scripts/bench_buffer_memory.sh spans|logs|events BIN [BIN...]
set -euo pipefail
KIND=$1; shift
. "$(dirname "$0")/dev_server.sh"
anonymous_kib() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status"; }
for BIN in "$@"; do
  start_dev "$BIN"
  trap 'kill -9 $PID 2>/dev/null || true' EXIT
  BEFORE=$(anonymous_kib "$PID")
  OUT=$("$BIN" loadgen --url "http://127.0.0.1:$PORT" --credentials "$WORK/d/credentials.json" --kind "$KIND" \
    --batch 1000 --concurrency 8 --rate 160 --seconds 1 --json --no-ceiling)
  # Until the estimate, which the node sets every second, stops growing.
  LAST=-1
  for _ in $(seq 1 60); do
    EST=$(curl -sf "http://127.0.0.1:$INTERNAL/metrics" | awk '/^sextant_node_memory_bytes\{component="buffers"/ {s += $2} END {print s + 0}')
    [ "$EST" = "$LAST" ] && [ "$EST" != 0 ] && break
    LAST=$EST; sleep 1.2
  done
  AFTER=$(anonymous_kib "$PID")
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; rm -rf "$WORK"
  python3 - "$BIN" "$OUT" "$BEFORE" "$AFTER" "$EST" <<'PY'
import json, sys
binary, out, before, after, estimate = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:])
rows = out["admitted"] * out["batch"]
heap = (after - before) * 1024
print(json.dumps({"bin": binary, "objects": rows, "heap_bytes_per_object": round(heap / rows),
                  "estimate_bytes_per_object": round(estimate / rows), "estimate_over_heap": round(estimate / heap, 2)}))
PY
done
