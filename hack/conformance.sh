#!/usr/bin/env bash
# hack/conformance.sh [extra critest flags...]
#
# `make conformance`: runs the CRI conformance suite, critest from cri-tools
# v1.34.0, against netshim, with no internet. As root, from a fresh clone:
#   1. installs the missing Debian packages (hack/install-deps.sh, plus
#      docker-registry and procps), builds netshim and critest;
#   2. starts dockerd if none answers (and stops it at the end if it did);
#   3. builds and checks the test images (hack/images.sh for the pause image,
#      hack/critest-images.sh build + verify for critest's);
#   4. runs a registry (Debian's docker-registry) on 127.0.0.1:5000 only, with
#      its storage in a temp dir, and pushes the test images to it
#      (hack/critest-images.sh push), for critest's -registry-prefix;
#   5. starts netshim on a temp socket with temp root/cache dirs and its own
#      CNI network (bridge nsconf0, 10.125.0.0/16, firewall, portmap);
#   6. runs critest with the skips below (each printed with its reason), prints
#      one line per spec, critest's own summary and, last,
#      `conformance: N passed, N failed, N skipped`.
# The full critest output goes to _output/conformance.log, netshim's log to
# _output/conformance-netshim.log. Exits non-zero if any spec failed.
# Whatever happens, it removes the pods and containers of the run, stops
# netshim and the registry, deletes the bridge and the temp dir.
# Extra arguments go to critest, e.g. -ginkgo.focus='Image Manager'.
# Environment: NETSHIM_BIN tests that binary instead of building ./cmd/netshim;
# NETSHIM_FLAGS adds flags to netshim's command line; CNI_BIN_DIR (/usr/lib/cni);
# REGISTRY_PORT (5000) when another program holds 127.0.0.1:5000;
# ENGINE: docker20 (default, the system's dockerd, hack/dockerd.sh) or docker29
# (the private Docker 29 engine of hack/docker29.sh) or docker20-runc143 (a private
# Docker 20.10 with runc 1.4.3, RUNC=1.4.3 hack/dockerd.sh); DOCKER_HOST is set to it for
# every docker command here and netshim gets it as --docker-endpoint;
# PRIVILEGED: run or skip the privileged specs (default: run on docker29 only;
# Docker 20.10 cannot start privileged containers here, see PRIV_SKIPS).
#
# Do not edit this script while it runs: bash reads it as it goes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
GO=${GO:-go}
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
PAUSE_IMAGE=${PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
REGISTRY_PORT=${REGISTRY_PORT:-5000}
REGISTRY_ADDR=127.0.0.1:$REGISTRY_PORT
REGISTRY_PREFIX=localhost:$REGISTRY_PORT
BRIDGE=nsconf0
SUBNET=10.125.0.0/16
CRITEST_LOG="$OUT/conformance.log"
NETSHIM_LOG="$OUT/conformance-netshim.log"
REGISTRY_LOG="$OUT/conformance-registry.log"
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

# The specs skipped here: only those this machine cannot pass whatever the
# runtime does. Pairs of (full spec text without the "[k8s.io] " prefix, reason).
# Each is matched exactly (escaped, anchored); the run stops if one does not
# name exactly one spec of this critest.
#
# PRIV_SKIPS need a privileged container (or all capabilities). Root here lacks
# CAP_SYS_RESOURCE. Docker 20.10 puts every capability it knows into such a
# container's spec, CAP_SYS_RESOURCE too, and runc (1.1.5 and 1.4.3 alike: seen
# with ENGINE=docker20-runc143) then fails "unable to apply caps: operation not
# permitted". Docker 29 grants only the capabilities its own process holds, and
# the specs pass there. So they are skipped on the Docker 20.10 engines only;
# PRIVILEGED=skip|run overrides.
PRIV="needs a privileged container: root here lacks CAP_SYS_RESOURCE and Docker 20.10 asks runc for every capability, so runc cannot start one (Docker 29 can: ENGINE=docker29)"
PRIV_SKIPS=(
  "Container OOM runtime should output OOMKilled reason should terminate with exitCode 137 and reason OOMKilled"
  "$PRIV (its pod is privileged)"
  "Security Context bucket runtime should support Privileged is true"
  "$PRIV"
  "Security Context bucket runtime should support adding ALL capabilities"
  "Docker 20.10 adds ALL capabilities, CAP_SYS_RESOURCE too, which root here lacks: runc fails 'unable to apply caps' (Docker 29 adds only those it holds)"
  "Security Context SeccompProfilePath runtime should ignore a seccomp profile that blocks setting hostname when privileged"
  "$PRIV"
  "Container Mount Propagation runtime should support mount propagation mount with 'rprivate' should not support propagation"
  "$PRIV (its pod is privileged)"
  "Container Mount Propagation runtime should support mount propagation mount with 'rshared' should support propagation from host to container and vice versa"
  "$PRIV (its pod is privileged)"
  "Container Mount Propagation runtime should support mount propagation mount with 'rslave' should support propagation from host to container"
  "$PRIV (its pod is privileged)"
  "Container Mount Readonly runtime should support readonly mounts should support non-recursive readonly mounts"
  "$PRIV (its pod is privileged)"
  "Container Mount Readonly runtime should support readonly mounts should support recursive readonly mounts"
  "$PRIV (its pod is privileged)"
  "Container Mount Readonly runtime should support readonly mounts should reject a recursive readonly mount with PROPAGATION_HOST_TO_CONTAINER"
  "$PRIV (its pod is privileged)"
  "Container Mount Readonly runtime should support readonly mounts should reject a recursive readonly mount with PROPAGATION_BIDIRECTIONAL"
  "$PRIV (its pod is privileged)"
  "Container Mount Readonly runtime should support readonly mounts should reject a recursive readonly mount with ReadOnly: false"
  "$PRIV (its pod is privileged)"
)
SKIPS=(
  "Image Manager public image with tag should be pulled and removed [Conformance]"
  "checks the pulled image under its public gcr.io name, which cannot be pulled offline (-registry-prefix pulls another name)"
  "Image Manager public image without tag should be pulled and removed [Conformance]"
  "checks the pulled image under its public gcr.io name, which cannot be pulled offline (-registry-prefix pulls another name)"
  "Image Manager public image with digest should be pulled and removed [Conformance]"
  "needs the upstream image's digest, which no locally built image can have"
  "Image Manager image status should support all kinds of references [Conformance]"
  "checks the pulled image under its public gcr.io name:tag, which cannot be pulled offline (-registry-prefix pulls another name)"
  "Image Manager listImage should get exactly 3 image in the result list [Conformance]"
  "compares each pulled image's repo tag with its public gcr.io name, but -registry-prefix pulls it as localhost:5000/<path>:latest"
  "Image Manager listImage should get exactly 3 repoTags in the result image [Conformance]"
  "compares the repo tags with the public gcr.io names, but -registry-prefix pulls them as localhost:5000/<path>"
)

case "${PRIVILEGED:-}" in
  run) ;;
  skip) SKIPS+=("${PRIV_SKIPS[@]}") ;;
  "") [[ "$ENGINE" == docker29 ]] || SKIPS+=("${PRIV_SKIPS[@]}") ;;
  *) echo "conformance: PRIVILEGED=$PRIVILEGED: want run or skip" >&2; exit 2 ;;
esac

die() { echo "conformance: $*" >&2; exit 1; }
log() { echo "conformance: $*"; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
cd "$ROOT"
mkdir -p "$OUT"

# One run at a time on this machine: the registry port, the bridge and the
# host ports critest uses (12000-12003) are machine-wide.
exec 9>"$LOCK"
flock -n 9 || die "another conformance run holds $LOCK"

# ---- state and cleanup ----------------------------------------------------------

TMP=""
STARTED_DOCKERD=0
REGISTRY_PID=""
NETSHIM_PID=""
NETSHIM_COMM=netshim
SOCK=""

# proc_alive PID COMM: PID is a live (not zombie) process named COMM.
proc_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z && "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]]
}

# stop_pid PID COMM SECONDS: SIGTERM, then SIGKILL after SECONDS.
stop_pid() {
  local pid=$1 comm=$2 secs=$3 i
  proc_alive "$pid" "$comm" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < secs * 5; i++)); do
    proc_alive "$pid" "$comm" || return 0
    sleep 0.2
  done
  echo "conformance: $comm (PID $pid) did not exit within ${secs}s of SIGTERM; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

crictl_() {
  timeout 60 "$OUT/crictl" --timeout 50s --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" "$@"
}

# run_sandboxes DIR: the IDs of the sandboxes the netshim of the run in DIR made
# and did not remove: it keeps a checkpoint per sandbox in ROOT/sandbox/ID.json.
# (netshim lists every sandbox of the Docker engine, and other critest runs on
# this engine use the same pod namespaces: only these are this run's.)
run_sandboxes() {
  local f id
  for f in "$1"/root/sandbox/*.json; do
    [[ -e "$f" ]] || continue
    id=$(basename "$f" .json)
    [[ "$id" =~ ^[0-9a-f]{64}$ ]] && echo "$id"
  done
}

# remove_pods: stops and removes, through netshim, the pods of this run that
# critest left behind, so that their CNI attachments are released.
remove_pods() {
  local id
  for id in $(run_sandboxes "$TMP"); do
    crictl_ stopp "$id" >/dev/null 2>&1 || echo "conformance: cleanup: crictl stopp $id failed" >&2
    crictl_ rmp -f "$id" >/dev/null 2>&1 || echo "conformance: cleanup: crictl rmp $id failed" >&2
  done
}

# remove_leftover_containers DIR: force-removes the Docker containers of the
# sandboxes of the run in DIR that netshim did not remove (the pause container
# and the containers labelled with its sandbox ID).
remove_leftover_containers() {
  local sb ids=()
  for sb in $(run_sandboxes "$1"); do
    docker container inspect "$sb" >/dev/null 2>&1 && ids+=("$sb")
    # shellcheck disable=SC2207 # container IDs have no blanks
    ids+=($(docker ps -aq --no-trunc --filter "label=netshim.io/sandbox-id=$sb" 2>/dev/null || true))
  done
  if ((${#ids[@]} > 0)); then
    log "removing ${#ids[@]} leftover container(s) of critest's pods"
    docker rm -f "${ids[@]}" >/dev/null 2>&1 || echo "conformance: cleanup: docker rm -f failed" >&2
  fi
}

# teardown: undoes everything the run set up; safe to call twice (the normal
# end calls it before the summary line, the EXIT trap on any other exit).
teardown() {
  set +e
  if [[ -n "$TMP" && -f "$TMP/critest.pid" ]]; then
    stop_pid "$(cat "$TMP/critest.pid")" critest 10
  fi
  if [[ -n "$NETSHIM_PID" ]] && proc_alive "$NETSHIM_PID" "$NETSHIM_COMM"; then
    remove_pods
    stop_pid "$NETSHIM_PID" "$NETSHIM_COMM" 30
  fi
  NETSHIM_PID=""
  if [[ -n "$TMP" ]] && docker version >/dev/null 2>&1; then
    remove_leftover_containers "$TMP"
  fi
  if [[ -n "$REGISTRY_PID" ]]; then
    stop_pid "$REGISTRY_PID" docker-registry 10
    "$ROOT/hack/critest-images.sh" untag "$REGISTRY_PREFIX"
    REGISTRY_PID=""
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link del "$BRIDGE" || echo "conformance: cleanup: ip link del $BRIDGE failed" >&2
  fi
  # Rules the CNI firewall/portmap plugins left for pods that were not torn down.
  if iptables-save 2>/dev/null | grep -F -- "${SUBNET%.0.0/16}." >/dev/null; then
    echo "conformance: warning: iptables rules for $SUBNET are left (pods not torn down by netshim)" >&2
  fi
  [[ -n "$TMP" ]] && rm -rf "$TMP"
  TMP=""
  if ((STARTED_DOCKERD)); then
    "$ENGINE_SCRIPT" stop
    STARTED_DOCKERD=0
  fi
  set -e
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  teardown
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- dependencies and builds ----------------------------------------------------------

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

# stop_package_registry: the docker-registry package's own service listens on
# :5000 on every address; if its install (or anything) started it, stop it.
stop_package_registry() {
  local pid
  pid=$(cat /var/run/docker-registry.pid 2>/dev/null || true)
  if [[ -n "$pid" ]] && proc_alive "$pid" docker-registry; then
    log "stopping the docker-registry service (PID $pid) the Debian package started"
    stop_pid "$pid" docker-registry 10
    rm -f /var/run/docker-registry.pid
  fi
}

"$ROOT/hack/install-deps.sh"
ensure_packages docker-registry procps util-linux
stop_package_registry

if [[ -n "${NETSHIM_BIN:-}" ]]; then
  [[ -x "$NETSHIM_BIN" ]] || die "NETSHIM_BIN=$NETSHIM_BIN is not an executable"
  log "testing $NETSHIM_BIN (NETSHIM_BIN); building critest"
else
  NETSHIM_BIN="$OUT/netshim"
  version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
  log "building netshim and critest"
  "$GO" build -ldflags "-X github.com/netshim/netshim/pkg/version.Version=$version" -o "$NETSHIM_BIN" ./cmd/netshim
fi
"$ROOT/hack/build-crictl.sh" all
NETSHIM_COMM=$(basename "$NETSHIM_BIN" | cut -c1-15)

if ! "$ENGINE_SCRIPT" status >/dev/null 2>&1; then
  STARTED_DOCKERD=1
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

# The skips must name exactly the specs above: check them against this critest
# before anything starts.
skip_args=()
for ((i = 0; i < ${#SKIPS[@]}; i += 2)); do
  # shellcheck disable=SC2001 # one sed is clearer than 14 substitutions
  re=$(sed 's/[][\.*^$+?(){}|]/\\&/g' <<<"${SKIPS[i]}")
  skip_args+=("-ginkgo.skip=\\[k8s\\.io\\] $re\$")
done
nskips=$((${#SKIPS[@]} / 2))
dry=$(cd /tmp && { "$OUT/critest" -ginkgo.dry-run -ginkgo.no-color "${skip_args[@]/-ginkgo.skip=/-ginkgo.focus=}" 2>&1 || true; })
grep -q "Will run $nskips of " <<<"$dry" ||
  die "the $nskips skips do not name $nskips distinct specs of this critest: $(grep -m1 'Will run' <<<"$dry")"

# ---- registry, network, netshim ----------------------------------------------------

TMP=$(mktemp -d /tmp/nsconf.XXXXXX)
SOCK="$TMP/netshim.sock"

# critest's specs bind these host ports (hostPort, port-forward, host network).
for port in 12000 12001 12002 12003; do
  if ss -Hltn "sport = :$port" | grep . >/dev/null; then
    die "host port $port, which critest uses, is in use: $(ss -Hltnp "sport = :$port" | head -n 1)"
  fi
done
if ss -Hltn "sport = :$REGISTRY_PORT" | grep . >/dev/null; then
  die "port $REGISTRY_PORT is in use (REGISTRY_PORT picks another): $(ss -Hltnp "sport = :$REGISTRY_PORT" | head -n 3)"
fi
mkdir -p "$TMP/registry"
cat >"$TMP/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $TMP/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
EOF
log "starting docker-registry on $REGISTRY_ADDR"
setsid docker-registry serve "$TMP/registry.yml" </dev/null >"$REGISTRY_LOG" 2>&1 9>&- &
REGISTRY_PID=$!
for ((i = 0; ; i++)); do
  curl -fsS -o /dev/null "http://$REGISTRY_ADDR/v2/" 2>/dev/null && break
  proc_alive "$REGISTRY_PID" docker-registry || { tail -n 20 "$REGISTRY_LOG" >&2; die "docker-registry exited"; }
  ((i < 100)) || die "docker-registry does not answer on $REGISTRY_ADDR after 20 s"
  sleep 0.2
done
"$ROOT/hack/critest-images.sh" push "$REGISTRY_PREFIX"

# What a run killed before its cleanup left (the lock says no run is active):
# its containers, temp dir and bridge.
for stale in /tmp/nsconf.*/; do
  stale=${stale%/}
  [[ -d "$stale" && "$stale" != "$TMP" ]] || continue
  remove_leftover_containers "$stale"
  rm -rf "$stale"
done
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link del "$BRIDGE"
fi

mkdir -p "$TMP/net.d" "$TMP/root" "$TMP/cnicache" "$TMP/ipam"
cat >"$TMP/net.d/10-nsconf.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$BRIDGE",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$TMP/ipam"
      }
    },
    { "type": "firewall" },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
cat >"$TMP/images.yaml" <<EOF
defaultTestContainerImage: $REGISTRY_PREFIX/e2e-test-images/busybox:1.29-2
webServerTestImage: $REGISTRY_PREFIX/e2e-test-images/nginx:1.14-2
EOF

log "starting netshim on $SOCK (log: ${NETSHIM_LOG#"$ROOT"/})"
# shellcheck disable=SC2086 # NETSHIM_FLAGS is a list of extra flags
"$NETSHIM_BIN" \
  --listen "unix://$SOCK" \
  --root-dir "$TMP/root" \
  --cni-conf-dir "$TMP/net.d" \
  --cni-bin-dir "$CNI_BIN_DIR" \
  --cni-cache-dir "$TMP/cnicache" \
  --pod-infra-container-image "$PAUSE_IMAGE" \
  --docker-endpoint "$DOCKER_HOST" \
  -v=2 ${NETSHIM_FLAGS:-} </dev/null >"$NETSHIM_LOG" 2>&1 9>&- &
NETSHIM_PID=$!
for ((i = 0; ; i++)); do
  [[ -S "$SOCK" ]] && crictl_ version >/dev/null 2>&1 && break
  proc_alive "$NETSHIM_PID" "$NETSHIM_COMM" || { tail -n 20 "$NETSHIM_LOG" >&2; die "netshim exited during start-up"; }
  ((i < 150)) || { tail -n 20 "$NETSHIM_LOG" >&2; die "netshim does not answer on $SOCK after 30 s"; }
  sleep 0.2
done

# ---- critest ---------------------------------------------------------------------

log "skipping $nskips specs this machine (engine $ENGINE) cannot pass:"
for ((i = 0; i < ${#SKIPS[@]}; i += 2)); do
  echo "  skip: [k8s.io] ${SKIPS[i]}"
  echo "        reason: ${SKIPS[i + 1]}"
done
log "running critest $(cd /tmp && "$OUT/critest" -version 2>/dev/null | sed -n 's/^critest version: //p') (full output: ${CRITEST_LOG#"$ROOT"/})"
start=$SECONDS
set +e
# critest runs in the background with its PID recorded, so that a signal to this
# script interrupts the wait at once and teardown can stop critest.
{
  (cd "$TMP" && exec "$OUT/critest" \
    --runtime-endpoint "unix://$SOCK" \
    --image-endpoint "unix://$SOCK" \
    --test-images-file "$TMP/images.yaml" \
    -registry-prefix="$REGISTRY_PREFIX" \
    -ginkgo.no-color -ginkgo.v -ginkgo.timeout=45m \
    "${skip_args[@]}" "$@") 2>&1 9>&- &
  echo $! >"$TMP/critest.pid"
  wait $!
  echo $? >"$TMP/critest.rc"
} | tee "$CRITEST_LOG" | awk '
  # One line per finished spec, from ginkgo -v output: the spec text line
  # starts with "[k8s.io]", its result line with "•" or "S".
  /^\[k8s\.io\]/ { spec = $0 }
  /^• \[FAILED\]|^• \[PANICKED\]|^• \[TIMEDOUT\]|^• \[INTERRUPTED\]/ { if (spec != "") print "  FAIL  " spec; spec = ""; fflush(); next }
  /^• \[[0-9.]+ seconds\]/ { if (spec != "") print "  pass  " spec; spec = ""; fflush(); next }
  /^S \[SKIPPED\]/ { if (spec != "") print "  skip  " spec; spec = ""; fflush(); next }
' &
wait $!
critest_rc=$(cat "$TMP/critest.rc" 2>/dev/null || echo 1)
set -e
elapsed=$((SECONDS - start))

echo
# critest's own summary: from ginkgo's "Summarizing" (or "Ran N of M") to the end.
awk '/^Summarizing [0-9]+ Failure/ || /^Ran [0-9]+ of [0-9]+ Specs/ { on = 1 } on' "$CRITEST_LOG" |
  grep -v '^\s*$' || true
echo
counts=$(grep -Eo '[0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$CRITEST_LOG" | tail -n 1 || true)
if [[ -z "$counts" ]]; then
  die "critest exited $critest_rc with no ginkgo summary (see ${CRITEST_LOG#"$ROOT"/})"
fi
read -r passed _ _ failed _ _ pending _ _ skipped _ <<<"$counts"
log "critest took ${elapsed}s; netshim log: ${NETSHIM_LOG#"$ROOT"/}"
# Clean up first, so that the counts are the last line.
trap - EXIT INT TERM
teardown
echo "conformance: $passed passed, $failed failed, $((skipped + pending)) skipped"
if ((failed > 0 || critest_rc != 0)); then
  exit 1
fi
