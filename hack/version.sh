#!/usr/bin/env bash
# Prints netshim's version in Debian's form: the one string that goes into the
# binary (the Makefile's VERSION, -X .../pkg/version.Version) and into the
# package (make deb), so that `netshim version` and `dpkg -s netshim` agree.
#
#   hack/version.sh                     the checkout's version, from
#                                       `git describe --tags --always --dirty`
#   hack/version.sh map DESCRIBE DATE   the mapping alone (test/deb checks it)
#
# Outside a git checkout (a tarball) the version is 0.0~dev.
set -euo pipefail

# debian_version DESCRIBE DATE prints the Debian version for DESCRIBE, the
# output of `git describe --tags --always --dirty`. A Debian version must start
# with a digit and, having no Debian revision (netshim is built as a native
# package), must not contain a hyphen; dpkg orders them as the tags go:
#   v1.2.3                   1.2.3
#   v1.2.3-rc.1              1.2.3~rc.1            a hyphen in a tag marks a pre-release
#                                                  (semver), and ~ sorts before 1.2.3
#   v1.2.3-4-gabc1234        1.2.3+4.gabc1234      4 commits after the tag: after 1.2.3
#   abc1234 (no tag at all)  0.0~gitDATE.abc1234  DATE is the commit's date (YYYYMMDD),
#                                                  not today's, so a rebuild of the same
#                                                  commit gets the same version; sorts
#                                                  before any tag
#   ...-dirty                ...+dirty             uncommitted changes
# A bare hash is told from a tag by its form (7 or more hex digits), so a tag
# must not look like one. It is pure: no git, no clock.
debian_version() {
  local describe=${1:?usage: debian_version DESCRIBE DATE} date=${2:-} dirty="" v
  if [[ $describe == *-dirty ]]; then
    dirty=+dirty
    describe=${describe%-dirty}
  fi
  if [[ $describe =~ ^[0-9a-f]{7,40}$ ]]; then
    if [[ ! $date =~ ^[0-9]{8}$ ]]; then
      echo "version.sh: $1 is a bare commit hash: the commit date (YYYYMMDD) is needed, got '$date'" >&2
      return 1
    fi
    v="0.0~git$date.$describe"
  else
    local tag=$describe after=""
    if [[ $describe =~ ^(.+)-([0-9]+)-g([0-9a-f]+)$ ]]; then
      tag=${BASH_REMATCH[1]}
      after="+${BASH_REMATCH[2]}.g${BASH_REMATCH[3]}"
    fi
    tag=${tag#v}
    v="${tag//-/\~}$after"
  fi
  v+=$dirty
  if [[ ! $v =~ ^[0-9][A-Za-z0-9.+~]*$ ]]; then
    echo "version.sh: cannot map '$1' to a Debian version (got '$v'): tags must look like vX.Y.Z[-PRERELEASE]" >&2
    return 1
  fi
  printf '%s\n' "$v"
}

main() {
  case "${1:-}" in
    map)
      shift
      debian_version "$@"
      ;;
    "")
      local root describe date
      root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
      if ! describe=$(git -C "$root" describe --tags --always --dirty 2>/dev/null); then
        echo "0.0~dev"
        return 0
      fi
      date=$(TZ=UTC0 git -C "$root" show -s --format=%cd --date=format-local:%Y%m%d HEAD)
      debian_version "$describe" "$date"
      ;;
    *)
      echo "usage: $0 [map DESCRIBE DATE]" >&2
      return 2
      ;;
  esac
}

main "$@"
