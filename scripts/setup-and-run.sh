#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run the main job (the simulator
# over the bundled Alibaba trace, on the default mixed Neuron fleet).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
echo
echo "== toposched simulate (bundled trace, default fleet) =="
./build/toposched simulate "$@"
