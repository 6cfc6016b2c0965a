package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A restarting daemon comes back after each exit, as a systemd unit with
// Restart=always (kubeadm's kubelet crash-loops until it is configured),
// and Stop ends that for good.
func TestNodeDaemonRestartsUntilStopped(t *testing.T) {
	n := &Node{Name: "unit", Dir: t.TempDir()}
	d, err := n.StartDaemon("crasher", true, "sh", "-c", "echo started; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if !Eventually(30*time.Second, func() bool { return d.Starts() >= 2 }) {
		t.Fatalf("started %d time(s), want a restart after the exit", d.Starts())
	}
	if err := d.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The supervisor has returned: nothing starts the daemon again.
	select {
	case <-d.done:
	default:
		t.Error("Stop returned with the supervisor still running")
	}
	if d.Pid() != 0 {
		t.Errorf("pid %d after Stop", d.Pid())
	}
	data, err := os.ReadFile(filepath.Join(n.Dir, "crasher.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), "started"); got < 2 {
		t.Errorf("log has %d starts, want every start's output appended:\n%s", got, data)
	}
}

// A daemon that is not restarted is stopped with SIGTERM by Stop, and a
// stopped daemon has no pid.
func TestNodeDaemonStop(t *testing.T) {
	n := &Node{Name: "unit", Dir: t.TempDir(), Env: []string{"NODE_MARK=unit"}}
	d, err := n.StartDaemon("sleeper", false, "sh", "-c", `echo "$NODE_MARK"; exec sleep 300`)
	if err != nil {
		t.Fatal(err)
	}
	if !Eventually(10*time.Second, func() bool { return strings.Contains(d.LogTail(5), "unit") }) {
		t.Fatalf("the node's environment did not reach the daemon: %q", d.LogTail(5))
	}
	if d.Pid() == 0 {
		t.Fatal("no pid while running")
	}
	if err := d.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d.Pid() != 0 {
		t.Errorf("pid %d after Stop", d.Pid())
	}
}
