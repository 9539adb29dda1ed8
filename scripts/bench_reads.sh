#!/usr/bin/env bash
# Observability reads side by side with ClickHouse (chdb) on the same rows, in one run
# (docs/BENCHMARKS.md, "Reads"): N spans and N log lines of the load generator's data set,
# loaded once into a release `sextant dev` (through the ingest API) and into ClickHouse, then
# every query timed RUNS times on each engine.
#   scripts/bench_reads.sh [OBJECTS] [RUNS] [WORK_DIR]
# With WORK_DIR the data is kept there and reused by the next run (re-measure after a change).
set -euo pipefail
cd "$(dirname "$0")/.."
OBJECTS=${1:-10000000}
RUNS=${2:-10}
BIN=${SEXTANT_BIN:-target/release/sextant}
cargo build --release --bin sextant
python3 -c 'import chdb' 2>/dev/null || pip install -q chdb
ARGS=(--objects "$OBJECTS" --runs "$RUNS" --bin "$BIN")
if [ -n "${3:-}" ]; then ARGS+=(--work "$3"); fi
exec python3 scripts/bench_reads.py "${ARGS[@]}"
