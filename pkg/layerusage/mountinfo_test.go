package layerusage

import (
	"errors"
	"testing"
)

func TestRootUpperDir(t *testing.T) {
	const snap = "/var/lib/netshim-docker29/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots"
	tests := []struct {
		name, mountinfo string
		want            string
		wantErr         error // nil: any error when want is ""
	}{
		{
			// Captured from a container of Docker 29 (containerd image
			// store, data root /var/lib/netshim-docker29) on this machine.
			name: "containerd snapshotter",
			mountinfo: "122 71 0:42 / / rw,relatime - overlay overlay rw,lowerdir=" + snap + "/5213/fs:" + snap + "/2/fs,upperdir=" + snap + "/5214/fs,workdir=" + snap + "/5214/work\n" +
				"123 122 0:45 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n" +
				"124 122 0:46 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755,inode64\n" +
				"130 122 254:0 /var/lib/netshim-docker29/docker/containers/abc/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw\n",
			want: snap + "/5214/fs",
		},
		{
			// Captured from a container of Docker 20.10 (overlay2), for
			// when GraphDriver data is missing.
			name:      "docker overlay2",
			mountinfo: "118 66 0:50 / / rw,relatime master:5 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/4NJZ34GKGCI4P7WQADPECQLER3:/var/lib/docker/overlay2/l/CAHDMMPKQ2PU4LEE2X6D2JVBPQ,upperdir=/var/lib/docker/overlay2/91b969bc48ea5beb16de10b56979099361e78e8e7997dc12b6054f82d3a63a51/diff,workdir=/var/lib/docker/overlay2/91b969bc48ea5beb16de10b56979099361e78e8e7997dc12b6054f82d3a63a51/work\n",
			want:      "/var/lib/docker/overlay2/91b969bc48ea5beb16de10b56979099361e78e8e7997dc12b6054f82d3a63a51/diff",
		},
		{
			// Captured on this machine (kernel 6.18) from inside a chroot
			// into an overlay whose upper path holds a backslash, a comma
			// and a space: the kernel escapes them octal.
			name:      "kernel escapes",
			mountinfo: "73 44 0:39 / / rw,relatime - overlay overlay rw,lowerdir=/tmp/ovl.msUz/lower,upperdir=/tmp/ovl.msUz/up\\134\\054\\040per=x/fs,workdir=/tmp/ovl.msUz/up\\134\\054\\040per=x/work,uuid=on\n74 73 0:41 / /proc rw,relatime - proc proc rw\n",
			want:      "/tmp/ovl.msUz/up\\, per=x/fs",
		},
		{
			name: "last mount at / wins",
			mountinfo: "20 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n" +
				"30 20 0:40 / / rw,relatime shared:2 master:1 - overlay overlay rw,lowerdir=/l,upperdir=/u/fs,workdir=/u/work\n",
			want: "/u/fs",
		},
		{
			name:      "btrfs snapshotter",
			mountinfo: "40 30 0:33 /snapshots/12 / rw,relatime - btrfs /dev/sdb rw,space_cache\n",
			wantErr:   ErrNoOverlayRoot,
		},
		{
			name:      "overlay without upper",
			mountinfo: "40 30 0:33 / / ro,relatime - overlay overlay ro,lowerdir=/a:/b\n",
			wantErr:   ErrNoOverlayRoot,
		},
		{name: "relative upperdir", mountinfo: "40 30 0:33 / / rw - overlay overlay rw,lowerdir=1/fs,upperdir=2/fs,workdir=2/work\n"},
		{name: "no root mount", mountinfo: "22 1 0:21 / /proc rw - proc proc rw\n"},
		{name: "truncated line", mountinfo: "40 30 0:33 / / rw - overlay\n"},
		{name: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RootUpperDir([]byte(tt.mountinfo))
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("RootUpperDir = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("RootUpperDir = %q, want an error", got)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("RootUpperDir error %v, want %v", err, tt.wantErr)
			}
		})
	}
}
