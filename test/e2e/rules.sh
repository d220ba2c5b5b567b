#!/usr/bin/env bash
# The allocation rules of neuron-facts §2 through a real kube-scheduler 1.20.2 (`my-scheduler`,
# configured by deploy/my-scheduler.yaml) calling `toposched extender`, among many patched nodes
# of several instance types: ring contiguity (inf2), trn rows, the 9-core example, one-or-all,
# AWS's text for 7 devices on trn1, the annotations on bound pods, nothing of the pod's own lost.
source "$(dirname "$0")/lib.sh"
e2e_init rules
e2e_control_plane
e2e_node inf2-a inf2.48xlarge
e2e_node inf2-b inf2.24xlarge
e2e_node trn1-a trn1.32xlarge
e2e_node trn1-b trn1.32xlarge
e2e_node inf1-a inf1.6xlarge
e2e_node inf1-b inf1.6xlarge
# More nodes, so that filter and prioritize see many candidates of several types (this scenario
# runs the extender with --filter-answer feasible, so kube-scheduler calls prioritize).
e2e_nodes fill- 18 inf2.48xlarge trn1.32xlarge inf2.xlarge inf2.8xlarge trn2.48xlarge inf1.24xlarge
# Holes on inf2-b (devices 1 and 4 held), left by "a previous extender": adopted from the pods.
prebound_pod hole-1 inf2-b inf2.24xlarge aws.amazon.com/neuron 1
prebound_pod hole-4 inf2-b inf2.24xlarge aws.amazon.com/neuron 4
# The chart's other filter answer (extender.filterAnswer=feasible): every node that fits passes
# and prioritize ranks them (scarcity.sh runs the default, the policy's node alone).
e2e_extender --filter-answer feasible
e2e_scheduler true "" filter+prioritize+preempt+bind

# 1. Ring (inf2.48xlarge): contiguous, non-wrapping, disjoint sets filling the node.
create_pod ring-3 aws.amazon.com/neuron 3 kubernetes.io/hostname=inf2-a
create_pod ring-2 aws.amazon.com/neuron 2 kubernetes.io/hostname=inf2-a
create_pod ring-5 aws.amazon.com/neuron 5 kubernetes.io/hostname=inf2-a
create_pod ring-2b aws.amazon.com/neuron 2 kubernetes.io/hostname=inf2-a
# 2. Chain with holes (inf2.24xlarge, free 0,2,3,5): 3 devices fit by count but no 3 are contiguous.
create_pod chain-3 aws.amazon.com/neuron 3 kubernetes.io/hostname=inf2-b
# 3. trn1 rows: 4 = one row, 8 = two aligned rows, 1 = any; 2 is not a trn1 size.
create_pod trn-4 aws.amazon.com/neuron 4 kubernetes.io/hostname=trn1-a
create_pod trn-8 aws.amazon.com/neuron 8 kubernetes.io/hostname=trn1-a
create_pod trn-1 aws.amazon.com/neuron 1 kubernetes.io/hostname=trn1-a
create_pod trn-2 aws.amazon.com/neuron 2 kubernetes.io/hostname=trn1-a
# 4. The 9-core example (4 devices x 4 cores): cores 0-8 on devices 0,1,2.
create_pod cores-9 aws.amazon.com/neuroncore 9 kubernetes.io/hostname=inf1-a
# 5. One or all: all 16 devices of trn1-b; all 16 cores of inf1-b.
create_pod all-16 aws.amazon.com/neuron 16 kubernetes.io/hostname=trn1-b
create_pod allcores-16 aws.amazon.com/neuroncore 16 kubernetes.io/hostname=inf1-b
# 6. Seven devices on trn1 (any trn1.32xlarge node): never, with AWS's words.
create_pod seven aws.amazon.com/neuron 7 node.kubernetes.io/instance-type=trn1.32xlarge
# 7. Many candidates: 4 devices anywhere on an inf2.48xlarge (3 fill nodes + inf2-a, which is full).
create_pod any-4 aws.amazon.com/neuron 4 node.kubernetes.io/instance-type=inf2.48xlarge

wait_bound 60 ring-3 ring-2 ring-5 ring-2b trn-4 trn-8 trn-1 cores-9 all-16 allcores-16 any-4

r3=$(pod_ids ring-3); r2=$(pod_ids ring-2); r5=$(pod_ids ring-5); r2b=$(pod_ids ring-2b)
for s in "$r3" "$r2" "$r5" "$r2b"; do ids_contiguous "$s" || die "inf2 ring: $s is not contiguous"; done
ids_disjoint "$r3" "$r2" "$r5" "$r2b" || die "inf2 ring: sets overlap: $r3 | $r2 | $r5 | $r2b"
pass "inf2.48xlarge ring: 3 -> $r3, 2 -> $r2, 5 -> $r5, 2 -> $r2b (contiguous, disjoint, 12 of 12)"

wait_for 30 "chain-3 Pending with the extender's reason" pending_with chain-3 "no 3 contiguous free devices on inf2.24xlarge"
create_pod chain-2 aws.amazon.com/neuron 2 kubernetes.io/hostname=inf2-b
wait_bound 30 chain-2
[ "$(pod_ids chain-2)" = "2,3" ] || die "inf2.24xlarge with holes at 1 and 4: 2 devices got $(pod_ids chain-2), want 2,3"
pass "inf2.24xlarge with devices 1,4 held: 3 devices Pending ($(events_of chain-3 | grep -o 'no 3 contiguous.*run 2)' | head -1)); 2 devices -> 2,3"

t4=$(pod_ids trn-4); t8=$(pod_ids trn-8); t1=$(pod_ids trn-1)
ids_aligned "$t4" || die "trn1: 4 devices got $t4, not a row"
ids_aligned "$t8" || die "trn1: 8 devices got $t8, not two aligned rows"
ids_disjoint "$t4" "$t8" "$t1" || die "trn1: sets overlap: $t4 | $t8 | $t1"
wait_for 30 "trn-2 Pending with AWS's text" pending_with trn-2 "Instance type trn1.32xlarge does not support requests for device: 2. Please request a different number of devices."
pass "trn1.32xlarge: 4 -> $t4 (a row), 8 -> $t8 (two aligned rows), 1 -> $t1; 2 devices Pending"

c9=$(pod_ids cores-9)
want=$("$TOPOSCHED_BIN" allocate --instance-type inf1.6xlarge --cores 9 --json | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["ids"])))')
[ "$c9" = "0,1,2,3,4,5,6,7,8" ] || die "9 cores on an empty inf1.6xlarge got $c9, want 0-8 (AWS's worked example)"
[ "$c9" = "$want" ] || die "9 cores: scheduler path gave $c9, toposched allocate says $want"
pass "9 cores on inf1.6xlarge -> $c9 (devices 0,1,2), as AWS's example and the what-if CLI"

[ "$(pod_ids all-16)" = "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15" ] || die "all 16 devices got $(pod_ids all-16)"
[ "$(pod_ids allcores-16)" = "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15" ] || die "all 16 cores got $(pod_ids allcores-16)"
pass "one or all: 16 of 16 devices on trn1.32xlarge, 16 of 16 cores on inf1.6xlarge, 1 device on trn1"

aws7="Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices."
wait_for 30 "seven Pending with AWS's text" pending_with seven "$aws7"
pod_bound seven && die "the 7-device pod was bound to $(pod_node seven)"
pass "7 devices on trn1.32xlarge stays Pending; event: $(events_of seven | grep -F "$aws7" | head -1 | cut -c1-160)..."

case "$(pod_node any-4)" in fill-0|fill-6|fill-12) ;; *) die "any-4 went to $(pod_node any-4), not a free inf2.48xlarge";; esac
ids_contiguous "$(pod_ids any-4)" || die "any-4: $(pod_ids any-4)"
prio=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_extender_requests_total\{.*verb="prioritize"/ {s += $2} END {print s + 0}')
filt=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_extender_requests_total\{.*verb="filter"/ {s += $2} END {print s + 0}')
[ "$prio" -gt 0 ] || die "kube-scheduler never called prioritize"
pass "4 devices among $(grep -c 'inf2.48xlarge' "$W/nodes-fill-.txt") fill + 1 inf2.48xlarge nodes -> $(pod_node any-4) $(pod_ids any-4); extender saw $filt filter and $prio prioritize calls"

for p in ring-3 ring-2 ring-5 ring-2b chain-2 trn-4 trn-8 trn-1 cores-9 all-16 allcores-16 any-4; do check_annotations "$p"; done
pass "12 bound pods carry AWS_NEURON_IDS, NEURON_ALLOCATED, NEURON_ALLOC_TIME, toposched.io/allocation, and keep their own annotation and labels"
check_no_double_allocation >&2 || die "an id was given twice"
# How the extender's informers read the cluster: a watch list where the API server serves one
# (1.34+, etcd 3.6), LIST and WATCH on 1.20, which refuses it (422). watchlist.sh: a current server
# that refuses it.
if k8s_at_least 34; then
  grep -q 'informer pods: .* objects from a watch list' "$EXT_LOG" || die "the extender did not read pods with a watch list on $E2E_K8S"
  pass "the extender read nodes and pods with watch lists: $(grep -o 'informer pods: .* objects from a watch list.*' "$EXT_LOG" | head -1)"
else
  grep -q 'informer pods: the API server does not serve watch lists (HTTP 422)' "$EXT_LOG" || die "no watch-list fallback logged on $E2E_K8S"
  pass "$E2E_K8S refuses watch lists (422): the extender read with LIST and WATCH"
fi
grep -q 'Binding' "$SCHED_LOG" || true
