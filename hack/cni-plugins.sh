#!/usr/bin/env bash
# hack/cni-plugins.sh [DIR]
#
# Builds the current CNI plugins, github.com/containernetworking/plugins v1.9.1 (they
# speak CNI 1.1: GC and STATUS), from the Go module proxy into DIR (default
# _output/cni-1.9.1): bridge, host-local, loopback, portmap, bandwidth, firewall. Debian's
# containernetworking-plugins (1.1.1, in /usr/lib/cni) speak CNI <= 1.0.0 only; the e2e
# tests of the CNI 1.1 verbs use these. A plugin already built at this version is skipped,
# so a second run costs nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
DIR=${1:-$ROOT/_output/cni-${VERSION#v}}
MODULE=github.com/containernetworking/plugins
PLUGINS=(main/bridge ipam/host-local main/loopback meta/portmap meta/bandwidth meta/firewall)

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
missing=()
for p in "${PLUGINS[@]}"; do
  bin="$DIR/$(basename "$p")"
  # `bridge --version` prints, on stderr, "CNI bridge plugin v1.9.1" (plus the spec versions).
  if [[ -x $bin ]] && [[ $("$bin" --version 2>&1 || true) == *" $VERSION"* ]]; then
    continue
  fi
  missing+=("$MODULE/plugins/$p@$VERSION")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

log="$ROOT/_output/cni-plugins.log"
mkdir -p "$(dirname "$log")"
echo "cni-plugins.sh: building ${#missing[@]} CNI plugin(s) $VERSION into $DIR" >&2
# go install takes several packages of one module at one version in one call. The
# ldflags set the version the plugins report (their release builds do the same).
if ! (cd "$DIR" && GOFLAGS=-mod=mod GOBIN="$DIR" CGO_ENABLED=0 \
  go install -ldflags "-s -w -X $MODULE/pkg/utils/buildversion.BuildVersion=$VERSION" "${missing[@]}") >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "cni-plugins.sh: go install failed (full log: $log)" >&2
  exit 1
fi
for p in "${PLUGINS[@]}"; do
  [[ -x $DIR/$(basename "$p") ]] || { echo "cni-plugins.sh: $DIR/$(basename "$p") was not built" >&2; exit 1; }
done
