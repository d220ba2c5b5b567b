#!/usr/bin/env bash
# One command for the end-to-end tier (docs/e2e.md): builds toposched in build-e2e/ (Release, no
# benches), builds Kubernetes 1.20.2 once from Debian's source package into
# /var/cache/toposched-e2e, and runs every scenario against the real control plane with
# `ctest -L e2e`. Needs root. Exits 0 and says why when it has to skip.
#   scripts/e2e.sh                 # the scenarios
#   scripts/e2e.sh --throughput    # then the scheduling-throughput run (test/e2e/throughput.sh)
# TOPOSCHED_SKIP_E2E=1 skips everything.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${TOPOSCHED_SKIP_E2E:-0}" = 1 ]; then echo "e2e: skipped (TOPOSCHED_SKIP_E2E=1)"; exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "e2e: skipped: needs root (apt-get, kubelet, containerd)"; exit 0; fi
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
nice -n 19 cmake -S . -B build-e2e -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOPOSCHED_BUILD_TESTS=ON \
  -DTOPOSCHED_BUILD_BENCH=OFF -DTOPOSCHED_E2E=ON >/dev/null
nice -n 19 cmake --build build-e2e --target toposched
status=0
ctest --test-dir build-e2e -L e2e --output-on-failure || status=$?
if [ "${1:-}" = --throughput ]; then
  TOPOSCHED_BIN="$PWD/build-e2e/toposched" test/e2e/throughput.sh || status=$?
fi
exit $status
