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
	if err != nil || !reflect.DeepEqual(got, ps) {
		t.Errorf("Accept(Env()) = %v, %v; want %v", got, err, ps)
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
		{name: "signature, no namespaces", value: macSep + key.mac(""), wantErr: "no namespaces"},
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
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Accept(%q) = %v, %v; want %v", tc.value, got, err, tc.want)
			}
		})
	}
	if !slices.Contains(checked, "net="+dir+"/pod-a.net") {
		t.Errorf("Check never saw the accepted path (saw %q)", checked)
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
