#!/usr/bin/env bash
# The README's second command, and what CI runs: builds and runs every test, first in the
# release build, then under AddressSanitizer + UndefinedBehaviorSanitizer.
# Set TOPOSCHED_SKIP_ASAN=1 to run only the release tier.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

echo "== release build and tests =="
scripts/build.sh release
ctest --preset release -j "$jobs"

if [ "${TOPOSCHED_SKIP_ASAN:-0}" != "1" ]; then
  echo "== ASan+UBSan build and tests =="
  scripts/build.sh asan
  ctest --preset asan -j "$jobs"
fi
