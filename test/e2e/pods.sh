#!/usr/bin/env bash
# The extender, the device plugin and my-scheduler as real pods: an image of toposched built from
# scratch with buildah (scripts/image.sh), a static pause image (test/e2e/pause.c) and a
# kube-scheduler image of the control plane's own build (named as the chart names it for this
# cluster: registry.k8s.io/kube-scheduler:v1.37.2 on 1.37) are imported into the kubelet's
# containerd; the device plugin runs as the pod the applied DaemonSet's template describes, the
# extender and my-scheduler as the pods the applied Deployments' templates describe, all started by
# the real kubelet through containerd and runc, with in-cluster ServiceAccount credentials (bound
# tokens) and so exactly the RBAC of deploy/*-rbac.yaml and deploy/my-scheduler.yaml. The in-pod
# my-scheduler (holding its lease) calls the in-pod extender; the kubelet calls the in-pod device plugin.
#
# No controller-manager runs here, so the harness does what the DaemonSet and ReplicaSet controllers
# would: it reads each template back from the API server and creates one pod from it, bound to the
# kubelet node. It changes only what this one-machine harness must differ in (pod_from_template
# below; listed in docs/e2e.md, "The pods scenario"):
#   all         hostNetwork: true (there is no CNI); spec.nodeName: the kubelet node (no scheduler
#               for them, as DaemonSet pods were in 1.11); imagePullPolicy: Never (no registry); env
#               KUBERNETES_SERVICE_HOST=127.0.0.1 and KUBERNETES_SERVICE_PORT=<API port>, overriding
#               the `kubernetes` Service's ClusterIP that kubelet injects (no kube-proxy routes it)
#   toposched's image: the local image localhost/toposched:e2e (plugin and extender)
#   plugin      hostPath /sys, /dev, /opt/aws: the fake inf2.48xlarge tree under the work dir (no
#               Neuron driver here); /var/lib/kubelet/pod-resources: the kubelet's --root-dir
#               (the work dir); the DaemonSet controller's default tolerations are added, as it does;
#               --probe-listen 127.0.0.1:<DP_PROBE_PORT> and containerPort <DP_PROBE_PORT> instead
#               of 0.0.0.0:8081 (as the extender's, below)
#   extender    --listen 127.0.0.1:<EXT_PORT> and containerPort <EXT_PORT> instead of 0.0.0.0:12345
#               (the harness's port range; hostNetwork would open 12345 on every interface)
#   my-scheduler  the image as the chart rendered it (the imported build must carry exactly that
#               name); in its ConfigMap my-scheduler-config the extender's URL is
#               https://127.0.0.1:<EXT_PORT> with tlsConfig.serverName the Service's DNS name (no
#               cluster DNS; lib.sh's e2e_scheduler_config, WHERE=pod); its probes' port 10259 stays
#               (outside the harness's range; checked free first)
# A problem of the manifests themselves (not of this harness) is a FINDING: the scenario works around
# it where it can, to check everything else, and fails at the end naming it. Watched for:
#   * a read-only /dev at /dev (as deploy/device-plugin.yaml had it, found here and fixed: the host's
#     /dev is now at /host/dev): runc cannot create /dev/termination-log in it and the container never
#     starts ("read-only file system"), on any node; the pod is made again with
#     terminationMessagePath /tmp/termination-log to check the rest.
#   * a 403/forbidden in any of the pods' logs: a verb missing from deploy/*-rbac.yaml or
#     deploy/my-scheduler.yaml.
# Skips (77) when buildah cannot be installed or the images cannot be built.
source "$(dirname "$0")/lib.sh"
e2e_init pods
e2e_images
E2E_IN_CLUSTER=1
e2e_control_plane
# The chart's transport: the in-pod extender serves TLS and requires a client certificate signed by
# the CA of its Secret; my-scheduler presents the one of Secret my-scheduler-extender-client from its
# pod's mount. The URL is 127.0.0.1, so the config names the serving certificate's DNS name in
# tlsConfig.serverName; the ConfigMap the my-scheduler pod mounts gets that configuration.
e2e_scheduler_config "$W/my-scheduler.yaml" true "" all "https://127.0.0.1:$EXT_PORT" pod
out=$(api PATCH /api/v1/namespaces/kube-system/configmaps/my-scheduler-config \
  "$(python3 -c 'import json,sys; print(json.dumps({"data": {"my-scheduler-config.yaml": open(sys.argv[1]).read()}}))' "$W/my-scheduler.yaml")" \
  application/merge-patch+json) || die "patch ConfigMap my-scheduler-config"
grep -q "127.0.0.1:$EXT_PORT" <<<"$out" || die "patch ConfigMap my-scheduler-config: $out"
e2e_kubelet_node kn inf2.48xlarge
# `kubectl logs` goes through the API server to the kubelet at the Node's address, but kubelet 1.20
# refuses to publish a loopback address ("nodeIP can't be loopback address") and leaves
# status.addresses empty: the harness puts 127.0.0.1 there (the kubelet keeps it: its address setter fails).
api PATCH "/api/v1/nodes/$KUBELET_NODE/status" '{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"}]}}' \
  application/strategic-merge-patch+json >/dev/null || die "patch the address of $KUBELET_NODE"

checkpoint=/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint

FINDINGS=()
finding() { log "FINDING: $*"; FINDINGS+=("$*"); }

# pod_from_template KIND NAME ROLE: prints the Pod (JSON) the controller of kube-system/NAME would
# create from its template, with the harness's changes above.
pod_from_template() {
  local kind="$1" name="$2" role="$3"
  k -n kube-system get "$kind" "$name" -o json >"$W/$role-owner.json" || die "cannot read $kind $name"
  python3 - "$W/$role-owner.json" "$role" "$KUBELET_NODE" "$E2E_IMAGE" "$API_PORT" "$EXT_PORT" "$W" "${MOVE_TERMINATION_LOG:-0}" "$DP_PROBE_PORT" <<'PY'
import json, sys
owner_path, role, node, image, api_port, ext_port, w, move_tlog, probe_port = sys.argv[1:]


def to_harness_port(c, flag, port, new_port, who):
    """The container's `flag 0.0.0.0:port` and its containerPort moved to 127.0.0.1:new_port."""
    cmd = c["command"]
    i = cmd.index(flag)
    if cmd[i + 1] != f"0.0.0.0:{port}":
        sys.exit(f"{who} {flag} is {cmd[i + 1]}, expected 0.0.0.0:{port}")
    cmd[i + 1] = f"127.0.0.1:{new_port}"
    ports = [p for p in c.get("ports", []) if p["containerPort"] == port]
    if len(ports) != 1:
        sys.exit(f"{who}: no containerPort {port}")
    ports[0]["containerPort"] = int(new_port)

owner = json.load(open(owner_path))
tpl = owner["spec"]["template"]
meta = dict(tpl.get("metadata") or {})
spec = tpl["spec"]
labels = dict(meta.get("labels") or {})
pod_meta = {"namespace": "kube-system", "labels": labels}
if meta.get("annotations"):
    pod_meta["annotations"] = meta["annotations"]
if role == "device-plugin":
    # As the DaemonSet controller: named after the set, owned by it, one per node.
    pod_meta["generateName"] = owner["metadata"]["name"] + "-"
    pod_meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    # The tolerations the DaemonSet controller adds to every daemon pod (1.20's AddOrUpdateDaemonPodTolerations).
    tol = spec.setdefault("tolerations", [])
    for key, effect in [("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
                        ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                        ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule"),
                        ("node.kubernetes.io/network-unavailable", "NoSchedule")]:
        if not any(t.get("key") == key for t in tol):
            tol.append({"key": key, "operator": "Exists", "effect": effect})
    # Host paths: the fake Neuron tree and the kubelet's root dir of this harness.
    host = {"/sys": f"{w}/host/sys", "/dev": f"{w}/host/dev", "/opt/aws": f"{w}/host/opt/aws",
            "/var/lib/kubelet/pod-resources": f"{w}/kubelet/pod-resources"}
    seen = set()
    for v in spec.get("volumes", []):
        hp = v.get("hostPath")
        if hp and hp["path"] in host:
            seen.add(hp["path"])
            hp["path"] = host[hp["path"]]
    missing = set(host) - seen
    if missing:
        sys.exit(f"the DaemonSet has no hostPath volume for {sorted(missing)}")
    # The probe endpoint on the harness's port (hostNetwork would open 8081 on every interface).
    to_harness_port(spec["containers"][0], "--probe-listen", 8081, probe_port, "device plugin")
else:
    # As a ReplicaSet of the Deployment would name its pod (no ReplicaSet exists here: no owner).
    pod_meta["generateName"] = owner["metadata"]["name"] + "-e2e-"
if role == "extender":
    to_harness_port(spec["containers"][0], "--listen", 12345, ext_port, "extender")
spec["nodeName"] = node
spec["hostNetwork"] = True
for c in spec["containers"]:
    if role != "my-scheduler":  # my-scheduler keeps the chart's image: the one built must match it
        c["image"] = image
    c["imagePullPolicy"] = "Never"
    env = [e for e in c.get("env", []) if e["name"] not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")]
    env += [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}, {"name": "KUBERNETES_SERVICE_PORT", "value": api_port}]
    c["env"] = env
    if move_tlog == "1":
        c["terminationMessagePath"] = "/tmp/termination-log"
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}))
PY
}

# run_pod KIND NAME ROLE: creates the pod from the template; sets POD to its name.
run_pod() {
  local body out
  body=$(pod_from_template "$1" "$2" "$3") || die "deriving the $3 pod from $1 $2"
  printf '%s\n' "$body" >"$W/$3-pod.json"
  out=$(api POST /api/v1/namespaces/kube-system/pods "$body") || die "create the $3 pod"
  POD=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])' <<<"$out" 2>/dev/null) ||
    die "create the $3 pod: $out"
  log "created pod kube-system/$POD from $1 $2"
}

ks() { k -n kube-system "$@"; }
phase_of() { ks get pod "$1" -o 'jsonpath={.status.phase}'; }
running() {
  [ "$(phase_of "$1")" = Running ] &&
    [ "$(ks get pod "$1" -o 'jsonpath={.status.containerStatuses[0].state.running.startedAt}')" != "" ]
}
ready() { [ "$(ks get pod "$1" -o 'jsonpath={.status.containerStatuses[0].ready}')" = true ]; }
# wait_running SECONDS POD: Running with its container started; on failure, the pod's state and events.
wait_running() {
  local limit="$1" pod="$2" deadline=$(($(date +%s) + $1))
  until running "$pod" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      ks get pod "$pod" -o 'jsonpath={.status}' >&2; echo >&2
      ks get events --field-selector "involvedObject.name=$pod" -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' >&2
      ks logs "$pod" --tail 20 >&2 2>/dev/null
      die "pod $pod did not reach Running in ${limit}s"
    fi
    sleep 0.5
  done
}
# container_of POD: the container's id in containerd.
container_of() { ks get pod "$1" -o 'jsonpath={.status.containerStatuses[0].containerID}' | sed 's#^containerd://##'; }
# check_in_container POD [IMAGE] [EXE]: containerd runs the container from IMAGE (default our
# toposched image); runc's init is EXE (default /usr/local/bin/toposched) of the image.
check_in_container() {
  local pod="$1" want_img="${2:-$E2E_IMAGE}" want_exe="${3:-/usr/local/bin/toposched}" id img pid exe
  id=$(container_of "$pod"); [ -n "$id" ] || die "$pod has no container id"
  img=$(ctr_ containers info "$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Image"])')
  [ "$img" = "$want_img" ] || die "$pod's container runs image $img, not $want_img"
  pid=$(ctr_ tasks ls | awk -v id="$id" '$1 == id {print $2}')
  [ -n "$pid" ] && [ "$pid" != 0 ] || die "$pod's container has no task in containerd"
  exe=$(readlink "/proc/$pid/exe")
  case "$exe" in "$want_exe"|*"$want_exe") ;; *) die "$pod's process $pid runs $exe, not $want_exe";; esac
  in_our_container "$W" "/proc/$pid" && grep -q "k8s.io/$id\$" "/proc/$pid/cgroup" || die "$pod's process $pid is not in the container's cgroup /k8s.io/$id"
  echo "container ${id:0:12}, pid $pid, uid $(awk '/^Uid:/ {print $2}' "/proc/$pid/status"), image $img"
}
# check_token POD SERVICEACCOUNT: the projected token kubelet gave the pod is a bound token of that
# ServiceAccount for that pod (so the pod's requests carry exactly that account's RBAC).
check_token() {
  local pod="$1" sa="$2" uid f
  uid=$(ks get pod "$pod" -o 'jsonpath={.metadata.uid}')
  f=$(find "$W/kubelet/pods/$uid/volumes/kubernetes.io~projected" -name token 2>/dev/null | head -1)
  [ -n "$f" ] || die "$pod: no projected ServiceAccount token volume (is the ServiceAccount admission plugin on?)"
  python3 - "$f" "$sa" "$pod" <<'PY' || die "$pod: the token is not a bound token of kube-system/$sa"
import base64, json, sys
tok = open(sys.argv[1]).read().strip().split(".")[1]
claims = json.loads(base64.urlsafe_b64decode(tok + "=" * (-len(tok) % 4)))
k = claims.get("kubernetes.io", {})
ok = (claims.get("sub") == f"system:serviceaccount:kube-system:{sys.argv[2]}" and
      k.get("pod", {}).get("name") == sys.argv[3] and k.get("serviceaccount", {}).get("name") == sys.argv[2])
print(f"token sub={claims.get('sub')} pod={k.get('pod', {}).get('name')} exp in {claims['exp'] - claims['iat']}s")
sys.exit(0 if ok else 1)
PY
}
# no_forbidden POD RBAC-FILE: nothing in the pod's log says the API server refused it (a missing RBAC verb).
no_forbidden() {
  ks logs "$1" >"$W/$1.log" 2>&1 || die "kubectl logs $1"
  # The log lines' own timestamps are cut first: their milliseconds can read ".403".
  if sed -E 's/^\[[^]]*\] //' "$W/$1.log" | grep -iwE '403|forbidden' >&2; then
    finding "$2: $1's log shows requests the API server refused (403/forbidden), a verb missing from its RBAC: $(sed -E 's/^\[[^]]*\] //' "$W/$1.log" | grep -iwE '403|forbidden' | head -1 | cut -c1-200)"
    return 1
  fi
}

# start_error POD: the message of the container's last failed start, if any.
start_error() {
  ks get pod "$1" -o 'jsonpath={.status.containerStatuses[0].lastState.terminated.message}{.status.containerStatuses[0].state.terminated.message}'
}

# --- the device plugin, from the DaemonSet ------------------------------------------------------
run_pod daemonset neuron-device-plugin-daemonset device-plugin
DP_POD=$POD
wait_for 90 "the device plugin pod to run or fail to start" bash -c \
  "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig -n kube-system get pod $DP_POD -o 'jsonpath={.status.containerStatuses[0].state.running.startedAt}{.status.containerStatuses[0].lastState.terminated.message}')\" != '' ]"
if ! running "$DP_POD" && grep -q 'termination-log.*read-only file system' <<<"$(start_error "$DP_POD")"; then
  finding "deploy/device-plugin.yaml: /dev is mounted read-only at /dev and terminationMessagePath is the default /dev/termination-log, so runc cannot create that mount point and the container never starts: $(start_error "$DP_POD" | grep -o 'error mounting.*' | cut -c1-200)"
  ks delete pod "$DP_POD" --grace-period=0 --force >/dev/null 2>&1 || die "delete $DP_POD"
  wait_for 60 "$DP_POD deleted" bash -c "! $KUBECTL --kubeconfig $W/admin.kubeconfig -n kube-system get pod $DP_POD"
  log "the device plugin pod again, with terminationMessagePath /tmp/termination-log"
  MOVE_TERMINATION_LOG=1 run_pod daemonset neuron-device-plugin-daemonset device-plugin
  DP_POD=$POD
fi
wait_running 90 "$DP_POD"
info=$(check_in_container "$DP_POD") || exit 1
pass "device plugin pod $DP_POD Running: $info"
check_token "$DP_POD" neuron-device-plugin >&2
wait_for 60 "$KUBELET_NODE allocatable aws.amazon.com/neuron=$KUBELET_DEVICES" \
  bash -c "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig get node $KUBELET_NODE -o 'jsonpath={.status.allocatable.aws\.amazon\.com/neuron}')\" = $KUBELET_DEVICES ]"
wait_for 30 "$KUBELET_NODE allocatable aws.amazon.com/neuroncore=$KUBELET_CORES" \
  bash -c "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig get node $KUBELET_NODE -o 'jsonpath={.status.allocatable.aws\.amazon\.com/neuroncore}')\" = $KUBELET_CORES ]"
grep -q "registered aws.amazon.com/neuron " <<<"$(ks logs "$DP_POD")" || die "the in-pod plugin did not log its registration"
pass "in-pod device plugin registered: $KUBELET_NODE advertises $(node_allocatable kn aws.amazon.com/neuron) devices, $(node_allocatable kn aws.amazon.com/neuroncore) cores"
# The DaemonSet's readinessProbe (/readyz): ready once the kubelet holds the plugin's devices.
wait_for 60 "the device plugin pod Ready (its readinessProbe on /readyz)" ready "$DP_POD"
pass "device plugin pod Ready (kubelet's readinessProbe): $(curl -s "http://127.0.0.1:$DP_PROBE_PORT/readyz" | cut -c1-160)"

# --- the extender, from the Deployment ----------------------------------------------------------
run_pod deployment k8s-neuron-scheduler extender
EXT_POD=$POD
wait_running 90 "$EXT_POD"
info=$(check_in_container "$EXT_POD") || exit 1
pass "extender pod $EXT_POD Running: $info"
check_token "$EXT_POD" k8s-neuron-scheduler >&2
wait_for 60 "the extender pod Ready (its readinessProbe on /readyz)" ready "$EXT_POD"
curl -sfk "https://127.0.0.1:$EXT_PORT/readyz" >/dev/null || die "the in-pod extender does not answer HTTPS on 127.0.0.1:$EXT_PORT"
# The probes are anonymous; the scheduler's verbs are not: without a client certificate 403, plain
# HTTP never gets an answer, and with my-scheduler's certificate (verified against the CA) it serves.
tls="$W/extender-tls"
code=$(curl -sk -o /dev/null -w '%{http_code}' -XPOST -H 'Content-Type: application/json' -d '{}' "https://127.0.0.1:$EXT_PORT/filter")
[ "$code" = 403 ] || die "POST /filter without a client certificate answered $code, expected 403"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -XPOST -d '{}' "http://127.0.0.1:$EXT_PORT/filter" || true)
[ "$code" = 000 ] || die "POST /filter in plain HTTP answered $code, expected no HTTP answer"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tls/ca.crt" --cert "$tls/tls.crt" --key "$tls/tls.key" \
  --resolve "k8s-neuron-scheduler.kube-system.svc:$EXT_PORT:127.0.0.1" -XPOST -H 'Content-Type: application/json' -d '{}' \
  "https://k8s-neuron-scheduler.kube-system.svc:$EXT_PORT/filter")
[ "$code" != 000 ] && [ "$code" != 403 ] || die "POST /filter with my-scheduler's client certificate answered $code"
pass "extender pod Ready (kubelet's readinessProbe) and answering HTTPS on 127.0.0.1:$EXT_PORT: /filter 403 without a client certificate, none in plain HTTP, $code with my-scheduler's (verified against the Secret's CA)"

# --- my-scheduler, from the Deployment ----------------------------------------------------------
# The chart rendered the image for the live cluster (helm install); the imported build of this
# control plane's kube-scheduler must be exactly that image, or the kubelet could not start it.
api_version=$(k8s_server_version)
if [ -z "$HELM" ]; then
  # deploy/ (kubectl, no helm) is rendered for 1.35: its tag is set to the cluster's version, as
  # docs/install.md tells an operator to.
  ks set image deployment/my-scheduler "kube-scheduler=registry.k8s.io/kube-scheduler:$(k8s_release_tag "$api_version")" >/dev/null ||
    die "set my-scheduler's image of deploy/my-scheduler.yaml"
fi
sched_image=$(ks get deployment my-scheduler -o 'jsonpath={.spec.template.spec.containers[0].image}')
[ "$sched_image" = "$E2E_SCHED_IMAGE" ] ||
  die "the chart rendered my-scheduler's image $sched_image for API server $api_version; the harness built $E2E_SCHED_IMAGE"
# kube-scheduler serves HTTPS on 0.0.0.0:10259 (the probes' port), which hostNetwork puts on this machine.
port_free 10259 || die "127.0.0.1:10259 is in use: my-scheduler's pod (hostNetwork) serves its probes there"
run_pod deployment my-scheduler my-scheduler
SCHED_POD=$POD
wait_running 90 "$SCHED_POD"
info=$(check_in_container "$SCHED_POD" "$E2E_SCHED_IMAGE" /usr/local/bin/kube-scheduler) || exit 1
pass "my-scheduler pod $SCHED_POD Running: $info"
check_token "$SCHED_POD" my-scheduler >&2
sched_log() { ks logs "$SCHED_POD" 2>/dev/null; }
started_line() { sched_log | grep -m1 'Starting Kubernetes Scheduler'; }
wait_for 60 "my-scheduler's start line in its log" started_line
grep -qE "version=\"?$(k8s_release_tag "$api_version")\b" <<<"$(started_line)" ||
  die "my-scheduler's pod is not kube-scheduler $api_version: $(started_line)"
# It holds its lease (kube-system/my-scheduler); with hostNetwork its identity starts with this
# machine's hostname.
holder() { ks get lease my-scheduler -o 'jsonpath={.spec.holderIdentity}'; }
holds_lease() { holder | grep -q "^$(hostname)_"; }
wait_for 60 "my-scheduler to hold lease kube-system/my-scheduler" holds_lease
# klog's text: 1.37 `"Successfully acquired lease" lock="kube-system/my-scheduler"`, older `successfully acquired lease kube-system/my-scheduler`.
acquired() { sched_log | grep -qiE 'successfully acquired lease.*kube-system/my-scheduler'; }
wait_for 30 "my-scheduler's log to say it acquired the lease" acquired
wait_for 60 "the my-scheduler pod Ready (its readinessProbe, HTTPS :10259/healthz)" ready "$SCHED_POD"
pass "my-scheduler pod runs kube-scheduler $api_version from $E2E_SCHED_IMAGE (its log: $(started_line | grep -oE 'version="?[^ "]+"?')), holds lease kube-system/my-scheduler ($(holder)) and is Ready by the chart's probe"

# --- a Neuron pod through my-scheduler, the in-pod extender and the in-pod device plugin -----------
# The workload uses the same image: `toposched allocate` prints a plan and exits 0. hostNetwork: a pod
# network needs a CNI plugin, which this node has not.
workload() {
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"app":"e2e"},"annotations":{"example.com/keep":"mine"}},"spec":{"schedulerName":"my-scheduler","restartPolicy":"Never","hostNetwork":true,"terminationGracePeriodSeconds":0,"nodeSelector":{"kubernetes.io/hostname":"%s"},"containers":[{"name":"main","image":"%s","imagePullPolicy":"Never","command":["/usr/local/bin/toposched","allocate","--instance-type","inf2.48xlarge","--devices","%s"],"resources":{"limits":{"aws.amazon.com/neuron":"%s"},"requests":{"cpu":"100m"}}}]}}' \
    "$1" "$KUBELET_NODE" "$E2E_IMAGE" "$2" "$2"
}
out=$(api POST /api/v1/namespaces/default/pods "$(workload dev-3 3)") || die "create pod dev-3"
grep -q '"kind": *"Pod"' <<<"$out" || die "create pod dev-3: $out"
wait_bound 60 dev-3
[ "$(pod_node dev-3)" = "$KUBELET_NODE" ] || die "dev-3 bound to $(pod_node dev-3)"
check_annotations dev-3
ids=$(pod_ids dev-3)
grep -q "dev-3" <<<"$(ks logs "$EXT_POD")" || die "the in-pod extender's log does not mention dev-3 (did it bind it?)"
grep -q 'Successfully bound pod to node.*dev-3' <<<"$(sched_log)" || die "the in-pod my-scheduler's log does not say it bound dev-3"
pass "dev-3 scheduled by the in-pod my-scheduler and bound by the in-pod extender to $KUBELET_NODE with AWS_NEURON_IDS=$ids (over TLS with my-scheduler's client certificate: the extender refuses plain HTTP and verbs without one)"
dp_log() { ks logs "$DP_POD" 2>/dev/null; }
allocate_logged() { grep -q "Allocate aws.amazon.com/neuron .*dev-3" <<<"$(dp_log)"; }
wait_for 60 "the in-pod plugin's Allocate for dev-3" allocate_logged
wait_for 30 "NEURON_ALLOCATED=true on dev-3" bash -c "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig -n default get pod dev-3 -o 'jsonpath={.metadata.annotations.NEURON_ALLOCATED}')\" = true ]"
uid=$(pod_field dev-3 '{.metadata.uid}')
wait_for 30 "kubelet's checkpoint for dev-3" grep -q "$uid" "$checkpoint"
kids=$(python3 - "$checkpoint" "$uid" <<'PY'
import json, re, sys
ids = []
for e in json.load(open(sys.argv[1]))["Data"].get("PodDeviceEntries") or []:
    if e["PodUID"] == sys.argv[2] and e["ResourceName"] == "aws.amazon.com/neuron":
        d = e["DeviceIDs"]
        ids += [int(re.sub(r"\D", "", v)) for v in ([v for vs in d.values() for v in vs] if isinstance(d, dict) else d)]
print(",".join(map(str, sorted(set(ids)))))
PY
)
[ "$kids" = "$ids" ] || die "dev-3: kubelet's checkpoint has $kids, the extender recorded $ids"
pass "kubelet called the in-pod plugin's Allocate for dev-3 and its checkpoint holds $kids: $(dp_log | grep "Allocate aws.amazon.com/neuron .*dev-3" | tail -1 | sed 's/^.*\] //' | cut -c1-150)"

# The workload's container: kubelet hands containerd the device nodes the plugin returned
# (/dev/neuronN of the host). This machine has no Neuron driver, so they do not exist and the
# container cannot be created; the error must name exactly the allocated devices.
first=${ids%%,*}
wait_for 60 "dev-3's container to be tried with /dev/neuron$first" bash -c \
  "$KUBECTL --kubeconfig $W/admin.kubeconfig -n default get events --field-selector involvedObject.name=dev-3 -o 'jsonpath={range .items[*]}{.message}{\"\\n\"}{end}' | grep -q '/dev/neuron'"
msg=$(events_of dev-3 | grep '/dev/neuron' | head -1)
echo "$msg" | grep -qE "/dev/neuron($(tr , '|' <<<"$ids"))\b" || die "dev-3's container was given other devices than $ids: $msg"
pass "dev-3's sandbox started (pause image); its container asked for the plugin's device nodes, absent without a driver: $(cut -c1-160 <<<"$msg")"

# A pod without Neuron devices from the same image runs to completion.
out=$(api POST /api/v1/namespaces/default/pods "$(workload cpu-only 1 | python3 -c 'import json,sys; p=json.load(sys.stdin); c=p["spec"]["containers"][0]; del c["resources"]["limits"]; p["spec"]["schedulerName"]="my-scheduler"; print(json.dumps(p))')") || die "create pod cpu-only"
wait_for 90 "cpu-only Succeeded" bash -c "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig -n default get pod cpu-only -o 'jsonpath={.status.phase}')\" = Succeeded ]"
pass "cpu-only ran our image to completion: $(k -n default logs cpu-only | head -2 | tr '\n' ' ')"

# --- the three pods: still running, no restarts, never refused by the API server ---------------
for p in "$DP_POD" "$EXT_POD" "$SCHED_POD"; do
  running "$p" || die "$p is no longer running"
  [ "$(ks get pod "$p" -o 'jsonpath={.status.containerStatuses[0].restartCount}')" = 0 ] || die "$p restarted"
done
forbidden=0
no_forbidden "$DP_POD" deploy/device-plugin-rbac.yaml || forbidden=1
no_forbidden "$EXT_POD" deploy/extender-rbac.yaml || forbidden=1
no_forbidden "$SCHED_POD" deploy/my-scheduler.yaml || forbidden=1
[ $forbidden = 1 ] || pass "no pod restarted, no log shows a 403/forbidden: the RBAC of deploy/*-rbac.yaml and deploy/my-scheduler.yaml is enough"

if [ ${#FINDINGS[@]} -gt 0 ]; then
  log "everything else passed; the manifests in deploy/ have ${#FINDINGS[@]} problem(s):"
  for f in "${FINDINGS[@]}"; do log "  - $f"; done
  die "deploy/ needs fixing (see FINDING lines above)"
fi
