package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

func newTestManager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(filepath.Join(t.TempDir(), "sandbox"))
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return m
}

func fullCheckpoint(id string) *PodSandbox {
	return &PodSandbox{
		SandboxID:   id,
		Name:        "web-0",
		Namespace:   "default",
		UID:         "0b6c1f4e-1111-2222-3333-444455556666",
		Attempt:     3,
		HostNetwork: true,
		PortMappings: []PortMapping{
			{Protocol: "tcp", ContainerPort: 80, HostPort: 8080, HostIP: "127.0.0.1"},
			{Protocol: "udp", ContainerPort: 53, HostPort: 5353},
			{Protocol: "sctp", ContainerPort: 9, HostPort: 9999, HostIP: "::1"},
		},
		IPs:           []string{"10.88.0.5", "fd00::5"},
		NetworkResult: json.RawMessage(`{"cniVersion":"1.0.0","ips":[{"address":"10.88.0.5/16"}],"note":"<&>"}`),
		CreatedAt:     1700000000123456789,
	}
}

func TestNewManagerCreatesDir(t *testing.T) {
	m := newTestManager(t)
	fi, err := os.Stat(m.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, want drwx------", fi.Mode())
	}
}

func TestRoundTrip(t *testing.T) {
	m := newTestManager(t)
	in := fullCheckpoint("abc123")
	if err := m.Put(in); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if in.Version != 0 {
		t.Errorf("Put modified caller's Version to %d", in.Version)
	}
	out, err := m.Get("abc123")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := *in
	want.Version = CurrentVersion
	// RawMessage bytes may legitimately differ in spacing; compare semantically.
	if !jsonEqual(t, out.NetworkResult, want.NetworkResult) {
		t.Errorf("NetworkResult = %s, want %s", out.NetworkResult, want.NetworkResult)
	}
	out.NetworkResult, want.NetworkResult = nil, nil
	if !reflect.DeepEqual(*out, want) {
		t.Errorf("round trip mismatch:\n got %+v\nwant %+v", *out, want)
	}

	fi, err := os.Stat(filepath.Join(m.Dir(), "abc123.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestRoundTripKeepsExplicitVersionAndEmptyFields(t *testing.T) {
	m := newTestManager(t)
	in := &PodSandbox{Version: 1, SandboxID: "min"}
	if err := m.Put(in); err != nil {
		t.Fatal(err)
	}
	out, err := m.Get("min")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Errorf("got %+v, want %+v", out, in)
	}
}

func TestFileFormat(t *testing.T) {
	m := newTestManager(t)
	if err := m.Put(fullCheckpoint("fmt")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(m.Dir(), "fmt.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Checksum string          `json:"checksum"`
		Data     json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("file is not JSON: %v", err)
	}
	if env.Checksum != checksum(env.Data) || !strings.HasPrefix(env.Checksum, "sha256:") {
		t.Errorf("checksum %q does not match data", env.Checksum)
	}
}

func TestGetMissing(t *testing.T) {
	m := newTestManager(t)
	_, err := m.Get("nope")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	}
}

func TestCorruption(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			writeFile(t, path, []byte("\x00\x01not json at all"))
		}},
		{"truncated", func(t *testing.T, path string) {
			b := readFile(t, path)
			writeFile(t, path, b[:len(b)/2])
		}},
		{"wrong checksum", func(t *testing.T, path string) {
			b := readFile(t, path)
			edited := strings.Replace(string(b), `"hostPort":8080`, `"hostPort":8081`, 1)
			if edited == string(b) {
				t.Fatal("test setup: field to edit not found")
			}
			writeFile(t, path, []byte(edited))
		}},
		{"no data", func(t *testing.T, path string) {
			writeFile(t, path, []byte(`{"checksum":"sha256:00"}`))
		}},
		{"wrong sandbox", func(t *testing.T, path string) {
			writeFile(t, path, encodeFile([]byte(`{"version":1,"sandboxID":"other"}`)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestManager(t)
			if err := m.Put(fullCheckpoint("keep")); err != nil {
				t.Fatal(err)
			}
			if err := m.Put(fullCheckpoint("bad")); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(m.Dir(), "bad.json")
			tt.corrupt(t, path)

			_, err := m.Get("bad")
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Get: err = %v, want *CorruptError", err)
			}
			if ce.Path != path || !strings.Contains(err.Error(), path) {
				t.Errorf("CorruptError does not name the file: Path=%q Error()=%q", ce.Path, err)
			}
			if errors.Is(err, ErrNotFound) {
				t.Errorf("corrupt error must not look like ErrNotFound: %v", err)
			}
			if !strings.HasPrefix(ce.MovedTo, path+".corrupt-") {
				t.Errorf("MovedTo = %q, want %s.corrupt-<nanos>", ce.MovedTo, path)
			}
			if _, err := os.Stat(ce.MovedTo); err != nil {
				t.Errorf("moved-aside file missing: %v", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("original file still present: %v", err)
			}

			if _, err := m.Get("bad"); !errors.Is(err, ErrNotFound) {
				t.Errorf("second Get: err = %v, want ErrNotFound", err)
			}
			assertList(t, m, "keep")
		})
	}
}

func TestNewerVersionNotMovedAside(t *testing.T) {
	m := newTestManager(t)
	path := filepath.Join(m.Dir(), "future.json")
	writeFile(t, path, encodeFile([]byte(`{"version":99,"sandboxID":"future"}`)))
	_, err := m.Get("future")
	var ce *CorruptError
	if err == nil || errors.Is(err, ErrNotFound) || errors.As(err, &ce) {
		t.Fatalf("Get: err = %v, want unsupported version error", err)
	}
	var ue *UnsupportedVersionError
	if !errors.As(err, &ue) || ue.Version != 99 {
		t.Errorf("Get: err = %#v, want *UnsupportedVersionError with version 99", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("newer-version file was moved: %v", err)
	}
}

func TestLeftoverTempFileIgnored(t *testing.T) {
	m := newTestManager(t)
	if err := m.Put(fullCheckpoint("a")); err != nil {
		t.Fatal(err)
	}
	// What a crash between CreateTemp and rename would leave behind.
	writeFile(t, filepath.Join(m.Dir(), ".tmp-a-123456"), []byte(`{"checksum":"sha256:`))
	writeFile(t, filepath.Join(m.Dir(), ".tmp-b-654321"), []byte(`{"partial`))

	assertList(t, m, "a")
	if _, err := m.Get("a"); err != nil {
		t.Errorf("Get a: %v", err)
	}
	if _, err := m.Get("b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get b: err = %v, want ErrNotFound", err)
	}
	if err := m.Put(fullCheckpoint("b")); err != nil {
		t.Fatal(err)
	}
	assertList(t, m, "a", "b")

	// A restarted daemon cleans up the leftovers.
	m2, err := NewManager(m.Dir())
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(m2.Dir())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("stale temp file %s not removed", e.Name())
		}
	}
	assertList(t, m2, "a", "b")
}

func TestListIgnoresOtherFiles(t *testing.T) {
	m := newTestManager(t)
	for _, id := range []string{"a.b", "a", "a-b"} {
		if err := m.Put(&PodSandbox{SandboxID: id}); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(m.Dir(), "x.json.corrupt-1"), []byte("junk"))
	writeFile(t, filepath.Join(m.Dir(), "README"), []byte("junk"))
	writeFile(t, filepath.Join(m.Dir(), ".hidden.json"), []byte("junk"))
	if err := os.Mkdir(filepath.Join(m.Dir(), "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	assertList(t, m, "a", "a-b", "a.b")
}

func TestListEmpty(t *testing.T) {
	m := newTestManager(t)
	ids, err := m.List()
	if err != nil || len(ids) != 0 {
		t.Errorf("List = %v, %v; want empty", ids, err)
	}
}

func TestPutOverwrites(t *testing.T) {
	m := newTestManager(t)
	first := fullCheckpoint("x")
	if err := m.Put(first); err != nil {
		t.Fatal(err)
	}
	second := &PodSandbox{SandboxID: "x", Name: "renamed", IPs: []string{"10.0.0.9"}}
	if err := m.Put(second); err != nil {
		t.Fatal(err)
	}
	got, err := m.Get("x")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "renamed" || len(got.PortMappings) != 0 || !slices.Equal(got.IPs, []string{"10.0.0.9"}) {
		t.Errorf("Get after overwrite = %+v", got)
	}
	assertList(t, m, "x")
}

func TestRemoveIdempotent(t *testing.T) {
	m := newTestManager(t)
	if err := m.Put(fullCheckpoint("r")); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := m.Remove("r"); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if err := m.Remove("never-existed"); err != nil {
		t.Errorf("Remove missing: %v", err)
	}
	if _, err := m.Get("r"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Remove: err = %v, want ErrNotFound", err)
	}
	assertList(t, m)
}

func TestInvalidIDs(t *testing.T) {
	m := newTestManager(t)
	for _, id := range []string{"", "a/b", "/abs", "..", "../escape", "a..b", ".hidden", ".tmp-x", "nul\x00"} {
		if err := m.Put(&PodSandbox{SandboxID: id}); err == nil {
			t.Errorf("Put(%q) succeeded, want error", id)
		}
		if _, err := m.Get(id); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q): err = %v, want invalid ID error", id, err)
		}
		if err := m.Remove(id); err == nil {
			t.Errorf("Remove(%q) succeeded, want error", id)
		}
	}
	if err := m.Put(nil); err == nil {
		t.Error("Put(nil) succeeded, want error")
	}
	assertList(t, m)
	if entries, _ := os.ReadDir(filepath.Dir(m.Dir())); len(entries) != 1 {
		t.Errorf("files written outside the checkpoint dir: %v", entries)
	}
}

func TestConcurrent(t *testing.T) {
	m := newTestManager(t)
	const ids, rounds = 32, 20
	var wg sync.WaitGroup
	for i := range ids {
		id := fmt.Sprintf("sb-%02d", i)
		// Several goroutines per ID so same-ID operations race as well.
		for w := range 3 {
			wg.Go(func() {
				for r := range rounds {
					cp := fullCheckpoint(id)
					cp.Attempt = uint32(w*rounds + r)
					if err := m.Put(cp); err != nil {
						t.Errorf("Put %s: %v", id, err)
						return
					}
					got, err := m.Get(id)
					switch {
					case errors.Is(err, ErrNotFound): // removed by a sibling
					case err != nil:
						t.Errorf("Get %s: %v", id, err)
						return
					case got.SandboxID != id:
						t.Errorf("Get %s returned %s", id, got.SandboxID)
					}
					if r%3 == 2 {
						if err := m.Remove(id); err != nil {
							t.Errorf("Remove %s: %v", id, err)
							return
						}
					}
					if _, err := m.List(); err != nil {
						t.Errorf("List: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()

	entries, err := os.ReadDir(m.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			t.Errorf("unexpected file left in dir: %s", e.Name())
		}
	}
	if len(m.locks.locks) != 0 {
		t.Errorf("per-ID locks leaked: %d", len(m.locks.locks))
	}
}

func assertList(t *testing.T, m *Manager, want ...string) {
	t.Helper()
	got, err := m.List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("unmarshal %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestNetworkReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		cp   PodSandbox
		want bool
	}{
		{"pending", PodSandbox{Setup: SetupPending, IPs: []string{"10.0.0.2"}}, false},
		{"ready", PodSandbox{Setup: SetupReady}, true},
		{"legacy with IPs", PodSandbox{IPs: []string{"10.0.0.2"}}, true},
		{"legacy host network", PodSandbox{HostNetwork: true}, true},
		{"legacy without IPs", PodSandbox{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cp.NetworkReady(); got != tc.want {
				t.Errorf("NetworkReady() = %v, want %v", got, tc.want)
			}
		})
	}
}

// A checkpoint name that is not a regular file (a directory left by a bad
// restore) is listed, so that Get reports it instead of it being skipped in
// silence.
func TestNonRegularCheckpointReported(t *testing.T) {
	m := newTestManager(t)
	if err := os.Mkdir(filepath.Join(m.Dir(), "weird.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	assertList(t, m, "weird")
	_, err := m.Get("weird")
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a directory: err = %v, want a read error", err)
	}
}
