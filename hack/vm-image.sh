#!/usr/bin/env bash
# hack/vm-image.sh build|path|clean
#
# The base image of the VM node `make e2e-vm` boots (test/vm): a Debian 12 root
# filesystem made with debootstrap from Debian's packages only, booted under
# qemu's software emulation. It is what a node operator runs: systemd as PID 1,
# cgroup v2 (Debian's default), Debian's docker.io 20.10 with its default systemd
# cgroup driver, containernetworking-plugins, Debian's cloud kernel. Nothing of
# netshim, kubelet or the tests is in it: test/vm passes those in on a disk of
# their own at every run, so the image only changes when this script does.
#
# build: makes, unless it is there already, $VM_CACHE/<key>/ with
#          root.img     the root filesystem (ext4, label ROOT, sparse 8 GiB), never
#                       written by a run (test/vm boots a qcow2 overlay of it)
#          vmlinuz, initrd.img   Debian's cloud kernel and an initramfs with the
#                       virtio drivers (qemu -kernel/-initrd: no boot loader)
#          cmdline      the kernel command line
#        <key> hashes this script, so an edit makes a new image; older ones are
#        removed. No loop mount, no host service is touched: the root filesystem
#        is written by mkfs.ext4 -d from a directory. The .debs stay in
#        $VM_CACHE/debs for the next build. About 2-4 minutes; cached: nothing.
# path:  prints $VM_CACHE/<key> (built or not).
# clean: removes $VM_CACHE.
#
# VM_CACHE defaults to /var/cache/netshim-vm: outside the checkout, so a fresh
# clone on the same machine (CI) reuses the image. The Debian archive is the one
# this machine's apt uses (/etc/apt/sources.list.d/*.sources or sources.list).
set -euo pipefail

VM_CACHE=${VM_CACHE:-/var/cache/netshim-vm}
SUITE=bookworm
IMAGE_SIZE=8G

# The guest's packages. docker.io brings containerd and runc; the CNI plugins
# are Debian's (/usr/lib/cni), as on the host. busybox-static makes the test
# images inside the guest; e2fsprogs and kmod are there for the boot.
PACKAGES=(
  systemd systemd-sysv udev dbus kmod procps iproute2 iptables util-linux e2fsprogs
  linux-image-cloud-amd64 initramfs-tools
  docker.io containernetworking-plugins busybox-static
  # Debian boots with AppArmor on, and docker.io recommends apparmor: without
  # apparmor_parser Docker cannot load its docker-default profile and starts
  # no container at all.
  apparmor
)

die() { echo "vm-image.sh: $*" >&2; exit 1; }

key() {
  sha256sum "${BASH_SOURCE[0]}" | cut -c1-16
}

image_dir() { echo "$VM_CACHE/$(key)"; }

# debian_mirror: the first Debian archive URI of this machine's apt sources
# that serves $SUITE (not the security archive).
debian_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri=$(awk -v suite="$SUITE" '
      /^URIs:/ { uris = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) found = 1 }
      /^$/ { if (found && uris != "") { print uris; done = 1; exit } uris = ""; found = 0 }
      END { if (!done && found && uris != "") print uris }' "$f")
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  if [[ -f /etc/apt/sources.list ]]; then
    uri=$(awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }' /etc/apt/sources.list)
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  fi
  die "no Debian archive for $SUITE in this machine's apt sources"
}

# chroot_mounts DIR: /proc, /sys and /dev/pts for package scripts (umounted by
# the trap of build).
chroot_mounts() {
  mount -t proc proc "$1/proc"
  mount -t sysfs sysfs "$1/sys"
  mount -t devpts devpts "$1/dev/pts"
}

chroot_umounts() {
  local m
  for m in dev/pts sys proc; do
    mountpoint -q "$1/$m" 2>/dev/null && umount -l "$1/$m"
  done
  return 0
}

configure_root() {
  local dir=$1
  # Nothing starts in the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
  chmod 0755 "$dir/usr/sbin/policy-rc.d"
  # This machine's Debian sources (main, updates, security): the guest's
  # packages are the host's versions.
  rm -f "$dir/etc/apt/sources.list"
  mkdir -p "$dir/etc/apt/sources.list.d"
  if compgen -G '/etc/apt/sources.list.d/debian*.sources' >/dev/null; then
    cp /etc/apt/sources.list.d/debian*.sources "$dir/etc/apt/sources.list.d/"
  else
    grep -E '^deb .*debian' /etc/apt/sources.list >"$dir/etc/apt/sources.list"
  fi
  # The virtio drivers the VM's disks need, in the initramfs: MODULES=list
  # (MODULES=dep cannot see the guest's devices from a chroot) plus a hook;
  # udev in the initramfs loads them by modalias.
  mkdir -p "$dir/etc/initramfs-tools/conf.d" "$dir/etc/initramfs-tools/hooks"
  printf 'MODULES=list\nCOMPRESS=gzip\n' >"$dir/etc/initramfs-tools/conf.d/netshim-vm"
  cat >"$dir/etc/initramfs-tools/hooks/netshim-vm" <<'EOF'
#!/bin/sh
[ "$1" = prereqs ] && exit 0
. /usr/share/initramfs-tools/hook-functions
for m in virtio_pci virtio_blk virtio_console ext4 crc32c_generic; do
	manual_add_modules "$m"
done
EOF
  chmod 0755 "$dir/etc/initramfs-tools/hooks/netshim-vm"
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
}

install_packages() {
  local dir=$1
  export DEBIAN_FRONTEND=noninteractive
  chroot "$dir" apt-get update -q >/dev/null
  chroot "$dir" apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${PACKAGES[@]}" >"$dir/tmp/apt.log" 2>&1 ||
    { tail -n 40 "$dir/tmp/apt.log" >&2; die "apt-get install in the guest root failed"; }
  cp -n "$dir"/var/cache/apt/archives/*.deb "$VM_CACHE/debs/" 2>/dev/null || true
  chroot "$dir" apt-get clean
  rm -rf "$dir"/var/lib/apt/lists/* "$dir/tmp/apt.log"
}

# guest_files DIR: the node's own configuration.
guest_files() {
  local dir=$1
  rm -f "$dir/usr/sbin/policy-rc.d"
  echo netshim-vm >"$dir/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tnetshim-vm\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$dir/etc/hosts"
  printf 'LABEL=ROOT\t/\text4\terrors=remount-ro\t0\t1\n' >"$dir/etc/fstab"
  # One machine id for every boot of every run: kubelet and journald keep it.
  od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$dir/etc/machine-id"
  echo >>"$dir/etc/machine-id"
  # The node has no network card: its only link is a dummy device with a
  # documentation address and a default route, so that kubelet finds a node IP,
  # and nothing the guest sends can leave the VM.
  nameserver_none >"$dir/etc/resolv.conf"
  mkdir -p "$dir/etc/systemd/network"
  printf '[NetDev]\nName=node0\nKind=dummy\n' >"$dir/etc/systemd/network/10-node0.netdev"
  printf '[Match]\nName=node0\n\n[Network]\nAddress=192.0.2.10/24\n\n[Route]\nGateway=192.0.2.1\nGatewayOnLink=yes\n' \
    >"$dir/etc/systemd/network/10-node0.network"
  mkdir -p "$dir/etc/systemd/system/multi-user.target.wants"
  ln -sf /lib/systemd/system/systemd-networkd.service "$dir/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
  # Timers that would compete with the test for the emulated CPUs.
  local unit
  for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer dpkg-db-backup.timer \
    man-db.timer systemd-networkd-wait-online.service e2scrub_reap.service; do
    ln -sf /dev/null "$dir/etc/systemd/system/$unit"
  done
  # The journal survives the reboot the test makes.
  mkdir -p "$dir/var/log/journal"
  # Root on the serial console for a person who debugs a run (qemu's console
  # is a file or a socket on this machine, never a network).
  chroot "$dir" passwd -d root >/dev/null
  mkdir -p "$dir/etc/systemd/system/serial-getty@ttyS0.service.d"
  # shellcheck disable=SC2016 # $TERM is systemd's, not this script's
  printf '[Service]\nExecStart=\nExecStart=-/sbin/agetty --autologin root --keep-baud 115200 %%I $TERM\n' \
    >"$dir/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf"
  # The test runner: started at every boot when the run's input disk
  # (label NSIN, test/vm) is attached; it runs what that disk brings.
  cat >"$dir/etc/systemd/system/netshim-vmtest.service" <<'EOF'
[Unit]
Description=netshim VM node test (test/vm)
ConditionPathExists=/dev/disk/by-label/NSIN
After=local-fs.target systemd-udev-settle.service
Wants=systemd-udev-settle.service

[Service]
Type=simple
ExecStartPre=/bin/mkdir -p /mnt/nsin /mnt/nsout
ExecStartPre=/bin/mount -o ro LABEL=NSIN /mnt/nsin
ExecStartPre=/bin/sh -c 'mountpoint -q /mnt/nsout || mount LABEL=NSOUT /mnt/nsout'
ExecStart=/mnt/nsin/run
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
  ln -sf /etc/systemd/system/netshim-vmtest.service "$dir/etc/systemd/system/multi-user.target.wants/netshim-vmtest.service"
}

nameserver_none() {
  echo "# The VM node has no network beyond itself: no resolver."
}

build() {
  local dir tmp start=$SECONDS
  dir=$(image_dir)
  if [[ -f "$dir/.done" ]]; then
    return 0
  fi
  [[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap)"
  command -v debootstrap >/dev/null || die "debootstrap not found (hack/install-deps.sh vm)"
  command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 not found"
  mkdir -p "$VM_CACHE/debs"
  # One build at a time (two runs of make e2e-vm, say); the second finds
  # the image built.
  exec 8>"$VM_CACHE/.lock"
  flock 8
  if [[ -f "$dir/.done" ]]; then
    return 0
  fi
  # Older images: another key.
  find "$VM_CACHE" -mindepth 1 -maxdepth 1 -type d ! -name debs ! -name "$(key)" -exec rm -rf {} +
  rm -rf "$dir"
  mkdir -p "$dir"
  tmp="$dir/rootfs"
  trap 'chroot_umounts "$tmp"' EXIT
  local mirror log="$dir/build.log"
  mirror=$(debian_mirror)
  echo "vm-image.sh: building the VM node image into $dir (about 2-4 min; log: $log)"
  # debootstrap keeps what it downloads in --cache-dir for the next build.
  if ! debootstrap --variant=minbase --cache-dir="$VM_CACHE/debs" "$SUITE" "$tmp" "$mirror" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "debootstrap failed (log: $log)"
  fi
  configure_root "$tmp"
  chroot_mounts "$tmp"
  # .debs from an earlier build: apt takes them instead of downloading.
  cp -n "$VM_CACHE"/debs/*.deb "$tmp/var/cache/apt/archives/" 2>/dev/null || true
  install_packages "$tmp" >>"$log" 2>&1 || { tail -n 30 "$log" >&2; die "installing the guest's packages failed (log: $log)"; }
  chroot_umounts "$tmp"
  trap - EXIT
  guest_files "$tmp"
  local kver
  kver=$(find "$tmp/lib/modules" -mindepth 1 -maxdepth 1 -name '*cloud*' -printf '%f\n' | head -n 1)
  [[ -n "$kver" && -f "$tmp/boot/vmlinuz-$kver" && -f "$tmp/boot/initrd.img-$kver" ]] ||
    die "no cloud kernel and initramfs in the guest root"
  cp "$tmp/boot/vmlinuz-$kver" "$dir/vmlinuz"
  cp "$tmp/boot/initrd.img-$kver" "$dir/initrd.img"
  # tsc=reliable: with TCG vCPUs the kernel otherwise falls back to the HPET
  # (boot 1.8x slower); psi=1: Debian's kernel has PSI off by default, and the
  # test reads pressure stall figures; cgroup v2 is Debian 12's default.
  echo "root=LABEL=ROOT rw console=ttyS0,115200 tsc=reliable psi=1 panic=10 systemd.show_status=auto" >"$dir/cmdline"
  truncate -s "$IMAGE_SIZE" "$dir/root.img.tmp"
  mkfs.ext4 -q -L ROOT -d "$tmp" "$dir/root.img.tmp" >>"$log" 2>&1 || die "mkfs.ext4 -d failed (log: $log)"
  mv "$dir/root.img.tmp" "$dir/root.img"
  echo "$kver" >"$dir/kernel-version"
  rm -rf "$tmp"
  touch "$dir/.done"
  echo "vm-image.sh: built $dir (kernel $kver) in $((SECONDS - start)) s"
}

cmd=${1:-build}
case "$cmd" in
  build) build ;;
  path) image_dir ;;
  clean) rm -rf "$VM_CACHE" ;;
  *) echo "usage: $0 build|path|clean" >&2; exit 2 ;;
esac
