#!/usr/bin/env bash
# Configures and builds a preset (default: release, binary at build/toposched).
#   scripts/build.sh [PRESET] [TARGET...]   e.g. `scripts/build.sh release toposched`: the binary
#                                            alone, without the tests and benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
# ccache keys on paths relative to the checkout, so another clone reuses the cache.
export CCACHE_BASEDIR="$PWD"
# Debug info would otherwise put the checkout's path into every cache key.
export CCACHE_NOHASHDIR=1
cmake --preset "$preset" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build --preset "$preset" "${targets[@]}"
