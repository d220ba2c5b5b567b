# shellcheck shell=bash
# The end-to-end harness: a real Kubernetes control plane on 127.0.0.1 — 1.20.2 built from Debian's
# source package, or a current one (1.37, 1.34) built from its Go modules (k8s-build.sh) — with the
# toposched extender and device plugin as local processes.
# Sourced by the scenario scripts (test/e2e/*.sh); see docs/e2e.md.
#
#   e2e_init NAME                  root check, k8s build (or SKIP), work dir, traps, watchdog
#   e2e_control_plane              certs, etcd, kube-apiserver (TLS, token auth, RBAC), deploy/ applied
#   e2e_extender [ARGS...]         `toposched extender` with the k8s-neuron-scheduler ServiceAccount's token
#   e2e_scheduler [nodeCache] [qps] kube-scheduler `my-scheduler` with deploy/my-scheduler.yaml's config
#   e2e_node NAME TYPE [cpu]       a Node object of an instance type, status patched, taint removed
#   e2e_kubelet_node NAME TYPE     containerd + kubelet + `toposched device-plugin` on a fake sysfs tree
#   e2e_images                     (pods.sh) the toposched, pause and kube-scheduler images, built by
#                                  scripts/image.sh (or SKIP); then e2e_control_plane runs with in-cluster
#                                  credentials (E2E_IN_CLUSTER=1), and e2e_kubelet_node imports the images
#                                  and starts no local device plugin
#   e2e_controller_manager CTRLS   kube-controller-manager with only CTRLS (dra.sh: resourceclaim-controller)
#   e2e_pause_image                (dra.sh) only the pause image, for containers that start
#   e2e_dra_node NAME TYPE         containerd with CDI, a kubelet labelled toposched.io/neuron-management=dra
#                                  (own root dir), /dev/neuronN stand-ins, `toposched dra-plugin` on a fake
#                                  tree with the chart's neuron-dra-driver-sa token; e2e_dra_node_stop
#
# Every process is recorded and torn down on EXIT, INT and TERM (also on failure); every wait is bounded.
# Environment: TOPOSCHED_E2E_K8S (the Kubernetes minor: 1.20, the default, 1.34 or 1.37),
# TOPOSCHED_BIN (the toposched binary), TOPOSCHED_E2E_CACHE, TOPOSCHED_E2E_TIMEOUT (s),
# TOPOSCHED_E2E_K8S_BIN (use these Kubernetes binaries instead of k8s-build.sh's), TOPOSCHED_E2E_KUBECTL,
# TOPOSCHED_E2E_KEEP=1 keeps the work dir, TOPOSCHED_E2E_PORT_BASE (default 23000),
# TOPOSCHED_E2E_EXTENDER_ARGS (more flags for the extender, e.g. "--log-level debug").
# E2E_KUBELET_KUBECONFIG: the kubelet's kubeconfig (faults.sh points it at a fault proxy).

set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_REPO="$(cd "$E2E_DIR/../.." && pwd)"
E2E_SKIP=77
E2E_PIDS=()
E2E_NAMES=()
E2E_FAILED=0
E2E_MADE_KUBELET_DIR=0

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# die MESSAGE: fails the scenario. The message (with what e2e_why adds) also goes to
# $TOPOSCHED_E2E_FAILURES when set: scripts/e2e.sh prints every scenario's at the very end, where a
# truncated CI log still shows it.
die() {
  local why=""
  declare -F e2e_why >/dev/null && why=$(e2e_why 2>/dev/null | cut -c1-400 | tail -n 12)
  log "FAIL: $*"
  [ -n "$why" ] && printf '%s\n' "$why" | sed 's/^/    /' >&2
  if [ -n "${TOPOSCHED_E2E_FAILURES:-}" ]; then
    { printf '%s (k8s %s): %s\n' "${E2E_NAME:-e2e}" "${E2E_K8S:-?}" "$*"; [ -n "$why" ] && printf '%s\n' "$why" | sed 's/^/    /'; } >>"$TOPOSCHED_E2E_FAILURES"
  fi
  E2E_FAILED=1; exit 1
}
skip() { log "SKIP: $*"; exit "$E2E_SKIP"; }
pass() { log "ok: $*"; }

# k8s_before MINOR / k8s_at_least MINOR: the control plane under test is older than 1.MINOR / at least it.
k8s_before() { [ "$K8S_MINOR" -lt "$1" ]; }
k8s_at_least() { [ "$K8S_MINOR" -ge "$1" ]; }
# Extra flags a scenario sets before e2e_control_plane / e2e_scheduler (feature gates, APIs).
E2E_APISERVER_EXTRA_FLAGS=()
E2E_SCHED_EXTRA_FLAGS=()
# More `--set`s for the chart's install (dra.sh: draDriver.enabled=true), before e2e_control_plane.
E2E_HELM_SETS=()
# klog's --logtostderr went away in 1.26 (stderr is the default there).
log_flags() { k8s_before 26 && echo --logtostderr; return 0; }
# k8s_release_tag VERSION: the vMAJOR.MINOR.PATCH of a Kubernetes version as registry.k8s.io tags
# it (the chart's my-scheduler tag: EKS's v1.34.4-eks-3025e55 → v1.34.4); empty when it has none.
k8s_release_tag() { sed -nE 's/^v?([0-9]+\.[0-9]+\.[0-9]+).*$/v\1/p' <<<"$1"; }
# kube-scheduler serving nothing: 1.20 also has the insecure --port (gone in 1.24).
sched_port_flags() { if k8s_before 24; then echo --port 0 --secure-port 0; else echo --secure-port 0; fi; }

# --- setup and teardown ----------------------------------------------------------------------

e2e_init() {
  E2E_NAME="$1"
  [ "$(id -u)" = 0 ] || skip "needs root (apt-get, kubelet, containerd); run as root or set TOPOSCHED_SKIP_E2E=1"
  [ "${TOPOSCHED_SKIP_E2E:-0}" != 1 ] || skip "TOPOSCHED_SKIP_E2E=1"
  TOPOSCHED_BIN="${TOPOSCHED_BIN:-$E2E_REPO/build/toposched}"
  [ -x "$TOPOSCHED_BIN" ] || skip "no toposched binary at $TOPOSCHED_BIN (build it first)"
  E2E_K8S="${TOPOSCHED_E2E_K8S:-1.20}"
  K8S_MINOR=$(cut -d. -f2 <<<"$E2E_K8S")
  [[ "$K8S_MINOR" =~ ^[0-9]+$ ]] || die "TOPOSCHED_E2E_K8S=$E2E_K8S: expected a version such as 1.37"
  if [ -n "${TOPOSCHED_E2E_K8S_BIN:-}" ]; then
    K8S_BIN="$TOPOSCHED_E2E_K8S_BIN"
  else
    local out rc=0
    out=$("$E2E_DIR/k8s-build.sh" "$E2E_K8S") || rc=$?
    [ "$rc" = 0 ] || { [ "$rc" = 77 ] && skip "Kubernetes $E2E_K8S binaries unavailable (see k8s-build.sh messages above)"; die "k8s-build.sh $E2E_K8S failed ($rc)"; }
    K8S_BIN="$(printf '%s\n' "$out" | tail -1)"
  fi
  # A module build brings its own etcd 3.6 and containerd 2.2; 1.20 uses Debian's.
  ETCD_BIN=etcd CONTAINERD_BIN=containerd CTR_BIN=ctr
  [ -x "$K8S_BIN/etcd" ] && ETCD_BIN="$K8S_BIN/etcd"
  [ -x "$K8S_BIN/containerd" ] && CONTAINERD_BIN="$K8S_BIN/containerd" CTR_BIN="$K8S_BIN/ctr"
  e2e_need_packages
  KUBECTL="${TOPOSCHED_E2E_KUBECTL:-$K8S_BIN/kubectl}"
  W="$(mktemp -d "/tmp/tse2e-$E2E_NAME.XXXXXX")"
  chmod 755 "$W"
  E2E_PORT_BASE="${TOPOSCHED_E2E_PORT_BASE:-23000}"
  ETCD_PORT=$((E2E_PORT_BASE + 79)); ETCD_PEER_PORT=$((E2E_PORT_BASE + 80))
  API_PORT=$((E2E_PORT_BASE + 443)); EXT_PORT=$((E2E_PORT_BASE + 345))
  NOOP_PORT=$((E2E_PORT_BASE + 346)); KUBELET_PORT=$((E2E_PORT_BASE + 250)); SCHED_HEALTH_PORT=$((E2E_PORT_BASE + 251))
  DP_PROBE_PORT=$((E2E_PORT_BASE + 252)); WEBHOOK_PORT=$((E2E_PORT_BASE + 253)); VIEWS_PORT=$((E2E_PORT_BASE + 254))
  trap 'e2e_teardown' EXIT
  trap 'log "interrupted"; E2E_FAILED=1; exit 130' INT
  trap 'log "terminated"; E2E_FAILED=1; exit 143' TERM
  local limit="${TOPOSCHED_E2E_TIMEOUT:-600}"
  # The sleep must not hold our stdout/stderr open: ctest waits for every writer of its pipe.
  ( sleep "$limit" </dev/null >/dev/null 2>&1; log "watchdog: $E2E_NAME ran over ${limit}s"; kill -TERM $$ ) 2>/dev/null &
  E2E_WATCHDOG=$!
  log "$E2E_NAME: k8s $E2E_K8S $K8S_BIN, toposched $TOPOSCHED_BIN, work dir $W"
}

e2e_need_packages() {
  local need=()
  command -v "$ETCD_BIN" >/dev/null || need+=(etcd-server)
  command -v "$CONTAINERD_BIN" >/dev/null || need+=(containerd)
  command -v runc >/dev/null || need+=(runc)
  command -v openssl >/dev/null || need+=(openssl)
  command -v curl >/dev/null || need+=(curl)
  command -v python3 >/dev/null || need+=(python3)
  command -v flock >/dev/null || need+=(util-linux)
  [ ${#need[@]} = 0 ] && return 0
  e2e_apt_install "${need[@]}" || skip "apt-get install ${need[*]} failed"
}

# e2e_apt_install PACKAGE...: installs Debian packages a scenario needs (chromium, prometheus), or
# fails (1). Installing must not start system services (containerd, etcd, prometheus) on a machine
# without policy-rc.d.
e2e_apt_install() {
  log "apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made_policy=1; fi
  { apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1; }; } || rc=1
  [ $made_policy = 1 ] && rm -f "$policy"
  return $rc
}

# start NAME LOGFILE CMD...: runs CMD in the background at low priority, recorded for teardown.
start() {
  local name="$1" logf="$2"; shift 2
  nice -n 19 "$@" >"$logf" 2>&1 &
  E2E_PIDS+=($!); E2E_NAMES+=("$name")
  log "started $name (pid $!): $(basename "$1")"
}

# stop NAME: SIGTERM the named process, SIGKILL after 10 s.
stop() {
  local name="$1" i
  for i in "${!E2E_NAMES[@]}"; do
    [ "${E2E_NAMES[$i]}" = "$name" ] || continue
    local pid="${E2E_PIDS[$i]}"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      local n=0
      while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
      kill -0 "$pid" 2>/dev/null && { log "$name did not stop in 10 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
      wait "$pid" 2>/dev/null || true
    fi
    E2E_NAMES[$i]="(stopped)"
  done
}

pid_of() {
  local i
  for i in "${!E2E_NAMES[@]}"; do [ "${E2E_NAMES[$i]}" = "$1" ] && { echo "${E2E_PIDS[$i]}"; return 0; }; done
  return 1
}

e2e_teardown() {
  local rc=$?
  set +e
  [ $rc = 0 ] || [ $rc = 77 ] || E2E_FAILED=1
  if [ -n "${E2E_WATCHDOG:-}" ]; then
    pkill -P "$E2E_WATCHDOG" -x sleep 2>/dev/null
    kill "$E2E_WATCHDOG" 2>/dev/null
  fi
  if [ "$E2E_FAILED" = 1 ] && [ -n "${W:-}" ]; then
    log "failure: last lines of each log in $W"
    local f
    for f in "$W"/*.log; do case "$f" in */openssl.log|*/apply.log) continue;; esac; [ -f "$f" ] && { echo "---- $f" >&2; grep -v -e "^goroutine " -e "^\s" "$f" | tail -n 25 >&2; }; done
  fi
  local i
  for ((i = ${#E2E_PIDS[@]} - 1; i >= 0; i--)); do
    [ "${E2E_NAMES[$i]}" = containerd ] && e2e_containerd_cleanup
    [ "${E2E_NAMES[$i]}" = "(stopped)" ] || stop "${E2E_NAMES[$i]}"
  done
  e2e_remove_host_dev_nodes
  local d e
  for d in "${E2E_VARLOG[@]}"; do
    [ -d "$d" ] || continue
    # The containers' logs first go to the work dir, where the failure report shows them.
    [ "$d" = /var/log/pods ] && [ -n "${W:-}" ] && [ -d "$W" ] && ls -A "$d" | while read -r e; do
      { [ -f "$W/varlog-pods.made" ] || ! grep -qxF -- "$e" "$W/varlog-pods.before"; } &&
        cat "$d/$e"/*/*.log >"$W/pod-${e%_*}.log" 2>/dev/null
    done
    if [ -f "$W/varlog-$(basename "$d").made" ]; then
      rm -rf "$d"
    else
      ls -A "$d" | while read -r e; do grep -qxF -- "$e" "$W/varlog-$(basename "$d").before" || rm -rf "${d:?}/$e"; done
    fi
  done
  if [ -n "${W:-}" ] && [ -d "$W" ]; then
    # containerd-shim or runc leftovers and mounts under the work dir (kubelet, containerd).
    pkill_under "$W"
    awk -v w="$W" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
    if [ "${TOPOSCHED_E2E_KEEP:-0}" = 1 ]; then log "kept $W"; else rm -rf "$W"; fi
  fi
  if [ "$E2E_MADE_KUBELET_DIR" = 1 ]; then
    rm -rf /var/lib/kubelet/device-plugins
    rmdir /var/lib/kubelet 2>/dev/null
  fi
  if [ $rc = 0 ]; then log "$E2E_NAME: PASS"; elif [ $rc = 77 ]; then :; else log "$E2E_NAME: FAILED ($rc)"; fi
  exit $rc
}

# Kills processes whose command line mentions DIR (shims started by our containerd), or that run in
# the cgroup of a container of our containerd (cgroupsPath /k8s.io/<id>, <id> a task in its state
# under DIR; their /proc/PID/root reads "/" from here), by pid.
pkill_under() {
  local dir="$1" p
  for p in /proc/[0-9]*; do
    [ -r "$p/cmdline" ] || continue
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$dir" || in_our_container "$dir" "$p"; then
      local pid="${p#/proc/}"
      [ "$pid" = $$ ] || [ "$pid" = "$BASHPID" ] || kill -KILL "$pid" 2>/dev/null
    fi
  done
}

# in_our_container DIR /proc/PID: PID's cgroup is a container of the containerd whose state is in DIR.
in_our_container() {
  local id
  id=$(awk -F/ '/k8s\.io\// {print $NF; exit}' "$2/cgroup" 2>/dev/null)
  [ -n "$id" ] && [ -d "$1/ctd/state/io.containerd.runtime.v2.task/k8s.io/$id" ]
}

# wait_for SECONDS DESCRIPTION CMD...: polls CMD every 0.2 s until it succeeds or time runs out.
wait_for() {
  local limit="$1" what="$2"; shift 2
  local deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

# --- control plane -----------------------------------------------------------------------------

e2e_certs() {
  local p="$W/pki"; mkdir -p "$p"
  (
    cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=toposched-e2e-ca" -keyout ca.key -out ca.crt
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out apiserver.crt
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
  ) >"$W/openssl.log" 2>&1 || die "openssl failed (see $W/openssl.log)"
  ADMIN_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  printf '%s,admin,admin,system:masters\n' "$ADMIN_TOKEN" >"$p/tokens.csv"
}

# kubeconfig FILE TOKEN: a kubeconfig for the API server with a bearer token.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $W/pki/ca.crt
users:
- name: u
  user:
    token: $2
contexts:
- name: e2e
  context: {cluster: e2e, user: u}
current-context: e2e
EOF
}

k() { "$KUBECTL" --kubeconfig "$W/admin.kubeconfig" --request-timeout=30s "$@"; }

# api METHOD PATH [BODY] [CONTENT-TYPE]: raw call as admin.
api() {
  local method="$1" path="$2" body="${3:-}" ctype="${4:-application/json}"
  if [ -n "$body" ]; then
    curl -sS --max-time 30 --cacert "$W/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
      -X "$method" -H "Content-Type: $ctype" --data-binary "$body" "https://127.0.0.1:$API_PORT$path"
  else
    curl -sS --max-time 30 --cacert "$W/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
      -X "$method" "https://127.0.0.1:$API_PORT$path"
  fi
}

# k8s_server_version: the API server's gitVersion (what helm's .Capabilities.KubeVersion is).
k8s_server_version() { api GET /version | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])'; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

e2e_control_plane() {
  local port
  for port in $ETCD_PORT $ETCD_PEER_PORT $API_PORT $EXT_PORT; do
    port_free "$port" || die "127.0.0.1:$port is in use (set TOPOSCHED_E2E_PORT_BASE)"
  done
  e2e_certs
  start etcd "$W/etcd.log" "$ETCD_BIN" --name e2e --data-dir "$W/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" --quota-backend-bytes 2147483648
  wait_for 30 "etcd health" curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  start kube-apiserver "$W/apiserver.log" "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$API_PORT" $(k8s_before 24 && echo --insecure-port 0) \
    $(k8s_at_least 24 && echo --endpoint-reconciler-type none) --tls-cert-file "$W/pki/apiserver.crt" \
    --tls-private-key-file "$W/pki/apiserver.key" --client-ca-file "$W/pki/ca.crt" \
    --token-auth-file "$W/pki/tokens.csv" --authorization-mode RBAC \
    --service-account-key-file "$W/pki/sa.pub" --service-account-signing-key-file "$W/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --api-audiences https://kubernetes.default.svc \
    --service-cluster-ip-range 10.96.0.0/16 $(e2e_sa_admission_flags) \
    --enable-priority-and-fairness=false --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
    --profiling=false $(log_flags) --v=0 "${E2E_APISERVER_EXTRA_FLAGS[@]}"
  kubeconfig "$W/admin.kubeconfig" "$ADMIN_TOKEN"
  wait_for 60 "kube-apiserver /readyz" api GET /readyz
  wait_for 60 "kube-apiserver ready" bash -c "[ \"\$(curl -s --cacert $W/pki/ca.crt -H 'Authorization: Bearer $ADMIN_TOKEN' https://127.0.0.1:$API_PORT/readyz)\" = ok ]"
  # The bootstrap RBAC roles and priority classes come a moment after /readyz.
  wait_for 60 "bootstrap ClusterRole system:kube-scheduler" k get clusterrole system:kube-scheduler
  wait_for 60 "priority class system-node-critical" k get priorityclass system-node-critical
  log "kube-apiserver $(k8s_server_version) ready on 127.0.0.1:$API_PORT"
  [ "${E2E_IN_CLUSTER:-0}" = 1 ] && e2e_in_cluster_objects
  e2e_apply_deploy
}

# Pods get ServiceAccount credentials only with E2E_IN_CLUSTER=1 (pods.sh). Otherwise the
# ServiceAccount admission plugin is off: no controller-manager runs to create the `default`
# ServiceAccounts it insists on, and no pod starts anyway.
# With it on, BoundServiceAccountTokenVolume (alpha in 1.20, default from 1.21) makes the plugin
# mount a projected volume (a TokenRequest token kubelet fetches and refreshes, the kube-root-ca.crt
# ConfigMap, the namespace) instead of a legacy token Secret, which only the token controller fills.
e2e_sa_admission_flags() {
  if [ "${E2E_IN_CLUSTER:-0}" = 1 ]; then
    echo --enable-admission-plugins ServiceAccount $(k8s_before 21 && echo --feature-gates BoundServiceAccountTokenVolume=true)
  else
    echo --disable-admission-plugins ServiceAccount
  fi
}

# What kube-controller-manager would publish and nobody else does: the `default` ServiceAccount of
# each namespace (serviceaccount controller) and the kube-root-ca.crt ConfigMap with the cluster's CA
# (root-ca-cert-publisher), in default and kube-system.
e2e_in_cluster_objects() {
  local ns ca out
  ca=$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$W/pki/ca.crt")
  for ns in default kube-system; do
    out=$(api POST "/api/v1/namespaces/$ns/serviceaccounts" "{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"default\"}}") || die "create ServiceAccount $ns/default"
    grep -q -e '"kind": *"ServiceAccount"' -e AlreadyExists <<<"$out" || die "create ServiceAccount $ns/default: $out"
    out=$(api POST "/api/v1/namespaces/$ns/configmaps" "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"kube-root-ca.crt\"},\"data\":{\"ca.crt\":$ca}}") || die "create ConfigMap $ns/kube-root-ca.crt"
    grep -q '"kind": *"ConfigMap"' <<<"$out" || die "create ConfigMap $ns/kube-root-ca.crt: $out"
  done
  log "in-cluster credentials: ServiceAccount admission with bound token volumes; default ServiceAccounts and kube-root-ca.crt created as kube-controller-manager would"
}

# helm: $TOPOSCHED_E2E_HELM, else scripts/install-tools.sh's, else the PATH; empty when none
# (TOPOSCHED_E2E_HELM=none: the kubectl path of deploy/, as without helm).
e2e_helm_bin() {
  local h="${TOPOSCHED_E2E_HELM:-}"
  [ "$h" != none ] || return 0
  [ -n "$h" ] || { [ -x /opt/toposched-tools/bin/helm ] && h=/opt/toposched-tools/bin/helm; } || h=$(command -v helm || true)
  echo "$h"
}
h() { "$HELM" --kubeconfig "$W/admin.kubeconfig" "$@"; }

# The operator's install: AWS's second-scheduler command on the chart (`helm install`), or, without
# helm, deploy/ (rendered from the same chart) with kubectl apply. No controller-manager runs here,
# so the Deployments and the DaemonSet create no pods: the API server validates them, and the
# harness runs the same programs as local processes with the same ServiceAccounts and configuration.
e2e_apply_deploy() {
  local f
  HELM=$(e2e_helm_bin)
  if [ -n "$HELM" ]; then
    h install toposched "$E2E_REPO/deploy/helm/toposched" --namespace kube-system \
      --set scheduler.enabled=true --set npd.enabled=false "${E2E_HELM_SETS[@]}" >>"$W/apply.log" 2>&1 ||
      { cat "$W/apply.log" >&2; die "helm install of deploy/helm/toposched failed"; }
    log "helm install: release toposched ($("$HELM" version --short))"
  else
    log "no helm (scripts/install-tools.sh installs it): applying deploy/ with kubectl instead"
    # The chart makes the extender's TLS Secrets itself; deploy/ needs them made first (docs/install.md).
    "$E2E_REPO/scripts/extender-certs.sh" kube-system 2>>"$W/apply.log" | k apply -f - >>"$W/apply.log" 2>&1 ||
      { cat "$W/apply.log" >&2; die "scripts/extender-certs.sh kube-system | kubectl apply -f - failed"; }
    local files=(extender-rbac.yaml device-plugin-rbac.yaml my-scheduler.yaml extender.yaml device-plugin.yaml)
    # dra.sh's draDriver.enabled=true: deploy/'s DRA manifests (rendered with the DeviceClasses).
    [[ " ${E2E_HELM_SETS[*]} " == *" draDriver.enabled=true "* ]] && files+=(dra-driver-rbac.yaml dra-driver.yaml dra-deviceclasses.yaml)
    for f in "${files[@]}"; do
      k apply -f "$E2E_REPO/deploy/$f" >>"$W/apply.log" 2>&1 || { cat "$W/apply.log" >&2; die "kubectl apply -f deploy/$f failed"; }
    done
  fi
  # The default-scheduler variant: validated by the API server, not created (same Deployment name).
  k apply --dry-run=server -f "$E2E_REPO/deploy/default-scheduler/extender-hostnetwork.yaml" >>"$W/apply.log" 2>&1 ||
    { cat "$W/apply.log" >&2; die "deploy/default-scheduler/extender-hostnetwork.yaml does not validate"; }
  # Its extender entry must stay the same as my-scheduler's, apart from the URL.
  python3 - "$E2E_REPO/deploy/my-scheduler.yaml" "$E2E_REPO/deploy/default-scheduler/kube-scheduler-config.yaml" <<'PY' ||
import re, sys
def entry(path):
    text = open(path).read()
    block = text[re.search(r"^\s*extenders:\s*$", text, re.M).start():]
    lines = [l.strip() for l in block.splitlines()[1:]]
    out, skip = [], False
    for l in lines:
        if not l or l.startswith("#") or l == "---" or re.match(r"^(kind|apiVersion|metadata):", l): break
        # The URL and the transport differ by design: the host-network variant is plain HTTP on
        # the node's loopback, my-scheduler's is TLS with a client certificate.
        if l.startswith("- urlPrefix:") or l.startswith("enableHTTPS:"): continue
        if l == "tlsConfig:": skip = True; continue
        if skip and re.match(r"^(insecure|serverName|certFile|keyFile|caFile|certData|keyData|caData):", l): continue
        skip = False
        out.append(l)
    return out
a, b = entry(sys.argv[1]), entry(sys.argv[2])
if a != b: sys.exit(f"extender entries differ:\n{a}\n{b}")
PY
    die "deploy/default-scheduler/kube-scheduler-config.yaml's extender entry differs from deploy/my-scheduler.yaml's"
  log "installed: $(k get sa,clusterrole,clusterrolebinding,role,rolebinding,configmap,deploy,svc,ds -A -l app.kubernetes.io/name=toposched --no-headers 2>/dev/null | wc -l) objects labelled app.kubernetes.io/name=toposched"
}

# sa_kubeconfig SA FILE: a kubeconfig carrying a token of kube-system/SA from the TokenRequest API.
sa_kubeconfig() {
  local sa="$1" file="$2" token
  token=$(api POST "/api/v1/namespaces/kube-system/serviceaccounts/$sa/token" \
    '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["https://kubernetes.default.svc"],"expirationSeconds":86400}}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["token"])') || die "TokenRequest for $sa failed"
  kubeconfig "$file" "$token"
}

# --- extender and scheduler --------------------------------------------------------------------

e2e_extender() {
  [ -f "$W/extender.kubeconfig" ] || sa_kubeconfig k8s-neuron-scheduler "$W/extender.kubeconfig"
  EXT_LOG_N=$((${EXT_LOG_N:-0} + 1))
  EXT_LOG="$W/extender-$EXT_LOG_N.log"
  start extender "$EXT_LOG" "$TOPOSCHED_BIN" extender --listen "127.0.0.1:$EXT_PORT" \
    --kubeconfig "$W/extender.kubeconfig" ${TOPOSCHED_E2E_EXTENDER_ARGS:-} "$@"
  wait_for 60 "extender /readyz" curl -sf "http://127.0.0.1:$EXT_PORT/readyz"
}

# e2e_secret_files NAME DIR: the keys of Secret kube-system/NAME as files in DIR (a pod's mount).
e2e_secret_files() {
  mkdir -p "$2" && chmod 700 "$2"
  k -n kube-system get secret "$1" -o json | python3 -c '
import base64, json, os, sys
for key, value in json.load(sys.stdin)["data"].items():
    with open(os.path.join(sys.argv[1], key), "wb") as f: f.write(base64.b64decode(value))
' "$2" || die "cannot read Secret kube-system/$1"
}

# The KubeSchedulerConfiguration of deploy/my-scheduler.yaml, as applied (read back from the API
# server), with what a local process needs instead of the in-cluster setup: apiVersion v1beta1
# (1.20), the extender's URL on 127.0.0.1, leader election off, a kubeconfig for the my-scheduler
# ServiceAccount, and for throughput runs nodeCacheCapable and the client QPS/burst.
# WHERE=pod (pods.sh: the Deployment's pod reads it from its ConfigMap): only the URL (with
# tlsConfig.serverName) and, on v1beta1, the health/metrics address change; leader election, the
# in-cluster credentials and the pod's certificate mount stay as the chart has them.
# e2e_scheduler_config FILE [nodeCacheCapable] [qps] [verbs: all|filter+prioritize+bind|filter+prioritize|none] [url] [WHERE: local|pod]
e2e_scheduler_config() {
  local file="$1" cache="${2:-true}" qps="${3:-}" verbs="${4:-all}" url="${5:-http://127.0.0.1:$EXT_PORT}" where="${6:-local}"
  k -n kube-system get configmap my-scheduler-config -o 'jsonpath={.data.my-scheduler-config\.yaml}' >"$file.orig" ||
    die "cannot read ConfigMap my-scheduler-config"
  [ "$where" = pod ] || [ -f "$W/scheduler.kubeconfig" ] || sa_kubeconfig my-scheduler "$W/scheduler.kubeconfig"
  # Also in pod mode: pods.sh's own calls to the extender present the client certificate from there.
  case "$url" in https://*) e2e_secret_files my-scheduler-extender-client "$W/extender-tls" ;; esac
  python3 - "$file.orig" "$file" "$cache" "$qps" "$verbs" "$url" "$W/scheduler.kubeconfig" "$SCHED_HEALTH_PORT" "$W/extender-tls" "$K8S_MINOR" "$where" <<'PY'
import re, sys
src, dst, cache, qps, verbs, url, kc, hport, tlsdir, minor, where = sys.argv[1:]
local = where == 'local'
text = open(src).read()
def sub(pattern, repl):
    global text
    new, n = re.subn(pattern, repl, text, flags=re.M)
    if n != 1:
        sys.exit(f"scheduler config: expected one match of {pattern!r}, found {n}")
    text = new
# The chart picks the version from the cluster's (helm install); deploy/ (kubectl apply, no helm)
# is rendered for current clusters (v1), and every field it sets is the same in v1beta1.
want = 'v1' if int(minor) >= 25 else 'v1beta1'
if int(minor) < 25:
    text = re.sub(r'^apiVersion: kubescheduler\.config\.k8s\.io/v1$', 'apiVersion: kubescheduler.config.k8s.io/v1beta1', text, flags=re.M)
have = re.search(r'^apiVersion: kubescheduler\.config\.k8s\.io/(\S+)$', text, re.M)
if not have or have.group(1) != want:
    sys.exit(f"scheduler config: kubescheduler.config.k8s.io/{have.group(1) if have else '?'} on Kubernetes 1.{minor}, expected {want}")
if int(minor) < 25:
    # v1beta1 serves healthz and metrics on 0.0.0.0:10251 unless told otherwise (v1 dropped the fields).
    sub(r'^kind: KubeSchedulerConfiguration$', f'kind: KubeSchedulerConfiguration\nhealthzBindAddress: 127.0.0.1:{hport}\nmetricsBindAddress: 127.0.0.1:{hport}')
if local:
    sub(r'^(\s*)leaderElect: true$', r'\1leaderElect: false')
    sub(r'^clientConnection:$', f'clientConnection:\n  kubeconfig: {kc}')
sub(r'^(\s*- urlPrefix: ).*$', rf'\g<1>{url}')
if url.startswith('http://'):
    # A local extender on loopback serves plain HTTP: no TLS, and no certificate files to look for.
    sub(r'^(\s*)enableHTTPS: true$', r'\1enableHTTPS: false')
    sub(r'^\s*tlsConfig:\n(?:\s+(?:insecure|serverName|certFile|keyFile|caFile): .*\n)+', '')
else:
    # TLS with the client certificate of Secret my-scheduler-extender-client, copied to TLSDIR (the
    # pod's mount; a pod has the mount itself), and the name the extender's serving certificate
    # carries (the URL is 127.0.0.1).
    for key in ('certFile', 'keyFile', 'caFile'):
        sub(rf'^(\s*){key}: /etc/kubernetes/my-scheduler/extender-tls/(\S+)$', rf'\g<1>{key}: {tlsdir}/\g<2>' if local else r'\g<0>')
    sub(r'^(\s*)insecure: false$', r'\1insecure: false\n\1serverName: k8s-neuron-scheduler.kube-system.svc')
sub(r'^(\s*)nodeCacheCapable: true$', rf'\1nodeCacheCapable: {cache}')
if qps:
    sub(r'^(\s*)qps: \d+$', rf'\1qps: {qps}')
    sub(r'^(\s*)burst: \d+$', rf'\1burst: {int(qps) * 2}')
if verbs == 'none':
    text = text[:text.index('extenders:')]
elif verbs != 'all':
    # Exactly the verbs named (e.g. filter+prioritize+bind); filter is always there. The chart
    # adds prioritizeVerb only with extender.filterAnswer=feasible.
    want = set(verbs.split('+'))
    if 'preempt' not in want:
        sub(r'^\s*preemptVerb: preempt\n', '')
    if 'bind' not in want:
        sub(r'^\s*bindVerb: bind\n', '')
    has_prioritize = re.search(r'^\s*prioritizeVerb: prioritize$', text, re.M) is not None
    if 'prioritize' in want and not has_prioritize:
        sub(r'^(\s*)filterVerb: filter$', r'\1filterVerb: filter\n\1prioritizeVerb: prioritize')
    elif 'prioritize' not in want and has_prioritize:
        sub(r'^\s*prioritizeVerb: prioritize\n', '')
open(dst, 'w').write(text)
PY
  [ $? = 0 ] || die "could not derive the scheduler configuration"
}

e2e_scheduler() {
  e2e_scheduler_config "$W/my-scheduler.yaml" "$@"
  SCHED_LOG_N=$((${SCHED_LOG_N:-0} + 1))
  SCHED_LOG="$W/scheduler-$SCHED_LOG_N.log"
  start my-scheduler "$SCHED_LOG" "$K8S_BIN/kube-scheduler" --config "$W/my-scheduler.yaml" \
    $(sched_port_flags) $(log_flags) --v="${E2E_SCHED_V:-2}" "${E2E_SCHED_EXTRA_FLAGS[@]}"
  wait_for 60 "my-scheduler started" grep -q -E 'Attempting to acquire leader lease|Starting Kubernetes Scheduler|Started' "$SCHED_LOG"
  kill -0 "$(pid_of my-scheduler)" 2>/dev/null || { cat "$SCHED_LOG" >&2; die "kube-scheduler exited"; }
}

# --- nodes ---------------------------------------------------------------------------------------

# Devices and cores per instance type, from the catalog through the CLI's what-if command.
type_shape() {
  local t="$1"
  "$TOPOSCHED_BIN" allocate --instance-type "$t" --devices 1 >/dev/null 2>&1 || die "unknown instance type $t"
  python3 - "$E2E_REPO/catalog/instance-types.yaml" "$t" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r'^  ' + re.escape(sys.argv[2]) + r':(?: &\S+)?\n((?:    .*\n|\s*\n)+)', text, re.M)
body = m.group(1)
d = int(re.search(r'^    devices: (\d+)', body, re.M).group(1))
c = int(re.search(r'^    cores_per_device: (\d+)', body, re.M).group(1))
print(d, c)
PY
}

# node_json NAME TYPE: the Node object (labels as on EKS).
e2e_node_object() {
  printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"%s","labels":{"kubernetes.io/hostname":"%s","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64","node.kubernetes.io/instance-type":"%s","beta.kubernetes.io/instance-type":"%s","toposched.io/e2e":"patched"}}}' "$1" "$1" "$2" "$2"
}

# e2e_node NAME TYPE: a Node without a kubelet. Its status (capacity, allocatable, Ready) is
# patched through /status, and the not-ready taint TaintNodesByCondition puts on new nodes removed.
e2e_node() {
  local name="$1" type="$2" shape
  shape=$(type_shape "$type")
  e2e_make_node "$name" "$type" ${shape% *} $(( ${shape% *} * ${shape#* } ))
}

# e2e_make_node NAME TYPE DEVICES CORES
e2e_make_node() {
  local out
  out=$(api POST /api/v1/nodes "$(e2e_node_object "$1" "$2")") || die "create node $1"
  grep -q '"kind": *"Node"' <<<"$out" || die "create node $1: $out"
  e2e_patch_node_status "$1" "$3" "$4"
}

e2e_patch_node_status() {
  local name="$1" dev="$2" cores="$3" now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local res="\"cpu\":\"192\",\"memory\":\"768Gi\",\"pods\":\"110\",\"aws.amazon.com/neuron\":\"$dev\",\"aws.amazon.com/neuroncore\":\"$cores\""
  local out
  out=$(api PATCH "/api/v1/nodes/$name/status" \
    "{\"status\":{\"capacity\":{$res},\"allocatable\":{$res},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"patched by the e2e harness\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}" \
    application/strategic-merge-patch+json) || die "patch status of $name"
  grep -q '"kind": *"Node"' <<<"$out" || die "patch status of $name: $out"
  api PATCH "/api/v1/nodes/$name" '{"spec":{"taints":null}}' application/merge-patch+json >/dev/null || die "untaint $name"
}

# Many nodes at once (4 parallel workers): e2e_nodes PREFIX COUNT TYPE... (types cycled)
e2e_nodes() {
  local prefix="$1" count="$2"; shift 2
  local types=("$@") shapes=() i t shape
  for t in "${types[@]}"; do shape=$(type_shape "$t"); shapes+=("${shape% *} $(( ${shape% *} * ${shape#* } ))"); done
  for ((i = 0; i < count; i++)); do
    echo "$prefix$i ${types[$((i % ${#types[@]}))]} ${shapes[$((i % ${#types[@]}))]}"
  done >"$W/nodes-$prefix.txt"
  export -f e2e_make_node e2e_node_object e2e_patch_node_status api die log
  export W API_PORT ADMIN_TOKEN
  xargs -P 4 -L 1 bash -c 'e2e_make_node "$0" "$1" "$2" "$3"' <"$W/nodes-$prefix.txt" || die "creating $count nodes"
  log "created $count nodes $prefix* (${types[*]})"
}

# --- pods ----------------------------------------------------------------------------------------

# pod NAME RESOURCE COUNT [key=value nodeSelector] [priorityClass]: a pod for my-scheduler.
pod_json() {
  local name="$1" res="$2" count="$3" sel="${4:-}" prio="${5:-}"
  local selector="" priority=""
  [ -n "$sel" ] && selector=",\"nodeSelector\":{\"${sel%%=*}\":\"${sel#*=}\"}"
  [ -n "$prio" ] && priority=",\"priorityClassName\":\"$prio\""
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"app":"e2e","e2e/case":"%s"},"annotations":{"example.com/keep":"mine"}},"spec":{"schedulerName":"my-scheduler","terminationGracePeriodSeconds":0%s%s,"containers":[{"name":"main","image":"registry.invalid/neuron-app:1","resources":{"limits":{"%s":"%s"},"requests":{"cpu":"100m"}}}]}}' \
    "$name" "$name" "$selector" "$priority" "$res" "$count"
}

# create_pod NAME RESOURCE COUNT [selector] [priorityClass] (namespace default)
create_pod() {
  local out
  out=$(api POST /api/v1/namespaces/default/pods "$(pod_json "$@")") || die "create pod $1"
  grep -q '"kind": *"Pod"' <<<"$out" || die "create pod $1: $out"
}

pod_field() { k -n default get pod "$1" -o "jsonpath=$2"; }
pod_node() { pod_field "$1" '{.spec.nodeName}'; }
pod_ids() { pod_field "$1" '{.metadata.annotations.AWS_NEURON_IDS}'; }
pod_bound() { [ -n "$(pod_node "$1")" ]; }

# wait_bound SECONDS POD...
wait_bound() {
  local limit="$1"; shift
  local p
  for p in "$@"; do wait_for "$limit" "pod $p to be bound" pod_bound "$p"; done
}

# events_of POD: the messages of the pod's events.
events_of() {
  k -n default get events --field-selector "involvedObject.name=$1" -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}'
}

# pending_with POD TEXT: the pod is unbound and an event of it contains TEXT.
pending_with() { ! pod_bound "$1" && events_of "$1" | grep -qF -- "$2"; }

# pod_settled POD: the scheduler has decided on the pod: bound, or refused (FailedScheduling).
pod_settled() { pod_bound "$1" || events_of "$1" | grep -q '^FailedScheduling:'; }

# bound_count: how many pods of the default namespace are bound.
bound_count() { k -n default get pods -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c .; }

# at_least_bound N: at least N pods of the default namespace are bound (for wait_for).
at_least_bound() { [ "$(bound_count)" -ge "$1" ]; }

# The ids of every bound pod on every node must be disjoint per node and resource kind (a core
# id c is on device c / coresPerDevice; device ids and core ids share devices).
check_no_double_allocation() {
  k get pods -A -o json >"$W/pods.json"
  python3 - "$W/pods.json" "$E2E_REPO/catalog/instance-types.yaml" <<'PY'
import json, re, sys
pods = json.load(open(sys.argv[1]))["items"]
cat = open(sys.argv[2]).read()
def cores_per_device(t):
    m = re.search(r'^  ' + re.escape(t) + r':(?: &\S+)?\n((?:    .*\n|\s*\n)+)', cat, re.M)
    body = m.group(1)
    lnc = re.search(r'lnc: \{physical_cores_per_device: (\d+), allowed: \[[^\]]*\], default: (\d+)\}', body)
    c = int(re.search(r'^    cores_per_device: (\d+)', body, re.M).group(1))
    return c
held = {}
bad = []
n = 0
for p in pods:
    ann = p["metadata"].get("annotations") or {}
    rec = ann.get("toposched.io/allocation")
    if not rec or not p["spec"].get("nodeName"):
        continue
    if p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        continue
    r = json.loads(rec)
    node = p["spec"]["nodeName"]
    if r["node"] != node:
        bad.append(f'{p["metadata"]["name"]}: record names node {r["node"]}, pod is on {node}')
    cpd = cores_per_device(r["instanceType"])
    n += 1
    for c in r["containers"]:
        for i in c["ids"]:
            if c["resource"].endswith("neuroncore"):
                keys = [("core", i)]
                dev = i // cpd
                keys.append(("dev-of-core", dev))
            else:
                keys = [("dev", i)] + [("core", i * cpd + k) for k in range(cpd)]
            for key in keys:
                if key[0] == "dev-of-core":
                    continue
                k2 = (node,) + key
                if k2 in held and held[k2] != p["metadata"]["name"]:
                    bad.append(f'{node} {key[0]} {key[1]} held by {held[k2]} and {p["metadata"]["name"]}')
                held[k2] = p["metadata"]["name"]
if bad:
    print("\n".join(bad)); sys.exit(1)
print(f"{n} allocated pods, no id given twice")
PY
}

# prebound_pod NAME NODE TYPE RESOURCE IDS(comma) [priorityClass]: a pod already on NODE with an
# allocation record, as a previous extender process would have left it (adopted from the watch).
prebound_pod() {
  local name="$1" node="$2" type="$3" res="$4" ids="$5" prio="${6:-}" n priority=""
  n=$(awk -F, '{print NF}' <<<"$ids")
  [ -n "$prio" ] && priority=",\"priorityClassName\":\"$prio\""
  local rec="{\\\"node\\\":\\\"$node\\\",\\\"instanceType\\\":\\\"$type\\\",\\\"containers\\\":[{\\\"name\\\":\\\"main\\\",\\\"resource\\\":\\\"$res\\\",\\\"ids\\\":[$ids]}]}"
  local body
  body=$(printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"app":"e2e-prebound"},"annotations":{"AWS_NEURON_IDS":"%s","NEURON_ALLOCATED":"true","NEURON_ALLOC_TIME":"%s","toposched.io/allocation":"%s"}},"spec":{"nodeName":"%s","schedulerName":"my-scheduler","terminationGracePeriodSeconds":0%s,"containers":[{"name":"main","image":"registry.invalid/neuron-app:1","resources":{"limits":{"%s":"%s"}}}]}}' \
    "$name" "$ids" "$(date +%s%N)" "$rec" "$node" "$priority" "$res" "$n")
  local out
  out=$(api POST /api/v1/namespaces/default/pods "$body") || die "create prebound pod $name"
  grep -q '"kind": *"Pod"' <<<"$out" || die "create prebound pod $name: $out"
}

# ids_contiguous "3,4,5": sorted ids are consecutive (no wrap-around).
ids_contiguous() { python3 -c 'import sys; v=sorted(int(x) for x in sys.argv[1].split(",")); sys.exit(0 if v==list(range(v[0],v[0]+len(v))) else 1)' "$1"; }
# ids_aligned "4,5,6,7": an aligned block of its own size (trn rows: groupIndex = id / size).
ids_aligned() { python3 -c 'import sys; v=sorted(int(x) for x in sys.argv[1].split(",")); n=len(v); sys.exit(0 if v==list(range(v[0],v[0]+n)) and v[0]%n==0 else 1)' "$1"; }
# ids_disjoint "0,1" "2,3" ...
ids_disjoint() { python3 -c 'import sys; s=[set(a.split(",")) for a in sys.argv[1:]]; u=set().union(*s); sys.exit(0 if len(u)==sum(map(len,s)) else 1)' "$@"; }

# check_annotations POD: the allocation annotations are there, consistent, and the pod's own kept.
check_annotations() {
  k -n default get pod "$1" -o json >"$W/pod-$1.json"
  python3 - "$W/pod-$1.json" <<'PY' || die "annotations of pod $1"
import json, sys
p = json.load(open(sys.argv[1]))
a = p["metadata"].get("annotations") or {}
name = p["metadata"]["name"]
errs = []
for key in ("AWS_NEURON_IDS", "NEURON_ALLOCATED", "NEURON_ALLOC_TIME", "toposched.io/allocation"):
    if key not in a: errs.append(f"missing {key}")
if a.get("example.com/keep") != "mine": errs.append("the pod's own annotation example.com/keep was lost")
if (p["metadata"].get("labels") or {}).get("app") != "e2e": errs.append("label app=e2e lost")
if not errs:
    if a["NEURON_ALLOCATED"] not in ("false", "true"): errs.append(f"NEURON_ALLOCATED={a['NEURON_ALLOCATED']}")
    if not a["NEURON_ALLOC_TIME"].isdigit() or len(a["NEURON_ALLOC_TIME"]) < 18: errs.append(f"NEURON_ALLOC_TIME={a['NEURON_ALLOC_TIME']} (Unix ns)")
    r = json.loads(a["toposched.io/allocation"])
    if r["node"] != p["spec"]["nodeName"]: errs.append(f"record node {r['node']} != {p['spec']['nodeName']}")
    ids = [i for c in r["containers"] for i in c["ids"]]
    if ",".join(map(str, sorted(ids))) != ",".join(sorted(a["AWS_NEURON_IDS"].split(","), key=int)):
        errs.append(f"record ids {ids} != AWS_NEURON_IDS {a['AWS_NEURON_IDS']}")
    lim = p["spec"]["containers"][0]["resources"]["limits"]
    want = sum(int(v) for k, v in lim.items() if k.startswith("aws.amazon.com/"))
    if len(ids) != want: errs.append(f"{len(ids)} ids for a request of {want}")
if errs:
    print(f"{name}: " + "; ".join(errs)); sys.exit(1)
PY
}

# --- a real kubelet with containerd, and the device plugin on a fake sysfs tree -------------------

# fake_host ROOT TYPE: what the Neuron driver shows under ROOT/sys, ROOT/dev and ROOT/opt/aws for a
# ring/chain instance type of the catalog (as test/deviceplugin_fixtures.h's FakeHost::Install):
# per device core_count (no newline), connected_devices "a, b\n"; the DMI product name; /dev/neuronN.
fake_host() {
  local root="$1" type="$2" shape d c i links
  shape=$(type_shape "$type"); d=${shape% *}; c=${shape#* }
  mkdir -p "$root/sys/devices/virtual/dmi/id" "$root/dev" "$root/opt/aws"
  printf '%s\n' "$type" >"$root/sys/devices/virtual/dmi/id/product_name"
  for ((i = 0; i < d; i++)); do
    local dir="$root/sys/class/neuron_device/neuron$i"
    mkdir -p "$dir"
    printf '%s' "$c" >"$dir/core_count"
    links=()
    [ $i -gt 0 ] && links+=($((i - 1)))
    [ $i -lt $((d - 1)) ] && links+=($((i + 1)))
    # inf2.48xlarge and inf1.24xlarge close the ring (the driver's table); smaller types are chains.
    if [ "$type" = inf2.48xlarge ] || [ "$type" = inf1.24xlarge ]; then
      [ $i = 0 ] && links=($((d - 1)) 1)
      [ $i = $((d - 1)) ] && links=($((d - 2)) 0)
    fi
    (IFS=,; printf '%s\n' "${links[*]}" | sed 's/,/, /g') >"$dir/connected_devices"
    : >"$root/dev/neuron$i"
  done
}

e2e_containerd() {
  local c="$W/ctd"
  mkdir -p "$c/root" "$c/state" "$c/opt" "$c/cni/bin" "$c/cni/conf"
  cat >"$c/config.toml" <<TOML
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/c.sock"
[ttrpc]
  address = "$c/c.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  enable_selinux = false
  # kubelet asks for oom_score_adj -998 (sandboxes) and -997 (critical pods); lowering it needs
  # CAP_SYS_RESOURCE, which a test machine (a VM sandbox, a container) may not give root, and then
  # runc fails with "can't get final child's PID from pipe". Clamped to containerd's own value instead.
  restrict_oom_score_adj = true
${E2E_PAUSE_IMAGE:+  sandbox_image = \"$E2E_PAUSE_IMAGE\"}
${E2E_CDI_DIR:+  enable_cdi = true}
${E2E_CDI_DIR:+  cdi_spec_dirs = [\"$E2E_CDI_DIR\", \"/etc/cdi\", \"/var/run/cdi\"]}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # runc's state in the work dir, not /run/containerd/runc (the machine's containerd's).
        Root = "$c/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$c/cni/bin"
    conf_dir = "$c/cni/conf"
TOML
  # E2E_CDI_DIR (dra.sh): CDI on (2.x: the default) with the DRA plugin's spec directory besides the
  # standard ones; containerd 2 moves both keys to io.containerd.cri.v1.runtime when it migrates.
  # containerd 2 reads this version-2 file too (it migrates it); its runc shim is found on PATH.
  start containerd "$W/containerd.log" env PATH="$(dirname "$(command -v "$CONTAINERD_BIN")"):$PATH" "$CONTAINERD_BIN" --config "$c/config.toml"
  wait_for 30 "containerd socket" test -S "$c/c.sock"
}

ctr_() { timeout 30 "$CTR_BIN" --address "$W/ctd/c.sock" -n k8s.io "$@"; }

# Before our containerd stops: kill and delete every task and container it runs, so the shims exit
# (and remove their sockets under /run/containerd/s) instead of being SIGKILLed with containers left.
e2e_containerd_cleanup() {
  [ -S "$W/ctd/c.sock" ] || return 0
  local id n=0
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1; n=$((n + 1)); done
  [ $n = 0 ] && [ -z "$(ctr_ containers ls -q 2>/dev/null)" ] && return 0
  # Until the killed tasks have stopped (bounded: a task that will not stop is deleted by force).
  local i
  for i in $(seq 1 50); do ctr_ tasks ls 2>/dev/null | grep -q RUNNING || break; sleep 0.1; done
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1; done
  for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$id" >/dev/null 2>&1; done
  log "containerd: killed $n tasks, $(ctr_ containers ls -q 2>/dev/null | wc -l) containers left"
}

# --- images (pods.sh): toposched, a pause program and kube-scheduler, from scratch, imported into our containerd ---

E2E_IMAGE_TAG=e2e
# e2e_images: builds the image archives into $W/images with scripts/image.sh (buildah from Debian;
# installed when missing): toposched, the static pause program (test/e2e/pause.c), and kube-scheduler
# from $K8S_BIN (a static Go binary) named as the chart names my-scheduler's image for this cluster,
# registry.k8s.io/kube-scheduler:vMAJOR.MINOR.PATCH (E2E_SCHED_IMAGE); SKIP when that fails.
e2e_images() {
  local d="$W/images" rc=0
  e2e_pause_image
  nice -n 19 "$E2E_REPO/scripts/image.sh" --tag "$E2E_IMAGE_TAG" -o "$d/toposched.tar" "$TOPOSCHED_BIN" \
    >"$d/image-toposched.log" 2>&1 || rc=$?
  [ $rc = 0 ] || { tail -5 "$d/image-toposched.log" >&2; skip "scripts/image.sh could not build the toposched image ($rc)"; }
  local version tag
  version=$("$K8S_BIN/kube-scheduler" --version 2>/dev/null | awk '{print $2}')
  tag=$(k8s_release_tag "$version")
  [ -n "$tag" ] || die "$K8S_BIN/kube-scheduler --version says '$version': no vMAJOR.MINOR.PATCH to tag its image with"
  nice -n 19 "$E2E_REPO/scripts/image.sh" --name registry.k8s.io/kube-scheduler --tag "$tag" \
    -o "$d/kube-scheduler.tar" "$K8S_BIN/kube-scheduler" >"$d/image-kube-scheduler.log" 2>&1 || rc=$?
  [ $rc = 0 ] || { tail -5 "$d/image-kube-scheduler.log" >&2; skip "scripts/image.sh could not build the kube-scheduler image ($rc)"; }
  E2E_IMAGE="localhost/toposched:$E2E_IMAGE_TAG"
  E2E_SCHED_IMAGE="registry.k8s.io/kube-scheduler:$tag"
  E2E_IMAGES=1
  local f
  for f in toposched pause kube-scheduler; do log "image: $(grep '^\[image\]' "$d/image-$f.log" | tail -1 | cut -c9-)"; done
}

# e2e_import_images: into our containerd's k8s.io namespace (where the CRI plugin looks), unpacked
# into the native snapshotter the CRI plugin uses (ctr's default would be overlayfs).
# ctr_import_flags: sets CTR_IMPORT_FLAGS. containerd 2 imports through its transfer service,
# which unpacks only into the snapshotters of its unpack_config (overlayfs by default): --local
# imports directly, into native (1.6 has no flag). The help is read whole first: `ctr --help |
# grep -q` lets grep close the pipe early, and under pipefail ctr's SIGPIPE made the test fail at
# random, leaving the flag out (then "no unpack platforms defined").
ctr_import_flags() {
  local help
  help=$("$CTR_BIN" images import --help 2>&1 || true)
  CTR_IMPORT_FLAGS=()
  [[ "$help" == *--local* ]] && CTR_IMPORT_FLAGS=(--local)
  return 0
}

# e2e_import_archive NAME: $W/images/NAME.tar into containerd (k8s.io namespace, native snapshotter).
e2e_import_archive() {
  ctr_import_flags
  ctr_ images import "${CTR_IMPORT_FLAGS[@]}" --snapshotter native --platform linux/amd64 "$W/images/$1.tar" >>"$W/images/import.log" 2>&1 ||
    { cat "$W/images/import.log" >&2; die "ctr images import $1.tar failed"; }
}

e2e_import_images() {
  local f
  for f in pause toposched kube-scheduler; do e2e_import_archive "$f"; done
  local have; have=$(ctr_ images ls -q)
  for f in "$E2E_PAUSE_IMAGE" "$E2E_IMAGE" "$E2E_SCHED_IMAGE"; do
    grep -qx "$f" <<<"$have" || die "image $f is not in containerd after the import"
  done
  [ -n "$(ctr_ snapshots --snapshotter native ls 2>/dev/null | tail -n +2)" ] || die "no native snapshots after the import"
  log "imported $E2E_PAUSE_IMAGE, $E2E_IMAGE and $E2E_SCHED_IMAGE into containerd (k8s.io, native snapshotter)"
}

# The kubelet's default hard eviction (imagefs.available<15%, nodefs.available<10%) reads the
# machine's whole disk: a CI machine that has just built four trees of C++ and two Kubernetes is
# often below 15 %, the kubelet reports DiskPressure and refuses every new pod at admission (seen:
# the plugin's Allocate never called). The thresholds are set to what the tests can live with.
E2E_EVICTION_FLAG="memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%"
kubelet_args() {
  local kc="${E2E_KUBELET_KUBECONFIG:-$W/admin.kubeconfig}"
  if k8s_at_least 27; then
    # 1.27 dropped --container-runtime and moved most flags into the configuration file.
    e2e_kubelet_config "$W/kubelet-config.yaml"
    local root="${E2E_KUBELET_ROOT:-$W/kubelet}"
    echo --config "$W/kubelet-config.yaml" --kubeconfig "$kc" --root-dir "$root" --cert-dir "$root/pki" \
      --hostname-override="$KUBELET_NODE" --node-ip=127.0.0.1 --register-node=true \
      --node-labels="node.kubernetes.io/instance-type=$KUBELET_TYPE${E2E_KUBELET_LABELS:+,$E2E_KUBELET_LABELS}" --v=2
    return 0
  fi
  echo --kubeconfig "$kc" --root-dir "$W/kubelet" --cert-dir "$W/kubelet/pki" \
    --container-runtime=remote --container-runtime-endpoint="unix://$W/ctd/c.sock" \
    --cgroup-driver=cgroupfs --cgroups-per-qos=false --enforce-node-allocatable= \
    --fail-swap-on=false --hostname-override="$KUBELET_NODE" --node-ip=127.0.0.1 --address=127.0.0.1 \
    --port="$KUBELET_PORT" --read-only-port=0 --healthz-port=0 --authorization-mode=AlwaysAllow \
    --register-node=true --node-labels="node.kubernetes.io/instance-type=$KUBELET_TYPE" \
    --make-iptables-util-chains=false --volume-plugin-dir="$W/kubelet/volume-plugins" \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 --node-status-update-frequency=4s \
    --eviction-hard="$E2E_EVICTION_FLAG" \
    ${E2E_PAUSE_IMAGE:+--pod-infra-container-image=$E2E_PAUSE_IMAGE} --logtostderr --v=2
}

# e2e_kubelet_config FILE: what 1.20's flags say, as a KubeletConfiguration (1.27+). These machines
# run cgroup v1 without systemd: cgroupfs, no QoS cgroups, and failCgroupV1: false, without which
# kubelet 1.35+ refuses to start on cgroup v1.
e2e_kubelet_config() {
  cat >"$1" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$W/ctd/c.sock
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: ["none"]
failSwapOn: false
failCgroupV1: false
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
makeIPTablesUtilChains: false
volumePluginDir: ${E2E_KUBELET_ROOT:-$W/kubelet}/volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 4s
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
YAML
}

# kubelet 1.20 writes container logs to the fixed /var/log/pods (and links in /var/log/containers):
# what appears there while the scenario runs is removed at teardown, and the directories if it made them.
E2E_VARLOG=()
e2e_kubelet() {
  if [ ${#E2E_VARLOG[@]} = 0 ]; then
    local d
    for d in /var/log/pods /var/log/containers; do
      if [ -d "$d" ]; then ls -A "$d" >"$W/varlog-$(basename "$d").before"; else : >"$W/varlog-$(basename "$d").made"; fi
      E2E_VARLOG+=("$d")
    done
  fi
  KUBELET_LOG_N=$((${KUBELET_LOG_N:-0} + 1))
  KUBELET_LOG="$W/kubelet-$KUBELET_LOG_N.log"
  # shellcheck disable=SC2046
  start kubelet "$KUBELET_LOG" "$K8S_BIN/kubelet" $(kubelet_args)
  wait_for 60 "kubelet's device-plugin socket" test -S /var/lib/kubelet/device-plugins/kubelet.sock
}

e2e_device_plugin() {
  port_free "$DP_PROBE_PORT" || die "127.0.0.1:$DP_PROBE_PORT is in use (set TOPOSCHED_E2E_PORT_BASE)"
  [ -f "$W/device-plugin.kubeconfig" ] || sa_kubeconfig neuron-device-plugin "$W/device-plugin.kubeconfig"
  DP_LOG_N=$((${DP_LOG_N:-0} + 1))
  DP_LOG="$W/device-plugin-$DP_LOG_N.log"
  start device-plugin "$DP_LOG" "$TOPOSCHED_BIN" device-plugin --node-name "$KUBELET_NODE" \
    --kubeconfig "$W/device-plugin.kubeconfig" --sysfs-root "$W/host/sys" --dev-root "$W/host/dev" \
    --opt-aws-root "$W/host/opt/aws" --kubelet-dir /var/lib/kubelet/device-plugins \
    --pod-resources-socket "$W/kubelet/pod-resources/kubelet.sock" --reconcile-interval-s 5 \
    --probe-listen "127.0.0.1:$DP_PROBE_PORT" ${TOPOSCHED_E2E_DP_ARGS:-}
}
# The device plugin's /readyz answers 200: registered, and kubelet holds its devices (where kubelet
# offers GetAllocatableResources, 1.21+).
dp_ready() { curl -sf "http://127.0.0.1:$DP_PROBE_PORT/readyz" >/dev/null; }

# What a failing scenario with a kubelet shows first: the device plugin's last calls, the kubelet's
# last admission and device-manager lines.
e2e_kubelet_why() {
  [ -n "${DP_LOG:-}" ] && [ -f "$DP_LOG" ] && { echo "device plugin ($(basename "$DP_LOG")):"; grep -E "Allocate|GetPreferred|refus|granted|regist|PodResources|ready|allocatable" "$DP_LOG" | tail -n 5; }
  [ -n "${KUBELET_LOG:-}" ] && [ -f "$KUBELET_LOG" ] && { echo "kubelet ($(basename "$KUBELET_LOG")):"; grep -iE "admi|devicemanager|device_manager|manager.go.*(Allocate|endpoint|plugin)|UnexpectedAdmission|Pressure|evict" "$KUBELET_LOG" | tail -n 5; }
  return 0
}
e2e_why() { e2e_kubelet_why; }

node_allocatable() { k get node "$1" -o "jsonpath={.status.allocatable.${2//./\\.}}"; }

# e2e_kubelet_node NAME TYPE: containerd, kubelet (the node registers itself), and the device plugin
# on a fake tree of TYPE; waits until the node advertises every device and core.
e2e_kubelet_node() {
  KUBELET_NODE="$1" KUBELET_TYPE="$2"
  if [ -S /var/lib/kubelet/device-plugins/kubelet.sock ] && [ -n "$(pgrep -x kubelet || true)" ]; then
    skip "a kubelet already runs on this machine (/var/lib/kubelet/device-plugins/kubelet.sock)"
  fi
  [ -d /var/lib/kubelet ] || E2E_MADE_KUBELET_DIR=1
  fake_host "$W/host" "$KUBELET_TYPE"
  e2e_containerd
  [ "${E2E_IMAGES:-0}" = 1 ] && e2e_import_images
  e2e_kubelet
  wait_for 60 "node $KUBELET_NODE registered" k get node "$KUBELET_NODE"
  # TaintNodesByCondition put node.kubernetes.io/not-ready on it; no CNI, so it stays NotReady.
  api PATCH "/api/v1/nodes/$KUBELET_NODE" '{"spec":{"taints":null}}' application/merge-patch+json >/dev/null
  local shape; shape=$(type_shape "$KUBELET_TYPE")
  KUBELET_DEVICES=${shape% *}; KUBELET_CORES=$(( ${shape% *} * ${shape#* } ))
  # With images (pods.sh) the device plugin runs as a pod, started by the scenario.
  [ "${E2E_IMAGES:-0}" = 1 ] && return 0
  e2e_device_plugin
  wait_for 60 "$KUBELET_NODE allocatable aws.amazon.com/neuron=$KUBELET_DEVICES" \
    bash -c "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig get node $KUBELET_NODE -o 'jsonpath={.status.allocatable.aws\.amazon\.com/neuron}')\" = $KUBELET_DEVICES ]"
  wait_for 30 "$KUBELET_NODE allocatable aws.amazon.com/neuroncore=$KUBELET_CORES" \
    bash -c "[ \"\$($KUBECTL --kubeconfig $W/admin.kubeconfig get node $KUBELET_NODE -o 'jsonpath={.status.allocatable.aws\.amazon\.com/neuroncore}')\" = $KUBELET_CORES ]"
  log "kubelet node $KUBELET_NODE ($KUBELET_TYPE) advertises $KUBELET_DEVICES devices, $KUBELET_CORES cores"
}

# --- DRA (dra.sh): the resourceclaim controller, `toposched dra-plugin`, containers that start ---

# e2e_controller_manager CONTROLLERS: kube-controller-manager running only CONTROLLERS (a comma
# list; dra.sh: resourceclaim-controller, which makes a pod's ResourceClaims from its
# ResourceClaimTemplates and records their names in the pod's status), admin credentials, serving nothing.
e2e_controller_manager() {
  KCM_LOG="$W/controller-manager.log"
  start kube-controller-manager "$KCM_LOG" "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$W/admin.kubeconfig" --controllers "$1" --leader-elect=false --secure-port 0 \
    --kube-api-qps 500 --kube-api-burst 1000 \
    $(log_flags) --v=2
  wait_for 60 "kube-controller-manager's controllers ($1)" grep -q "Starting resource claim controller" "$KCM_LOG"
}

# e2e_admission_webhook: `toposched admission-webhook` on 127.0.0.1:$WEBHOOK_PORT, serving a
# certificate of the e2e CA, with the token of the chart's ServiceAccount (its RBAC is what is
# tested), and the chart's MutatingWebhookConfiguration (its selectors and matchConditions, as the
# API server validates and runs them) pointed at it instead of its Service.
e2e_admission_webhook() {
  (
    cd "$W/pki"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=toposched-admission-webhook" -keyout webhook.key -out webhook.csr
    printf 'subjectAltName=IP:127.0.0.1\n' >webhook.ext
    openssl x509 -req -in webhook.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile webhook.ext -out webhook.crt
  ) >>"$W/openssl.log" 2>&1 || die "openssl failed for the webhook's certificate (see $W/openssl.log)"
  sa_kubeconfig toposched-admission-webhook "$W/webhook.kubeconfig"
  WEBHOOK_LOG="$W/admission-webhook.log"
  start admission-webhook "$WEBHOOK_LOG" "$TOPOSCHED_BIN" admission-webhook --listen "127.0.0.1:$WEBHOOK_PORT" \
    --tls-cert-file "$W/pki/webhook.crt" --tls-key-file "$W/pki/webhook.key" --kubeconfig "$W/webhook.kubeconfig"
  wait_for 30 "admission webhook /healthz" curl -sf --cacert "$W/pki/ca.crt" "https://127.0.0.1:$WEBHOOK_PORT/healthz"
  k get mutatingwebhookconfiguration toposched-neuron-count-requests -o json >"$W/mwc.json" ||
    die "the chart installed no MutatingWebhookConfiguration toposched-neuron-count-requests"
  python3 - "$W/mwc.json" "https://127.0.0.1:$WEBHOOK_PORT/mutate-pods" "$W/pki/ca.crt" <<'PY' >"$W/mwc-local.json" || die "rewriting the webhook configuration"
import base64, json, sys
mwc = json.load(open(sys.argv[1]))
ca = base64.b64encode(open(sys.argv[3], "rb").read()).decode()
for hook in mwc["webhooks"]:
    hook["clientConfig"] = {"url": sys.argv[2], "caBundle": ca}
print(json.dumps(mwc))
PY
  k replace -f "$W/mwc-local.json" >>"$W/apply.log" 2>&1 || die "kubectl replace of the webhook configuration failed (see $W/apply.log)"
  log "admission webhook on 127.0.0.1:$WEBHOOK_PORT; the chart's webhooks $(python3 -c 'import json,sys; print(", ".join(h["name"] for h in json.load(open(sys.argv[1]))["webhooks"]))' "$W/mwc.json") call it"
}

# e2e_pause_image: only the pause image of e2e_images (test/e2e/pause.c packed by scripts/image.sh,
# buildah installed when missing), for containers that must start; containerd's sandbox image.
# SKIP when it cannot be built. e2e_dra_node imports it.
e2e_pause_image() {
  local d="$W/images" rc=0
  mkdir -p "$d"
  command -v gcc >/dev/null || skip "no gcc to build test/e2e/pause.c"
  gcc -static -O2 -o "$d/pause" "$E2E_DIR/pause.c" >"$d/gcc.log" 2>&1 || skip "gcc -static test/e2e/pause.c failed: $(head -3 "$d/gcc.log")"
  nice -n 19 "$E2E_REPO/scripts/image.sh" --name localhost/toposched-pause --tag "$E2E_IMAGE_TAG" \
    --entrypoint /pause --user 65535:65535 -o "$d/pause.tar" "$d/pause" >"$d/image-pause.log" 2>&1 || rc=$?
  [ $rc = 0 ] || { tail -5 "$d/image-pause.log" >&2; skip "scripts/image.sh could not build the pause image ($rc)"; }
  E2E_PAUSE_IMAGE="localhost/toposched-pause:$E2E_IMAGE_TAG"
}

e2e_import_pause_image() {
  e2e_import_archive pause
  grep -qx "$E2E_PAUSE_IMAGE" <<<"$(ctr_ images ls -q)" || die "image $E2E_PAUSE_IMAGE is not in containerd after the import"
}

# e2e_host_dev_nodes COUNT: /dev/neuron0..COUNT-1 on the host as character devices 1:3 (what
# /dev/null is), made only where none exists and removed at teardown. The DRA plugin's CDI specs
# name the host's /dev/neuronN (a container gets the node the driver made), and CDI refuses
# anything but a device node, so containers with Neuron devices can start on a machine without
# the Neuron driver. The fake sysfs tree keeps its own /dev for the plugins' health checks.
e2e_host_dev_nodes() {
  local i
  ls /dev/neuron* >/dev/null 2>&1 && [ ! -f "$W/host-dev-nodes.made" ] &&
    skip "this machine has /dev/neuron* (a Neuron driver?): the scenario will not stand in for it"
  for ((i = 0; i < $1; i++)); do
    [ -e "/dev/neuron$i" ] && continue
    mknod -m 0666 "/dev/neuron$i" c 1 3 || die "mknod /dev/neuron$i"
    echo "/dev/neuron$i" >>"$W/host-dev-nodes.made"
  done
}
# Called by e2e_teardown: the device nodes e2e_host_dev_nodes made, and nothing else.
e2e_remove_host_dev_nodes() {
  [ -n "${W:-}" ] && [ -f "$W/host-dev-nodes.made" ] || return 0
  local f
  while read -r f; do case "$f" in /dev/neuron[0-9]*) [ -c "$f" ] && rm -f "$f" ;; esac; done <"$W/host-dev-nodes.made"
  rm -f "$W/host-dev-nodes.made"
}

# e2e_dra_plugin NODE HOSTROOT [ARGS...]: `toposched dra-plugin` for NODE on the fake tree at
# HOSTROOT, with a token of the chart's neuron-dra-driver-sa (so exactly the chart's RBAC), its
# sockets in the kubelet's root dir (E2E_KUBELET_ROOT) and kubelet's PodResources socket there,
# CDI specs in E2E_CDI_DIR, probes on DRA_PROBE_PORT (default: the device plugin's port, for
# scenarios that run only one of the two).
E2E_DRA_SA=neuron-dra-driver-sa
e2e_dra_plugin() {
  local node="$1" host="$2"; shift 2
  local root="${E2E_KUBELET_ROOT:-$W/kubelet}"
  [ -f "$W/dra-plugin.kubeconfig" ] || sa_kubeconfig "$E2E_DRA_SA" "$W/dra-plugin.kubeconfig"
  local port="${DRA_PROBE_PORT:-$DP_PROBE_PORT}"
  port_free "$port" || die "127.0.0.1:$port is in use (set TOPOSCHED_E2E_PORT_BASE)"
  mkdir -p "$E2E_CDI_DIR"
  DRA_LOG_N=$((${DRA_LOG_N:-0} + 1))
  DRA_LOG="$W/dra-plugin-$DRA_LOG_N.log"
  start dra-plugin "$DRA_LOG" "$TOPOSCHED_BIN" dra-plugin --node-name "$node" \
    --kubeconfig "$W/dra-plugin.kubeconfig" --sysfs-root "$host/sys" --dev-root "$host/dev" \
    --opt-aws-root "$host/opt/aws" --cdi-root "$E2E_CDI_DIR" --plugin-dir "$root/plugins/neuron.aws.com" \
    --registry-dir "$root/plugins_registry" --pod-resources-socket "$root/pod-resources/kubelet.sock" \
    --probe-listen "127.0.0.1:$port" --health-interval-ms 500 ${TOPOSCHED_E2E_DRA_ARGS:-} "$@"
}
dra_ready() { curl -sf "http://127.0.0.1:${DRA_PROBE_PORT:-$DP_PROBE_PORT}/readyz" >/dev/null; }

# e2e_dra_node NAME TYPE: containerd with CDI (started once, with the pause image), a kubelet for
# node NAME labelled toposched.io/neuron-management=dra with its own root dir, the host's
# /dev/neuronN, and `toposched dra-plugin` on a fake tree of TYPE under $W/host-NAME; waits until
# the kubelet has registered the plugin and the node's ResourceSlices are published. One kubelet
# at a time (fixed ports and /var/lib/kubelet/device-plugins): stop the previous one first
# (e2e_dra_node_stop).
e2e_dra_node() {
  KUBELET_NODE="$1" KUBELET_TYPE="$2"
  if [ -z "$(pid_of kubelet 2>/dev/null)" ] && [ -S /var/lib/kubelet/device-plugins/kubelet.sock ] && [ -n "$(pgrep -x kubelet || true)" ]; then
    skip "a kubelet already runs on this machine (/var/lib/kubelet/device-plugins/kubelet.sock)"
  fi
  [ -d /var/lib/kubelet ] || E2E_MADE_KUBELET_DIR=1
  E2E_CDI_DIR="${E2E_CDI_DIR:-$W/cdi}"
  DRA_HOST="$W/host-$KUBELET_NODE"
  fake_host "$DRA_HOST" "$KUBELET_TYPE"
  local shape; shape=$(type_shape "$KUBELET_TYPE")
  KUBELET_DEVICES=${shape% *}
  e2e_host_dev_nodes "$KUBELET_DEVICES"
  if [ -z "$(pid_of containerd 2>/dev/null)" ]; then
    e2e_containerd
    e2e_import_pause_image
  fi
  E2E_KUBELET_ROOT="$W/kubelet-$KUBELET_NODE"
  E2E_KUBELET_LABELS="toposched.io/neuron-management=dra"
  e2e_kubelet
  wait_for 60 "node $KUBELET_NODE registered" k get node "$KUBELET_NODE"
  api PATCH "/api/v1/nodes/$KUBELET_NODE" '{"spec":{"taints":null}}' application/merge-patch+json >/dev/null
  e2e_dra_plugin "$KUBELET_NODE" "$DRA_HOST"
  wait_for 60 "the kubelet to register the DRA plugin of $KUBELET_NODE" grep -q "RegisterPlugin started.*neuron.aws.com-reg.sock" "$KUBELET_LOG"
  wait_for 60 "ResourceSlices of $KUBELET_NODE" node_slices_have "$KUBELET_NODE" neurondevice0
  log "kubelet node $KUBELET_NODE ($KUBELET_TYPE, DRA) publishes $(node_slice_devices "$KUBELET_NODE" | wc -l) devices in $(node_slice_names "$KUBELET_NODE" | wc -l) ResourceSlices"
}

# e2e_dra_node_stop: the DRA plugin and the kubelet of the current node (containerd stays).
e2e_dra_node_stop() { stop dra-plugin; stop kubelet; }

# The node's ResourceSlices (driver neuron.aws.com): their names, and the device names they publish.
node_slices_json() { k get resourceslices -o json --field-selector "spec.nodeName=$1,spec.driver=neuron.aws.com"; }
node_slice_names() { node_slices_json "$1" | python3 -c 'import json,sys; [print(s["metadata"]["name"]) for s in json.load(sys.stdin)["items"]]'; }
node_slice_devices() { node_slices_json "$1" | python3 -c 'import json,sys; [print(d["name"]) for s in json.load(sys.stdin)["items"] for d in (s["spec"].get("devices") or [])]'; }
# offers_with NODE "D1 D2 …" CORES_PER_DEVICE: NODE's published offers that hold any of the
# devices (a whole device, a set spanning one, a core range in one; dra_names.py).
offers_with() { node_slice_devices "$1" | python3 "$E2E_DIR/dra_names.py" "$2" "$3"; }
# node_slices_have NODE DEVICE / node_slices_lack NODE DEVICE
# (grep reads a here-string: `cmd | grep -q` under pipefail fails when grep's early exit
# SIGPIPEs cmd.)
node_slices_have() { grep -qx -- "$2" <<<"$(node_slice_devices "$1")"; }
node_slices_lack() { local d; d=$(node_slice_devices "$1") && [ -n "$d" ] && ! grep -qx -- "$2" <<<"$d"; }
