package dockerservice

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// The netns of a sandbox is handed out (to CNI through the network host,
// to port-forward through PodNetNS) only while the index's pid is a
// process of the infra container. The test process stands in for the
// infra container's process; a fake procRoot says which cgroup it is in.
func TestSandboxNetNSChecksTheInfraPid(t *testing.T) {
	e := newStreamingEnv(t)
	e.ds.containers.netnsPath = e.ds.containers.verifiedNetNSPath
	host := &networkHost{e.ds}
	ctx := context.Background()

	setPid := func(pid int) {
		if !e.ds.store().Update(e.sandbox, func(r *store.Record) { r.Pid = pid }) {
			t.Fatal("the sandbox is not in the index")
		}
	}
	setCgroup := func(pid int, cgroup string) string {
		root := t.TempDir()
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
		return root
	}
	self := os.Getpid()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		pid    int
		cgroup string
		want   string // "" for a path, else part of the error
	}{
		{"the infra container's process", self, "0::/system.slice/docker-" + e.sandbox + ".scope\n", ""},
		{"a pid reused outside the container", self, "0::/system.slice/docker-" + strings.Repeat("9", 64) + ".scope\n", "now belongs to another process"},
		{"a pid reused by a host process", self, "0::/user.slice\n", "now belongs to another process"},
		{"an exited process", gone.Process.Pid, "", "has exited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setPid(tc.pid)
			root := t.TempDir() // an exited process has no /proc entry
			if tc.cgroup != "" {
				root = setCgroup(tc.pid, tc.cgroup)
			}
			e.ds.containers.procRoot = root
			if tc.want == "" {
				want := filepath.Join(root, strconv.Itoa(tc.pid), "ns", "net")
				if got, err := host.GetNetNS(ctx, e.sandbox); err != nil || got != want {
					t.Errorf("GetNetNS = %q, %v; want %q", got, err, want)
				}
				if got, err := e.ds.PodNetNS(ctx, e.sandbox); err != nil || got != want {
					t.Errorf("PodNetNS = %q, %v; want %q", got, err, want)
				}
				return
			}
			for what, f := range map[string]func(context.Context, string) (string, error){"GetNetNS": host.GetNetNS, "PodNetNS": e.ds.PodNetNS} {
				got, err := f(ctx, e.sandbox)
				if got != "" || codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is not running") || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s = %q, %v; want FailedPrecondition: not running, %s", what, got, err, tc.want)
				}
			}
		})
	}
	// A sandbox the index knows stopped is no error for CNI's teardown.
	if got, err := host.GetNetNS(ctx, e.stoppedSandbox); got != "" || err != nil {
		t.Errorf("GetNetNS of a stopped sandbox = %q, %v; want \"\", nil", got, err)
	}
}
