#!/usr/bin/env bash
# UltraServer gangs on the real kube-scheduler (docs/ultraserver.md): nodes labelled as two
# UltraServers of four trn2u.48xlarge (us1, us2) plus plain trn2 nodes, and a third UltraServer
# (us3) one of whose nodes is a real kubelet with `toposched device-plugin`.
#   1. two 4-pod gangs whose pods arrive interleaved each land whole on one UltraServer, rank =
#      node id, and never deadlock;
#   2. a third gang stays entirely Pending (no member bound) and lands whole once one of the first
#      two is deleted;
#   3. two 2-node gangs share one UltraServer's halves;
#   4. the extender is killed while a gang is half bound: the restarted extender completes it on
#      its recorded nodes, with no id given twice;
#   5. an MPIJob-labelled gang member on the kubelet node gets NEURON_RT_ULTRASERVER_* and
#      NEURON_GLOBAL_TOPOID* from the device plugin's Allocate (no init script);
#   6. (1.36+, upstream gang scheduling on: GenericWorkload in the API server and kube-scheduler)
#      pods naming a PodGroup with gang minCount 4 by spec.schedulingGroup are held by upstream's
#      GangScheduling plugin until the fourth exists, then land whole on one UltraServer with the
#      PodGroup's size in their records; a pod of a basic PodGroup is placed as a single pod;
#   7. a device of kn fails under the MPIJob's worker there (issue 32): that worker is told of its
#      device, the other worker (on another node, its devices healthy) is told its gang is broken
#      (Event, condition False); the device comes back and both conditions go back to True.
source "$(dirname "$0")/lib.sh"
e2e_init gang
if k8s_at_least 36; then
  # 1.37 serves PodGroups as scheduling.k8s.io/v1beta1 (beta APIs are off by default), 1.36 as
  # v1alpha2. The gate makes kube-scheduler add its GangScheduling plugin to every profile.
  pg_version=v1beta1; k8s_before 37 && pg_version=v1alpha2
  E2E_APISERVER_EXTRA_FLAGS=(--feature-gates=GenericWorkload=true "--runtime-config=scheduling.k8s.io/$pg_version=true")
  E2E_SCHED_EXTRA_FLAGS=(--feature-gates=GenericWorkload=true)
fi
e2e_control_plane

# label_ultraserver NODE SERVER NODE_ID: AWS's UltraServer labels (4-node server SERVER, its halves
# SERVER-a for node ids 0-1 and SERVER-b for 2-3).
label_ultraserver() {
  local node="$1" us="$2" id="$3" half
  if [ "$id" -lt 2 ]; then half="${us}a"; else half="${us}b"; fi
  api PATCH "/api/v1/nodes/$node" "{\"metadata\":{\"labels\":{
    \"neuron.amazonaws.com/ultraserver-mode\":\"1_2_4\",
    \"neuron.amazonaws.com/ultraserver-server-id-4\":\"$us\",
    \"neuron.amazonaws.com/ultraserver-node-id-4\":\"$id\",
    \"neuron.amazonaws.com/ultraserver-server-id-2\":\"$half\",
    \"neuron.amazonaws.com/ultraserver-node-id-2\":\"$((id % 2))\"}}}" application/merge-patch+json >/dev/null ||
    die "label $node"
}
for us in us1 us2; do
  for i in 0 1 2 3; do e2e_node "$us-n$i" trn2u.48xlarge; label_ultraserver "$us-n$i" "${us}srv0000000" "$i"; done
done
e2e_nodes trn2- 2 trn2.48xlarge
# The device plugin takes a returned device back after 1 s of passed checks (step 7).
TOPOSCHED_E2E_DP_ARGS="--health-recover-s 1" e2e_kubelet_node kn trn2u.48xlarge
label_ultraserver kn us3srv0000000 0
for i in 1 2 3; do e2e_node "us3-n$i" trn2u.48xlarge; label_ultraserver "us3-n$i" us3srv0000000 "$i"; done
e2e_extender --gang-timeout 60
e2e_scheduler

# gang_pod NAME GANG SIZE NODES DEVICES [NODE_SELECTOR]: a member by our own annotations.
gang_pod() {
  local name="$1" gang="$2" size="$3" nodes="$4" dev="$5" sel="${6:-node.kubernetes.io/instance-type=trn2u.48xlarge}"
  local out
  out=$(api POST /api/v1/namespaces/default/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$name\",
    \"labels\":{\"app\":\"e2e\",\"e2e/gang\":\"$gang\"},\"annotations\":{\"toposched.io/gang\":\"$gang\",
    \"toposched.io/gang-size\":\"$size\",\"toposched.io/ultraserver-nodes\":\"$nodes\"}},
    \"spec\":{\"schedulerName\":\"my-scheduler\",\"terminationGracePeriodSeconds\":0,
    \"nodeSelector\":{\"${sel%%=*}\":\"${sel#*=}\"},
    \"containers\":[{\"name\":\"main\",\"image\":\"registry.invalid/neuron-app:1\",
    \"resources\":{\"limits\":{\"aws.amazon.com/neuron\":\"$dev\"},\"requests\":{\"cpu\":\"100m\"}}}]}}") ||
    die "create pod $name"
  grep -q '"kind": *"Pod"' <<<"$out" || die "create pod $name: $out"
}
record_of() { pod_field "$1" '{.metadata.annotations.toposched\.io/gang-record}'; }
# check_gang GANG NODES POD...: every pod bound, all in one group of NODES nodes, rank = node id,
# ranks distinct and complete.
check_gang() {
  local gang="$1" nodes="$2"; shift 2
  k get pods -o json >"$W/gang-$gang.json"
  k get nodes -o json >"$W/nodes.json"
  python3 - "$W/gang-$gang.json" "$W/nodes.json" "$nodes" "$@" <<'PY' || die "gang $gang is not placed whole"
import json, sys
pods = {p["metadata"]["name"]: p for p in json.load(open(sys.argv[1]))["items"]}
nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in json.load(open(sys.argv[2]))["items"]}
group_nodes = sys.argv[3]; names = sys.argv[4:]
groups, ranks = set(), set()
for name in names:
    p = pods[name]; node = p["spec"].get("nodeName")
    assert node, f"{name} is not bound"
    rec = json.loads(p["metadata"]["annotations"]["toposched.io/gang-record"])
    labels = nodes[node]
    server = labels[f"neuron.amazonaws.com/ultraserver-server-id-{group_nodes}"]
    node_id = int(labels[f"neuron.amazonaws.com/ultraserver-node-id-{group_nodes}"])
    groups.add(server); ranks.add(rec["rank"])
    assert rec["nodes"][rec["rank"]] == node, f"{name}: record says rank {rec['rank']} is on {rec['nodes'][rec['rank']]}, pod is on {node}"
    assert rec["rank"] % int(group_nodes) == node_id, f"{name}: rank {rec['rank']} on node id {node_id}"
    assert rec.get("serverId") == server and rec.get("nodeId") == node_id, f"{name}: record {rec}"
    print(f"{name}: {node} rank {rec['rank']} server {server} node id {node_id}", file=sys.stderr)
assert len(groups) == len(names) // int(group_nodes), f"spread over {sorted(groups)}"
assert ranks == set(range(len(names))), f"ranks {sorted(ranks)}"
PY
}
none_bound() { local p; for p in "$@"; do pod_bound "$p" && return 1; done; return 0; }

# 1. Two 4-pod gangs, 16 devices per pod, their pods created interleaved.
for i in 0 1 2 3; do gang_pod "a-$i" a 4 4 16; gang_pod "b-$i" b 4 4 16; done
wait_bound 90 a-0 a-1 a-2 a-3 b-0 b-1 b-2 b-3
check_gang a 4 a-0 a-1 a-2 a-3
check_gang b 4 b-0 b-1 b-2 b-3
pass "two interleaved 4-pod gangs: each whole on one UltraServer, ranks = node ids"

# 2. A third gang fits nowhere: us3 is free too, so a single pod in each of its halves first.
create_pod us3-filler-1 aws.amazon.com/neuron 1 kubernetes.io/hostname=us3-n1
create_pod us3-filler-3 aws.amazon.com/neuron 1 kubernetes.io/hostname=us3-n3
wait_bound 30 us3-filler-1 us3-filler-3
for i in 0 1 2 3; do gang_pod "c-$i" c 4 4 16; done
# Wait for the scheduler to have tried (and refused) every member, then none may be bound.
for i in 0 1 2 3; do
  wait_for 30 "a FailedScheduling event on c-$i naming gang c" pending_with "c-$i" "gang default/"
done
none_bound c-0 c-1 c-2 c-3 || die "a member of gang c was bound while it cannot be placed whole"
pass "gang c stays entirely Pending: $(events_of c-0 | grep -m1 gang | cut -c1-220)"
k delete pod a-0 a-1 a-2 a-3 --wait=false >/dev/null
wait_bound 120 c-0 c-1 c-2 c-3
check_gang c 4 c-0 c-1 c-2 c-3
pass "gang c landed whole once gang a was deleted"

# 3. Two 2-node gangs share one UltraServer's halves (b's UltraServer, once b is gone).
k delete pod b-0 b-1 b-2 b-3 --wait=false >/dev/null
wait_for 60 "b's pods gone" bash -c "! $KUBECTL --kubeconfig $W/admin.kubeconfig get pods -o name | grep -q pod/b-"
for i in 0 1; do gang_pod "d-$i" d 2 2 16; gang_pod "e-$i" e 2 2 16; done
wait_bound 90 d-0 d-1 e-0 e-1
check_gang d 2 d-0 d-1
check_gang e 2 e-0 e-1
d_us=$(k get node "$(pod_node d-0)" -o 'jsonpath={.metadata.labels.neuron\.amazonaws\.com/ultraserver-server-id-4}')
e_us=$(k get node "$(pod_node e-0)" -o 'jsonpath={.metadata.labels.neuron\.amazonaws\.com/ultraserver-server-id-4}')
[ "$d_us" = "$e_us" ] || die "the two 2-node gangs were split over $d_us and $e_us; one UltraServer's halves were free"
pass "two 2-node gangs share UltraServer $d_us's halves"

# 4. A 4-pod gang whose last two members are created after the extender was killed.
k delete pod c-0 c-1 c-2 c-3 --wait=false >/dev/null
wait_for 60 "c's pods gone" bash -c "! $KUBECTL --kubeconfig $W/admin.kubeconfig get pods -o name | grep -q pod/c-"
gang_pod f-0 f 4 4 16; gang_pod f-1 f 4 4 16
wait_bound 60 f-0 f-1
log "f-0 and f-1 bound ($(pod_node f-0), $(pod_node f-1)); SIGKILL to the extender"
kill -KILL "$(pid_of extender)"; stop extender
e2e_extender --gang-timeout 60
grep -q "gang default/gang:f: 2 of 4 members bound before the restart" "$EXT_LOG" ||
  die "the restarted extender did not hold gang f's missing seats: $(grep -m2 'gang' "$EXT_LOG" || true)"
gang_pod f-2 f 4 4 16; gang_pod f-3 f 4 4 16
wait_bound 90 f-2 f-3
check_gang f 4 f-0 f-1 f-2 f-3
check_no_double_allocation >&2 || die "an id was given twice"
pass "gang f, half bound when the extender was killed, completed on its recorded UltraServer"

# 5. An MPIJob's 2 workers on us3's first half: kn (a real kubelet) is rank 0. The MPIJob object
# is real (its CRD is installed, no operator runs): the extender reads the gang's size from it
# with the chart's RBAC, as the workers carry no toposched annotation.
k delete pod us3-filler-1 --wait=false >/dev/null
wait_for 60 "us3-filler-1 gone" bash -c "! $KUBECTL --kubeconfig $W/admin.kubeconfig get pod us3-filler-1"
out=$(api POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions '{"apiVersion":"apiextensions.k8s.io/v1",
  "kind":"CustomResourceDefinition","metadata":{"name":"mpijobs.kubeflow.org"},"spec":{"group":"kubeflow.org",
  "scope":"Namespaced","names":{"plural":"mpijobs","singular":"mpijob","kind":"MPIJob"},"versions":[{"name":"v2beta1",
  "served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}') ||
  die "create the MPIJob CRD"
grep -q '"kind": *"CustomResourceDefinition"' <<<"$out" || die "create the MPIJob CRD: $out"
mpijob_served() { api POST /apis/kubeflow.org/v2beta1/namespaces/default/mpijobs '{"apiVersion":"kubeflow.org/v2beta1",
  "kind":"MPIJob","metadata":{"name":"train"},"spec":{"slotsPerWorker":1,"mpiReplicaSpecs":{
  "Launcher":{"replicas":1,"template":{}},"Worker":{"replicas":2,"template":{}}}}}' | grep -q '"kind": *"MPIJob"'; }
wait_for 30 "the MPIJob CRD to serve kubeflow.org/v2beta1" mpijob_served
mpi_worker() {
  local i="$1" out
  out=$(api POST /api/v1/namespaces/default/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"train-worker-$i\",
    \"labels\":{\"training.kubeflow.org/job-name\":\"train\",\"training.kubeflow.org/job-role\":\"worker\",
    \"training.kubeflow.org/replica-index\":\"$i\"}},
    \"spec\":{\"schedulerName\":\"my-scheduler\",\"terminationGracePeriodSeconds\":0,\"hostname\":\"train-worker-$i\",\"subdomain\":\"train\",
    \"nodeSelector\":{\"node.kubernetes.io/instance-type\":\"trn2u.48xlarge\"},
    \"affinity\":{\"podAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":[{\"labelSelector\":{\"matchLabels\":{
      \"training.kubeflow.org/job-name\":\"train\",\"training.kubeflow.org/job-role\":\"worker\"}},
      \"topologyKey\":\"neuron.amazonaws.com/ultraserver-server-id-2\"}]}},
    \"containers\":[{\"name\":\"main\",\"image\":\"registry.invalid/neuron-app:1\",
    \"resources\":{\"limits\":{\"aws.amazon.com/neuron\":\"16\"},\"requests\":{\"cpu\":\"100m\"}}}]}}") ||
    die "create pod train-worker-$i"
  grep -q '"kind": *"Pod"' <<<"$out" || die "create pod train-worker-$i: $out"
}
# Only us3's first half (kn, us3-n1) is free for a 2-node gang: us1 and us2 are taken by d, e, f.
mpi_worker 0; mpi_worker 1
wait_bound 90 train-worker-0 train-worker-1
check_gang train 2 train-worker-0 train-worker-1
grep -q "reading MPIJob" "$EXT_LOG" && die "the extender could not read the MPIJob: $(grep -m1 'reading MPIJob' "$EXT_LOG")"
[ "$(record_of train-worker-0 | python3 -c 'import json,sys; print(json.load(sys.stdin)["size"])')" = 2 ] ||
  die "train's gang size is not the MPIJob's 2 workers: $(record_of train-worker-0)"
pass "the MPIJob's size (2 workers) was read from the job itself"
worker_on_kn=train-worker-0
[ "$(pod_node train-worker-1)" = kn ] && worker_on_kn=train-worker-1
[ "$(pod_node $worker_on_kn)" = kn ] || die "no train worker on kn: $(pod_node train-worker-0), $(pod_node train-worker-1)"
wait_for 60 "the plugin's Allocate for $worker_on_kn" grep -q "Allocate aws.amazon.com/neuron .*$worker_on_kn" "$DP_LOG"
allocate_line=$(grep "$worker_on_kn" "$DP_LOG" | grep -m1 NEURON_GLOBAL_TOPOID || true)
[ -n "$allocate_line" ] || die "the device plugin's Allocate for $worker_on_kn set no gang env: $(grep "$worker_on_kn" "$DP_LOG" | tail -3)"
rank=$(record_of "$worker_on_kn" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rank"])')
for want in "NEURON_GLOBAL_TOPOID=$rank" "NEURON_RT_ULTRASERVER_MODE=3" "NEURON_RT_ULTRASERVER_SERVER_ID=us3srv0000000a" \
            "NEURON_RT_ULTRASERVER_NODE_ID=0" "NEURON_GLOBAL_TOPOID0_HOST=train-worker-0.train.default.svc"; do
  grep -qF -- "$want" <<<"$allocate_line" || die "$worker_on_kn: Allocate env lacks $want: $allocate_line"
done
pass "MPIJob worker $worker_on_kn on the real kubelet got its rank and UltraServer env: $(sed 's/^.*\] //' <<<"$allocate_line" | cut -c1-240)"
check_no_double_allocation >&2 || die "an id was given twice"
denied=$(grep -hE "HTTP 40[13]|[Ff]orbidden" "$W"/extender-*.log "$W"/device-plugin-*.log | head -3 || true)
[ -z "$denied" ] || die "the API server refused a request of ours (the chart's RBAC): $denied"
pass "the extender and the device plugin were refused nothing (the chart's RBAC covers reading MPIJobs)"

# 6. Upstream's PodGroup (1.36+): its identity is spec.schedulingGroup.podGroupName, its size the
# PodGroup's gang minCount, read by the extender with the chart's RBAC (get podgroups).
if k8s_at_least 36; then
  # us1 or us2 is freed (f's UltraServer).
  k delete pod f-0 f-1 f-2 f-3 --wait=false >/dev/null
  wait_for 60 "f's pods gone" bash -c "! $KUBECTL --kubeconfig $W/admin.kubeconfig get pods -o name | grep -q pod/f-"
  pod_group() {  # pod_group NAME POLICY_JSON
    local out
    out=$(api POST "/apis/scheduling.k8s.io/$pg_version/namespaces/default/podgroups" "{\"apiVersion\":\"scheduling.k8s.io/$pg_version\",
      \"kind\":\"PodGroup\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"schedulingPolicy\":$2}}") || die "create PodGroup $1"
    grep -q '"kind": *"PodGroup"' <<<"$out" || die "create PodGroup $1 (scheduling.k8s.io/$pg_version): $out"
  }
  pg_pod() {  # pg_pod NAME GROUP DEVICES [ANNOTATIONS_JSON]
    local out
    out=$(api POST /api/v1/namespaces/default/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",
      \"labels\":{\"app\":\"e2e\"},\"annotations\":{${4:-}}},
      \"spec\":{\"schedulerName\":\"my-scheduler\",\"terminationGracePeriodSeconds\":0,
      \"schedulingGroup\":{\"podGroupName\":\"$2\"},
      \"nodeSelector\":{\"node.kubernetes.io/instance-type\":\"trn2u.48xlarge\"},
      \"containers\":[{\"name\":\"main\",\"image\":\"registry.invalid/neuron-app:1\",
      \"resources\":{\"limits\":{\"aws.amazon.com/neuron\":\"$3\"},\"requests\":{\"cpu\":\"100m\"}}}]}}") ||
      die "create pod $1"
    grep -q '"kind": *"Pod"' <<<"$out" || die "create pod $1: $out"
  }
  pod_group pg '{"gang":{"minCount":4}}'
  for i in 0 1 2; do pg_pod "pg-$i" pg 16 '"toposched.io/ultraserver-nodes":"4"'; done
  [ "$(pod_field pg-0 '{.spec.schedulingGroup.podGroupName}')" = pg ] ||
    die "the API server dropped spec.schedulingGroup (is GenericWorkload on?): $(k get pod pg-0 -o json | head -c 600)"
  # Upstream's gang plugin holds the three at PreEnqueue (fewer than minCount): nothing may bind.
  # A pod created after them, once bound, shows the scheduler has seen them (its watch delivers
  # in order, and PreEnqueue runs as each pod is added), so their verdict is in: no time to wait.
  create_pod pg-barrier cpu 100m
  wait_bound 60 pg-barrier
  none_bound pg-0 pg-1 pg-2 || die "a member of PodGroup pg was bound before its minCount of 4 pods existed"
  api DELETE /api/v1/namespaces/default/pods/pg-barrier >/dev/null || die "delete pg-barrier"
  pg_pod pg-3 pg 16 '"toposched.io/ultraserver-nodes":"4"'
  wait_bound 90 pg-0 pg-1 pg-2 pg-3
  check_gang pg 4 pg-0 pg-1 pg-2 pg-3
  rec=$(record_of pg-0)
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["gang"]=="default/podgroup:pg" and r["size"]==4, r' "$rec" ||
    die "pg-0's gang record is not the PodGroup's: $rec"
  # 1.37's kube-scheduler schedules the group in one pod-group cycle and says so on the PodGroup.
  pg_scheduled() {
    api GET "/apis/scheduling.k8s.io/$pg_version/namespaces/default/podgroups/pg" | python3 -c '
import json, sys
conds = json.load(sys.stdin).get("status", {}).get("conditions", [])
sys.exit(0 if any(c["type"] == "PodGroupInitiallyScheduled" and c["status"] == "True" for c in conds) else 1)'
  }
  if k8s_at_least 37; then
    wait_for 30 "kube-scheduler's PodGroupInitiallyScheduled=True on PodGroup pg" pg_scheduled
  fi
  grep -q "gang default/podgroup:pg: 4 members, read from its PodGroup pg" "$EXT_LOG" ||
    die "the extender did not read the PodGroup's size: $(grep -m3 'podgroup' "$EXT_LOG" || true)"
  pass "PodGroup pg (gang minCount 4, scheduling.k8s.io/$pg_version): held by upstream until complete, scheduled in its pod-group cycle, whole on one UltraServer: $rec"
  # A basic PodGroup is no gang: its pod is placed alone, without a gang record.
  pod_group web '{"basic":{}}'
  pg_pod web-0 web 1
  wait_bound 60 web-0
  [ -z "$(record_of web-0)" ] || die "web-0 of a basic PodGroup got a gang record: $(record_of web-0)"
  pass "a basic PodGroup's pod was placed as a single pod on $(pod_node web-0)"
  check_no_double_allocation >&2 || die "an id was given twice"
  denied=$(grep -hE "HTTP 40[13]|[Ff]orbidden" "$W"/extender-*.log | head -3 || true)
  [ -z "$denied" ] || die "the API server refused a request of ours (the chart's RBAC): $denied"
  pass "the extender read PodGroups with the chart's RBAC (get podgroups), refused nothing"
else
  log "step 6 (upstream PodGroup) needs 1.36+: not run on $(api GET /version | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])')"
fi

# 7. A device fails under the gang's member on kn: the whole gang is told (--on-device-failure is
# event here, the default: nobody is evicted). train's workers are still bound from step 5.
other_worker=train-worker-1
[ "$worker_on_kn" = train-worker-1 ] && other_worker=train-worker-0
healthy_of() { pod_field "$1" '{.status.conditions[?(@.type=="toposched.io/NeuronDevicesHealthy")].status}/{.status.conditions[?(@.type=="toposched.io/NeuronDevicesHealthy")].reason}'; }
healthy_is() { [ "$(healthy_of "$1")" = "$2" ]; }
has_event() { events_of "$1" | grep -q "^$2: "; }
dead=5
mv "$W/host/dev/neuron$dead" "$W/host/neuron$dead.away"
wait_for 30 "the extender to take kn's device $dead out of service" grep -q "node kn: device(s) $dead out of service" "$EXT_LOG"
wait_for 30 "the NeuronDeviceFailed event on $worker_on_kn" has_event "$worker_on_kn" NeuronDeviceFailed
wait_for 30 "the NeuronGangMemberDeviceFailed event on $other_worker" has_event "$other_worker" NeuronGangMemberDeviceFailed
wait_for 30 "$worker_on_kn's condition False/DeviceFailed" healthy_is "$worker_on_kn" False/DeviceFailed
wait_for 30 "$other_worker's condition False/GangMemberDeviceFailed" healthy_is "$other_worker" False/GangMemberDeviceFailed
pod_bound "$worker_on_kn" && pod_bound "$other_worker" || die "a train worker is gone under --on-device-failure=event"
pass "device $dead of kn failed under $worker_on_kn: it was told ($(events_of "$worker_on_kn" | grep -m1 NeuronDeviceFailed | cut -c1-160)); $other_worker, on $(pod_node "$other_worker") with healthy devices, was told its gang is broken ($(events_of "$other_worker" | grep -m1 NeuronGangMemberDeviceFailed | cut -c1-160))"
mv "$W/host/neuron$dead.away" "$W/host/dev/neuron$dead"
wait_for 30 "the extender to take kn's device $dead back" grep -q "node kn: device(s) $dead back in service" "$EXT_LOG"
wait_for 30 "$worker_on_kn's condition True/DevicesInService" healthy_is "$worker_on_kn" True/DevicesInService
wait_for 30 "$other_worker's condition True/DevicesInService" healthy_is "$other_worker" True/DevicesInService
pod_bound "$worker_on_kn" && pod_bound "$other_worker" || die "a train worker is gone after its device came back"
check_no_double_allocation >&2 || die "an id was given twice"
pass "device $dead back: both workers' NeuronDevicesHealthy True (DevicesInService), both still bound"
