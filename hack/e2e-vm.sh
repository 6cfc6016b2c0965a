#!/usr/bin/env bash
# hack/e2e-vm.sh: `make e2e-vm`, netshim on a real Debian 12 node in a VM
# (cgroup v2, systemd as PID 1, Docker's systemd cgroup driver, a reboot).
#
# Needs, from make: NETSHIM_DEB (make deb's package) and KUBELET_BIN (kubelet
# v1.37, hack/build-kubelet.sh). Builds the node image if it is not cached
# (hack/vm-image.sh, in /var/cache/netshim-vm), the guest program
# (test/e2e-vm/guest, static) and the test images' root filesystems
# (hack/images.sh tars), puts them on the run's input disk, and runs
# test/e2e-vm, which boots the node under qemu and prints each check the
# guest makes. Artefacts in _output/e2e-vm/: console.log, results.log,
# qemu.log, node/ (the node's journal, units, files). Last line
# `e2e-vm: N passed, N failed`. VM_BUDGET (default 45m) bounds the run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
ART="$OUT/e2e-vm"
IN="$ART/in"
GO=${GO:-go}

die() { echo "e2e-vm.sh: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
[[ -f "${NETSHIM_DEB:-}" ]] || die "NETSHIM_DEB (make deb's package) not set or missing"
[[ -x "${KUBELET_BIN:-}" ]] || die "KUBELET_BIN (kubelet v1.37) not set or missing"
for tool in qemu-system-x86_64 qemu-img mkfs.ext4 debugfs; do
  command -v "$tool" >/dev/null || die "$tool not found (hack/install-deps.sh)"
done

# One run at a time: a second one would remove this one's disks and files.
mkdir -p "$OUT"
exec 9>"$OUT/e2e-vm.lock"
flock -n 9 || die "another make e2e-vm runs ($OUT/e2e-vm.lock)"

"$ROOT/hack/vm-image.sh" build
image=$("$ROOT/hack/vm-image.sh" path)

rm -rf "$ART"
mkdir -p "$IN"
cp "$NETSHIM_DEB" "$IN/"
install -m 0755 "$KUBELET_BIN" "$IN/kubelet"
(cd "$ROOT" && CGO_ENABLED=0 "$GO" build -trimpath -o "$IN/guest" ./test/e2e-vm/guest)
"$ROOT/hack/images.sh" tars "$IN"
printf '#!/bin/sh\nexec /mnt/nsin/guest\n' >"$IN/run"
chmod 0755 "$IN/run"

echo "e2e-vm: node image $image, inputs $(du -sh "$IN" | cut -f1); emulated (TCG): expect 15-25 minutes"
rc=0
(cd "$ROOT" && VM_IMAGE_DIR="$image" VM_INPUT_DIR="$IN" VM_ARTIFACTS="$ART" \
  "$GO" test -count=1 -tags vm -v -timeout 60m ./test/e2e-vm/) 2>&1 | tee "$ART/e2e-vm.log" || rc=$?
line=$(grep -E '^e2e-vm: [0-9]+ passed, [0-9]+ failed$' "$ART/e2e-vm.log" | tail -n 1 || true)
if [[ -z "$line" ]]; then
  echo "e2e-vm: 0 passed, 1 failed"
  exit 1
fi
exit "$rc"
