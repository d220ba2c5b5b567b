#!/usr/bin/env bash
# Count requests through DRA (docs/dra.md, "Count requests"): pods written for the device plugin
# (`aws.amazon.com/neuron: N`) in a namespace, or with a label, that opts in are rewritten at
# creation by `toposched admission-webhook` into ResourceClaims from per-size templates, and
# kube-scheduler 1.37's DRA allocator places them on toposched's default slices. A real API server
# runs the chart's MutatingWebhookConfiguration (selectors, matchConditions, failurePolicy) and the
# resourceclaim controller makes each claim; 16 fake nodes (inf2.48xlarge, trn2.48xlarge,
# inf2.24xlarge, trn1.32xlarge) publish the slices the plugin would (dra_oracle), no kubelet.
#   (a) a dry run is rewritten and creates no template; a pod not opted in is left alone
#   (b) 56 pods of 8, 4, 2 and 1 devices, labelled toposched.io/neuron-dra=true: all placed, every
#       allocated set legal by the project's rule (dra_oracle legal); 2-device pods only fit the
#       Inferentia rings (Trainium's aligned rows have no 2)
#   (c) a namespace labelled toposched.io/neuron-dra=true: its pods are rewritten, its templates
#       made there
#   (d) what the webhook refuses, with the reason the user sees: an init container asking devices
source "$(dirname "$0")/lib.sh"
minor=$(cut -d. -f2 <<<"${TOPOSCHED_E2E_K8S:-1.20}")
[[ "$minor" =~ ^[0-9]+$ ]] && [ "$minor" -ge 37 ] ||
  skip "count requests through DRA run on 1.37 only here (the slices' device sets need partitionable devices, on from 1.36); this is ${TOPOSCHED_E2E_K8S:-1.20}"
e2e_init countreq
e2e_why() {
  [ -n "${WEBHOOK_LOG:-}" ] && [ -f "$WEBHOOK_LOG" ] && { echo "admission webhook:"; tail -n 6 "$WEBHOOK_LOG"; }
  [ -n "${SCHED_LOG:-}" ] && [ -f "$SCHED_LOG" ] && { echo "kube-scheduler:"; grep -iE "unschedulable|claim|error" "$SCHED_LOG" | tail -n 6; }
  return 0
}
ORACLE="$(dirname "$TOPOSCHED_BIN")/test/e2e/dra_oracle"
[ -x "$ORACLE" ] || die "no $ORACLE: build the e2e tree (cmake -DTOPOSCHED_E2E=ON) first"
E2E_HELM_SETS=(--set draDriver.enabled=true)
e2e_control_plane
# deploy/ (kubectl apply, no helm) carries the webhook's caBundle as a placeholder to fill in.
[ -n "$HELM" ] || skip "no helm: the chart makes the webhook's certificate and caBundle (scripts/install-tools.sh installs helm)"
e2e_nodes c- 16 inf2.48xlarge trn2.48xlarge inf2.24xlarge trn1.32xlarge
export API="https://127.0.0.1:$API_PORT" TOKEN="$ADMIN_TOKEN" CA="$W/pki/ca.crt"
python3 "$E2E_DIR/dra_bench.py" slices ours "$W/nodes-c-.txt" "$ORACLE" || die "publishing the slices"
e2e_controller_manager resourceclaim-controller
e2e_admission_webhook

# pod_json NAME COUNT [LABELLED] [NAMESPACE]: a pod asking COUNT devices the device plugin's way.
pod_json() {
  python3 - "$@" <<'PY'
import json, sys
name, count = sys.argv[1], sys.argv[2]
labelled = len(sys.argv) > 3 and sys.argv[3] == "yes"
labels = {"app": "countreq"}
if labelled: labels["toposched.io/neuron-dra"] = "true"
print(json.dumps({"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": name, "labels": labels},
  "spec": {"schedulerName": "my-scheduler", "terminationGracePeriodSeconds": 0,
           "containers": [{"name": "main", "image": "registry.invalid/neuron-app:1",
                           "resources": {"limits": {"aws.amazon.com/neuron": count},
                                         "requests": {"cpu": "10m"}}}]}}))
PY
}
templates_in() { k -n "$1" get resourceclaimtemplates -o name 2>/dev/null | sort | tr '\n' ' '; }

# (a) The dry run: rewritten, nothing created. Not opted in: unchanged.
out=$(pod_json dry 4 yes | k -n default create --dry-run=server -o json -f -) || die "(a) dry-run create failed: $out"
python3 - "$out" <<'PY' || die "(a) the dry run was not rewritten as expected"
import json, sys
pod = json.loads(sys.argv[1])
c = pod["spec"]["containers"][0]
assert "aws.amazon.com/neuron" not in c["resources"].get("limits", {}), c["resources"]
assert c["resources"]["claims"] == [{"name": "toposched-neuron-0"}], c["resources"]
rc = pod["spec"]["resourceClaims"]
assert rc == [{"name": "toposched-neuron-0", "resourceClaimTemplateName": "toposched-neuron-devices-4-v1"}], rc
assert pod["metadata"]["annotations"]["toposched.io/count-requests"] == "main=aws.amazon.com/neuron:4"
PY
[ -z "$(templates_in default)" ] || die "(a) a dry run created templates: $(templates_in default)"
out=$(pod_json plain 4 no | k -n default create --dry-run=server -o json -f -) || die "(a) dry-run create failed: $out"
python3 -c 'import json,sys; p=json.loads(sys.argv[1]); assert p["spec"]["containers"][0]["resources"]["limits"]["aws.amazon.com/neuron"] == "4" and "resourceClaims" not in p["spec"]' "$out" ||
  die "(a) a pod without the label was changed"
pass "(a) a labelled pod's dry run is rewritten (claim from toposched-neuron-devices-4-v1, annotation), no template made; an unlabelled pod is unchanged"

# (b) 56 labelled pods, largest first.
python3 - "$W/pods.txt" <<'PY'
import json, sys
with open(sys.argv[1], "w") as out:
    for size, n in ((8, 8), (4, 12), (2, 12), (1, 24)):
        for i in range(n):
            out.write(f"cr-{size}-{i} {size}\n")
PY
while read -r name size; do
  pod_json "$name" "$size" yes | k -n default create -f - >>"$W/create.log" 2>&1 || { tail -3 "$W/create.log" >&2; die "(b) creating $name"; }
done <"$W/pods.txt"
e2e_scheduler_config "$W/sched.yaml" true 1000 none
SCHED_LOG="$W/scheduler.log"
start my-scheduler "$SCHED_LOG" "$K8S_BIN/kube-scheduler" --config "$W/sched.yaml" $(sched_port_flags) $(log_flags) --v=2
all_bound() { [ "$(k -n default get pods -l app=countreq -o jsonpath='{range .items[?(@.spec.nodeName)]}x{end}' | wc -c)" -ge 56 ]; }
wait_for 180 "56 pods placed" all_bound
checked=$(python3 "$E2E_DIR/dra_bench.py" check "$W/nodes-c-.txt" "$ORACLE") || die "(b) checking the allocations"
[ "${checked% *}" = 56 ] || die "(b) $checked: expected 56 allocated claims"
[ "${checked#* }" = 0 ] || die "(b) ${checked#* } illegal sets allocated"
# Where the 2-device pods went, and that each claim came from its size's template.
placement=$(k -n default get pods -l app=countreq -o json | python3 -c '
import json, sys
types = dict(l.split()[:2] for l in open(sys.argv[1]))
pods = json.load(sys.stdin)["items"]
where = {}
for p in pods:
    size = p["metadata"]["name"].split("-")[1]
    assert p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == f"toposched-neuron-devices-{size}-v1", p["metadata"]["name"]
    where.setdefault(size, set()).add(types[p["spec"]["nodeName"]])
assert where["2"] <= {"inf2.48xlarge", "inf2.24xlarge"}, where["2"]
print("; ".join(f"{s} devices on {sorted(t)}" for s, t in sorted(where.items())))
' "$W/nodes-c-.txt") || die "(b) the pods' claims or placement: $placement"
pass "(b) 56 count requests placed, $checked (claims, illegal) checked by dra_oracle legal; $placement; templates $(templates_in default)"

# (c) A namespace that opts in: its pods are rewritten without a label of their own.
k create namespace ml >/dev/null && k label namespace ml toposched.io/neuron-dra=true >/dev/null || die "(c) namespace ml"
pod_json ns-pod 8 no | k -n ml create -f - >>"$W/create.log" 2>&1 || die "(c) creating ml/ns-pod"
rewritten=$(k -n ml get pod ns-pod -o 'jsonpath={.spec.resourceClaims[0].resourceClaimTemplateName}')
[ "$rewritten" = toposched-neuron-devices-8-v1 ] || die "(c) ml/ns-pod not rewritten: '$rewritten'"
[ "$(templates_in ml)" = "resourceclaimtemplate.resource.k8s.io/toposched-neuron-devices-8-v1 " ] || die "(c) templates in ml: $(templates_in ml)"
pass "(c) namespace ml labelled: ml/ns-pod rewritten, template made in ml"

# (d) An init container asking devices: refused, and the user reads why.
bad=$(pod_json init-pod 1 yes | python3 -c '
import json, sys
p = json.load(sys.stdin)
p["spec"]["initContainers"] = [{"name": "warmup", "image": "registry.invalid/x:1", "resources": {"limits": {"aws.amazon.com/neuron": "1"}}}]
print(json.dumps(p))')
if out=$(k -n default create -f - <<<"$bad" 2>&1); then die "(d) a pod with an init container asking devices was admitted"; fi
grep -q 'init container "warmup" asks for aws.amazon.com/neuron: 1' <<<"$out" || die "(d) unexpected refusal: $out"
pass "(d) refused: $(grep -o 'denied the request.*' <<<"$out" | cut -c1-150)"
metrics=$(curl -sf --cacert "$W/pki/ca.crt" "https://127.0.0.1:$WEBHOOK_PORT/metrics" | grep -E 'outcome="(rewritten|refused)"|result="created"' | tr '\n' ' ')
log "webhook metrics: $metrics"
stop my-scheduler

