#!/usr/bin/env bash
# The current-Kubernetes half of k8s-build.sh: builds a control plane from its Go modules, pinned in
# test/e2e/modules/ (k8s-<minor>/, etcd-3.6/, containerd-2.2/: go.mod + go.sum, written by pin.sh),
# into $TOPOSCHED_E2E_CACHE/k8s-<version>/bin, once. No binary is downloaded: the Go module proxy
# serves the sources, checked against go.sum.
#
#   test/e2e/k8s-build-modules.sh 1.37    # prints the bin directory on the last line
#
# Binaries: kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kubectl (version
# stamped as the release's own build does), etcd, containerd, containerd-shim-runc-v2, ctr. runc
# and CNI come from Debian. Exit 77 (ctest SKIP) when it cannot build: no Go 1.26, no module proxy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TOPOSCHED_E2E_CACHE:-/var/cache/toposched-e2e}"
minor="${1:?usage: k8s-build-modules.sh 1.37|1.34}"
minor="$(cut -d. -f1,2 <<<"$minor")"
mods="$here/modules"
k8s_mod="$mods/k8s-$minor"
[ -f "$k8s_mod/go.mod" ] || { echo "k8s-build: no pinned module for Kubernetes $minor (test/e2e/modules/k8s-$minor; pin.sh k8s $minor.N makes one)" >&2; exit 2; }
version=$(awk '{ if ($1 == "require") $0 = substr($0, 9) } $1 == "k8s.io/kubernetes" && $2 ~ /^v/ && $3 != "=>" {print substr($2, 2); exit}' "$k8s_mod/go.mod")
[ -n "$version" ] || { echo "k8s-build: $k8s_mod/go.mod requires no k8s.io/kubernetes" >&2; exit 2; }
etcd_mod="$mods/etcd-3.6" ctd_mod="$mods/containerd-2.2"
dest="$cache/k8s-$version"
go=/usr/local/go/bin/go
[ -x "$go" ] || go=$(command -v go || true)
[ -n "$go" ] || { echo "k8s-build: no Go toolchain (Go 1.26 is expected in /usr/local/go)" >&2; exit 77; }
gover=$("$go" env GOVERSION)
case "$gover" in go1.2[6-9]* | go1.[3-9]*) ;; *) echo "k8s-build: $gover is too old for Kubernetes $version (go.mod says go 1.26)" >&2; exit 77 ;; esac
k8s_bins=(kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl)
all_bins=("${k8s_bins[@]}" etcd containerd containerd-shim-runc-v2 ctr)

# The build's identity: the three pinned module graphs and the compiler.
stamp="v$version $gover $(cat "$k8s_mod/go.sum" "$etcd_mod/go.sum" "$ctd_mod/go.sum" "$k8s_mod/go.mod" "$etcd_mod/go.mod" "$ctd_mod/go.mod" | sha256sum | cut -c1-16)"
have_all() {
  [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$stamp" ] || return 1
  local b
  for b in "${all_bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
}
if have_all; then echo "$dest/bin"; exit 0; fi
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9
if have_all; then echo "$dest/bin"; exit 0; fi

export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false" CGO_ENABLED=0 \
       GOCACHE="$cache/gocache-$gover"
start=$(date +%s)
out="$dest/bin.new"
rm -rf "$out"; mkdir -p "$out"
echo "k8s-build: Kubernetes $version (${k8s_bins[*]}), etcd and containerd from their Go modules with $gover (about 15 minutes on 2 cores, the first time)" >&2
# What hack/lib/version.sh stamps: the API server's /version, and the compatibility version every
# component derives from its binary version.
major=${version%%.*} minor_n=$(cut -d. -f2 <<<"$version")
ldv=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldv+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor_n"
  ldv+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build() {  # build MODULE_DIR LDFLAGS PACKAGE...
  local dir="$1" flags="$2"; shift 2
  (cd "$dir" && "$go" mod download >&2 && nice -n 19 "$go" build -p 2 -ldflags "-s -w $flags" -o "$out/" "$@" >&2) ||
    { echo "k8s-build: go build in $dir failed (if the module proxy is unreachable: GOPROXY=$("$go" env GOPROXY))" >&2; exit 1; }
}
build "$k8s_mod" "$ldv" $(printf 'k8s.io/kubernetes/cmd/%s ' "${k8s_bins[@]}")
build "$etcd_mod" "" go.etcd.io/etcd/server/v3
# go names the binary after the module's path without its /v3: server.
[ -x "$out/server" ] || { echo "k8s-build: the etcd build left no $out/server ($(ls "$out" | tr '\n' ' '))" >&2; exit 1; }
mv "$out/server" "$out/etcd"
build "$ctd_mod" "" github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
rm -rf "$dest/bin"; mv "$out" "$dest/bin"
echo "$stamp" >"$dest/VERSION"
echo "k8s-build: built in $(( $(date +%s) - start )) s" >&2
echo "$dest/bin"
