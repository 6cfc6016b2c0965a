package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// workloadName is the name of the one container the bench runs in each
// pod of the population.
const workloadName = "work"

// containerConfig is a container config shaped like kubelet's, running the
// pause image (present locally; it only sleeps). The run label lets cleanup
// find the container in Docker should netshim die before removing it.
func (b *bench) containerConfig(pod *runtimeapi.PodSandboxConfig) *runtimeapi.ContainerConfig {
	md := pod.GetMetadata()
	return harness.Container(workloadName, b.opts.pauseImage,
		harness.WithLogPath(filepath.Join(workloadName, "0.log")),
		harness.WithContainerLabels(map[string]string{
			"io.kubernetes.container.name": workloadName,
			"io.kubernetes.pod.name":       md.GetName(),
			"io.kubernetes.pod.namespace":  md.GetNamespace(),
			"io.kubernetes.pod.uid":        md.GetUid(),
			runLabel:                       b.runID,
		}),
		harness.WithContainerAnnotations(map[string]string{
			"io.kubernetes.container.restartCount":           "0",
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
		}),
	)
}

// runWorkload creates and starts the workload container of one pod. The
// container belongs to the pod from CreateContainer on: RemovePodSandbox
// removes it, so a failed start leaves nothing cleanup does not cover.
func (b *bench) runWorkload(ctx context.Context, podID string, pod *runtimeapi.PodSandboxConfig) (string, error) {
	// kubelet makes the pod's log directory; netshim makes only the file.
	if err := os.MkdirAll(filepath.Join(pod.GetLogDirectory(), workloadName), 0o755); err != nil {
		return "", err
	}
	var id string
	if _, err := b.call(ctx, func(ctx context.Context) error {
		r, err := b.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: b.containerConfig(pod), SandboxConfig: pod})
		if err == nil {
			id = r.ContainerId
		}
		return err
	}); err != nil {
		return "", fmt.Errorf("CreateContainer in pod %s: %w", podID, err)
	}
	b.mu.Lock()
	b.ownIDs[id] = true
	b.mu.Unlock()
	if _, err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	}); err != nil {
		return "", fmt.Errorf("StartContainer %s in pod %s: %w", id, podID, err)
	}
	return id, nil
}

// scenarioStatsWithContainers starts one container in each pod of the
// population and times the two stats calls kubelet's summary makes with
// the PodAndContainerStatsFromCRI gate, unfiltered. The containers go with
// their pods in depopulate (or cleanup).
func scenarioStatsWithContainers(ctx context.Context, b *bench) error {
	if len(b.population) == 0 {
		return errors.New("no pods present (populate failed)")
	}
	n := len(b.population)
	ctrs := make([]string, n)
	t := time.Now()
	err := forEach(indices(n), b.opts.populateConc, func(i int) error {
		id := b.population[i]
		var err error
		ctrs[i], err = b.runWorkload(ctx, id, b.popConfigs[id])
		return err
	})
	wall := time.Since(t)
	for i, c := range ctrs {
		if c != "" {
			b.workloads[b.population[i]] = c
		}
	}
	if err != nil {
		return err
	}
	b.report.add("10", fmt.Sprintf("Creating and starting one container in each of the %d pods (%d at a time), wall time", n, b.opts.populateConc), fmtDur(wall))

	podStats := func(ctx context.Context) error {
		r, err := b.rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
		if err != nil {
			return err
		}
		return checkPodStats(r.GetStats(), b.workloads)
	}
	ctrStats := func(ctx context.Context) error {
		r, err := b.rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
		if err != nil {
			return err
		}
		return checkContainerStats(r.GetStats(), ctrs)
	}
	calls := max(b.opts.calls/10, 10)
	for _, m := range []struct {
		key, name string
		f         func(context.Context) error
	}{
		{"podstatsctr", "ListPodSandboxStats", podStats},
		{"ctrstats", "ListContainerStats", ctrStats},
	} {
		samples, reqs, err := b.timeCalls(ctx, calls, m.f)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		p50, p99 := percentile(samples, 50), percentile(samples, 99)
		b.report.durs[m.key+".p50"] = p50
		b.report.durs[m.key+".p99"] = p99
		b.report.nums[m.key+".reqs"] = float64(reqs.total()) / float64(calls)
		b.report.add("10", fmt.Sprintf("%s p50 / p99 (%d pods, one running container each, %d calls)", m.name, n, calls), fmtDur(p50)+" / "+fmtDur(p99))
		b.report.add("10", fmt.Sprintf("Docker requests per %s (%d pods, one running container each)", m.name, n), fmt.Sprintf("%s: %s", perOp(reqs.total(), calls), fmtKinds(reqs, calls)))
		b.noteForeign("during the "+m.name+" calls with containers", reqs)
	}
	return nil
}

// timeCalls makes a few untimed calls of f (connection and caches warm),
// then n timed ones, and returns their durations and the Docker requests
// netshim made during the timed ones.
func (b *bench) timeCalls(ctx context.Context, n int, f func(context.Context) error) ([]time.Duration, requestCounts, error) {
	for range 5 {
		if _, err := b.call(ctx, f); err != nil {
			return nil, requestCounts{}, err
		}
	}
	samples := make([]time.Duration, 0, n)
	before := b.proxy.mark()
	for range n {
		d, err := b.call(ctx, f)
		if err != nil {
			return nil, requestCounts{}, err
		}
		samples = append(samples, d)
	}
	return samples, b.requestsSince(before), nil
}

// checkPodStats says whether a ListPodSandboxStats answer covers the
// bench's pods: each listed, with its workload container among its
// containers' stats.
func checkPodStats(stats []*runtimeapi.PodSandboxStats, workloads map[string]string) error {
	if len(stats) < len(workloads) {
		return fmt.Errorf("listed %d pods, want at least %d", len(stats), len(workloads))
	}
	seen := make(map[string]bool, len(workloads))
	for _, s := range stats {
		pod := s.GetAttributes().GetId()
		ctr, ok := workloads[pod]
		if !ok {
			continue
		}
		if !slices.ContainsFunc(s.GetLinux().GetContainers(), func(c *runtimeapi.ContainerStats) bool {
			return c.GetAttributes().GetId() == ctr
		}) {
			return fmt.Errorf("pod %s: its container %s is not among its containers' stats", pod, ctr)
		}
		seen[pod] = true
	}
	for pod := range workloads {
		if !seen[pod] {
			return fmt.Errorf("pod %s is not listed", pod)
		}
	}
	return nil
}

// checkContainerStats says whether a ListContainerStats answer covers the
// bench's containers, each with a CPU usage figure (they are running, so
// a missing one means netshim could not read its cgroup).
func checkContainerStats(stats []*runtimeapi.ContainerStats, ids []string) error {
	if len(stats) < len(ids) {
		return fmt.Errorf("listed %d containers, want at least %d", len(stats), len(ids))
	}
	byID := make(map[string]*runtimeapi.ContainerStats, len(stats))
	for _, s := range stats {
		byID[s.GetAttributes().GetId()] = s
	}
	for _, id := range ids {
		s, ok := byID[id]
		switch {
		case !ok:
			return fmt.Errorf("container %s is not listed", id)
		case s.GetCpu().GetUsageCoreNanoSeconds() == nil:
			return fmt.Errorf("container %s has no CPU usage figure", id)
		}
	}
	return nil
}

// indices returns 0..n-1.
func indices(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
