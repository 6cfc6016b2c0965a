package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sleeper is the pods' one container: a shell that sleeps and exits at
// once on SIGTERM (as PID 1 it would ignore the signal without the trap,
// and every teardown would wait out the grace period instead).
const sleeper = "trap 'exit 0' TERM; sleep 1000000 & wait"

// podName is the name of the i-th static pod (kubelet adds the node name).
func podName(i int) string { return fmt.Sprintf("kb-%03d", i) }

// manifest is a static pod with one cheap container, as JSON (kubelet's
// file source reads YAML, of which JSON is a subset).
func manifest(name, namespace, image string) ([]byte, error) {
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"restartPolicy":                 "Always",
			"dnsPolicy":                     "Default",
			"terminationGracePeriodSeconds": 10,
			"containers": []any{map[string]any{
				"name":            "sleep",
				"image":           image,
				"imagePullPolicy": "Never",
				"command":         []string{"sh", "-c", sleeper},
			}},
		},
	}
	return json.Marshal(pod)
}

// writeManifests writes n manifests into dir, each atomically (kubelet
// ignores dot files, so it never reads a partial one), and returns their
// paths.
func writeManifests(dir, namespace, image string, n int) ([]string, error) {
	var paths []string
	for i := range n {
		name := podName(i)
		data, err := manifest(name, namespace, image)
		if err != nil {
			return paths, err
		}
		tmp := filepath.Join(dir, "."+name+".tmp")
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return paths, err
		}
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// removeManifests removes the manifests; a missing one is not an error.
func removeManifests(paths []string) error {
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// podView is what the CRI says of the namespace's pods at one moment.
type podView struct {
	sandboxes, ready    int
	containers, running int
	// running containers by id, with their attempt, to tell a restart.
	runningIDs map[string]uint32
}

func (v podView) String() string {
	return fmt.Sprintf("%d sandboxes (%d ready), %d containers (%d running)", v.sandboxes, v.ready, v.containers, v.running)
}

// viewPods lists the namespace's sandboxes and containers through the CRI
// (kubelet runs without an API server: netshim's answers are the truth).
func viewPods(ctx context.Context, rt runtimeapi.RuntimeServiceClient, namespace string) (podView, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return podView{}, fmt.Errorf("ListPodSandbox: %w", err)
	}
	ours := map[string]bool{}
	v := podView{runningIDs: map[string]uint32{}}
	for _, s := range sbs.Items {
		if s.GetMetadata().GetNamespace() != namespace {
			continue
		}
		ours[s.Id] = true
		v.sandboxes++
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			v.ready++
		}
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return podView{}, fmt.Errorf("ListContainers: %w", err)
	}
	for _, c := range cs.Containers {
		if !ours[c.PodSandboxId] {
			continue
		}
		v.containers++
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			v.running++
			v.runningIDs[c.Id] = c.GetMetadata().GetAttempt()
		}
	}
	return v, nil
}

// waitFor polls the pods every interval until done says so, the deadline
// passes or ctx ends, and returns how long it took and the last view.
func waitFor(ctx context.Context, rt runtimeapi.RuntimeServiceClient, namespace string, start time.Time,
	deadline, interval time.Duration, done func(podView) bool) (time.Duration, podView, error) {
	var last podView
	var lastErr error
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		v, err := viewPods(ctx, rt, namespace)
		if err == nil {
			last, lastErr = v, nil
			if done(v) {
				return time.Since(start), v, nil
			}
		} else {
			lastErr = err
		}
		if time.Since(start) > deadline {
			return time.Since(start), last, fmt.Errorf("not within %s: %v (last error: %v)", deadline, last, lastErr)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), last, ctx.Err()
		case <-t.C:
		}
	}
}

// changedDuring names what differs between the running containers before
// and after the hold: a container that stopped, restarted or appeared.
func changedDuring(before, after podView) []string {
	var out []string
	for id, attempt := range before.runningIDs {
		a, ok := after.runningIDs[id]
		switch {
		case !ok:
			out = append(out, "container "+short(id)+" no longer running")
		case a != attempt:
			out = append(out, fmt.Sprintf("container %s attempt %d -> %d", short(id), attempt, a))
		}
	}
	for id := range after.runningIDs {
		if _, ok := before.runningIDs[id]; !ok {
			out = append(out, "container "+short(id)+" started during the hold")
		}
	}
	sort.Strings(out)
	return out
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// startedAfter is, for each running container of the namespace's pods,
// the time from drop to the StartedAt its runtime reports through the CRI
// (ContainerStatus): when each pod's container really started, where "all
// running" is only the last of them. Both clocks are this host's.
func startedAfter(ctx context.Context, rt runtimeapi.RuntimeServiceClient, namespace string, drop time.Time) ([]time.Duration, error) {
	v, err := viewPods(ctx, rt, namespace)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(v.runningIDs))
	for id := range v.runningIDs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := rt.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ContainerStatus %s: %w", short(id), err)
		}
		at := st.GetStatus().GetStartedAt()
		if at <= 0 {
			return nil, fmt.Errorf("container %s runs but has no StartedAt", short(id))
		}
		out = append(out, time.Unix(0, at).Sub(drop))
	}
	return out, nil
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of ds:
// the smallest value at least p% of them are at or below. false when ds
// is empty.
func percentile(ds []time.Duration, p float64) (time.Duration, bool) {
	if len(ds) == 0 || p <= 0 || p > 100 {
		return 0, false
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1], true
}
