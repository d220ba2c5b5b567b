#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run the main job (the simulator
# over the bundled Alibaba trace, on the default mixed Neuron fleet).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The binary alone: the tests and benchmarks are the second command's (scripts/test.sh builds
# everything), so the first shows the simulator after a fraction of the build.
scripts/build.sh release toposched
echo
echo "== toposched simulate (bundled trace, default fleet) =="
./build/toposched simulate "$@"
