#!/usr/bin/env bash
# Ingest throughput of the current engine against the walking skeleton's first version (issue 3:
# "no lower than with the skeleton's first version"), standalone, same load generator (the
# current one) and data for both, runs interleaved (old, new, old, new, ...) so both see the
# same machine load. Prints one JSON line per run and the medians.
#   scripts/bench_vs_skeleton.sh OLD_BIN NEW_BIN [SECONDS] [ROUNDS] [KIND]
# OLD_BIN: a release build of the skeleton, e.g.
#   git worktree add --detach /tmp/skeleton 707a8cd && (cd /tmp/skeleton && cargo build --release --bin sextant)
#   OLD_BIN=/tmp/skeleton/target/release/sextant
# To compare two builds of the current engine, give the first the same unthrottled flags:
#   OLD_FLAGS="--ingest-rps 1000000 --api-rps 1000000" scripts/bench_vs_skeleton.sh OLD NEW ...
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1
NEW=$2
SECS=${3:-15}
ROUNDS=${4:-3}
KIND=${5:-spans}
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1/readyz" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; return 1; }

run() { # NAME BIN [EXTRA DEV FLAGS...]
  local name=$1 bin=$2; shift 2
  local p dir=$WORK/$name-$RANDOM
  p=$(port)
  "$bin" dev --data-dir "$dir" --listen 127.0.0.1:$p "$@" >"$dir.log" 2>&1 &
  PID=$!
  wait_ready http://127.0.0.1:$p
  for _ in $(seq 1 300); do [ -s "$dir/credentials.json" ] && break; sleep 0.1; done
  "$NEW" loadgen --url http://127.0.0.1:$p --credentials "$dir/credentials.json" --kind "$KIND" \
    --batch 1000 --concurrency 8 --seconds "$SECS" --json --no-ceiling |
    python3 -c "
import json, os, sys
r = json.loads(sys.stdin.read())
r['engine'] = '$name'
# The server's CPU time (user + system) over its whole life: the loadgen shares the machine,
# so objects per server CPU-second says how much work each engine does per object.
stat = open('/proc/$PID/stat').read().rsplit(')', 1)[1].split()
r['server_cpu_s'] = (int(stat[11]) + int(stat[12])) / os.sysconf('SC_CLK_TCK')
r['objects_per_server_cpu_s'] = round(r['objects'] / r['server_cpu_s'])
print(json.dumps(r))"
  kill -9 $PID; wait $PID 2>/dev/null || true; PID=
  rm -rf "$dir"
}

for _ in $(seq 1 "$ROUNDS"); do
  # shellcheck disable=SC2086 # OLD_FLAGS is a list of flags
  run skeleton "$OLD" ${OLD_FLAGS:-} | tee -a "$WORK/runs.jsonl"
  # The skeleton has no rate limits; lift the current ones so both are measured unthrottled.
  run current "$NEW" --ingest-rps 1000000 --api-rps 1000000 | tee -a "$WORK/runs.jsonl"
done
python3 - "$WORK/runs.jsonl" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
key = next(k for k in ("objects_per_sec", "spans_per_sec", "per_sec", "rate") if k in runs[0])
med = {e: statistics.median(r[key] for r in runs if r["engine"] == e) for e in ("skeleton", "current")}
cpu = {e: statistics.median(r["objects_per_server_cpu_s"] for r in runs if r["engine"] == e) for e in med}
print(json.dumps({"metric": key, "median_skeleton": med["skeleton"], "median_current": med["current"],
                  "current_over_skeleton": round(med["current"] / med["skeleton"], 3),
                  "objects_per_server_cpu_s": cpu}))
EOF
