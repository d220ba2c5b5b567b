#!/usr/bin/env bash
# The chart's life cycle against the real API server: `helm install` (done by the harness, AWS's
# second-scheduler command), `helm upgrade` with a changed value rolls the Deployments it must (the
# extender's pod template changes; my-scheduler's changes with its configuration), and `helm
# uninstall` leaves nothing of ours behind. Then AWS's default-scheduler command installs the other
# mode's objects, and a kube-scheduler playing the cluster's own reads the merged configuration the
# chart rendered and places a pod through the extender. Exits 77 without helm (scripts/install-tools.sh).
source "$(dirname "$0")/lib.sh"
e2e_init helm
[ -n "$(e2e_helm_bin)" ] || skip "no helm (scripts/install-tools.sh installs it)"
e2e_control_plane
CHART="$E2E_REPO/deploy/helm/toposched"
AWS_SECOND=(--set scheduler.enabled=true --set npd.enabled=false)

template_of() { k -n kube-system get deploy "$1" -o jsonpath='{.spec.template}'; }
generation() { k -n kube-system get deploy "$1" -o jsonpath='{.metadata.generation}'; }
ours() { k get sa,clusterrole,clusterrolebinding,role,rolebinding,configmap,secret,networkpolicy,deploy,svc,ds -A -l app.kubernetes.io/name=toposched --no-headers 2>/dev/null | awk '{print $1 "/" $2}' | sort; }

installed=$(ours)
[ "$(echo "$installed" | grep -c .)" -ge 17 ] || die "helm install made too few objects:\n$installed"
k -n kube-system get role k8s-neuron-scheduler >/dev/null || die "no lease Role for the extender"
[ "$(k -n kube-system get deploy k8s-neuron-scheduler -o jsonpath='{.spec.replicas}')" = 2 ] ||
  die "the extender Deployment does not have 2 replicas"
k -n kube-system get deploy k8s-neuron-scheduler -o jsonpath='{.spec.template.spec.containers[0].command}' |
  grep -q -- '--leader-elect=true' || die "the extender runs without --leader-elect"
# my-scheduler's image is kube-scheduler at the live cluster's version (helm's
# .Capabilities.KubeVersion is the API server's gitVersion), not a fixed tag.
api_version=$(k8s_server_version)
sched_image=$(k -n kube-system get deploy my-scheduler -o jsonpath='{.spec.template.spec.containers[0].image}')
[ "$sched_image" = "registry.k8s.io/kube-scheduler:$(k8s_release_tag "$api_version")" ] ||
  die "my-scheduler's image is $sched_image on API server $api_version, expected registry.k8s.io/kube-scheduler:$(k8s_release_tag "$api_version")"
pass "helm install: $(echo "$installed" | grep -c .) objects, extender with 2 replicas and leader election, my-scheduler image $sched_image for API server $api_version"

# The authenticated default: the chart generated the CA, the extender's serving certificate and
# my-scheduler's client certificate; the extender requires client certificates of that CA; a
# NetworkPolicy admits only my-scheduler's pods to the port.
secret_pem() { k -n kube-system get secret "$1" -o "jsonpath={.data.${2//./\\.}}" | base64 -d; }
mkdir -p "$W/tls"
for f in ca.crt tls.crt; do secret_pem k8s-neuron-scheduler-tls "$f" >"$W/tls/server-$f"; secret_pem my-scheduler-extender-client "$f" >"$W/tls/client-$f"; done
cmp -s "$W/tls/server-ca.crt" "$W/tls/client-ca.crt" || die "the two TLS Secrets carry different CAs"
openssl verify -CAfile "$W/tls/server-ca.crt" -purpose sslserver "$W/tls/server-tls.crt" >/dev/null &&
  openssl x509 -in "$W/tls/server-tls.crt" -noout -ext subjectAltName | grep -q 'k8s-neuron-scheduler.kube-system.svc' ||
  die "the extender's serving certificate does not verify for k8s-neuron-scheduler.kube-system.svc"
openssl verify -CAfile "$W/tls/server-ca.crt" -purpose sslclient "$W/tls/client-tls.crt" >/dev/null ||
  die "my-scheduler's client certificate does not verify against the extender's client CA"
k -n kube-system get deploy k8s-neuron-scheduler -o jsonpath='{.spec.template.spec.containers[0].command}' |
  grep -q -- '--tls-client-ca-file' || die "the extender does not require client certificates"
k -n kube-system get configmap my-scheduler-config -o jsonpath='{.data.my-scheduler-config\.yaml}' |
  grep -q 'enableHTTPS: true' || die "my-scheduler does not call the extender over HTTPS"
k -n kube-system get networkpolicy k8s-neuron-scheduler >/dev/null || die "no NetworkPolicy for the extender"
pass "helm install: TLS with client certificates by default (the chart's CA signs both; the extender verifies clients) and a NetworkPolicy"

ext_before=$(template_of k8s-neuron-scheduler); ext_gen=$(generation k8s-neuron-scheduler)
sched_gen=$(generation my-scheduler); dp_gen=$(k -n kube-system get ds neuron-device-plugin-daemonset -o jsonpath='{.metadata.generation}')
h upgrade toposched "$CHART" --namespace kube-system "${AWS_SECOND[@]}" \
  --set extender.logLevel=debug --set extender.httpTimeout=30s >>"$W/apply.log" 2>&1 ||
  { cat "$W/apply.log" >&2; die "helm upgrade failed"; }
[ "$(generation k8s-neuron-scheduler)" -gt "$ext_gen" ] || die "helm upgrade did not change the extender's pod template"
k -n kube-system get deploy k8s-neuron-scheduler -o jsonpath='{.spec.template.spec.containers[0].command}' |
  grep -q -- '"debug"' || die "the upgraded extender has no --log-level debug"
[ "$(generation my-scheduler)" -gt "$sched_gen" ] || die "a changed scheduler configuration did not roll my-scheduler"
k -n kube-system get configmap my-scheduler-config -o jsonpath='{.data.my-scheduler-config\.yaml}' |
  grep -q 'httpTimeout: 30s' || die "my-scheduler-config was not updated"
[ "$(k -n kube-system get ds neuron-device-plugin-daemonset -o jsonpath='{.metadata.generation}')" = "$dp_gen" ] ||
  die "the device plugin DaemonSet changed although none of its values did"
[ "$(template_of k8s-neuron-scheduler)" != "$ext_before" ] || die "extender template unchanged"
secret_pem k8s-neuron-scheduler-tls tls.crt | cmp -s - "$W/tls/server-tls.crt" || die "helm upgrade replaced the extender's certificate"
pass "helm upgrade: the extender and my-scheduler roll (generation up), the device plugin does not, the certificates are kept"

h uninstall toposched --namespace kube-system >>"$W/apply.log" 2>&1 || { cat "$W/apply.log" >&2; die "helm uninstall failed"; }
for i in $(seq 1 30); do [ -z "$(ours)" ] && break; sleep 1; done
[ -z "$(ours)" ] || die "helm uninstall left objects behind:\n$(ours)"
[ -z "$(k -n kube-system get secret -l owner=helm,name=toposched --no-headers 2>/dev/null)" ] || die "the release's record is left behind"
pass "helm uninstall: nothing of ours is left"

h install toposched "$CHART" --namespace kube-system --set scheduler.enabled=true \
  --set scheduler.customScheduler.enabled=false --set scheduler.defaultScheduler.enabled=true \
  --set npd.enabled=false >>"$W/apply.log" 2>&1 || { cat "$W/apply.log" >&2; die "helm install (default-scheduler mode) failed"; }
k -n kube-system get configmap k8s-neuron-scheduler-config >/dev/null || die "no k8s-neuron-scheduler-config"
k -n kube-system get deploy my-scheduler >/dev/null 2>&1 && die "default-scheduler mode installed my-scheduler"
[ "$(k -n kube-system get deploy k8s-neuron-scheduler -o jsonpath='{.spec.template.spec.hostNetwork}')" = true ] ||
  die "default-scheduler mode: the extender is not on the host network"
# The cluster's own kube-scheduler reading the merged configuration as the chart rendered it for
# this cluster's version (v1 on 1.25+, v1beta1 on 1.20), changed only where a local process must
# differ: its kubeconfig (kubeadm's scheduler.conf → the admin's here) and the extender's address
# (127.0.0.1:32700 → the local extender's port). A pod that names no scheduler is placed by it,
# through the extender.
k -n kube-system get configmap k8s-neuron-scheduler-config -o 'jsonpath={.data.kube-scheduler-config\.yaml}' >"$W/default-sched.orig" ||
  die "cannot read k8s-neuron-scheduler-config"
want_api=v1; k8s_before 25 && want_api=v1beta1
grep -qx "apiVersion: kubescheduler.config.k8s.io/$want_api" "$W/default-sched.orig" ||
  die "the default-scheduler configuration is not $want_api on Kubernetes $E2E_K8S: $(head -1 "$W/default-sched.orig")"
sed -e "s#^\(\s*kubeconfig:\) /etc/kubernetes/scheduler.conf\$#\1 $W/admin.kubeconfig#" \
    -e "s#^\(\s*- urlPrefix:\) http://127.0.0.1:32700\$#\1 http://127.0.0.1:$EXT_PORT#" "$W/default-sched.orig" >"$W/default-sched.yaml"
grep -q "$W/admin.kubeconfig" "$W/default-sched.yaml" && grep -q "127.0.0.1:$EXT_PORT" "$W/default-sched.yaml" ||
  die "could not point the default-scheduler configuration at this cluster: $(cat "$W/default-sched.yaml")"
if k8s_before 25; then
  # v1beta1 serves health and metrics on 0.0.0.0:10251 unless told otherwise.
  sed -i "s#^kind: KubeSchedulerConfiguration\$#&\nhealthzBindAddress: 127.0.0.1:$SCHED_HEALTH_PORT\nmetricsBindAddress: 127.0.0.1:$SCHED_HEALTH_PORT#" "$W/default-sched.yaml"
fi
e2e_node inf2-d inf2.48xlarge
e2e_extender
start default-scheduler "$W/default-scheduler.log" "$K8S_BIN/kube-scheduler" --config "$W/default-sched.yaml" \
  $(sched_port_flags) $(log_flags) --v=2
out=$(api POST /api/v1/namespaces/default/pods "$(pod_json plain-3 aws.amazon.com/neuron 3 kubernetes.io/hostname=inf2-d | sed 's/"schedulerName":"my-scheduler",//')") ||
  die "create pod plain-3"
grep -q '"kind": *"Pod"' <<<"$out" || die "create pod plain-3: $out"
wait_bound 60 plain-3
[ "$(pod_field plain-3 '{.spec.schedulerName}')" = default-scheduler ] || die "plain-3 is not the default scheduler's"
ids_contiguous "$(pod_ids plain-3)" || die "plain-3 got $(pod_ids plain-3), not a contiguous set"
check_annotations plain-3
stop default-scheduler; stop extender
h uninstall toposched --namespace kube-system >>"$W/apply.log" 2>&1 || die "helm uninstall (default-scheduler mode) failed"
pass "AWS's default-scheduler command: extender on the host network, its configuration, no my-scheduler; the cluster's kube-scheduler read the merged $want_api configuration and placed plain-3 (no schedulerName) through the extender: $(pod_ids plain-3); uninstalled"

