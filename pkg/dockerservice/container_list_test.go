package dockerservice

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// The image a container's status and list entry show: the pod spec's
// reference when kubelet passed one, whatever it resolved it to.
func TestImageSpecOf(t *testing.T) {
	const id = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name      string
		recImage  string
		requested *runtimeapi.ImageSpec
		want      string
	}{
		{"kubelet: resolved ID and user's reference", id, &runtimeapi.ImageSpec{Image: id, UserSpecifiedImage: "localhost:5000/busybox:1.37"}, "localhost:5000/busybox:1.37"},
		{"reference only (crictl)", "busybox:1.36", &runtimeapi.ImageSpec{Image: "busybox:1.36"}, "busybox:1.36"},
		{"both the same", "busybox:1.36", &runtimeapi.ImageSpec{Image: "busybox:1.36", UserSpecifiedImage: "busybox:1.36"}, "busybox:1.36"},
		{"no spec recorded (created outside netshim's labels)", "busybox:1.36", &runtimeapi.ImageSpec{}, "busybox:1.36"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &store.Record{Image: tc.recImage}
			info := &labelcodec.Container{Image: tc.requested}
			got := imageSpecOf(rec, info)
			if got.GetImage() != tc.want {
				t.Errorf("image = %q, want %q", got.GetImage(), tc.want)
			}
			if tc.requested.GetUserSpecifiedImage() != "" && got.GetUserSpecifiedImage() != tc.requested.GetUserSpecifiedImage() {
				t.Errorf("user_specified_image = %q, want it kept", got.GetUserSpecifiedImage())
			}
			if tc.name == tests[0].name && tc.requested.Image != id {
				t.Error("the recorded spec was modified")
			}
		})
	}
}

// The unfiltered ListContainers answer, kubelet's relist, is served from
// the cache while nothing changes, rebuilt when the index changes, and
// never cached while a container that exited shows running because its
// log is still being copied (that changes with the copy, not the index).
func TestListContainersCacheFollowsState(t *testing.T) {
	e := newPodEnv(t)
	codec := e.ds.Codec()
	list := func() *runtimeapi.ListContainersResponse {
		t.Helper()
		resp, err := e.ds.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// The codec's bytes must be exactly the message's encoding.
		wire, err := codec.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		sent := &runtimeapi.ListContainersResponse{}
		if err := proto.Unmarshal(wire.Materialize(), sent); err != nil || !proto.Equal(sent, resp) {
			t.Fatalf("codec sent bytes that do not decode to the answer (%v)", err)
		}
		return resp
	}
	stateOf := func(resp *runtimeapi.ListContainersResponse, id string) runtimeapi.ContainerState {
		for _, c := range resp.Containers {
			if c.Id == id {
				return c.State
			}
		}
		t.Fatalf("container %s not listed", id)
		return 0
	}

	a := e.create(t, ctrConfig("a"))
	e.start(t, a)
	first := list()
	if again := list(); again != first {
		t.Error("unchanged state: answer rebuilt instead of served from the cache")
	}
	// kubelet's housekeeping lists the running containers: cached too,
	// apart from the unfiltered answer.
	running := func() *runtimeapi.ListContainersResponse {
		t.Helper()
		resp, err := e.ds.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{
			Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	filtered := running()
	if filtered == first || len(filtered.Containers) != 1 {
		t.Errorf("running containers = %v: want its own answer with the running container", filtered)
	}
	if again := running(); again != filtered {
		t.Error("unchanged state: the running containers' answer rebuilt instead of served from the cache")
	}
	bySandbox, err := e.ds.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: e.sandboxID}})
	if err != nil || bySandbox == first || len(bySandbox.Containers) != 1 {
		t.Errorf("a sandbox's containers = %v, %v: want an answer of their own", bySandbox, err)
	}

	b := e.create(t, ctrConfig("b"))
	if got := list(); len(got.Containers) != 2 || stateOf(got, b) != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("after a new container: %v", got.Containers)
	}

	// a exits while its log is still being copied: listed running, and
	// not from the cache, until the copy is done.
	copied := e.ds.containers.streams.MarkStarting(a)
	e.docker.KillBehindBack(a)
	testutil.Eventually(t, "the exit in the index", func() bool {
		r, _ := e.ds.store().Get(a)
		return !r.Running()
	})
	during := list()
	if stateOf(during, a) != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("exited, log being copied: %v, want running", stateOf(during, a))
	}
	if again := list(); again == during {
		t.Error("an answer showing an exit held back by the log copy was cached")
	}
	if r1, r2 := running(), running(); len(r1.Containers) != 1 || r1 == r2 {
		t.Errorf("running containers while a's log is copied: %d listed, cached %v; want a, not cached", len(r1.Containers), r1 == r2)
	}
	copied()
	// The follower copying a's log from the fake engine ends on its own.
	testutil.Eventually(t, "a listed exited once its log is copied", func() bool {
		return stateOf(list(), a) == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if got := running(); len(got.Containers) != 0 {
		t.Errorf("running containers once a's log is copied: %v, want none", got.Containers)
	}
	if again, after := list(), list(); again != after {
		t.Error("settled state: answer rebuilt instead of served from the cache")
	}
}
