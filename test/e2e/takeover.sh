#!/usr/bin/env bash
# Extender HA through the real kube-scheduler: two `toposched extender --leader-elect` processes
# with the chart's settings (lease 15 s, renew deadline 10 s, retry 2 s) and the chart's RBAC (the
# lease Role), behind a stand-in for their Service (ready_proxy.py: endpoints = the replicas whose
# /readyz answers 200, probed every 2 s like the chart's readiness probe). One is the leader, the
# other a standby (readyz and filter 503). While 24 Neuron pods arrive, the leader is SIGKILLed:
# the standby must be Ready within lease duration + one retry period (+1 s of polling), every pod
# must be bound, no id given twice; the scheduler's extender errors in the gap are retried. Prints
# TAKEOVER (kill to standby Ready) and GAP (last bind of the old leader to first of the new).
# Then a new process joins as standby and the leader is SIGTERMed: it releases the lease, and the
# standby takes over at its next retry.
source "$(dirname "$0")/lib.sh"
e2e_init takeover
e2e_control_plane
e2e_nodes inf2- 3 inf2.48xlarge
e2e_nodes trn1- 3 trn1.32xlarge
sa_kubeconfig k8s-neuron-scheduler "$W/extender.kubeconfig"
PORT_A=$EXT_PORT
PORT_B=$((E2E_PORT_BASE + 347))
PROXY_PORT=$((E2E_PORT_BASE + 348))
LE=(--leader-elect --leader-elect-lease-duration 15s --leader-elect-renew-deadline 10s
    --leader-elect-retry-period 2s --leader-elect-resource-name k8s-neuron-scheduler
    --leader-elect-resource-namespace kube-system)
run_ext() {  # run_ext NAME PORT
  start "$1" "$W/$1.log" "$TOPOSCHED_BIN" extender --listen "127.0.0.1:$2" \
    --kubeconfig "$W/extender.kubeconfig" "${LE[@]}"
}
ready() { curl -sf -o /dev/null "http://127.0.0.1:$1/readyz"; }
standby() { curl -s "http://127.0.0.1:$1/readyz" | grep -q standby; }
now() { date +%s.%N; }
# Polls every 100 ms until `ready PORT`, at most LIMIT s; prints the seconds since T0.
time_to_ready() {  # time_to_ready PORT LIMIT T0
  local port="$1" limit="$2" t0="$3"
  while ! ready "$port"; do
    awk -v a="$t0" -v b="$(now)" -v l="$limit" 'BEGIN { exit !(b - a > l) }' && return 1
    sleep 0.1
  done
  awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'
}
# Unix time of a spdlog line's "[YYYY-mm-dd HH:MM:SS.mmm]" stamp.
stamp() { sed -E 's/^\[([0-9-]+ [0-9:]+)\.([0-9]+)\].*/\1 \2/' | { read -r d t ms; echo "$(date -d "$d $t" +%s).$ms"; }; }

run_ext ext-a "$PORT_A"
wait_for 60 "ext-a leader and ready" ready "$PORT_A"
run_ext ext-b "$PORT_B"
wait_for 60 "ext-b standby" standby "$PORT_B"
filter=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "http://127.0.0.1:$PORT_B/filter" -d '{}')
[ "$filter" = 503 ] || die "the standby answered filter with $filter, not 503"
pass "one leader ($(k -n kube-system get lease k8s-neuron-scheduler -o jsonpath='{.spec.holderIdentity}')), one standby (readyz and filter 503)"

start proxy "$W/proxy.log" python3 "$E2E_DIR/ready_proxy.py" "$PROXY_PORT" 2 "$PORT_A" "$PORT_B"
wait_for 30 "the proxy's endpoint" ready "$PROXY_PORT"
e2e_scheduler true "" all "http://127.0.0.1:$PROXY_PORT"

# 24 pods, one every second: 12 inf2 pods of 1,2,3,1 devices and 12 trn1 pods of 4,1,1 devices.
pods=()
for i in $(seq 0 11); do pods+=("inf-$i" "trn-$i"); done
(
  for i in $(seq 0 11); do
    sizes=(1 2 3 1); create_pod "inf-$i" aws.amazon.com/neuron "${sizes[$((i % 4))]}" node.kubernetes.io/instance-type=inf2.48xlarge
    sleep 0.5
    sizes=(4 1 1); create_pod "trn-$i" aws.amazon.com/neuron "${sizes[$((i % 3))]}" node.kubernetes.io/instance-type=trn1.32xlarge
    sleep 0.5
  done
) &
creator=$!
wait_for 30 "the leader to bind pods" at_least_bound 3
t0=$(now)
kill -KILL "$(pid_of ext-a)"
log "SIGKILL to the leader ext-a"
took=$(time_to_ready "$PORT_B" 30 "$t0") || die "the standby did not take over within 30 s of the leader's SIGKILL"
log "TAKEOVER after SIGKILL of the leader: ${took} s (lease 15 s + retry 2 s at most)"
awk -v t="$took" 'BEGIN { exit !(t <= 18) }' || die "takeover took ${took} s, more than 15 s + 2 s + 1 s"
wait "$creator" || die "creating pods failed"
wait_bound 120 "${pods[@]}"
check_no_double_allocation >&2 || die "an id was given twice"
for p in "${pods[@]}"; do check_annotations "$p"; done
by_a=$(grep -c '] bound ' "$W/ext-a.log" || true); by_b=$(grep -c '] bound ' "$W/ext-b.log" || true)
[ "$by_b" -gt 0 ] || die "the new leader bound nothing"
last_a=$(grep '] bound ' "$W/ext-a.log" | tail -1 | stamp); first_b=$(grep '] bound ' "$W/ext-b.log" | head -1 | stamp)
gap=$(awk -v a="$last_a" -v b="$first_b" 'BEGIN { printf "%.1f", b - a }')
log "GAP in binding: ${gap} s (last bind of ext-a to first of ext-b); binds: ext-a $by_a, ext-b $by_b"
stop proxy
log "the proxy answered: $(grep answered "$W/proxy.log")"
errors=$(grep -c 'failed .* with extender\|extender.*error\|503' "$SCHED_LOG" || true)
pass "24 pods bound across the takeover (ext-a $by_a, ext-b $by_b), no id twice; takeover ${took} s, gap ${gap} s, $errors scheduler log lines of extender errors, all retried"

run_ext ext-c "$PORT_A"
wait_for 60 "ext-c standby" standby "$PORT_A"
t0=$(now)
kill -TERM "$(pid_of ext-b)"
took2=$(time_to_ready "$PORT_A" 30 "$t0") || die "no takeover within 30 s of the leader's SIGTERM"
log "TAKEOVER after SIGTERM of the leader (lease released): ${took2} s"
awk -v t="$took2" 'BEGIN { exit !(t <= 4) }' || die "takeover after a release took ${took2} s, more than one retry period + 2 s"
grep -q "released lease" "$W/ext-b.log" || die "ext-b did not release its lease"
pass "a leader that stops releases the lease: the standby took over ${took2} s later"
