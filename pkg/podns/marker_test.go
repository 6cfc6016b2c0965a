package podns

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Paths
		wantErr bool
	}{
		{in: "", want: Paths{}},
		{in: "net=/run/netshim/netns/p.net", want: Paths{Net: "/run/netshim/netns/p.net"}},
		{in: "ipc=/d/p.ipc,net=/d/p.net,uts=/d/p.uts", want: Paths{Net: "/d/p.net", IPC: "/d/p.ipc", UTS: "/d/p.uts"}},
		{in: "pid=/d/p.pid", wantErr: true},
		{in: "mnt=/d/p", wantErr: true},
		{in: "net", wantErr: true},
		{in: "net=", wantErr: true},
		{in: "net=/a,net=/b", wantErr: true},
		{in: "net=/a,", wantErr: true},
	} {
		got, err := ParseEnv(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseEnv(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseEnv(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func testKey(t *testing.T, dir string) *Key {
	t.Helper()
	k, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestEnvRoundTrip(t *testing.T) {
	dir := t.TempDir()
	key := testKey(t, dir)
	ps := Paths{UTS: dir + "/p.uts", Net: dir + "/p.net", IPC: dir + "/p.ipc"}
	env := ps.Env(key)
	spec := "ipc=" + dir + "/p.ipc,net=" + dir + "/p.net,uts=" + dir + "/p.uts"
	if want := EnvKey + "=" + spec + macSep + key.mac(spec); env != want {
		t.Errorf("Env() = %q, want %q (sorted by kind, signed)", env, want)
	}
	if !IsEnvEntry(env) {
		t.Errorf("IsEnvEntry(%q) = false", env)
	}
	v := Verifier{ReadKey: ReadKey, Check: func(string, Kind) error { return nil }}
	got, err := v.Accept(env[len(EnvKey)+1:])
	if want := (Marker{Paths: ps}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Accept(Env()) = %+v, %v; want %+v", got, err, want)
	}
	if e := (Paths{}).Env(key); e != EnvKey+"=" {
		t.Errorf("Env() of no paths = %q, want %q (unsigned, names nothing)", e, EnvKey+"=")
	}
	for _, e := range []string{EnvKey, EnvKey + "X=1", "PATH=/bin"} {
		if IsEnvEntry(e) != (e == EnvKey) {
			t.Errorf("IsEnvEntry(%q) = %v", e, IsEnvEntry(e))
		}
	}
}

// TestVerifierAccept: what the OCI wrapper applies. An image's ENV can
// name any namespace file (the node's /var/run/docker/netns/default, a
// bind mount of its netns, another pod's pinned file): only a value that
// netshim signed with the key of the directory its files are in passes.
func TestVerifierAccept(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir() // another netshim's netns directory
	noKey := t.TempDir() // a directory netshim never used
	key, otherKey := testKey(t, dir), testKey(t, other)
	signed := func(k *Key, ps Paths) string { return ps.Env(k)[len(EnvKey)+1:] }
	pod := Paths{Net: dir + "/pod-a.net"}
	checked := []string{}
	check := func(path string, kind Kind) error {
		checked = append(checked, string(kind)+"="+path)
		if strings.HasSuffix(path, ".bad") {
			return errors.New("not a namespace file")
		}
		return nil
	}
	for _, tc := range []struct {
		name    string
		dirs    []string
		value   string
		want    Paths
		wantErr string
	}{
		{name: "nothing named", value: "", want: Paths{}},
		{name: "signed by the directory's key", value: signed(key, pod), want: pod},
		{name: "signed, dirs given", dirs: []string{"/x", dir}, value: signed(key, pod), want: pod},
		{name: "unsigned: an image's ENV", value: "net=/var/run/docker/netns/default", wantErr: "no netshim signature"},
		{name: "unsigned pod file", value: "net=" + dir + "/pod-a.net", wantErr: "no netshim signature"},
		{name: "signature of another path", value: "net=" + dir + "/pod-b.net" + macSep + key.mac("net="+dir+"/pod-a.net"), wantErr: "does not match"},
		{name: "another directory's key", value: "net=" + dir + "/pod-a.net" + macSep + otherKey.mac("net="+dir+"/pod-a.net"), wantErr: "does not match"},
		{name: "directory without a key", value: "net=" + noKey + "/p.net" + macSep + key.mac("net="+noKey+"/p.net"), wantErr: "holds no usable key"},
		{name: "outside the wrapper's dirs", dirs: []string{other}, value: signed(key, pod), wantErr: "not a netns directory this wrapper accepts"},
		{name: "two directories", value: signed(key, Paths{Net: dir + "/p.net", IPC: other + "/p.ipc"}), wantErr: "two directories"},
		{name: "not clean", value: "net=" + dir + "/../" + filepath.Base(dir) + "/p.net" + macSep + "00", wantErr: "absolute, clean"},
		{name: "relative", value: "net=p.net" + macSep + "00", wantErr: "absolute, clean"},
		{name: "bad MAC hex", value: "net=" + dir + "/p.net" + macSep + "zz", wantErr: "does not match"},
		{name: "signature, nothing asked", value: macSep + key.mac(""), wantErr: "nothing asked"},
		{name: "signature, only a directory", value: "dir=" + dir + macSep + key.mac("dir="+dir), wantErr: "nothing asked"},
		{name: "bad kind", value: "pid=" + dir + "/p.pid" + macSep + key.mac("pid="+dir+"/p.pid"), wantErr: "cannot be pinned"},
		{name: "check refuses", value: signed(key, Paths{Net: dir + "/p.bad"}), wantErr: "not a namespace file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Verifier{Dirs: tc.dirs, ReadKey: ReadKey, Check: check}
			got, err := v.Accept(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Accept(%q) = %v, %v; want an error containing %q", tc.value, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got.Paths, tc.want) {
				t.Fatalf("Accept(%q) = %+v, %v; want the paths %v", tc.value, got, err, tc.want)
			}
		})
	}
	if !slices.Contains(checked, "net="+dir+"/pod-a.net") {
		t.Errorf("Check never saw the accepted path (saw %q)", checked)
	}
}

// TestMarkerRoundTrip: what netshim asks for a container comes out of
// the wrapper's Verifier as it was put in.
func TestMarkerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	key := testKey(t, dir)
	uids := []IDMap{{0, 100000, 65536}}
	gids := []IDMap{{0, 200000, 1000}, {1000, 300000, 64536}}
	for _, tc := range []struct {
		name string
		m    Marker
	}{
		{name: "pinned netns", m: Marker{Paths: Paths{Net: dir + "/p.net"}}},
		{name: "user namespace", m: Marker{Paths: Paths{User: dir + "/p.user", Net: dir + "/p.net", IPC: dir + "/p.ipc"}, UIDs: uids, GIDs: gids}},
		{name: "idmapped mounts", m: Marker{Paths: Paths{User: dir + "/p.user"}, UIDs: uids, GIDs: uids,
			IDMapMounts: []string{"/data", "/a,b c", "/x+y;mac=z%2F", "/=ü"}}},
		{name: "Strict, groups", m: Marker{Paths: Paths{Net: dir + "/p.net"}, StrictGroups: true, Groups: []uint32{1000, 4294967295, 0}}},
		{name: "Strict, no groups", m: Marker{Paths: Paths{Net: dir + "/p.net"}, StrictGroups: true}},
		// A Strict container of a pod with no pinned namespace: signed
		// with the key of the directory it names.
		{name: "Strict, only a directory", m: Marker{Paths: Paths{}, StrictGroups: true, Groups: []uint32{5}, Dir: dir}},
		{name: "everything, the directory too", m: Marker{Paths: Paths{User: dir + "/p.user", UTS: dir + "/p.uts"}, UIDs: uids, GIDs: gids,
			IDMapMounts: []string{"/v"}, StrictGroups: true, Groups: []uint32{1}, Dir: dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.m.Env(key)
			if !IsEnvEntry(env) || !strings.Contains(env, macSep) {
				t.Fatalf("Env() = %q, want a signed entry", env)
			}
			value := env[len(EnvKey)+1:]
			if spec, _, _ := strings.Cut(value, macSep); strings.Count(spec, "=") != countItems(tc.m) {
				t.Errorf("the list %q: a separator escaped badly (want %d items)", spec, countItems(tc.m))
			}
			v := Verifier{Dirs: []string{dir}, ReadKey: ReadKey, Check: func(string, Kind) error { return nil }}
			got, err := v.Accept(value)
			if err != nil || !reflect.DeepEqual(got, tc.m) {
				t.Errorf("Accept(Env()) = %+v, %v; want %+v", got, err, tc.m)
			}
		})
	}
	for _, m := range []Marker{{}, {Paths: Paths{}}, {Dir: dir}} {
		if e := m.Env(key); e != EnvKey+"=" {
			t.Errorf("Env() of %+v = %q, want %q (asks nothing: unsigned)", m, e, EnvKey+"=")
		}
	}
}

// countItems is how many items m's list has, each with one '='.
func countItems(m Marker) int {
	n := len(m.Paths)
	for _, b := range []bool{len(m.UIDs) > 0, len(m.GIDs) > 0, len(m.IDMapMounts) > 0, m.StrictGroups, m.Dir != ""} {
		if b {
			n++
		}
	}
	return n
}

func TestParseMarker(t *testing.T) {
	const maps = ",uidmap=0:100000:65536,gidmap=0:100000:65536"
	for _, tc := range []struct {
		name, in string
		want     Marker
		wantErr  string
	}{
		{name: "empty", in: "", want: Marker{Paths: Paths{}}},
		{name: "user and maps", in: "user=/d/p.user" + maps + ",idmap=%2Fa%2Cb%20c+%2Fd",
			want: Marker{Paths: Paths{User: "/d/p.user"}, UIDs: []IDMap{{0, 100000, 65536}}, GIDs: []IDMap{{0, 100000, 65536}}, IDMapMounts: []string{"/a,b c", "/d"}}},
		{name: "groups empty", in: "dir=/d,groups=", want: Marker{Paths: Paths{}, StrictGroups: true, Dir: "/d"}},
		{name: "groups", in: "groups=3+1", want: Marker{Paths: Paths{}, StrictGroups: true, Groups: []uint32{3, 1}}},
		{name: "user without maps", in: "user=/d/p.user", wantErr: "without its uid and gid maps"},
		{name: "user without a gid map", in: "user=/d/p.user,uidmap=0:1:1", wantErr: "without its uid and gid maps"},
		{name: "maps not mapping root", in: "user=/d/p.user,uidmap=1:100000:65535,gidmap=0:100000:65536", wantErr: "do not map container root"},
		{name: "maps without user", in: "net=/d/p.net" + maps, wantErr: "without a user namespace"},
		{name: "idmapped mount without user", in: "net=/d/p.net,idmap=%2Fa", wantErr: "without a user namespace"},
		{name: "unknown item", in: "net=/d/p.net,cgroup=/x", wantErr: "cannot be pinned"},
		{name: "relative dest", in: "user=/d/p.user" + maps + ",idmap=a", wantErr: "want an absolute path"},
		{name: "bad dest escape", in: "user=/d/p.user" + maps + ",idmap=%2Fa%zz", wantErr: "want an absolute path"},
		{name: "empty dest", in: "user=/d/p.user" + maps + ",idmap=", wantErr: "want an absolute path"},
		{name: "bad map", in: "user=/d/p.user,uidmap=0:1,gidmap=0:1:1", wantErr: "want container:host:size"},
		{name: "map of no ids", in: "user=/d/p.user,uidmap=0:1:0,gidmap=0:1:1", wantErr: "no ids"},
		{name: "bad group", in: "groups=1+x", wantErr: `group "x"`},
		{name: "negative group", in: "groups=-1", wantErr: `group "-1"`},
		{name: "twice", in: "groups=1,groups=2", wantErr: "named twice"},
		{name: "no value", in: "groups", wantErr: "want KEY=VALUE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMarker(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseMarker(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseMarker(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestVerifierAcceptDirectory: a marker that names no namespace is
// signed with the key of the directory it names instead.
func TestVerifierAcceptDirectory(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	key := testKey(t, dir)
	testKey(t, other)
	sign := func(spec string) string { return spec + macSep + key.mac(spec) }
	v := Verifier{ReadKey: ReadKey, Check: func(string, Kind) error { return nil }}
	for _, tc := range []struct {
		name, value, wantErr string
	}{
		{name: "directory and groups", value: sign("dir=" + dir + ",groups=1")},
		{name: "directory of the paths", value: sign("dir=" + dir + ",groups=1,net=" + dir + "/p.net")},
		{name: "another directory than the paths'", value: sign("dir=" + other + ",groups=1,net=" + dir + "/p.net"), wantErr: "two directories"},
		{name: "no directory, no paths", value: sign("groups=1"), wantErr: "no directory"},
		{name: "relative directory", value: sign("dir=d,groups=1"), wantErr: "absolute, clean"},
		{name: "directory not clean", value: sign("dir=" + dir + "/,groups=1"), wantErr: "absolute, clean"},
		{name: "signed for another directory", value: "dir=" + other + ",groups=1" + macSep + key.mac("dir="+other+",groups=1"), wantErr: "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := v.Accept(tc.value)
			if tc.wantErr == "" {
				if err != nil || !m.StrictGroups {
					t.Fatalf("Accept(%q) = %+v, %v", tc.value, m, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Accept(%q) = %+v, %v; want an error containing %q", tc.value, m, err, tc.wantErr)
			}
		})
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "netns")
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != keySize {
		t.Errorf("key file mode %v size %d, want 0600 and %d", fi.Mode().Perm(), fi.Size(), keySize)
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil || !reflect.DeepEqual(k1, k2) {
		t.Errorf("second LoadOrCreateKey = %v, %v; want the first key", k2, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("netns dir holds %d entries, want only the key (no temp file left)", len(entries))
	}
	list, err := NewPinner(dir).List()
	if err != nil || len(list) != 0 {
		t.Errorf("List() = %q, %v; want the key left out", list, err)
	}
	if k3 := testKey(t, t.TempDir()); reflect.DeepEqual(k1, k3) {
		t.Error("two directories got the same key")
	}
}

func TestReadKeyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		make    func(t *testing.T, path string)
		wantErr string
	}{
		{name: "missing", make: func(*testing.T, string) {}, wantErr: "no such file"},
		{name: "readable by others", make: func(t *testing.T, p string) { writeFile(t, p, make([]byte, keySize), 0o644) }, wantErr: "lets others read"},
		{name: "short", make: func(t *testing.T, p string) { writeFile(t, p, make([]byte, 8), 0o600) }, wantErr: "8 bytes"},
		{name: "a directory", make: func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "not a regular file"},
		{name: "a symlink", make: func(t *testing.T, p string) {
			target := filepath.Join(t.TempDir(), "k")
			writeFile(t, target, make([]byte, keySize), 0o600)
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "too many levels of symbolic links"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, filepath.Join(dir, KeyFile))
			if _, err := ReadKey(dir); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadKey = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}
