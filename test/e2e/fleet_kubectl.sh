# shellcheck shell=bash
# `kubectl neuron` against a real cluster (issue 31, item 3): sourced by a scenario after lib.sh,
# which calls fleet_check_kubectl once its nodes, bound pods and one pending pod are in place and
# its extender and kube-scheduler run.
#
#   fleet_check_kubectl PENDING_POD
#
# Runs the plugin three ways and compares each with the golden files in test/e2e/golden/
# (fleet_kubectl_*.txt):
#   1. `kubectl-neuron nodes|pods -A|why` through a symlink named kubectl-neuron in $W/bin, from
#      the API server alone ($W/admin.kubeconfig);
#   2. `"$KUBECTL" neuron ...` with $W/bin on PATH and KUBECONFIG set: kubectl's own plugin
#      lookup runs the same binary, and the output must be byte for byte the same as 1;
#   3. `nodes` and `why` with --extender http://127.0.0.1:$EXT_PORT (the extender's live views).
# Each line must fit 80 columns; `-o json` of each subcommand is parsed back; the pending pod's
# why names a reason for every node it does not fit, and the reason the live extender gives is the one worked
# out from the API server.
#
# Normalisation before comparing (what legitimately varies between runs):
#   - trailing white space is dropped;
#   - "(from api-server)" and "(from extender)" both become "(from SOURCE)";
#   - in the extender's `nodes`, the "free legal sets:" and "free legal sets fleet-wide:" lines
#     (and their continuation lines) are dropped: which request classes the live scorer weighs follows the demand it has observed,
#     i.e. how many filter calls kube-scheduler happened to make (the API-server run keeps them:
#     its classes are the fixed defaults).
# TOPOSCHED_E2E_UPDATE_GOLDEN=1 writes the goldens instead of comparing (then read the diff).
#
# The goldens are of fleet.sh's fleet: nodes inf2-a inf2.48xlarge, trn1-a trn1.32xlarge, trn2-a
# trn2.48xlarge, inf1-a inf1.6xlarge; old-0, old-4, old-8, old-12 (one device each, adopted on
# trn1-a); ring-4 and ring-2 (inf2-a), row-8 and cores-3 (3 cores, trn2-a), chain-2 (2 cores,
# inf1-a), each bound before the next; pending wait-4 (4 devices, held to trn1-a). A scenario with
# another fleet writes its own goldens once with the variable above.

FLEET_KUBECTL_GOLDEN="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/golden"

fleet_kubectl_normalise() {
  sed -e 's/[[:space:]]*$//' -e 's/(from \(api-server\|extender\))/(from SOURCE)/'
}

# Drops the "free legal sets:" lines (a node's, and the fleet's "free legal sets fleet-wide:")
# and the lines indented deeper that continue them.
fleet_kubectl_drop_free_sets() {
  awk '/^    free legal sets( fleet-wide)?:/ {skip = 1; next} skip && /^        / {next} {skip = 0; print}'
}

# fleet_kubectl_compare NAME FILE: FILE (normalised) against golden/fleet_kubectl_NAME.txt.
fleet_kubectl_compare() {
  local golden="$FLEET_KUBECTL_GOLDEN/fleet_kubectl_$1.txt" got="$2"
  if [ "${TOPOSCHED_E2E_UPDATE_GOLDEN:-0}" = 1 ]; then
    mkdir -p "$FLEET_KUBECTL_GOLDEN"
    cp "$got" "$golden"
    log "wrote $golden"
    return 0
  fi
  [ -f "$golden" ] || die "no golden $golden (TOPOSCHED_E2E_UPDATE_GOLDEN=1 writes it)"
  diff -u "$golden" "$got" >&2 || die "kubectl neuron $1 differs from $golden"
}

fleet_kubectl_fits_80() {
  local wide
  wide=$(awk 'length($0) > 80 {print FILENAME ":" FNR ": " length($0) " columns"}' "$@")
  [ -z "$wide" ] || die "kubectl neuron output wider than 80 columns: $wide"
}

# fleet_kubectl_json_kind FILE KIND: FILE is JSON of apiVersion toposched.io/v1 and kind KIND.
fleet_kubectl_json_kind() {
  python3 - "$1" "$2" <<'PY' || die "kubectl neuron -o json: $1 is not a $2"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["apiVersion"] == "toposched.io/v1", doc.get("apiVersion")
assert doc["kind"] == sys.argv[2], doc.get("kind")
PY
}

fleet_check_kubectl() {
  local pending="$1" bin="$W/bin" out="$W/kubectl-neuron"
  mkdir -p "$bin" "$out"
  ln -sf "$TOPOSCHED_BIN" "$bin/kubectl-neuron"
  local kn=("$bin/kubectl-neuron" --kubeconfig "$W/admin.kubeconfig")
  local ext=(--extender "http://127.0.0.1:$EXT_PORT")

  # 1. The API server alone, the plugin run by its own name.
  "${kn[@]}" nodes >"$out/nodes.raw" || die "kubectl-neuron nodes failed"
  "${kn[@]}" pods -A >"$out/pods.raw" || die "kubectl-neuron pods failed"
  "${kn[@]}" why "default/$pending" >"$out/why.raw" || die "kubectl-neuron why failed"
  # 3. The extender's live views.
  "${kn[@]}" "${ext[@]}" nodes >"$out/nodes-extender.raw" || die "kubectl-neuron --extender nodes"
  "${kn[@]}" "${ext[@]}" why "default/$pending" >"$out/why-extender.raw" ||
    die "kubectl-neuron --extender why"
  fleet_kubectl_fits_80 "$out"/*.raw

  # 2. kubectl's plugin mechanism finds kubectl-neuron on PATH: the same bytes.
  local sub
  for sub in nodes "pods -A" "why default/$pending"; do
    # shellcheck disable=SC2086
    KUBECONFIG="$W/admin.kubeconfig" PATH="$bin:$PATH" "$KUBECTL" neuron $sub >"$out/kubectl.raw" ||
      die "kubectl neuron $sub failed"
    cmp -s "$out/kubectl.raw" "$out/${sub%% *}.raw" ||
      die "kubectl neuron $sub differs from kubectl-neuron $sub: $(diff "$out/${sub%% *}.raw" "$out/kubectl.raw" | head -5)"
  done

  local f
  for f in nodes pods why why-extender; do
    fleet_kubectl_normalise <"$out/$f.raw" >"$out/$f.txt"
    fleet_kubectl_compare "$f" "$out/$f.txt"
  done
  fleet_kubectl_normalise <"$out/nodes-extender.raw" | fleet_kubectl_drop_free_sets >"$out/nodes-extender.txt"
  fleet_kubectl_compare nodes-extender "$out/nodes-extender.txt"

  # -o json, each kind parsed back.
  "${kn[@]}" -o json nodes >"$out/nodes.json" && fleet_kubectl_json_kind "$out/nodes.json" NeuronNodeList
  "${kn[@]}" -o json pods -A >"$out/pods.json" && fleet_kubectl_json_kind "$out/pods.json" NeuronPodList
  "${kn[@]}" -o json why "default/$pending" >"$out/why.json" &&
    fleet_kubectl_json_kind "$out/why.json" NeuronPodWhy
  "${kn[@]}" "${ext[@]}" -o json why "default/$pending" >"$out/why-extender.json" ||
    die "kubectl-neuron --extender -o json why"

  # The pending pod: a reason for every node, the same from the records as from the extender.
  python3 - "$out/why.json" "$out/why-extender.json" <<'PY' || die "kubectl neuron why: reasons differ or are missing"
import json, sys
local, live = (json.load(open(p)) for p in sys.argv[1:3])
assert "node" not in local, "the pod holds ids: %s" % local.get("node")
reasons = {n["node"]: (n["kind"], n["reason"]) for n in local["nodes"]}
# A node that fits by the Neuron request may still be ruled out by the scheduler's own filters
# (fleet.sh holds the pod to trn1-a with a node selector); every other node has filter's words.
assert any(k != "fits" for k, _ in reasons.values()), reasons
assert all(k == "fits" or r for k, r in reasons.values()), reasons
assert reasons == {n["node"]: (n["kind"], n["reason"]) for n in live["nodes"]}, (reasons, live)
PY
  pass "kubectl neuron: nodes, pods, why match test/e2e/golden (API server and extender, kubectl-neuron and kubectl neuron); $pending waits: $(grep -m1 -E 'too-few-free|no-legal-set|never-on-this-type|reserved-for-gang|not-managed' "$out/why.raw" | tr -s ' ')"
}
