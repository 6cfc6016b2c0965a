#!/usr/bin/env bash
# Installs the Debian packages netshim's build, images and e2e tests need.
# Idempotent: runs apt-get (update once, then install) only when something is missing.
# `install-deps.sh vm` adds the VM node's packages (make e2e-vm).
set -euo pipefail

PACKAGES=(
  docker.io
  containernetworking-plugins
  iptables
  busybox-static
  iproute2
  curl
  iputils-ping
  docker-registry
  apache2-utils
  gcc
  libc6-dev
  libseccomp-dev # runc 1.4.3 for the Docker 29 engine (hack/docker29.sh) is built with seccomp
  systemd        # systemd-socket-activate (e2e TestSystemdSocketActivationAndNotify), systemd-analyze (make lint)
  lintian # make deb checks the package with it
  bind9-dnsutils # dig, copied into the e2e suites' agnhost and glibc-dns-testing images (hack/node-e2e-images.sh)
)
# `install-deps.sh vm`: also what make e2e-vm's VM node needs (hack/vm-image.sh,
# test/vmnode); not for make run or the other suites.
if [[ "${1:-}" == vm ]]; then
  PACKAGES+=(qemu-system-x86 qemu-utils debootstrap)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! apt-get update >"$log" 2>&1; then
  cat "$log" >&2
  echo "install-deps: apt-get update failed" >&2
  exit 1
fi
if ! apt-get install -y "${missing[@]}" >"$log" 2>&1; then
  tail -n 50 "$log" >&2
  echo "install-deps: apt-get install failed: ${missing[*]}" >&2
  exit 1
fi
