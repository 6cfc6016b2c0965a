#!/usr/bin/env bash
# hack/build-crictl.sh [crictl|critest|all]
#
# Builds cri-tools (crictl; critest on request) from the Go module proxy into _output/,
# since neither `go install ...@v1.34.0` nor a download of release binaries works here:
# the module is fetched with `go mod download`, copied out of the (read-only) module
# cache to _output/src/cri-tools and built there with -mod=mod.
# A binary that already reports the wanted version is not rebuilt.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
CRI_TOOLS_VERSION=${CRI_TOOLS_VERSION:-v1.34.0}
MODULE=sigs.k8s.io/cri-tools
SRC="$OUT/src/cri-tools"

die() { echo "build-crictl.sh: $*" >&2; exit 1; }

# The checksum database is not reachable through the proxy for this module.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}$MODULE"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
LDFLAGS="-s -w -X $MODULE/pkg/version.Version=$CRI_TOOLS_VERSION"

# quietly CMD...: runs CMD in $SRC with its output in _output/build-crictl.log, shown on failure.
quietly() {
  local log="$OUT/build-crictl.log"
  if ! (cd "$SRC" && "$@") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    return 1
  fi
}

# has_version BIN ARGS...: BIN exists and its version output names $CRI_TOOLS_VERSION.
has_version() {
  local bin=$1
  shift
  # No `| grep -q`: under pipefail, grep quitting early can kill the
  # writer with SIGPIPE and fail the check.
  local out
  [[ -x "$bin" ]] && out=$("$bin" "$@" 2>/dev/null) && [[ "$out" == *"$CRI_TOOLS_VERSION"* ]]
}

fetch_source() {
  if [[ -f "$SRC/.version" && "$(cat "$SRC/.version")" == "$CRI_TOOLS_VERSION" ]]; then
    return 0
  fi
  local json dir
  json=$(cd "$OUT" && go mod download -json "$MODULE@$CRI_TOOLS_VERSION" 2>&1) ||
    die "go mod download $MODULE@$CRI_TOOLS_VERSION failed: $json"
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -n "$dir" && -d "$dir" ]] || die "no module directory for $MODULE@$CRI_TOOLS_VERSION: $json"
  rm -rf "$SRC"
  mkdir -p "$(dirname "$SRC")"
  cp -r "$dir" "$SRC.tmp"
  chmod -R u+w "$SRC.tmp"
  echo "$CRI_TOOLS_VERSION" >"$SRC.tmp/.version"
  mv "$SRC.tmp" "$SRC"
}

build_crictl() {
  has_version "$OUT/crictl" --version && return 0
  fetch_source
  quietly go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/crictl.tmp" ./cmd/crictl ||
    die "building crictl $CRI_TOOLS_VERSION failed"
  mv -f "$OUT/crictl.tmp" "$OUT/crictl"
  has_version "$OUT/crictl" --version || die "_output/crictl does not report $CRI_TOOLS_VERSION"
}

build_critest() {
  has_version "$OUT/critest" -version && return 0
  fetch_source
  quietly go test -c -trimpath -ldflags "$LDFLAGS" -o "$OUT/critest.tmp" ./cmd/critest ||
    die "building critest $CRI_TOOLS_VERSION failed"
  mv -f "$OUT/critest.tmp" "$OUT/critest"
  has_version "$OUT/critest" -version || die "_output/critest does not report $CRI_TOOLS_VERSION"
}

mkdir -p "$OUT"
# One build at a time (make test's background prebuild and a suite that needs
# crictl now, say): the second waits, then finds the binary built.
exec {lockfd}>"$OUT/.build-crictl.lock"
flock "$lockfd"
case "${1:-crictl}" in
  crictl) build_crictl ;;
  critest) build_critest ;;
  all) build_crictl; build_critest ;;
  *) echo "usage: $0 [crictl|critest|all]" >&2; exit 2 ;;
esac
