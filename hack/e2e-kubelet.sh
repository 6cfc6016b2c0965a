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
# One run: builds netshim, crictl and that kubelet (hack/build-kubelet.sh), then runs
# kubelet standalone (no API server, static pods only) against netshim and
# checks, with a static pod of two busybox containers, what issue 4 asks
# (test/e2e-kubelet: sandbox Ready, containers Running, exec readiness probe,
# CRI-format logs under the pod logs dir, restart of an exiting container,
# hostPort, the pod's and containers' usage in kubelet's /stats/summary,
# network rx/tx there too with PodAndContainerStatsFromCRI, teardown and IP
# release when the manifest goes). Then it cleans
# up and prints PASS/FAIL per check and `e2e-kubelet: N passed, N failed`.
#
# Isolation. kubelet treats every pod its runtime reports as its own and
# kills the ones it does not know, and netshim reports every netshim
# container of its Docker engine. So kubelet must not see the host engine,
# where other tests and benches run pods: netshim is pointed at a private
# dockerd (own data root, exec root and socket; no bridge, no iptables),
# loaded with the images hack/images.sh builds on the host engine.
# Also fixed and so serialised by a lock: bridge nskub0 (10.176.0.0/24),
# kubelet's ports 127.0.0.1:10250/10248, hostPort 17890, namespace
# netshim-e2e-kubelet. kubelet removes pod log directories of pods it does not
# know from its pod logs dir (/var/log/pods): the run refuses to start when
# that directory holds anything but this test's entries.
#
# Host state kubelet changes is saved and restored: the sysctls it tunes
# (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
# kernel.keys.root_maxkeys/root_maxbytes); the kubepods cgroups and the
# directories outside its root dir it creates (/var/lib/kubelet/device-plugins,
# /var/log/pods, /var/log/containers) are removed if they did not exist; the
# bind mount of its root dir onto itself is unmounted. A run killed before its
# cleanup is cleaned up by the next one (_output/e2e-kubelet.state).
#
# Artifacts (logs of netshim at -v=6, kubelet at -v=2 and the private dockerd;
# kubelet's config, the manifest, kubelet's last /pods, the RPC table, the
# results): _output/e2e-kubelet/. NETSHIM_BIN=PATH runs that netshim instead
# of building one. Needs root. Network only to 127.0.0.1 and pod IPs on nskub0.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"

# The matrix: every minor x every gate set, one child run each.
if (($# == 0)); then
  gate_sets=("" "PodAndContainerStatsFromCRI=true,EventedPLEG=true")
  total_pass=0 total_fail=0 runs=()
  mapfile -t minors < <("$ROOT/hack/build-kubelet.sh" versions | awk '{ print $1 }')
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
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
PAUSE_IMAGE=${PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-netshim.local/busybox:latest}
POD_LOGS_DIR=${E2E_KUBELET_POD_LOGS_DIR:-/var/log/pods}
CONTAINER_LOGS_DIR=/var/log/containers # kubelet's legacy symlinks; not configurable
DEVICE_PLUGIN_DIR=/var/lib/kubelet/device-plugins # kubelet's, whatever --root-dir says
BRIDGE=nskub0
SUBNET=10.176.0.0/24
GATEWAY=10.176.0.1
NETWORK=nskub
NAMESPACE=netshim-e2e-kubelet
NODE=netshim-e2e-node
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
HOST_PORT=17890
NETSHIM_V=${NETSHIM_V:-6}
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

die() { echo "e2e-kubelet.sh: $*" >&2; exit 1; }
log() { echo "e2e-kubelet.sh: $*"; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
cd "$ROOT"

# ---------------------------------------------------------------- processes

# running PID: the process exists and is not a zombie.
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

# stop_pid PID NAME SECONDS: SIGTERM, then SIGKILL after SECONDS; reaps it.
# Prints nothing and returns 0 on a clean stop, 1 when SIGKILL was needed.
stop_pid() {
  local pid=$1 name=$2 secs=$3 rc=0 i
  [[ -n "$pid" ]] || return 0
  if running "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
      running "$pid" || break
      sleep 0.1
    done
    if running "$pid"; then
      echo "e2e-kubelet.sh: $name (PID $pid) ignored SIGTERM for ${secs}s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      rc=1
    fi
  fi
  wait "$pid" 2>/dev/null || true
  return $rc
}

# umount_under DIR: unmounts everything mounted at or below DIR, deepest first.
umount_under() {
  local dir=$1 m n=0
  while :; do
    m=$(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | head -n 1)
    [[ -n "$m" ]] || break
    umount "$m" 2>/dev/null || umount -l "$m" || return 1
    ((++n < 200)) || return 1
  done
}

# The state file lists what a run set up (temp dir, processes, saved sysctls,
# new cgroups), so that the next run can clean up after one that was killed
# before its cleanup ran.
STATE="$OUT/e2e-kubelet.state"
record() { echo "$*" >>"$STATE"; }

recover_leftovers() {
  [[ -f "$STATE" ]] || return 0
  log "cleaning up after an earlier run that did not finish ($STATE)"
  local oldtmp kind a b name pid
  oldtmp=$(awk '$1 == "tmp" { print $2 }' "$STATE")
  # Only processes that are still the ones that run started (their command
  # line names its temp dir), newest first.
  for name in kubelet netshim dockerd; do
    pid=$(awk -v n="$name" '$1 == "pid" && $2 == n { print $3 }' "$STATE")
    if [[ -z "$pid" || -z "$oldtmp" ]] || ! running "$pid"; then continue; fi
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -F "$oldtmp" >/dev/null || continue
    log "stopping the earlier run's $name (PID $pid)"
    stop_pid "$pid" "$name" 45 || true
  done
  shopt -s nullglob
  rm -rf "$POD_LOGS_DIR/${NAMESPACE}_"* "$CONTAINER_LOGS_DIR/"*"_${NAMESPACE}_"*.log
  shopt -u nullglob
  rm -f "$DEVICE_PLUGIN_DIR/kubelet.sock"
  while read -r kind a b; do
    case "$kind" in
      sysctl) [[ "$(sysctl -n "$a")" == "$b" ]] || sysctl -qw "$a=$b" || true ;;
      cgroup) [[ ! -d "$a" ]] || find "$a" -depth -type d -exec rmdir {} \; 2>/dev/null || true ;;
      dir) rmdir "$a" 2>/dev/null || true ;;
    esac
  done <"$STATE"
  if [[ -n "$oldtmp" && -d "$oldtmp" ]]; then
    umount_under "$oldtmp" || die "cannot unmount what is mounted under $oldtmp"
    rm -rf "$oldtmp"
  fi
  rm -f "$STATE"
}

# ------------------------------------------------------------- preparation

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
"$ROOT/hack/build-crictl.sh" crictl
KUBELET="$OUT/kubelet-$KUBELET_MINOR"
"$ROOT/hack/build-kubelet.sh" build "$KUBELET_MINOR"
# Compile the checks before anything starts: a compile error is not a test run.
"$GO" test -c -tags kubelet -o "$OUT/e2e-kubelet.test" ./test/e2e-kubelet

# Leftovers of a run that died without cleaning up (we hold the lock, so no
# other run owns them).
recover_leftovers
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  log "removing bridge $BRIDGE left by an earlier run"
  ip link del "$BRIDGE"
fi
shopt -s nullglob
for d in "$POD_LOGS_DIR/${NAMESPACE}_"*; do
  log "removing $d left by an earlier run"
  rm -rf "$d"
done
for l in "$CONTAINER_LOGS_DIR/"*"_${NAMESPACE}_"*.log; do rm -f "$l"; done
shopt -u nullglob
if ss -Hltn "sport = :$KUBELET_PORT or sport = :$KUBELET_HEALTHZ_PORT or sport = :$HOST_PORT" | grep . >/dev/null; then
  die "port $KUBELET_PORT, $KUBELET_HEALTHZ_PORT or $HOST_PORT is in use (a kubelet still running?)"
fi
# Routes that contain the subnet (but the default one) or lie inside it.
if overlap=$({ ip -4 route show match "$SUBNET"; ip -4 route show root "$SUBNET"; } | grep -v '^default') && [[ -n "$overlap" ]]; then
  die "$SUBNET, which the test needs, overlaps a route here: $overlap"
fi
if [[ -d "$POD_LOGS_DIR" ]] && [[ -n "$(ls -A "$POD_LOGS_DIR")" ]]; then
  die "$POD_LOGS_DIR holds entries of other pods, which kubelet's log GC would delete:
$(find "$POD_LOGS_DIR" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n 20)
remove them or set E2E_KUBELET_POD_LOGS_DIR to another directory"
fi
# kubelet's device plugin socket is not under --root-dir: the path is fixed.
if [[ -S "$DEVICE_PLUGIN_DIR/kubelet.sock" ]] && ss -Hxl | grep -F "$DEVICE_PLUGIN_DIR/kubelet.sock" >/dev/null; then
  die "a kubelet serves $DEVICE_PLUGIN_DIR/kubelet.sock already; this test's kubelet would take it over"
fi
rm -f "$DEVICE_PLUGIN_DIR/kubelet.sock"
kubelet_state_existed=0; [[ -d "${DEVICE_PLUGIN_DIR%/*}" ]] && kubelet_state_existed=1
device_plugin_dir_existed=0; [[ -d "$DEVICE_PLUGIN_DIR" ]] && device_plugin_dir_existed=1
pod_logs_existed=0; [[ -d "$POD_LOGS_DIR" ]] && pod_logs_existed=1
container_logs_existed=0; [[ -d "$CONTAINER_LOGS_DIR" ]] && container_logs_existed=1

# The kubepods cgroups kubelet will create, and whether they exist already.
new_cgroups=()
for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  [[ -d "$d" && ! -e "${d}kubepods" ]] && new_cgroups+=("${d}kubepods")
done

host_dockerd_started=0
dockerd_pid=""
netshim_pid=""
kubelet_pid=""
cleanup_problems=()
declare -A saved_sysctl=()
RESULTS_COPY="$ARTIFACTS/results.txt"
TMP=$(mktemp -d /tmp/nskub.XXXXXX)
# cleanup (below) undoes everything from here on, and prints the summary.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
record "tmp $TMP"
# Directories kubelet creates outside its root dir, to remove if empty; deepest first.
((device_plugin_dir_existed)) || record "dir $DEVICE_PLUGIN_DIR"
((kubelet_state_existed)) || record "dir ${DEVICE_PLUGIN_DIR%/*}"
((pod_logs_existed)) || record "dir $POD_LOGS_DIR"
((container_logs_existed)) || record "dir $CONTAINER_LOGS_DIR"
for cg in "${new_cgroups[@]}"; do record "cgroup $cg"; done
DOCKER_SOCK="$TMP/docker.sock"
NETSHIM_SOCK="$TMP/netshim.sock"
KUBELET_DIR="$TMP/kubelet"
STATIC_DIR="$TMP/manifests"
IPAM_DIR="$TMP/ipam"
RESULTS="$TMP/results"
mkdir -p "$TMP"/{net.d,cnicache,netshim,docker,x} "$IPAM_DIR" "$KUBELET_DIR" "$STATIC_DIR" "$ARTIFACTS"
rm -f "$ARTIFACTS"/*
: >"$RESULTS"

cat >"$TMP/crictl.yaml" <<YAML
runtime-endpoint: unix://$NETSHIM_SOCK
image-endpoint: unix://$NETSHIM_SOCK
timeout: 30
YAML

for s in "${SYSCTLS[@]}"; do
  saved_sysctl[$s]=$(sysctl -n "$s")
  record "sysctl $s ${saved_sysctl[$s]}"
done


crictl() { "$OUT/crictl" --config "$TMP/crictl.yaml" "$@"; }
pdocker() { docker -H "unix://$DOCKER_SOCK" "$@"; }

# kubelet_log_tail: kubelet's errors and last lines (its first ~200 lines are flags).
kubelet_log_tail() {
  echo "---- kubelet's log: errors, then the last lines ($TMP/kubelet.log, kept in $ARTIFACTS) ----" >&2
  grep -E '^[EF][0-9]{4} ' "$TMP/kubelet.log" | tail -n 10 >&2
  echo "----" >&2
  tail -n 15 "$TMP/kubelet.log" >&2
}


# rpc_table LOG: netshim's RPCs in LOG (at -v>=6 every RPC is logged): calls,
# failures and their codes, per method.
# shellcheck disable=SC2317 # called from cleanup, a trap
rpc_table() {
  printf '%-26s %7s %7s  %s\n' method calls failed codes
  awk '
    /"RPC"/ || /"RPC failed"/ {
      if (match($0, /method="[A-Za-z]+"/) == 0) next
      m = substr($0, RSTART + 8, RLENGTH - 9)
      calls[m]++
      if ($0 ~ /"RPC failed"/) {
        fails[m]++
        if (match($0, /code="[A-Za-z]+"/)) {
          c = substr($0, RSTART + 6, RLENGTH - 7)
          if (!((m, c) in codes)) codelist[m] = codelist[m] " " c
          codes[m, c]++
        }
      }
    }
    END {
      for (m in calls) {
        out = ""
        n = split(codelist[m], cs, " ")
        for (i = 1; i <= n; i++) out = out cs[i] "x" codes[m, cs[i]] " "
        printf "%-26s %7d %7d  %s\n", m, calls[m], fails[m] + 0, out
      }
    }' "$1" | LC_ALL=C sort
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  echo "==> cleanup"
  rm -f "$STATIC_DIR"/*.yaml

  if [[ -n "$kubelet_pid" ]]; then
    stop_pid "$kubelet_pid" kubelet 30 || cleanup_problems+=("kubelet needed SIGKILL")
  fi
  # Whatever pods kubelet left (the private engine holds only this test's).
  if [[ -n "$netshim_pid" ]] && running "$netshim_pid"; then
    local p left
    left=$(crictl pods -q 2>/dev/null)
    for p in $left; do
      crictl stopp "$p" >/dev/null 2>&1 || cleanup_problems+=("crictl stopp $p failed")
      crictl rmp -f "$p" >/dev/null 2>&1 || cleanup_problems+=("crictl rmp $p failed")
    done
    [[ -z "$left" ]] || log "removed $(wc -w <<<"$left") pod(s) kubelet left behind"
    stop_pid "$netshim_pid" netshim 30 || cleanup_problems+=("netshim needed SIGKILL")
  fi
  if [[ -f "$TMP/netshim.log" ]]; then
    cp "$TMP/netshim.log" "$ARTIFACTS/netshim.log"
    rpc_table "$TMP/netshim.log" >"$ARTIFACTS/rpcs.txt"
    # With EventedPLEG kubelet follows netshim's event stream, which
    # netshim logs when it ends (kubelet stopped above).
    if [[ ",$FEATURE_GATES," == *",EventedPLEG=true,"* && -s "$RESULTS" ]]; then
      local subs
      subs=$(grep -c 'method="GetContainerEvents"' "$TMP/netshim.log")
      if ((subs > 0)); then
        echo "PASS evented-pleg: kubelet subscribed to GetContainerEvents ($subs stream(s)); restart and teardown above ran with EventedPLEG" >>"$RESULTS"
      else
        echo "FAIL evented-pleg: kubelet ran with EventedPLEG=true but netshim logged no GetContainerEvents stream" >>"$RESULTS"
      fi
    fi
  fi
  [[ -f "$TMP/kubelet.log" ]] && cp "$TMP/kubelet.log" "$ARTIFACTS/kubelet.log"

  if [[ -n "$dockerd_pid" ]]; then
    local ids
    mapfile -t ids < <(pdocker ps -aq 2>/dev/null)
    ((${#ids[@]} == 0)) || pdocker rm -f "${ids[@]}" >/dev/null 2>&1
    stop_pid "$dockerd_pid" "private dockerd" 45 || cleanup_problems+=("private dockerd needed SIGKILL")
    [[ -f "$TMP/dockerd.log" ]] && cp "$TMP/dockerd.log" "$ARTIFACTS/dockerd.log"
  fi

  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link del "$BRIDGE" || cleanup_problems+=("could not delete bridge $BRIDGE")
  fi
  shopt -s nullglob
  local f
  for f in "$POD_LOGS_DIR/${NAMESPACE}_"*; do rm -rf "$f"; done
  for f in "$CONTAINER_LOGS_DIR/"*"_${NAMESPACE}_"*.log; do rm -f "$f"; done
  shopt -u nullglob
  ((pod_logs_existed)) || rmdir "$POD_LOGS_DIR" 2>/dev/null
  rm -f "$DEVICE_PLUGIN_DIR/kubelet.sock"
  ((device_plugin_dir_existed)) || rmdir "$DEVICE_PLUGIN_DIR" 2>/dev/null
  ((kubelet_state_existed)) || rmdir "${DEVICE_PLUGIN_DIR%/*}" 2>/dev/null
  ((container_logs_existed)) || rmdir "$CONTAINER_LOGS_DIR" 2>/dev/null

  local cg
  for cg in "${new_cgroups[@]}"; do
    [[ -d "$cg" ]] || continue
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
    [[ ! -d "$cg" ]] || cleanup_problems+=("cgroup $cg is still there")
  done

  local s now
  for s in "${!saved_sysctl[@]}"; do
    now=$(sysctl -n "$s")
    if [[ "$now" != "${saved_sysctl[$s]}" ]]; then
      sysctl -qw "$s=${saved_sysctl[$s]}" ||
        cleanup_problems+=("could not restore $s=${saved_sysctl[$s]} (is $now)")
    fi
  done

  # What must be gone now.
  ip link show "$BRIDGE" >/dev/null 2>&1 && cleanup_problems+=("bridge $BRIDGE is still there")
  ((kubelet_state_existed)) || [[ ! -e "${DEVICE_PLUGIN_DIR%/*}" ]] || cleanup_problems+=("${DEVICE_PLUGIN_DIR%/*} is still there")
  ((pod_logs_existed)) || [[ ! -e "$POD_LOGS_DIR" ]] || cleanup_problems+=("$POD_LOGS_DIR is still there")
  compgen -G "$POD_LOGS_DIR/${NAMESPACE}_*" >/dev/null && cleanup_problems+=("pod logs left in $POD_LOGS_DIR")

  [[ ! -f "$RESULTS" ]] || cp "$RESULTS" "$RESULTS_COPY"
  umount_under "$TMP" || cleanup_problems+=("mounts left under $TMP")
  rm -rf "$TMP" || cleanup_problems+=("could not remove $TMP")

  if ((host_dockerd_started)); then
    "$ROOT/hack/dockerd.sh" stop || cleanup_problems+=("hack/dockerd.sh stop failed")
  fi
  rm -f "$STATE"

  if [[ -f "$ARTIFACTS/rpcs.txt" ]]; then
    echo "==> netshim RPCs during the run: kubelet's, plus the checks' own polling (Version, ListPodSandbox,"
    echo "    PodSandboxStatus, ListContainers, ContainerStatus); full log: $ARTIFACTS/netshim.log"
    cat "$ARTIFACTS/rpcs.txt"
  fi

  # The summary: the checks the Go test recorded, then the cleanup's own.
  echo "==> results (kubelet $KUBELET_MINOR, feature gates: ${FEATURE_GATES:-defaults})"
  local passed=0 failed=0 line
  if [[ -s "$RESULTS_COPY" ]]; then
    while IFS= read -r line; do
      echo "$line"
      case "$line" in PASS*) ((passed++)) ;; FAIL*) ((failed++)) ;; esac
    done <"$RESULTS_COPY"
  else
    echo "FAIL checks: the checks did not run (setup failed; see above and $ARTIFACTS/)"
    ((failed++))
  fi
  if ((${#cleanup_problems[@]} == 0)); then
    echo "PASS cleanup: kubelet, netshim and the private dockerd stopped on SIGTERM; bridge, mounts, kubepods cgroups, pod logs, kubelet's device-plugin dir and the temp dir removed; sysctls restored"
    ((passed++))
  else
    local IFS=';'
    echo "FAIL cleanup: ${cleanup_problems[*]}"
    ((failed++))
  fi
  echo "e2e-kubelet: $passed passed, $failed failed"
  if ((failed > 0 && rc == 0)); then rc=1; fi
  exit "$rc"
}

# ------------------------------------------------------------------- world

echo "==> images (host engine), private dockerd"
if ! "$ROOT/hack/dockerd.sh" status >/dev/null 2>&1; then
  host_dockerd_started=1
fi
"$ROOT/hack/dockerd.sh" start 9>&-
"$ROOT/hack/images.sh"

setsid dockerd \
  --data-root "$TMP/docker" \
  --exec-root "$TMP/x" \
  --pidfile "$TMP/docker.pid" \
  --host "unix://$DOCKER_SOCK" \
  --bridge none --iptables=false --ip-masq=false \
  </dev/null >"$TMP/dockerd.log" 2>&1 9>&- &
dockerd_pid=$!
record "pid dockerd $dockerd_pid"
for ((i = 0; i < 600; i++)); do
  pdocker version --format '{{.Server.Version}}' >/dev/null 2>&1 && break
  running "$dockerd_pid" || { tail -n 20 "$TMP/dockerd.log" >&2; die "the private dockerd exited"; }
  sleep 0.1
done
pdocker version --format '{{.Server.Version}}' >/dev/null 2>&1 || die "the private dockerd did not answer within 60 s"
docker save "$PAUSE_IMAGE" "$BUSYBOX_IMAGE" | pdocker load >/dev/null

echo "==> CNI network $NETWORK (bridge $BRIDGE, $SUBNET), netshim"
cat >"$TMP/net.d/10-$NETWORK.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "$NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$SUBNET", "gateway": "$GATEWAY" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$IPAM_DIR"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "firewall" }
  ]
}
JSON
setsid "$NETSHIM" \
  --listen "unix://$NETSHIM_SOCK" \
  --docker-endpoint "unix://$DOCKER_SOCK" \
  --root-dir "$TMP/netshim" \
  --network-plugin cni \
  --cni-bin-dir "$CNI_BIN_DIR" \
  --cni-conf-dir "$TMP/net.d" \
  --cni-cache-dir "$TMP/cnicache" \
  --pod-infra-container-image "$PAUSE_IMAGE" \
  --writable-layer-measure-interval 10s \
  -v="$NETSHIM_V" \
  </dev/null >"$TMP/netshim.log" 2>&1 9>&- &
netshim_pid=$!
record "pid netshim $netshim_pid"
for ((i = 0; i < 300; i++)); do
  [[ -S "$NETSHIM_SOCK" ]] && crictl version >/dev/null 2>&1 && break
  running "$netshim_pid" || { tail -n 20 "$TMP/netshim.log" >&2; die "netshim exited"; }
  sleep 0.1
done
crictl version >/dev/null || die "netshim does not answer on $NETSHIM_SOCK"

# gates_yaml: FEATURE_GATES ("A=true,B=false") as the config's featureGates map.
gates_yaml() {
  local g
  [[ -n "$FEATURE_GATES" ]] || { echo "  {}"; return; }
  IFS=, read -ra g <<<"$FEATURE_GATES"
  for g in "${g[@]}"; do
    [[ "$g" =~ ^[A-Za-z0-9]+=(true|false)$ ]] || die "bad feature gate: $g"
    echo "  ${g%%=*}: ${g#*=}"
  done
}

echo "==> kubelet $("$KUBELET" --version) standalone (root dir $KUBELET_DIR), feature gates: ${FEATURE_GATES:-defaults}"
cat >"$TMP/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$NETSHIM_SOCK
imageServiceEndpoint: unix://$NETSHIM_SOCK
staticPodPath: $STATIC_DIR
fileCheckFrequency: 2s
syncFrequency: 10s
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
address: 127.0.0.1
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
readOnlyPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
makeIPTablesUtilChains: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
oomScoreAdj: 0
podLogsDir: $POD_LOGS_DIR
volumePluginDir: $KUBELET_DIR/volume-plugins
featureGates:
$(gates_yaml)
# A nearly full disk must not evict the test pod.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
YAML
cp "$TMP/kubelet.yaml" "$ARTIFACTS/kubelet.yaml"
setsid "$KUBELET" \
  --config="$TMP/kubelet.yaml" \
  --root-dir="$KUBELET_DIR" \
  --cert-dir="$KUBELET_DIR/pki" \
  --hostname-override="$NODE" \
  -v=2 \
  </dev/null >"$TMP/kubelet.log" 2>&1 9>&- &
kubelet_pid=$!
record "pid kubelet $kubelet_pid"
for ((i = 0; i < 600; i++)); do
  [[ "$(curl -s --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null)" == ok ]] && break
  running "$kubelet_pid" || { kubelet_log_tail; die "kubelet exited"; }
  sleep 0.1
done
[[ "$(curl -s --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz")" == ok ]] ||
  { kubelet_log_tail; die "kubelet's healthz did not answer ok within 60 s"; }

# ------------------------------------------------------------------ checks

echo "==> checks (test/e2e-kubelet)"
set +e
E2E_KUBELET_SOCK="$NETSHIM_SOCK" \
  E2E_KUBELET_STATIC_DIR="$STATIC_DIR" \
  E2E_KUBELET_URL="https://127.0.0.1:$KUBELET_PORT" \
  E2E_KUBELET_HEALTHZ_URL="http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" \
  E2E_KUBELET_NAMESPACE="$NAMESPACE" \
  E2E_KUBELET_NODE="$NODE" \
  E2E_KUBELET_IMAGE="$BUSYBOX_IMAGE" \
  E2E_KUBELET_HOST_PORT="$HOST_PORT" \
  E2E_KUBELET_GATEWAY="$GATEWAY" \
  E2E_KUBELET_SUBNET="$SUBNET" \
  E2E_KUBELET_IPAM_DIR="$IPAM_DIR/$NETWORK" \
  E2E_KUBELET_POD_LOGS_DIR="$POD_LOGS_DIR" \
  E2E_KUBELET_RESULTS="$RESULTS" \
  E2E_KUBELET_ARTIFACTS="$ARTIFACTS" \
  E2E_KUBELET_PID="$kubelet_pid" \
  E2E_KUBELET_FEATURE_GATES="$FEATURE_GATES" \
  "$OUT/e2e-kubelet.test" -test.v -test.count=1 -test.timeout=15m 9>&-
test_rc=$?
set -e
# The cleanup trap prints the summary and exits non-zero if any check failed.
exit "$test_rc"
