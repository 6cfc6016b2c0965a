#!/usr/bin/env bash
# hack/bench.sh [netshim-bench flags...]
#
# `make bench`: measures netshim against the Docker+CNI floor (test/bench) and
# prints the table, also written to _output/bench.md (netshim's logs of the run:
# _output/bench-netshim.log, and _output/bench-netshim-pinned.log and
# bench-netshim-pauseless.log for the pinned and pause-less sandbox netns modes).
# Installs missing Debian packages, builds netshim, netshim-oci (the OCI runtime
# wrapper of the pinned and pause-less modes, which hack/dockerd.sh
# registers on the dockerd it starts), the test CNI plugin cni-sleep (the slow
# chain) and the bench, starts dockerd if none answers (and stops it at the end,
# also on failure, if this script started it) and builds the local pause image.
# A dockerd that runs without the runtime netshim-oci makes the bench leave the
# pinned- and pause-less-mode rows out (--require-pinned makes that an error).
# Extra arguments go to the bench, e.g. `hack/bench.sh --pods 50 --seq 10`.
# Needs root. Leaves nothing behind: the bench removes its pods, containers,
# bridge (nsbench0) and temporary directory itself.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
GO=${GO:-go}
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}

die() { echo "bench.sh: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
cd "$ROOT"

"$ROOT/hack/install-deps.sh"

mkdir -p "$OUT"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
"$GO" build -ldflags "-X github.com/netshim/netshim/pkg/version.Version=$version" -o "$OUT/netshim" ./cmd/netshim
"$GO" build -o "$OUT/netshim-oci" ./cmd/netshim-oci
"$GO" build -o "$OUT/cni-sleep" ./test/tools/cni-sleep
"$GO" build -o "$OUT/netshim-bench" ./test/bench

if ! "$ROOT/hack/dockerd.sh" status >/dev/null 2>&1; then
  trap '"$ROOT/hack/dockerd.sh" stop' EXIT
fi
"$ROOT/hack/dockerd.sh" start
"$ROOT/hack/images.sh"

"$OUT/netshim-bench" \
  --netshim "$OUT/netshim" \
  --cni-bin-dir "$CNI_BIN_DIR" \
  --cni-sleep "$OUT/cni-sleep" \
  --netshim-oci "$OUT/netshim-oci" \
  --netshim-log "$OUT/bench-netshim.log" \
  --out "$OUT/bench.md" \
  "$@"
echo "bench.sh: table written to $OUT/bench.md"
