#!/usr/bin/env bash
# A real kubelet 1.20.2 (containerd, no CNI) calls `toposched device-plugin` on a fake inf2.48xlarge
# sysfs tree: registration, allocatable, GetPreferredAllocation and Allocate with the ids the
# extender recorded at bind (kubelet's own checkpoint must show the same ids), NEURON_ALLOCATED
# flipped to true; then the device plugin restarts, and the kubelet restarts: re-registration, and
# the next pod is served again. Containers cannot start here (no image registry): assertions are on
# what the plugin logged and returned, kubelet's checkpoint, and the pod's events.
source "$(dirname "$0")/lib.sh"
e2e_init kubelet
e2e_control_plane
e2e_node inf2-x inf2.48xlarge
e2e_extender
e2e_scheduler
e2e_kubelet_node kn inf2.48xlarge

checkpoint=/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
# kubelet_ids POD RESOURCE: the ids kubelet's checkpoint holds for the pod (numbers, sorted).
kubelet_ids() {
  local uid; uid=$(pod_field "$1" '{.metadata.uid}')
  python3 - "$checkpoint" "$uid" "$2" <<'PY'
import json, re, sys
data = json.load(open(sys.argv[1]))["Data"]
ids = []
for e in data.get("PodDeviceEntries") or []:
    if e["PodUID"] == sys.argv[2] and e["ResourceName"] == sys.argv[3]:
        d = e["DeviceIDs"]
        vals = [v for vs in d.values() for v in vs] if isinstance(d, dict) else d
        ids += [int(re.sub(r"\D", "", v)) for v in vals]
print(",".join(map(str, sorted(set(ids)))))
PY
}
allocated_true() { [ "$(pod_field "$1" '{.metadata.annotations.NEURON_ALLOCATED}')" = true ]; }
# served POD RESOURCE: kubelet called Allocate for the pod's recorded ids, and its checkpoint agrees.
served() {
  local pod="$1" res="$2" ids
  wait_bound 30 "$pod"
  ids=$(pod_ids "$pod")
  [ "$(pod_node "$pod")" = kn ] || die "$pod bound to $(pod_node "$pod"), not kn"
  wait_for 30 "the plugin's Allocate for $pod" grep -q "Allocate $res .*$pod" "$DP_LOG"
  wait_for 30 "NEURON_ALLOCATED=true on $pod" allocated_true "$pod"
  wait_for 30 "kubelet's checkpoint for $pod" bash -c "grep -q '$(pod_field "$pod" '{.metadata.uid}')' $checkpoint"
  local kids; kids=$(kubelet_ids "$pod" "$res")
  if [ "$kids" != "$ids" ]; then
    # The kubelet may still count a pod it has just failed (a restart's re-admission) as holding
    # its devices, and choose others than the extender, which had freed them: the plugin grants
    # the kubelet's ids and records them (toposched.io/granted) — by design, never a unit twice.
    grep -q "kubelet chose $res .* for pod default/$pod container" "$DP_LOG" ||
      die "$pod: kubelet's checkpoint has $res $kids, the extender recorded $ids, and the plugin did not record kubelet's choice"
    log "$pod: the kubelet chose $kids over the recorded $ids (it still counted a failed pod's devices); the plugin granted and recorded the kubelet's"
    ids="$kids"
  fi
  events_of "$pod" | grep -q UnexpectedAdmissionError && die "$pod: kubelet refused admission: $(events_of "$pod")"
  pass "$pod: recorded $res $ids at bind; kubelet called Allocate and its checkpoint holds $kids; plugin: $(grep "Allocate $res .*$pod" "$DP_LOG" | tail -1 | sed 's/^.*\] //' | cut -c1-150)"
}

grep -q "registered aws.amazon.com/neuron" "$DP_LOG" || die "device plugin did not register aws.amazon.com/neuron"
grep -q "registered aws.amazon.com/neuroncore" "$DP_LOG" || die "device plugin did not register aws.amazon.com/neuroncore"
pass "device plugin registered both resources; kn advertises $(node_allocatable kn aws.amazon.com/neuron) devices and $(node_allocatable kn aws.amazon.com/neuroncore) cores"
# Readiness: kubelet 1.21+ answers PodResources GetAllocatableResources, and the plugin is ready
# (/readyz) only once the kubelet holds the ids it advertises; kubelet 1.20 has List only.
wait_for 30 "the device plugin's /readyz" dp_ready
dp_line() { grep -m1 "$1" "$DP_LOG" | sed 's/^.*\] //' | cut -c1-220; }
if k8s_at_least 21; then
  grep -q "kubelet's allocatable matches the advertised ids" "$DP_LOG" ||
    die "the plugin did not confirm the kubelet's allocatable: $(grep -E "allocatable|ready" "$DP_LOG" | tail -3)"
  pass "ready once the kubelet held the advertised ids: $(dp_line "kubelet's allocatable matches")"
else
  grep -q "does not offer GetAllocatableResources (UNIMPLEMENTED" "$DP_LOG" ||
    die "kubelet 1.20: the plugin did not log that GetAllocatableResources is not offered"
  pass "kubelet 1.20: $(dp_line "does not offer GetAllocatableResources"); $(dp_line "\[info\] ready: ")"
fi

create_pod dev-3 aws.amazon.com/neuron 3 kubernetes.io/hostname=kn
served dev-3 aws.amazon.com/neuron
create_pod core-4 aws.amazon.com/neuroncore 4 kubernetes.io/hostname=kn
served core-4 aws.amazon.com/neuroncore
grep -q "GetPreferredAllocation aws.amazon.com/neuron" "$DP_LOG" && pass "kubelet asked GetPreferredAllocation first"
wait_for 60 "a kubelet event on dev-3" bash -c "$KUBECTL --kubeconfig $W/admin.kubeconfig -n default get events --field-selector involvedObject.name=dev-3,source=kubelet -o name | grep -q ."
pass "dev-3 events from the kubelet (past admission, stopped at the sandbox: no registry here): $(events_of dev-3 | grep -v -e Scheduled | head -2 | tr '\n' ' ' | cut -c1-200)"

# The device plugin restarts: it registers again, kubelet keeps the node's devices, the next pod is served.
stop device-plugin
e2e_device_plugin
wait_for 30 "re-registration after the plugin restarted" grep -q "registered aws.amazon.com/neuron" "$DP_LOG"
create_pod dev-2 aws.amazon.com/neuron 2 kubernetes.io/hostname=kn
served dev-2 aws.amazon.com/neuron
pass "device plugin restarted: registered again and served the next pod"

# The kubelet restarts: it re-creates kubelet.sock, the running plugin notices and registers again.
dp_before=$(grep -c "registered aws.amazon.com/neuron " "$DP_LOG" || true)
lw_before=$(grep -c "kubelet opened ListAndWatch for aws.amazon.com/neuron$" "$DP_LOG" || true)
stop kubelet
e2e_kubelet
wait_for 60 "the plugin's re-registration after the kubelet restarted" bash -c "[ \$(grep -c 'registered aws.amazon.com/neuron ' $DP_LOG) -gt $dp_before ]"
grep -q "kubelet.sock was re-created" "$DP_LOG" || die "the plugin did not log the kubelet restart"
# The Node object still shows the old kubelet's allocatable: that proves nothing. A pod the new
# kubelet admits before it has read the plugin's devices fails admission (UnexpectedAdmissionError),
# the kubelet's own race, not the plugin's: wait until the new kubelet says it has the device list
# of the re-registered plugin (its v=2 line "State pushed for device plugin", 1.20 and current).
wait_for 60 "the restarted kubelet's ListAndWatch on the plugin" bash -c "[ \$(grep -c 'kubelet opened ListAndWatch for aws.amazon.com/neuron\$' $DP_LOG) -gt $lw_before ]"
# From 1.21 the plugin's readiness says it (GetAllocatableResources), and nothing else is waited
# for; 1.20 cannot say, so there the kubelet's log is read.
if k8s_at_least 21; then
  wait_for 60 "the device plugin ready again (the restarted kubelet holds its ids)" dp_ready
  [ "$(grep -c "kubelet's allocatable matches the advertised ids" "$DP_LOG")" -ge 2 ] ||
    die "the plugin turned ready after the kubelet restart without comparing the kubelet's allocatable"
  pass "kubelet restarted: the plugin was ready again only once the kubelet held its ids ($(grep "not ready: \|ready: " "$DP_LOG" | tail -3 | sed 's/^.*\] //' | cut -c1-90 | paste -sd'|'))"
else
  wait_for 60 "the restarted kubelet to take the plugin's device list" grep -qE "State pushed for device plugin.*aws.amazon.com/neuron([^c]|$)" "$KUBELET_LOG"
fi
create_pod dev-1 aws.amazon.com/neuron 1 kubernetes.io/hostname=kn
served dev-1 aws.amazon.com/neuron
pass "kubelet restarted: the plugin registered again and served the next pod"

# A native sidecar (an init container with restartPolicy: Always, on by default from 1.29) that
# uses Neuron devices beside the main container: its devices are held as long as the pod runs, so
# the pod needs sidecar + main. Each container must get exactly what the extender recorded for it,
# in the kubelet's own container order (the sidecar is admitted first).
# A pod whose containers never started (no CNI here) is admitted again by a restarted kubelet, and
# kubelet 1.2x+ fails it (UnexpectedAdmissionError) when that happens before the plugin is back:
# a Failed pod holds nothing, and its devices may be given again. Only live pods must be disjoint.
# The restarted kubelet's denials reach the API server through its status manager, seconds later
# at times: until then the plugin (and the extender) see the pod live and holding its ids, and a
# new pod that the kubelet gives them is refused (safe: never two holders; the plugin reads the
# API before refusing). Wait for the denial to be visible, as a controller's retry would.
phase_is() { [ "$(pod_field "$1" '{.status.phase}')" = "$2" ]; }
for p in dev-3 dev-2 dev-1; do
  if grep -q "Pod admission denied.*pod=\"default/$p\"" "$KUBELET_LOG"; then
    wait_for 60 "$p's admission failure (in the restarted kubelet's log) to reach the API server" phase_is "$p" Failed
  fi
done
live=()
for p in dev-3 dev-2 dev-1; do
  phase=$(pod_field "$p" '{.status.phase}')
  case "$phase" in
    Succeeded | Failed) log "$p is $phase after the kubelet restart ($(events_of "$p" | grep -m1 -i admission | cut -c1-160)): its devices are free" ;;
    *) live+=("$p") ;;
  esac
done
all_ids=$(for p in "${live[@]}"; do pod_ids "$p"; done | paste -sd,)
if k8s_at_least 29; then
  out=$(api POST /api/v1/namespaces/default/pods '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"sidecar-2-1"},
    "spec":{"schedulerName":"my-scheduler","terminationGracePeriodSeconds":0,"nodeSelector":{"kubernetes.io/hostname":"kn"},
    "initContainers":[{"name":"side","image":"registry.invalid/neuron-side:1","restartPolicy":"Always",
      "resources":{"limits":{"aws.amazon.com/neuron":"2"}}}],
    "containers":[{"name":"main","image":"registry.invalid/neuron-app:1","resources":{"limits":{"aws.amazon.com/neuron":"1"}}}]}}') ||
    die "create pod sidecar-2-1"
  grep -q '"kind": *"Pod"' <<<"$out" || die "create pod sidecar-2-1: $out"
  wait_bound 30 sidecar-2-1
  sidecar_done() { [ "$(grep -c "Allocate aws.amazon.com/neuron .*default/sidecar-2-1 container" "$DP_LOG")" -ge 2 ]; }
  wait_for 30 "the plugin's Allocate for both containers of sidecar-2-1" sidecar_done
  uid=$(pod_field sidecar-2-1 '{.metadata.uid}')
  k -n default get pod sidecar-2-1 -o json >"$W/pod-sidecar.json"
  wait_for 30 "kubelet's checkpoint for sidecar-2-1" grep -q "$uid" "$checkpoint"
  python3 - "$W/pod-sidecar.json" "$checkpoint" "$uid" <<'PY' || die "sidecar-2-1: the kubelet's ids per container differ from the record"
import json, re, sys
pod = json.load(open(sys.argv[1])); data = json.load(open(sys.argv[2]))["Data"]; uid = sys.argv[3]
rec = json.loads(pod["metadata"]["annotations"]["toposched.io/allocation"])
want = {c["name"]: sorted(c["ids"]) for c in rec["containers"]}
have = {}
for e in data.get("PodDeviceEntries") or []:
    if e["PodUID"] == uid and e["ResourceName"] == "aws.amazon.com/neuron":
        d = e["DeviceIDs"]; vals = [v for vs in d.values() for v in vs] if isinstance(d, dict) else d
        have[e["ContainerName"]] = sorted(int(re.sub(r"\D", "", v)) for v in vals)
if want != have or sorted(map(len, want.values())) != [1, 2] or len(want.get("side", [])) != 2:
    print(f"recorded {want}, kubelet's checkpoint {have}"); sys.exit(1)
print(f"sidecar side -> {want['side']}, main -> {want['main']}")
PY
  order=$(grep -o "Allocate aws.amazon.com/neuron .*default/sidecar-2-1 container [a-z]*" "$DP_LOG" | awk '{print $NF}' | tr '\n' ' ')
  [ "$order" = "side main " ] || die "sidecar-2-1: the kubelet allocated in the order '$order', expected the sidecar first"
  pass "native sidecar: sidecar-2-1's sidecar got $(python3 -c 'import json,sys; r=json.loads(json.load(open(sys.argv[1]))["metadata"]["annotations"]["toposched.io/allocation"]); print(" and main ".join(",".join(map(str,c["ids"])) for c in r["containers"]))' "$W/pod-sidecar.json") as recorded, allocated by the kubelet in its order (side, main)"
  all_ids="$all_ids,$(pod_ids sidecar-2-1)"; live+=(sidecar-2-1)
fi
# A pod bound straight to kn without any allocation (no scheduler): the plugin grants the kubelet's
# one device and records it from PodResources, with Get for that pod where the kubelet offers it
# (1.34+: KubeletPodResourcesGet on by default), else with List.
out=$(api POST /api/v1/namespaces/default/pods '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"direct-1"},
  "spec":{"nodeName":"kn","terminationGracePeriodSeconds":0,
    "containers":[{"name":"main","image":"registry.invalid/neuron-app:1","resources":{"limits":{"aws.amazon.com/neuron":"1"}}}]}}') ||
  die "create pod direct-1"
grep -q '"kind": *"Pod"' <<<"$out" || die "create pod direct-1: $out"
wait_for 30 "the plugin's Allocate for direct-1" grep -q "Allocate aws.amazon.com/neuron .*default/direct-1" "$DP_LOG"
wait_for 30 "direct-1's ids recorded from PodResources" bash -c "[ -n \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig -n default get pod direct-1 -o 'jsonpath={.metadata.annotations.AWS_NEURON_IDS}')\" ]"
direct_ids=$(pod_ids direct-1)
[ "$(kubelet_ids direct-1 aws.amazon.com/neuron)" = "$direct_ids" ] ||
  die "direct-1: recorded $direct_ids, the kubelet's checkpoint holds $(kubelet_ids direct-1 aws.amazon.com/neuron)"
if k8s_at_least 34; then
  grep -q "PodResources Get default/direct-1: kubelet books main aws.amazon.com/neuron" "$DP_LOG" ||
    die "direct-1 was not read with PodResources Get: $(grep -E "PodResources|recorded" "$DP_LOG" | tail -3)"
  pass "direct-1 (no allocation) recorded from PodResources Get: $(dp_line "PodResources Get default/direct-1")"
else
  grep -q "does not offer Get (UNIMPLEMENTED" "$DP_LOG" || die "the plugin did not log that Get is not offered"
  pass "direct-1 (no allocation) recorded with List: $(dp_line "does not offer Get ("); $(dp_line "recorded kubelet's assignment on default/direct-1")"
fi
all_ids="$all_ids,$direct_ids"; live+=(direct-1)
ids_disjoint ${all_ids//,/ } || die "device ids overlap among the live pods on kn (${live[*]}): $all_ids"

check_no_double_allocation >&2 || die "an id was given twice"
# Both ran with exactly the RBAC of deploy/*-rbac.yaml: a refused list, watch or write is a defect
# of the manifests even when a fallback hid it (the plugin's Allocate lists when its cache misses).
denied=$(grep -hE "HTTP 40[13]|[Ff]orbidden" "$W"/device-plugin-*.log "$W"/extender-*.log | head -3 || true)
[ -z "$denied" ] || die "the API server refused a request of ours (RBAC in deploy/): $denied"
pass "neither the device plugin nor the extender was refused anything by the API server"
