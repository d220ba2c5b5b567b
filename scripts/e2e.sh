#!/usr/bin/env bash
# One command for the end-to-end tier (docs/e2e.md): builds toposched in build-e2e/ (Release, no
# benches), builds each Kubernetes version once into /var/cache/toposched-e2e (a current one from
# its pinned Go modules, 1.20.2 from Debian's source package), and runs the scenarios against the
# real control planes with `ctest -L e2e`. Needs root. Exits 0 and says why when it has to skip.
#   scripts/e2e.sh                       # every scenario on 1.37, the 1.20-only ones on 1.20.2
#   scripts/e2e.sh --k8s 1.34            # every scenario on 1.34 (any list: --k8s 1.37,1.34,1.20)
#   scripts/e2e.sh --throughput          # then the scheduling-throughput run (test/e2e/throughput.sh)
#                                        # on the first version of the list
# TOPOSCHED_SKIP_E2E=1 skips everything.
set -euo pipefail
cd "$(dirname "$0")/.."
versions="1.37,1.20" throughput=0
while [ $# -gt 0 ]; do
  case "$1" in
    --k8s) versions="${2:?--k8s needs a version list, e.g. 1.37,1.34}"; shift 2 ;;
    --k8s=*) versions="${1#--k8s=}"; shift ;;
    --throughput) throughput=1; shift ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "e2e.sh: unknown argument '$1' (--k8s LIST, --throughput)" >&2; exit 2 ;;
  esac
done
for v in ${versions//,/ }; do
  case "$v" in
    1.20 | 1.34 | 1.37) ;;
    *) [ -f "test/e2e/modules/k8s-$v/go.mod" ] || { echo "e2e.sh: no Kubernetes $v here (1.20, or a pinned module under test/e2e/modules/: 1.34, 1.37)" >&2; exit 2; } ;;
  esac
done
if [ "${TOPOSCHED_SKIP_E2E:-0}" = 1 ]; then echo "e2e: skipped (TOPOSCHED_SKIP_E2E=1)"; exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "e2e: skipped: needs root (apt-get, kubelet, containerd)"; exit 0; fi
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
nice -n 19 cmake -S . -B build-e2e -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOPOSCHED_BUILD_TESTS=ON \
  -DTOPOSCHED_BUILD_BENCH=OFF -DTOPOSCHED_E2E=ON "-DTOPOSCHED_E2E_K8S=${versions//,/;}" >/dev/null
nice -n 19 cmake --build build-e2e --target toposched podresources_dump dra_oracle
status=0
export TOPOSCHED_E2E_FAILURES="$PWD/build-e2e/e2e-failures.txt"
rm -f "$TOPOSCHED_E2E_FAILURES"
ctest --test-dir build-e2e -L e2e --output-on-failure || status=$?
if [ $throughput = 1 ]; then
  TOPOSCHED_E2E_K8S="${versions%%,*}" TOPOSCHED_BIN="$PWD/build-e2e/toposched" test/e2e/throughput.sh || status=$?
fi
if [ -s "$TOPOSCHED_E2E_FAILURES" ]; then
  echo "== e2e: why each failed scenario failed (from $TOPOSCHED_E2E_FAILURES) =="
  cat "$TOPOSCHED_E2E_FAILURES"
fi
exit $status
