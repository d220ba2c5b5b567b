#!/usr/bin/env bash
# Smaller pods first (`toposched extender --hold-back-hours`, docs/extender.md) through the real
# kube-scheduler: one inf2.48xlarge ring of 12 devices, four 2-device pods waiting and an 8-device
# pod arriving. The pairs wait on a node label at first (nodeSelector e2e/pairs=welcome, which the
# node lacks): kube-scheduler cannot place them, yet they are Pending pods of a class that fits,
# which is what the extender counts (fleet-wide: docs/extender.md names it as a limit), so the
# scenario holds them for as long as it needs, without timing.
#   1. The flag off (the default): the 8-device pod is bound at once; once the label comes, only
#      2 of the 4 pairs fit in the 4 devices left.
#   2. --hold-back-hours 24: the 8-device pod is refused every node with the reason naming the 4
#      pairs (its FailedScheduling event, /v1/why's held_back, toposched_filter_held_back_total);
#      once the label comes all 4 pairs are bound, and the big pod waits for room like any other.
source "$(dirname "$0")/lib.sh"
e2e_init holdback
e2e_control_plane
e2e_node ring inf2.48xlarge

# pending_is N: the extender's fleet view counts N pods waiting (its pod watch has them).
pending_is() {
  [ "$(curl -sf "http://127.0.0.1:$EXT_PORT/v1/fleet" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"]["pending_pods"])')" = "$1" ]
}
# pairs_waiting TAG: four pairs kube-scheduler cannot place yet, seen by the extender.
pairs_waiting() {
  local i
  for i in 1 2 3 4; do create_pod "$1-pair-$i" aws.amazon.com/neuron 2 e2e/pairs=welcome; done
  wait_for 30 "the extender to see 4 pairs waiting" pending_is 4
}
delete_all() {
  api DELETE "/api/v1/namespaces/default/pods?labelSelector=app%3De2e" >/dev/null || die "delete pods"
  wait_for 60 "pods gone" bash -c "[ -z \"\$(\"$KUBECTL\" --kubeconfig \"$W/admin.kubeconfig\" -n default get pods -o name)\" ]"
}
bound_pairs() {
  local n=0 i
  for i in 1 2 3 4; do pod_bound "$1-pair-$i" && n=$((n + 1)); done
  echo "$n"
}
# waits_for_room POD: unbound, and the extender says no node has room for it and nothing holds it
# back (its own state through /v1/why: kube-scheduler's events of one pod form one series whose
# message stays the first one's, so they cannot tell a later refusal).
waits_for_room() {
  ! pod_bound "$1" && curl -sf "http://127.0.0.1:$EXT_PORT/v1/why?pod=default/$1" |
    python3 -c 'import json,sys; w=json.load(sys.stdin); sys.exit(0 if w.get("nodes_that_fit") == 0 and "held_back" not in w else 1)'
}

# 1. The flag off: the big pod goes first and takes the room two pairs needed.
e2e_extender
e2e_scheduler
pairs_waiting off
create_pod off-big aws.amazon.com/neuron 8
wait_bound 60 off-big
k label node ring e2e/pairs=welcome >/dev/null || die "label node"
wait_for 60 "two pairs bound beside it" at_least_bound 3
for i in 1 2 3 4; do pod_bound "off-pair-$i" || wait_for 60 "off-pair-$i to wait for room" waits_for_room "off-pair-$i"; done
[ "$(bound_pairs off)" = 2 ] || die "without the flag $(bound_pairs off) of 4 pairs were bound (expected 2)"
pass "flag off: the 8-device pod bound at once ($(pod_ids off-big)), then 2 of 4 pairs; the others Pending: $(events_of off-pair-4 | tail -1 | cut -c1-160)"
check_no_double_allocation >&2 || die "an id was given twice (flag off)"
delete_all
k label node ring e2e/pairs- >/dev/null || die "unlabel node"
stop extender

# 2. --hold-back-hours 24: the pairs go first.
e2e_extender --hold-back-hours 24
pairs_waiting on
create_pod on-big aws.amazon.com/neuron 8
wait_for 60 "on-big held back" pending_with on-big "lets smaller pods go first (--hold-back-hours 24): 4 pods waiting for less than this pod's 8 devices need 8 devices"
why=$(curl -sf "http://127.0.0.1:$EXT_PORT/v1/why?pod=default/on-big") || die "GET /v1/why"
grep -q '"held_back"' <<<"$why" || die "/v1/why does not say on-big is held back: $why"
held=$(curl -sf "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_filter_held_back_total/ {print $2 + 0}')
[ "${held:-0}" -ge 1 ] || die "toposched_filter_held_back_total is ${held:-absent}"
k label node ring e2e/pairs=welcome >/dev/null || die "label node"
wait_bound 60 on-pair-1 on-pair-2 on-pair-3 on-pair-4
wait_for 60 "on-big to wait for room once no pair waits" waits_for_room on-big
pod_bound on-big && die "on-big was bound beside 4 pairs on a ring of 12"
check_no_double_allocation >&2 || die "an id was given twice (--hold-back-hours 24)"
pass "--hold-back-hours 24: the 8-device pod held back ($held filters) while 4 pairs waited, then all 4 pairs bound ($(pod_ids on-pair-1) | $(pod_ids on-pair-2) | $(pod_ids on-pair-3) | $(pod_ids on-pair-4)); on-big then waits for room (/v1/why: no node fits, no held_back)"
