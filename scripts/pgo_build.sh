#!/usr/bin/env bash
# The production build, optimized with a profile of its own work (PGO; docs/BENCHMARKS.md,
# "Built with a profile of its own work"): an instrumented build runs scripts/pgo_train.py
# (ingest of every kind, OTLP, every kind of read), LLVM merges what it counted, and the
# final build lays out and inlines by it. The image is built this way (Dockerfile).
#   scripts/pgo_build.sh [CARGO BUILD ARGS...]     e.g. --features system-jemalloc
# Prints the path of the binary (target/<host>/production/sextant). The instrumented build
# has a target directory of its own (target/pgo-generate); both name the target triple, so
# that build scripts and macros are built without instrumentation or the profile.
# Needs python3, and llvm-profdata of the toolchain's LLVM (rustup component llvm-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
[ -x "$profdata" ] || rustup component add llvm-tools >&2
profiles=$(mktemp -d)
trap 'rm -rf "$profiles"' EXIT
RUSTFLAGS="-Cprofile-generate=$profiles/raw" cargo build --profile production --locked --bin sextant \
  --target "$host" --target-dir target/pgo-generate "$@" >&2
python3 scripts/pgo_train.py "target/pgo-generate/$host/production/sextant" >&2
"$profdata" merge -o "$profiles/sextant.profdata" "$profiles/raw" >&2
RUSTFLAGS="-Cprofile-use=$profiles/sextant.profdata" cargo build --profile production --locked --bin sextant \
  --target "$host" "$@" >&2
echo "${CARGO_TARGET_DIR:-target}/$host/production/sextant"
