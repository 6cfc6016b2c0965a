#!/usr/bin/env bash
# hack/cluster-images.sh [bins | build [REPO] | push REPO | list [REPO]]
#
# The images a kubeadm-built Kubernetes v1.36 cluster on netshim nodes runs
# (the multi-node suite), made here with no internet: kubeadm's own set
# (`kubeadm config images list`: control plane, kube-proxy, etcd, CoreDNS,
# pause) and flannel's. Every program in them is built from the Go module
# proxy or is the host's Debian one.
#
#   bins         build the programs that only these images hold, into
#                _output/ (no engine needed; make test's background prebuild
#                runs it), each cached by a stamp of its version and recipe:
#                  _output/etcd-3.6/etcd      etcd $ETCD_VERSION, the server kubeadm's
#                                             static pod runs (wrapper module hack/etcd)
#                  _output/flannel/flanneld   flannel $FLANNEL_VERSION (wrapper module
#                                             hack/flannel: flannel's own main, with a
#                                             stub for the one SDK module the proxy refuses)
#                  _output/coredns/coredns    CoreDNS $COREDNS_VERSION (its own module, built
#                                             in a copy under _output/src/coredns)
#   build [REPO] build every image into the host's engine under its local name
#                (kubeadm's default registry.k8s.io names, and
#                netshim.local/flannel:TAG), and, given REPO, also under the
#                name kubeadm gives it with `imageRepository: REPO`. Builds
#                the kube binaries first (hack/build-kubelet.sh cluster),
#                then bins. An image whose content label
#                (io.netshim.content-sha256: recipe, Dockerfile, every file's
#                mode and hash, the base image) matches is not built again.
#   push REPO    push every image as kubeadm names it with `imageRepository:
#                REPO` (flannel as REPO/flannel:TAG). REPO is
#                REGISTRY[/PATH], REGISTRY being where this host's engine
#                reaches the registry (e.g. 127.0.0.1:5000, which Docker
#                trusts without TLS); the nodes may name the same registry by
#                another address (the lan one) as long as PATH is the same.
#   list [REPO]  without REPO: every local name and what it is made of; with
#                REPO: the names push REPO pushes, one a line.
#
# The images (upstream builds them on distroless; here FROM scratch unless
# said otherwise, with /etc/passwd, /etc/group, /etc/nsswitch.conf, /tmp):
#   kube-apiserver, kube-controller-manager, kube-scheduler
#                /usr/local/bin/NAME (kubeadm's static pods run `NAME --flags`
#                through PATH), with its shared libraries (ldd) if dynamic.
#   kube-proxy   /usr/local/bin/kube-proxy (kubeadm's DaemonSet runs it by
#                path) and what its iptables mode execs: the host's iptables
#                1.8 (xtables-nft-multi: iptables, iptables-save,
#                iptables-restore and the ip6tables ones are the nf_tables
#                variants, as the nodes' kubelets use; *-legacy too), its
#                extension modules (dlopen'ed from the path libxtables was
#                built with, so copied whole) and conntrack (Debian's
#                conntrack package, installed on the host if missing), with
#                their libraries, /etc/protocols and /etc/services.
#   etcd         /usr/local/bin/etcd (kubeadm runs `etcd --flags`; its probes
#                are httpGet, so no shell).
#   coredns      /coredns as ENTRYPOINT (kubeadm's Deployment gives only
#                args). Runs as root: upstream's non-root user needs a file
#                capability to bind :53, kubeadm's NET_BIND_SERVICE works for root.
#   flannel      /opt/bin/flanneld as ENTRYPOINT, the iptables userland of
#                kube-proxy's image, on hack/images.sh's busybox (a shell and
#                cp for the DaemonSet's init containers); /run/flannel and
#                /etc/kube-flannel exist.
#   pause        hack/images.sh's pause, tagged as kubeadm's pause version.
# Needs root, the host's Docker engine (build, push), Go, apt-get.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
IMG_OUT="$OUT/cluster-images"
GO=${GO:-go}
KUBE_MINOR=v1.36
K8S_DIR="$OUT/k8s-$KUBE_MINOR"
KEY_LABEL=io.netshim.content-sha256
# Bump when a recipe changes in a way the hashed context does not show.
RECIPE=1
PATH_ENV=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PAUSE_BASE=registry.k8s.io/pause:3.10
BUSYBOX_BASE=netshim.local/busybox:latest
DEFAULT_REPO=registry.k8s.io

# The versions: etcd's is what hack/etcd/go.mod requires (kubeadm v1.36.3's
# DefaultEtcdVersion is 3.6.8-0); CoreDNS's is kubeadm's CoreDNSVersion.
# build checks both against `kubeadm config images list`.
ETCD_VERSION=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$ROOT/hack/etcd/go.mod")
FLANNEL_VERSION=$(awk '$1 == "require" && $2 == "github.com/flannel-io/flannel" {print $3}' "$ROOT/hack/flannel/go.mod")
COREDNS_VERSION=v1.14.2
FLANNEL_IMAGE=netshim.local/flannel:$FLANNEL_VERSION

ETCD_BIN="$OUT/etcd-3.6/etcd"
FLANNEL_BIN="$OUT/flannel/flanneld"
COREDNS_BIN="$OUT/coredns/coredns"

die() { echo "cluster-images.sh: $*" >&2; exit 1; }
# need_docker, copy_libs
# shellcheck source=hack/lib/images.sh
source "$ROOT/hack/lib/images.sh"
log() { echo "cluster-images.sh: $*"; }

# Module builds: sums from the proxy, not the checksum database (which the
# proxy does not serve for every module here); never switch toolchains.
export GOSUMDB=off
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local

[[ -n "$ETCD_VERSION" ]] || die "hack/etcd/go.mod requires no go.etcd.io/etcd/server/v3"
[[ -n "$FLANNEL_VERSION" ]] || die "hack/flannel/go.mod requires no github.com/flannel-io/flannel"

# ---- bins -----------------------------------------------------------------

# tree_hash DIR: one hash of DIR's files (names and contents).
tree_hash() {
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
}

# stamped BIN STAMP: BIN exists and BIN.stamp holds STAMP.
stamped() {
  [[ -x "$1" && "$(cat "$1.stamp" 2>/dev/null)" == "$2" ]]
}

# gobuild NAME BIN STAMP DIR TIDY GO-BUILD-ARGS...: in DIR, go mod tidy
# (TIDY=tidy: a wrapper module, whose go.mod names only what it requires
# itself) and go build into BIN, static (CGO_ENABLED=0, as upstream builds
# etcd and CoreDNS; CGO=1 for cgo), unless BIN is stamped STAMP. Output in
# _output/cluster-images/build-NAME.log, its tail shown on failure.
gobuild() {
  local name=$1 bin=$2 stamp=$3 dir=$4 tidy=$5 start=$SECONDS
  local blog="$IMG_OUT/build-$name.log"
  shift 5
  stamped "$bin" "$stamp" && return 0
  log "building $name (${stamp%% *}; log: ${blog#"$ROOT"/})"
  mkdir -p "$(dirname "$bin")" "$IMG_OUT"
  rm -f "$bin.stamp"
  if ! (cd "$dir" &&
    { [[ "$tidy" != tidy ]] || "$GO" mod tidy; } &&
    CGO_ENABLED=${CGO:-0} "$GO" build -trimpath -o "$bin.tmp" "$@") >"$blog" 2>&1; then
    tail -n 40 "$blog" >&2
    rm -f "$bin.tmp"
    die "building $name failed (log: $blog)"
  fi
  mv -f "$bin.tmp" "$bin"
  echo "$stamp" >"$bin.stamp"
  log "built $bin in $((SECONDS - start)) s"
}

# first_line CMD...: the first line CMD prints (stdout and stderr). Not
# `CMD | head -n 1`: under pipefail, a CMD that writes its next line after
# head has gone dies of SIGPIPE, and the assignment fails the script with no
# word (etcd and CoreDNS print their versions a line per write; seen in a
# make test prebuild).
first_line() {
  local out
  out=$("$@" 2>&1) || true
  echo "${out%%$'\n'*}"
}

# wrapper_src NAME: copies hack/NAME (a wrapper module) to _output/src/NAME
# (printed), where go mod tidy may rewrite go.mod and write go.sum (kept
# between builds).
wrapper_src() {
  local src="$OUT/src/$1"
  mkdir -p "$src"
  # What the checkout no longer has must go too (a stub removed, say).
  (cd "$ROOT/hack/$1" && find . -type f ! -name go.sum) | while read -r f; do
    mkdir -p "$src/$(dirname "$f")"
    cmp -s "$ROOT/hack/$1/$f" "$src/$f" || cp "$ROOT/hack/$1/$f" "$src/$f"
  done
  echo "$src"
}

# module_src MODULE VERSION NAME: MODULE@VERSION copied out of the read-only
# module cache to _output/src/NAME (once per version); prints the directory.
module_src() {
  local module=$1 version=$2 name=$3 json dir dst="$OUT/src/$3"
  if [[ -f "$dst/.version" && "$(cat "$dst/.version")" == "$version" ]]; then
    echo "$dst"
    return 0
  fi
  mkdir -p "$OUT/src"
  json=$(cd "$OUT" && "$GO" mod download -json "$module@$version" 2>&1) ||
    die "go mod download $module@$version failed: $json"
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -n "$dir" && -d "$dir" ]] || die "no module directory for $module@$version: $json"
  rm -rf "$dst" "$dst.tmp"
  cp -r "$dir" "$dst.tmp"
  chmod -R u+w "$dst.tmp"
  echo "$version" >"$dst.tmp/.version"
  mv "$dst.tmp" "$dst"
  echo "$dst"
}

build_etcd() {
  local stamp src
  stamp="$ETCD_VERSION recipe $RECIPE $(tree_hash "$ROOT/hack/etcd")"
  stamped "$ETCD_BIN" "$stamp" && return 0
  src=$(wrapper_src etcd)
  gobuild etcd "$ETCD_BIN" "$stamp" "$src" tidy \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-proxy" .
  local got
  got=$(first_line "$ETCD_BIN" --version)
  [[ "$got" == "etcd Version: ${ETCD_VERSION#v}" ]] || die "$ETCD_BIN reports '$got', not etcd ${ETCD_VERSION#v}"
}

build_flannel() {
  local stamp src
  stamp="$FLANNEL_VERSION recipe $RECIPE $(tree_hash "$ROOT/hack/flannel")"
  stamped "$FLANNEL_BIN" "$stamp" && return 0
  src=$(wrapper_src flannel)
  # The udp backend's packet proxy is C (cgo), as in upstream's amd64 build.
  CGO=1 gobuild flannel "$FLANNEL_BIN" "$stamp" "$src" tidy \
    -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" \
    github.com/flannel-io/flannel
  [[ "$("$FLANNEL_BIN" --version 2>&1)" == "$FLANNEL_VERSION" ]] ||
    die "$FLANNEL_BIN reports '$("$FLANNEL_BIN" --version 2>&1)', not $FLANNEL_VERSION"
}

build_coredns() {
  local stamp="$COREDNS_VERSION recipe $RECIPE" src
  stamped "$COREDNS_BIN" "$stamp" && return 0
  src=$(module_src github.com/coredns/coredns "$COREDNS_VERSION" coredns)
  gobuild coredns "$COREDNS_BIN" "$stamp" "$src" no-tidy \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=module-proxy" .
  local got
  got=$(first_line "$COREDNS_BIN" -version)
  [[ "$got" == "CoreDNS-${COREDNS_VERSION#v}" ]] || die "$COREDNS_BIN reports '$got', not CoreDNS-${COREDNS_VERSION#v}"
}

# bins: one build at a time (the prebuild and a suite, say): the second
# waits, then finds the stamps.
bins() {
  local lockfd
  command -v "$GO" >/dev/null || die "no Go toolchain"
  mkdir -p "$IMG_OUT"
  exec {lockfd}>"$IMG_OUT/.bins.lock"
  flock "$lockfd"
  build_etcd
  build_flannel
  build_coredns
  exec {lockfd}>&-
}

# ---- kubeadm's names ------------------------------------------------------

kube_version() {
  local v
  v=$("$ROOT/hack/build-kubelet.sh" versions | awk -v m="$KUBE_MINOR" '$1 == m {print $2}')
  [[ -n "$v" ]] || die "no hack/kubelet/$KUBE_MINOR wrapper"
  echo "$v"
}

# kubeadm_images REPO: the images kubeadm pulls with `imageRepository: REPO`.
kubeadm_images() {
  [[ -x "$K8S_DIR/kubeadm" ]] || die "no $K8S_DIR/kubeadm (run hack/build-kubelet.sh cluster $KUBE_MINOR)"
  "$K8S_DIR/kubeadm" config images list --kubernetes-version "$(kube_version)" --image-repository "$1" 2>/dev/null ||
    die "kubeadm config images list failed"
}

# component NAME: the recipe of an image, from its last path element
# (registry.k8s.io/coredns/coredns:v1.14.2 -> coredns).
component() {
  local c=${1##*/}
  echo "${c%%:*}"
}

# images_under REPO: fills IMAGE_COMPONENTS and IMAGE_NAMES with every image
# as named under REPO (kubeadm's, in its order, then flannel's). Arrays, not
# a pipe: a failing kubeadm must stop the script, not shorten the list.
IMAGE_COMPONENTS=()
IMAGE_NAMES=()
images_under() {
  local out n
  out=$(kubeadm_images "$1") || exit 1
  IMAGE_COMPONENTS=()
  IMAGE_NAMES=()
  while read -r n; do
    [[ -n "$n" ]] || continue
    IMAGE_COMPONENTS+=("$(component "$n")")
    IMAGE_NAMES+=("$n")
  done <<<"$out"
  ((${#IMAGE_NAMES[@]} > 0)) || die "kubeadm config images list listed nothing"
  IMAGE_COMPONENTS+=(flannel)
  IMAGE_NAMES+=("$1/flannel:$FLANNEL_VERSION")
}

# local_images: images_under kubeadm's default repository, flannel under its
# local name; also sets LOCAL_NAMES to the same names.
LOCAL_NAMES=()
local_images() {
  images_under "$DEFAULT_REPO"
  IMAGE_NAMES[${#IMAGE_NAMES[@]} - 1]=$FLANNEL_IMAGE
  LOCAL_NAMES=("${IMAGE_NAMES[@]}")
}

# check_pins: kubeadm's etcd and CoreDNS tags are the versions built here.
check_pins() {
  local i tag
  local_images
  for i in "${!IMAGE_NAMES[@]}"; do
    tag=${IMAGE_NAMES[i]##*:}
    case "${IMAGE_COMPONENTS[i]}" in
      etcd) [[ "$tag" == "${ETCD_VERSION#v}-"* ]] || die "kubeadm wants etcd $tag, hack/etcd/go.mod builds $ETCD_VERSION" ;;
      coredns) [[ "$tag" == "$COREDNS_VERSION" ]] || die "kubeadm wants CoreDNS $tag, this script builds $COREDNS_VERSION" ;;
    esac
  done
}

# ---- image recipes --------------------------------------------------------

# put ROOTFS SRC DEST [MODE]: installs SRC as ROOTFS/DEST with its libraries.
put() {
  local rootfs=$1 src=$2 dest=$3 mode=${4:-0755}
  [[ -f "$src" ]] || die "$src is missing"
  install -D -m "$mode" "$src" "$rootfs$dest"
  copy_libs "$rootfs" "$src"
}

# base_files ROOTFS: what a program expects of a minimal root (distroless has
# the same): users, groups, name service order, /tmp.
base_files() {
  local r=$1
  mkdir -p "$r/etc" "$r/tmp" "$r/root" "$r/home/nonroot"
  chmod 1777 "$r/tmp"
  chmod 0700 "$r/root"
  cat >"$r/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$r/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
  echo 'hosts: files dns' >"$r/etc/nsswitch.conf"
}

# ensure_conntrack: Debian's conntrack on the host (kube-proxy's image takes it).
ensure_conntrack() {
  command -v conntrack >/dev/null && return 0
  log "installing Debian's conntrack on the host (kube-proxy's image needs it)"
  local alog="$IMG_OUT/apt.log"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y conntrack >"$alog" 2>&1; then
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y conntrack; } >>"$alog" 2>&1 ||
      { tail -n 20 "$alog" >&2; die "apt-get install conntrack failed"; }
  fi
}

# iptables_files ROOTFS: the host's iptables (both multi-call binaries, every
# name pointing at them, their extension modules) and conntrack.
iptables_files() {
  local r=$1 nft legacy xt m t
  ensure_conntrack
  nft=$(command -v xtables-nft-multi) || die "no xtables-nft-multi on the host (Debian package iptables)"
  legacy=$(command -v xtables-legacy-multi) || die "no xtables-legacy-multi on the host (Debian package iptables)"
  put "$r" "$(readlink -f "$nft")" /usr/sbin/xtables-nft-multi
  put "$r" "$(readlink -f "$legacy")" /usr/sbin/xtables-legacy-multi
  for m in iptables ip6tables; do
    for t in "" -save -restore; do
      ln -sf xtables-nft-multi "$r/usr/sbin/$m$t"
      ln -sf xtables-nft-multi "$r/usr/sbin/$m-nft$t"
      ln -sf xtables-legacy-multi "$r/usr/sbin/$m-legacy$t"
    done
  done
  # The modules libxtables dlopens (libxt_comment.so, ...), from the path it
  # was built with.
  xt=$(dirname "$(find /usr/lib /lib -path '*/xtables/libxt_comment.so' 2>/dev/null | head -n 1)")
  [[ "$xt" == */xtables ]] || die "no iptables extension modules (libxt_comment.so) on the host"
  mkdir -p "$r$xt"
  cp -a "$xt/." "$r$xt/"
  copy_libs "$r" "$xt"/*.so
  put "$r" "$(readlink -f "$(command -v conntrack)")" /usr/sbin/conntrack
  mkdir -p "$r/etc" "$r/run"
  for m in protocols services; do
    [[ -f "/etc/$m" ]] && cp "/etc/$m" "$r/etc/$m"
  done
}

# Each recipe_COMPONENT CTX fills CTX/rootfs and writes CTX/Dockerfile.
control_plane() {
  local ctx=$1 name=$2
  base_files "$ctx/rootfs"
  put "$ctx/rootfs" "$K8S_DIR/$name" "/usr/local/bin/$name"
  printf 'FROM scratch\nCOPY rootfs/ /\nENV PATH=%s\n' "$PATH_ENV" >"$ctx/Dockerfile"
}
recipe_kube_apiserver() { control_plane "$1" kube-apiserver; }
recipe_kube_controller_manager() { control_plane "$1" kube-controller-manager; }
recipe_kube_scheduler() { control_plane "$1" kube-scheduler; }

recipe_kube_proxy() {
  control_plane "$1" kube-proxy
  iptables_files "$1/rootfs"
}

recipe_etcd() {
  local ctx=$1
  base_files "$ctx/rootfs"
  put "$ctx/rootfs" "$ETCD_BIN" /usr/local/bin/etcd
  mkdir -p "$ctx/rootfs/var/lib/etcd"
  printf 'FROM scratch\nCOPY rootfs/ /\nENV PATH=%s\nEXPOSE 2379 2380\n' "$PATH_ENV" >"$ctx/Dockerfile"
}

recipe_coredns() {
  local ctx=$1
  base_files "$ctx/rootfs"
  put "$ctx/rootfs" "$COREDNS_BIN" /coredns
  printf 'FROM scratch\nCOPY rootfs/ /\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n' >"$ctx/Dockerfile"
}

recipe_flannel() {
  local ctx=$1
  put "$ctx/rootfs" "$FLANNEL_BIN" /opt/bin/flanneld
  iptables_files "$ctx/rootfs"
  mkdir -p "$ctx/rootfs/run/flannel" "$ctx/rootfs/etc/kube-flannel"
  echo 'hosts: files dns' >"$ctx/rootfs/etc/nsswitch.conf"
  printf 'FROM %s\nCOPY rootfs/ /\nENV PATH=%s\nENTRYPOINT ["/opt/bin/flanneld"]\n' "$BUSYBOX_BASE" "$PATH_ENV" >"$ctx/Dockerfile"
}

# context_key CTX: the hash of a build context (every path with its mode
# and link target, every file's content), its Dockerfile's base image and
# RECIPE.
context_key() {
  local ctx=$1 from
  from=$(awk 'toupper($1) == "FROM" {print $2; exit}' "$ctx/Dockerfile")
  {
    echo "recipe $RECIPE"
    [[ "$from" == scratch ]] || docker image inspect -f '{{.Id}}' "$from"
    (cd "$ctx" && find . -printf '%p %m %l\n' | LC_ALL=C sort)
    (cd "$ctx" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
  } | sha256sum | cut -d' ' -f1
}

current_key() {
  docker image inspect -f "{{index .Config.Labels \"$KEY_LABEL\"}}" "$1" 2>/dev/null || true
}

# build_image COMPONENT NAME: builds NAME from recipe_COMPONENT unless an
# image of that name has the same content key.
build_image() {
  local c=$1 name=$2 ctx="$IMG_OUT/ctx/$1" key blog="$IMG_OUT/build-image-$1.log"
  rm -rf "$ctx"
  mkdir -p "$ctx/rootfs"
  "recipe_${c//-/_}" "$ctx"
  key=$(context_key "$ctx")
  if [[ "$(current_key "$name")" == "$key" ]]; then
    rm -rf "$ctx"
    return 0
  fi
  local previous
  previous=$(docker image inspect -f '{{.Id}}' "$name" 2>/dev/null || true)
  DOCKER_BUILDKIT=0 docker build -q --network none --label "$KEY_LABEL=$key" -t "$name" "$ctx" >"$blog" 2>&1 ||
    { tail -n 20 "$blog" >&2; die "docker build of $name failed"; }
  rm -rf "$ctx"
  # The image the name left, unless another name or a container holds it.
  [[ -z "$previous" ]] || docker image rm "$previous" >/dev/null 2>&1 || true
  log "built $name"
}

build() {
  local repo=${1:-} i c n
  need_docker
  "$ROOT/hack/build-kubelet.sh" cluster "$KUBE_MINOR"
  bins
  "$ROOT/hack/images.sh" >/dev/null
  check_pins
  local_images
  for i in "${!IMAGE_NAMES[@]}"; do
    c=${IMAGE_COMPONENTS[i]}
    n=${IMAGE_NAMES[i]}
    case "$c" in
      pause)
        docker image inspect "$PAUSE_BASE" >/dev/null 2>&1 || die "$PAUSE_BASE (hack/images.sh) is missing"
        docker tag "$PAUSE_BASE" "$n"
        ;;
      kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy | etcd | coredns | flannel)
        build_image "$c" "$n"
        ;;
      *) die "kubeadm lists an image this script has no recipe for: $n" ;;
    esac
  done
  if [[ -n "$repo" ]]; then
    images_under "$repo"
    for i in "${!IMAGE_NAMES[@]}"; do
      docker tag "${LOCAL_NAMES[i]}" "${IMAGE_NAMES[i]}"
    done
  fi
  log "every image is built (${#LOCAL_NAMES[@]} images)"
}

push_all() {
  local repo=$1 i src target plog="$IMG_OUT/push.log" had
  need_docker
  mkdir -p "$IMG_OUT"
  : >"$plog"
  local_images
  images_under "$repo"
  for i in "${!IMAGE_NAMES[@]}"; do
    src=${LOCAL_NAMES[i]}
    target=${IMAGE_NAMES[i]}
    docker image inspect "$src" >/dev/null 2>&1 || die "$src is missing: run $0 build first"
    had=1
    docker image inspect "$target" >/dev/null 2>&1 || had=0
    docker tag "$src" "$target"
    docker push "$target" >>"$plog" 2>&1 || { tail -n 20 "$plog" >&2; die "docker push $target failed"; }
    # Leave the engine's names as they were (build REPO's stay).
    ((had == 1)) || docker image rm "$target" >/dev/null
  done
  log "pushed ${#IMAGE_NAMES[@]} images under $repo"
}

list() {
  local i c n
  if (($# == 1)); then
    images_under "$1"
    printf '%s\n' "${IMAGE_NAMES[@]}"
    return 0
  fi
  local_images
  for i in "${!IMAGE_NAMES[@]}"; do
    c=${IMAGE_COMPONENTS[i]}
    n=${IMAGE_NAMES[i]}
    case "$c" in
      pause) printf '%-50s %s\n' "$n" "tag of $PAUSE_BASE (hack/images.sh)" ;;
      etcd) printf '%-50s %s\n' "$n" "etcd $ETCD_VERSION ($ETCD_BIN)" ;;
      coredns) printf '%-50s %s\n' "$n" "CoreDNS $COREDNS_VERSION ($COREDNS_BIN)" ;;
      flannel) printf '%-50s %s\n' "$n" "flannel $FLANNEL_VERSION ($FLANNEL_BIN) on $BUSYBOX_BASE" ;;
      kube-proxy) printf '%-50s %s\n' "$n" "$K8S_DIR/kube-proxy, host iptables and conntrack" ;;
      *) printf '%-50s %s\n' "$n" "$K8S_DIR/$c" ;;
    esac
  done
}

case "${1:-build}" in
  bins) bins ;;
  build)
    (($# <= 2)) || die "usage: $0 build [REPO]"
    build "${2:-}"
    ;;
  push)
    [[ $# -eq 2 ]] || die "usage: $0 push REPO"
    push_all "$2"
    ;;
  list)
    (($# <= 2)) || die "usage: $0 list [REPO]"
    shift
    list "$@"
    ;;
  *) echo "usage: $0 [bins | build [REPO] | push REPO | list [REPO]]" >&2; exit 2 ;;
esac
