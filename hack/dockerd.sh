#!/usr/bin/env bash
# hack/dockerd.sh start|stop|status
#
# start: does nothing if a Docker engine already answers on /var/run/docker.sock;
#        otherwise starts dockerd in the background (log: _output/dockerd.log), records
#        its PID in _output/dockerd.pid and waits (at most 60 s) until it answers.
# stop:  stops the dockerd recorded in _output/dockerd.pid, i.e. only one this script
#        started; a dockerd started by anyone else is never touched.
#
# A dockerd this script starts has runc registered a second time, as runtime
# netshim-alt (the e2e tests' and critest's RuntimeClass handler; test/harness
# AltRuntime), and netshim's OCI runtime wrapper _output/netshim-oci (make build)
# as runtime netshim-oci, so that netshim's default --sandbox-netns=auto runs pods
# in the pause-less mode (pinned if they share a PID namespace) on it (the wrapper execs the runc on the daemons' PATH). An
# engine that already answers is used as it is: register them there yourself
# (daemon.json "runtimes", then SIGHUP) to run pods with that handler or pinned.
#
# REGISTER=1 (make run): the dockerd this script starts has no netshim-alt, and reads
#        its configuration from _output/run/daemon.json (a copy of /etc/docker/daemon.json when there is one,
#        made once) instead of having netshim-oci on its command line, and netshim's
#        own `netshim engine register` adds the wrapper there, reloads the engine and
#        waits until it runs it, as an operator's node gets it. An engine that already
#        answers is used as it is; if it lacks netshim-oci, the command to add it is
#        printed.
#
# RUNC=1.4.3: manages instead a test dockerd of its own (the system's Docker 20.10
#        binary) with runc 1.4.3 (_output/docker29/bin/runc, built by hack/docker29.sh
#        build-runc) registered as runtime runc143 and made the default, on
#        unix:///run/netshim-docker20-runc143/docker.sock with its own data root, exec
#        root and no bridge/iptables, so that the system's engine is not touched. Point
#        DOCKER_HOST there (make ENGINE=docker20-runc143 does). Debian's runc 1.1.5 cannot
#        start privileged containers on machines where root lacks CAP_SYS_RESOURCE;
#        runc 1.4.3 can.
#
# PID 1 on the development/CI machines does not reap orphans, so a dockerd that has
# exited may linger as a zombie: "gone" means no /proc entry or process state Z.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
PIDFILE="$OUT/dockerd.pid"
LOG="$OUT/dockerd.log"
SOCK=/var/run/docker.sock
DOCKER_PIDFILE=/var/run/docker.pid
CONTAINERD_PIDFILE=/var/run/docker/containerd/containerd.pid
# ALT_RUNTIME: the second name runc is registered under (see above).
ALT_RUNTIME=netshim-alt
# OCI_WRAPPER: netshim's OCI runtime wrapper (cmd/netshim-oci), registered as
# runtime netshim-oci. dockerd looks at the path only when a container uses it.
OCI_WRAPPER="$OUT/netshim-oci"
DOCKERD_ARGS=()
case "${RUNC:-}" in
  "")
    if [[ -n "${REGISTER:-}" ]]; then
      # No --add-runtime: a reload keeps only the file's runtimes, and
      # `netshim engine register` refuses to lose one.
      RUN_CONFIG="$OUT/run/daemon.json"
      DOCKERD_ARGS=(--config-file "$RUN_CONFIG")
    else
      if runc_path=$(command -v runc); then
        DOCKERD_ARGS=(--add-runtime "$ALT_RUNTIME=$runc_path")
      fi
      DOCKERD_ARGS+=(--add-runtime "netshim-oci=$OCI_WRAPPER")
    fi
    ;;
  1.4.3)
    PRIV_RUN=/run/netshim-docker20-runc143
    PRIV_LIB=/var/lib/netshim-docker20-runc143
    PIDFILE="$OUT/dockerd-runc143.pid"
    LOG="$OUT/dockerd-runc143.log"
    SOCK="$PRIV_RUN/docker.sock"
    DOCKER_PIDFILE="$PRIV_RUN/docker.pid"
    CONTAINERD_PIDFILE="$PRIV_RUN/exec/containerd/containerd.pid"
    DOCKERD_ARGS=(
      --config-file "$PRIV_RUN/daemon.json"
      --data-root "$PRIV_LIB" --exec-root "$PRIV_RUN/exec" --pidfile "$DOCKER_PIDFILE"
      -H "unix://$SOCK"
      --bridge=none --iptables=false --ip6tables=false --ip-masq=false --userland-proxy=false
      --add-runtime "runc143=$OUT/docker29/bin/runc" --default-runtime runc143
      --add-runtime "$ALT_RUNTIME=$OUT/docker29/bin/runc"
    )
    ;;
  *) echo "dockerd.sh: RUNC=$RUNC: only 1.4.3 (or unset: the system's runc) is known" >&2; exit 2 ;;
esac
START_TIMEOUT=${DOCKERD_START_TIMEOUT:-60}
STOP_TIMEOUT=${DOCKERD_STOP_TIMEOUT:-45}

die() { echo "dockerd.sh: $*" >&2; exit 1; }

# answers: the Docker engine on $SOCK replies to a version request.
answers() {
  [[ -S "$SOCK" ]] || return 1
  timeout 5 docker -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# proc_state PID: prints the process state letter (R, S, Z, ...) or nothing if gone.
proc_state() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  echo "${stat%% *}"
}

# running PID: the process exists and is not a zombie.
running() {
  local s
  s=$(proc_state "$1")
  [[ -n "$s" && "$s" != Z ]]
}

# is_dockerd PID: PID is a live dockerd process (guards against PID reuse).
is_dockerd() {
  running "$1" && [[ "$(cat "/proc/$1/comm" 2>/dev/null)" == dockerd ]]
}

log_tail() {
  if [[ -f "$LOG" ]]; then
    echo "---- last lines of $LOG ----" >&2
    tail -n 30 "$LOG" >&2
  fi
}

# now_us: the time in microseconds.
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# wait_gone PID SECONDS: true once PID has exited (or is a zombie).
wait_gone() {
  local pid=$1 deadline=$(($(now_us) + $2 * 1000000))
  while running "$pid"; do
    (($(now_us) < deadline)) || return 1
    sleep 0.2
  done
}

# register: `netshim engine register` on the engine this script started with
# REGISTER=1: the wrapper into $RUN_CONFIG, SIGHUP, wait for docker info.
register() {
  [[ -x "$OUT/netshim" ]] || die "no $OUT/netshim to register the wrapper with (make build)"
  "$OUT/netshim" engine register --daemon-json "$RUN_CONFIG" --wrapper "$OCI_WRAPPER" \
    --docker-endpoint "unix://$SOCK" --docker-pidfile "$DOCKER_PIDFILE"
}

# has_wrapper: the engine on $SOCK lists runtime netshim-oci.
has_wrapper() {
  timeout 10 docker -H "unix://$SOCK" info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"netshim-oci"'
}

start() {
  mkdir -p "$OUT"
  if answers; then
    if [[ -n "${REGISTER:-}" ]] && ! has_wrapper; then
      echo "dockerd.sh: the Docker engine on $SOCK (not started here) has no runtime netshim-oci: netshim runs pods in the docker mode; add it with: $OUT/netshim engine register --wrapper $OCI_WRAPPER" >&2
    fi
    return 0
  fi

  local pid=""
  if [[ -f "$PIDFILE" ]]; then
    pid=$(cat "$PIDFILE")
    if ! is_dockerd "$pid"; then
      rm -f "$PIDFILE"
      pid=""
    fi
  fi

  if [[ -z "$pid" ]]; then
    command -v dockerd >/dev/null || die "dockerd not found (run hack/install-deps.sh)"
    if [[ -n "${REGISTER:-}" && ! -f "$RUN_CONFIG" ]]; then
      mkdir -p "$(dirname "$RUN_CONFIG")"
      if [[ -f /etc/docker/daemon.json ]]; then
        cp /etc/docker/daemon.json "$RUN_CONFIG"
      else
        echo '{}' >"$RUN_CONFIG"
      fi
    fi
    if [[ -n "${RUNC:-}" ]]; then
      "$ROOT/hack/docker29.sh" build-runc
      mkdir -p "$PRIV_RUN" "$PRIV_LIB"
      # Its own config, not the system engine's /etc/docker/daemon.json: netshim's
      # OCI wrapper as runtime netshim-oci, exec'ing this engine's runc 1.4.3
      # (runtimeArgs; --add-runtime takes none).
      printf '{"runtimes": {"netshim-oci": {"path": "%s", "runtimeArgs": ["--netshim-runc=%s"]}}}\n' \
        "$OCI_WRAPPER" "$OUT/docker29/bin/runc" >"$PRIV_RUN/daemon.json"
    fi
    # A dockerd that died (or is a zombie) leaves its docker.pid behind, and dockerd
    # refuses to start while the PID in it still has a /proc entry.
    if [[ -f "$DOCKER_PIDFILE" ]]; then
      local old
      old=$(cat "$DOCKER_PIDFILE" 2>/dev/null || true)
      if [[ -n "$old" ]] && is_dockerd "$old"; then
        die "a dockerd (PID $old) is running but does not answer on $SOCK"
      fi
      rm -f "$DOCKER_PIDFILE"
    fi
    # Every descriptor but 0-2 is closed in dockerd: it must not hold a lock of its
    # caller (`flock FILE make e2e`) for the rest of its life.
    (
      for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        ((fd > 2)) && eval "exec $fd>&-"
      done
      exec setsid dockerd "${DOCKERD_ARGS[@]}" </dev/null >"$LOG" 2>&1
    ) &
    pid=$!
    echo "$pid" >"$PIDFILE"
  fi

  local deadline=$(($(now_us) + START_TIMEOUT * 1000000))
  until answers; do
    if ! running "$pid"; then
      log_tail
      rm -f "$PIDFILE"
      die "dockerd (PID $pid) exited before answering on $SOCK"
    fi
    if (($(now_us) >= deadline)); then
      log_tail
      die "dockerd (PID $pid) did not answer on $SOCK within ${START_TIMEOUT}s (left running; PID in $PIDFILE)"
    fi
    sleep 0.2
  done
  if [[ -n "${REGISTER:-}" ]]; then
    register
  fi
}

stop() {
  [[ -f "$PIDFILE" ]] || return 0
  local pid
  pid=$(cat "$PIDFILE")
  if is_dockerd "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    # dockerd stops its running containers before it exits (up to their stop timeout).
    if ! wait_gone "$pid" "$STOP_TIMEOUT"; then
      echo "dockerd.sh: dockerd (PID $pid) did not exit within ${STOP_TIMEOUT}s of SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 10 || die "dockerd (PID $pid) survived SIGKILL"
      # Its containerd child outlives a SIGKILLed dockerd: stop it too.
      local cpid
      cpid=$(cat "$CONTAINERD_PIDFILE" 2>/dev/null || true)
      if [[ -n "$cpid" ]] && running "$cpid" && [[ "$(cat "/proc/$cpid/comm" 2>/dev/null)" == containerd ]]; then
        kill -TERM "$cpid" 2>/dev/null || true
        wait_gone "$cpid" 10 || kill -KILL "$cpid" 2>/dev/null || true
      fi
    fi
  fi
  # A zombie keeps its /proc entry, which would make the next dockerd refuse to start.
  if [[ "$(cat "$DOCKER_PIDFILE" 2>/dev/null || true)" == "$pid" ]]; then
    rm -f "$DOCKER_PIDFILE"
  fi
  rm -f "$PIDFILE"
}

status() {
  if answers; then
    if [[ -f "$PIDFILE" ]]; then
      echo "dockerd answers on $SOCK (started by hack/dockerd.sh, PID $(cat "$PIDFILE"))"
    else
      echo "dockerd answers on $SOCK (not started by hack/dockerd.sh)"
    fi
  else
    echo "dockerd does not answer on $SOCK"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
