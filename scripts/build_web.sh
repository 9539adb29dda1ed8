#!/usr/bin/env bash
# Rebuilds the dashboard (web/) into router/assets/dashboard and its manifest
# router/src/dashboard/assets.rs; commit both. The router's tests fail while they are stale.
# Needs Node.js 20+ and npm (not needed to build or run Sextant itself).
set -euo pipefail
cd "$(dirname "$0")/../web"
npm ci --no-audit --no-fund --loglevel=error
npx tsc --noEmit
npx vite build --logLevel warn
node scripts/manifest.mjs
