#!/usr/bin/env bash
# What an operator sees (docs/observability.md), against the real control plane with the chart
# installed: a mixed fleet (an inf2 ring, a trn1 torus, a trn2 at LNC 2, an inf1 chain), pods
# placed by the real kube-scheduler through the extender, pods a previous extender left bound
# (one device in each row of trn1-a: 12 free, but no aligned row of 4), and a 4-device pod held to
# trn1-a that must wait there.
#   1. The fleet page, served on the extender's views port, opened in headless Chromium (Debian's
#      `chromium`): every bound pod is drawn on exactly the units its allocation record names, the
#      pending pod is listed with the kind of its wait and filter's words for trn1-a, a click's
#      target (?pod=) shows where a pod is; a screenshot is kept (TOPOSCHED_E2E_ARTIFACTS).
#   2. `kubectl neuron` against the same cluster, from the API server and from the extender,
#      against golden files (fleet_kubectl.sh); a real Prometheus over the metrics, the
#      dashboard's queries and the alert rules (fleet_prometheus.sh).
# Exits 77 when chromium or prometheus cannot be installed.
source "$(dirname "$0")/lib.sh"
e2e_init fleet
command -v chromium >/dev/null || e2e_apt_install chromium || skip "chromium cannot be installed"
command -v prometheus >/dev/null || e2e_apt_install prometheus || skip "prometheus cannot be installed"
e2e_control_plane
e2e_node inf2-a inf2.48xlarge
e2e_node trn1-a trn1.32xlarge
e2e_node trn2-a trn2.48xlarge
e2e_node inf1-a inf1.6xlarge
for d in 0 4 8 12; do prebound_pod "old-$d" trn1-a trn1.32xlarge aws.amazon.com/neuron "$d"; done
# The chart turns the views' port on (loopback, for kubectl port-forward); here on a port of ours.
k -n kube-system get deploy k8s-neuron-scheduler -o jsonpath='{.spec.template.spec.containers[0].command}' |
  grep -q -- '"--views-listen","127.0.0.1:8090"' || die "the chart's extender does not serve the views on 127.0.0.1:8090"
# A sample of the fleet every second, so the page has its last minutes to draw.
e2e_extender --views-listen "127.0.0.1:$VIEWS_PORT" --history-interval 1s
e2e_scheduler
# One at a time, each bound before the next: the same order gives the same ids (the goldens).
for p in ring-4:neuron:4:inf2-a ring-2:neuron:2:inf2-a row-8:neuron:8:trn2-a \
         cores-3:neuroncore:3:trn2-a chain-2:neuroncore:2:inf1-a; do
  IFS=: read -r name res count node <<<"$p"
  create_pod "$name" "aws.amazon.com/$res" "$count" "kubernetes.io/hostname=$node"
  wait_bound 60 "$name"
done
create_pod wait-4 aws.amazon.com/neuron 4 kubernetes.io/hostname=trn1-a
wait_for 60 "wait-4 refused by the scheduler" pod_settled wait-4
pod_bound wait-4 && die "wait-4 was bound on $(pod_node wait-4) ($(pod_ids wait-4)): trn1-a has no free aligned row of 4"
check_no_double_allocation >&2 || die "an id was given twice"
pass "fleet: 5 pods bound ($(for p in ring-4 ring-2 row-8 cores-3 chain-2; do printf '%s=%s:%s ' "$p" "$(pod_node $p)" "$(pod_ids $p)"; done)), 4 adopted on trn1-a, wait-4 pending"

# --- 1. the fleet page in a real browser ---
k get pods -n default -o json >"$W/pods.json"
ARTIFACTS="${TOPOSCHED_E2E_ARTIFACTS:-/tmp/toposched-e2e-artifacts}"
mkdir -p "$ARTIFACTS"
PAGE="http://127.0.0.1:$VIEWS_PORT/"
# chromium runs as root here: its sandbox needs a user namespace the test machine may not give.
browse() { timeout 60 chromium --headless --no-sandbox --disable-gpu --no-first-run \
  --user-data-dir="$W/chromium" "$@" 2>>"$W/chromium.log"; }
wait_for 30 "the views port" curl -sf "http://127.0.0.1:$VIEWS_PORT/healthz"
# Three samples taken since the last pod was settled: the charts have lines to draw.
settled=$(date +%s)
history_since() { [ "$(curl -sf "http://127.0.0.1:$VIEWS_PORT/v1/history?since=$settled" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["samples"]))')" -ge 3 ]; }
wait_for 30 "3 fleet samples" history_since
browse --dump-dom "$PAGE" >"$W/page.html" || die "chromium could not load $PAGE: $(tail -5 "$W/chromium.log")"
python3 "$E2E_DIR/fleet_page_check.py" "$W/page.html" "$W/pods.json" --pending default/wait-4 \
  --pending-kind no-legal-set --pending-node trn1-a --charts 4 >"$W/page-check.txt" ||
  die "the fleet page does not show the fleet:\n$(cat "$W/page-check.txt")"
browse --screenshot="$ARTIFACTS/fleet-page-$E2E_K8S.png" --window-size=1400,1900 "$PAGE" >/dev/null ||
  die "chromium could not take a screenshot"
[ -s "$ARTIFACTS/fleet-page-$E2E_K8S.png" ] || die "the screenshot is empty"
pass "fleet page in $(chromium --version 2>/dev/null | head -1): $(tail -1 "$W/page-check.txt"); screenshot $ARTIFACTS/fleet-page-$E2E_K8S.png"
browse --dump-dom "${PAGE}fleet?pod=default/ring-4" >"$W/focus.html" || die "chromium could not load ?pod="
python3 "$E2E_DIR/fleet_page_check.py" "$W/focus.html" "$W/pods.json" --focus default/ring-4 >"$W/focus-check.txt" ||
  die "the page of one pod is wrong:\n$(cat "$W/focus-check.txt")"
pass "fleet page, one pod (?pod=default/ring-4): $(tail -1 "$W/focus-check.txt")"
browse --dump-dom "${PAGE}fleet?type=trn1.32xlarge" >"$W/type.html" || die "chromium could not load ?type="
python3 "$E2E_DIR/fleet_page_check.py" "$W/type.html" "$W/pods.json" --only-nodes trn1-a >"$W/type-check.txt" ||
  die "the filter by instance type is wrong:\n$(cat "$W/type-check.txt")"
pass "fleet page filtered by instance type: $(tail -1 "$W/type-check.txt")"

# --- 2. the plugin and the dashboards ---
source "$E2E_DIR/fleet_kubectl.sh"
fleet_check_kubectl wait-4
source "$E2E_DIR/fleet_prometheus.sh"
fleet_check_prometheus
