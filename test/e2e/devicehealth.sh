#!/usr/bin/env bash
# A device fails under a running pod (issue 32): a real kubelet with `toposched device-plugin` on a
# fake inf2.48xlarge tree, the extender with --on-device-failure=evict. /dev/neuronD of a pod's set
# disappears: the plugin names it on the Node, the extender refuses every set containing it (the
# time from the failure to the extender's refusal is measured), tells the pod (Event, condition)
# and evicts it — not while a PodDisruptionBudget forbids it, then once the budget is gone; a new
# 4-device pod gets a contiguous set without D. The device comes back: after
# --health-recover-s the annotation is gone and a new pod of all 12 devices fits again.
source "$(dirname "$0")/lib.sh"
e2e_init devicehealth
k8s_at_least 34 || skip "run on the current Kubernetes only"
# holder-4 runs (a pause container on host stand-ins for /dev/neuronN): the Eviction API honours a
# PodDisruptionBudget only for a Running pod.
e2e_pause_image
e2e_control_plane
# The chart grants pods/eviction only with extender.onDeviceFailure=evict; deploy/ renders the
# default (event), so the scenario grants it as that value would.
k apply -f - >/dev/null <<'YAML' || die "cannot grant pods/eviction to the extender"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: k8s-neuron-scheduler-evict}
rules: [{apiGroups: [""], resources: [pods/eviction], verbs: [create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: k8s-neuron-scheduler-evict}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: k8s-neuron-scheduler-evict}
subjects: [{kind: ServiceAccount, name: k8s-neuron-scheduler, namespace: kube-system}]
YAML
e2e_extender --on-device-failure evict
e2e_scheduler
TOPOSCHED_E2E_DP_ARGS="--health-recover-s 1" e2e_kubelet_node kn inf2.48xlarge
e2e_import_pause_image
e2e_host_dev_nodes "$KUBELET_DEVICES"

annotation() { k get node kn -o 'jsonpath={.metadata.annotations.toposched\.io/unhealthy-devices}'; }
now_ms() { date +%s%3N; }

k apply -f - >/dev/null <<YAML || die "create pod holder-4"
apiVersion: v1
kind: Pod
metadata: {name: holder-4, namespace: default, labels: {budget: holder}}
spec:
  schedulerName: my-scheduler
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: kn}
  containers:
    - name: main
      image: $E2E_PAUSE_IMAGE
      imagePullPolicy: Never
      resources: {limits: {aws.amazon.com/neuron: 4}}
YAML
wait_bound 60 holder-4
ids=$(pod_ids holder-4)
dead=$(cut -d, -f3 <<<"$ids")
[ -n "$dead" ] || die "holder-4 has no recorded ids ($ids)"
pass "holder-4 holds devices $ids on kn; device $dead fails next"
# A PodDisruptionBudget that allows no disruption of holder-4: the eviction must wait for it. The
# Eviction API ignores budgets for a pod that is not Running yet, so holder-4 runs first.
holder_ready() { [ "$(pod_field holder-4 '{.status.phase}/{.status.conditions[?(@.type=="Ready")].status}')" = Running/True ]; }
wait_for 60 "holder-4 Running and Ready" holder_ready
k apply -f - >/dev/null <<'YAML' || die "cannot create the PodDisruptionBudget"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: holder-budget, namespace: default}
spec: {minAvailable: 1, selector: {matchLabels: {budget: holder}}}
YAML

# The failure: the driver's device node disappears.
mv "$W/host/dev/neuron$dead" "$W/host/neuron$dead.away"
t0=$(now_ms)
wait_for 10 "the device plugin's annotation naming device $dead" bash -c "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig get node kn -o 'jsonpath={.metadata.annotations.toposched\\.io/unhealthy-devices}')\" = $dead ]"
t_annotated=$(now_ms)
wait_for 10 "the extender to take device $dead out of service" grep -q "node kn: device(s) $dead out of service" "$EXT_LOG"
t_refused=$(now_ms)
# The extender's own view says the same (its tracker, not its log).
curl -sf "http://127.0.0.1:$EXT_PORT/v1/fleet?node=kn" | python3 -c '
import json, sys
node = json.load(sys.stdin)["nodes"][0]
dead = int(sys.argv[1])
assert dead in node.get("out_of_service", []), node.get("out_of_service")
assert dead not in node["free"]["devices"], node["free"]["devices"]
' "$dead" || die "the fleet view does not show device $dead out of service"
pass "device $dead failed: annotated in $((t_annotated - t0)) ms, out of service in the extender $((t_refused - t0)) ms after the failure (poll 250 ms)"
echo "failure-to-refusal-ms $((t_refused - t0))" >>"$W/devicehealth-timings.txt"

wait_for 30 "the NeuronDeviceFailed event on holder-4" bash -c "$KUBECTL --kubeconfig $W/admin.kubeconfig -n default get events --field-selector involvedObject.name=holder-4,reason=NeuronDeviceFailed -o name | grep -q ."
pass "holder-4 told: $(events_of holder-4 | grep NeuronDeviceFailed | head -1 | cut -c1-200)"
# The budget refuses the eviction (HTTP 429): holder-4 stays, False, and the extender retries.
wait_for 30 "the extender to find holder-4's eviction blocked by its budget" grep -q "pod default/holder-4: not evicted yet (.*PodDisruptionBudget" "$EXT_LOG"
healthy=$(pod_field holder-4 '{.status.conditions[?(@.type=="toposched.io/NeuronDevicesHealthy")].status}')
[ "$healthy" = False ] || die "holder-4's condition NeuronDevicesHealthy is '$healthy', not False"
blocked=$(grep -m1 "pod default/holder-4: not evicted yet" "$EXT_LOG" | sed 's/^.*\] //' | cut -c1-200)
pass "holder-4 kept while its PodDisruptionBudget allows no disruption (condition False): $blocked"
k -n default delete pdb holder-budget >/dev/null || die "cannot delete the PodDisruptionBudget"
gone() { ! k -n default get pod holder-4 >/dev/null 2>&1; }
wait_for 60 "holder-4 evicted once its budget is gone" gone
grep -q "pod default/holder-4: evicted off its failed Neuron device" "$EXT_LOG" || die "holder-4 went, but not by the extender's eviction"
pass "holder-4 evicted through the Eviction API once the budget was deleted (retried every 5 s)"

# A new 4-device pod: a contiguous set that does not contain the dead device.
create_pod new-4 aws.amazon.com/neuron 4 kubernetes.io/hostname=kn
wait_bound 60 new-4
new_ids=$(pod_ids new-4)
python3 - "$new_ids" "$dead" <<'PY' || die "new-4 got $new_ids with device $dead out of service"
import sys
ids = [int(x) for x in sys.argv[1].split(",")]
dead = int(sys.argv[2])
assert dead not in ids, "contains the dead device"
assert ids == list(range(ids[0], ids[0] + 4)), "not contiguous"
PY
pass "new-4 got devices $new_ids: contiguous, without $dead"
# Refused by the extender (device out of service) or, once kubelet's node status has caught up
# (allocatable 11: the plugin reports the device Unhealthy), by kube-scheduler itself.
refusal='out of service|Insufficient aws.amazon.com/neuron'
all_refused() { ! pod_bound all-12 && events_of all-12 | grep -qE "$refusal"; }
k -n default delete pod new-4 --wait=true >/dev/null
create_pod all-12 aws.amazon.com/neuron 12 kubernetes.io/hostname=kn
wait_for 60 "all-12 refused: device $dead out of service" all_refused
pass "all-12 waits: $(events_of all-12 | grep -m1 -E "$refusal" | cut -c1-200)"

# The device returns: out of service until it has passed its checks for --health-recover-s (1 s).
mv "$W/host/neuron$dead.away" "$W/host/dev/neuron$dead"
wait_for 15 "the annotation removed" bash -c "[ -z \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig get node kn -o 'jsonpath={.metadata.annotations.toposched\\.io/unhealthy-devices}')\" ]"
wait_for 15 "the extender to take device $dead back" grep -q "node kn: device(s) $dead back in service" "$EXT_LOG"
# A pod refused before stays in kube-scheduler's unschedulable queue until an event it cares
# about; a new one is decided now.
k -n default delete pod all-12 --wait=true >/dev/null
create_pod again-12 aws.amazon.com/neuron 12 kubernetes.io/hostname=kn
wait_bound 60 again-12
pass "device $dead back in service: again-12 bound with $(pod_ids again-12)"

denied=$(grep -hE "HTTP 40[13]|[Ff]orbidden" "$W"/device-plugin-*.log "$W"/extender-*.log | head -3 || true)
[ -z "$denied" ] || die "the API server refused a request of ours (RBAC): $denied"
pass "no request of ours was refused by the API server"
