#!/usr/bin/env bash
# A current API server that refuses watch lists, as one in front of an etcd without progress
# notifications does (below 3.4.31/3.5.13; Debian's etcd-server 3.4.23 here): a watch with
# sendInitialEvents=true is answered 200 and then one ERROR event, "a watch stream was requested
# by the client but the required storage feature RequestWatchProgress is disabled" (the failure
# reported with Kubernetes 1.35 and etcd 3.5.12). The extender must fall back to LIST and WATCH at
# once and then see every change through its plain watch: placements, a deletion that frees
# devices, a node added later. (Served watch lists, on etcd 3.6, are checked in rules.sh.)
source "$(dirname "$0")/lib.sh"
e2e_init watchlist
k8s_at_least 27 || skip "watch lists exist from 1.27; 1.20's refusal (422) is checked in rules.sh"
# Debian's etcd-server (3.4) is the point here, not the current etcd the control plane brings; a
# fresh machine gets it now, not only once the 1.20 build (which runs later) has installed it.
command -v etcd >/dev/null || e2e_apt_install etcd-server || skip "Debian's etcd-server cannot be installed"
ETCD_BIN="$(command -v etcd)" || skip "Debian's etcd-server is not installed"
log "etcd: $("$ETCD_BIN" --version | head -1) (Debian's, without RequestWatchProgress)"
e2e_control_plane

# The refusal itself, as any client gets it.
refusal=$(curl -s --max-time 20 --cacert "$W/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
  "https://127.0.0.1:$API_PORT/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5" | head -c 600)
grep -q 'RequestWatchProgress' <<<"$refusal" || die "this API server serves watch lists after all: $refusal"
pass "kube-apiserver $E2E_K8S on etcd 3.4 refuses a watch list: $(cut -c1-200 <<<"$refusal")"

e2e_node wl-a inf2.48xlarge
e2e_extender
e2e_scheduler
grep -q 'informer pods: the API server does not serve watch lists (ERROR event 500: .*RequestWatchProgress' "$EXT_LOG" ||
  die "the extender did not log its fallback: $(grep -i 'watch list' "$EXT_LOG" | head -3)"
pass "the extender fell back: $(grep -o 'informer pods: the API server does not serve.*' "$EXT_LOG" | head -1 | cut -c1-220)"

# Placements, then a deletion the plain watch must carry: 8 + 4 fill the 12 devices, 6 fits only
# once the 8 are freed.
create_pod wl-8 aws.amazon.com/neuron 8 kubernetes.io/hostname=wl-a
wait_bound 60 wl-8
create_pod wl-4 aws.amazon.com/neuron 4 kubernetes.io/hostname=wl-a
wait_bound 60 wl-4
create_pod wl-6 aws.amazon.com/neuron 6 kubernetes.io/hostname=wl-a
wait_for 60 "wl-6 Pending for lack of room" pending_with wl-6 "Insufficient aws.amazon.com/neuron"
ids8=$(pod_ids wl-8)
k -n default delete pod wl-8 --grace-period=0 --force >/dev/null 2>&1 || die "delete wl-8"
wait_bound 120 wl-6
ids_contiguous "$(pod_ids wl-6)" || die "wl-6 got $(pod_ids wl-6)"
ids_disjoint "$(pod_ids wl-6)" "$(pod_ids wl-4)" || die "wl-6 $(pod_ids wl-6) overlaps wl-4 $(pod_ids wl-4)"
pass "through LIST and WATCH: 8 -> $ids8, 4 -> $(pod_ids wl-4), 6 Pending, then bound to $(pod_ids wl-6) once the 8 were deleted"

# A node that arrives later reaches the extender through the node watch.
e2e_node wl-b trn1.32xlarge
create_pod wl-trn aws.amazon.com/neuron 4 kubernetes.io/hostname=wl-b
wait_bound 60 wl-trn
ids_aligned "$(pod_ids wl-trn)" || die "wl-trn got $(pod_ids wl-trn)"
check_no_double_allocation >&2 || die "an id was given twice"
pass "a node added later (wl-b) is placed on: 4 devices -> $(pod_ids wl-trn); no id given twice"
