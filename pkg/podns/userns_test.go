package podns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestIDMaps(t *testing.T) {
	ms := []IDMap{{0, 100000, 1000}, {1000, 300000, 10}}
	for _, tc := range []struct {
		id, host uint32
		mapped   bool
	}{{0, 100000, true}, {999, 100999, true}, {1000, 300000, true}, {1009, 300009, true}, {1010, 0, false}} {
		if h, ok := HostOf(ms, tc.id); h != tc.host || ok != tc.mapped {
			t.Errorf("HostOf(%d) = %d, %v; want %d, %v", tc.id, h, ok, tc.host, tc.mapped)
		}
		if !tc.mapped {
			continue
		}
		if c, ok := ContainerOf(ms, tc.host); c != tc.id || !ok {
			t.Errorf("ContainerOf(%d) = %d, %v; want %d", tc.host, c, ok, tc.id)
		}
	}
	if _, ok := ContainerOf(ms, 5); ok {
		t.Error("ContainerOf(5): a node id outside the maps is mapped")
	}
	// The last id of a range that ends at 2^32 does not wrap.
	if h, ok := HostOf([]IDMap{{4294967294, 1, 2}}, 4294967295); !ok || h != 2 {
		t.Errorf("HostOf at the top = %d, %v", h, ok)
	}
	if !MapsRoot(ms) || MapsRoot(ms[1:]) {
		t.Error("MapsRoot")
	}
	for _, s := range []string{"0:100000:65536", "7:8:1"} {
		m, err := ParseIDMap(s)
		if err != nil || m.String() != s {
			t.Errorf("ParseIDMap(%q) = %v, %v; want it back", s, m, err)
		}
	}
	for _, s := range []string{"", "0:1", "0:1:2:3", "a:1:1", "0:1:0", "-1:1:1", "0:4294967296:1"} {
		if _, err := ParseIDMap(s); err == nil {
			t.Errorf("ParseIDMap(%q) accepted", s)
		}
	}
}

// TestPinUserAndRemove: a pod's user namespace and a netns it owns, as a
// container of a pod with hostUsers: false joins them.
func TestPinUserAndRemove(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "netns")
	unmountAllOnCleanup(t, dir)
	p := NewPinner(dir)
	uids := []IDMap{{0, 100000, 65536}}
	gids := []IDMap{{0, 200000, 65536}}
	// User among the kinds is the namespace PinUser makes anyway.
	paths, err := p.PinUser("pod-u", uids, gids, Net, User)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Paths{User: p.Path("pod-u", User), Net: p.Path("pod-u", Net)}); !reflect.DeepEqual(paths, want) {
		t.Fatalf("PinUser = %v, want %v", paths, want)
	}
	for kind, path := range paths {
		if err := Verify(path, kind); err != nil {
			t.Errorf("Verify(%s, %s): %v", path, kind, err)
		}
		if inode(t, path) == inode(t, "/proc/self/ns/"+string(kind)) {
			t.Errorf("%s: the pinned namespace is this process's own", kind)
		}
	}
	if err := Verify(paths[User], Net); err == nil {
		t.Error("Verify(user file, net) passed")
	}

	// The netns is owned by the pinned user namespace (so that the
	// container's root may mount sysfs in it), not by the node's.
	netFd, err := unix.Open(paths[Net], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(netFd)
	ownerFd, err := unix.IoctlRetInt(netFd, unix.NS_GET_USERNS)
	if err != nil {
		t.Fatalf("NS_GET_USERNS: %v", err)
	}
	defer unix.Close(ownerFd)
	var st unix.Stat_t
	if err := unix.Fstat(ownerFd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino != inode(t, paths[User]) {
		t.Errorf("the netns's owner is user namespace %d, want the pinned one %d", st.Ino, inode(t, paths[User]))
	}
	userFd, err := unix.Open(paths[User], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(userFd)
	if uid, err := unix.IoctlGetUint32(userFd, unix.NS_GET_OWNER_UID); err != nil || uid != 0 {
		t.Errorf("the user namespace's owner: uid %d, %v; want root", uid, err)
	}

	// Its maps, from inside (a Go process cannot join a user namespace:
	// it has threads).
	if nsenter, err := exec.LookPath("nsenter"); err == nil {
		for file, want := range map[string]IDMap{"uid_map": uids[0], "gid_map": gids[0], "setgroups": {}} {
			out, err := exec.Command(nsenter, "--user="+paths[User], "cat", "/proc/self/"+file).CombinedOutput()
			if err != nil {
				t.Fatalf("nsenter: %v: %s", err, out)
			}
			got := strings.Fields(string(out))
			wantFields := []string{"allow"} // runc sets the containers' groups
			if file != "setgroups" {
				wantFields = strings.Split(want.String(), ":")
			}
			if !slices.Equal(got, wantFields) {
				t.Errorf("%s in the namespace: %q, want %q", file, got, wantFields)
			}
		}
	} else {
		t.Log("no nsenter: the maps are not checked from inside")
	}

	if list, err := p.List(); err != nil || len(list) != 2 {
		t.Errorf("List = %q, %v; want the two files", list, err)
	}
	for _, path := range paths {
		if err := p.Remove(path); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Remove: %v", path, err)
		}
	}
	if ms := mountsUnder(t, dir); len(ms) != 0 {
		t.Errorf("mounted after Remove: %+v", ms)
	}
}

// TestPinUserRefuses: on every failure nothing is left, in the directory
// or mounted.
func TestPinUserRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "netns")
	p := NewPinner(dir)
	maps := []IDMap{{0, 100000, 65536}}
	for _, tc := range []struct {
		name       string
		pin        func() (Paths, error)
		root       bool // the kernel refuses, so it takes root to get there
		wantErr    string
		wantRemain []string // files in dir afterwards
	}{
		{name: "empty name", pin: func() (Paths, error) { return p.PinUser("", maps, maps, Net) }, wantErr: "plain file name"},
		{name: "a slash", pin: func() (Paths, error) { return p.PinUser("a/b", maps, maps, Net) }, wantErr: "plain file name"},
		{name: "dot dot", pin: func() (Paths, error) { return p.PinUser("..", maps, maps, Net) }, wantErr: "plain file name"},
		{name: "no uid map", pin: func() (Paths, error) { return p.PinUser("x", nil, maps, Net) }, wantErr: "needs a uid map"},
		{name: "no gid map", pin: func() (Paths, error) { return p.PinUser("x", maps, nil) }, wantErr: "needs a uid map"},
		{name: "pid", pin: func() (Paths, error) { return p.PinUser("x", maps, maps, Kind("pid")) }, wantErr: "cannot be pinned"},
		{name: "Pin of a user namespace", pin: func() (Paths, error) { return p.Pin("x", Net, User) }, wantErr: "PinUser"},
		{
			// The user file is made, then the net one is not: the
			// user file goes, the other pod's stays.
			name: "an existing file", root: true,
			pin: func() (Paths, error) {
				if err := os.MkdirAll(dir, 0o711); err != nil {
					return nil, err
				}
				if err := os.WriteFile(p.Path("taken", Net), nil, 0o444); err != nil {
					return nil, err
				}
				return p.PinUser("taken", maps, maps, Net)
			},
			wantErr: "file exists", wantRemain: []string{"taken.net"},
		},
		{
			// Overlapping ranges: the kernel refuses the map, after the
			// mount points were made.
			name: "maps the kernel refuses", root: true,
			pin: func() (Paths, error) {
				return p.PinUser("bad", []IDMap{{0, 100000, 10}, {5, 200000, 10}}, maps, Net, IPC)
			},
			wantErr: "pinning the user namespace bad",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
				unmountAllOnCleanup(t, dir)
			}
			paths, err := tc.pin()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				for _, path := range paths {
					_ = p.Remove(path)
				}
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			entries, _ := os.ReadDir(dir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, tc.wantRemain) {
				t.Errorf("left in the directory: %q, want %q", names, tc.wantRemain)
			}
			for _, n := range tc.wantRemain {
				_ = os.Remove(filepath.Join(dir, n))
			}
			if ms := mountsUnder(t, dir); len(ms) != 0 {
				t.Errorf("left mounted: %+v", ms)
			}
		})
	}
}
