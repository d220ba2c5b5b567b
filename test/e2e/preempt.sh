#!/usr/bin/env bash
# Preemption through the real kube-scheduler: a high-priority 4-device pod and two full
# trn1.32xlarge nodes. On trn-a the cheapest victims by priority (four 1-device pods, one per row
# 0,4,8,12) free 4 devices but no row; on trn-b one 4-device pod holds row 0. Without topology the
# scheduler would evict the four on trn-a (their priority is lowest) and the pod would still not fit;
# the extender's preempt drops trn-a, so exactly one pod is evicted, on trn-b, and the pod gets row 0.
source "$(dirname "$0")/lib.sh"
e2e_init preempt
e2e_control_plane
k apply -f - >/dev/null <<'YAML'
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-lowest}
value: 1
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-mid}
value: 500
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-high}
value: 1000
YAML
e2e_node trn-a trn1.32xlarge
e2e_node trn-b trn1.32xlarge
e2e_nodes other- 6 inf2.48xlarge inf2.8xlarge
# trn-a: the diagonal 0,4,8,12 at the lowest priority, the rest of each row at mid priority.
for d in 0 4 8 12; do prebound_pod "a-low-$d" trn-a trn1.32xlarge aws.amazon.com/neuron "$d" e2e-lowest; done
for d in 1 2 3 5 6 7 9 10 11 13 14 15; do prebound_pod "a-mid-$d" trn-a trn1.32xlarge aws.amazon.com/neuron "$d" e2e-mid; done
# trn-b: row 0 held by one low-priority pod, rows 1-3 by mid-priority pods.
prebound_pod b-low-row0 trn-b trn1.32xlarge aws.amazon.com/neuron 0,1,2,3 e2e-low
prebound_pod b-mid-row1 trn-b trn1.32xlarge aws.amazon.com/neuron 4,5,6,7 e2e-mid
prebound_pod b-mid-rows23 trn-b trn1.32xlarge aws.amazon.com/neuron 8,9,10,11,12,13,14,15 e2e-mid
e2e_extender
e2e_scheduler

# No kubelet on these nodes: the harness finishes the deletion of evicted pods as a kubelet would.
(
  while sleep 0.5; do
    k get pods -A -o 'jsonpath={range .items[?(@.metadata.deletionTimestamp)]}{.metadata.name}{"\n"}{end}' 2>/dev/null |
      while read -r p; do [ -n "$p" ] && k -n default delete pod "$p" --grace-period=0 --force >/dev/null 2>&1; done
  done
) &
E2E_PIDS+=($!); E2E_NAMES+=("fake-kubelet-deleter")

create_pod urgent aws.amazon.com/neuron 4 node.kubernetes.io/instance-type=trn1.32xlarge e2e-high
wait_bound 90 urgent
[ "$(pod_node urgent)" = trn-b ] || die "urgent went to $(pod_node urgent)"
[ "$(pod_ids urgent)" = "0,1,2,3" ] || die "urgent got $(pod_ids urgent), want row 0 (0,1,2,3)"
k -n default get pod b-low-row0 >/dev/null 2>&1 && die "the victim b-low-row0 is still there"
gone=()
for p in a-low-0 a-low-4 a-low-8 a-low-12 a-mid-1 a-mid-15 b-mid-row1 b-mid-rows23; do
  k -n default get pod "$p" >/dev/null 2>&1 || gone+=("$p")
  [ -z "$(pod_field "$p" '{.metadata.deletionTimestamp}' 2>/dev/null)" ] || gone+=("$p(terminating)")
done
[ ${#gone[@]} = 0 ] || die "pods evicted that free no legal set: ${gone[*]}"
npre=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_extender_requests_total\{.*verb="preempt"/ {s += $2} END {print s + 0}')
[ "$npre" -gt 0 ] || die "kube-scheduler never called preempt"
pass "urgent (4 devices, priority 1000) evicted exactly 1 pod (b-low-row0) on trn-b and got row 0; trn-a's 4 cheaper diagonal victims were refused ($npre preempt calls)"
events_of b-low-row0 2>/dev/null | grep -i preempt | head -1 >&2 || true
check_annotations urgent
check_no_double_allocation >&2 || die "an id was given twice"

# An impossible pod: 7 devices on trn1.32xlarge is never legal (AWS's rule and text), so the extender
# lists every trn1 node in FailedAndUnresolvableNodes. A scheduler that honours it (1.21+) does not
# even try preemption — no preempt call, no victim — where one that does not (1.20) would evict in
# vain if the extender's preempt verb did not stop it.
# trn-c: 4 devices (row 0) held at the lowest priority, so the scheduler's own count check passes
# (12 free) and the extender is asked; evicting the holder could be tried, and would be in vain.
if k8s_at_least 21; then
  e2e_node trn-c trn1.32xlarge
  prebound_pod c-low-row0 trn-c trn1.32xlarge aws.amazon.com/neuron 0,1,2,3 e2e-lowest
  # The extender knows trn-c once its filter passes trn-c for a 1-device probe (not a pod: no uid).
  knows_trn_c() {
    curl -sf -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$EXT_PORT/filter" --data-binary \
      "{\"Pod\":$(pod_json probe aws.amazon.com/neuron 1 | sed 's/"metadata":{/"metadata":{"namespace":"default","uid":"e2e-probe",/'),\"NodeNames\":[\"trn-c\"]}" |
      python3 -c 'import json,sys; sys.exit(0 if "trn-c" in (json.load(sys.stdin).get("NodeNames") or []) else 1)'
  }
  wait_for 30 "the extender to know trn-c and c-low-row0" knows_trn_c
  before_pods=$(k -n default get pods --no-headers 2>/dev/null | wc -l)
  npre_before=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_extender_requests_total\{.*verb="preempt"/ {s += $2} END {print s + 0}')
  create_pod impossible aws.amazon.com/neuron 7 kubernetes.io/hostname=trn-c e2e-high
  failed_scheduling() { events_of impossible | grep -q FailedScheduling; }
  wait_for 60 "a FailedScheduling event on impossible" failed_scheduling
  ev=$(events_of impossible | grep FailedScheduling | tail -1)
  grep -q "does not support requests for device: 7" <<<"$ev" || die "impossible's event lacks AWS's text: $ev"
  # The scheduler's own verdict on preemption for this pod, in its log and the event.
  wait_for 30 "the scheduler's preemption verdict on impossible" grep -qE "Preemption is not helpful|not eligible for preemption|preemption: 0/" "$SCHED_LOG"
  npre_after=$(curl -s "http://127.0.0.1:$EXT_PORT/metrics" | awk '/^toposched_extender_requests_total\{.*verb="preempt"/ {s += $2} END {print s + 0}')
  [ "$npre_after" = "$npre_before" ] || die "kube-scheduler called preempt $((npre_after - npre_before)) times for an unresolvable pod"
  after_pods=$(k -n default get pods --no-headers 2>/dev/null | wc -l)
  [ "$after_pods" = $((before_pods + 1)) ] || die "$before_pods pods before impossible, $after_pods with it: a victim was evicted"
  k -n default get pod c-low-row0 >/dev/null 2>&1 || die "c-low-row0 was evicted for a pod that can never fit"
  pass "impossible (7 devices on trn1 trn-c, priority 1000): FailedAndUnresolvableNodes, no preempt call, c-low-row0 kept; event: $(cut -c1-200 <<<"$ev")"
fi
