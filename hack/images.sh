#!/usr/bin/env bash
# Builds the local images netshim's tests and dev setup use, with no registry access:
#   registry.k8s.io/pause:3.10      a static pause binary (hack/pause/pause.c) as ENTRYPOINT
#   netshim.local/busybox:latest    busybox-static with applets hard-linked into /bin, CMD ["sh"]
# Each image carries a label with a hash of its content; an image is (re)imported only
# when it is missing or its content changed. Needs a running Docker engine
# (hack/dockerd.sh start) and gcc, libc6-dev, busybox-static (hack/install-deps.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output/images"
PAUSE_IMAGE=${PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-netshim.local/busybox:latest}
BUSYBOX_BIN=${BUSYBOX_BIN:-/bin/busybox}
KEY_LABEL=io.netshim.content-sha256
# Bump when the recipe below changes in a way the hashed inputs do not show.
RECIPE=2

die() { echo "images.sh: $*" >&2; exit 1; }

mkdir -p "$OUT"

# current_key IMAGE: the content hash label of IMAGE, or nothing if it is missing.
current_key() {
  docker image inspect -f "{{index .Config.Labels \"$KEY_LABEL\"}}" "$1" 2>/dev/null || true
}

# import ROOTFS IMAGE KEY CHANGE...: imports ROOTFS (a directory) as IMAGE.
import() {
  local rootfs=$1 image=$2 key=$3
  shift 3
  local args=(--change "LABEL $KEY_LABEL=$key")
  local c
  for c in "$@"; do
    args+=(--change "$c")
  done
  tar -C "$rootfs" --owner=0 --group=0 --numeric-owner -c . |
    docker import "${args[@]}" - "$image" >/dev/null ||
    die "docker import of $image failed"
}

# pause_rootfs: $OUT/pause/rootfs with the static pause binary (built when
# missing or older than its source).
pause_rootfs() {
  command -v gcc >/dev/null || die "gcc not found (run hack/install-deps.sh)"
  local dir="$OUT/pause" bin="$OUT/pause/rootfs/pause" src="$ROOT/hack/pause/pause.c"
  mkdir -p "$dir/rootfs"
  if [[ ! -x "$bin" || "$src" -nt "$bin" || "${BASH_SOURCE[0]}" -nt "$bin" ]]; then
    gcc -static -Os -s -Wall -Wextra -Werror -o "$bin.tmp" "$src" ||
      die "building $src failed (is libc6-dev installed?)"
    mv -f "$bin.tmp" "$bin"
  fi
}

build_pause() {
  pause_rootfs
  local bin="$OUT/pause/rootfs/pause" key
  key=$( { echo "recipe $RECIPE"; sha256sum <"$bin"; } | sha256sum | cut -d' ' -f1)
  if [[ "$(current_key "$PAUSE_IMAGE")" != "$key" ]]; then
    import "$OUT/pause/rootfs" "$PAUSE_IMAGE" "$key" 'ENTRYPOINT ["/pause"]'
    echo "images.sh: imported $PAUSE_IMAGE"
  fi
}

# busybox_rootfs: $OUT/busybox/rootfs, busybox-static with its applets
# hard-linked into /bin and a minimal /etc.
busybox_rootfs() {
  busybox_rootfs_check
  local rootfs="$OUT/busybox/rootfs"
  rm -rf "$OUT/busybox"
  mkdir -p "$rootfs"/{bin,etc,tmp,root}
  chmod 1777 "$rootfs/tmp"
  chmod 0700 "$rootfs/root"
  cp "$BUSYBOX_BIN" "$rootfs/bin/busybox"
  chmod 0755 "$rootfs/bin/busybox"
  local applet
  for applet in $("$BUSYBOX_BIN" --list); do
    [[ "$applet" == busybox || -e "$rootfs/bin/$applet" ]] && continue
    ln "$rootfs/bin/busybox" "$rootfs/bin/$applet"
  done
  [[ -e "$rootfs/bin/sh" ]] || die "$BUSYBOX_BIN has no sh applet"
  cat >"$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
  cat >"$rootfs/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
}

busybox_key() {
  { echo "recipe $RECIPE"; sha256sum <"$BUSYBOX_BIN"; } | sha256sum | cut -d' ' -f1
}

build_busybox() {
  local key
  busybox_rootfs_check
  key=$(busybox_key)
  if [[ "$(current_key "$BUSYBOX_IMAGE")" == "$key" ]]; then
    return 0
  fi
  busybox_rootfs
  import "$OUT/busybox/rootfs" "$BUSYBOX_IMAGE" "$key" 'CMD ["sh"]'
  echo "images.sh: imported $BUSYBOX_IMAGE"
}

busybox_rootfs_check() {
  [[ -x "$BUSYBOX_BIN" ]] || die "$BUSYBOX_BIN not found (run hack/install-deps.sh: busybox-static)"
  # Only a static busybox works in an image without a libc.
  file_is_static "$BUSYBOX_BIN" || die "$BUSYBOX_BIN is not statically linked (install busybox-static)"
}

# file_is_static BIN: BIN has no ELF program interpreter, i.e. needs no ld.so.
file_is_static() {
  ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep 'program interpreter' >/dev/null
}

# tars DEST: the images' root filesystems as tar files, DEST/pause.tar and
# DEST/busybox.tar, for a Docker engine elsewhere (the VM node of make e2e-vm
# imports them with `docker import`); needs no engine here.
if [[ "${1:-}" == tars ]]; then
  dest=${2:?usage: images.sh tars DEST}
  mkdir -p "$dest"
  pause_rootfs
  busybox_rootfs
  for name in pause busybox; do
    tar -C "$OUT/$name/rootfs" --owner=0 --group=0 --numeric-owner -cf "$dest/$name.tar" .
  done
  exit 0
fi

timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
  die "the Docker engine does not answer (run hack/dockerd.sh start)"

build_pause
build_busybox
