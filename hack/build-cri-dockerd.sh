#!/usr/bin/env bash
# hack/build-cri-dockerd.sh [cri-dockerd|oomclamp|all]
#
# Builds what the cri-dockerd take-over test (make e2e-takeover, test/takeover) runs:
#
# cri-dockerd (the default): Mirantis' cri-dockerd v0.4.3 from the Go module proxy into
#   _output/cri-dockerd-v0.4.3/cri-dockerd. `go install ...@v0.4.3` refuses the module
#   (its go.mod has replace lines, which only apply in the main module), and no release
#   binary can be downloaded here: the module is fetched with `go mod download`, copied
#   out of the (read-only) module cache to _output/src/cri-dockerd and built there as the
#   main module with -mod=mod. Offline once the module and its dependencies are in the
#   module cache. A binary that already reports the wanted version is not rebuilt.
#   Cold: several minutes on 2 cores (it pulls in Docker's and Kubernetes' client code).
#
# oomclamp: test/tools/oomclamp, the OCI runtime wrapper the test's private dockerd runs
#   by default, into _output/oomclamp. cri-dockerd asks oom_score_adj -998 for every
#   sandbox, which runc cannot set without CAP_SYS_RESOURCE (missing on the CI
#   machines); the wrapper raises a negative process.oomScoreAdj in the bundle to 0,
#   then runs the real runc: $RUNC, else runc on PATH (the runc Debian's docker.io
#   runs), baked in at build time. Always rebuilt (seconds; go's build cache).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
GO=${GO:-go}
CRI_DOCKERD_VERSION=${CRI_DOCKERD_VERSION:-v0.4.3}
MODULE=github.com/Mirantis/cri-dockerd
SRC="$OUT/src/cri-dockerd"
DEST="$OUT/cri-dockerd-$CRI_DOCKERD_VERSION"
BIN="$DEST/cri-dockerd"
LOG="$OUT/build-cri-dockerd.log"

die() { echo "build-cri-dockerd.sh: $*" >&2; exit 1; }

# has_version BIN: BIN exists and `BIN --version` says "cri-dockerd <version without v> (...)".
has_version() {
  local out
  [[ -x "$1" ]] && out=$("$1" --version 2>/dev/null) && [[ "$out" == "cri-dockerd ${CRI_DOCKERD_VERSION#v} "* ]]
}

fetch_source() {
  if [[ -f "$SRC/.version" && "$(cat "$SRC/.version")" == "$CRI_DOCKERD_VERSION" ]]; then
    return 0
  fi
  local json dir
  # GOFLAGS is cleared: -mod=mod means nothing outside a module and go mod download refuses it.
  json=$(cd "$OUT" && GOFLAGS='' GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}$MODULE" \
    "$GO" mod download -json "$MODULE@$CRI_DOCKERD_VERSION" 2>&1) ||
    die "go mod download $MODULE@$CRI_DOCKERD_VERSION failed: $json"
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -n "$dir" && -d "$dir" ]] || die "no module directory for $MODULE@$CRI_DOCKERD_VERSION: $json"
  rm -rf "$SRC" "$SRC.tmp"
  mkdir -p "$(dirname "$SRC")"
  cp -r "$dir" "$SRC.tmp"
  chmod -R u+w "$SRC.tmp"
  echo "$CRI_DOCKERD_VERSION" >"$SRC.tmp/.version"
  mv "$SRC.tmp" "$SRC"
}

build_cri_dockerd() {
  has_version "$BIN" && return 0
  fetch_source
  local start=$SECONDS
  echo "build-cri-dockerd.sh: building cri-dockerd $CRI_DOCKERD_VERSION (cold: several minutes; log: $LOG)"
  # The version stamps cri-dockerd's own Makefile sets, so that --version tells the build.
  local ldflags="-s -w -X $MODULE/cmd/version.Version=${CRI_DOCKERD_VERSION#v}"
  ldflags+=" -X $MODULE/cmd/version.GitCommit=module-proxy"
  mkdir -p "$DEST"
  # Sums come from the proxy, not the checksum database (as for cri-tools and the
  # kubelet); the module's go directive is its own: never switch toolchains.
  if ! (cd "$SRC" && GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" GOSUMDB=off GOTOOLCHAIN=local \
    "$GO" build -trimpath -ldflags "$ldflags" -o "$BIN.tmp" .) >"$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    rm -f "$BIN.tmp"
    die "building cri-dockerd $CRI_DOCKERD_VERSION failed (log: $LOG)"
  fi
  mv -f "$BIN.tmp" "$BIN"
  has_version "$BIN" || die "$BIN reports '$("$BIN" --version 2>&1)', not cri-dockerd ${CRI_DOCKERD_VERSION#v}"
  echo "build-cri-dockerd.sh: built $BIN in $((SECONDS - start)) s"
}

build_oomclamp() {
  local runc=${RUNC:-}
  if [[ -z "$runc" ]]; then
    runc=$(command -v runc) || die "no runc on PATH (set RUNC to the runc the engine runs)"
  fi
  [[ "$runc" == /* && -x "$runc" ]] || die "RUNC=$runc is not an absolute path to an executable"
  (cd "$ROOT" && "$GO" build -trimpath -ldflags "-X main.runc=$runc" -o "$OUT/oomclamp.tmp" ./test/tools/oomclamp) ||
    die "building test/tools/oomclamp failed"
  mv -f "$OUT/oomclamp.tmp" "$OUT/oomclamp"
}

mkdir -p "$OUT"
# One build at a time (make test's background prebuild and make e2e-takeover,
# say): the second waits, then finds the binary built.
exec {lockfd}>"$OUT/.build-cri-dockerd.lock"
flock "$lockfd"
case "${1:-cri-dockerd}" in
  cri-dockerd) build_cri_dockerd ;;
  oomclamp) build_oomclamp ;;
  all) build_cri_dockerd; build_oomclamp ;;
  *) echo "usage: $0 [cri-dockerd|oomclamp|all]" >&2; exit 2 ;;
esac
