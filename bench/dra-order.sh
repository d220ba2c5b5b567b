#!/usr/bin/env bash
# What the publish order of a DRA driver is worth (docs/dra.md, "Packing through the publish
# order"): `toposched simulate --dra` over traces x fleets x seeds, dynamic replay (arrivals and
# departures at the trace's times), naive index order against toposched dra-plugin's scarcity
# order, each with kube-scheduler's node order taken as fleet order (first-node) and as
# least-allocated (spread). Prints a markdown table (refused pods and device-hours; fewer refused
# and more device-hours are better) and the totals. Deterministic: the same binary gives the same
# table.
#   bench/dra-order.sh
#   TOPOSCHED=build/toposched SEEDS="1 2" bench/dra-order.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${TOPOSCHED:-build/toposched}"
seeds="${SEEDS:-1 2 3}"
traces="${TRACES:-data/alibaba-gpu-v2023/openb_pod_list_default.csv synthetic:inference synthetic:training synthetic:ring-heavy}"
fleets="${FLEETS:-inf2.48xlarge=1,inf2.24xlarge=1,trn1.32xlarge=1,trn2.48xlarge=1 inf2.48xlarge=2,inf1.24xlarge=2 trn2.48xlarge=2,trn1.32xlarge=2}"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
echo "| trace | fleet | seed | node order | refused: index | refused: scarcity | device-hours: index | device-hours: scarcity |"
echo "|---|---|---|---|---|---|---|---|"
for trace in $traces; do
  if [[ "$trace" == synthetic:* ]]; then source=(--synthetic "${trace#synthetic:}"); else source=(--trace "$trace"); fi
  for fleet in $fleets; do
    for seed in $seeds; do
      # The bundled trace's times do not depend on the seed: one run is enough for it.
      if [[ "$trace" != synthetic:* && "$seed" != "${seeds%% *}" ]]; then continue; fi
      "$bin" simulate "${source[@]}" --dra --mode dynamic --seed "$seed" --fleet "$fleet" --json |
        python3 -c '
import json, sys
trace, fleet, seed, rows = sys.argv[1:]
d = {r["variant"]: r for r in json.load(sys.stdin)["dra"]}
with open(rows, "a") as out:
    for node in ("first-node", "spread"):
        i, s = d["index/" + node], d["scarcity/" + node]
        name = trace.split("/")[-1]
        print("| %s | %s | %s | %s | %d | %d | %.0f | %.0f |" % (name, fleet, seed, node, i["refused"], s["refused"], i["device_hours"], s["device_hours"]))
        out.write("%s %d %d %f %f\n" % (node, i["refused"], s["refused"], i["device_hours"], s["device_hours"]))
' "$trace" "$fleet" "$seed" "$rows"
    done
  done
done
python3 - "$rows" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
for node in ("first-node", "spread"):
    r = [x for x in rows if x[0] == node]
    ri, rs = sum(int(x[1]) for x in r), sum(int(x[2]) for x in r)
    hi, hs = sum(float(x[3]) for x in r), sum(float(x[4]) for x in r)
    better = sum(1 for x in r if int(x[2]) < int(x[1]))
    worse = sum(1 for x in r if int(x[2]) > int(x[1]))
    more_hours = sum(1 for x in r if float(x[4]) > float(x[3]))
    less_hours = sum(1 for x in r if float(x[4]) < float(x[3]))
    print(f"\n{node}: {len(r)} rows; refused index {ri}, scarcity {rs} ({100*(rs-ri)/max(ri,1):+.1f}%); "
          f"device-hours {hi:.0f} vs {hs:.0f} ({100*(hs-hi)/max(hi,1):+.2f}%); "
          f"scarcity refuses fewer in {better} rows, more in {worse}; "
          f"allocates more device-hours in {more_hours} rows, fewer in {less_hours}")
PY
