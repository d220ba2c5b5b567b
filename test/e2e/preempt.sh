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
