#!/usr/bin/env bash
# The packing comparison of docs/benchmarks.md ("Packing"), as a markdown table: fill mode, the
# unallocated share at the first failure (lower is better) for scarcity against first-fit,
# spread and binpack, over traces x 4 fleet orders x seeds; then the worst row for ours against
# the best baseline, and the means. Deterministic: the same binary gives the same table.
#   bench/packing-matrix.sh                       # both bundled traces, seeds 1-3
#   TRACES="synthetic:ring-heavy" bench/packing-matrix.sh
#   TOPOSCHED=build/toposched SEEDS="1 2" bench/packing-matrix.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${TOPOSCHED:-build/toposched}"
traces="${TRACES:-data/alibaba-gpu-v2023/openb_pod_list_default.csv data/alibaba-gpu-v2023/openb_pod_list_multigpu50.csv}"
seeds="${SEEDS:-1 2 3}"
orders=(
  "inf2.48xlarge=10,inf2.24xlarge=10,trn1.32xlarge=10,trn2.48xlarge=10"
  "trn1.32xlarge=10,inf2.48xlarge=10,trn2.48xlarge=10,inf2.24xlarge=10"
  "trn2.48xlarge=10,trn1.32xlarge=10,inf2.48xlarge=10,inf2.24xlarge=10"
  "inf2.24xlarge=10,trn2.48xlarge=10,inf2.48xlarge=10,trn1.32xlarge=10"
)
echo "| trace | fleet order (10 of each) | seed | scarcity (ours) | first-fit (AWS) | spread | binpack | count-only | ours - best baseline |"
echo "|---|---|---|---|---|---|---|---|---|"
for trace in $traces; do
  if [[ "$trace" == synthetic:* ]]; then source=(--synthetic "${trace#synthetic:}"); else source=(--trace "$trace"); fi
  for order in "${orders[@]}"; do
    for seed in $seeds; do
      "$bin" simulate "${source[@]}" --mode fill --seed "$seed" --fleet "$order" \
        --policy scarcity,first-fit,spread,binpack --json |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
s = {p["name"]: 100 * p["unallocated_share"] for p in d["policies"]}
best = min(s["first-fit"], s["spread"], s["binpack"])
trace, order, seed = sys.argv[1:4]
short = ", ".join(g.split("=")[0] for g in order.split(","))
name = trace.split("/")[-1]
cells = [s[k] for k in ("scarcity", "first-fit", "spread", "binpack", "count-only")]
print("| %s | %s | %s | %s | %+.1f |" % (name, short, seed, " | ".join("%.1f%%" % c for c in cells), cells[0] - best))
' "$trace" "$order" "$seed"
    done
  done
done | python3 -c '
import sys
rows = [l for l in sys.stdin if l.startswith("| ")]
for l in rows: print(l, end="")
ours = [float(l.split("|")[4].strip(" %")) for l in rows]
ff = [float(l.split("|")[5].strip(" %")) for l in rows]
worst = max(float(l.split("|")[9]) for l in rows)
print()
print(f"rows: {len(rows)}; mean unallocated at the first failure: scarcity {sum(ours)/len(ours):.2f}%, first-fit {sum(ff)/len(ff):.2f}% (ratio {sum(ours)/max(sum(ff),1e-9):.2f}); worst row, ours minus the best baseline: {worst:+.1f} points")
'
