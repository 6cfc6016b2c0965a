package dockerservice

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/events"
	"github.com/netshim/netshim/pkg/network"
)

const (
	evCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	evStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	evStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	evDeleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

// settleEvents waits until the events of what a test did so far are
// published, so that a subscriber made next sees only what follows.
func settleEvents(t *testing.T, ds *DockerService) {
	t.Helper()
	<-ds.events.Seeded()
	testutil.Eventually(t, "container events published", ds.events.Idle)
}

// eventStream is a GetContainerEvents client over real gRPC.
type eventStream struct {
	events chan *runtimeapi.ContainerEventResponse
	ended  chan error
}

// subscribeEvents opens an events stream and returns once the server has
// subscribed it: every change after that is delivered.
func subscribeEvents(t *testing.T, c criClients) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := c.rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Header(); err != nil {
		t.Fatalf("events stream header: %v", err)
	}
	es := &eventStream{events: make(chan *runtimeapi.ContainerEventResponse, 10000), ended: make(chan error, 1)}
	go func() {
		for {
			ev, err := s.Recv()
			if err != nil {
				es.ended <- err
				return
			}
			es.events <- ev
		}
	}()
	return es
}

// next returns the next event, failing the test if none comes in time.
func (s *eventStream) next(t *testing.T) *runtimeapi.ContainerEventResponse {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case err := <-s.ended:
		t.Fatalf("events stream ended: %v", err)
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatalf("no event within %s", testutil.EventuallyTimeout)
	}
	return nil
}

// expect takes the next event and checks what it is for, and that it
// happened between two moments of the test.
func (s *eventStream) expect(t *testing.T, id string, typ runtimeapi.ContainerEventType, after time.Time) *runtimeapi.ContainerEventResponse {
	t.Helper()
	ev := s.next(t)
	if ev.ContainerId != id || ev.ContainerEventType != typ {
		t.Fatalf("event %s for %.12s, want %s for %.12s", ev.ContainerEventType, ev.ContainerId, typ, id)
	}
	if at := time.Unix(0, ev.CreatedAt); at.Before(after) || at.After(time.Now()) {
		t.Errorf("%s event created at %s, not between %s and now", typ, at, after)
	}
	if ev.PodSandboxStatus.GetMetadata() == nil {
		t.Errorf("%s event for %.12s has no sandbox metadata: kubelet drops it", typ, id)
	}
	return ev
}

// statusIn finds a container's status in an event.
func statusIn(t *testing.T, ev *runtimeapi.ContainerEventResponse, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	for _, st := range ev.ContainersStatuses {
		if st.Id == id {
			return st
		}
	}
	t.Fatalf("%s event has no status of container %.12s", ev.ContainerEventType, id)
	return nil
}

// A pod's whole life, through the RPCs kubelet makes, gives the events
// containerd gives, each carrying statuses at least as new as the event,
// which the status RPCs then agree with.
func TestContainerEventsFollowPodLifecycle(t *testing.T) {
	e := newTestEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	c := serveCRI(t, e.ds)
	ev := subscribeEvents(t, c)
	ctx := context.Background()

	cfg := podConfig("web")
	cfg.LogDirectory = filepath.Join(t.TempDir(), "pods", "web")
	before := time.Now()
	run, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	sb := run.PodSandboxId
	created := ev.expect(t, sb, evCreated, before)
	if created.PodSandboxStatus.Id != sb || created.PodSandboxStatus.Metadata.Uid != "uid-web" {
		t.Errorf("sandbox CREATED carries status %v", created.PodSandboxStatus)
	}
	started := ev.expect(t, sb, evStarted, before)
	if st := started.PodSandboxStatus; st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Network.GetIp() == "" {
		t.Errorf("sandbox STARTED before it is ready with an IP: %v", st)
	}
	if len(started.ContainersStatuses) != 0 {
		t.Errorf("sandbox STARTED lists %d containers, want none", len(started.ContainersStatuses))
	}

	before = time.Now()
	cr, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: ctrConfig("app"), SandboxConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.ContainerId
	got := ev.expect(t, id, evCreated, before)
	if st := statusIn(t, got, id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Metadata.GetName() != "app" {
		t.Errorf("CREATED carries %v", st)
	}
	if got.PodSandboxStatus.Id != sb || got.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("CREATED carries sandbox status %v", got.PodSandboxStatus)
	}

	before = time.Now()
	if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	got = ev.expect(t, id, evStarted, before)
	if st := statusIn(t, got, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 {
		t.Errorf("STARTED carries %v", st)
	}

	before = time.Now()
	if _, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	got = ev.expect(t, id, evStopped, before)
	if st := statusIn(t, got, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.FinishedAt == 0 || st.Reason != reasonCompleted {
		t.Errorf("STOPPED carries %v", st)
	}
	// A kubelet that relists on the event sees the exit.
	if st, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("ContainerStatus after STOPPED: %v, %v", st.GetStatus().GetState(), err)
	}

	before = time.Now()
	if _, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	got = ev.expect(t, id, evDeleted, before)
	if len(got.ContainersStatuses) != 0 {
		t.Errorf("DELETED still lists %d containers", len(got.ContainersStatuses))
	}

	// The pod network goes before the infra container: the sandbox stops
	// being READY then, which is its STOPPED.
	before = time.Now()
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	got = ev.expect(t, sb, evStopped, before)
	if got.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox STOPPED carries %v", got.PodSandboxStatus)
	}

	before = time.Now()
	if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	got = ev.expect(t, sb, evDeleted, before)
	// kubelet 1.36 finds the pod to forget by the event's sandbox status.
	if st := got.PodSandboxStatus; st.Id != sb || st.Metadata.Uid != "uid-web" || st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox DELETED carries %v", st)
	}
	if _, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb}); status.Code(err) != codes.NotFound {
		t.Errorf("PodSandboxStatus after DELETED: %v, want NotFound", err)
	}
	select {
	case extra := <-ev.events:
		t.Errorf("unexpected %s event for %.12s", extra.ContainerEventType, extra.ContainerId)
	default:
	}
}

// Changes Docker reports that netshim did not make give events too.
func TestContainerEventsForChangesBehindNetshimsBack(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("app"))
	e.start(t, id)
	other := e.create(t, ctrConfig("other"))
	settleEvents(t, e.ds)
	ev := subscribeEvents(t, serveCRI(t, e.ds))

	before := time.Now()
	e.docker.ExitBehindBack(id, 3, true)
	got := ev.expect(t, id, evStopped, before)
	if st := statusIn(t, got, id); st.ExitCode != 3 || st.Reason != reasonOOMKilled {
		t.Errorf("STOPPED carries %v", st)
	}
	statusIn(t, got, other) // the pod's other containers are there too

	before = time.Now()
	e.docker.RemoveBehindBack(id)
	ev.expect(t, id, evDeleted, before)

	// The infra container dies: the sandbox is no longer READY.
	before = time.Now()
	e.docker.KillBehindBack(e.sandboxID)
	got = ev.expect(t, e.sandboxID, evStopped, before)
	if got.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox STOPPED carries %v", got.PodSandboxStatus)
	}
	if len(got.ContainersStatuses) != 1 || got.ContainersStatuses[0].Id != other {
		t.Errorf("sandbox STOPPED lists %d containers, want the one left", len(got.ContainersStatuses))
	}
}

// An exit shows in events when it shows in ContainerStatus: not while the
// container's log is still being copied.
func TestContainerStoppedOnlyOnceItsExitShows(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("app"))
	e.start(t, id)
	settleEvents(t, e.ds)
	ev := subscribeEvents(t, serveCRI(t, e.ds))

	// As while StartContainer sets the log up: the exit is held back.
	done := e.ds.containers.streams.MarkStarting(id)
	e.docker.ExitBehindBack(id, 0, false)
	testutil.Eventually(t, "exit in the index", func() bool { r, _ := e.ds.store().Get(id); return !r.Running() })
	if st := e.status(t, id).State; st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("ContainerStatus shows %v while the log is copied, want RUNNING", st)
	}
	// Marks are taken in order: had the exit given an event, it would
	// come before this one.
	before := time.Now()
	other := e.create(t, ctrConfig("other"))
	ev.expect(t, other, evCreated, before)

	before = time.Now()
	done()
	got := ev.expect(t, id, evStopped, before)
	if st := statusIn(t, got, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("STOPPED carries %v", st)
	}
}

// What exists when netshim starts is not news: the first events are those
// of changes after the first sync. The one exception is a change readers
// see after it: an exit held back while its log is drained at start-up.
func TestNoContainerEventsForStartUpState(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("app"))
	e.start(t, id)
	exited := func(name, logPath string) string {
		cfg := ctrConfig(name)
		cfg.LogPath = logPath
		c := e.create(t, cfg)
		e.start(t, c)
		e.docker.ExitBehindBack(c, 1, false)
		testutil.Eventually(t, "exit in the index", func() bool { r, _ := e.ds.store().Get(c); return !r.Running() })
		return c
	}
	quiet := exited("quiet", "")
	drained := exited("drained", "drained/0.log")

	// A second netshim, subscribed to before it has read Docker.
	e.docker.SetDown(true)
	ds, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}, e.docker, e.ckpt, []network.NetworkPlugin{&fakePlugin{}})
	if err != nil {
		t.Fatal(err)
	}
	ev := subscribeEvents(t, serveCRI(t, ds))
	e.docker.SetDown(false)
	startService(t, ds)
	select {
	case <-ds.events.Seeded():
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("events baseline not taken")
	}

	// The drain may end before or after the baseline: STOPPED for it
	// only in the second case. Then it comes before the kill's.
	testutil.Eventually(t, "drained exit shown", func() bool {
		r, _ := ds.store().Get(drained)
		return ds.visibleState(r) == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	settleEvents(t, ds)
	before := time.Now()
	e.docker.KillBehindBack(id)
	x := ev.next(t)
	if x.ContainerId == drained && x.ContainerEventType == evStopped {
		x = ev.next(t)
	}
	if x.ContainerId != id || x.ContainerEventType != evStopped || x.CreatedAt < before.UnixNano() {
		t.Errorf("first event %s for %.12s, want STOPPED for %.12s (%.12s, %.12s and the sandbox were there before)", x.ContainerEventType, x.ContainerId, id, quiet, drained)
	}
}

// fakeEventsServer is the server side of an events stream whose client
// reads only when the test lets it.
type fakeEventsServer struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *runtimeapi.ContainerEventResponse
}

func (s *fakeEventsServer) Context() context.Context     { return s.ctx }
func (s *fakeEventsServer) SendHeader(metadata.MD) error { return nil }
func (s *fakeEventsServer) Send(ev *runtimeapi.ContainerEventResponse) error {
	select {
	case s.sent <- ev:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// A subscriber that does not read is dropped with ResourceExhausted, and
// neither the index nor the other subscribers wait for it.
func TestSlowEventsSubscriberIsDropped(t *testing.T) {
	e := newPodEnv(t)
	settleEvents(t, e.ds)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := &fakeEventsServer{ctx: ctx, sent: make(chan *runtimeapi.ContainerEventResponse)}
	slowErr := make(chan error, 1)
	e.ds.events.SetBuffer(2) // for the slow one only
	go func() { slowErr <- e.ds.GetContainerEvents(&runtimeapi.GetEventsRequest{}, slow) }()
	testutil.Eventually(t, "slow subscriber subscribed", func() bool { return e.ds.events.Subscribers() == 1 })
	e.ds.events.SetBuffer(events.DefaultBuffer)
	fast := subscribeEvents(t, serveCRI(t, e.ds))

	// The slow handler holds at most one event in Send and two in its
	// buffer: the next overflows it. The RPCs never wait for it.
	var ids []string
	for i := range 6 {
		ids = append(ids, e.create(t, ctrConfig(fmt.Sprintf("c%d", i))))
	}
	for _, id := range ids {
		fast.expect(t, id, evCreated, time.Time{})
	}
	testutil.Eventually(t, "slow subscriber dropped", func() bool { return e.ds.events.Subscribers() == 1 })
	// The client reads again: what was buffered, then the error.
	var got []string
	for {
		select {
		case ev := <-slow.sent:
			got = append(got, ev.ContainerId)
			continue
		case err := <-slowErr:
			if status.Code(crirpc.ToStatus(err)) != codes.ResourceExhausted || !strings.Contains(err.Error(), "events subscriber too slow: 2 events buffered") {
				t.Errorf("slow stream ended with %v, want ResourceExhausted saying it is too slow", err)
			}
		case <-time.After(testutil.EventuallyTimeout):
			t.Fatal("slow stream did not end")
		}
		break
	}
	// Once dropped, the handler sends nothing more than the event it was
	// sending: the feed has a hole, the client must relist.
	if len(got) > 1 || !slices.Equal(got, ids[:len(got)]) {
		t.Errorf("slow subscriber got %v after it was dropped, want at most the first event", got)
	}
}

// Shutting down ends the streams, or a graceful stop would wait for them.
func TestStopEventsEndsStreams(t *testing.T) {
	e := newTestEnv(t)
	ev := subscribeEvents(t, serveCRI(t, e.ds))
	e.ds.StopEvents()
	select {
	case err := <-ev.ended:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("stream ended with %v, want Unavailable", err)
		}
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("stream still open after StopEvents")
	}
}
