package dockerservice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// collect reads a server stream to its end.
func collect[R any, T any](t *testing.T, s interface{ Recv() (R, error) }, err error, items func(R) []T) ([]T, int, error) {
	t.Helper()
	if err != nil {
		return nil, 0, err
	}
	var all []T
	msgs := 0
	for {
		r, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return all, msgs, nil
		}
		if err != nil {
			return all, msgs, err
		}
		msgs++
		got := items(r)
		if len(got) == 0 {
			t.Error("a message with no item")
		}
		all = append(all, got...)
	}
}

// sameItems compares two answers whatever their order.
func sameItems[T proto.Message](t *testing.T, what string, got, want []T, key func(T) string) {
	t.Helper()
	byKey := func(a, b T) int { return cmp.Compare(key(a), key(b)) }
	slices.SortFunc(got, byKey)
	slices.SortFunc(want, byKey)
	if !slices.EqualFunc(got, want, func(a, b T) bool { return proto.Equal(a, b) }) {
		t.Errorf("%s: stream sent %d items, list has %d, or they differ", what, len(got), len(want))
	}
}

// Each Stream RPC serves, over real gRPC, exactly what its List twin does.
func TestStreamRPCsMatchTheirListTwins(t *testing.T) {
	e := newPodEnv(t)
	running := e.create(t, ctrConfig("running"))
	e.start(t, running)
	e.create(t, ctrConfig("created"))
	// Enough annotation bytes to need several messages.
	var big []string
	for i := range 6 {
		cfg := podConfig(fmt.Sprintf("big%d", i))
		cfg.Annotations["blob"] = strings.Repeat("b", 300<<10)
		big = append(big, e.run(t, cfg))
	}
	c := serveCRI(t, e.ds)
	ctx := context.Background()

	for _, f := range []*runtimeapi.PodSandboxFilter{nil, {Id: big[0]}, {LabelSelector: map[string]string{"app": "web"}}} {
		want, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.rt.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: f})
		got, msgs, err := collect(t, s, err, (*runtimeapi.StreamPodSandboxesResponse).GetPodSandboxes)
		if err != nil {
			t.Fatal(err)
		}
		sameItems(t, fmt.Sprintf("StreamPodSandboxes %v", f), got, want.Items, (*runtimeapi.PodSandbox).GetId)
		if f == nil && msgs < 2 {
			t.Errorf("%d sandboxes with 1.8 MB of annotations came in %d message(s), want them cut", len(got), msgs)
		}
	}

	for _, f := range []*runtimeapi.ContainerFilter{nil, {Id: running}, {State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}}} {
		want, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: f})
		got, _, err := collect(t, s, err, (*runtimeapi.StreamContainersResponse).GetContainers)
		if err != nil {
			t.Fatal(err)
		}
		if len(want.Containers) == 0 {
			t.Fatalf("filter %v matches nothing: the comparison proves nothing", f)
		}
		sameItems(t, fmt.Sprintf("StreamContainers %v", f), got, want.Containers, (*runtimeapi.Container).GetId)
	}

	for _, f := range []*runtimeapi.ContainerStatsFilter{nil, {PodSandboxId: e.sandboxID}} {
		want, err := c.rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.rt.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{Filter: f})
		got, _, err := collect(t, s, err, (*runtimeapi.StreamContainerStatsResponse).GetContainerStats)
		if err != nil {
			t.Fatal(err)
		}
		// Usage is read anew for each answer: compare what is stable.
		key := func(s *runtimeapi.ContainerStats) string { return s.GetAttributes().GetId() }
		if len(got) != len(want.Stats) || len(got) == 0 {
			t.Fatalf("StreamContainerStats %v: %d items, list has %d", f, len(got), len(want.Stats))
		}
		slices.SortFunc(got, func(a, b *runtimeapi.ContainerStats) int { return cmp.Compare(key(a), key(b)) })
		slices.SortFunc(want.Stats, func(a, b *runtimeapi.ContainerStats) int { return cmp.Compare(key(a), key(b)) })
		for i := range got {
			if !proto.Equal(got[i].Attributes, want.Stats[i].Attributes) {
				t.Errorf("StreamContainerStats %v: item %d is %v, list has %v", f, i, got[i].Attributes, want.Stats[i].Attributes)
			}
		}
	}

	for _, f := range []*runtimeapi.ImageFilter{nil, {Image: &runtimeapi.ImageSpec{Image: testImage}}} {
		want, err := c.img.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.img.StreamImages(ctx, &runtimeapi.StreamImagesRequest{Filter: f})
		got, _, err := collect(t, s, err, (*runtimeapi.StreamImagesResponse).GetImages)
		if err != nil {
			t.Fatal(err)
		}
		if len(want.Images) == 0 {
			t.Fatalf("image filter %v matches nothing: the comparison proves nothing", f)
		}
		sameItems(t, fmt.Sprintf("StreamImages %v", f), got, want.Images, (*runtimeapi.Image).GetId)
	}

	// Pod stats and metrics: whatever the twin answers, items or error.
	{
		want, wantErr := c.rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
		s, err := c.rt.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{})
		got, _, err := collect(t, s, err, (*runtimeapi.StreamPodSandboxStatsResponse).GetPodSandboxStats)
		twinAgrees(t, "StreamPodSandboxStats", len(got), err, len(want.GetStats()), wantErr)
	}
	{
		want, wantErr := c.rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		s, err := c.rt.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
		got, _, err := collect(t, s, err, (*runtimeapi.StreamPodSandboxMetricsResponse).GetPodSandboxMetrics)
		twinAgrees(t, "StreamPodSandboxMetrics", len(got), err, len(want.GetPodMetrics()), wantErr)
	}
}

func twinAgrees(t *testing.T, method string, got int, err error, want int, wantErr error) {
	t.Helper()
	if status.Code(err) != status.Code(wantErr) || got != want {
		t.Errorf("%s: %d items, %v; its twin: %d items, %v", method, got, err, want, wantErr)
	}
	if err != nil && !strings.Contains(status.Convert(err).Message(), method) {
		t.Errorf("%s failed with %q, which does not name it", method, status.Convert(err).Message())
	}
}

// Stream RPCs read the index as the List RPCs do: not before it is synced.
func TestStreamRPCsWaitForFirstSync(t *testing.T) {
	c := serveCRI(t, newUnsyncedService(t))
	s, err := c.rt.StreamPodSandboxes(context.Background(), &runtimeapi.StreamPodSandboxesRequest{})
	if _, _, err := collect(t, s, err, (*runtimeapi.StreamPodSandboxesResponse).GetPodSandboxes); status.Code(err) != codes.Unavailable {
		t.Errorf("StreamPodSandboxes before the first sync: %v, want Unavailable", err)
	}
}
