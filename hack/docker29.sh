#!/usr/bin/env bash
# hack/docker29.sh build|build-runc|build-containerd|start|stop|status|env
#
# A private Docker 29 engine for the test matrix (`make e2e ENGINE=docker29`,
# `make conformance ENGINE=docker29`), next to the system's Docker 20.10
# (hack/dockerd.sh), which it never touches:
#
# build:  builds, from the Go module proxy at exact versions, into _output/docker29/bin/
#           dockerd                     github.com/moby/moby/v2 $MOBY_VERSION (Docker 29, API 1.56)
#           containerd, containerd-shim-runc-v2, ctr   github.com/containerd/containerd/v2 $CONTAINERD_VERSION
#           runc                        github.com/opencontainers/runc $RUNC_VERSION (tag seccomp)
#         Each module is fetched with `go mod download`, copied out of the read-only
#         module cache to _output/src/ and built there with -mod=mod (`go install
#         MODULE@VERSION` refuses these modules: replace lines, or the version list is
#         refused). A binary is rebuilt only when its stamp file (bin/.NAME.version)
#         does not name the wanted version. Logs: _output/docker29/build-NAME.log.
#         Debian's runc 1.1.5 cannot run Docker 29's containers (it does not know the
#         time namespace), hence the own runc; it needs libseccomp-dev.
# start:  builds if needed, then starts containerd and dockerd (does nothing if the
#         engine already answers). Everything of the engine is its own:
#           socket     unix://$D29_SOCK
#           state      $D29_RUN (containerd state and socket, dockerd exec root, PID files)
#           data       $D29_LIB (containerd root, dockerd data root)
#           cgroups    parent netshim-docker29; no bridge, no iptables/ip6tables rules
#           runtime    runc $RUNC_VERSION (first on the daemons' PATH, so Docker's default
#                      runtime "runc" is it), also registered as runtime netshim-alt (the
#                      e2e tests' and critest's RuntimeClass handler; test/harness AltRuntime);
#                      netshim's OCI wrapper _output/netshim-oci as runtime netshim-oci (pinned
#                      sandbox netns: it execs that runc, found on PATH)
#         Logs: _output/docker29/containerd.log, _output/docker29/dockerd.log.
# stop:   stops the dockerd and containerd this script started (their PID files are
#         in $D29_RUN); dockerd first, so that it stops its containers.
# build-runc: builds only runc (hack/dockerd.sh uses it with Docker 20.10: RUNC=1.4.3).
# build-containerd: builds only runc, containerd, containerd-shim-runc-v2 and ctr, and
#         starts nothing: what `make bench-kubelet` needs to run containerd's own CRI
#         plugin as a peer of netshim (test/kubeletbench --containerd-bin-dir).
# status: says whether the engine answers; exit 1 if not.
# env:    prints `export DOCKER_HOST=...` for eval, to point the docker CLI at the engine.
#
# PID 1 on the development/CI machines does not reap orphans: an exited daemon may
# linger as a zombie, so "gone" means no /proc entry or process state Z.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
D29_OUT="$OUT/docker29"
BIN="$D29_OUT/bin"
SRC="$OUT/src"
MOBY_VERSION=${MOBY_VERSION:-v2.0.0-beta.24}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.4.3}
D29_RUN=${D29_RUN:-/run/netshim-docker29}
D29_LIB=${D29_LIB:-/var/lib/netshim-docker29}
D29_SOCK="$D29_RUN/docker.sock"
CTR_SOCK="$D29_RUN/containerd/containerd.sock"
CGROUP_PARENT=netshim-docker29
START_TIMEOUT=${DOCKERD_START_TIMEOUT:-60}
STOP_TIMEOUT=${DOCKERD_STOP_TIMEOUT:-45}

die() { echo "docker29.sh: $*" >&2; exit 1; }

export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"

# ---- build ------------------------------------------------------------------

# fetch MODULE VERSION NAME: copies MODULE@VERSION out of the module cache to
# _output/src/NAME (once per version) and prints that directory.
fetch() {
  local module=$1 version=$2 name=$3 json dir
  local dst="$SRC/$name"
  if [[ -f "$dst/.version" && "$(cat "$dst/.version")" == "$version" ]]; then
    echo "$dst"
    return 0
  fi
  json=$(cd "$OUT" && go mod download -json "$module@$version" 2>&1) ||
    die "go mod download $module@$version failed: $json"
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -n "$dir" && -d "$dir" ]] || die "no module directory for $module@$version: $json"
  rm -rf "$dst" "$dst.tmp"
  mkdir -p "$SRC"
  cp -r "$dir" "$dst.tmp"
  chmod -R u+w "$dst.tmp"
  echo "$version" >"$dst.tmp/.version"
  mv "$dst.tmp" "$dst"
  echo "$dst"
}

# stamped NAME VERSION: bin/NAME exists and was built from VERSION.
stamped() {
  [[ -x "$BIN/$1" && -f "$BIN/.$1.version" && "$(cat "$BIN/.$1.version")" == "$2" ]]
}

# gobuild NAME VERSION DIR GO-BUILD-ARGS...: go build in DIR into bin/NAME, with
# its output in _output/docker29/build-NAME.log (its tail shown on failure).
gobuild() {
  local name=$1 version=$2 dir=$3 start=$SECONDS
  local log="$D29_OUT/build-$name.log"
  shift 3
  echo "docker29.sh: building $name $version (log: ${log#"$ROOT"/})"
  rm -f "$BIN/.$name.version"
  if ! (cd "$dir" && go build -trimpath -o "$BIN/$name.tmp" "$@") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "building $name $version failed"
  fi
  mv -f "$BIN/$name.tmp" "$BIN/$name"
  echo "$version" >"$BIN/.$name.version"
  echo "docker29.sh: built $name in $((SECONDS - start))s"
}

build_runc() {
  stamped runc "$RUNC_VERSION" && return 0
  [[ -e /usr/include/seccomp.h ]] || die "libseccomp-dev is missing (run hack/install-deps.sh)"
  local dir
  dir=$(fetch github.com/opencontainers/runc "$RUNC_VERSION" runc)
  gobuild runc "$RUNC_VERSION" "$dir" -tags seccomp \
    -ldflags "-X main.version=${RUNC_VERSION#v} -X main.gitCommit=module-proxy" .
}

# build_containerd: containerd, its runc shim and ctr, all of the one module
# version; each is built only when its stamp does not name that version (a tree
# that had the first two before ctr was added builds ctr alone).
build_containerd() {
  local v=$CONTAINERD_VERSION
  stamped containerd "$v" && stamped containerd-shim-runc-v2 "$v" && stamped ctr "$v" && return 0
  local dir pkg=github.com/containerd/containerd/v2/version
  dir=$(fetch github.com/containerd/containerd/v2 "$v" containerd)
  local ldflags="-X $pkg.Version=$v -X $pkg.Revision=module-proxy"
  # no_btrfs: the btrfs snapshotter needs btrfs headers and is of no use here.
  stamped containerd "$v" ||
    gobuild containerd "$v" "$dir" -tags no_btrfs -ldflags "$ldflags" ./cmd/containerd
  # The shim is built static (as upstream does), so it does not depend on the host's libc.
  stamped containerd-shim-runc-v2 "$v" ||
    CGO_ENABLED=0 gobuild containerd-shim-runc-v2 "$v" "$dir" -ldflags "$ldflags" ./cmd/containerd-shim-runc-v2
  # ctr, containerd's own client: test/kubeletbench imports the images into the
  # containerd it runs as netshim's CRI peer with it.
  stamped ctr "$v" ||
    gobuild ctr "$v" "$dir" -tags no_btrfs -ldflags "$ldflags" ./cmd/ctr
}

build_dockerd() {
  stamped dockerd "$MOBY_VERSION" && return 0
  local dir
  dir=$(fetch github.com/moby/moby/v2 "$MOBY_VERSION" moby)
  local ldflags="-X github.com/moby/moby/v2/dockerversion.Version=29.0.0-moby-${MOBY_VERSION#v}"
  ldflags+=" -X github.com/moby/moby/v2/dockerversion.GitCommit=module-proxy"
  gobuild dockerd "$MOBY_VERSION" "$dir" \
    -tags "exclude_graphdriver_btrfs exclude_graphdriver_devicemapper" -ldflags "$ldflags" ./cmd/dockerd
}

# locked FUNC: runs FUNC holding the build lock: one build at a time (make
# test's background prebuild and a suite that starts the engine now, say); the
# second waits, then finds the stamps. Released before start() runs the
# daemons, which must not inherit it. (Not `"$@" || rc=$?`: that would turn
# errexit off inside FUNC. A failure exits the script, which releases it.)
locked() {
  local lockfd
  mkdir -p "$BIN"
  exec {lockfd}>"$D29_OUT/.build.lock"
  flock "$lockfd"
  "$@"
  exec {lockfd}>&-
}

build_all() {
  local start=$SECONDS
  build_runc
  build_containerd
  build_dockerd
  if ((SECONDS - start > 1)); then
    echo "docker29.sh: build took $((SECONDS - start))s"
  fi
}

build() { locked build_all; }

# build_containerd_peer: what a standalone containerd with its CRI plugin needs
# (runc, containerd, the shim, ctr), without dockerd; nothing is started.
build_containerd_peer() {
  build_runc
  build_containerd
}

# ---- run --------------------------------------------------------------------

# proc_state PID: prints the process state letter (R, S, Z, ...) or nothing if gone.
proc_state() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  echo "${stat%% *}"
}

# alive PID COMM: PID is a live (not zombie) process named COMM (guards against PID reuse).
alive() {
  local s
  s=$(proc_state "$1")
  [[ -n "$s" && "$s" != Z && "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]]
}

# lives PID: PID is a process that has not exited (a zombie has).
lives() {
  local s
  s=$(proc_state "$1")
  [[ -n "$s" && "$s" != Z ]]
}

now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# wait_gone PID COMM SECONDS: true once PID has exited (or is a zombie).
wait_gone() {
  local deadline=$(($(now_us) + $3 * 1000000))
  while alive "$1" "$2"; do
    (($(now_us) < deadline)) || return 1
    sleep 0.2
  done
}

answers() {
  [[ -S "$D29_SOCK" ]] || return 1
  timeout 5 docker -H "unix://$D29_SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# ctr_listens: containerd creates its socket once it serves (dockerd retries the
# connection anyway).
ctr_listens() { [[ -S "$CTR_SOCK" ]]; }

log_tail() {
  if [[ -f "$1" ]]; then
    echo "---- last lines of ${1#"$ROOT"/} ----" >&2
    tail -n 30 "$1" >&2
  fi
}

# pid_of NAME COMM: the PID in $D29_RUN/NAME.pid if it is a live COMM running our
# bin/COMM, else nothing: a stale PID file must not name the system's containerd.
pid_of() {
  local pid exe
  pid=$(cat "$D29_RUN/$1.pid" 2>/dev/null || true)
  if [[ -n "$pid" ]] && alive "$pid" "$2"; then
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
    if [[ "${exe% (deleted)}" == "$BIN/$2" ]]; then
      echo "$pid"
    fi
  fi
}

# wait_until WHAT PID COMM LOG CHECK...: waits (START_TIMEOUT) until CHECK succeeds
# while PID lives, then checks that PID is COMM.
wait_until() {
  local what=$1 pid=$2 comm=$3 log=$4
  shift 4
  local deadline=$(($(now_us) + START_TIMEOUT * 1000000))
  until "$@"; do
    # Only "the process is gone" here, not alive's name check: until the
    # daemon() subshell has exec'd setsid and setsid the daemon, its name is
    # bash or setsid, and a slow machine can be looked at in between.
    if ! lives "$pid"; then
      log_tail "$log"
      die "$what (PID $pid) exited before answering"
    fi
    if (($(now_us) >= deadline)); then
      log_tail "$log"
      die "$what (PID $pid) did not answer within ${START_TIMEOUT}s (left running)"
    fi
    sleep 0.2
  done
  # Answering, the daemon has its own name: the PID recorded is really it.
  alive "$pid" "$comm" || die "$what answers, but PID $pid is not $comm: its PID file would be wrong"
}

# daemon LOG CMD...: starts CMD in a session of its own, in the background, with
# its output in LOG and no file descriptor but 0-2 open: a daemon must not keep
# a lock of its caller (`flock FILE hack/docker29.sh start`) held for its life.
daemon() {
  local log=$1
  shift
  (
    local fd
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      ((fd > 2)) && eval "exec $fd>&-"
    done
    exec setsid "$@" </dev/null >"$log" 2>&1
  ) &
}

write_configs() {
  mkdir -p "$D29_RUN/containerd" "$D29_LIB/containerd" "$D29_LIB/docker" "$D29_RUN/exec"
  # containerd 2.x config (version 3): its own root, state and sockets; the CRI
  # plugins are off (dockerd is the only client). The shim finds runc on PATH.
  cat >"$D29_RUN/containerd.toml" <<TOML
version = 3
root = "$D29_LIB/containerd"
state = "$D29_RUN/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"]

[grpc]
  address = "$CTR_SOCK"

[ttrpc]
  address = "$CTR_SOCK.ttrpc"

[debug]
  address = "$D29_RUN/containerd/debug.sock"
TOML
  # Its own (empty) daemon.json: dockerd would otherwise read the system's
  # /etc/docker/daemon.json, meant for the system engine.
  echo '{}' >"$D29_RUN/daemon.json"
}

start() {
  if answers; then
    return 0
  fi
  build
  write_configs
  # Only our binaries come before the system's: containerd finds the shim on
  # PATH, the shim finds runc (Docker's default runtime "runc") on it.
  local path="$BIN:$PATH"

  local cpid
  cpid=$(pid_of containerd containerd)
  if [[ -z "$cpid" ]]; then
    rm -f "$CTR_SOCK"
    PATH=$path daemon "$D29_OUT/containerd.log" "$BIN/containerd" --config "$D29_RUN/containerd.toml"
    cpid=$!
    echo "$cpid" >"$D29_RUN/containerd.pid"
  fi
  wait_until containerd "$cpid" containerd "$D29_OUT/containerd.log" ctr_listens

  local dpid
  dpid=$(pid_of dockerd dockerd)
  if [[ -z "$dpid" ]]; then
    rm -f "$D29_RUN/docker.pid"
    PATH=$path daemon "$D29_OUT/dockerd.log" "$BIN/dockerd" \
      --config-file "$D29_RUN/daemon.json" \
      --data-root "$D29_LIB/docker" \
      --exec-root "$D29_RUN/exec" \
      --pidfile "$D29_RUN/docker.pid" \
      -H "unix://$D29_SOCK" \
      --containerd "$CTR_SOCK" \
      --bridge=none --iptables=false --ip6tables=false --ip-masq=false --userland-proxy=false \
      --cgroup-parent "$CGROUP_PARENT" \
      --add-runtime "netshim-alt=$BIN/runc" \
      --add-runtime "netshim-oci=$OUT/netshim-oci"
    dpid=$!
    echo "$dpid" >"$D29_RUN/dockerd.pid"
  fi
  wait_until dockerd "$dpid" dockerd "$D29_OUT/dockerd.log" answers
  echo "docker29.sh: $(status)"
}

# stop_one NAME COMM: SIGTERM to the process in NAME.pid, SIGKILL after STOP_TIMEOUT.
stop_one() {
  local pid
  pid=$(pid_of "$1" "$2")
  if [[ -n "$pid" ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$2" "$STOP_TIMEOUT"; then
      echo "docker29.sh: $2 (PID $pid) did not exit within ${STOP_TIMEOUT}s of SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" "$2" 10 || die "$2 (PID $pid) survived SIGKILL"
    fi
  fi
  rm -f "$D29_RUN/$1.pid"
}

stop() {
  # dockerd first: it stops its containers, through containerd.
  stop_one dockerd dockerd
  rm -f "$D29_RUN/docker.pid"
  stop_one containerd containerd
}

status() {
  if answers; then
    echo "Docker $(docker -H "unix://$D29_SOCK" version --format '{{.Server.Version}} (API {{.Server.APIVersion}})') answers on unix://$D29_SOCK"
  else
    echo "the docker29 engine does not answer on unix://$D29_SOCK"
    return 1
  fi
}

case "${1:-}" in
  build) build ;;
  build-runc) locked build_runc ;;
  build-containerd) locked build_containerd_peer ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export DOCKER_HOST=unix://$D29_SOCK" ;;
  *) echo "usage: $0 build|build-runc|build-containerd|start|stop|status|env" >&2; exit 2 ;;
esac
