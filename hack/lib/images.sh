# hack/lib/images.sh: what the image scripts (hack/critest-images.sh,
# hack/node-e2e-images.sh, hack/cluster-images.sh) share, sourced by each
# after it has defined die MESSAGE.
# shellcheck shell=bash

# need_docker: the host's engine answers, or the script stops saying how to
# start it.
need_docker() {
  timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
    die "the Docker engine does not answer (run hack/dockerd.sh start)"
}

# copy_libs ROOTFS BIN...: copies the shared libraries BINs need (ldd), and
# the dynamic loader, into ROOTFS under the same paths. A library the host
# lacks stops the script: the image would not run. A static BIN needs none.
copy_libs() {
  local rootfs=$1 bin lib
  shift
  for bin in "$@"; do
    if LC_ALL=C ldd "$bin" 2>/dev/null | grep -q 'not found'; then
      die "$bin needs a library the host lacks: $(LC_ALL=C ldd "$bin" | grep 'not found')"
    fi
    while read -r lib; do
      [[ -n "$lib" && ! -e "$rootfs$lib" ]] || continue
      mkdir -p "$rootfs$(dirname "$lib")"
      cp -L "$lib" "$rootfs$lib"
    done < <(LC_ALL=C ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
  done
}
