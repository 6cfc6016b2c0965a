//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// workloadImage is hack/images.sh's static busybox (sh, httpd, wget, ps).
const workloadImage = "netshim.local/busybox:latest"

// requireWorkloadImage fails the test with the fix when the image is
// missing.
func requireWorkloadImage(t *testing.T) {
	t.Helper()
	if out, err := runCmd("docker", "image", "inspect", "--format", "{{.Id}}", workloadImage); err != nil {
		t.Fatalf("e2e: image %s is missing (hack/images.sh builds it): %v\n%s", workloadImage, err, out)
	}
}

// writeContainerJSON writes a crictl container config running cmd in the
// workload image, logging to <name>.log in the pod's log directory.
func (e *env) writeContainerJSON(name string, cmd ...string) string {
	e.t.Helper()
	data, err := json.MarshalIndent(harness.Container(name, workloadImage,
		harness.WithCommand(cmd...),
		harness.WithContainerLabels(map[string]string{"nse2e": e.namespace, "container": name}),
	), "", "  ")
	if err != nil {
		e.t.Fatalf("encoding container config: %v", err)
	}
	path := filepath.Join(e.dir, name+"-container.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		e.t.Fatalf("writing %s: %v", path, err)
	}
	return path
}

// crictlRun creates and starts a container with crictl and returns its ID.
func (e *env) crictlRun(podID, podJSON, name string, cmd ...string) string {
	e.t.Helper()
	id := strings.TrimSpace(e.mustCrictl("create", podID, e.writeContainerJSON(name, cmd...), podJSON))
	if len(id) != 64 {
		e.t.Fatalf("crictl create printed %q, want a 64-character container ID", id)
	}
	e.mustCrictl("start", id)
	return id
}

// inspectContainer is the part of `crictl inspect -o json` the tests read.
type inspectContainer struct {
	State    string `json:"state"`
	ExitCode int32  `json:"exitCode"`
	Reason   string `json:"reason"`
	LogPath  string `json:"logPath"`
}

func (e *env) inspectContainer(id string) inspectContainer {
	e.t.Helper()
	out := e.mustCrictl("inspect", "-o", "json", id)
	var v struct {
		Status inspectContainer `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("parsing crictl inspect output: %v\n%s", err, out)
	}
	return v.Status
}

// waitExited waits until the container has exited and returns its status.
func (e *env) waitExited(id string) inspectContainer {
	e.t.Helper()
	var st inspectContainer
	if !poll(startDeadline, func() bool {
		st = e.inspectContainer(id)
		return st.State == "CONTAINER_EXITED"
	}) {
		e.t.Fatalf("container %s did not exit within %s: %+v\nlogs: %s", id, startDeadline, st, e.crictlLogs(id))
	}
	return st
}

// crictlLogs is `crictl logs`: stdout and stderr together.
func (e *env) crictlLogs(id string) string {
	e.t.Helper()
	so, se, err := e.crictl("logs", id)
	if err != nil {
		e.t.Fatalf("crictl logs %s: %v\n%s", id, err, se)
	}
	return so + se
}

// hostProcessesWith lists live host processes whose command line contains
// marker (zombies do not count: orphans are not reaped on every machine).
func hostProcessesWith(t *testing.T, marker string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var found []string
	for _, ent := range entries {
		if _, err := strconv.Atoi(ent.Name()); err != nil || ent.Name() == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			continue
		}
		found = append(found, ent.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

// TestContainersInAPod: two containers share the pod's network (wget from
// one reaches httpd in the other on localhost), crictl logs shows each
// one's output from CRI-format files, an exit 3 is reported with reason
// Error, ExecSync returns output and exit codes, and an ExecSync past its
// timeout returns and leaves no process behind; stats are read from the
// cgroups; Stop and Remove are idempotent.
func TestContainersInAPod(t *testing.T) {
	e := newEnv(t, envOptions{})
	requireWorkloadImage(t)
	e.start()
	podJSON := e.writePodJSON("ctrs")
	podID := e.runp(podJSON)

	server := e.crictlRun(podID, podJSON, "server", "sh", "-c",
		"mkdir -p /www && echo hello-from-httpd >/www/index.html && echo server-up && exec httpd -f -p 8080 -h /www")
	client := e.crictlRun(podID, podJSON, "client", "sh", "-c",
		"for i in $(seq 1 100); do if wget -qO- http://localhost:8080/; then exit 0; fi; sleep 0.1; done; echo no answer >&2; exit 1")

	st := e.waitExited(client)
	logs := e.crictlLogs(client)
	if st.ExitCode != 0 || st.Reason != "Completed" {
		t.Fatalf("client: exit %d reason %q, want 0 Completed (wget of localhost:8080 from the other container); logs:\n%s", st.ExitCode, st.Reason, logs)
	}
	if !strings.Contains(logs, "hello-from-httpd") {
		t.Errorf("crictl logs client = %q, want the page it fetched", logs)
	}
	if st := e.inspectContainer(server); st.State != "CONTAINER_RUNNING" {
		t.Fatalf("server: state %s, want running", st.State)
	}
	if logs := e.crictlLogs(server); !strings.Contains(logs, "server-up") {
		t.Errorf("crictl logs server = %q, want server-up", logs)
	}
	// The file is in CRI format at <log_directory>/<log_path>.
	logFile := filepath.Join(e.dir, "logs", "ctrs", "client.log")
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("reading %s: %v", logFile, err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	if f := strings.SplitN(first, " ", 4); len(f) != 4 || f[1] != "stdout" || f[2] != "F" || f[3] != "hello-from-httpd" {
		t.Errorf("%s: first line %q, want \"<time> stdout F hello-from-httpd\"", logFile, first)
	} else if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
		t.Errorf("%s: timestamp %q: %v", logFile, f[0], err)
	}

	failing := e.crictlRun(podID, podJSON, "failing", "sh", "-c", "echo bye; exit 3")
	st = e.waitExited(failing)
	if st.ExitCode != 3 || st.Reason != "Error" {
		t.Errorf("failing: exit %d reason %q, want 3 Error", st.ExitCode, st.Reason)
	}
	if logs := e.crictlLogs(failing); strings.TrimSpace(logs) != "bye" {
		t.Errorf("crictl logs failing = %q, want bye", logs)
	}

	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: server, Cmd: []string{"sh", "-c", "hostname; echo oops >&2; exit 7"}, Timeout: 10})
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if strings.TrimSpace(string(resp.Stdout)) != "ctrs" || string(resp.Stderr) != "oops\n" || resp.ExitCode != 7 {
		t.Errorf("ExecSync: stdout %q (want the pod's hostname ctrs) stderr %q exit %d", resp.Stdout, resp.Stderr, resp.ExitCode)
	}

	// Past its timeout: the call returns DeadlineExceeded in about the
	// timeout, and neither the shell nor its sleep survives.
	const marker = "373737"
	start := time.Now()
	_, err = e.client.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: server, Cmd: []string{"sh", "-c", "sleep " + marker + "; echo never"}, Timeout: 2})
	took := time.Since(start)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("ExecSync past its timeout: %v, want DeadlineExceeded", err)
	}
	if took < 2*time.Second || took > 10*time.Second {
		t.Errorf("ExecSync with a 2s timeout returned after %s", took)
	}
	if left := hostProcessesWith(t, marker); len(left) > 0 {
		t.Errorf("processes of the timed-out exec survive: %q", left)
	}
	resp, err = e.client.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: server, Cmd: []string{"ps"}, Timeout: 10})
	if err != nil {
		t.Fatalf("ExecSync ps: %v", err)
	}
	if strings.Contains(string(resp.Stdout), marker) {
		t.Errorf("ps in the container still shows the timed-out exec:\n%s", resp.Stdout)
	}
	t.Logf("ExecSync with 2s timeout returned after %s", took.Round(time.Millisecond))

	// Stats come from the container's cgroups.
	stats, err := e.client.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: server})
	if err != nil {
		t.Fatalf("ContainerStats: %v", err)
	}
	if s := stats.Stats; s.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 || s.GetMemory().GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("ContainerStats of the running server: cpu %v memory %v, want usage figures", s.GetCpu(), s.GetMemory())
	}

	// Stop and remove are idempotent.
	for range 2 {
		if _, err := e.client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: server, Timeout: 2}); err != nil {
			t.Errorf("StopContainer: %v", err)
		}
	}
	if st := e.inspectContainer(server); st.State != "CONTAINER_EXITED" {
		t.Errorf("server after stop: %s", st.State)
	}
	for range 2 {
		if _, err := e.client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: server}); err != nil {
			t.Errorf("RemoveContainer: %v", err)
		}
	}
	if _, err := e.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: server}); status.Code(err) != codes.NotFound {
		t.Errorf("ContainerStatus of a removed container: %v, want NotFound", err)
	}
	if ids := dockerIDs(t, "id="+server); len(ids) != 0 {
		t.Errorf("docker still has the removed container %s", server)
	}
}
