#!/usr/bin/env bash
# hack/node-e2e-images.sh [build [cluster] | bins [cluster] | push REGISTRY [cluster] | repo-list REGISTRY
#                          | list [cluster] | blocked]
#
# The images the node e2e suite's [NodeConformance] specs (k8s.io/kubernetes
# v1.36.3, test/utils/image/manifest.go and test/e2e_node/image_list.go) run,
# made here with no internet, for `make node-conformance`
# (test/node-conformance). They are pushed to the loopback registry and the
# suite is pointed at it with KUBE_TEST_REPO_LIST (repo-list writes that file).
#
#   build              build every image into the host's engine. The busybox,
#                      nginx and nonewprivs bases are hack/critest-images.sh's
#                      (Debian's dynamic busybox, small static C servers); the
#                      pause image is hack/images.sh's. agnhost is built from
#                      the k8s.io/kubernetes module (test/images/agnhost) with
#                      the v1.36 wrapper module of hack/build-kubelet.sh, into
#                      _output/node-e2e-images/bin. Derived images are made
#                      with `docker build` (legacy builder, local bases only).
#   bins               only the programs build compiles (agnhost, ginkgo, nmeter,
#                      sh) into _output/node-e2e-images/bin; no engine needed.
#   push REGISTRY      push every image as REGISTRY/<path>:<tag> (REGISTRY like
#                      localhost:5000), the path and tag being the ones the
#                      repo list maps the suite's names to.
#   ... cluster        build, bins, push and list with the images that only
#                      Kubernetes' cluster conformance suite runs as well
#                      (CLUSTER_ONLY below; make conformance-cluster). The
#                      quick subset of make test needs none of them, so a cold
#                      CI does not compile sample-apiserver.
#   repo-list REGISTRY print the KUBE_TEST_REPO_LIST YAML for REGISTRY.
#   list               print the images: upstream name, what it is made of.
#   blocked            print the images that cannot be made here (BLOCKED below).
#
# What each image must do, and where it comes from upstream:
#   busybox:1.37.0-1   a busybox shell: critest's busybox (hard-linked applets),
#                      plus nmeter (hack/node-e2e-images/nmeter.c: Debian builds
#                      busybox without that applet; the suite times its
#                      containers with `nmeter -d0 '%3t'`), and as /bin/sh
#                      hack/node-e2e-images/sh.c: busybox ash, or bash when an
#                      env var is named like data-1 (Debian's ash 1.35 drops
#                      those; the env-from-Secret specs print them with
#                      `sh -c env`, the read-only rootfs spec wants ash's text).
#   agnhost:2.63.0, agnhost:2.55  /agnhost (ENTRYPOINT, CMD pause), /agnhost-2
#                      link, /uploads, user 1000 user-defined-in-image in group
#                      50000 group-defined-in-image, curl (lifecycle hooks run
#                      `curl` in it), bash (probe scripts), dig and getent (the
#                      cluster conformance suite's DNS specs), OpenBSD nc (Debian's netcat-openbsd: the
#                      networking specs send UDP with `nc -u`) and a busybox
#                      userland (upstream: alpine).
#                      Both tags are one build: the suite uses 2.55 only as a
#                      second, different tag.
#   nginx:1.15-4, nginx:1.27-0  a web server on :80: critest's nginx.
#   nonewprivs:1.4     setuid-root /usr/local/bin/nnp printing its effective uid.
#   nonroot:1.5        busybox with USER 1234.
#   ipc-utils:1.4      busybox with ipcs and ipcmk (util-linux, from the host).
#   glibc-dns-testing:2.0.0  busybox with Debian's hostname (glibc resolver),
#                      dig and getent (the DNS specs' second querier).
#   kitten:1.8, nautilus:1.8  agnhost with CMD test-webserver, a page of its own
#                      and /data.json naming its picture ({"image": "kitten.jpg"}).
#   pause:3.10.2       hack/images.sh's pause.
# And, with `cluster`, for the cluster conformance suite's aggregator spec
# (test/e2e/apimachinery/aggregator.go: a Deployment of the two, etcd on
# 127.0.0.1:2379 in the pod, the API server on :443):
#   sample-apiserver:1.29.2  /kube-sample-apiserver (ENTRYPOINT), built from
#                      k8s.io/sample-apiserver at the staging version of the
#                      v1.36 wrapper module (upstream: the same program on
#                      fedora), on the suite's busybox.
#   registry.k8s.io/etcd:3.6.8-0  hack/cluster-images.sh's etcd image (kubeadm
#                      pins the same tag; build checks that it is there).
# Needs root, the host's Docker engine, Go, gcc.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output/node-e2e-images"
GO=${GO:-go}
KUBE_MINOR=v1.36
R=registry.k8s.io/e2e-test-images
CRITEST_BUSYBOX=$R/busybox:1.29-2
CRITEST_NGINX=$R/nginx:1.14-2
CRITEST_NONEWPRIVS=$R/nonewprivs:1.3
PAUSE_BASE=registry.k8s.io/pause:3.10
PATH_ENV=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The images: upstream name|recipe. Recipes: tag:<local image> (a second name
# of an image built elsewhere) or build:<key> (recipe_<key> below).
IMAGES=(
  "$R/busybox:1.37.0-1|build:busybox"
  "$R/agnhost:2.63.0|build:agnhost"
  "$R/agnhost:2.55|tag:$R/agnhost:2.63.0"
  "$R/nginx:1.15-4|tag:$CRITEST_NGINX"
  "$R/nginx:1.27-0|tag:$CRITEST_NGINX"
  "$R/nonewprivs:1.4|tag:$CRITEST_NONEWPRIVS"
  "$R/nonroot:1.5|build:nonroot"
  "$R/ipc-utils:1.4|build:ipc_utils"
  "$R/glibc-dns-testing:2.0.0|build:glibc_dns_testing"
  "$R/kitten:1.8|build:kitten"
  "$R/nautilus:1.8|build:nautilus"
  "registry.k8s.io/pause:3.10.2|tag:$PAUSE_BASE"
)

# The images of `... cluster` (see above). have:<script> names an image another
# script builds under that very name.
CLUSTER_ONLY=(
  "$R/sample-apiserver:1.29.2|build:sample_apiserver"
  "registry.k8s.io/etcd:3.6.8-0|have:hack/cluster-images.sh build"
)

# Images the suite names that cannot be made here, and why. Which specs they
# block is in docs/conformance.md (test/node-conformance's skip list names
# every spec that needs one of them).
BLOCKED=(
  "registry.k8s.io/e2e-test-images/busybox@sha256:a9155b13325b2abef48e71de77bb8ac015412a566829f621d06bfae5c699b1b9|pulled by digest: only the upstream image has that content"
  "gcr.io/k8s-authenticated-test/agnhost:2.6|a private registry with credentials (AgnhostPrivate); the repo list cannot map it"
  "invalid.registry.k8s.io/invalid/alpine:3.1|meant not to exist (the specs expect the pull to fail; they run)"
  "$R/perl:5.26|a Perl distribution; not rebuilt here"
  "$R/node-perf/npb-ep:1.6.0 $R/node-perf/npb-is:1.7.0 $R/node-perf/pytorch-wide-deep:1.0.0|benchmark workloads (NAS Parallel Benchmarks, PyTorch)"
  "registry.k8s.io/etcd:3.6.8-0|an etcd server image (the node suite's; \`build cluster\` takes hack/cluster-images.sh's for the cluster suite)"
  "gcr.io/cadvisor/cadvisor:v0.47.2|cAdvisor (resource usage specs)"
  "registry.k8s.io/node-problem-detector/node-problem-detector:v1.34.0|node-problem-detector"
  "$R/volume/nfs:1.6.0|an NFS server"
)

die() { echo "node-e2e-images.sh: $*" >&2; exit 1; }
# need_docker, copy_libs
# shellcheck source=hack/lib/images.sh
source "$ROOT/hack/lib/images.sh"
log() { echo "node-e2e-images.sh: $*"; }

# host_bin CTX NAME: copies the host's NAME into CTX/usr/bin with its libraries.
host_bin() {
  local ctx=$1 p
  p=$(command -v "$2") || die "$2 not found on the host"
  p=$(readlink -f "$p")
  mkdir -p "$ctx/usr/bin"
  cp "$p" "$ctx/usr/bin/$2"
  copy_libs "$ctx" "$p"
}

# fetch_deb PKG: extracts Debian's PKG into $OUT/deb/PKG (the .deb is
# downloaded once, with apt-get download, and kept in $OUT/deb).
fetch_deb() {
  local pkg=$1 dir="$OUT/deb"
  mkdir -p "$dir"
  if ! compgen -G "$dir/${pkg}_*.deb" >/dev/null; then
    if ! (cd "$dir" && apt-get download "$pkg") >"$dir/apt.log" 2>&1; then
      { apt-get update && (cd "$dir" && apt-get download "$pkg"); } >>"$dir/apt.log" 2>&1 ||
        { tail -n 20 "$dir/apt.log" >&2; die "apt-get download $pkg failed"; }
    fi
  fi
  local debs=("$dir/${pkg}"_*.deb)
  rm -rf "${dir:?}/$pkg"
  dpkg-deb -x "${debs[0]}" "$dir/$pkg" || die "dpkg-deb -x ${debs[0]} failed"
}

# build_go PKG NAME: compiles PKG into $OUT/bin/NAME with the
# k8s.io/kubernetes release the v1.36 kubelet wrapper module requires (in a
# copy of it, so the checkout's go.mod is never touched): agnhost
# (test/images/agnhost) and the ginkgo CLI of the version kubernetes pins
# (make node-conformance runs the suite in parallel processes with it).
# Cached: rebuilt when the wrapper changes.
build_go() {
  local pkg=$1 name=$2 src="$OUT/src" bin="$OUT/bin/$2"
  local wrapper="$ROOT/hack/kubelet/$KUBE_MINOR/go.mod"
  [[ -f "$wrapper" ]] || die "no $wrapper (hack/build-kubelet.sh's wrapper module)"
  mkdir -p "$src" "$OUT/bin"
  cmp -s "$wrapper" "$src/go.mod" || cp "$wrapper" "$src/go.mod"
  if [[ -x "$bin" && "$bin" -nt "$wrapper" ]]; then
    return
  fi
  log "building $name ($pkg, with $(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$src/go.mod")) into $bin"
  (cd "$src" && GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 \
    "$GO" build -trimpath -o "$bin.tmp" "$pkg") >"$OUT/$name-build.log" 2>&1 ||
    { tail -n 20 "$OUT/$name-build.log" >&2; die "building $name failed"; }
  mv -f "$bin.tmp" "$bin"
}

# compile NAME: builds hack/node-e2e-images/NAME.c statically into $OUT/bin/NAME.
compile() {
  local src="$ROOT/hack/node-e2e-images/$1.c" bin="$OUT/bin/$1"
  command -v gcc >/dev/null || die "gcc not found (run hack/install-deps.sh)"
  mkdir -p "$OUT/bin"
  if [[ ! -x "$bin" || "$src" -nt "$bin" ]]; then
    gcc -static -Os -s -Wall -Wextra -Werror -o "$bin.tmp" "$src" || die "building $src failed"
    mv -f "$bin.tmp" "$bin"
  fi
}

# Each recipe_KEY CTX writes a build context and its Dockerfile into CTX.
recipe_busybox() {
  local ctx=$1
  cp "$OUT/bin/nmeter" "$ctx/nmeter"
  cp "$OUT/bin/sh" "$ctx/sh"
  host_bin "$ctx" bash
  mkdir -p "$ctx/lib"
  # /bin/sh runs busybox ash, or bash for an environment that Debian's
  # ash 1.35 would cut down (see hack/node-e2e-images/sh.c).
  printf 'FROM %s\nCOPY nmeter /bin/nmeter\nCOPY sh /bin/sh\nCOPY usr/ /usr/\nCOPY lib/ /lib/\n' "$CRITEST_BUSYBOX" >"$ctx/Dockerfile"
}

recipe_agnhost() {
  local ctx=$1
  cp "$OUT/bin/agnhost" "$ctx/agnhost"
  # The porter/netexec TLS pair upstream's image carries at / (the https
  # lifecycle hook specs serve with it).
  local porter
  porter=$(cd "$OUT/src" && GOFLAGS=-mod=mod GOSUMDB=off GOTOOLCHAIN=local "$GO" list -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost/porter) ||
    die "cannot find the agnhost porter sources"
  cp "$porter/localhost.crt" "$porter/localhost.key" "$ctx/"
  host_bin "$ctx" curl
  # Probe specs run their scripts with /bin/bash, as upstream installs it.
  host_bin "$ctx" bash
  # The DNS specs query with dig (upstream: alpine's bind-tools) and
  # getent (glibc's resolver, as a workload's).
  host_bin "$ctx" dig
  host_bin "$ctx" getent
  # The networking specs run `nc -w 1 -u`: busybox's nc has no -u.
  fetch_deb netcat-openbsd
  mkdir -p "$ctx/usr/bin"
  cp "$OUT/deb/netcat-openbsd/bin/nc.openbsd" "$ctx/usr/bin/nc"
  copy_libs "$ctx" "$OUT/deb/netcat-openbsd/bin/nc.openbsd"
  mkdir -p "$ctx/etc/ssl/certs"
  # On the suite's busybox (nmeter, bash as sh): the container lifecycle
  # specs switch a container between the two images and time it in both.
  cat >"$ctx/Dockerfile" <<EOF
FROM $R/busybox:1.37.0-1
COPY usr/ /usr/
COPY lib/ /lib/
COPY agnhost /agnhost
COPY localhost.crt localhost.key /
RUN ln -sf /usr/bin/bash /bin/bash && ln -s agnhost /agnhost-2 && mkdir -p /uploads && \\
    echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>/etc/passwd && \\
    echo 'user-defined-in-image:x:1000:' >>/etc/group && \\
    echo 'group-defined-in-image:x:50000:user-defined-in-image' >>/etc/group && \\
    mkdir -p /home/user-defined-in-image && chown 1000:1000 /home/user-defined-in-image
ENV PATH=$PATH_ENV
EXPOSE 80 8080 8081 9376 5000
ENTRYPOINT ["/agnhost"]
CMD ["pause"]
EOF
  # curl's libraries may live under /usr/lib and /lib alike; keep both.
  mkdir -p "$ctx/lib" "$ctx/usr"
}

# glibc-dns-testing: the hostname specs run `hostname; hostname -f`, which
# must resolve through glibc: Debian's hostname (glibc) on the busybox base.
recipe_glibc_dns_testing() {
  local ctx=$1
  host_bin "$ctx" hostname
  # The DNS specs' "jessie" querier runs dig in this image.
  host_bin "$ctx" dig
  host_bin "$ctx" getent
  mkdir -p "$ctx/lib"
  printf 'FROM %s\nCOPY usr/ /usr/\nCOPY lib/ /lib/\n' "$CRITEST_BUSYBOX" >"$ctx/Dockerfile"
}

recipe_nonroot() {
  printf 'FROM %s\nUSER 1234\n' "$CRITEST_BUSYBOX" >"$1/Dockerfile"
}

recipe_ipc_utils() {
  local ctx=$1
  host_bin "$ctx" ipcmk
  host_bin "$ctx" ipcs
  mkdir -p "$ctx/lib"
  printf 'FROM %s\nCOPY usr/ /usr/\nCOPY lib/ /lib/\n' "$CRITEST_BUSYBOX" >"$ctx/Dockerfile"
}

# web_image CTX NAME: agnhost serving a page of its own (test-webserver serves
# /) and, as upstream's image does, /data.json naming the image's picture:
# the conformance suite reads it through the API server's pod proxy (kubectl
# Update Demo) and from an image volume of the image (ImageVolume).
# The ImageVolume spec also reads /etc/os-release from the mounted image and
# looks for upstream's base there ("Alpine Linux"); this one says what the
# image is and what it stands in for.
web_image() {
  echo "$2" >"$1/$2.html"
  printf '{\n  "image": "%s.jpg"\n}\n' "$2" >"$1/data.json"
  printf 'NAME="netshim e2e test image"\nID=netshim-e2e\nPRETTY_NAME="netshim e2e test image (busybox), in place of upstream'"'"'s Alpine Linux base"\n' >"$1/os-release"
  printf 'FROM %s\nCOPY %s.html /%s.html\nCOPY data.json /data.json\nCOPY os-release /etc/os-release\nCMD ["test-webserver"]\n' "$R/agnhost:2.63.0" "$2" "$2" >"$1/Dockerfile"
}
recipe_sample_apiserver() {
  cp "$OUT/bin/sample-apiserver" "$1/kube-sample-apiserver"
  printf 'FROM %s\nCOPY kube-sample-apiserver /kube-sample-apiserver\nENTRYPOINT ["/kube-sample-apiserver"]\n' "$R/busybox:1.37.0-1" >"$1/Dockerfile"
}

recipe_kitten() { web_image "$1" kitten; }
recipe_nautilus() { web_image "$1" nautilus; }

# bins [cluster]: the programs the images and the suite's runner are made of,
# into $OUT/bin; no engine needed (make test's background prebuild runs it).
# One build at a time: the second waits, then finds them built.
bins() {
  local lockfd
  command -v "$GO" >/dev/null || die "no Go toolchain"
  mkdir -p "$OUT"
  exec {lockfd}>"$OUT/.bins.lock"
  flock "$lockfd"
  build_go k8s.io/kubernetes/test/images/agnhost agnhost
  build_go github.com/onsi/ginkgo/v2/ginkgo ginkgo
  compile nmeter
  compile sh
  if [[ ${1:-} == cluster ]]; then
    build_go k8s.io/sample-apiserver sample-apiserver
  fi
  exec {lockfd}>&-
}

# select_set [cluster]: SET, the images the command works on.
select_set() {
  SET=("${IMAGES[@]}")
  case "${1:-}" in
    "") ;;
    cluster) SET+=("${CLUSTER_ONLY[@]}") ;;
    *) die "unknown image set '$1' (the one there is: cluster)" ;;
  esac
}

build() {
  need_docker
  select_set "${1:-}"
  "$ROOT/hack/images.sh" >/dev/null
  "$ROOT/hack/critest-images.sh" build
  bins "${1:-}"
  local entry name recipe ctx
  for entry in "${SET[@]}"; do
    IFS='|' read -r name recipe <<<"$entry"
    case "$recipe" in
      tag:*)
        docker image inspect "${recipe#tag:}" >/dev/null 2>&1 || die "${recipe#tag:} (for $name) is missing"
        docker tag "${recipe#tag:}" "$name"
        ;;
      have:*)
        docker image inspect "$name" >/dev/null 2>&1 || die "$name is missing: run ${recipe#have:} first"
        ;;
      build:*)
        ctx="$OUT/ctx/${recipe#build:}"
        rm -rf "$ctx"
        mkdir -p "$ctx"
        "recipe_${recipe#build:}" "$ctx"
        DOCKER_BUILDKIT=0 docker build -q --network none -t "$name" "$ctx" >"$OUT/build-${recipe#build:}.log" 2>&1 ||
          { tail -n 20 "$OUT/build-${recipe#build:}.log" >&2; die "docker build of $name failed"; }
        rm -rf "$ctx"
        ;;
      *) die "bad recipe $recipe" ;;
    esac
    log "built $name"
  done
}

# mapped NAME REGISTRY: the name the repo list maps NAME to.
mapped() {
  local name=$1 reg=$2
  case "$name" in
    "$R"/*) echo "$reg/e2e-test-images/${name#"$R"/}" ;;
    registry.k8s.io/*) echo "$reg/${name#registry.k8s.io/}" ;;
    *) die "no mapping for $name" ;;
  esac
}

push_all() {
  local reg=$1 entry name recipe target plog="$OUT/push.log"
  need_docker
  select_set "${2:-}"
  mkdir -p "$OUT"
  : >"$plog"
  for entry in "${SET[@]}"; do
    IFS='|' read -r name recipe <<<"$entry"
    docker image inspect "$name" >/dev/null 2>&1 || die "$name is missing: run $0 build first"
    target=$(mapped "$name" "$reg")
    docker tag "$name" "$target"
    docker push "$target" >>"$plog" 2>&1 || { tail -n 20 "$plog" >&2; die "docker push $target failed"; }
    docker image rm "$target" >/dev/null
  done
  log "pushed ${#SET[@]} images to $reg"
}

# repo_list REGISTRY: every registry of manifest.go's RegistryList mapped into
# REGISTRY, but the two the suite means to be unreachable.
repo_list() {
  local reg=$1
  cat <<EOF
promoterE2eRegistry: $reg/e2e-test-images
buildImageRegistry: $reg/build-image
gcEtcdRegistry: $reg
gcRegistry: $reg
sigStorageRegistry: $reg/sig-storage
dockerLibraryRegistry: $reg/library
cloudProviderGcpRegistry: $reg/cloud-provider-gcp
invalidRegistry: invalid.registry.k8s.io/invalid
privateRegistry: gcr.io/k8s-authenticated-test
EOF
}

case "${1:-build}" in
  build)
    (($# <= 2)) || die "usage: $0 build [cluster]"
    build "${2:-}"
    ;;
  bins)
    (($# <= 2)) || die "usage: $0 bins [cluster]"
    select_set "${2:-}"
    bins "${2:-}"
    ;;
  push)
    [[ $# -eq 2 || $# -eq 3 ]] || die "usage: $0 push REGISTRY [cluster]"
    push_all "$2" "${3:-}"
    ;;
  repo-list)
    [[ $# -eq 2 ]] || die "usage: $0 repo-list REGISTRY"
    repo_list "$2"
    ;;
  list)
    select_set "${2:-}"
    for entry in "${SET[@]}"; do
      IFS='|' read -r name recipe <<<"$entry"
      printf '%-50s %s\n' "$name" "$recipe"
    done
    ;;
  blocked)
    for entry in "${BLOCKED[@]}"; do
      IFS='|' read -r name why <<<"$entry"
      printf '%s\t%s\n' "$name" "$why"
    done
    ;;
  *) echo "usage: $0 [build [cluster] | bins [cluster] | push REGISTRY [cluster] | repo-list REGISTRY | list [cluster] | blocked]" >&2; exit 2 ;;
esac
