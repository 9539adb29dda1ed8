#!/usr/bin/env bash
# Every test of the workspace: unit, property and end-to-end tests (which start real `sextant`
# processes on loopback ports). Installs what the tests need first. Extra arguments go to
# cargo nextest (e.g. `scripts/test.sh --profile ci`, `scripts/test.sh -E 'test(/^cluster::/)'`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-nextest >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

# Python packages the end-to-end tests run through `$SEXTANT_PYTHON` (all from PyPI):
# - chdb: the analytics oracle test (tests/analytics_oracle.rs) compares with ClickHouse;
# - the OpenTelemetry SDK and its OTLP exporters: tests/otlp.rs sends with them.
# - schemathesis: tests/openapi.rs tests every operation of /openapi.json with it.
# Installed once into a cache when the system python lacks them: a venv where python3-venv
# exists, else a --target directory (Debian without python3-venv).
PY_PACKAGES=(
  "chdb==4.4.0"
  "opentelemetry-sdk==1.45.2"
  "opentelemetry-exporter-otlp-proto-grpc==1.45.2"
  "opentelemetry-exporter-otlp-proto-http==1.45.2"
  "schemathesis==4.32.5"
)
# One import per package above: a python where all of them work is used as it is.
PY_CHECK='import chdb, opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc, opentelemetry.exporter.otlp.proto.http, schemathesis'
fail() { echo "test.sh: $*" >&2; exit 1; }
if [[ -z "${SEXTANT_PYTHON:-}" ]] && ! python3 -c "$PY_CHECK" >/dev/null 2>&1; then
  TOOLS="${SEXTANT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sextant-test-tools}"
  mkdir -p "$TOOLS"
  if [[ -x "$TOOLS/venv/bin/python" ]] && "$TOOLS/venv/bin/python" -c "$PY_CHECK" >/dev/null 2>&1; then
    export SEXTANT_PYTHON="$TOOLS/venv/bin/python"
  elif [[ -d "$TOOLS/py" ]] && PYTHONPATH="$TOOLS/py" python3 -c "$PY_CHECK" >/dev/null 2>&1; then
    export SEXTANT_PYTHON=python3 PYTHONPATH="$TOOLS/py${PYTHONPATH:+:$PYTHONPATH}"
  elif { [[ -x "$TOOLS/venv/bin/pip" ]] || python3 -m venv "$TOOLS/venv" >/dev/null 2>&1; }; then
    echo "test.sh: installing ${PY_PACKAGES[*]} for the end-to-end tests" >&2
    "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}" \
      || fail "could not install ${PY_PACKAGES[*]} (pip install into $TOOLS/venv)"
    export SEXTANT_PYTHON="$TOOLS/venv/bin/python"
  else
    rm -rf "$TOOLS/venv"
    echo "test.sh: installing ${PY_PACKAGES[*]} for the end-to-end tests" >&2
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS/py" \
      "${PY_PACKAGES[@]}" || fail "could not install the test packages: install python3-venv or python3-pip"
    export SEXTANT_PYTHON=python3 PYTHONPATH="$TOOLS/py${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi

# The dashboard's browser test (tests/dashboard.rs): Debian's Chromium, and playwright-core
# from web/package-lock.json (Node.js 20+ and npm must be present).
if [[ ! -x /usr/bin/chromium ]]; then
  echo "test.sh: installing Debian's chromium for the browser tests" >&2
  SUDO=$([[ $(id -u) -eq 0 ]] && echo "" || echo sudo)
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null \
    || fail "could not install chromium (apt-get install chromium)"
fi
command -v node >/dev/null 2>&1 || fail "Node.js is needed by the browser tests (apt-get install nodejs npm)"
if [[ ! -d web/node_modules/playwright-core ]]; then
  (cd web && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci in web/ failed"
fi
# The posthog-js recording test (tests/posthog_js.rs): posthog-js, rrweb and playwright-core,
# pinned in tests/browser/package-lock.json.
# Installed again whenever the lock file changes (a copy of it marks the install).
if ! cmp -s tests/browser/package-lock.json tests/browser/node_modules/.installed-lock.json; then
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.installed-lock.json) \
    || fail "npm ci in tests/browser/ failed"
fi

# jemalloc: Debian's static library (libjemalloc-dev) rather than jemalloc built from source,
# which was the largest unit of a clean test build (docs/BENCHMARKS.md, "Test build time").
# Where the package cannot be installed, jemalloc is built as in a release build.
FEATURES=()
JEMALLOC_PIC=/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a
if [[ "$(uname -m)" == x86_64 && -z "${SEXTANT_BUILD_JEMALLOC:-}" ]]; then
  if [[ ! -f $JEMALLOC_PIC ]] && command -v apt-get >/dev/null 2>&1; then
    SUDO=$([[ $(id -u) -eq 0 ]] && echo "" || echo sudo)
    echo "test.sh: installing Debian's libjemalloc-dev for the test build" >&2
    { $SUDO apt-get install -y -qq libjemalloc-dev >/dev/null 2>&1 \
      || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libjemalloc-dev >/dev/null; }; } \
      || echo "test.sh: no libjemalloc-dev; building jemalloc from source" >&2
  fi
  if [[ -f $JEMALLOC_PIC ]]; then
    export JEMALLOC_OVERRIDE=$JEMALLOC_PIC
    FEATURES=(--features sextant/system-jemalloc)
  fi
fi

# A failing test's panic message is the last thing it prints, where a CI log excerpt shows it,
# rather than a backtrace (SEXTANT_TEST_BACKTRACE=1 brings those back).
export RUST_BACKTRACE="${SEXTANT_TEST_BACKTRACE:-0}"
exec cargo nextest run --workspace "${FEATURES[@]}" "$@"
