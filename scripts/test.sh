#!/usr/bin/env bash
# The README's second command, and what CI runs. Builds and runs every test tier:
#   1. release build: unit, integration (loopback HTTP, fake API server, fake kubelet) and CLI tests
#   2. ASan+UBSan build: the same tests under the sanitizers
#   3. libFuzzer (clang): every parser of untrusted input, a few seconds each
# Set TOPOSCHED_SKIP_ASAN=1 or TOPOSCHED_SKIP_FUZZ=1 to leave a tier out.
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

if [ "${TOPOSCHED_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== libFuzzer targets (ASan+UBSan, a few seconds each) =="
  scripts/build.sh fuzz
  ctest --preset fuzz
fi
