#!/usr/bin/env bash
# hack/conformance.sh [extra critest flags...]
#
# `make conformance`: runs the CRI conformance suite, critest from cri-tools
# v1.34.0, against netshim, with no internet. As root, from a fresh clone,
# this script does what needs packages and the engine:
#   1. installs the missing Debian packages (hack/install-deps.sh, plus
#      docker-registry, procps and util-linux), builds netshim and critest;
#   2. starts the engine (ENGINE) if none answers, and stops it at the end if
#      it did;
#   3. builds and checks the test images (hack/images.sh for the pause image,
#      hack/critest-images.sh build + verify for critest's);
#   4. runs test/critest (go test -tags critest, compiled to
#      _output/conformance.test), which sets up the world through test/harness:
#      Debian's docker-registry on 127.0.0.1:$REGISTRY_PORT only, with its
#      storage in a temp dir, holding critest's images; netshim on a temp
#      socket with temp root/cache dirs and its own CNI network (bridge
#      nsconf0, 10.125.0.0/16, firewall, portmap); then critest with the skips
#      of test/critest/skips.go (each printed with its reason). It prints one
#      line per spec, critest's own summary and, last,
#      `conformance: N passed, N failed, N skipped`.
# The full critest output goes to _output/conformance.log, netshim's log to
# _output/conformance-netshim.log, the registry's to
# _output/conformance-registry.log. Exits non-zero if any spec failed.
# Whatever happens, the test removes the pods and containers of the run, stops
# netshim and the registry (untagging the pushed images), deletes the bridge and
# the temp dir, and cleans what an earlier run killed before its cleanup left.
# Extra arguments go to critest, e.g. -ginkgo.focus='Image Manager'.
# Environment: NETSHIM_BIN tests that binary instead of building ./cmd/netshim;
# NETSHIM_FLAGS adds flags to netshim's command line; CNI_BIN_DIR (/usr/lib/cni);
# REGISTRY_PORT (5000) when another program holds 127.0.0.1:5000;
# ENGINE: docker20 (default, the system's dockerd, hack/dockerd.sh) or docker29
# (the private Docker 29 engine of hack/docker29.sh) or docker20-runc143 (a private
# Docker 20.10 with runc 1.4.3, RUNC=1.4.3 hack/dockerd.sh); DOCKER_HOST is set to it for
# every docker command here and netshim gets it as --docker-endpoint;
# PRIVILEGED: run or skip the privileged specs (default: run on docker29 only;
# Docker 20.10 cannot start privileged containers here, see test/critest/skips.go).
#
# Do not edit this script while it runs: bash reads it as it goes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
GO=${GO:-go}
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
PAUSE_IMAGE=${PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
REGISTRY_PORT=${REGISTRY_PORT:-5000}
LOCK=/run/netshim-conformance.lock
ENGINE=${ENGINE:-docker20}
case "$ENGINE" in
  docker20) ENGINE_SCRIPT="$ROOT/hack/dockerd.sh" DOCKER_HOST=unix:///var/run/docker.sock ;;
  docker20-runc143)
    ENGINE_SCRIPT="$ROOT/hack/dockerd.sh" DOCKER_HOST=unix:///run/netshim-docker20-runc143/docker.sock
    export RUNC=1.4.3
    ;;
  docker29) ENGINE_SCRIPT="$ROOT/hack/docker29.sh" DOCKER_HOST=unix:///run/netshim-docker29/docker.sock ;;
  *) echo "conformance: ENGINE=$ENGINE: want docker20, docker20-runc143 or docker29" >&2; exit 2 ;;
esac
export DOCKER_HOST
case "${PRIVILEGED:-}" in
  "" | run | skip) ;;
  *) echo "conformance: PRIVILEGED=$PRIVILEGED: want run or skip" >&2; exit 2 ;;
esac

die() { echo "conformance: $*" >&2; exit 1; }
log() { echo "conformance: $*"; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
cd "$ROOT"
mkdir -p "$OUT"

# One run at a time on this machine: the registry port, the bridge and the
# host ports critest uses (12000-12003) are machine-wide. The test takes the
# same lock through CONFORMANCE_LOCK_FD.
exec 9>"$LOCK"
flock -n 9 || die "another conformance run holds $LOCK"

STARTED_ENGINE=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((STARTED_ENGINE)); then
    "$ENGINE_SCRIPT" stop || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ensure_packages PKG...: installs the Debian packages that are missing.
ensure_packages() {
  local missing=() p status
  for p in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
  done
  ((${#missing[@]} > 0)) || return 0
  log "installing ${missing[*]}"
  local alog="$OUT/conformance-apt.log"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >"$alog" 2>&1; then
    if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; } >>"$alog" 2>&1; then
      tail -n 30 "$alog" >&2
      die "apt-get install ${missing[*]} failed"
    fi
  fi
}

"$ROOT/hack/install-deps.sh"
# docker-registry's install may start the package's own service on :5000; the
# test stops it (harness.StopPackageRegistry) before it starts its registry.
ensure_packages docker-registry procps util-linux

if [[ -n "${NETSHIM_BIN:-}" ]]; then
  [[ -x "$NETSHIM_BIN" ]] || die "NETSHIM_BIN=$NETSHIM_BIN is not an executable"
  log "testing $NETSHIM_BIN (NETSHIM_BIN); building critest and the test"
else
  NETSHIM_BIN="$OUT/netshim"
  version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
  log "building netshim, critest and the test"
  "$GO" build -ldflags "-X github.com/netshim/netshim/pkg/version.Version=$version" -o "$NETSHIM_BIN" ./cmd/netshim
fi
# The OCI wrapper the engines hack/dockerd.sh and hack/docker29.sh start register as
# runtime netshim-oci (netshim's pinned sandbox netns).
"$GO" build -o "$OUT/netshim-oci" ./cmd/netshim-oci
"$ROOT/hack/build-crictl.sh" all
"$GO" test -c -tags critest -o "$OUT/conformance.test" ./test/critest

if ! "$ENGINE_SCRIPT" status >/dev/null 2>&1; then
  STARTED_ENGINE=1
fi
# 9>&-: no daemon started from here may keep the run's lock open.
log "engine: $ENGINE ($DOCKER_HOST)"
"$ENGINE_SCRIPT" start 9>&-

log "building the test images"
"$ROOT/hack/images.sh"
"$ROOT/hack/critest-images.sh" build
"$ROOT/hack/critest-images.sh" verify >"$OUT/conformance-images.log" 2>&1 || {
  cat "$OUT/conformance-images.log" >&2
  die "the test images are not right (see above)"
}
docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1 || die "$PAUSE_IMAGE is missing"

# critest's specs bind these host ports (hostPort, port-forward, host network).
for port in 12000 12001 12002 12003; do
  if ss -Hltn "sport = :$port" | grep . >/dev/null; then
    die "host port $port, which critest uses, is in use: $(ss -Hltnp "sport = :$port" | head -n 1)"
  fi
done

# The test prints its last line after its own cleanup; the engine stop of the
# EXIT trap above is silent unless it fails.
set +e
NETSHIM_BIN="$NETSHIM_BIN" \
  CRITEST_BIN="$OUT/critest" \
  ENGINE="$ENGINE" \
  REGISTRY_PORT="$REGISTRY_PORT" \
  CNI_BIN_DIR="$CNI_BIN_DIR" \
  PAUSE_IMAGE="$PAUSE_IMAGE" \
  CONFORMANCE_LOCK_FD=9 \
  "$OUT/conformance.test" -test.run='^TestConformance$' -test.v -test.count=1 -test.timeout=60m -- "$@"
rc=$?
set -e
exit "$rc"
