#!/usr/bin/env bash
# hack/e2e-kubelet.sh [MINOR [FEATURE_GATES]]: `make e2e-kubelet`, a real kubelet on netshim.
#
# With no argument: one run per kubelet minor hack/build-kubelet.sh knows
# (v1.36, v1.37) and per feature-gate set: kubelet's defaults, then
# PodAndContainerStatsFromCRI=true,EventedPLEG=true (pod and container stats,
# network included, all from netshim; a pod lifecycle driven by netshim's
# GetContainerEvents). Each run is this script with MINOR and FEATURE_GATES
# (kubelet's --feature-gates syntax, "" for the defaults), its artifacts in
# _output/e2e-kubelet/<MINOR>-<default|gates>/; the summary counts them all.
#
# One run: installs the packages it needs, builds netshim, crictl, that kubelet
# (hack/build-kubelet.sh) and the checks (test/e2e-kubelet), starts the host
# engine if none runs and builds the test images there (hack/images.sh), then
# runs the checks' test binary. Its TestMain sets up the world through
# test/harness (a private dockerd loaded with the host engine's images, netshim
# with a CNI bridge network, kubelet standalone with a static pod dir), runs the
# checks issue 4 asks for (sandbox Ready, containers Running, exec readiness
# probe, CRI-format logs, restart, hostPort, /stats/summary, teardown and IP
# release), tears the world down, restores the host and prints PASS/FAIL per
# check and `e2e-kubelet: N passed, N failed`. See test/e2e-kubelet/main_test.go
# for the world (isolation, fixed names, preflight, host state) and
# test/harness/kubelet.go, hoststate.go for kubelet and the host guard.
#
# A run killed before its cleanup is cleaned up by the next one
# (_output/e2e-kubelet.state). Artifacts (logs of netshim at -v=6, kubelet at
# -v=2 and the private dockerd; kubelet's config, the manifest, kubelet's last
# /pods, the RPC table, the results): _output/e2e-kubelet/. NETSHIM_BIN=PATH
# runs that netshim instead of building one; E2E_KUBELET_POD_LOGS_DIR another
# pod logs dir than /var/log/pods. Needs root. Network only to 127.0.0.1 and
# pod IPs on the test's bridge.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"

# The matrix: every minor x every gate set, one child run each.
if (($# == 0)); then
  gate_sets=("" "PodAndContainerStatsFromCRI=true,EventedPLEG=true")
  total_pass=0 total_fail=0 runs=()
  # E2E_KUBELET_MINORS="v1.37" narrows the matrix (make test's e2e-kubelet).
  if [[ -n "${E2E_KUBELET_MINORS:-}" ]]; then
    read -r -a minors <<<"$E2E_KUBELET_MINORS"
  else
    mapfile -t minors < <("$ROOT/hack/build-kubelet.sh" versions | awk '{ print $1 }')
  fi
  ((${#minors[@]} > 0)) || { echo "e2e-kubelet.sh: no kubelet versions" >&2; exit 1; }
  for minor in "${minors[@]}"; do
    for gates in "${gate_sets[@]}"; do
      echo "==> e2e-kubelet: kubelet $minor, feature gates: ${gates:-the defaults}"
      "$0" "$minor" "$gates" | tee "$OUT/e2e-kubelet-run.log" || true
      line=$(grep -E '^e2e-kubelet: [0-9]+ passed, [0-9]+ failed$' "$OUT/e2e-kubelet-run.log" | tail -n 1)
      if [[ -z "$line" ]]; then
        line="e2e-kubelet: 0 passed, 1 failed"
        echo "FAIL run: the run of kubelet $minor (gates: ${gates:-default}) printed no summary"
      fi
      read -r _ p _ f _ <<<"$line"
      total_pass=$((total_pass + p)) total_fail=$((total_fail + f))
      runs+=("$minor ${gates:-default}: $p passed, $f failed")
    done
  done
  rm -f "$OUT/e2e-kubelet-run.log"
  echo "==> e2e-kubelet runs"
  printf '%s\n' "${runs[@]}"
  echo "e2e-kubelet: $total_pass passed, $total_fail failed"
  ((total_fail == 0))
  exit
fi
KUBELET_MINOR=$1
FEATURE_GATES=${2:-}
# The run's name: "default", or the gates ("A=true,B=false" -> "A+B-false").
mode=${FEATURE_GATES:-default}
mode=${mode//=true/}
mode=${mode//,/+}
mode=${mode//=/-}
ARTIFACTS="$OUT/e2e-kubelet/$KUBELET_MINOR-$mode"
GO=${GO:-go}

die() { echo "e2e-kubelet.sh: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
cd "$ROOT"

mkdir -p "$OUT"
exec 9>"$OUT/e2e-kubelet.lock"
flock -n 9 || die "another e2e-kubelet run holds $OUT/e2e-kubelet.lock"

"$ROOT/hack/install-deps.sh"
# NETSHIM_BIN runs another netshim binary (e.g. one built from another commit).
NETSHIM=${NETSHIM_BIN:-$OUT/netshim}
if [[ -z "${NETSHIM_BIN:-}" ]]; then
  version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
  "$GO" build -ldflags "-X github.com/netshim/netshim/pkg/version.Version=$version" -o "$OUT/netshim" ./cmd/netshim
fi
# The OCI wrapper hack/dockerd.sh's engine has as runtime netshim-oci (pinned netns).
"$GO" build -o "$OUT/netshim-oci" ./cmd/netshim-oci
# The runc the wrapper execs in the private engine: 1.4.3, which makes the
# idmapped mounts of the pod with hostUsers: false (Debian's 1.1.5 cannot).
"$ROOT/hack/docker29.sh" build-runc
"$ROOT/hack/build-crictl.sh" crictl
KUBELET="$OUT/kubelet-$KUBELET_MINOR"
"$ROOT/hack/build-kubelet.sh" build "$KUBELET_MINOR"
# Compile the checks before anything starts: a compile error is not a test run.
"$GO" test -c -tags kubelet -o "$OUT/e2e-kubelet.test" ./test/e2e-kubelet

mkdir -p "$ARTIFACTS"
rm -rf "${ARTIFACTS:?}"/*

echo "==> images (host engine)"
host_dockerd_started=0
# stop_host_engine stops the host engine if this run started it.
stop_host_engine() {
  ((host_dockerd_started)) || return 0
  host_dockerd_started=0
  "$ROOT/hack/dockerd.sh" stop
}
trap 'stop_host_engine || true' EXIT
if ! "$ROOT/hack/dockerd.sh" status >/dev/null 2>&1; then
  host_dockerd_started=1
fi
"$ROOT/hack/dockerd.sh" start 9>&-
"$ROOT/hack/images.sh"

# The test binary sets up the world, runs the checks, cleans up and prints
# the summary. It runs in the background so that a SIGTERM or SIGINT for
# this script reaches it (it then cleans up and exits).
E2E_OCI_RUNC="$OUT/docker29/bin/runc" \
  E2E_KUBELET_MINOR="$KUBELET_MINOR" \
  E2E_KUBELET_FEATURE_GATES="$FEATURE_GATES" \
  E2E_KUBELET_ARTIFACTS="$ARTIFACTS" \
  E2E_KUBELET_STATE="$OUT/e2e-kubelet.state" \
  KUBELET_BIN="$KUBELET" \
  NETSHIM_BIN="$NETSHIM" \
  CNI_BIN_DIR="${CNI_BIN_DIR:-/usr/lib/cni}" \
  "$OUT/e2e-kubelet.test" -test.v -test.count=1 -test.timeout=20m -test.run '^TestKubeletStaticPod$' 9>&- &
test_pid=$!
trap 'kill -TERM "$test_pid" 2>/dev/null' INT TERM
while :; do
  rc=0
  wait "$test_pid" || rc=$?
  kill -0 "$test_pid" 2>/dev/null || break
done
trap - INT TERM

if ! stop_host_engine; then
  # The test binary's summary did not count this: count it here.
  echo "FAIL host-engine: hack/dockerd.sh stop failed (this run started the host engine)"
  echo "FAIL host-engine: hack/dockerd.sh stop failed" >>"$ARTIFACTS/results.txt"
  passed=$(grep -c '^PASS' "$ARTIFACTS/results.txt" || true)
  failed=$(grep -c '^FAIL' "$ARTIFACTS/results.txt" || true)
  echo "e2e-kubelet: $passed passed, $failed failed"
  ((rc != 0)) || rc=1
fi
exit "$rc"
