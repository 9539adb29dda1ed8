#!/usr/bin/env bash
# Every test of the workspace: unit, property and end-to-end tests (which start real `sextant`
# processes on loopback ports). Installs what the tests need first. Extra arguments go to
# cargo nextest (e.g. `scripts/test.sh --profile ci`, `scripts/test.sh -E 'binary(cluster)'`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-nextest >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

exec cargo nextest run --workspace "$@"
