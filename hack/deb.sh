#!/usr/bin/env bash
# Packs the files `make install DESTDIR=STAGING PREFIX=/usr` put in STAGING
# into a Debian package with dpkg-deb, then checks it with lintian (it fails
# on a lintian error). `make deb` runs it; no debhelper, no debian/ source
# tree: the control file is written here, the maintainer scripts and the
# copyright file are in deploy/debian.
#   VERSION=... hack/deb.sh STAGING DEB_FILE
# VERSION is the Makefile's (hack/version.sh), the version the staged binary
# reports. DEB_MAINTAINER overrides the Maintainer field. The package is
# reproducible: owner root:root, modes fixed, every mtime SOURCE_DATE_EPOCH
# (default: the commit's time).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
staging=${1:?usage: VERSION=... $0 STAGING DEB_FILE}
deb=${2:?usage: VERSION=... $0 STAGING DEB_FILE}
version=${VERSION:?VERSION is not set (make deb sets it)}
maintainer=${DEB_MAINTAINER:-netshim developers <dev@netshim.invalid>}
arch=$(dpkg --print-architecture)
if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

die() {
  echo "deb.sh: $*" >&2
  exit 1
}

# The staged binary must report the package's version: they are one string.
got=$("$staging/usr/bin/netshim" version) || die "$staging/usr/bin/netshim version failed"
[[ "$got" == "netshim $version "* ]] || die "the staged binary says '$got', the package is $version"

doc="$staging/usr/share/doc/netshim"
install -d -m 0755 "$doc" "$staging/DEBIAN"
install -m 0644 "$ROOT/deploy/debian/copyright" "$doc/copyright"
# Versions without a Debian revision are native packages: their changelog is
# changelog.gz (lintian: wrong-name-for-changelog-of-native-package).
commit=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
{
  printf 'netshim (%s) unstable; urgency=medium\n\n' "$version"
  printf '  * Built from commit %s of the netshim repository.\n\n' "$commit"
  printf ' -- %s  %s\n' "$maintainer" "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"

for script in postinst prerm postrm; do
  install -m 0755 "$ROOT/deploy/debian/$script" "$staging/DEBIAN/$script"
done
# Every file under /etc is a conffile: dpkg keeps an operator's edits on upgrade.
(cd "$staging" && find etc -type f -printf '/%p\n' | LC_ALL=C sort) >"$staging/DEBIAN/conffiles"
[[ -s "$staging/DEBIAN/conffiles" ]] || die "nothing staged under /etc (make install DESTDIR=$staging?)"
(cd "$staging" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) \
  >"$staging/DEBIAN/md5sums"

# The binary links glibc (cgo): dpkg-shlibdeps finds the libc6 version it
# needs from the symbols it uses. It wants a debian/ tree with a control file
# and the package's files under debian/PACKAGE: a scratch one pointing at STAGING.
shlibs_tree=$(mktemp -d)
trap 'rm -rf "$shlibs_tree"' EXIT
mkdir "$shlibs_tree/debian"
printf 'Source: netshim\n\nPackage: netshim\nArchitecture: any\n' >"$shlibs_tree/debian/control"
ln -s "$(cd "$staging" && pwd)" "$shlibs_tree/debian/netshim"
shlibs=$(cd "$shlibs_tree" && dpkg-shlibdeps -O -edebian/netshim/usr/bin/netshim -edebian/netshim/usr/bin/netshim-oci) ||
  die "dpkg-shlibdeps failed for usr/bin/netshim and usr/bin/netshim-oci"
shlibs=${shlibs#shlibs:Depends=}
[[ -n "$shlibs" ]] || die "dpkg-shlibdeps found no library usr/bin/netshim needs (a static build?)"

# Installed-Size in KiB, counted as dpkg-gencontrol does: each file rounded up
# to a KiB, one KiB for every directory and symlink.
installed_size=$(cd "$staging" && find . -path ./DEBIAN -prune -o -mindepth 1 -printf '%y %s\n' |
  awk '$1 == "f" { kib += int(($2 + 1023) / 1024); next } { kib += 1 } END { print kib }')

cat >"$staging/DEBIAN/control" <<CONTROL
Package: netshim
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $shlibs, docker.io | docker-ce
Recommends: containernetworking-plugins
Section: admin
Priority: optional
Description: Kubernetes CRI runtime that runs pods on a Docker engine
 netshim serves the Kubernetes Container Runtime Interface (CRI v1) on a
 unix socket, /run/netshim/netshim.sock, and runs kubelet's pods on the local
 Docker engine, in the spirit of cri-dockerd. Each pod gets a pause container
 that holds its network namespace; pod networking comes from CNI plugins, a
 built-in bridge network (kubenet) or loopback only.
 .
 The package installs the daemon, netshim-oci (the OCI runtime wrapper the
 pinned sandbox netns mode needs, to register in Docker's daemon.json), and
 the systemd service and socket units,
 enabled but not started: configure /etc/default/netshim, the CNI network and
 kubelet, then start them. Stopping, upgrading or removing the package leaves
 running pods alone: their containers belong to Docker.
CONTROL

# Modes and times fixed, so that the package depends on the sources alone
# (dpkg-deb takes owners from --root-owner-group and honours SOURCE_DATE_EPOCH
# for its own members).
find "$staging" -type d -exec chmod 0755 {} +
find "$staging/DEBIAN" -type f ! -name postinst ! -name prerm ! -name postrm -exec chmod 0644 {} +
find "$staging" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$(dirname "$deb")"
dpkg-deb --root-owner-group -Zxz --build "$staging" "$deb" >/dev/null
echo "deb.sh: built $deb"

if ! command -v lintian >/dev/null; then
  die "lintian is not installed (make deps installs it)"
fi
# Every tag, info included, is printed; only errors fail the build.
lintian --display-info --fail-on error "$deb" || die "lintian reports errors for $deb"
echo "deb.sh: lintian: no errors"
