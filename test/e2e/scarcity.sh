#!/usr/bin/env bash
# Scarcity-aware placement through the real kube-scheduler 1.20.2 (docs/extender.md, "Scores"):
# a small mixed fleet, one inf2.24xlarge ring of 6 devices and four trn1.32xlarge, receives 12
# single-device pods one after another and then 3 two-device pods, which only a ring can ever
# take (2 is not a trn1 size). The extender's policy decides the node: with deploy/'s
# configuration (the default --filter-answer best) filter passes the policy's node alone, so
# kube-scheduler never scores and never calls prioritize (checked below, with prioritizeVerb
# configured).
#   1. With the previous default (--policy best-fit) the single devices fill the ring, where they
#      "fit tightest", and the pairs are stranded: the scenario shows the old scoring failing.
#   2. With scarcity (the default) the single devices go to the trn1 nodes and every pair is
#      bound on the ring: what the simulator's policy does on the same stream
#      (test/scarcity_test.cc, TrackerRankTest.SingleDevicesLeaveTheRingToRequestsOnlyItCanTake).
source "$(dirname "$0")/lib.sh"
e2e_init scarcity
e2e_control_plane
e2e_node ring inf2.24xlarge
for i in 1 2 3 4; do e2e_node "trn-$i" trn1.32xlarge; done

# stream TAG: 12 singles, each bound before the next is created (so each filter sees the last
# bind), then 3 pairs at once.
stream() {
  local tag="$1" i
  for i in $(seq 1 12); do
    create_pod "$tag-one-$i" aws.amazon.com/neuron 1
    wait_bound 60 "$tag-one-$i"
  done
  for i in 1 2 3; do create_pod "$tag-two-$i" aws.amazon.com/neuron 2; done
}

# singles_on_ring TAG: how many of the 12 singles went to the ring.
singles_on_ring() {
  local n=0 i
  for i in $(seq 1 12); do [ "$(pod_node "$1-one-$i")" = ring ] && n=$((n + 1)); done
  echo "$n"
}

delete_all() {
  api DELETE "/api/v1/namespaces/default/pods?labelSelector=app%3De2e" >/dev/null || die "delete pods"
  wait_for 60 "pods gone" bash -c "[ -z \"\$(\"$KUBECTL\" --kubeconfig \"$W/admin.kubeconfig\" -n default get pods -o name)\" ]"
}

# 1. The old scoring strands the pairs.
e2e_extender --policy best-fit
# prioritizeVerb configured although deploy/ has none: that kube-scheduler never calls it shows
# that filter passed one node every time (a scheduler left one feasible node skips scoring).
e2e_scheduler true "" filter+prioritize+preempt+bind
stream old
for i in 1 2 3; do wait_for 60 "old-two-$i bound or refused" pod_settled "old-two-$i"; done
old_bound=0
for i in 1 2 3; do pod_bound "old-two-$i" && old_bound=$((old_bound + 1)); done
old_ring=$(singles_on_ring old)
[ "$old_bound" -lt 3 ] || die "best-fit bound all 3 pairs: this scenario would not tell the policies apart"
# The ring is full (kube-scheduler's own count says so) and the torus never takes 2 (ours does).
wait_for 30 "a pair Pending" pending_with old-two-3 "does not support requests for device: 2"
pass "previous scoring (best-fit): $old_ring of 12 singles on the ring, $old_bound of 3 pairs bound; old-two-3 Pending: $(events_of old-two-3 | head -1 | cut -c1-200)"
check_no_double_allocation >&2 || die "an id was given twice (best-fit run)"

delete_all
stop extender

# 2. Scarcity (the extender's default) places every pair.
e2e_extender
stream new
wait_bound 60 new-two-1 new-two-2 new-two-3
new_ring=$(singles_on_ring new)
for i in 1 2 3; do
  [ "$(pod_node "new-two-$i")" = ring ] || die "new-two-$i is on $(pod_node "new-two-$i")"
  ids_contiguous "$(pod_ids "new-two-$i")" || die "new-two-$i got $(pod_ids "new-two-$i")"
done
[ "$new_ring" = 0 ] || die "scarcity put $new_ring singles on the ring"
check_no_double_allocation >&2 || die "an id was given twice (scarcity run)"
prio=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_extender_requests_total\{.*verb="prioritize"/ {s += $2} END {print s + 0}')
filt=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_extender_requests_total\{.*verb="filter"/ {s += $2} END {print s + 0}')
[ "$filt" -gt 0 ] || die "kube-scheduler never called filter"
[ "$prio" = 0 ] || die "kube-scheduler called prioritize $prio times: filter passed more than one node"
pass "scarcity: 0 of 12 singles on the ring, 3 of 3 pairs bound on it ($(pod_ids new-two-1) | $(pod_ids new-two-2) | $(pod_ids new-two-3)); $filt filter calls, no prioritize (one node passed each time)"
