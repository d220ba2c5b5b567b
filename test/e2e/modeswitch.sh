#!/usr/bin/env bash
# A node switched between the device plugin and the DRA driver while pods run on it, both ways
# (docs/dra.md, "Switching a node"; docs/reliability.md, issue 29): a real kubelet 1.37 with
# containerd (CDI on), kube-scheduler with the extender for device-plugin pods and its own DRA
# allocator for claims, `toposched device-plugin` and `toposched dra-plugin` both serving one
# inf2.48xlarge fake tree, as they do while the chart's two DaemonSets hand the node over.
#   (a) device-plugin pods hold devices on kn: one with 4 devices, one with 2 cores
#   (b) kn is labelled toposched.io/neuron-management=dra and the DRA plugin starts while they run:
#       no published offer touches a held device; the extender no longer offers kn; 1-device
#       claims fill what is left, and none is allocated or prepared on a held device
#   (c) the label is removed while the claims run: the node still carries
#       toposched.io/dra-claims-held (the DRA plugin set it before its first claim held a device;
#       the device plugin keeps it while kubelet lists claims) and the extender does not offer it; a pod that bypasses
#       the scheduler (spec.nodeName) never gets a claimed device from the device plugin; once the
#       claims are gone the node is offered again and the waiting pod is served
#   (d) after (b) and (c): no device or core held twice over every pod's record, kubelet's
#       PodResources (devices and dynamic resources) and the DRA plugin's CDI specs
source "$(dirname "$0")/lib.sh"
minor=$(cut -d. -f2 <<<"${TOPOSCHED_E2E_K8S:-1.20}")
[[ "$minor" =~ ^[0-9]+$ ]] && [ "$minor" -ge 37 ] ||
  skip "the mode-switch scenario runs on 1.37 only (the DRA driver's device sets need partitionable devices, on from 1.36); this is ${TOPOSCHED_E2E_K8S:-1.20}"
e2e_init modeswitch
e2e_why() {
  e2e_kubelet_why
  [ -n "${DRA_LOG:-}" ] && [ -f "$DRA_LOG" ] && { echo "dra plugin ($(basename "$DRA_LOG")):"; grep -iE "prepar|holder|held|refus|error|warn" "$DRA_LOG" | tail -n 6; }
  return 0
}
# Core ranges too (draDriver.coreOffers: the class; --core-offers: the plugin's offers).
E2E_HELM_SETS=(--set draDriver.enabled=true --set draDriver.coreOffers=true)
export TOPOSCHED_E2E_DRA_ARGS="--core-offers ${TOPOSCHED_E2E_DRA_ARGS:-}"
e2e_pause_image
e2e_control_plane
e2e_controller_manager resourceclaim-controller
# Device-plugin pods go through the extender; claims skip it (the chart's managedResources) and
# kube-scheduler's own DRA allocator places them.
e2e_extender
e2e_scheduler
E2E_CDI_DIR="$W/cdi"
mkdir -p "$E2E_CDI_DIR"
e2e_kubelet_node kn inf2.48xlarge
e2e_import_pause_image
e2e_host_dev_nodes "$KUBELET_DEVICES"
cpd=$(type_shape inf2.48xlarge); cpd=${cpd#* }
PODRES_SOCK="$W/kubelet/pod-resources/kubelet.sock"
DUMP_BIN="$(dirname "$TOPOSCHED_BIN")/test/e2e/podresources_dump"
[ -x "$DUMP_BIN" ] || die "no $DUMP_BIN (scripts/e2e.sh builds it beside the binary)"

# served POD: kubelet admitted the pod and the device plugin served its record.
allocated_true() { [ "$(pod_field "$1" '{.metadata.annotations.NEURON_ALLOCATED}')" = true ]; }
served() {
  wait_bound 60 "$1"
  [ "$(pod_node "$1")" = kn ] || die "$1 bound to $(pod_node "$1"), not kn"
  wait_for 60 "NEURON_ALLOCATED=true on $1 (the device plugin served it)" allocated_true "$1"
}
# held_devices POD...: the devices the pods' records hold on kn (cores mapped to their device).
held_devices() {
  k -n default get pods "$@" -o json | python3 -c '
import json, sys
cpd = int(sys.argv[1]); out = set()
for p in json.load(sys.stdin)["items"]:
    rec = json.loads(p["metadata"]["annotations"]["toposched.io/allocation"])
    for c in rec["containers"]:
        for i in c["ids"]:
            out.add(i // cpd if c["resource"].endswith("neuroncore") else i)
print(" ".join(map(str, sorted(out))))' "$cpd"
}
# check_one_book WHEN: no unit held by two holders over the three books.
check_one_book() {
  k get pods -A -o json >"$W/pods-$1.json"
  "$DUMP_BIN" "$PODRES_SOCK" >"$W/podresources-$1.jsonl" || die "($1) PodResources List failed: $(cat "$W/podresources-$1.jsonl")"
  python3 - "$W/pods-$1.json" "$W/podresources-$1.jsonl" "$E2E_CDI_DIR" "$cpd" "$KUBELET_DEVICES" "$E2E_DIR" <<'PY' || die "($1) a unit is held twice (books: $W/pods-$1.json, $W/podresources-$1.jsonl, $E2E_CDI_DIR)"
import glob, json, re, sys
pods_file, podres_file, cdi_dir, cpd, ndev = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
# Every holder's physical units: ("core", device, core-in-device); a whole device holds all its cores.
def whole(d): return {("core", d, c) for c in range(cpd)}
def core(i): return {("core", i // cpd, i % cpd)}
sys.path.insert(0, sys.argv[6])
from dra_names import units_of
def dra_units(name): return {("core", d, k) for d, k in units_of(name, cpd)}
holders = {}   # unit -> {book: holder}
def hold(units, holder, book):
    for u in units:
        holders.setdefault(u, {}).setdefault(holder, set()).add(book)
live = set()
for p in json.load(open(pods_file))["items"]:
    if p["status"].get("phase") in ("Succeeded", "Failed") or not p["spec"].get("nodeName"): continue
    key = f'{p["metadata"]["namespace"]}/{p["metadata"]["name"]}'; live.add(key)
    rec = (p["metadata"].get("annotations") or {}).get("toposched.io/allocation")
    if not rec: continue
    for c in json.loads(rec)["containers"]:
        for i in c["ids"]:
            hold(core(i) if c["resource"].endswith("neuroncore") else whole(i), key, "record")
claim_pod = {}
n_dev = n_dra = 0
for line in open(podres_file):
    e = json.loads(line)
    if e["kind"] == "devices" and e["resource"].startswith("aws.amazon.com/"):
        for v in e["ids"]:
            i = int(re.sub(r"\D", "", v)); n_dev += 1
            hold(core(i) if e["resource"].endswith("neuroncore") else whole(i), e["pod"], "podresources")
    elif e["kind"] == "dra" and e["driver"] == "neuron.aws.com":
        n_dra += 1; claim_pod[e["claim"]] = e["pod"]
        hold(dra_units(e["device"]), e["pod"], "podresources-dra")
n_spec = 0
for f in glob.glob(f"{cdi_dir}/neuron.aws.com-*.json"):
    spec = json.load(open(f)); n_spec += 1
    claim = spec["annotations"]["toposched.io/claim"]
    who = claim_pod.get(claim, "claim " + claim)
    for d in spec["devices"]:
        units = dra_units(d["annotations"]["toposched.io/device"])
        for node in d["containerEdits"].get("deviceNodes", []):
            n = int(re.sub(r"\D", "", node["path"]))
            if not any(u[1] == n for u in units): sys.exit(f"{f}: device node {node['path']} outside {d['annotations']['toposched.io/device']}")
        if d["annotations"].get("toposched.io/admin-access") != "true": hold(units, who, "cdi")
bad = [f"device {u[1]} core {u[2]}: " + ", ".join(f"{h} ({'+'.join(sorted(b))})" for h, b in hs.items())
       for u, hs in sorted(holders.items()) if len(hs) > 1]
if bad: print("\n".join(bad[:10])); sys.exit(1)
print(f"{len(live)} live pods, {n_dev} device-plugin ids and {n_dra} DRA devices in PodResources, {n_spec} CDI specs: every unit has one holder")
PY
}

# (a) device-plugin pods on kn, through the extender.
create_pod dp-dev aws.amazon.com/neuron 4 kubernetes.io/hostname=kn
served dp-dev
create_pod dp-core aws.amazon.com/neuroncore 2 kubernetes.io/hostname=kn
served dp-core
held=$(held_devices dp-dev dp-core)
pass "(a) device-plugin pods served on kn: dp-dev $(pod_ids dp-dev), dp-core cores $(pod_ids dp-core): devices $held held"

# (b) kn handed to DRA while they run.
k label node kn toposched.io/neuron-management=dra >/dev/null || die "label kn"
DRA_PROBE_PORT=$((DP_PROBE_PORT + 10))
e2e_dra_plugin kn "$W/host"
wait_for 60 "the kubelet to register the DRA plugin of kn" grep -q "RegisterPlugin started.*neuron.aws.com-reg.sock" "$KUBELET_LOG"
wait_for 60 "kn's ResourceSlices" bash -c "[ -n \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig get resourceslices --field-selector spec.nodeName=kn -o name)\" ]"
wait_for 30 "the DRA plugin's /readyz" dra_ready
touching=$(offers_with kn "$held" "$cpd")
[ -z "$touching" ] || die "(b) kn publishes offers on devices the running device-plugin pods hold ($held): $touching"
n_offers=$(node_slice_devices kn | wc -l)
pass "(b) the DRA plugin publishes $n_offers offers on kn, none on the held devices $held"
create_pod dp-late aws.amazon.com/neuron 1 kubernetes.io/hostname=kn
wait_for 60 "dp-late refused (kn is DRA's now)" pod_settled dp-late
pod_bound dp-late && die "(b) the extender offered kn (labelled for DRA) to device-plugin pod dp-late: $(pod_ids dp-late)"
pass "(b) the extender no longer offers kn: $(events_of dp-late | grep -m1 FailedScheduling | cut -c1-200)"
k -n default delete pod dp-late --wait=false >/dev/null

k apply -f - >/dev/null <<'YAML' || die "create ResourceClaimTemplate one-device"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-device, namespace: default}
spec:
  spec:
    devices:
      requests:
        - name: neurons
          exactly:
            deviceClassName: neurondevices.toposched.io
            count: 1
            selectors:
              - cel: {expression: 'device.attributes["toposched.io"].deviceCount == 1'}
YAML
# claim_pod NAME: a pause container with one 1-device claim, on kn.
claim_pod() {
  k apply -f - >/dev/null <<YAML || die "create pod $1"
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {e2e/claims: "yes"}}
spec:
  schedulerName: my-scheduler
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: kn}
  resourceClaims:
    - {name: neurons, resourceClaimTemplateName: one-device}
  containers:
    - name: main
      image: $E2E_PAUSE_IMAGE
      imagePullPolicy: Never
      resources:
        claims: [{name: neurons}]
YAML
}
marked() { [ -n "$(k get node kn -o 'jsonpath={.metadata.labels.toposched\.io/dra-claims-held}')" ]; }
phase_is() { [ "$(pod_field "$1" '{.status.phase}')" = "$2" ]; }
unschedulable() { [ "$(pod_field "$1" '{.status.conditions[?(@.type=="PodScheduled")].status}')" = False ]; }
free=$((KUBELET_DEVICES - $(wc -w <<<"$held")))
claim_pods=()
for i in $(seq 1 $((free + 1))); do claim_pods+=("dra-$i"); claim_pod "dra-$i"; done
# Pods go Running one by one; a pod may be unschedulable for a moment before its claim exists, so
# the count decides: as many Running as devices were free, then the rest unschedulable.
claim_phases() { k -n default get pods -l e2e/claims=yes -o 'jsonpath={range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}'; }
n_running() { [ "$(claim_phases | grep -c ' Running$')" -ge "$1" ]; }
wait_for 180 "$free claim pods Running" n_running "$free"
running=() refused=()
for p in "${claim_pods[@]}"; do if phase_is "$p" Running; then running+=("$p"); else refused+=("$p"); fi; done
for p in "${refused[@]}"; do wait_for 60 "$p unschedulable" unschedulable "$p"; done
claimed=$(for p in "${running[@]}"; do k -n default get resourceclaim "$(pod_field "$p" '{.status.resourceClaimStatuses[0].resourceClaimName}')" -o jsonpath='{.status.allocation.devices.results[0].device}{"\n"}'; done | sort -V | tr '\n' ' ')
bad=$(python3 "$E2E_DIR/dra_names.py" "$held" "$cpd" <<<"$claimed")
[ -z "$bad" ] || die "(b) claims allocated on devices the device-plugin pods hold ($held): $bad"
[ "${#running[@]}" = "$free" ] || die "(b) $free devices were free, ${#running[@]} claims run (${running[*]}); refused: ${refused[*]}"
wait_for 30 "a CDI spec per running claim" bash -c "[ \$(ls $E2E_CDI_DIR | grep -c '^neuron.aws.com-.*\.json$') = ${#running[@]} ]"
pass "(b) ${#running[@]} claims Running on the $free free devices ($claimed), ${#refused[@]} unschedulable (${refused[*]}): none on $held"
out=$(check_one_book b) || die "(b) $out"
pass "(d) after (b): $out"
marked || die "(b) claims run on kn but it carries no toposched.io/dra-claims-held"
pass "(b) kn carries toposched.io/dra-claims-held=$(k get node kn -o 'jsonpath={.metadata.labels.toposched\.io/dra-claims-held}') while claims run"

# (c) the label removed while the claims run.
k label node kn toposched.io/neuron-management- >/dev/null || die "unlabel kn"
for p in "${refused[@]}"; do k -n default delete pod "$p" --wait=false >/dev/null; done
marked || die "(c) kn lost toposched.io/dra-claims-held with the switch back while claims run"
create_pod dp-back aws.amazon.com/neuron 1 kubernetes.io/hostname=kn
wait_for 60 "dp-back refused while DRA claims hold kn's devices" pod_settled dp-back
pod_bound dp-back && die "(c) the extender offered kn to dp-back while DRA claims run: $(pod_ids dp-back)"
pass "(c) kn marked dra-claims-held=$(k get node kn -o 'jsonpath={.metadata.labels.toposched\.io/dra-claims-held}'); dp-back waits: $(events_of dp-back | grep -m1 FailedScheduling | cut -c1-160)"
# A pod that bypasses the scheduler: kubelet counts only device-plugin pods, so it admits it and
# picks from what it thinks is free; the device plugin must not hand out a claimed device.
api POST /api/v1/namespaces/default/pods "$(pod_json dp-direct aws.amazon.com/neuron 1 | python3 -c '
import json, sys
p = json.load(sys.stdin); p["spec"]["nodeName"] = "kn"; p["spec"].pop("schedulerName"); print(json.dumps(p))')" >/dev/null || die "create dp-direct"
decided() { grep -q "dp-direct" "$DP_LOG" || [ "$(pod_field dp-direct '{.status.phase}')" = Failed ]; }
wait_for 60 "kubelet's admission of dp-direct" decided
out=$(check_one_book c) || die "(c) $out"
pass "(c) dp-direct (spec.nodeName, no record): phase $(pod_field dp-direct '{.status.phase}') $(pod_field dp-direct '{.status.reason}'), device plugin: $(grep "dp-direct" "$DP_LOG" | tail -1 | sed 's/^.*\] //' | cut -c1-160)"
pass "(d) after (c): $out"
k -n default delete pod dp-direct --wait=false >/dev/null

k -n default delete pod -l e2e/claims=yes --wait=false >/dev/null
no_specs() { [ -z "$(find "$E2E_CDI_DIR" -name 'neuron.aws.com-*.json')" ]; }
wait_for 90 "the claims unprepared (no CDI spec left)" no_specs
unmarked() { ! marked; }
wait_for 60 "the device plugin to remove toposched.io/dra-claims-held from kn" unmarked
served dp-back
pass "(c) the claims gone: kn offered again, dp-back served $(pod_ids dp-back)"
check_no_double_allocation >&2 || die "an id was given twice over the pods' records"
