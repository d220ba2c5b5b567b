#!/usr/bin/env bash
# Configures and builds a preset (default: release, binary at build/toposched).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
# ccache keys on paths relative to the checkout, so another clone reuses the cache.
export CCACHE_BASEDIR="$PWD"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
