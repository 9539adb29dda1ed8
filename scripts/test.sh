#!/usr/bin/env bash
# Every test of the workspace: unit, property and end-to-end tests (which start real `sextant`
# processes on loopback ports). Installs what the tests need first. Extra arguments go to
# cargo nextest (e.g. `scripts/test.sh --profile ci`, `scripts/test.sh -E 'binary(cluster)'`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-nextest >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

# The analytics oracle test (tests/analytics_oracle.rs) compares with ClickHouse through chdb
# (PyPI). Installed once into a cache when the system python lacks it: a venv where
# python3-venv exists, else a --target directory (Debian without python3-venv). The test runs
# `$SEXTANT_PYTHON`.
CHDB_VERSION="4.4.0"
fail() { echo "test.sh: $*" >&2; exit 1; }
if [[ -z "${SEXTANT_PYTHON:-}" ]] && ! python3 -c 'import chdb' >/dev/null 2>&1; then
  TOOLS="${SEXTANT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sextant-test-tools}"
  mkdir -p "$TOOLS"
  if [[ -x "$TOOLS/venv/bin/python" ]] && "$TOOLS/venv/bin/python" -c 'import chdb' >/dev/null 2>&1; then
    export SEXTANT_PYTHON="$TOOLS/venv/bin/python"
  elif [[ -d "$TOOLS/py/chdb" ]]; then
    export SEXTANT_PYTHON=python3 PYTHONPATH="$TOOLS/py${PYTHONPATH:+:$PYTHONPATH}"
  elif rm -rf "$TOOLS/venv" && python3 -m venv "$TOOLS/venv" >/dev/null 2>&1; then
    echo "test.sh: installing chdb $CHDB_VERSION for the ClickHouse oracle tests" >&2
    "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check "chdb==$CHDB_VERSION" \
      || fail "could not install chdb (pip install chdb==$CHDB_VERSION)"
    export SEXTANT_PYTHON="$TOOLS/venv/bin/python"
  else
    rm -rf "$TOOLS/venv"
    echo "test.sh: installing chdb $CHDB_VERSION for the ClickHouse oracle tests" >&2
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS/py" \
      "chdb==$CHDB_VERSION" || fail "could not install chdb: install python3-venv or python3-pip"
    export SEXTANT_PYTHON=python3 PYTHONPATH="$TOOLS/py${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi

# A failing test's panic message is the last thing it prints, where a CI log excerpt shows it,
# rather than a backtrace (SEXTANT_TEST_BACKTRACE=1 brings those back).
export RUST_BACKTRACE="${SEXTANT_TEST_BACKTRACE:-0}"
exec cargo nextest run --workspace "$@"
