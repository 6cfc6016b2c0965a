package layerusage

import (
	"errors"
	"testing"
)

func TestRootUpperDir(t *testing.T) {
	const snap = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots"
	tests := []struct {
		name, mountinfo string
		want            string
		wantErr         error // nil: any error when want is ""
	}{
		{
			// Docker 29, containerd image store: the snapshot's fs dir.
			name: "containerd snapshotter",
			mountinfo: "1021 893 0:72 / / rw,relatime master:500 - overlay overlay rw,lowerdir=" + snap + "/20/fs:" + snap + "/19/fs,upperdir=" + snap + "/23/fs,workdir=" + snap + "/23/work,index=off\n" +
				"1022 1021 0:75 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n" +
				"1023 1021 0:76 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755,inode64\n" +
				"1030 1021 254:0 /var/lib/docker/containers/abc/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw\n",
			want: snap + "/23/fs",
		},
		{
			// Docker 20.10 overlay2, should GraphDriver data be missing.
			name:      "docker overlay2",
			mountinfo: "655 560 0:51 / / rw,relatime master:290 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/2EVMWUFTQZTHV6VXCMCFYIOV3L:/var/lib/docker/overlay2/l/KPKJAGQEYNUKLGPH3IXW5H5DCB,upperdir=/var/lib/docker/overlay2/8f3a0d95b1b4/diff,workdir=/var/lib/docker/overlay2/8f3a0d95b1b4/work\n",
			want:      "/var/lib/docker/overlay2/8f3a0d95b1b4/diff",
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

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:         "plain",
		`a\040b`:        "a b",
		`\134\054`:      `\,`,
		`trailing\04`:   `trailing\04`,
		`not\9990octal`: `not\9990octal`,
		`\`:             `\`,
	} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}
