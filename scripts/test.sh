#!/usr/bin/env bash
# The README's second command, and what CI runs. Lints, then builds and runs every test tier:
#   0. lint (scripts/lint.sh): clang's thread-safety analysis over src/ (first), clang-format and
#      clang-tidy; any finding fails the run
#   1. release build: unit, integration (loopback HTTP, fake API server, fake kubelet) and CLI tests
#   2. ASan+UBSan build: the same tests under the sanitizers
#   3. ThreadSanitizer build (the tsan preset): only the test programs that start threads (marked
#      THREADED in test/CMakeLists.txt: the threaded_tests target, ctest label "threaded"); any
#      race report fails the test. test/tsan.supp covers only what Debian's uninstrumented gRPC,
#      protobuf, absl and spdlog do (each entry says why), never our code. The preset passes
#      -Wno-tsan: GCC warns (345 times) that Boost.Asio's atomic_thread_fence is not modelled by
#      TSan; the fence is in Boost's strand, not ours, and an unmodelled fence can only make TSan
#      report a race that is not one (none is reported), never hide one
#   4. libFuzzer (clang): every parser of untrusted input, a few seconds each
#   5. end to end (scripts/e2e.sh): real control planes, kubelet and containerd: every scenario on
#      Kubernetes 1.37 (built from its pinned Go modules), three on 1.20.2 (Debian's source package);
#      only as root, and only while at least TOPOSCHED_E2E_BUDGET_MIN (default 35) minutes remain of
#      TOPOSCHED_TEST_LIMIT_MIN (default 90); it says so when it skips
# Set TOPOSCHED_SKIP_ASAN=1, TOPOSCHED_SKIP_TSAN=1, TOPOSCHED_SKIP_FUZZ=1 or TOPOSCHED_SKIP_E2E=1
# to leave a tier out.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

echo "== lint =="
scripts/lint.sh

echo "== release build and tests =="
scripts/build.sh release
ctest --preset release -j "$jobs"

if [ "${TOPOSCHED_SKIP_ASAN:-0}" != "1" ]; then
  echo "== ASan+UBSan build and tests =="
  scripts/build.sh asan
  ctest --preset asan -j "$jobs"
fi

if [ "${TOPOSCHED_SKIP_TSAN:-0}" != "1" ]; then
  echo "== ThreadSanitizer build and the threaded tests =="
  scripts/build.sh tsan  # the preset builds the threaded_tests target only
  ctest --preset tsan -j "$jobs"
fi

if [ "${TOPOSCHED_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== libFuzzer targets (ASan+UBSan, a few seconds each) =="
  scripts/build.sh fuzz
  ctest --preset fuzz
fi

if [ "${TOPOSCHED_SKIP_E2E:-0}" = "1" ]; then
  echo "== end to end: skipped (TOPOSCHED_SKIP_E2E=1) =="
elif [ "$(id -u)" != 0 ]; then
  echo "== end to end: skipped (needs root: apt-get, kubelet, containerd; see docs/e2e.md) =="
elif [ $((SECONDS / 60 + ${TOPOSCHED_E2E_BUDGET_MIN:-35})) -gt "${TOPOSCHED_TEST_LIMIT_MIN:-90}" ]; then
  echo "== end to end: skipped (the other tiers took $((SECONDS / 60)) min; the e2e tier needs up to ${TOPOSCHED_E2E_BUDGET_MIN:-35} of the ${TOPOSCHED_TEST_LIMIT_MIN:-90}) =="
else
  echo "== end to end: real Kubernetes 1.37.2 and 1.20.2 (scripts/e2e.sh), after $((SECONDS / 60)) min =="
  scripts/e2e.sh
fi
