#!/usr/bin/env bash
# hack/bench-kubelet.sh [netshim-kubelet-bench flags...]
#
# `make bench-kubelet`: netshim under a real kubelet with 50 static pods
# (test/kubeletbench; issue 13). For each netshim configuration ("default",
# plus any --mode NAME='--flag1 --flag2'): drop -> all running, kubelet's PLEG
# relist mean, the runtime stack's CPU (netshim, dockerd, containerd, shims)
# over the hold and its PSS at its end, the teardown; per-pod container
# StartedAt p50/p99. Prints the table, also written to _output/bench-kubelet.md;
# logs (and CPU profiles with --profile) in _output/bench-kubelet/.
#
# By default containerd v2.4.2's own CRI plugin runs as netshim's peer: a column
# "containerd" in the same rotation (a fresh containerd each run, with runc
# 1.4.3, the same kubelet, pods, images and CNI network), and for each netshim
# column its ratio to containerd. Its binaries (runc, containerd, the shim, ctr)
# come from `hack/docker29.sh build-containerd` (the Go module proxy, cached in
# _output/docker29/bin). BENCH_KUBELET_CONTAINERD=0 leaves the peer out.
#
# Installs missing Debian packages, builds netshim (and netshim-oci if the
# tree has it: registered on the private dockerd, for --sandbox-netns modes),
# the bench and kubelet v1.36 (hack/build-kubelet.sh, cached; KUBELET_BIN=PATH
# runs another one), starts the host engine if none answers (and stops it at
# the end if this script started it) and builds the local images there, which
# the bench loads into its private dockerd (and imports into each containerd).
# Needs root. Run it under the machine's Docker lock:
# flock /tmp/netshim-docker.lock make bench-kubelet.
# Examples:
#   make bench-kubelet BENCH_KUBELET_FLAGS="--hold 20s"
#   make bench-kubelet BENCH_KUBELET_FLAGS="--mode pinned='--sandbox-netns=pinned' --rounds 3"
#   make bench-kubelet BENCH_KUBELET_FLAGS="--pods 250 --max-pods 250 --up-timeout 10m"
#   make bench-kubelet BENCH_KUBELET_CONTAINERD=0
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
GO=${GO:-go}
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
BENCH_KUBELET_CONTAINERD=${BENCH_KUBELET_CONTAINERD:-1}

die() { echo "bench-kubelet.sh: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
cd "$ROOT"

"$ROOT/hack/install-deps.sh"

mkdir -p "$OUT"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
"$GO" build -ldflags "-X github.com/netshim/netshim/pkg/version.Version=$version" -o "$OUT/netshim" ./cmd/netshim
oci=()
if [[ -d "$ROOT/cmd/netshim-oci" ]]; then
  "$GO" build -o "$OUT/netshim-oci" ./cmd/netshim-oci
  oci=(--netshim-oci "$OUT/netshim-oci")
fi
"$GO" build -o "$OUT/netshim-kubelet-bench" ./test/kubeletbench
KUBELET=${KUBELET_BIN:-}
if [[ -z "$KUBELET" ]]; then
  "$ROOT/hack/build-kubelet.sh" build v1.36
  KUBELET="$OUT/kubelet-v1.36"
fi
peer=()
case "$BENCH_KUBELET_CONTAINERD" in
  0) ;;
  1)
    "$ROOT/hack/docker29.sh" build-containerd
    peer=(--containerd-bin-dir "$OUT/docker29/bin")
    ;;
  *) die "BENCH_KUBELET_CONTAINERD must be 0 or 1, not '$BENCH_KUBELET_CONTAINERD'" ;;
esac

if ! "$ROOT/hack/dockerd.sh" status >/dev/null 2>&1; then
  trap '"$ROOT/hack/dockerd.sh" stop' EXIT
fi
"$ROOT/hack/dockerd.sh" start
"$ROOT/hack/images.sh"

mkdir -p "$OUT/bench-kubelet"
"$OUT/netshim-kubelet-bench" \
  --netshim "$OUT/netshim" \
  --kubelet "$KUBELET" \
  "${oci[@]}" \
  "${peer[@]}" \
  --cni-bin-dir "$CNI_BIN_DIR" \
  --artifacts "$OUT/bench-kubelet" \
  --state "$OUT/bench-kubelet.state" \
  --out "$OUT/bench-kubelet.md" \
  "$@"
echo "bench-kubelet.sh: table written to $OUT/bench-kubelet.md"
