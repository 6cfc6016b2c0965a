package dockerservice

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
)

// kubeletLikePod is a sandbox config with the labels and annotations
// kubelet sets, so the benchmarks move realistic amounts of data.
func kubeletLikePod(i int) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(fmt.Sprintf("bench-%03d", i))
	cfg.Labels = map[string]string{
		"io.kubernetes.pod.name": cfg.Metadata.Name, "io.kubernetes.pod.namespace": "ns",
		"io.kubernetes.pod.uid": cfg.Metadata.Uid, "app": "bench", "pod-template-hash": "5d8f7c9b6",
	}
	cfg.Annotations = map[string]string{
		"kubernetes.io/config.seen": "2026-11-22T05:00:00.000000000Z", "kubernetes.io/config.source": "api",
	}
	return cfg
}

func BenchmarkListPodSandbox110(b *testing.B) {
	e := newTestEnv(b)
	for i := 0; i < 110; i++ {
		if _, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: kubeletLikePod(i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("handler", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the server does per call: the handler, then the codec.
	codec := e.ds.Codec()
	b.Run("handler+codec", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			resp, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := codec.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The cost the cache avoids: encoding the answer afresh.
	b.Run("handler+proto.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			resp, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "bench"}}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListContainers110 is kubelet's container relist on a node of
// 110 pods with one container each: "handler+codec" is the unfiltered
// list as the server serves it (cached), "state/handler+codec" the list of
// the containers in one state (kubelet's housekeeping; cached too),
// "handler+proto.Marshal" what each cost before the cache (built and
// encoded afresh; a label selector that matches every container keeps it
// off the cache).
func BenchmarkListContainers110(b *testing.B) {
	e := newTestEnv(b)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	ctx := context.Background()
	for i := 0; i < 110; i++ {
		cfg := kubeletLikePod(i)
		sb, err := e.ds.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		cc := ctrConfig("app")
		cc.LogPath = ""
		if _, err := e.ds.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cc, SandboxConfig: cfg}); err != nil {
			b.Fatal(err)
		}
	}
	codec := e.ds.Codec()
	b.Run("handler+codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := e.ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil {
				b.Fatal(err)
			}
			if len(resp.Containers) != 110 {
				b.Fatalf("%d containers", len(resp.Containers))
			}
			if _, err := codec.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	// kubelet's housekeeping: the containers in a state (created here).
	b.Run("state/handler+codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := e.ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}}})
			if err != nil {
				b.Fatal(err)
			}
			if len(resp.Containers) != 110 {
				b.Fatalf("%d containers", len(resp.Containers))
			}
			if _, err := codec.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handler+proto.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := e.ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"app": "web"}}})
			if err != nil {
				b.Fatal(err)
			}
			if len(resp.Containers) != 110 {
				b.Fatalf("%d containers", len(resp.Containers))
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
