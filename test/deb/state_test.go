package deb

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A snapshot sees the watched files, links and directories (whole) under its
// root, and Diff names every addition, removal and change, and nothing else.
func TestSnapshotAndDiff(t *testing.T) {
	root := t.TempDir()
	mk := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("/etc/default/netshim", "NETSHIM_OPTS=\"\"\n")
	mk("/etc/default/other", "x\n")
	mk("/usr/share/doc/netshim/copyright", "c\n")
	patterns := []string{"/etc/default/netshim*", "/usr/share/doc/netshim*", "/etc/systemd/system/*/netshim*"}

	before, err := Snapshot(root, patterns)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/etc/default/netshim", "/usr/share/doc/netshim", "/usr/share/doc/netshim/copyright"}
	if got := slices.Sorted(maps.Keys(before)); !slices.Equal(got, want) {
		t.Fatalf("snapshot paths = %v, want %v", got, want)
	}
	if d := Diff(before, before); len(d) != 0 {
		t.Fatalf("Diff of a snapshot with itself = %v, want none", d)
	}

	mk("/etc/default/netshim", "NETSHIM_OPTS=\"-v=2\"\n")
	if err := os.Remove(filepath.Join(root, "/usr/share/doc/netshim/copyright")); err != nil {
		t.Fatal(err)
	}
	wants := filepath.Join(root, "/etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/systemd/system/netshim.service", filepath.Join(wants, "netshim.service")); err != nil {
		t.Fatal(err)
	}
	after, err := Snapshot(root, patterns)
	if err != nil {
		t.Fatal(err)
	}
	d := Diff(before, after)
	if len(d) != 3 ||
		!strings.HasPrefix(d[0], "~ /etc/default/netshim: ") ||
		!strings.HasPrefix(d[1], "+ /etc/systemd/system/multi-user.target.wants/netshim.service: ") ||
		!strings.HasSuffix(d[1], " -> /lib/systemd/system/netshim.service") ||
		!strings.HasPrefix(d[2], "- /usr/share/doc/netshim/copyright: ") {
		t.Fatalf("Diff = %q, want the changed conffile, the new link and the removed copyright, in path order", d)
	}
}

func TestInstallTargets(t *testing.T) {
	for _, tc := range []struct {
		name, unit string
		want       []string
		wantErr    bool
	}{
		{
			name: "service",
			unit: "[Unit]\nDescription=x\nWantedBy=not-here.target\n[Service]\nExecStart=/usr/bin/netshim\n[Install]\nWantedBy=multi-user.target\n",
			want: []string{"multi-user.target.wants"},
		},
		{
			name: "several targets, comments, RequiredBy",
			unit: "[Install]\n# WantedBy=commented.target\nWantedBy = sockets.target other.target\nRequiredBy=kubelet.service\nAlso=netshim.service\n",
			want: []string{"sockets.target.wants", "other.target.wants", "kubelet.service.requires"},
		},
		{name: "no install section", unit: "[Service]\nExecStart=/bin/true\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := InstallTargets(strings.NewReader(tc.unit))
			if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
				t.Fatalf("InstallTargets = %v, %v; want %v (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseConffiles(t *testing.T) {
	got, err := ParseConffiles(" /etc/default/netshim 0123456789abcdef0123456789abcdef\n /etc/old 00112233445566778899aabbccddeeff obsolete\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["/etc/default/netshim"] != "0123456789abcdef0123456789abcdef" || got["/etc/old"] != "00112233445566778899aabbccddeeff" {
		t.Fatalf("ParseConffiles = %v", got)
	}
	if m, err := ParseConffiles(""); err != nil || len(m) != 0 {
		t.Fatalf("ParseConffiles of nothing = %v, %v; want empty", m, err)
	}
	if _, err := ParseConffiles(" etc/relative abc\n"); err == nil {
		t.Fatal("ParseConffiles took a relative path")
	}
}
