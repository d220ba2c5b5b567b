#!/usr/bin/env bash
# How long the fleet page takes in a real browser (docs/benchmarks.md, "The fleet page"): an
# offline extender (`--offline-nodes`) with NODES nodes (inf2.48xlarge, trn1.32xlarge,
# trn2.48xlarge, inf1.6xlarge in turn), filled through its own filter, prioritize and bind to about
# FILL of its devices with a mix of 1, 2, 4 and 8 devices and 1-2 cores; then Debian's chromium
# (headless) opens the page RUNS times. Prints the page's size, the extender's time to answer it
# (curl) and the browser's load time (performance.now() at the load event, which the page records
# as data-rendered-ms): median and max. Target (issue 31): under 2 s at 500 nodes.
#   bench/fleet-page.sh
#   NODES=2000 RUNS=3 bench/fleet-page.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${TOPOSCHED:-build/toposched}"
nodes="${NODES:-500}" runs="${RUNS:-5}" fill="${FILL:-0.6}"
listen_port="${PORT:-18345}" views_port="${VIEWS_PORT:-18090}"
command -v chromium >/dev/null || { echo "fleet-page: needs Debian's chromium (apt-get install chromium)" >&2; exit 1; }
work=$(mktemp -d)
ext_pid=""
cleanup() { [ -n "$ext_pid" ] && kill "$ext_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
python3 - "$nodes" >"$work/nodes.yaml" <<'PY'
import sys
types = [("inf2.48xlarge", 12, 24), ("trn1.32xlarge", 16, 32), ("trn2.48xlarge", 16, 64), ("inf1.6xlarge", 4, 16)]
print("apiVersion: v1\nkind: NodeList\nitems:")
for i in range(int(sys.argv[1])):
    t, d, c = types[i % len(types)]
    print(f"  - metadata:\n      name: node-{i:05d}\n      labels:\n        node.kubernetes.io/instance-type: {t}\n"
          f"    status:\n      allocatable:\n        aws.amazon.com/neuron: \"{d}\"\n        aws.amazon.com/neuroncore: \"{c}\"")
PY
"$bin" extender --offline-nodes "$work/nodes.yaml" --listen "127.0.0.1:$listen_port" \
  --views-listen "127.0.0.1:$views_port" --log-level warn >"$work/extender.log" 2>&1 &
ext_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$views_port/healthz" >/dev/null && break; sleep 0.1; done
python3 - "$nodes" "$fill" "$listen_port" <<'PY'
import json, random, sys, urllib.request
nodes, fill, port = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
names = [f"node-{i:05d}" for i in range(nodes)]
devices = sum((12, 16, 16, 4)[i % 4] for i in range(nodes))
def call(verb, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/{verb}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
random.seed(1)
used, i, refused = 0.0, 0, 0
while used < fill * devices and refused < 200:
    res, n = random.choice([("aws.amazon.com/neuron", 1)] * 4 + [("aws.amazon.com/neuron", 2), ("aws.amazon.com/neuron", 4), ("aws.amazon.com/neuron", 8), ("aws.amazon.com/neuroncore", 1), ("aws.amazon.com/neuroncore", 2)])
    uid = f"00000000-0000-0000-0000-{i:012d}"
    pod = {"metadata": {"name": f"pod-{i}", "namespace": "bench", "uid": uid},
           "spec": {"containers": [{"name": "main", "resources": {"limits": {res: str(n)}}}]}}
    i += 1
    fit = call("filter", {"Pod": pod, "NodeNames": names}).get("NodeNames") or []
    if not fit:
        refused += 1
        continue
    scores = call("prioritize", {"Pod": pod, "NodeNames": fit})
    best = max(scores, key=lambda s: s["Score"])["Host"]
    if call("bind", {"PodName": pod["metadata"]["name"], "PodNamespace": "bench", "PodUID": uid, "Node": best}).get("Error"):
        refused += 1
        continue
    used += n if res.endswith("neuron") else n / 2
print(f"fleet-page: {nodes} nodes, {devices} devices, {i - refused} pods bound (~{used / devices:.0%} of the devices)")
PY
page="http://127.0.0.1:$views_port/"
curl -s -o "$work/page.html" -w '%{size_download} %{time_total}\n' "$page" >"$work/curl.txt"
server=()
for _ in $(seq 1 "$runs"); do server+=("$(curl -s -o /dev/null -w '%{time_total}' "$page")"); done
browser=()
for _ in $(seq 1 "$runs"); do
  ms=$(timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/chromium" \
    --dump-dom "$page" 2>/dev/null | grep -o 'data-rendered-ms="[0-9]*"' | grep -o '[0-9]*' || true)
  [ -n "$ms" ] || { echo "fleet-page: chromium did not finish loading the page" >&2; exit 1; }
  browser+=("$ms")
done
python3 - "$(cat "$work/curl.txt")" "${server[*]}" "${browser[*]}" <<'PY'
import statistics, sys
size = int(sys.argv[1].split()[0])
server = [float(x) * 1000 for x in sys.argv[2].split()]
browser = [int(x) for x in sys.argv[3].split()]
print(f"page: {size / 1e6:.2f} MB; extender answers in {statistics.median(server):.0f} ms median, {max(server):.0f} ms max; "
      f"chromium loads it in {statistics.median(browser)} ms median, {max(browser)} ms max ({len(browser)} runs)")
PY
