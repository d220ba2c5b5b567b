#!/usr/bin/env bash
# Makes the TLS Secrets that deploy/'s extender and my-scheduler mount (the Helm chart generates
# them itself; this is for `kubectl apply -f deploy/`): a CA, the extender's serving certificate
# for k8s-neuron-scheduler.NAMESPACE.svc, and the client certificate my-scheduler presents.
#   scripts/extender-certs.sh [NAMESPACE] | kubectl apply -f -
# Prints the two Secrets (k8s-neuron-scheduler-tls, my-scheduler-extender-client) as YAML.
set -euo pipefail
ns="${1:-kube-system}"
days="${TOPOSCHED_CERT_DAYS:-3650}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
openssl req -x509 -newkey rsa:2048 -nodes -days "$days" -subj /CN=toposched-extender-ca \
  -keyout ca.key -out ca.crt 2>/dev/null
san="DNS:k8s-neuron-scheduler,DNS:k8s-neuron-scheduler.$ns,DNS:k8s-neuron-scheduler.$ns.svc,DNS:k8s-neuron-scheduler.$ns.svc.cluster.local"
openssl req -newkey rsa:2048 -nodes -subj /CN=k8s-neuron-scheduler -keyout server.key -out server.csr 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san") -out server.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=my-scheduler -keyout client.key -out client.csr 2>/dev/null
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
  -extfile <(printf 'extendedKeyUsage=clientAuth\n') -out client.crt 2>/dev/null
b64() { base64 -w0 <"$1"; }
cat <<YAML
apiVersion: v1
kind: Secret
metadata: {name: k8s-neuron-scheduler-tls, namespace: $ns}
type: kubernetes.io/tls
data: {tls.crt: $(b64 server.crt), tls.key: $(b64 server.key), ca.crt: $(b64 ca.crt)}
---
apiVersion: v1
kind: Secret
metadata: {name: my-scheduler-extender-client, namespace: $ns}
type: kubernetes.io/tls
data: {tls.crt: $(b64 client.crt), tls.key: $(b64 client.key), ca.crt: $(b64 ca.crt)}
YAML
