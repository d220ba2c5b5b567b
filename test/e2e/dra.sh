#!/usr/bin/env bash
# `toposched dra-plugin` (driver neuron.aws.com) with a real kubelet 1.37, containerd 2.2 with CDI,
# kube-scheduler's DRA allocator and kube-controller-manager's resourceclaim controller, on fake
# sysfs trees: an inf2.48xlarge node, then a trn2.48xlarge node (one kubelet at a time: the
# harness's kubelet has fixed ports and /var/lib/kubelet/device-plugins). The chart is installed
# with draDriver.enabled=true; its DeviceClasses come from helm's view of the live API server.
# Containers START here (the pause image, /dev/neuronN made on the host as stand-ins): the
# devices and NEURON_RT_VISIBLE_CORES are read from the container's own process.
#   (a) a ResourceClaimTemplate for a 2-device set (neurondevices.toposched.io, deviceCount == 2)
#   (c) a NeuronCore claim (neuroncores.toposched.io, coreCount == 2): a core range in one device
#   (e) the plugin SIGKILLed as a claim's prepare starts: no half-written CDI file; it restarts
#       and the pod starts
#   (f) a device made unhealthy in the fake tree: its offers tainted (DeviceTaints, 1.37), a claim
#       only it matches unallocated; back, the taint goes and the claim gets it
#   (g) a device a running pod's claim holds made unhealthy: the pod gets the event and condition
#   (b) a 3-device set on trn2.48xlarge (sizes 1, 4, 8, 16) is never allocated
#   (d) AWS's own 1x4-connected-neurons template, as AWS publishes it: 4 devices of one row
source "$(dirname "$0")/lib.sh"
# Before e2e_init, which would build the control plane of another version first.
dra_minor=$(cut -d. -f2 <<<"${TOPOSCHED_E2E_K8S:-1.20}")
[[ "$dra_minor" =~ ^[0-9]+$ ]] && [ "$dra_minor" -ge 37 ] ||
  skip "the DRA scenario runs on 1.37 only: partitionable devices (DRAPartitionableDevices, beta and on from 1.36) carry its device sets and core ranges, and resource.k8s.io/v1 needs 1.34+; this is ${TOPOSCHED_E2E_K8S:-1.20}"
e2e_init dra
# What a failure shows first: the plugin's last prepare/publish lines and the kubelet's DRA lines.
e2e_why() {
  [ -n "${DRA_LOG:-}" ] && [ -f "$DRA_LOG" ] && { echo "dra plugin ($(basename "$DRA_LOG")):"; grep -iE "prepar|slice|regist|health|error|warn" "$DRA_LOG" | tail -n 6; }
  [ -n "${KUBELET_LOG:-}" ] && [ -f "$KUBELET_LOG" ] && { echo "kubelet ($(basename "$KUBELET_LOG")):"; grep -iE "dra|resourceclaim|cdi|prepare" "$KUBELET_LOG" | tail -n 6; }
  return 0
}
# Core ranges too (draDriver.coreOffers: the class; --core-offers: the plugin's offers).
E2E_HELM_SETS=(--set draDriver.enabled=true --set draDriver.coreOffers=true)
export TOPOSCHED_E2E_DRA_ARGS="--core-offers ${TOPOSCHED_E2E_DRA_ARGS:-}"
e2e_pause_image
e2e_control_plane
classes=$(k get deviceclasses -o name | sort | tr '\n' ' ')
[ "$classes" = "deviceclass.resource.k8s.io/neuron.aws.com deviceclass.resource.k8s.io/neuroncores.toposched.io deviceclass.resource.k8s.io/neurondevices.toposched.io " ] ||
  die "the chart's DeviceClasses on a cluster serving resource.k8s.io/v1: '$classes'"
pass "chart installed with draDriver.enabled=true: DeviceClasses $classes"
e2e_controller_manager resourceclaim-controller
# kube-scheduler's own DRA allocator places these pods: no extender in its configuration.
e2e_scheduler true "" none
e2e_dra_node kn inf2.48xlarge
cpd=$(type_shape inf2.48xlarge); cpd=${cpd#* }  # kn's cores per device
wait_for 30 "the DRA plugin's /readyz" dra_ready

# rct NAME CLASS CEL: a ResourceClaimTemplate asking one device of CLASS matching CEL.
rct() {
  k apply -f - >/dev/null <<YAML || die "create ResourceClaimTemplate $1"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: $1, namespace: default}
spec:
  spec:
    devices:
      requests:
        - name: neurons
          exactly:
            deviceClassName: $2
            count: 1
            selectors:
              - cel: {expression: '$3'}
YAML
}
# dra_pod NAME NODE (template TEMPLATE | claim CLAIM): a pause container using the claim.
dra_pod() {
  local src
  if [ "$3" = template ]; then src="resourceClaimTemplateName: $4"; else src="resourceClaimName: $4"; fi
  k apply -f - >/dev/null <<YAML || die "create pod $1"
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  schedulerName: my-scheduler
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $2}
  resourceClaims:
    - {name: neurons, $src}
  containers:
    - name: main
      image: $E2E_PAUSE_IMAGE
      imagePullPolicy: Never
      resources:
        claims: [{name: neurons}]
YAML
}
phase_is() { [ "$(pod_field "$1" '{.status.phase}')" = "$2" ]; }
pod_claim() { pod_field "$1" '{.status.resourceClaimStatuses[0].resourceClaimName}'; }
claim_json() { k -n default get resourceclaim "$1" -o json; }
# container_pid POD: the pid of the pod's container (containerd's task), from the CRI container id.
container_pid() {
  local id; id=$(pod_field "$1" '{.status.containerStatuses[0].containerID}'); id=${id#containerd://}
  [ -n "$id" ] || return 1
  ctr_ tasks ls | awk -v id="$id" '$1 == id {print $2}'
}
# check_container POD CORES_PER_DEVICE: what the claim's allocation says against what the running
# container has: exactly the allocated devices' /dev/neuronN, and NEURON_RT_VISIBLE_CORES for
# their cores (the plugin's default numbering: 0-based over the container's devices). Prints
# "devices=… cores=… allocated=…".
check_container() {
  local pod="$1" cpd="$2" claim pid
  # A template's claim is named in the pod's status; a claim by name only in its spec.
  claim=$(pod_claim "$pod"); [ -n "$claim" ] || claim=$(pod_field "$pod" '{.spec.resourceClaims[0].resourceClaimName}')
  [ -n "$claim" ] || die "$pod: no ResourceClaim in its status or spec"
  claim_json "$claim" >"$W/claim-$pod.json"
  pid=$(container_pid "$pod"); [ -n "$pid" ] || die "$pod: no running task for its container"
  tr '\0' '\n' <"/proc/$pid/environ" >"$W/env-$pod.txt" || die "$pod: cannot read /proc/$pid/environ"
  ls "/proc/$pid/root/dev" >"$W/dev-$pod.txt" || die "$pod: cannot list the container's /dev"
  python3 - "$W/claim-$pod.json" "$W/env-$pod.txt" "$W/dev-$pod.txt" "$cpd" <<'PY'
import json, re, sys
claim = json.load(open(sys.argv[1])); env = open(sys.argv[2]).read().split("\n")
devs = sorted(int(n[6:]) for n in open(sys.argv[3]).read().split() if re.fullmatch(r"neuron\d+", n))
cpd = int(sys.argv[4])
results = claim["status"]["allocation"]["devices"]["results"]
want_devs, want_cores, names = set(), [], []
for r in results:
    if r["driver"] != "neuron.aws.com": sys.exit(f"allocated by driver {r['driver']}")
    name = r["device"]; names.append(name)
    m = re.fullmatch(r"neurondevice(\d+)", name) or re.fullmatch(r"neurondevices-(\d+)-(\d+)", name)
    if m:
        a = int(m.group(1)); b = int(m.group(m.lastindex))
        want_devs |= set(range(a, b + 1)); continue
    m = re.fullmatch(r"neuroncores-(\d+)-(\d+)", name)
    if not m: sys.exit(f"unexpected device name {name}")
    a, b = int(m.group(1)), int(m.group(2))
    if a // cpd != b // cpd: sys.exit(f"{name}: cores {a}-{b} span two devices")
    want_devs.add(a // cpd); want_cores += list(range(a - (a // cpd) * cpd, b - (a // cpd) * cpd + 1))
if not want_cores: want_cores = list(range(len(want_devs) * cpd))
if devs != sorted(want_devs): sys.exit(f"the container has /dev/neuron{devs}, the claim {names} is devices {sorted(want_devs)}")
vis = [l.split("=", 1)[1] for l in env if l.startswith("NEURON_RT_VISIBLE_CORES=")]
if not vis: sys.exit(f"no NEURON_RT_VISIBLE_CORES in the container's environment ({[l for l in env if l.startswith('NEURON')]})")
def expand(s):
    out = []
    for part in s.split(","):
        lo, _, hi = part.partition("-"); out += list(range(int(lo), int(hi or lo) + 1))
    return out
if expand(vis[0]) != want_cores: sys.exit(f"NEURON_RT_VISIBLE_CORES={vis[0]}, expected cores {want_cores} for {names}")
print(f"allocated={','.join(names)} devices=/dev/neuron{{{','.join(map(str, devs))}}} NEURON_RT_VISIBLE_CORES={vis[0]}")
PY
}
cdi_spec_of() { echo "$E2E_CDI_DIR/neuron.aws.com-$1.json"; }

# (a) a 2-device set through a ResourceClaimTemplate (kube-controller-manager makes the claim).
rct two-devices neurondevices.toposched.io 'device.attributes["toposched.io"].deviceCount == 2'
dra_pod dev-2 kn template two-devices
wait_for 90 "pod dev-2 Running" phase_is dev-2 Running
out=$(check_container dev-2 "$cpd") || die "dev-2: $out"
claim=$(pod_claim dev-2); uid=$(k -n default get resourceclaim "$claim" -o jsonpath='{.metadata.uid}')
grep -q '^allocated=neurondevices-[0-9]*-[0-9]* ' <<<"$out" || die "dev-2: not a 2-device set: $out"
python3 - "$out" <<'PY' || die "dev-2: the two devices are not consecutive: $out"
import re, sys
a, b = map(int, re.search(r"neurondevices-(\d+)-(\d+)", sys.argv[1]).groups()); sys.exit(0 if b == a + 1 else 1)
PY
[ -f "$(cdi_spec_of "$uid")" ] || die "dev-2: no CDI spec $(cdi_spec_of "$uid") for claim $claim"
pass "(a) dev-2 Running from ResourceClaimTemplate two-devices (claim $claim): $out"

# (c) a NeuronCore claim: a core range inside one device.
rct two-cores neuroncores.toposched.io 'device.attributes["toposched.io"].coreCount == 2'
dra_pod cores-2 kn template two-cores
wait_for 90 "pod cores-2 Running" phase_is cores-2 Running
out=$(check_container cores-2 "$cpd") || die "cores-2: $out"
grep -q '^allocated=neuroncores-' <<<"$out" || die "cores-2: not a core range: $out"
pass "(c) cores-2 Running with a core range of one device: $out"

# (e) the plugin SIGKILLed as soon as a claim's prepare reaches it; restarted; the pod starts.
rct one-device neurondevices.toposched.io 'device.attributes["toposched.io"].deviceCount == 1'
lines_before=$(wc -l <"$DRA_LOG")
dra_pod dev-1 kn template one-device
prepare_seen() { grep -qi "prepar" <<<"$(tail -n +"$((lines_before + 1))" "$DRA_LOG")"; }
deadline=$(($(date +%s) + 60))
until prepare_seen; do
  [ "$(date +%s)" -lt "$deadline" ] || die "the plugin never logged a prepare for dev-1"
  sleep 0.02
done
kill -KILL "$(pid_of dra-plugin)"
stop dra-plugin
log "SIGKILLed the DRA plugin as it logged: $(tail -n +"$((lines_before + 1))" "$DRA_LOG" | grep -i -m1 prepar | cut -c1-160)"
bad=$(find "$E2E_CDI_DIR" -type f ! -name 'neuron.aws.com-*.json' | head -3)
[ -z "$bad" ] || log "after the SIGKILL: a temporary file in the CDI dir (the restart must remove it): $bad"
for f in "$E2E_CDI_DIR"/neuron.aws.com-*.json; do
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["kind"]=="neuron.aws.com/device" and d["devices"]' "$f" 2>/dev/null ||
    die "after the SIGKILL: $f is not a whole CDI spec: $(head -c 300 "$f")"
done
# What a SIGKILL in the middle of a spec write leaves (src/draplugin/cdi.cc writes <spec>.tmp.XXXXXX,
# then renames): planted, since the kill above may land before or after the write. Not *.json,
# so containerd never reads it; the restarted plugin must remove it.
half="$E2E_CDI_DIR/neuron.aws.com-00000000-dead-beef-0000-000000000000.json.tmp.e2eXXX"
printf '{"cdiVersion":"0.6.0","kind":"neuron.aws.com/device","devices":[{"name":"x","containerEd' >"$half"
e2e_dra_plugin kn "$DRA_HOST"
wait_for 30 "the restarted plugin to remove the half-written $half" test ! -e "$half"
# The kill may land while kubelet still waits for the answer (its call then fails with EOF): kubelet
# retries the pod at its own sync backoff, about 70 s here.
wait_for 150 "pod dev-1 Running after the plugin restarted" phase_is dev-1 Running
out=$(check_container dev-1 "$cpd") || die "dev-1: $out"
leftover=$(find "$E2E_CDI_DIR" -type f ! -name 'neuron.aws.com-*.json')
[ -z "$leftover" ] || die "the restarted plugin left non-spec files in the CDI dir: $leftover"
n_specs=$(find "$E2E_CDI_DIR" -name 'neuron.aws.com-*.json' | wc -l)
[ "$n_specs" = 3 ] || die "expected 3 CDI specs (dev-2, cores-2, dev-1), found $n_specs: $(ls "$E2E_CDI_DIR")"
for f in "$E2E_CDI_DIR"/neuron.aws.com-*.json; do
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$f" || die "$f is not JSON after the restart"
done
inflight="after kubelet had its answer"
grep -q 'Failed to prepare dynamic resources.*pod="default/dev-1"' "$KUBELET_LOG" && inflight="before kubelet had its answer (kubelet: $(grep -m1 'Failed to prepare dynamic resources.*pod="default/dev-1"' "$KUBELET_LOG" | grep -o 'err="[^"]*' | cut -c6-110))"
pass "(e) plugin SIGKILLed at dev-1's prepare, $inflight, and restarted: it removed a half-written spec ($(grep -m1 "a CDI spec write that did not finish" "$DRA_LOG" | sed 's/^.*\] //' | cut -c1-200)); dev-1 Running ($out); the CDI dir holds 3 whole specs and nothing else"

# (f) a device that fails (its /dev/neuronN gone from the fake tree): on 1.37 its offers stay in
# the ResourceSlices with the device taint toposched.io/unhealthy, NoSchedule (--on-device-failure
# event, the default), and no other offer has a taint; a claim that only that device matches stays
# unallocated; back, the taint goes and the claim gets the device.
used=$(cat "$W"/claim-*.json | python3 -c '
import json, sys
sys.path.insert(0, sys.argv[1])
from dra_names import devices_of
text = sys.stdin.read(); dec = json.JSONDecoder(); i = 0; used = set()
while i < len(text):
    if text[i].isspace(): i += 1; continue
    c, i = dec.raw_decode(text, i)
    for r in c["status"]["allocation"]["devices"]["results"]:
        used |= devices_of(r["device"], int(sys.argv[2]))
print(" ".join(map(str, sorted(used))))' "$E2E_DIR" "$cpd")
victim=""
for d in 11 10 9 8 7 6 5 4; do grep -qw "$d" <<<"$used" || { victim=$d; break; }; done
[ -n "$victim" ] || die "no unused device to make unhealthy (used: $used)"
# slice_taints NODE DEVICE CPD tainted|clean: every offer holding DEVICE carries exactly our
# NoSchedule taint (tainted) or none (clean); no other offer has any. Prints what it saw.
slice_taints() {
  node_slices_json "$1" | python3 -c '
import json, sys
sys.path.insert(0, sys.argv[1])
from dra_names import devices_of
victim, cpd, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
devs = [d for s in json.load(sys.stdin)["items"] for d in (s["spec"].get("devices") or [])]
holding, value = 0, ""
for d in devs:
    name, taints = d["name"], d.get("taints") or []
    if victim not in devices_of(name, cpd) or mode == "clean":
        if taints: sys.exit(f"{name} carries taints {taints}")
        holding += victim in devices_of(name, cpd)
        continue
    holding += 1
    if len(taints) != 1 or taints[0].get("key") != "toposched.io/unhealthy" or taints[0].get("effect") != "NoSchedule" or not taints[0].get("timeAdded"):
        sys.exit(f"{name} holds device {victim}, its taints: {taints}")
    value = taints[0].get("value", "")
if holding == 0 or f"neurondevice{victim}" not in {d["name"] for d in devs}: sys.exit(f"device {victim} is not published")
print(f"{holding} offers of {len(devs)} hold device {victim}" + (f", all tainted toposched.io/unhealthy={value}:NoSchedule" if mode == "tainted" else ", none tainted"))' "$E2E_DIR" "$2" "$3" "$4"
}
slice_taints kn "$victim" "$cpd" clean >/dev/null || die "kn's slices before the failure: $(slice_taints kn "$victim" "$cpd" clean 2>&1)"
t_fail=$(date +%s.%N)
mv "$DRA_HOST/dev/neuron$victim" "$DRA_HOST/dev/neuron$victim.gone"
wait_for 30 "every offer holding device $victim tainted in kn's ResourceSlices" slice_taints kn "$victim" "$cpd" tainted
t_taint=$(date +%s.%N)
seen=$(slice_taints kn "$victim" "$cpd" tainted 2>&1) || die "kn's slices: $seen"
to_taint=$(python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$t_fail" "$t_taint")
# A claim only the failed device matches: kube-scheduler must not allocate it.
k apply -f - >/dev/null <<YAML || die "create ResourceClaim failed-device"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: failed-device, namespace: default}
spec:
  devices:
    requests:
      - name: neurons
        exactly:
          deviceClassName: neuron.aws.com
          count: 1
          selectors:
            - cel: {expression: 'device.attributes["neuron.aws.com"].deviceId == $victim'}
YAML
dra_pod dev-f kn claim failed-device
refused() { [ "$(pod_field dev-f '{.status.conditions[?(@.type=="PodScheduled")].status}')" = False ]; }
wait_for 60 "dev-f's PodScheduled=False (its claim matches only the tainted device $victim)" refused
[ -z "$(k -n default get resourceclaim failed-device -o jsonpath='{.status.allocation}')" ] ||
  die "claim failed-device was allocated the tainted device $victim: $(k -n default get resourceclaim failed-device -o jsonpath='{.status.allocation}')"
why=$(pod_field dev-f '{.status.conditions[?(@.type=="PodScheduled")].message}')
t_back=$(date +%s.%N)
mv "$DRA_HOST/dev/neuron$victim.gone" "$DRA_HOST/dev/neuron$victim"
wait_for 30 "the taint gone from kn's ResourceSlices" slice_taints kn "$victim" "$cpd" clean
t_clean=$(date +%s.%N)
to_clean=$(python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$t_back" "$t_clean")
wait_for 90 "pod dev-f Running once device $victim is back" phase_is dev-f Running
out=$(check_container dev-f "$cpd") || die "dev-f: $out"
grep -q "^allocated=neurondevice$victim " <<<"$out" || die "dev-f: not device $victim: $out"
probe=$(grep -h -m1 "devices\[\].taints" "$W"/dra-plugin-*.log | sed 's/^.*\] //' | cut -c1-160 || true)
grep -q "keeps devices" <<<"$probe" || die "the plugin did not find that the API server keeps device taints: '$probe'"
pass "(f) /dev/neuron$victim removed from the fake tree: tainted in ${to_taint}s (health poll 500 ms): $seen; dev-f, whose claim matches only device $victim, unscheduled ($why); back: the taint gone in ${to_clean}s, dev-f Running ($out); the plugin's probe: $probe"

# (g) a device that a running pod's claim holds fails: the pod gets the Warning event
# NeuronDeviceFailed and the condition toposched.io/NeuronDevicesHealthy=False from the plugin
# (--on-device-failure event: it keeps running); back, the condition turns True.
held=$(grep -m1 -oE '^neuron[0-9]+$' "$W/dev-dev-1.txt" | tr -dc 0-9)
[ -n "$held" ] || die "dev-1's container lists no /dev/neuronN: $(cat "$W/dev-dev-1.txt")"
healthy_is() { [ "$(pod_field dev-1 '{.status.conditions[?(@.type=="toposched.io/NeuronDevicesHealthy")].status}')" = "$1" ]; }
told() { k -n default get events --field-selector involvedObject.name=dev-1,reason=NeuronDeviceFailed -o name | grep -q .; }
t_fail=$(date +%s.%N)
mv "$DRA_HOST/dev/neuron$held" "$DRA_HOST/dev/neuron$held.gone"
wait_for 30 "the NeuronDeviceFailed event on dev-1 (its claim holds device $held)" told
t_told=$(date +%s.%N)
wait_for 30 "dev-1's condition NeuronDevicesHealthy=False" healthy_is False
event=$(k -n default get events --field-selector involvedObject.name=dev-1,reason=NeuronDeviceFailed -o jsonpath='{.items[0].message}')
grep -q "neuron$held: device-node-missing" <<<"$event" || die "dev-1's event does not say why: $event"
to_told=$(python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$t_fail" "$t_told")
mv "$DRA_HOST/dev/neuron$held.gone" "$DRA_HOST/dev/neuron$held"
wait_for 30 "dev-1's condition NeuronDevicesHealthy=True once device $held is back" healthy_is True
phase_is dev-1 Running || die "dev-1 is not Running after its device failed and came back (event mode keeps it)"
pass "(g) /dev/neuron$held, which dev-1's claim holds, removed: dev-1 told in ${to_told}s ($(cut -c1-160 <<<"$event")); back: its condition True, dev-1 still Running"

# Deleting the pods unprepares their claims: their CDI specs go.
k -n default delete pod dev-2 cores-2 dev-1 dev-f --wait=false >/dev/null
pod_gone() { ! k -n default get pod "$1" >/dev/null 2>&1; }
for p in dev-2 cores-2 dev-1 dev-f; do wait_for 60 "pod $p deleted" pod_gone "$p"; done
no_specs() { [ -z "$(find "$E2E_CDI_DIR" -name 'neuron.aws.com-*.json')" ]; }
wait_for 60 "the CDI specs removed by NodeUnprepareResources" no_specs
pass "the pods deleted: every claim unprepared, no CDI spec left"
denied=$(grep -hE "HTTP 40[13]|[Ff]orbidden" "$W"/dra-plugin-*.log | head -3 || true)
[ -z "$denied" ] || die "the API server refused the DRA plugin a request (RBAC in the chart): $denied"

# The trn2.48xlarge node, on the next kubelet.
e2e_dra_node_stop
e2e_dra_node kt trn2.48xlarge
wait_for 30 "the DRA plugin's /readyz" dra_ready

# (b) no 3-device set exists on trn2.48xlarge: the claim stays unallocated, the pod unscheduled.
k apply -f - >/dev/null <<'YAML' || die "create ResourceClaim three-devices"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: three-devices, namespace: default}
spec:
  devices:
    requests:
      - name: neurons
        exactly:
          deviceClassName: neurondevices.toposched.io
          count: 1
          selectors:
            - cel: {expression: 'device.attributes["toposched.io"].deviceCount == 3'}
YAML
dra_pod dev-3 kt claim three-devices
unschedulable() { [ "$(pod_field dev-3 '{.status.conditions[?(@.type=="PodScheduled")].status}')" = False ]; }
wait_for 60 "dev-3's PodScheduled=False" unschedulable
why=$(pod_field dev-3 '{.status.conditions[?(@.type=="PodScheduled")].message}')
grep -qi "claim" <<<"$why" || die "dev-3 is unschedulable for another reason than its claim: $why"
[ -z "$(k -n default get resourceclaim three-devices -o jsonpath='{.status.allocation}')" ] || die "three-devices was allocated on trn2.48xlarge"
pass "(b) a 3-device set on trn2.48xlarge: claim three-devices unallocated, dev-3 PodScheduled=False: $why"

# (d) AWS's example, written out as AWS publishes it (aws-neuron-sdk deploy/files/specs/1x4-connected-devices.yaml).
k apply -f - >/dev/null <<'YAML' || die "create AWS's ResourceClaimTemplate 1x4-connected-neurons"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: 1x4-connected-neurons
  namespace: default
spec:
  spec:
    devices:
      requests:
      - name: neurons
        exactly:
          deviceClassName: neuron.aws.com
          selectors:
          - cel:
              expression: "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"
          allocationMode: ExactCount
          count: 4
      constraints:
      - requests: ["neurons"]
        matchAttribute: "resource.aws.com/devicegroup4_id"
YAML
dra_pod aws-4 kt template 1x4-connected-neurons
wait_for 90 "pod aws-4 Running" phase_is aws-4 Running
cpd=$(type_shape trn2.48xlarge); cpd=${cpd#* }
out=$(check_container aws-4 "$cpd") || die "aws-4: $out"
python3 - "$out" <<'PY' || die "aws-4: not 4 whole devices of one row: $out"
import re, sys
names = re.search(r"allocated=(\S+)", sys.argv[1]).group(1).split(",")
ids = sorted(int(re.fullmatch(r"neurondevice(\d+)", n).group(1)) for n in names)
sys.exit(0 if len(ids) == 4 and len({i // 4 for i in ids}) == 1 else 1)
PY
pass "(d) AWS's 1x4-connected-neurons on trn2.48xlarge: aws-4 Running: $out"
denied=$(grep -hE "HTTP 40[13]|[Ff]orbidden" "$W"/dra-plugin-*.log | head -3 || true)
[ -z "$denied" ] || die "the API server refused the DRA plugin a request (RBAC in the chart): $denied"
pass "the DRA plugin was refused nothing by the API server (the chart's RBAC)"
