package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/netshim/netshim/pkg/procutil"
)

func TestParseState(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []stateEntry
		wantErr string
	}{
		{
			name: "every kind, comments and blank lines",
			in: "# a comment\n\ntmp /tmp/nskub.1\npid kubelet 123 /tmp/nskub.1/k.json\npid netshim 124\n" +
				"sysctl vm.panic_on_oom 0\ncgroup /sys/fs/cgroup/cpu/kubepods\ndir /var/log/pods\n" +
				"glob /var/log/pods/ns_*\nlink nskub0\nmount /tmp/nskub.1/kubelet\n",
			want: []stateEntry{
				{"tmp", []string{"/tmp/nskub.1"}},
				{"pid", []string{"kubelet", "123", "/tmp/nskub.1/k.json"}},
				{"pid", []string{"netshim", "124"}},
				{"sysctl", []string{"vm.panic_on_oom", "0"}},
				{"cgroup", []string{"/sys/fs/cgroup/cpu/kubepods"}},
				{"dir", []string{"/var/log/pods"}},
				{"glob", []string{"/var/log/pods/ns_*"}},
				{"link", []string{"nskub0"}},
				{"mount", []string{"/tmp/nskub.1/kubelet"}},
			},
		},
		{name: "the shell script's format", in: "tmp /tmp/nskub.X\npid dockerd 9\ndir /var/lib/kubelet\n",
			want: []stateEntry{{"tmp", []string{"/tmp/nskub.X"}}, {"pid", []string{"dockerd", "9"}}, {"dir", []string{"/var/lib/kubelet"}}}},
		{name: "unknown kind", in: "tmp /t\nfrob x\n", wantErr: `line 2: unknown kind "frob"`},
		{name: "too few arguments", in: "sysctl vm.panic_on_oom\n", wantErr: "takes 2 to 2 arguments"},
		{name: "too many arguments", in: "dir /a /b\n", wantErr: "takes 1 to 1 arguments"},
		{name: "bad pid", in: "pid kubelet x\n", wantErr: `bad pid "x"`},
		{name: "pid 1", in: "pid init 1\n", wantErr: `bad pid "1"`},
		{name: "relative path", in: "tmp tmp/x\n", wantErr: "absolute path"},
		{name: "root", in: "dir /\n", wantErr: "other than /"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseState(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestHostGuardRecordsAndRejects(t *testing.T) {
	_, roots := fakeHost(t)
	state := filepath.Join(t.TempDir(), "state")
	g, err := NewHostGuard(state, roots, WithGuardLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.RecordTempDir("/tmp/a b"); err == nil {
		t.Error("a path with a space was accepted")
	}
	if err := g.SaveSysctls("vm/../x"); err == nil {
		t.Error("a bad sysctl name was accepted")
	}
	if err := g.RemoveAtRestore("/x/["); err == nil {
		t.Error("a bad glob was accepted")
	}
	if err := g.SaveSysctls(KubeletSysctls...); err != nil {
		t.Fatal(err)
	}
	// Saved once: a second save (a restarted kubelet) keeps the first value.
	if err := g.SaveSysctls("vm.panic_on_oom"); err != nil {
		t.Fatal(err)
	}
	if err := g.RecordProcess("kubelet", 4242, "/tmp/x"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := parseState(f)
	if err != nil {
		t.Fatalf("the guard wrote a state file it cannot read: %v", err)
	}
	if len(got) != len(KubeletSysctls)+1 || got[0].String() != "sysctl vm.overcommit_memory 7" || got[len(got)-1].String() != "pid kubelet 4242 /tmp/x" {
		t.Fatalf("state %v", got)
	}
}

// A run killed before Restore leaves its state file; the next guard on it
// undoes that run's changes before anything else.
func TestHostGuardRecoversAKilledRun(t *testing.T) {
	host, roots := fakeHost(t)
	state := filepath.Join(t.TempDir(), "state")
	g, err := NewHostGuard(state, roots, WithGuardLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(host, "nskub.1")
	logs := filepath.Join(host, "var/log/pods")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(tmp, 0o755))
	must(g.RecordTempDir(tmp))
	must(g.SaveSysctls("kernel.panic"))
	must(g.WatchCgroups("kubepods"))
	must(g.WatchDirs(filepath.Join(logs, "x")))
	must(g.RemoveAtRestore(filepath.Join(logs, "ns_*")))
	// Not this run's process any more (pid reused): left alone.
	must(g.RecordProcess("kubelet", os.Getpid(), "/no/such/marker"))
	// What the run did before it was killed.
	must(os.MkdirAll(filepath.Join(host, "cgroup/cpu/kubepods/besteffort/pod1"), 0o755))
	must(os.MkdirAll(filepath.Join(logs, "ns_pod_uid/c"), 0o755))
	must(os.WriteFile(filepath.Join(tmp, "f"), nil, 0o644))
	must(os.WriteFile(filepath.Join(host, "sys/kernel/panic"), []byte("10"), 0o644))

	if _, err := NewHostGuard(state, roots, WithGuardLog(t.Logf)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tmp, filepath.Join(host, "cgroup/cpu/kubepods"), logs, state} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left after recovery (%v)", p, err)
		}
	}
	if v, _ := os.ReadFile(filepath.Join(host, "sys/kernel/panic")); string(v) != "7" {
		t.Errorf("kernel.panic = %q after recovery, want 7", v)
	}
	if _, err := os.Stat(filepath.Join(host, "var/log")); err != nil {
		t.Errorf("var/log existed before and must stay: %v", err)
	}
}

func TestHostGuardKeepsStateWhenRestoreFails(t *testing.T) {
	host, roots := fakeHost(t)
	state := filepath.Join(t.TempDir(), "state")
	g, err := NewHostGuard(state, roots, WithGuardLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(host, "var/lib/kubelet")
	if err := g.WatchDirs(d); err != nil {
		t.Fatal(err)
	}
	// A file kubelet's run left in a dir it created: the dir cannot go.
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err = g.Restore()
	if err == nil || !strings.Contains(err.Error(), "did not exist before the run and is still there") {
		t.Fatalf("Restore: %v", err)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("the state file must stay for the next run: %v", err)
	}
	if err := os.Remove(filepath.Join(d, "f")); err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("state file after a clean Restore: %v", err)
	}
}

func TestMountsUnder(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "mountinfo")
	data := "22 27 0:21 / /proc rw - proc proc rw\n" +
		"100 27 8:1 /tmp/k /tmp/k rw shared:1 - ext4 /dev/sda1 rw\n" +
		"101 100 0:50 / /tmp/k/pods/v1 rw - tmpfs tmpfs rw\n" +
		"102 100 0:51 / /tmp/k/a\\040b rw - tmpfs tmpfs rw\n" +
		"103 27 0:52 / /tmp/kx rw - tmpfs tmpfs rw\n" +
		"104 100 8:1 /tmp/k /tmp/k rw - ext4 /dev/sda1 rw\n"
	if err := os.WriteFile(mi, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := mountsUnder(mi, "/tmp/k/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/tmp/k/pods/v1", "/tmp/k/a b", "/tmp/k", "/tmp/k"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if u := procutil.UnescapeMountinfo(`/a\040b\134c\0`); u != `/a b\c\0` {
		t.Errorf("unescape: %q", u)
	}
}
