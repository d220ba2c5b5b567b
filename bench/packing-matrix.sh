#!/usr/bin/env bash
# The packing comparison of docs/simulator.md ("Packing: scarcity against every baseline"): ours
# against the best baseline per row, FGD included, in fill and queue mode, over workloads x 4
# fleet orders x seeds x two fleet sizes. Deterministic: the same binary prints the same tables.
#   bench/packing-matrix.sh                         # everything (about 20 min on 2 cores)
#   MODES=fill SIZES=1 bench/packing-matrix.sh      # fill mode, default fleets only
#   SOURCES="synthetic:ring-heavy" SEEDS="1 2" bench/packing-matrix.sh
#   TOPOSCHED=build/toposched JOBS=2 bench/packing-matrix.sh
# Environment: MODES (fill queue), SOURCES (the two bundled traces and four synthetic mixes),
# SEEDS (1 2 3), SIZES (1 10: the mode's default fleet and one ten times larger), JOBS (2).
# RAW=FILE keeps the runs' JSON in FILE and prints from it when it exists.
# FAILURES=RATE:HOURS[:evict] runs every row with devices failing and adds their cost per policy.
# HOLD_BACK=HOURS: queued rows with ours letting smaller waiting pods go first (--hold-back-hours).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/packing_matrix.py "$@"
