#!/usr/bin/env bash
# Writes (or refreshes) the pinned Go module of one control-plane component under test/e2e/modules/,
# from the Go module proxy: run by a developer when a version moves, never by the tests. The tests
# build from the committed go.mod/go.sum only (test/e2e/k8s-build.sh).
#
#   test/e2e/modules/pin.sh k8s 1.37.2        # k8s-1.37/: k8s.io/kubernetes v1.37.2, staging at v0.37.2
#   test/e2e/modules/pin.sh etcd 3.6.16       # etcd-3.6/: go.etcd.io/etcd/server/v3
#   test/e2e/modules/pin.sh containerd 2.2.9  # containerd-2.2/: containerd, its runc shim, ctr
#
# k8s.io/kubernetes requires every staging module at v0.0.0 and replaces it with ./staging/...; a
# consumer must pin each one to the matching v0.X.Y itself. The list is read from the release's own
# go.mod, so a new staging module (1.37 added cri-streaming and streaming) is never missed.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN=local GOFLAGS=-mod=mod
what="${1:?usage: pin.sh k8s|etcd|containerd VERSION}" version="${2:?usage: pin.sh k8s|etcd|containerd VERSION}"
minor="${version%.*}"
header() { printf '// Pinned by test/e2e/modules/pin.sh %s %s; built by test/e2e/k8s-build.sh.\nmodule toposched.local/e2e/%s\n\ngo 1.26.0\n\n' "$what" "$version" "$1"; }
case "$what" in
  k8s)
    dir="k8s-$minor"; mkdir -p "$dir"
    upstream=$(curl -sfS "${GOPROXY_URL:-https://proxy.golang.org}/k8s.io/kubernetes/@v/v$version.mod")
    staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' <<<"$upstream")
    [ -n "$staging" ] || { echo "pin.sh: no staging replacements in k8s.io/kubernetes v$version's go.mod" >&2; exit 1; }
    godebug=$(grep '^godebug ' <<<"$upstream" || true)
    {
      header k8s
      [ -n "$godebug" ] && printf '%s\n\n' "$godebug"
      printf 'require k8s.io/kubernetes v%s\n\nreplace (\n' "$version"
      for m in $staging; do printf '\t%s => %s v0.%s\n' "$m" "$m" "${version#1.}"; done
      printf ')\n\n'
      for t in kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl; do
        printf 'tool k8s.io/kubernetes/cmd/%s\n' "$t"
      done
    } >"$dir/go.mod"
    ;;
  etcd)
    dir="etcd-$minor"; mkdir -p "$dir"
    { header etcd; printf 'require go.etcd.io/etcd/server/v3 v%s\n\ntool go.etcd.io/etcd/server/v3\n' "$version"; } >"$dir/go.mod"
    ;;
  containerd)
    dir="containerd-$minor"; mkdir -p "$dir"
    {
      header containerd
      printf 'require github.com/containerd/containerd/v2 v%s\n\n' "$version"
      for t in containerd containerd-shim-runc-v2 ctr; do printf 'tool github.com/containerd/containerd/v2/cmd/%s\n' "$t"; done
    } >"$dir/go.mod"
    ;;
  *) echo "pin.sh: unknown component '$what' (k8s, etcd or containerd)" >&2; exit 2 ;;
esac
rm -f "$dir/go.sum"
(cd "$dir" && go mod tidy)
echo "pinned $what $version in test/e2e/modules/$dir"
