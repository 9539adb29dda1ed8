#!/usr/bin/env bash
# A long, coverage-guided run of one fuzz target under libFuzzer (docs/RELIABILITY.md):
#   fuzz/long-run.sh <target> [executions]        (default 10 million)
# MAX_TIME=<seconds> in the environment stops it earlier (the slow segment target).
# Stable toolchain: RUSTC_BOOTSTRAP=1 lets cargo fuzz pass its -Z flags. No sanitizer: the
# targets are safe Rust, and panics, overflows (debug assertions on) and allocations over the
# cap (sextant_fuzz::alloc) are what is looked for. The corpus grows in
# fuzz/libfuzzer/corpus/<target> (not committed), seeded from fuzz/seeds/<target>; a crash is
# saved in fuzz/libfuzzer/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
target="$1"
runs="${2:-10000000}"
case "$target" in
  segment | manifest) max_len=512 ;;
  time_values) max_len=128 ;;
  *) max_len=4096 ;;
esac
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p "fuzz/libfuzzer/corpus/$target" "fuzz/libfuzzer/artifacts/$target"
export RUSTC_BOOTSTRAP=1
exec nice -n 19 cargo fuzz run --fuzz-dir fuzz/libfuzzer -a -s none "$target" \
  "fuzz/libfuzzer/corpus/$target" "fuzz/seeds/$target" -- \
  -runs="$runs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="fuzz/libfuzzer/artifacts/$target/" ${MAX_TIME:+-max_total_time=$MAX_TIME}
