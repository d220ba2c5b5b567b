#!/usr/bin/env bash
# Builds the Kubernetes binaries the end-to-end tier runs, into a cache outside the repository, once
# per version; reused while the cache's VERSION stamp matches.
#
#   test/e2e/k8s-build.sh [1.20]    # kube-apiserver, kube-scheduler, kubelet, kubectl v1.20.2 from
#                                   # Debian's own `kubernetes` source package (golang-1.19-go)
#   test/e2e/k8s-build.sh 1.37      # a current control plane from its Go modules: the same four plus
#   test/e2e/k8s-build.sh 1.34      # kube-controller-manager, etcd 3.6 and containerd 2.2 (with its
#                                   # runc shim and ctr), from the pinned go.mod/go.sum in
#                                   # test/e2e/modules/ (pin.sh writes them); Go 1.26 in /usr/local/go
# Prints the bin directory on the last line.
#
# Environment: TOPOSCHED_E2E_CACHE (default /var/cache/toposched-e2e), TOPOSCHED_E2E_K8S (the
# version when no argument is given).
# The Debian build never edits /etc/apt: the deb-src line lives in a private apt configuration under
# the cache (Dir::Etc::SourceParts / Dir::State::Lists), made from the machine's own main-archive stanza.
# Needs root for `apt-get install`. Exit 77 when it cannot build (ctest SKIP).
set -euo pipefail
cache="${TOPOSCHED_E2E_CACHE:-/var/cache/toposched-e2e}"
asked="${1:-${TOPOSCHED_E2E_K8S:-1.20}}"
case "$asked" in
  1.20 | 1.20.2) ;;
  *) exec "$(dirname "$0")/k8s-build-modules.sh" "$asked" ;;
esac
want_version="1.20.2"
dest="$cache/k8s-$want_version"
bins=(kube-apiserver kube-scheduler kubelet kubectl)

# The build's identity: Kubernetes version plus the two changes we make to Debian's tree (below).
stamp="v$want_version+reflect2-1.0.2+pr103030"
have_all() {
  [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$stamp" ] || return 1
  for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
}
if have_all; then echo "$dest/bin"; exit 0; fi

if [ "$(id -u)" != 0 ]; then echo "k8s-build: needs root (apt-get install)" >&2; exit 77; fi
mkdir -p "$cache"
# One builder at a time (ctest may start several e2e tests).
exec 9>"$cache/build.lock"
flock 9
if have_all; then echo "$dest/bin"; exit 0; fi

export DEBIAN_FRONTEND=noninteractive
need=()
[ -x /usr/lib/go-1.19/bin/go ] || need+=(golang-1.19-go)
command -v rsync >/dev/null || need+=(rsync)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -f "$reflect2/reflect2.go" ] || need+=(golang-github-modern-go-reflect2-dev)
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y --no-install-recommends "${need[@]}" >&2 || { apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; } \
    || { echo "k8s-build: apt-get install ${need[*]} failed" >&2; exit 77; }
fi

# Private apt configuration with a deb-src stanza for bookworm main.
aptdir="$cache/apt"
mkdir -p "$aptdir/parts" "$aptdir/lists/partial"
src=/etc/apt/sources.list.d/debian.sources
uri="http://deb.debian.org/debian"
keyring="/usr/share/keyrings/debian-archive-keyring.gpg"
if [ -f "$src" ]; then
  u=$(awk '/^URIs:/{print $2; exit}' "$src"); [ -n "$u" ] && uri="$u"
  k=$(awk '/^Signed-By:/{print $2; exit}' "$src"); [ -n "$k" ] && keyring="$k"
fi
cat >"$aptdir/parts/toposched-src.sources" <<SRC
Types: deb-src
URIs: $uri
Suites: bookworm
Components: main
Signed-By: $keyring
SRC
aptopts=(-o "Dir::Etc::SourceParts=$aptdir/parts" -o Dir::Etc::SourceList=/dev/null -o "Dir::State::Lists=$aptdir/lists")
apt-get "${aptopts[@]}" update >&2 || { echo "k8s-build: deb-src index for $uri bookworm not reachable" >&2; exit 77; }
work="$cache/src"
rm -rf "$work"; mkdir -p "$work"
(cd "$work" && apt-get "${aptopts[@]}" source kubernetes >&2) || { echo "k8s-build: apt-get source kubernetes failed" >&2; exit 77; }
tree=$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -1)
[ -n "$tree" ] || { echo "k8s-build: no unpacked kubernetes tree in $work" >&2; exit 77; }
case "$tree" in *"$want_version"*) ;; *) echo "k8s-build: unexpected source version: $tree" >&2; exit 77;; esac

# Kubernetes 1.20 vendors github.com/modern-go/reflect2 v1.0.1, which reads Go's map iterator with
# the pre-1.18 layout: built with Go 1.19, kube-apiserver dies (SIGSEGV in aeshashbody under
# json-iterator's sorted-map encoder) on the first JSON response that carries a map, e.g. a Node
# created with labels. Debian's own reflect2 1.0.2 (golang-github-modern-go-reflect2-dev) has the
# Go >= 1.18 fix; put it in the vendor tree.
rm -rf "$tree/vendor/github.com/modern-go/reflect2"
mkdir -p "$tree/vendor/github.com/modern-go/reflect2"
cp "$reflect2"/*.go "$reflect2"/*.s "$tree/vendor/github.com/modern-go/reflect2/" 2>/dev/null ||
  cp "$reflect2"/*.go "$tree/vendor/github.com/modern-go/reflect2/"
# kube-scheduler 1.20.0-1.20.9 never calls an extender's preempt verb: the framework is built
# without its extenders (kubernetes/kubernetes#102971). Apply the one-line upstream fix, the 1.20
# cherry-pick #103030 (released in 1.20.10), so preemption through the extender can be tested.
factory="$tree/pkg/scheduler/factory.go"
if ! grep -q 'frameworkruntime.WithExtenders(extenders)' "$factory"; then
  sed -i 's|^\(\s*\)frameworkruntime.WithPodNominator(nominator),$|&\n\1frameworkruntime.WithExtenders(extenders),|' "$factory"
  grep -q 'frameworkruntime.WithExtenders(extenders)' "$factory" || { echo "k8s-build: could not apply #103030 to $factory" >&2; exit 1; }
fi
echo "k8s-build: building ${bins[*]} in $tree (about 4-5 minutes on 2 cores)" >&2
start=$(date +%s)
(
  cd "$tree"
  export PATH=/usr/lib/go-1.19/bin:$PATH GOPROXY=off CGO_ENABLED=0 \
         KUBE_GIT_VERSION="v$want_version" KUBE_BUILD_PLATFORMS=linux/amd64 GOCACHE="$cache/gocache"
  nice -n 19 make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kubelet cmd/kubectl" GOFLAGS=-p=2 GOLDFLAGS="-s -w" >&2
) || { echo "k8s-build: make failed" >&2; exit 1; }
mkdir -p "$dest/bin"
for b in "${bins[@]}"; do install -m 0755 "$tree/_output/bin/$b" "$dest/bin/$b"; done
echo "$stamp" >"$dest/VERSION"
echo "k8s-build: built in $(( $(date +%s) - start )) s" >&2
# The 2 GB build tree is not needed any more; the Go build cache stays for a quicker rebuild.
rm -rf "$work"
echo "$dest/bin"
