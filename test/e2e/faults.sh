#!/usr/bin/env bash
# No device given twice under the faults real clusters have (issue 18), end to end: the real
# kube-apiserver and kube-scheduler 1.20.2, two `toposched extender --leader-elect` replicas behind
# a stand-in for their Service (ready_proxy.py), both talking to the API server THROUGH a
# fault-injecting proxy (fault_proxy.py), and a real kubelet with `toposched device-plugin` on node
# kn, whose own API traffic goes through a second instance of the proxy. Phases, each on nodes of
# its own (label toposched.io/e2e-phase):
#   a  a third of the Bindings applied by the API server but answered 504 (seeded); watch events
#      1.5 s late
#   b  pod watch events delivered 1.5 s late
#   c  pod watches ended with 410 every few events, the relist's LIST answered from a snapshot
#      3 s old (with its old resourceVersion), the new watch's events 1 s late
#   e  a node deleted and created again while its pods run; then more pods on it
#   f  on the kubelet node: y bound before x though x was created first; the kubelet sees both at
#      once (its pod watch refused with 410 and its relist held until both are bound), so it admits
#      them in creation order; then y is deleted and z takes y's recorded devices
#   t  the leader SIGTERMed while its Bindings are held 8 s by the proxy; more pods once the
#      Service routes to the new leader
#   k  the leader SIGKILLed while its Bindings are held 8 s by the proxy; more pods once the
#      Service routes to the new leader
# At the end, over EVERY pod (fault_check.py): no device in the records of two live pods, none in
# the kubelet's checkpoint (its PodResources state) for two live pods nor in the device nodes its
# Allocate responses gave two live containers, and every pod that fits somewhere is bound. Prints
# FAULTS lines (per phase) and the SUMMARY. Synchronisation is by polling with deadlines only; the
# pods of phase c are paced (0.4 s apart) as a workload, not to wait for anything.
# TOPOSCHED_E2E_FAULT_SEED seeds the 504s (default 18).
source "$(dirname "$0")/lib.sh"
e2e_init faults
SEED="${TOPOSCHED_E2E_FAULT_SEED:-18}"
FPROXY_PORT=$((E2E_PORT_BASE + 349))  # the extenders' API server
KPROXY_PORT=$((E2E_PORT_BASE + 350))  # the kubelet's API server
PORT_A=$EXT_PORT
PORT_B=$((E2E_PORT_BASE + 347))
SVC_PORT=$((E2E_PORT_BASE + 348))
for p in $FPROXY_PORT $KPROXY_PORT $PORT_B $SVC_PORT; do
  port_free "$p" || die "127.0.0.1:$p is in use (set TOPOSCHED_E2E_PORT_BASE)"
done
e2e_control_plane
T_START=$(date +%s)

# --- the fault proxies ---------------------------------------------------------------------------

# fault_proxy NAME PORT: a fault_proxy.py in front of the API server (its certificate, so clients
# keep verifying against the cluster CA), controlled by $W/NAME.json, status in $W/NAME.status.json.
fault_proxy() {
  echo '{}' >"$W/$1.json"
  start "$1" "$W/$1.log" python3 "$E2E_DIR/fault_proxy.py" --port "$2" --upstream-port "$API_PORT" \
    --cert "$W/pki/apiserver.crt" --key "$W/pki/apiserver.key" --ca "$W/pki/ca.crt" \
    --control "$W/$1.json" --status "$W/$1.status.json" --lifetime "${TOPOSCHED_E2E_TIMEOUT:-600}"
  wait_for 30 "$1 on 127.0.0.1:$2" curl -sf --cacert "$W/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" "https://127.0.0.1:$2/readyz"
}
# faults NAME JSON: switch NAME's faults (the file is replaced atomically; read on each request).
faults() { printf '%s\n' "$2" >"$W/$1.json.tmp" && mv "$W/$1.json.tmp" "$W/$1.json"; log "faults $1: $2"; }
# pstat NAME KEY: a counter of NAME's status (0 when absent); pheld NAME: bindings held now.
pstat() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"].get(sys.argv[2], 0))' "$W/$1.status.json" "$2"; }
pheld() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["held"]))' "$W/$1.status.json"; }
# For wait_for (which runs shell functions): NAME's counter KEY is at least N; NAME holds N Bindings.
pstat_at_least() { [ "$(pstat "$1" "$2")" -ge "$3" ]; }
held_at_least() { [ "$(pheld "$1")" -ge "$2" ]; }
gone() { ! k get "$@" >/dev/null 2>&1; }
# via_proxy SRC DST PORT: a copy of kubeconfig SRC whose server is the proxy on PORT.
via_proxy() { sed "s#server: https://127.0.0.1:$API_PORT#server: https://127.0.0.1:$3#" "$1" >"$2"; }

fault_proxy fproxy "$FPROXY_PORT"
fault_proxy kproxy "$KPROXY_PORT"

# --- nodes -----------------------------------------------------------------------------------------

# phase_nodes PHASE COUNT TYPE: nodes PHASE-0.. labelled toposched.io/e2e-phase=PHASE.
phase_nodes() {
  local i
  e2e_nodes "$1-" "$2" "$3"
  for ((i = 0; i < $2; i++)); do label_node "$1-$i" toposched.io/e2e-phase "$1"; done
}
label_node() {
  local out
  out=$(api PATCH "/api/v1/nodes/$1" "{\"metadata\":{\"labels\":{\"$2\":\"$3\"}}}" application/merge-patch+json) ||
    die "label node $1 $2=$3"
  grep -q '"kind": *"Node"' <<<"$out" || die "label node $1 $2=$3: $out"
}
phase_nodes a 3 inf2.48xlarge
phase_nodes b 1 inf2.48xlarge
phase_nodes c 3 inf2.48xlarge
phase_nodes e 1 trn1.32xlarge
phase_nodes t 1 trn1.32xlarge
phase_nodes k 1 trn1.32xlarge
# The kubelet talks to the API server through kproxy from its start.
via_proxy "$W/admin.kubeconfig" "$W/kubelet-via-proxy.kubeconfig" "$KPROXY_PORT"
E2E_KUBELET_KUBECONFIG="$W/kubelet-via-proxy.kubeconfig"
e2e_kubelet_node kn inf2.48xlarge
label_node kn toposched.io/e2e-phase f

# --- the extenders ----------------------------------------------------------------------------------

# Every replica is started by ext_up, and only there: the chart's leader election (lease 15 s,
# renew deadline 10 s, retry 2 s), the chart's RBAC (a TokenRequest token of the
# k8s-neuron-scheduler ServiceAccount), plain HTTP on 127.0.0.1, and the API server reached through
# fproxy. The scheduler reaches the replicas through ready_proxy.py on SVC_PORT (the Service).
sa_kubeconfig k8s-neuron-scheduler "$W/extender.kubeconfig"
via_proxy "$W/extender.kubeconfig" "$W/extender-via-proxy.kubeconfig" "$FPROXY_PORT"
LE=(--leader-elect --leader-elect-lease-duration 15s --leader-elect-renew-deadline 10s
    --leader-elect-retry-period 2s --leader-elect-resource-name k8s-neuron-scheduler
    --leader-elect-resource-namespace kube-system)
ext_up() {  # ext_up NAME PORT
  start "$1" "$W/$1.log" "$TOPOSCHED_BIN" extender --listen "127.0.0.1:$2" \
    --kubeconfig "$W/extender-via-proxy.kubeconfig" "${LE[@]}" ${TOPOSCHED_E2E_EXTENDER_ARGS:-}
}
ready() { curl -sf -o /dev/null "http://127.0.0.1:$1/readyz"; }
standby() { curl -s "http://127.0.0.1:$1/readyz" | grep -q standby; }
ext_up ext-a "$PORT_A"
wait_for 60 "ext-a leader and ready" ready "$PORT_A"
ext_up ext-b "$PORT_B"
wait_for 60 "ext-b standby" standby "$PORT_B"
start svc "$W/svc.log" python3 "$E2E_DIR/ready_proxy.py" "$SVC_PORT" 2 "$PORT_A" "$PORT_B"
wait_for 30 "the Service stand-in's endpoint" ready "$SVC_PORT"
e2e_scheduler true "" all "http://127.0.0.1:$SVC_PORT"
log "cluster up in $(($(date +%s) - T_START)) s: leader ext-a, standby ext-b, both through the fault proxy"

# --- helpers ---------------------------------------------------------------------------------------

ALL_PODS=()
# mk NAME DEVICES SELECTOR: a pod of DEVICES aws.amazon.com/neuron for my-scheduler.
mk() { create_pod "$1" aws.amazon.com/neuron "$2" "$3"; ALL_PODS+=("$1"); }
# settle SECONDS POD...: waits until each pod is bound; a pod still unbound at the deadline is
# logged and left to the final check (which fails if it fits somewhere).
settle() {
  local limit="$1" p deadline; shift
  deadline=$(($(date +%s) + limit))
  for p in "$@"; do
    until pod_bound "$p" 2>/dev/null; do
      [ "$(date +%s)" -lt "$deadline" ] || { log "still unbound after ${limit}s: $p"; break; }
      sleep 0.2
    done
  done
}
# phase_report PHASE: ids given twice among the records on the phase's nodes, so far.
phase_report() {
  k get pods -A -o json >"$W/pods-now.json"
  k get nodes -o json >"$W/nodes-now.json"
  local out
  out=$(python3 "$E2E_DIR/fault_check.py" "$W/pods-now.json" "$W/nodes-now.json" "$TOPOSCHED_BIN" "$checkpoint" kn 2>&1 || true)
  local n; n=$(sed -n "s/^phase $1: \([0-9]*\) .*/\1/p" <<<"$out")
  FAULTS_LINES+=("phase $1: $2; ${n:-0} devices given twice (records and the kubelet) on its nodes")
  log "FAULTS ${FAULTS_LINES[-1]}"
}
FAULTS_LINES=()
checkpoint=/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint

# --- a: Bindings applied but answered 504 ------------------------------------------------------------
faults fproxy "{\"bind_504\": 0.34, \"seed\": $SEED, \"watch_delay_ms\": 1500}"
pods=()
for i in $(seq 0 11); do mk "a$i" 2 toposched.io/e2e-phase=a; pods+=("a$i"); done
settle 90 "${pods[@]}"
faults fproxy '{}'
phase_report a "12 pods of 2 devices on 3 inf2.48xlarge, $(pstat fproxy bindings_applied_answered_504) Bindings applied and answered 504, watch events 1.5 s late"

# --- b: late watch events ----------------------------------------------------------------------------
faults fproxy '{"watch_delay_ms": 1500}'
pods=()
for i in $(seq 0 4); do mk "b$i" 2 toposched.io/e2e-phase=b; pods+=("b$i"); done
settle 90 "${pods[@]}"
faults fproxy '{}'
phase_report b "5 pods of 2 devices on an inf2.48xlarge, $(pstat fproxy pod_watch_frames_delayed) watch frames delivered 1.5 s late"

# --- c: 410 Gone and stale relists --------------------------------------------------------------------
faults fproxy '{"watch_410_every": 4, "stale_list_ms": 3000, "watch_delay_ms": 1000}'
# The proxy takes a pod list snapshot every 0.5 s once told stale_list_ms: have 3.5 s of them first.
wait_for 30 "the proxy's pod list snapshots" pstat_at_least fproxy snapshots 7
pods=()
for i in $(seq 0 11); do mk "c$i" 2 toposched.io/e2e-phase=c; pods+=("c$i"); sleep 0.4; done
settle 120 "${pods[@]}"
faults fproxy '{}'
phase_report c "12 pods of 2 devices on 3 inf2.48xlarge, $(pstat fproxy pod_watches_ended_410) watches ended with 410, $(pstat fproxy stale_lists) stale LISTs missing $(pstat fproxy binds_missing_from_stale_lists) Bindings in all"

# --- e: a node deleted and created again while its pods run ---------------------------------------------
mk e0 4 toposched.io/e2e-phase=e
mk e1 4 toposched.io/e2e-phase=e
settle 60 e0 e1
api DELETE /api/v1/nodes/e-0 >/dev/null || die "delete node e-0"
wait_for 30 "node e-0 gone" gone node e-0
e2e_node e-0 trn1.32xlarge
label_node e-0 toposched.io/e2e-phase e
mk e2 4 toposched.io/e2e-phase=e
mk e3 4 toposched.io/e2e-phase=e
settle 60 e2 e3
phase_report e "2 pods of 4 devices on a trn1.32xlarge, the node deleted and re-created, then 2 more"

# --- f: the kubelet admits in creation order, not bind order ---------------------------------------------
in_checkpoint() { [ -f "$checkpoint" ] && grep -q "$(pod_field "$1" '{.metadata.uid}')" "$checkpoint"; }
admitted() { in_checkpoint "$1" || events_of "$1" | grep -q UnexpectedAdmissionError; }
# The kubelet's pod watch ends and its next one is refused (410): it relists, and its LIST is held.
faults kproxy '{"refuse_pod_watches": true, "hold_pod_lists": true, "expire": 1}'
wait_for 60 "the kubelet's pod LIST held by kproxy" pstat_at_least kproxy pod_lists_held 1
# x first (kept off kn by a NoSchedule taint that y tolerates; the kubelet does not check taints),
# then y one second later (creationTimestamp has seconds): y is bound first, then the taint goes.
taint_kn() { api PATCH /api/v1/nodes/kn "{\"spec\":{\"taints\":$1}}" application/merge-patch+json >/dev/null || die "taints of kn"; }
taint_kn '[{"key":"toposched.io/e2e-gate","effect":"NoSchedule"}]'
mk fx 2 kubernetes.io/hostname=kn
xs=$(date -d "$(pod_field fx '{.metadata.creationTimestamp}')" +%s)
wait_for 5 "the next second" bash -c "[ \$(date +%s) -gt $xs ]"
out=$(api POST /api/v1/namespaces/default/pods "$(pod_json fy aws.amazon.com/neuron 2 kubernetes.io/hostname=kn |
  sed 's/"spec":{/"spec":{"tolerations":[{"key":"toposched.io\/e2e-gate","operator":"Exists"}],/')") || die "create pod fy"
grep -q '"kind": *"Pod"' <<<"$out" || die "create pod fy: $out"
ALL_PODS+=(fy)
settle 60 fy
taint_kn null
settle 60 fx
log "on kn: fx (created first) bound second with $(pod_ids fx); fy (created second) bound first with $(pod_ids fy)"
faults kproxy '{"expire": 1}'
wait_for 60 "the kubelet's admission of fx" admitted fx
wait_for 60 "the kubelet's admission of fy" admitted fy
api DELETE "/api/v1/namespaces/default/pods/fy?gracePeriodSeconds=0" >/dev/null || die "delete fy"
wait_for 30 "fy gone" gone -n default pod fy
mk fz 2 kubernetes.io/hostname=kn
settle 60 fz
wait_for 60 "the kubelet's admission of fz" admitted fz
phase_report f "fx, fy, fz of 2 devices on the kubelet node (fz bound with $(pod_ids fz) after fy went)"

# --- t: the leader SIGTERMed while its Bindings are slow ----------------------------------------------------
# svc_on PORT: the Service stand-in routes to PORT alone (its last endpoints line).
svc_on() { grep endpoints "$W/svc.log" | tail -1 | grep -q "endpoints \[$1\]"; }
# The new pods are created once the Service routes to the new leader (pods the scheduler found no
# extender for would wait in its unschedulable queue for a minute), while the old leader's two
# Bindings are still held: 8 s, under the scheduler's 10 s httpTimeout for the extender.
faults fproxy '{"bind_delay_ms": 8000}'
mk t0 4 toposched.io/e2e-phase=t
mk t1 4 toposched.io/e2e-phase=t
wait_for 60 "2 Bindings held by the proxy" held_at_least fproxy 2
kill -TERM "$(pid_of ext-a)"
log "SIGTERM to the leader ext-a with $(pheld fproxy) Bindings held"
wait_for 60 "ext-b to lead" ready "$PORT_B"
wait_for 30 "the Service on ext-b" svc_on "$PORT_B"
log "ext-b leads and the Service routes to it; the proxy holds $(pheld fproxy) Bindings"
mk t2 4 toposched.io/e2e-phase=t
mk t3 4 toposched.io/e2e-phase=t
settle 90 t0 t1 t2 t3
stop ext-a
phase_report t "4 pods of 4 devices on a trn1.32xlarge (16), Bindings held 8 s, the leader SIGTERMed with 2 held"

# --- k: the leader SIGKILLed while its Bindings are slow ----------------------------------------------------
ext_up ext-c "$PORT_A"
wait_for 60 "ext-c standby" standby "$PORT_A"
mk k0 4 toposched.io/e2e-phase=k
mk k1 4 toposched.io/e2e-phase=k
wait_for 60 "2 Bindings held by the proxy" held_at_least fproxy 2
kill -KILL "$(pid_of ext-b)"
log "SIGKILL to the leader ext-b with $(pheld fproxy) Bindings held"
wait_for 60 "ext-c to lead" ready "$PORT_A"
wait_for 30 "the Service on ext-c" svc_on "$PORT_A"
log "ext-c leads and the Service routes to it; the proxy holds $(pheld fproxy) Bindings"
mk k2 4 toposched.io/e2e-phase=k
mk k3 4 toposched.io/e2e-phase=k
settle 90 k0 k1 k2 k3
faults fproxy '{}'
phase_report k "4 pods of 4 devices on a trn1.32xlarge (16), Bindings held 8 s, the leader SIGKILLed with 2 held"

# --- the invariant, over every pod and the kubelet -----------------------------------------------------------
k get pods -A -o json >"$W/pods.json"
k get nodes -o json >"$W/nodes.json"
rc=0
out=$(python3 "$E2E_DIR/fault_check.py" "$W/pods.json" "$W/nodes.json" "$TOPOSCHED_BIN" "$checkpoint" kn) || rc=$?
printf '%s\n' "$out" >&2
for l in "${FAULTS_LINES[@]}"; do log "FAULTS $l"; done
conflicts=$(cat "$W"/ext-*.log | grep -ci conflict || true)
refused=$(cat "$W"/ext-*.log | grep -c 'a stale snapshot, not delivered' || true)
log "FAULTS run: seed $SEED, ${#ALL_PODS[@]} pods created, $(($(date +%s) - T_START)) s; extenders logged $conflicts lines about conflicts and refused $refused stale pod lists; fault proxy: $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["counts"], sort_keys=True))' "$W/fproxy.status.json")"
log "FAULTS $(grep '^SUMMARY' <<<"$out")"
[ "$rc" = 0 ] || die "the invariant does not hold (see the lines above)"
pass "no device given twice over ${#ALL_PODS[@]} pods under every fault, the kubelet agrees, every pod that fits is bound"
