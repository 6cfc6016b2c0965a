#!/usr/bin/env bash
# hack/critest-images.sh [build | verify | push REGISTRY | untag REGISTRY | list]
#
# The images critest (cri-tools v1.34.0) needs, made locally with `docker import`
# from rootfs tarballs: no registry, no `docker build`, no internet (only Debian's
# package archive, for the dynamic busybox). Used by hack/conformance.sh and test/critest (which reads `list` and pushes); see
# ../shared/notes/critest-offline.md for why each image must look the way it does.
#
#   build          build every image (default). The rootfs tarballs are made
#                  reproducibly (sorted, mtime 0, owner 0) and each image carries a
#                  label with the hash of its tarball and config: an image already
#                  present with the same hash is not imported again.
#   verify         run each image with docker and check it does what critest
#                  expects (containers with --network none only).
#   push REGISTRY  push every image to REGISTRY (e.g. localhost:5000) under its
#                  path and tag and under :latest (critest's -registry-prefix drops
#                  tags), then untag what the image specs pull so that they really
#                  pull: the REGISTRY/... names of every image that only the image
#                  specs use, and their original names too, except for the
#                  test-image-user-* images whose status critest asks under the
#                  original name. Images that containers are created from keep all
#                  their names (critest creates containers under the original
#                  names).
#   untag REGISTRY remove the local REGISTRY/... names push left (the registry is
#                  gone after a run); the original names stay.
#   list           print the images: key, kind, original names.
#
# Busybox-based images hold Debian's *dynamic* busybox (hard-linked applets, no
# built-in applet shortcut, unlike busybox-static), pgrep (procps) and ipcs
# (util-linux) from the host, and the shared libraries those need (ldd).
# The web servers and the setuid test program are small static C programs in
# hack/critest-images/. Needs root, a running Docker engine, gcc, libc6-dev,
# procps and apt-get.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC="$ROOT/hack/critest-images"
OUT="$ROOT/_output/critest-images"
KEY_LABEL=io.netshim.content-sha256
# Bump when the recipe changes in a way the hashed tarball and config do not show.
RECIPE=1
PATH_ENV=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

case "$(uname -m)" in
  x86_64) GOARCH=amd64 ;;
  aarch64) GOARCH=arm64 ;;
  *) GOARCH=$(uname -m) ;;
esac

R=registry.k8s.io/e2e-test-images
G=gcr.io/k8s-staging-cri-tools

# The images: key|kind|original names (the first one is the primary name).
# Kinds: container  containers are made from it: keeps every name;
#        status     pulled by the image specs, whose status is then asked under
#                   the original name: keeps the original name only;
#        pulled     pulled by the image specs only: no local name left.
IMAGES=(
  "busybox|container|$R/busybox:1.29-2"
  "nginx|container|$R/nginx:1.14-2"
  "hostnet-nginx|container|$G/hostnet-nginx-$GOARCH:latest"
  "httpd|container|$R/httpd:2.4.39-4"
  "nonewprivs|container|$R/nonewprivs:1.3"
  "predefined-group|container|$G/test-image-predefined-group:latest"
  "user-uid|status|$G/test-image-user-uid:latest"
  "user-username|status|$G/test-image-user-username:latest"
  "user-uid-group|status|$G/test-image-user-uid-group:latest"
  "user-username-group|status|$G/test-image-user-username-group:latest"
  "test-image-1|pulled|$G/test-image-1:latest"
  "test-image-2|pulled|$G/test-image-2:latest"
  "test-image-3|pulled|$G/test-image-3:latest"
  "test-image-latest|pulled|$G/test-image-latest:latest"
  "test-image-digest|pulled|$G/test-image-digest:latest"
  "test-image-tags|pulled|$G/test-image-tags:1 $G/test-image-tags:2 $G/test-image-tags:3"
  "test-image-tag-test|pulled|$G/test-image-tag:test"
  "test-image-tag-all|pulled|$G/test-image-tag:all"
)

die() { echo "critest-images.sh: $*" >&2; exit 1; }
# need_docker, copy_libs
# shellcheck source=hack/lib/images.sh
source "$ROOT/hack/lib/images.sh"
log() { echo "critest-images.sh: $*"; }

# quietly LOG CMD...: runs CMD with its output in LOG, shown (tail) on failure.
quietly() {
  local logf=$1
  shift
  if ! "$@" >"$logf" 2>&1; then
    tail -n 30 "$logf" >&2
    return 1
  fi
}

# ---- inputs -------------------------------------------------------------------

# fetch_busybox: extracts Debian's dynamic busybox into $OUT/busybox-deb (the
# .deb is downloaded once and kept in $OUT).
fetch_busybox() {
  local deb="$OUT/busybox.deb"
  if [[ ! -s "$deb" ]]; then
    local tmp
    tmp=$(mktemp -d "$OUT/.deb.XXXXXX")
    chmod 0755 "$tmp"
    if ! (cd "$tmp" && apt-get download busybox) >"$OUT/apt.log" 2>&1; then
      # The package lists may be missing or stale on a fresh machine.
      if ! { apt-get update && (cd "$tmp" && apt-get download busybox); } >>"$OUT/apt.log" 2>&1; then
        rm -rf "$tmp"
        tail -n 20 "$OUT/apt.log" >&2
        die "apt-get download busybox failed"
      fi
    fi
    local got=("$tmp"/busybox_*.deb)
    [[ -s "${got[0]}" ]] || die "apt-get download busybox left no .deb in $tmp"
    mv -f "${got[0]}" "$deb"
    rm -rf "$tmp"
  fi
  rm -rf "$OUT/busybox-deb"
  dpkg-deb -x "$deb" "$OUT/busybox-deb" || die "dpkg-deb -x $deb failed"
  [[ -x "$OUT/busybox-deb/bin/busybox" ]] || die "$deb holds no bin/busybox"
  if ! LC_ALL=C readelf -l "$OUT/busybox-deb/bin/busybox" | grep 'program interpreter' >/dev/null; then
    die "the busybox in $deb is static: the images need Debian's dynamic busybox package"
  fi
}

# compile NAME: builds hack/critest-images/NAME.c statically into $OUT/bin/NAME.
compile() {
  local name=$1 src="$SRC/$1.c" bin="$OUT/bin/$1"
  command -v gcc >/dev/null || die "gcc not found (run hack/install-deps.sh)"
  mkdir -p "$OUT/bin"
  if [[ ! -x "$bin" || "$src" -nt "$bin" ]]; then
    gcc -static -Os -s -Wall -Wextra -Werror -o "$bin.tmp" "$src" ||
      die "building $src failed (is libc6-dev installed?)"
    mv -f "$bin.tmp" "$bin"
  fi
}

# host_tool NAME: the path of a host binary copied into the busybox images.
host_tool() {
  local p
  p=$(command -v "$1") || die "$1 not found on the host (install procps / util-linux)"
  readlink -f "$p"
}

# ---- rootfs recipes -----------------------------------------------------------

# base_rootfs DIR: a busybox rootfs like the upstream busybox image.
base_rootfs() {
  local r=$1 applet
  mkdir -p "$r"/{bin,etc,root,tmp,home,var/run,var/www,usr/bin,usr/sbin,dev,proc,sys}
  chmod 0700 "$r/root"
  chmod 1777 "$r/tmp"
  cp "$OUT/busybox-deb/bin/busybox" "$r/bin/busybox"
  chmod 0755 "$r/bin/busybox"
  for applet in $("$r/bin/busybox" --list); do
    [[ "$applet" == busybox || -e "$r/bin/$applet" ]] && continue
    ln "$r/bin/busybox" "$r/bin/$applet"
  done
  # Not busybox applets in Debian's build: the host's (critest runs `pgrep sleep`
  # and `ipcs -m` in the default image).
  cp "$(host_tool pgrep)" "$r/bin/pgrep"
  cp "$(host_tool ipcs)" "$r/bin/ipcs"
  copy_libs "$r" "$r/bin/busybox" "$r/bin/pgrep" "$r/bin/ipcs"
  cat >"$r/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
  cat >"$r/etc/group" <<'EOF'
root:x:0:
daemon:x:1:
www-data:x:33:
nogroup:x:65533:
nobody:x:65534:
EOF
}

# Each rootfs_KEY DIR fills DIR and sets CHANGES (docker import --change lines).
rootfs_busybox() {
  base_rootfs "$1"
  CHANGES=("ENV PATH=$PATH_ENV" 'CMD ["sh"]')
}

rootfs_nginx() {
  base_rootfs "$1"
  cp "$OUT/bin/webserver" "$1/usr/sbin/nginx"
  CHANGES=("ENV PATH=$PATH_ENV" 'CMD ["/usr/sbin/nginx", "-g", "daemon off;"]')
}

rootfs_hostnet_nginx() {
  rootfs_nginx "$1"
  CHANGES+=('ENV NGINX_PORT=12003')
}

rootfs_httpd() {
  base_rootfs "$1"
  mkdir -p "$1/usr/local/apache2/bin"
  cp "$OUT/bin/webserver" "$1/usr/local/apache2/bin/httpd"
  CHANGES=("ENV PATH=/usr/local/apache2/bin:$PATH_ENV" 'CMD ["/usr/local/apache2/bin/httpd", "-DFOREGROUND"]')
}

rootfs_nonewprivs() {
  local r=$1
  mkdir -p "$r"/{etc,tmp,usr/local/bin}
  chmod 1777 "$r/tmp"
  install -m 4755 "$OUT/bin/nnp" "$r/usr/local/bin/nnp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$r/etc/group"
  CHANGES=("ENV PATH=$PATH_ENV" 'CMD ["/usr/local/bin/nnp"]')
}

rootfs_predefined_group() {
  base_rootfs "$1"
  mkdir -p "$1/home/default-user"
  echo 'default-user:x:1000:1000:default-user:/home/default-user:/bin/sh' >>"$1/etc/passwd"
  printf 'default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n' >>"$1/etc/group"
  CHANGES=("ENV PATH=$PATH_ENV" 'USER 1000' 'CMD ["sh"]')
}

# small_rootfs DIR NAME: a tiny image told apart by a file named after it.
small_rootfs() {
  mkdir -p "$1/etc"
  printf 'root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\n' >"$1/etc/passwd"
  printf 'root:x:0:\nwww-data:x:33:\n' >"$1/etc/group"
  echo "$2" >"$1/$2"
  CHANGES=('CMD ["/bin/sh"]')
}

rootfs_user_uid() { small_rootfs "$1" test-image-user-uid; CHANGES+=('USER 1002'); }
rootfs_user_username() { small_rootfs "$1" test-image-user-username; CHANGES+=('USER www-data'); }
rootfs_user_uid_group() { small_rootfs "$1" test-image-user-uid-group; CHANGES+=('USER 1003:1004'); }
rootfs_user_username_group() { small_rootfs "$1" test-image-user-username-group; CHANGES+=('USER www-data:1004'); }
rootfs_test_image_1() { small_rootfs "$1" test-image-1; }
rootfs_test_image_2() { small_rootfs "$1" test-image-2; }
rootfs_test_image_3() { small_rootfs "$1" test-image-3; }
rootfs_test_image_latest() { small_rootfs "$1" test-image-latest; }
rootfs_test_image_digest() { small_rootfs "$1" test-image-digest; }
rootfs_test_image_tags() { small_rootfs "$1" test-image-tags; }
rootfs_test_image_tag_test() { small_rootfs "$1" test-image-tag-test; }
rootfs_test_image_tag_all() { small_rootfs "$1" test-image-tag-all; }

# ---- build --------------------------------------------------------------------

current_key() {
  docker image inspect -f "{{index .Config.Labels \"$KEY_LABEL\"}}" "$1" 2>/dev/null || true
}

# build_one KEY NAMES: builds the rootfs of KEY, imports it as the first of NAMES
# unless an image with the same content hash is there, and tags the other names.
build_one() {
  local key=$1 names
  read -ra names <<<"$2"
  local dir="$OUT/rootfs/$key" tarball="$OUT/tar/$key.tar"
  local primary=${names[0]}
  rm -rf "$dir"
  mkdir -p "$dir" "$OUT/tar"
  CHANGES=()
  "rootfs_${key//-/_}" "$dir"
  tar -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -cf "$tarball" . || die "tar of $dir failed"
  local hash
  hash=$( { echo "recipe $RECIPE"; printf '%s\n' "${CHANGES[@]}"; sha256sum <"$tarball"; } | sha256sum | cut -d' ' -f1)
  if [[ "$(current_key "$primary")" != "$hash" ]]; then
    local args=(--change "LABEL $KEY_LABEL=$hash") c
    for c in "${CHANGES[@]}"; do
      args+=(--change "$c")
    done
    docker import "${args[@]}" - "$primary" <"$tarball" >/dev/null || die "docker import of $primary failed"
    log "imported $primary"
  fi
  local n
  for n in "${names[@]:1}"; do
    docker tag "$primary" "$n"
  done
  rm -rf "$dir" "$tarball"
}

build() {
  need_docker
  mkdir -p "$OUT"
  fetch_busybox
  compile webserver
  compile nnp
  local entry key kind names
  for entry in "${IMAGES[@]}"; do
    IFS='|' read -r key kind names <<<"$entry"
    build_one "$key" "$names"
  done
  rm -rf "$OUT/rootfs" "$OUT/tar"
}

# ---- push ---------------------------------------------------------------------

# split NAME: sets PATH_PART and TAG from REGISTRY/PATH:TAG.
split() {
  local name=${1%:*}
  TAG=${1##*:}
  PATH_PART=${name#*/}
}

push_all() {
  local reg=$1
  need_docker
  local entry key kind names n plog="$OUT/push.log"
  local -A latest_done=()
  local drop=()
  mkdir -p "$OUT"
  : >"$plog"
  for entry in "${IMAGES[@]}"; do
    IFS='|' read -r key kind names <<<"$entry"
    for n in $names; do
      docker image inspect "$n" >/dev/null 2>&1 || die "$n is missing: run $0 build first"
      split "$n"
      local targets=("$reg/$PATH_PART:$TAG")
      if [[ -z "${latest_done[$PATH_PART]:-}" ]]; then
        latest_done[$PATH_PART]=1
        [[ "$TAG" == latest ]] || targets+=("$reg/$PATH_PART:latest")
      fi
      local t
      for t in "${targets[@]}"; do
        docker tag "$n" "$t"
        if ! docker push "$t" >>"$plog" 2>&1; then
          tail -n 20 "$plog" >&2
          die "docker push $t failed"
        fi
        [[ "$kind" == container ]] || drop+=("$t")
      done
      [[ "$kind" == pulled ]] && drop+=("$n")
    done
  done
  log "pushed every image to $reg"
  # Untag what the image specs pull, so that they really pull it.
  local d
  for d in "${drop[@]}"; do
    docker image inspect "$d" >/dev/null 2>&1 || continue
    docker image rm "$d" >/dev/null || die "docker image rm $d failed"
  done
}

untag_all() {
  local reg=$1 entry key kind names n t
  need_docker
  for entry in "${IMAGES[@]}"; do
    IFS='|' read -r key kind names <<<"$entry"
    for n in $names; do
      split "$n"
      for t in "$reg/$PATH_PART:$TAG" "$reg/$PATH_PART:latest"; do
        docker image inspect "$t" >/dev/null 2>&1 || continue
        docker image rm "$t" >/dev/null || echo "critest-images.sh: docker image rm $t failed" >&2
      done
    done
  done
}

# ---- verify -------------------------------------------------------------------

VERIFY_CONTAINERS=()
verify_cleanup() {
  local c
  for c in "${VERIFY_CONTAINERS[@]}"; do
    docker rm -f "$c" >/dev/null 2>&1 || true
  done
}

fail() { echo "critest-images.sh: verify: $*" >&2; FAILED=1; }

# run_bg NAME IMAGE [ARGS...]: starts a detached container without network.
run_bg() {
  local name=$1
  shift
  VERIFY_CONTAINERS+=("$name")
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker run -d --name "$name" --network none "$@" >/dev/null
}

# check DESC WHY TEST...: prints "ok DESC" when TEST succeeds, else records a failure.
check() {
  local desc=$1 why=$2
  shift 2
  if "$@"; then
    echo "  ok   $desc"
  else
    fail "$desc: $why"
  fi
}

# expect WHAT GOT WANT-SUBSTRING
expect() {
  if [[ "$2" == *"$3"* ]]; then
    echo "  ok   $1"
  else
    fail "$1: got $(printf '%q' "$2"), want it to contain $(printf '%q' "$3")"
  fi
}

# wait_file CONTAINER PATH: waits up to 10 s for PATH to exist in CONTAINER.
wait_file() {
  for _ in $(seq 50); do
    docker exec "$1" test -e "$2" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

verify_busybox() {
  local img=$1 out
  echo "$img"
  out=$(docker run --rm --network none "$img" sh -c '
    ls -i /bin/busybox /bin/sh /bin/ls | awk "{print \$1}" | sort -u | wc -l
    sleep 30 & for i in $(seq 50); do pgrep sleep >/dev/null && break; sleep 0.1; done; pgrep sleep >/dev/null; echo "pgrep=$?"; kill $!
    ipcs -m >/dev/null; echo "ipcs=$?"
    for u in root daemon www-data nobody; do printf "%s=%s " $u $(id -u $u); done; echo
    rm /bin/ls; ls / >/dev/null 2>&1; echo "masked-ls=$?"
    sleep infinity & p=$!; sleep 0.3; kill -0 $p && echo sleep-infinity-ok; kill $p
    echo "hostname=$(hostname)"' 2>&1)
  check "/bin/sh and /bin/ls are hard links of /bin/busybox" "not one inode: $out" [ "$(head -n1 <<<"$out")" = 1 ]
  expect "pgrep finds a sleep" "$out" "pgrep=0"
  expect "ipcs -m runs" "$out" "ipcs=0"
  expect "users root/daemon/www-data/nobody" "$out" "root=0 daemon=1 www-data=33 nobody=65534"
  expect "a removed /bin/ls is not run as a built-in" "$out" "masked-ls=127"
  expect "sleep infinity" "$out" "sleep-infinity-ok"
}

# verify_webserver IMAGE PORT EXTRA_RUN_ARGS...
verify_webserver() {
  local img=$1 port=$2 c="nsverify-web-$$" out
  shift 2
  echo "$img"
  run_bg "$c" "$@" "$img"
  wait_file "$c" /var/run/nginx.pid || fail "no /var/run/nginx.pid after 10 s: $(docker logs "$c" 2>&1 | tail -n 5)"
  out=$(docker exec "$c" cat /var/run/nginx.pid 2>&1)
  expect "/var/run/nginx.pid holds PID 1" "$out" "1"
  out=$(docker exec "$c" cat /proc/1/cmdline 2>&1 | tr '\0' ' ')
  expect "/proc/1/cmdline" "$out" "master process"
  out=$(docker exec "$c" pidof nginx 2>&1)
  expect "pidof nginx" " $out " " 1 "
  out=$(docker exec "$c" wget -qO- "http://127.0.0.1:$port/" 2>&1)
  expect "GET / on :$port" "$out" "It works!"
  out=$(docker exec "$c" sh -c "wget -qO- http://127.0.0.1:$port/nope 2>&1; echo rc=\$?")
  expect "GET /nope is an error" "$out" "404"
  local t0=$SECONDS
  docker stop -t 10 "$c" >/dev/null
  out=$(docker inspect -f '{{.State.ExitCode}}' "$c")
  expect "exits 0 on SIGTERM" "$out" "0"
  check "stops at once" "took $((SECONDS - t0)) s" [ $((SECONDS - t0)) -lt 5 ]
  docker rm -f "$c" >/dev/null
}

verify_httpd() {
  local img=$1 c="nsverify-httpd-$$" out
  echo "$img"
  run_bg "$c" "$img"
  for _ in $(seq 50); do
    docker logs "$c" 2>&1 | grep httpd >/dev/null && break
    sleep 0.2
  done
  expect "log names httpd" "$(docker logs "$c" 2>&1)" "httpd"
  out=$(docker exec "$c" wget -qO- http://127.0.0.1:80/ 2>&1)
  expect "GET / on :80" "$out" "It works!"
  expect "echo httpd" "$(docker exec "$c" echo httpd)" "httpd"
  docker rm -f "$c" >/dev/null
}

verify_nonewprivs() {
  local img=$1 out
  echo "$img"
  out=$(docker run --rm --network none --user 1000 "$img" 2>&1)
  check "setuid root program as uid 1000 prints 'Effective uid: 0'" "got $(printf '%q' "$out")" [ "$out" = "Effective uid: 0" ]
  out=$(docker run --rm --network none --user 1000 --security-opt no-new-privileges "$img" 2>&1)
  check "with no-new-privileges it prints 'Effective uid: 1000'" "got $(printf '%q' "$out")" [ "$out" = "Effective uid: 1000" ]
}

verify_predefined_group() {
  local img=$1 out
  echo "$img"
  out=$(docker run --rm --network none "$img" sh -c 'id; id -G' 2>&1)
  expect "runs as default-user" "$out" "uid=1000(default-user) gid=1000(default-user)"
  expect "member of group-defined-in-image" "$out" "50000(group-defined-in-image)"
}

verify_user() {
  local img=$1 want=$2 out
  echo "$img"
  out=$(docker image inspect -f '{{.Config.User}}' "$img")
  check "USER $want" "USER is $(printf '%q' "$out")" [ "$out" = "$want" ]
}

verify() {
  need_docker
  FAILED=0
  trap verify_cleanup EXIT
  verify_busybox "$R/busybox:1.29-2"
  verify_webserver "$R/nginx:1.14-2" 80
  verify_webserver "$G/hostnet-nginx-$GOARCH:latest" 12003
  verify_httpd "$R/httpd:2.4.39-4"
  verify_nonewprivs "$R/nonewprivs:1.3"
  verify_predefined_group "$G/test-image-predefined-group:latest"
  verify_user "$G/test-image-user-uid:latest" 1002
  verify_user "$G/test-image-user-username:latest" www-data
  verify_user "$G/test-image-user-uid-group:latest" 1003:1004
  verify_user "$G/test-image-user-username-group:latest" www-data:1004
  # Every image is a distinct one (the image specs remove images by ID).
  local entry key kind names ids
  ids=$(for entry in "${IMAGES[@]}"; do
    IFS='|' read -r key kind names <<<"$entry"
    docker image inspect -f '{{.Id}}' "${names%% *}"
  done | sort | uniq -d)
  check "all ${#IMAGES[@]} images are distinct" "images share an ID: $ids" [ -z "$ids" ]
  ((FAILED == 0)) || die "verify failed"
  log "every image verified"
}

list() {
  local entry key kind names
  for entry in "${IMAGES[@]}"; do
    IFS='|' read -r key kind names <<<"$entry"
    printf '%-20s %-9s %s\n' "$key" "$kind" "$names"
  done
}

case "${1:-build}" in
  build) build ;;
  verify) verify ;;
  push)
    [[ $# -eq 2 ]] || die "usage: $0 push REGISTRY"
    push_all "$2"
    ;;
  untag)
    [[ $# -eq 2 ]] || die "usage: $0 untag REGISTRY"
    untag_all "$2"
    ;;
  list) list ;;
  *) echo "usage: $0 [build | verify | push REGISTRY | untag REGISTRY | list]" >&2; exit 2 ;;
esac
