#!/usr/bin/env bash
# Two builds ingesting at the same time, one per core, for A/B comparisons of server CPU per
# object that the machine's drift does not swamp (docs/BENCHMARKS.md, "One optimization
# unit, writes as function calls"): this machine's speed changes by a quarter within
# minutes, and runs one after the other compare different machines. Build A and its load
# generator are pinned to core 0, B and its load generator to core 1; each pair is run a
# second time with the cores swapped, as one core runs faster than the other. Prints one
# line per pair: each server's CPU per object, B's over A's in each run, and the geometric
# mean of the two.
#   scripts/bench_ingest_ab.sh spans|logs|events SECONDS PAIRS BIN_A BIN_B
# LOADGEN=BIN: the load generator for both sides (default: A's).
set -euo pipefail
KIND=$1; SECS=$2; PAIRS=$3; A=$4; B=$5
TCK=$(getconf CLK_TCK)
. "$(dirname "$0")/dev_server.sh"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# One run of BIN_ON_0 and BIN_ON_1 side by side; prints their CPU µs per object.
side_by_side() {
  local pids=() works=() ports=() outs=() before=() core
  for core in 0 1; do
    start_dev "$1"; shift
    taskset -a -pc "$core" "$PID" >/dev/null
    pids+=("$PID"); works+=("$WORK"); ports+=("$PORT"); outs+=("$(mktemp)")
  done
  for core in 0 1; do before+=("$(cpu "${pids[$core]}")"); done
  local loads=()
  for core in 0 1; do
    taskset -c "$core" "${LOADGEN:-$A}" loadgen --url "http://127.0.0.1:${ports[$core]}" \
      --credentials "${works[$core]}/d/credentials.json" --kind "$KIND" --batch 1000 --concurrency 8 \
      --seconds "$SECS" --json --no-ceiling >"${outs[$core]}" &
    loads+=($!)
  done
  wait "${loads[@]}"
  for core in 0 1; do
    python3 -c 'import json, sys; o = json.load(open(sys.argv[1]))
if o["errors"]: print(o["errors"], "requests refused", file=sys.stderr)
print(round(1e6 * (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]) / o["objects"], 3))' \
      "${outs[$core]}" "${before[$core]}" "$(cpu "${pids[$core]}")" "$TCK"
    kill -9 "${pids[$core]}"; wait "${pids[$core]}" 2>/dev/null || true
    rm -rf "${works[$core]}" "${outs[$core]}"
  done
}
for _ in $(seq 1 "$PAIRS"); do
  read -r a0 b1 < <(side_by_side "$A" "$B" | paste -sd' ')
  read -r b0 a1 < <(side_by_side "$B" "$A" | paste -sd' ')
  python3 -c 'import sys; a0, b1, b0, a1 = map(float, sys.argv[1:])
r1, r2 = b1 / a0, b0 / a1
print(f"A {a0:.2f} B {b1:.2f} (A on core 0)  A {a1:.2f} B {b0:.2f} (B on core 0)  B/A {r1:.3f} {r2:.3f}, both {(r1 * r2) ** 0.5:.3f}")' \
    "$a0" "$b1" "$b0" "$a1"
done
