#!/usr/bin/env bash
# hack/build-kubelet.sh [build [MINOR...]] | cluster [MINOR] | e2e-node [MINOR] |
#   e2e [MINOR] | update-gomod MINOR [VERSION] | versions
#
# The kubelets the kubelet e2e runs: one wrapper module per Kubernetes minor,
# hack/kubelet/<MINOR>/ (MINOR like v1.36), each requiring one k8s.io/kubernetes
# release.
#
# build [MINOR...] (default: every minor under hack/kubelet): builds the kubelet
#   of the release hack/kubelet/<MINOR>/go.mod requires into _output/kubelet-<MINOR>,
#   from the Go module proxy.
#   `go install k8s.io/kubernetes/cmd/kubelet@vX` does not work: kubernetes'
#   go.mod replaces its staging modules (k8s.io/api, k8s.io/client-go, ...) with
#   local paths, and replaces only apply in the main module. Each wrapper is a
#   module that requires k8s.io/kubernetes and replaces every one of those
#   staging modules with the matching published v0.X.Y. The build runs in a copy
#   (_output/src/kubelet-<MINOR>), so `go mod tidy` never touches the checkout.
#   A cached _output/kubelet-<MINOR> that reports the wanted version is not rebuilt.
#   Cold: about 5.5 min per kubelet on 2 cores (downloads included); cached: a
#   version check.
#
# update-gomod MINOR [VERSION]: (re)writes hack/kubelet/<MINOR>/go.mod for VERSION
#   (default: the one it requires now) from kubernetes' own go.mod: one replace
#   per `k8s.io/<m> => ./staging/...` line, so no list is kept by hand. `build`
#   checks that each wrapper go.mod is what this would write and stops if not.
#
# cluster [MINOR] (default v1.36): builds the control plane `make e2e-cluster`
#   runs, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl,
#   and kubeadm and kube-proxy for the kubeadm-built cluster of the multi-node
#   suite, of the release hack/kubelet/<MINOR>/go.mod requires, into _output/k8s-<MINOR>/,
#   with one `go build -o DIR/ PKG...` so that the packages they share compile
#   once. Same wrapper module, same copy and ldflags as the kubelet; binaries
#   that report the wanted version are not rebuilt. The kubelet stays
#   _output/kubelet-<MINOR> (`build`). Cold (after the kubelet): about 2 min; all six with a cold
#   Go cache and no kubelet built: 9.5 min on 2 cores at nice 19.
#   Also unpacks Debian's etcd-server into _output/etcd/etcd (fetch_etcd).
#
# e2e-node [MINOR] (default v1.36): compiles kubernetes' node e2e suite
#   (`go test -c k8s.io/kubernetes/test/e2e_node`) into
#   _output/k8s-<MINOR>/e2e_node.test; it has no --version, so the version it
#   was built for is kept next to it (e2e_node.test.version).
#
# e2e [MINOR] (default v1.36): the same for kubernetes' e2e suite, the one
#   with the [Conformance] specs (`go test -c k8s.io/kubernetes/test/e2e`),
#   into _output/k8s-<MINOR>/e2e.test (e2e.test.version). The module zip has
#   no staging/, so `go test -c ./test/e2e` inside it cannot work: the wrapper
#   module's replaces are what make it build.
#
# versions: prints "MINOR VERSION" per wrapper.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
WRAPPERS="$ROOT/hack/kubelet"
GO=${GO:-go}
KUBE_MODULE=k8s.io/kubernetes
WRAPPER_MODULE_BASE=github.com/netshim/netshim/hack/kubelet

# Builds and downloads for this module only: sums come from the proxy, not the
# checksum database (which the proxy does not serve for every module here).
export GOSUMDB=off
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
# The wrapper's go directive is kubernetes' own: never switch toolchains.
export GOTOOLCHAIN=local

die() { echo "build-kubelet.sh: $*" >&2; exit 1; }

# minors: the wrapper directories, oldest first.
minors() {
  local d
  for d in "$WRAPPERS"/v1.*/; do
    [[ -f "$d/go.mod" ]] && basename "$d"
  done | sort -V
}

# check_minor MINOR: MINOR names a wrapper directory.
check_minor() {
  [[ "$1" =~ ^v1\.[0-9]+$ ]] || die "not a Kubernetes minor (like v1.36): $1"
}

# wanted_version MINOR: the k8s.io/kubernetes version hack/kubelet/MINOR/go.mod requires.
wanted_version() {
  local v
  [[ -f "$WRAPPERS/$1/go.mod" ]] || die "no wrapper module $WRAPPERS/$1/go.mod"
  v=$(sed -n "s#^[[:space:]]*\(require[[:space:]]\{1,\}\)\{0,1\}${KUBE_MODULE}[[:space:]]\{1,\}\(v[^[:space:]]*\).*#\2#p" \
    "$WRAPPERS/$1/go.mod" | head -n 1)
  [[ -n "$v" ]] || die "$WRAPPERS/$1/go.mod requires no $KUBE_MODULE"
  [[ "$v" == "$1".* ]] || die "$WRAPPERS/$1/go.mod requires $KUBE_MODULE $v, not a $1 release"
  echo "$v"
}

# kube_gomod VERSION: prints the path of kubernetes' go.mod for VERSION in the
# module cache (downloading it through the proxy if needed).
kube_gomod() {
  local json file
  json=$(cd "$OUT" && "$GO" mod download -json "$KUBE_MODULE@$1" 2>&1) ||
    die "go mod download $KUBE_MODULE@$1 failed: $json"
  file=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -n "$file" && -f "$file" ]] || die "no go.mod for $KUBE_MODULE@$1: $json"
  echo "$file"
}

# generate_gomod VERSION DEST: writes the wrapper go.mod for VERSION to DEST.
generate_gomod() {
  local version=$1 dest=$2 kubemod staging goline minor
  minor=${version%.*}
  [[ "$version" =~ ^v1\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
    die "not a Kubernetes release version: $version"
  # k8s.io/kubernetes v1.X.Y publishes its staging modules as v0.X.Y.
  staging="v0.${version#v1.}"
  kubemod=$(kube_gomod "$version")
  goline=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kubemod")
  [[ -n "$goline" ]] || die "no go directive in $kubemod"
  local modules
  modules=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$kubemod" | LC_ALL=C sort -u)
  [[ -n "$modules" ]] || die "no staging replaces in $kubemod"

  {
    echo "// The kubelet wrapper module: see hack/build-kubelet.sh. Generated by"
    echo "// \`hack/build-kubelet.sh update-gomod $minor $version\` from $KUBE_MODULE@$version's go.mod"
    echo "// (one replace per staging module); do not edit by hand."
    echo
    echo "module $WRAPPER_MODULE_BASE/$minor"
    echo
    echo "go $goline"
    # kubernetes' godebug settings hold for its binaries only when the main module has them.
    sed -n 's/^\(godebug[[:space:]].*\)$/\n\1/p' "$kubemod"
    echo
    echo "require $KUBE_MODULE $version"
    echo
    echo "replace ("
    local m
    while read -r m; do
      printf '\t%s => %s %s\n' "$m" "$m" "$staging"
    done <<<"$modules"
    echo ")"
  } >"$dest"
}

update_gomod() {
  local minor=${1:?usage: update-gomod MINOR [VERSION]} version tmp
  check_minor "$minor"
  version=${2:-$(wanted_version "$minor")}
  [[ "$version" == "$minor".* ]] || die "$version is not a $minor release"
  mkdir -p "$WRAPPERS/$minor"
  tmp=$(mktemp "$WRAPPERS/$minor/.go.mod.XXXXXX")
  generate_gomod "$version" "$tmp"
  mv -f "$tmp" "$WRAPPERS/$minor/go.mod"
  echo "build-kubelet.sh: wrote $WRAPPERS/$minor/go.mod for $KUBE_MODULE $version ($(grep -c ' => ' "$WRAPPERS/$minor/go.mod") replaces)"
}

# has_version BIN VERSION: BIN exists and reports VERSION (kubectl through
# `version --client`, kubeadm, which has no --version, through `version -o
# short`, the other commands through --version).
has_version() {
  local want="Kubernetes $2" got
  [[ -x "$1" ]] || return 1
  case "$(basename "$1")" in
    kubectl)
      want="Client Version: $2"
      # Not `| head -n 1`: under pipefail kubectl's second line could meet
      # a closed pipe (SIGPIPE) and fail the assignment.
      got=$("$1" version --client 2>/dev/null) || true
      got=${got%%$'\n'*}
      ;;
    kubeadm)
      want=$2
      got=$("$1" version -o short 2>/dev/null)
      ;;
    *) got=$("$1" --version 2>/dev/null) ;;
  esac
  [[ "$got" == "$want" ]]
}

# DEFAULT_CLUSTER_MINOR: the release `cluster`, `e2e-node` and `e2e` build by default,
# the kubelet's that `make e2e-cluster` runs.
DEFAULT_CLUSTER_MINOR=v1.36

# prepare_src MINOR VERSION: checks the checked-in wrapper and copies it to
# _output/src/kubelet-MINOR (printed), where `go mod tidy` may rewrite it.
prepare_src() {
  local minor=$1 version=$2 src="$OUT/src/kubelet-$1" check
  mkdir -p "$OUT"
  # The checked-in wrapper must be exactly what kubernetes' go.mod implies.
  check=$(mktemp "$OUT/.kubelet-go.mod.XXXXXX")
  generate_gomod "$version" "$check"
  if ! cmp -s "$check" "$WRAPPERS/$minor/go.mod"; then
    diff -u "$WRAPPERS/$minor/go.mod" "$check" >&2 || true
    rm -f "$check"
    die "hack/kubelet/$minor/go.mod is not what $KUBE_MODULE@$version implies; run hack/build-kubelet.sh update-gomod $minor"
  fi
  rm -f "$check"
  # Build in a copy: tidy rewrites go.mod and writes go.sum. go.sum is kept between builds.
  mkdir -p "$src"
  cp "$WRAPPERS/$minor/go.mod" "$WRAPPERS/$minor/tools.go" "$src/"
  echo "$src"
}

# kube_ldflags VERSION: the version stamps kubernetes' own build sets, so
# that the binaries report VERSION (kubelet --version, kubectl version).
kube_ldflags() {
  local version=$1 major minr ldflags pkg
  major=${version#v}; major=${major%%.*}
  minr=${version#v*.}; minr=${minr%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minr"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  echo "$ldflags"
}

# lock_src MINOR: holds (until the script exits) the lock of the build copy,
# so that two builds of one minor (kubelet and cluster, say) do not tidy it
# at the same time.
lock_src() {
  mkdir -p "$OUT/src"
  exec {lockfd}>"$OUT/src/kubelet-$1.lock"
  flock "$lockfd"
}

# build_one MINOR: builds _output/kubelet-MINOR unless it is there already.
build_one() {
  local minor=$1 version bin src log
  check_minor "$minor"
  version=$(wanted_version "$minor")
  bin="$OUT/kubelet-$minor"
  log="$OUT/build-kubelet-$minor.log"
  if has_version "$bin" "$version"; then
    return 0
  fi
  lock_src "$minor"
  # Built by whoever held the lock (make test's background prebuild, say).
  has_version "$bin" "$version" && return 0
  local start=$SECONDS
  echo "build-kubelet.sh: building kubelet $version (cold: about 5.5 min on 2 cores; log: $log)"
  src=$(prepare_src "$minor" "$version")
  if ! (cd "$src" &&
    "$GO" mod tidy &&
    "$GO" build -trimpath -ldflags "$(kube_ldflags "$version")" -o "$bin.tmp" "$KUBE_MODULE/cmd/kubelet") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -f "$bin.tmp"
    die "building kubelet $version failed (log: $log)"
  fi
  mv -f "$bin.tmp" "$bin"
  has_version "$bin" "$version" || die "$bin reports '$("$bin" --version 2>&1)', not Kubernetes $version"
  echo "build-kubelet.sh: built $bin ($version) in $((SECONDS - start)) s"
}

# CLUSTER_CMDS: what `cluster` builds, each a package k8s.io/kubernetes/cmd/<name>.
CLUSTER_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubeadm kube-proxy)

# build_cluster [MINOR]: builds the CLUSTER_CMDS into _output/k8s-MINOR/
# unless they are all there, at the wanted version, already.
build_cluster() {
  local minor=${1:-$DEFAULT_CLUSTER_MINOR} version dir src log c missing=() pkgs=()
  check_minor "$minor"
  version=$(wanted_version "$minor")
  dir="$OUT/k8s-$minor"
  log="$OUT/build-k8s-$minor.log"
  # Under the lock: etcd's unpacking, too, is done once when two builds race.
  lock_src "$minor"
  fetch_etcd
  for c in "${CLUSTER_CMDS[@]}"; do
    has_version "$dir/$c" "$version" || missing+=("$c")
  done
  ((${#missing[@]} > 0)) || return 0
  for c in "${CLUSTER_CMDS[@]}"; do
    grep -q "\"$KUBE_MODULE/cmd/$c\"" "$WRAPPERS/$minor/tools.go" ||
      die "hack/kubelet/$minor/tools.go does not import $KUBE_MODULE/cmd/$c, so go mod tidy would not resolve it"
  done
  local start=$SECONDS
  echo "build-kubelet.sh: building ${CLUSTER_CMDS[*]} $version into $dir (log: $log)"
  src=$(prepare_src "$minor" "$version")
  # All of them, not only the missing ones: one build, one set of ldflags.
  for c in "${CLUSTER_CMDS[@]}"; do pkgs+=("$KUBE_MODULE/cmd/$c"); done
  local tmp
  mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  if ! (cd "$src" &&
    "$GO" mod tidy &&
    "$GO" build -trimpath -ldflags "$(kube_ldflags "$version")" -o "$tmp/" "${pkgs[@]}") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -rf "$tmp"
    die "building ${CLUSTER_CMDS[*]} $version failed (log: $log)"
  fi
  for c in "${CLUSTER_CMDS[@]}"; do
    has_version "$tmp/$c" "$version" || { rm -rf "$tmp"; die "the $c just built does not report $version"; }
    mv -f "$tmp/$c" "$dir/$c"
  done
  rmdir "$tmp"
  echo "build-kubelet.sh: built ${CLUSTER_CMDS[*]} ($version) into $dir in $((SECONDS - start)) s"
}

# fetch_etcd: _output/etcd/etcd, Debian's etcd-server (3.4.23 on bookworm,
# which kube-apiserver 1.36 runs on) unpacked, not installed: installing the
# package would start a host etcd on 127.0.0.1:2379 through its init script.
fetch_etcd() {
  local dir="$OUT/etcd" tmp deb
  if [[ -x "$dir/etcd" ]] && "$dir/etcd" --version 2>/dev/null | grep -q '^etcd Version: 3\.'; then
    return 0
  fi
  command -v apt-get >/dev/null || die "no apt-get to fetch Debian's etcd-server with; put an etcd 3.4+ at $dir/etcd"
  tmp=$(mktemp -d)
  # The package index may be missing on a fresh machine: update once then.
  if ! (cd "$tmp" && apt-get download etcd-server >"$tmp/log" 2>&1); then
    { apt-get update >"$tmp/log" 2>&1 && (cd "$tmp" && apt-get download etcd-server >>"$tmp/log" 2>&1); } ||
      { cat "$tmp/log" >&2; rm -rf "$tmp"; die "apt-get download etcd-server failed"; }
  fi
  deb=$(ls "$tmp"/etcd-server_*.deb)
  dpkg-deb -x "$deb" "$tmp/x" || { rm -rf "$tmp"; die "cannot unpack $deb"; }
  mkdir -p "$dir"
  install -m 0755 "$tmp/x/usr/bin/etcd" "$dir/etcd.tmp"
  mv -f "$dir/etcd.tmp" "$dir/etcd"
  rm -rf "$tmp"
  echo "build-kubelet.sh: unpacked $("$dir/etcd" --version | head -n 1) from $(basename "$deb") into $dir"
}

# build_suite MINOR PKG NAME LOGNAME WHAT: compiles kubernetes' test package
# PKG (`go test -c`) into _output/k8s-MINOR/NAME unless the one there was built
# for the wanted version; it has no --version, so that version is kept next to
# it (NAME.version).
build_suite() {
  local minor=$1 pkg=$2 name=$3 logname=$4 what=$5 version dir bin src log
  check_minor "$minor"
  version=$(wanted_version "$minor")
  dir="$OUT/k8s-$minor"
  bin="$dir/$name"
  log="$OUT/build-$logname-$minor.log"
  if [[ -x "$bin" && "$(cat "$bin.version" 2>/dev/null)" == "$version" ]]; then
    return 0
  fi
  lock_src "$minor"
  if [[ -x "$bin" && "$(cat "$bin.version" 2>/dev/null)" == "$version" ]]; then
    return 0
  fi
  local start=$SECONDS
  echo "build-kubelet.sh: compiling $what $version into $bin (log: $log)"
  src=$(prepare_src "$minor" "$version")
  mkdir -p "$dir"
  rm -f "$bin.version"
  # The suite's own test dependencies are not in tools.go's import graph:
  # -mod=mod (GOFLAGS above) adds their go.sum lines.
  if ! (cd "$src" &&
    "$GO" mod tidy &&
    "$GO" test -c -trimpath -ldflags "$(kube_ldflags "$version")" -o "$bin.tmp" "$KUBE_MODULE/$pkg") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -f "$bin.tmp"
    die "compiling $what $version failed (log: $log)"
  fi
  mv -f "$bin.tmp" "$bin"
  echo "$version" >"$bin.version"
  echo "build-kubelet.sh: built $bin ($version) in $((SECONDS - start)) s"
}

# build_e2e_node [MINOR]: _output/k8s-MINOR/e2e_node.test, the node e2e suite.
build_e2e_node() {
  build_suite "${1:-$DEFAULT_CLUSTER_MINOR}" test/e2e_node e2e_node.test e2e-node "kubernetes' node e2e suite"
}

# build_e2e [MINOR]: _output/k8s-MINOR/e2e.test, the e2e (conformance) suite.
build_e2e() {
  build_suite "${1:-$DEFAULT_CLUSTER_MINOR}" test/e2e e2e.test e2e "kubernetes' e2e suite"
}

build() {
  local m list
  if (($# > 0)); then list=("$@"); else mapfile -t list < <(minors); fi
  ((${#list[@]} > 0)) || die "no wrapper modules under $WRAPPERS"
  for m in "${list[@]}"; do build_one "$m"; done
}

versions() {
  local m
  for m in $(minors); do echo "$m $(wanted_version "$m")"; done
}

cmd=${1:-build}
(($# == 0)) || shift
case "$cmd" in
  build) build "$@" ;;
  update-gomod) update_gomod "$@" ;;
  cluster) build_cluster "$@" ;;
  e2e-node) build_e2e_node "$@" ;;
  e2e) build_e2e "$@" ;;
  versions) versions ;;
  *) echo "usage: $0 [build [MINOR...]] | cluster [MINOR] | e2e-node [MINOR] | e2e [MINOR] | update-gomod MINOR [VERSION] | versions" >&2; exit 2 ;;
esac
