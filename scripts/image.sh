#!/usr/bin/env bash
# Builds a container image FROM SCRATCH around one binary, without a Docker engine: Debian's
# `buildah` (installed with apt when missing), a private buildah storage that is deleted afterwards,
# and the image written to an archive file (docker-archive or oci-archive) that `ctr images import`,
# `podman load`, `docker load` or `skopeo copy` take.
#
# The image holds: the binary at --entrypoint (default /usr/local/bin/toposched), every shared
# library `ldd` lists for it at the path ldd found it, the dynamic loader at the path the binary
# names (PT_INTERP), a minimal /etc/passwd, /etc/group and /etc/nsswitch.conf with the nonroot user
# 65532, an empty /tmp; ENTRYPOINT the binary, USER 65532:65532. A statically linked binary gets no
# libraries (the e2e tier packs its pause program and the control plane's kube-scheduler this way). No shell, no CA bundle: in a cluster
# the API server's CA comes from the ServiceAccount mount.
#
# The libraries are the build machine's (Debian 12 here), so the image runs wherever the binary does.
# A toposched built on this machine's default targets x86-64-v3 (AVX2, BMI2, FMA; -DTOPOSCHED_X86_64_V3)
# and refuses to start on an older CPU: fine for a test on the same machine; for nodes of unknown
# CPUs build with -DTOPOSCHED_X86_64_V3=OFF (as deploy/Containerfile does).
#
#   scripts/image.sh [options] [BINARY]        BINARY defaults to build-e2e/toposched
#     --name NAME         image name (default localhost/toposched)
#     --tag TAG           tag (default: git describe --always --dirty, else "latest")
#     --format F          docker-archive (default) or oci-archive
#     -o, --output FILE   archive to write (default ./<basename of name>-<tag>.tar)
#     --entrypoint PATH   where the binary goes in the image (default /usr/local/bin/<binary name>)
#     --cmd JSON          CMD, a JSON array (default ["--help"] for toposched, none otherwise)
#     --user UID:GID      USER (default 65532:65532)
#     --no-strip          keep the binary's symbols and debug info (stripped in the image by default;
#                         the file given is never changed)
# Prints the archive's path and the image reference on the last line: "FILE REF".
# Exit codes: 0 built; 2 usage; 77 buildah unavailable (not root, or apt failed); 1 other failures.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
name=localhost/toposched tag="" format=docker-archive output="" entrypoint="" cmd="" user=65532:65532
bin="" strip=1
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift 2;;
    --tag) tag="$2"; shift 2;;
    --format) format="$2"; shift 2;;
    -o|--output) output="$2"; shift 2;;
    --entrypoint) entrypoint="$2"; shift 2;;
    --cmd) cmd="$2"; shift 2;;
    --user) user="$2"; shift 2;;
    --no-strip) strip=0; shift;;
    -h|--help) usage;;
    -*) echo "image.sh: unknown option $1" >&2; usage;;
    *) bin="$1"; shift;;
  esac
done
say() { printf '[image] %s\n' "$*" >&2; }
bin="${bin:-$repo/build-e2e/toposched}"
[ -x "$bin" ] || { say "no executable at $bin (build it: nice -n 19 cmake --build build-e2e --target toposched)"; exit 1; }
bin="$(readlink -f "$bin")"
case "$format" in docker-archive|oci-archive) ;; *) say "--format must be docker-archive or oci-archive"; exit 2;; esac
[ -n "$tag" ] || tag="$(git -C "$repo" describe --always --dirty 2>/dev/null || echo latest)"
[ -n "$entrypoint" ] || entrypoint="/usr/local/bin/$(basename "$bin")"
if [ -z "$cmd" ] && [ "$(basename "$bin")" = toposched ]; then cmd='["--help"]'; fi
[ -n "$output" ] || output="$PWD/$(basename "$name")-$tag.tar"
case "$output" in /*) ;; *) output="$PWD/$output";; esac
ref="$name:$tag"

# --- buildah, from Debian's archive ---------------------------------------------------------------
if ! command -v buildah >/dev/null; then
  [ "$(id -u)" = 0 ] || { say "SKIP: buildah is not installed and installing it needs root"; exit 77; }
  say "apt-get install buildah"
  export DEBIAN_FRONTEND=noninteractive
  # Installing must not start system services on a machine without policy-rc.d (as test/e2e/lib.sh).
  policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made_policy=1; fi
  ok=0
  { apt-get install -y --no-install-recommends buildah >/dev/null 2>&1 ||
    { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends buildah >/dev/null 2>&1; }; } && ok=1
  [ $made_policy = 1 ] && rm -f "$policy"
  [ $ok = 1 ] && command -v buildah >/dev/null || { say "SKIP: apt-get install buildah failed"; exit 77; }
fi
[ "$(id -u)" = 0 ] || { say "SKIP: run as root (buildah's rootless mode needs subuid ranges; not set up here)"; exit 77; }

# buildah (containers/image) keeps a blob-info cache in /var/lib/containers/cache for root, whatever
# --root says: removed again afterwards when this run is what created /var/lib/containers.
made_varlib=0; [ -e /var/lib/containers ] || made_varlib=1

# --- the root file system -----------------------------------------------------------------------
tmp="$(mktemp -d /tmp/toposched-image.XXXXXX)"
ctr=""
cleanup() {
  [ -n "$ctr" ] && buildah "${B[@]}" rm "$ctr" >/dev/null 2>&1
  # vfs layers are plain directories; nothing stays mounted.
  rm -rf "$tmp"
  [ $made_varlib = 1 ] && rm -rf /var/lib/containers
  return 0
}
trap cleanup EXIT
root="$tmp/rootfs"
mkdir -p "$root/etc" "$root/tmp" "$(dirname "$root$entrypoint")"
chmod 1777 "$root/tmp"
if [ $strip = 1 ] && command -v strip >/dev/null; then
  strip --strip-all -o "$root$entrypoint" "$bin"; chmod 0755 "$root$entrypoint"
else
  install -m 0755 "$bin" "$root$entrypoint"
fi
# Every library ldd resolves ("name => /path (addr)"), and the loader ("/lib64/ld-linux-x86-64.so.2 (addr)"),
# copied (symlinks followed) to the path the loader will look for. linux-vdso is the kernel's.
libs=0
if ldd_out="$(ldd "$bin" 2>&1)"; then
  while read -r path; do
    [ -n "$path" ] || continue
    [ -e "$path" ] || { say "ldd names $path, which does not exist"; exit 1; }
    mkdir -p "$root$(dirname "$path")"
    cp -L "$path" "$root$path"
    libs=$((libs + 1))
  done < <(printf '%s\n' "$ldd_out" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
  grep -q 'not found' <<<"$ldd_out" && { say "ldd: a library is missing: $(grep 'not found' <<<"$ldd_out" | head -3)"; exit 1; }
else
  grep -qE 'not a dynamic executable|statically linked' <<<"$ldd_out" || { say "ldd $bin failed: $ldd_out"; exit 1; }
fi
uid="${user%%:*}" gid="${user##*:}"
{ echo "root:x:0:0:root:/root:/sbin/nologin"
  [ "$uid" = 0 ] || echo "nonroot:x:$uid:$gid:nonroot:/home/nonroot:/sbin/nologin"; } >"$root/etc/passwd"
{ echo "root:x:0:"; [ "$gid" = 0 ] || echo "nonroot:x:$gid:"; } >"$root/etc/group"
echo "hosts: files dns" >"$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"

# --- buildah: from scratch, copy, config, commit, push to the archive ----------------------------
# A private storage (vfs: no overlay mounts, works on any file system) and a permissive signature
# policy for local files, so nothing under /var/lib/containers or /etc/containers is used or left.
mkdir -p "$tmp/storage" "$tmp/run"
printf '{"default":[{"type":"insecureAcceptAnything"}]}\n' >"$tmp/policy.json"
B=(--root "$tmp/storage" --runroot "$tmp/run" --storage-driver vfs)
P=(--signature-policy "$tmp/policy.json")
ctr="$(buildah "${B[@]}" from "${P[@]}" scratch)"
buildah "${B[@]}" copy "$ctr" "$root/" / >/dev/null
config=(--entrypoint "[\"$entrypoint\"]" --user "$user" --workingdir / --os linux --arch "$(dpkg --print-architecture 2>/dev/null || echo amd64)"
  --env PATH=/usr/local/bin:/usr/bin:/bin
  --label org.opencontainers.image.title="$(basename "$name")"
  --label org.opencontainers.image.revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)")
if [ -n "$cmd" ]; then config+=(--cmd "$cmd"); else config+=(--cmd ""); fi
buildah "${B[@]}" config "${config[@]}" "$ctr"
fmt=docker; [ "$format" = oci-archive ] && fmt=oci
buildah "${B[@]}" commit "${P[@]}" --quiet --format "$fmt" --rm "$ctr" "$ref" >/dev/null
ctr=""
rm -f "$output"
mkdir -p "$(dirname "$output")"
buildah "${B[@]}" push "${P[@]}" --quiet "$ref" "$format:$output:$ref" >/dev/null
say "$ref: $(basename "$bin") + $libs libraries, $(du -h "$output" | cut -f1) $format"
echo "$output $ref"
