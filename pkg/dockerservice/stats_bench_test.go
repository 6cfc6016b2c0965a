package dockerservice

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
)

// statsBenchPods is the pod count kubelet's stats polling is benchmarked
// with.
const statsBenchPods = 50

// newStatsBenchEnv runs statsBenchPods kubelet-like pods with one running
// container each on the fake Docker, with fake /proc and cgroup trees
// laid out as kubelet and Docker lay them out (pod cgroups named after the
// pod UID, the cgroupfs driver on cgroup v1, systemd on v2).
func newStatsBenchEnv(b *testing.B, v2 bool) *testEnv {
	e := newTestEnv(b)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	h := newFakeHost(b, e.ds, v2)
	ctx := context.Background()
	for i := 0; i < statsBenchPods; i++ {
		cfg := kubeletLikePod(i)
		cfg.LogDirectory = filepath.Join(b.TempDir(), "pods")
		sb, err := e.ds.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		ctr, err := e.ds.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: ctrConfig("app"), SandboxConfig: cfg})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.ds.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
			b.Fatal(err)
		}
		pod := "/kubepods/burstable/pod" + cfg.Metadata.Uid
		if v2 {
			pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(cfg.Metadata.Uid, "-", "_") + ".slice"
		}
		h.cgroupFiles(pod, podUsage)
		h.container(e.ds, sb.PodSandboxId, pod, infraUsage)
		h.container(e.ds, ctr.ContainerId, pod, ctrUsage)
		rec, _ := e.ds.store().Get(sb.PodSandboxId)
		h.netdev(rec.Pid, map[string][4]uint64{"lo": {1, 0, 1, 0}, "eth0": {5000, 1, 7000, 2}})
	}
	return e
}

// benchLatency runs call b.N times and reports the median and 99th
// percentile latency and the Docker requests per call (the goal is 0:
// kubelet polls these).
func benchLatency(b *testing.B, e *testEnv, call func() error) {
	e.quiesce(b)
	e.docker.ResetCalls()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(len(e.docker.Calls()))/float64(b.N), "docker-requests/op")
}

func BenchmarkStats50Pods(b *testing.B) {
	for _, v2 := range []bool{false, true} {
		e := newStatsBenchEnv(b, v2)
		ctx := context.Background()
		layout := map[bool]string{false: "cgroupv1", true: "cgroupv2"}[v2]
		for _, rpc := range []struct {
			name string
			call func() (int, error)
		}{
			{"ListPodSandboxStats", func() (int, error) {
				r, err := e.ds.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
				return len(r.GetStats()), err
			}},
			{"ListContainerStats", func() (int, error) {
				r, err := e.ds.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
				return len(r.GetStats()), err
			}},
			{"ListPodSandboxMetrics", func() (int, error) {
				r, err := e.ds.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
				return len(r.GetPodMetrics()), err
			}},
		} {
			b.Run(layout+"/"+rpc.name, func(b *testing.B) {
				benchLatency(b, e, func() error {
					n, err := rpc.call()
					if err == nil && n != statsBenchPods {
						err = fmt.Errorf("%s listed %d, want %d", rpc.name, n, statsBenchPods)
					}
					return err
				})
			})
		}
	}
}
