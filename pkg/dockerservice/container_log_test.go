package dockerservice

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/network"
)

// criLines reads a CRI log file as "stream tag text" lines, timestamps
// dropped.
func criLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if l == "" {
			continue
		}
		entry, err := crilog.ParseLine([]byte(l))
		if err != nil {
			t.Fatalf("%s: line %q is not in CRI format: %v", path, l, err)
		}
		tag := "F"
		if entry.Partial {
			tag = "P"
		}
		out = append(out, string(entry.Stream)+" "+tag+" "+string(entry.Content))
	}
	return out
}

func waitLines(t *testing.T, path string, want ...string) {
	t.Helper()
	var got []string
	testutil.Eventually(t, "log lines "+strings.Join(want, " | "), func() bool {
		got = criLines(t, path)
		return strings.Join(got, "\n") == strings.Join(want, "\n")
	})
}

func TestStartContainerWritesCRILog(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("logger"))
	path := e.status(t, id).LogPath
	e.docker.AddLog(id, false, "hello\n")
	e.docker.AddLog(id, true, "oops\n")
	e.start(t, id)
	waitLines(t, path, "stdout F hello", "stderr F oops")
	e.docker.AddLog(id, false, "partial")
	waitLines(t, path, "stdout F hello", "stderr F oops", "stdout P partial")

	// kubelet rotates: it renames the file and asks for a fresh one.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ds.ReopenContainerLog(context.Background(), &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	e.docker.AddLog(id, false, " end\n")
	waitLines(t, path, "stdout F  end")
	if got := criLines(t, path+".1"); len(got) != 3 {
		t.Errorf("rotated file = %q", got)
	}

	// Once the container is gone there is nothing to reopen.
	if _, err := e.ds.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ds.ReopenContainerLog(context.Background(), &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("reopen of a stopped container: %v, want FailedPrecondition", err)
	}
	if _, err := e.ds.ReopenContainerLog(context.Background(), &runtimeapi.ReopenContainerLogRequest{ContainerId: "nope"}); codeOf(err) != codes.NotFound {
		t.Errorf("reopen of an unknown container: %v, want NotFound", err)
	}
}

func TestStartContainerRefusesUnwritableLog(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("logger"))
	// A file where the log directory should be, made after the create
	// (which would have refused it).
	blocker := e.sandbox.LogDirectory
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker+"/logger", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := e.ds.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	if codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("got %v, want FailedPrecondition", err)
	}
	if n := e.docker.Count("ContainerStart"); n != 1 { // the sandbox's
		t.Errorf("Docker started the container although its log cannot be written")
	}
}

// TestLogFollowersResumeAfterRestart: a new netshim on the same Docker
// goes on writing the files of running containers, with no line lost or
// written twice.
func TestLogFollowersResumeAfterRestart(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("survivor"))
	path := e.status(t, id).LogPath
	e.docker.AddLog(id, false, "one\n")
	e.start(t, id)
	waitLines(t, path, "stdout F one")

	e.ds.Close() // stops the followers, as a netshim shutdown does
	e.docker.AddLog(id, false, "two\n")

	ds2, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}, e.docker, e.ckpt, []network.NetworkPlugin{&fakePlugin{}})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ds2)
	waitLines(t, path, "stdout F one", "stdout F two")
	e.docker.AddLog(id, false, "three\n")
	waitLines(t, path, "stdout F one", "stdout F two", "stdout F three")
}

// TestExitShowsOnlyWithTheWholeLog: kubelet and critest read the log as
// soon as they see a container exited; everything it printed must be in
// the file by then.
func TestExitShowsOnlyWithTheWholeLog(t *testing.T) {
	e := newPodEnv(t)
	for i := range 20 {
		cfg := ctrConfig("quick")
		cfg.Metadata.Attempt = uint32(i)
		cfg.LogPath = fmt.Sprintf("quick/%d.log", i)
		id := e.create(t, cfg)
		path := e.status(t, id).LogPath
		e.start(t, id)
		e.docker.AddLog(id, false, "last words\n")
		e.docker.ExitBehindBack(id, 0, false)
		testutil.Eventually(t, "the exit", func() bool {
			return e.status(t, id).State == runtimeapi.ContainerState_CONTAINER_EXITED
		})
		if got := criLines(t, path); len(got) != 1 || got[0] != "stdout F last words" {
			t.Fatalf("attempt %d: exited with log %q, want the last line in it", i, got)
		}
	}
}

// TestExitedWhileDownLogWrittenAfterRestart: what a container wrote between
// netshim's stop and its exit reaches its file once netshim is back (it is
// what `kubectl logs --previous` shows), and its exit shows only with the
// whole log in the file. A container whose file kubelet removed does not
// get it back.
func TestExitedWhileDownLogWrittenAfterRestart(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("dies"))
	path := e.status(t, id).LogPath
	cfg := ctrConfig("removed")
	removedID := e.create(t, cfg)
	removedPath := e.status(t, removedID).LogPath
	e.docker.AddLog(id, false, "one\n")
	e.start(t, id)
	e.start(t, removedID)
	waitLines(t, path, "stdout F one")

	e.ds.Close() // netshim stops
	e.docker.AddLog(id, false, "two\n")
	e.docker.AddLog(id, true, "last words")
	e.docker.ExitBehindBack(id, 1, false)
	e.docker.AddLog(removedID, false, "gone\n")
	e.docker.ExitBehindBack(removedID, 0, false)
	if err := os.Remove(removedPath); err != nil {
		t.Fatal(err)
	}

	ds2, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}, e.docker, e.ckpt, []network.NetworkPlugin{&fakePlugin{}})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ds2)
	status := func(id string) *runtimeapi.ContainerStatus {
		resp, err := ds2.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	testutil.Eventually(t, "the exit", func() bool {
		return status(id).State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	// No wait here: exited means the log is complete.
	if got, want := strings.Join(criLines(t, path), "|"), "stdout F one|stdout F two|stderr P last words"; got != want {
		t.Errorf("log of the container that exited while netshim was down = %q, want %q", got, want)
	}
	testutil.Eventually(t, "the drain to end", func() bool {
		_, copying := ds2.containers.streams.CopyingSince(removedID)
		return !copying
	})
	if _, err := os.Lstat(removedPath); !os.IsNotExist(err) {
		t.Errorf("removed log file written again: %v", err)
	}
	if got := status(removedID).State; got != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("container with a removed log: %v, want exited", got)
	}
}

// The exit of a container whose log is being copied shows only once the
// copy is done, for at most logs.DrainGrace: counted from the exit, or from
// when the copy began for a container that exited long ago while netshim
// was down (the old rule counted from the exit only, so such a container
// showed exited while its drain had barely begun).
func TestVisibleStateWhileLogIsCopied(t *testing.T) {
	e := newTestEnv(t)
	now := time.Now()
	cases := []struct {
		name     string
		finished time.Time
		marked   bool
		want     runtimeapi.ContainerState
	}{
		{"not copying", now, false, runtimeapi.ContainerState_CONTAINER_EXITED},
		{"copying after a recent exit", now, true, runtimeapi.ContainerState_CONTAINER_RUNNING},
		{"draining after an old exit", now.Add(-time.Hour), true, runtimeapi.ContainerState_CONTAINER_RUNNING},
		{"old exit, not copying", now.Add(-time.Hour), false, runtimeapi.ContainerState_CONTAINER_EXITED},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &store.Record{
				ID: fmt.Sprintf("c%d", i), Kind: store.KindContainer, State: store.StateExited,
				StartedAt: tc.finished.Add(-time.Minute).UnixNano(), FinishedAt: tc.finished.UnixNano(),
			}
			if tc.marked {
				defer e.ds.containers.streams.MarkStarting(rec.ID)()
			}
			if got := e.ds.visibleState(rec); got != tc.want {
				t.Errorf("visibleState = %v, want %v", got, tc.want)
			}
		})
	}
}
