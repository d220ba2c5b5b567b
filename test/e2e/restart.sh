#!/usr/bin/env bash
# The extender is killed (SIGKILL, then SIGTERM) and restarted while pods keep arriving: no device
# or core is ever given twice, the new process rebuilds its state from the live pods' annotations
# (no conflicts), and every pod is eventually bound.
source "$(dirname "$0")/lib.sh"
e2e_init restart
e2e_control_plane
e2e_nodes inf2- 3 inf2.48xlarge
e2e_nodes trn1- 3 trn1.32xlarge
e2e_nodes other- 6 inf2.8xlarge inf1.6xlarge trn2.48xlarge
e2e_extender
e2e_scheduler

# 12 inf2 pods of 1,2,3,1 devices (21 of 36) and 12 trn1 pods of 4,1,1 devices (24 of 48), one every 0.4 s.
pods=()
(
  for i in $(seq 0 11); do
    sizes=(1 2 3 1); create_pod "inf-$i" aws.amazon.com/neuron "${sizes[$((i % 4))]}" node.kubernetes.io/instance-type=inf2.48xlarge
    sleep 0.2
    sizes=(4 1 1); create_pod "trn-$i" aws.amazon.com/neuron "${sizes[$((i % 3))]}" node.kubernetes.io/instance-type=trn1.32xlarge
    sleep 0.2
  done
) &
creator=$!
for i in $(seq 0 11); do pods+=("inf-$i" "trn-$i"); done

wait_for 60 "the first extender to bind pods" at_least_bound 3
log "SIGKILL to the extender"
kill -KILL "$(pid_of extender)"; stop extender
e2e_extender
after_restart=$(bound_count)
wait_for 60 "the second extender to bind pods" at_least_bound $((after_restart + 2 > 24 ? 24 : after_restart + 2))
log "SIGTERM to the extender"
stop extender
e2e_extender
wait "$creator" || die "creating pods failed"
wait_bound 120 "${pods[@]}"
bound_before=$(grep -c 'bound ' "$W/extender-1.log" || true)
pass "24 pods bound across two extender restarts (first process bound $bound_before before SIGKILL)"

check_no_double_allocation >&2 || die "an id was given twice"
conflicts=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_rebuild_conflicts_total/ {print $2}')
[ "${conflicts:-0}" = 0 ] || die "the rebuilt extender reports $conflicts conflicts"
for p in "${pods[@]}"; do check_annotations "$p"; done
# The last process rebuilt from the pods the earlier ones bound: filling the rest of each node must
# fit exactly around them. inf2: 15 devices left across 3 nodes; ask for what is left per node.
for n in inf2-0 inf2-1 inf2-2 trn1-0 trn1-1 trn1-2; do
  used=$(k get pods -A -o json | python3 -c "import json,sys; print(sum(len(json.loads(p['metadata']['annotations']['toposched.io/allocation'])['containers'][0]['ids']) for p in json.load(sys.stdin)['items'] if p['spec'].get('nodeName')=='$n'))")
  log "$n: $used devices held"
done
create_pod after-restart aws.amazon.com/neuron 1 node.kubernetes.io/instance-type=trn1.32xlarge
wait_bound 30 after-restart
check_no_double_allocation >&2 || die "an id was given twice after the restart"
pass "rebuilt state: 0 conflicts, and a new pod got ids no earlier pod holds"
