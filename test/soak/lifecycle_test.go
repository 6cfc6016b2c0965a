//go:build soak

package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	// rpcTimeout bounds one call; lifecycleDeadline one lifecycle, retries
	// included: kubelet gives RunPodSandbox 4 minutes, and a lifecycle
	// that cannot end within 3 is stuck, which fails the run.
	rpcTimeout        = 30 * time.Second
	lifecycleDeadline = 3 * time.Minute
)

// drive starts lifecycles at the configured rate, and a burst every
// minute, until ctx ends, at most cfg.workers at once (a start waits for
// a free slot, and the wait is booked), then waits for all of them.
func (w *world) drive(ctx context.Context) {
	client, err := harness.DialCRI(w.shim.Sock)
	if err != nil {
		w.res.fail(err.Error())
		return
	}
	defer client.Conn.Close()
	slots := make(chan struct{}, w.cfg.workers)
	var wg sync.WaitGroup
	var n atomic.Int64
	launch := func() bool {
		asked := time.Now()
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		w.res.waited.Add(int64(time.Since(asked)))
		k := n.Add(1)
		wg.Go(func() {
			defer func() { <-slots }()
			w.lifecycle(client, k)
		})
		return true
	}
	steady := time.NewTicker(time.Duration(float64(time.Second) / w.cfg.rate))
	defer steady.Stop()
	bursts := time.NewTicker(time.Minute)
	defer bursts.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-steady.C:
			launch()
		case <-bursts.C:
			for range w.cfg.burst {
				if !launch() {
					break
				}
			}
		}
	}
	wg.Wait()
}

// errAborted ends a lifecycle whose sandbox died under it (its engine
// was killed): kubelet would make a new sandbox; the lifecycle removes
// the dead one and counts as aborted, not failed.
var errAborted = errors.New("the sandbox is no longer ready")

// lifecycle is one pod the way kubelet runs it: RunPodSandbox, one
// container created and started, a short life, then StopContainer,
// RemoveContainer, StopPodSandbox, RemovePodSandbox. Each call is retried
// until it succeeds, as kubelet's sync loop does, and every failed call
// is booked by its code. A lifecycle that cannot end fails the run.
func (w *world) lifecycle(c *harness.CRI, k int64) {
	ctx, cancel := context.WithTimeout(context.Background(), lifecycleDeadline)
	defer cancel()
	name := fmt.Sprintf("p%06d", k)
	var opts []harness.PodOption
	if k%4 == 0 {
		port := <-w.ports
		defer func() { w.ports <- port }()
		opts = append(opts, harness.WithHostPort(80, port, runtimeapi.Protocol_TCP))
	}
	cfg := harness.Pod(name, append([]harness.PodOption{
		harness.InNamespace(w.ns),
		harness.WithUID(uid()),
		harness.WithLogDirectory(filepath.Join(w.dir, "logs", name)),
	}, opts...)...)
	err := w.runPod(ctx, c, cfg)
	switch {
	case err == nil:
		w.res.completed.Add(1)
	case errors.Is(err, errAborted):
		w.res.aborted.Add(1)
	default:
		w.res.failLifecycle(fmt.Sprintf("lifecycle %s: %v", name, err))
	}
}

func uid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (w *world) runPod(ctx context.Context, c *harness.CRI, cfg *runtimeapi.PodSandboxConfig) error {
	id, err := w.runSandbox(ctx, c, cfg)
	if err != nil {
		return err
	}
	err = w.runContainer(ctx, c, id, cfg)
	// Stop and remove whatever happened: a dead sandbox too.
	if rerr := w.removeSandbox(ctx, c, id); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// runSandbox is RunPodSandbox, retried; a sandbox of the name that a lost
// answer left (AlreadyExists: not ready) is removed first. A READY answer
// without an IP is booked.
func (w *world) runSandbox(ctx context.Context, c *harness.CRI, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	var id string
	err := w.retry(ctx, "RunPodSandbox", func(ctx context.Context) error {
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if status.Code(err) == codes.AlreadyExists {
			if ids, lerr := w.podsNamed(ctx, c, cfg.Metadata.Name); lerr == nil {
				for _, old := range ids {
					_ = w.removeSandbox(ctx, c, old)
				}
			}
		}
		if err == nil {
			id = resp.PodSandboxId
		}
		return err
	})
	if err != nil {
		return "", err
	}
	st, err := w.sandboxStatus(ctx, c, id)
	if err != nil {
		return id, err
	}
	if st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY && st.GetNetwork().GetIp() == "" {
		w.res.readyWithoutIP(id)
	}
	return id, nil
}

func (w *world) sandboxStatus(ctx context.Context, c *harness.CRI, id string) (*runtimeapi.PodSandboxStatus, error) {
	var st *runtimeapi.PodSandboxStatus
	err := w.retry(ctx, "PodSandboxStatus", func(ctx context.Context) error {
		resp, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		if err == nil {
			st = resp.Status
		}
		return err
	})
	return st, err
}

// runContainer creates and starts the pod's container, lets it live a
// moment, and stops and removes it. A sandbox found not ready on the way
// aborts it.
func (w *world) runContainer(ctx context.Context, c *harness.CRI, id string, pod *runtimeapi.PodSandboxConfig) error {
	ccfg := harness.Container("c", workloadImage, harness.WithCommand("sleep", "3600"), harness.WithLogPath("c.log"))
	var cid string
	err := w.retry(ctx, "CreateContainer", func(ctx context.Context) error {
		if dead, err := w.sandboxDead(ctx, c, id); err != nil || dead {
			return errors.Join(err, errAborted)
		}
		resp, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: ccfg, SandboxConfig: pod})
		if status.Code(err) == codes.AlreadyExists {
			// The answer of an earlier try was lost: use that container.
			if found, lerr := w.containerOf(ctx, c, id); lerr == nil && found != "" {
				cid = found
				return nil
			}
		}
		if err == nil {
			cid = resp.ContainerId
		}
		return err
	})
	if err != nil {
		return err
	}
	err = w.retry(ctx, "StartContainer", func(ctx context.Context) error {
		_, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cid})
		if err == nil {
			return nil
		}
		// A start whose answer was lost: the container runs or ran.
		if resp, serr := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cid}); serr == nil &&
			resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_CREATED {
			return nil
		}
		if dead, derr := w.sandboxDead(ctx, c, id); derr == nil && dead {
			return errors.Join(err, errAborted)
		}
		return err
	})
	if err == nil {
		life := time.NewTimer(time.Duration(200+w.intn(1300)) * time.Millisecond)
		select {
		case <-life.C:
		case <-ctx.Done():
		}
		life.Stop()
	}
	// kubelet stops and removes the container before the sandbox.
	if serr := w.retry(ctx, "StopContainer", func(ctx context.Context) error {
		_, err := c.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 2})
		return notFoundOK(err)
	}); serr != nil {
		return errors.Join(err, serr)
	}
	if rerr := w.retry(ctx, "RemoveContainer", func(ctx context.Context) error {
		_, err := c.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid})
		return notFoundOK(err)
	}); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// sandboxDead says whether the sandbox is known and not ready.
func (w *world) sandboxDead(ctx context.Context, c *harness.CRI, id string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := c.Runtime.PodSandboxStatus(cctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return false, err
	}
	return resp.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY, nil
}

func (w *world) containerOf(ctx context.Context, c *harness.CRI, id string) (string, error) {
	resp, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: id}})
	if err != nil {
		return "", err
	}
	for _, ct := range resp.Containers {
		if ct.GetMetadata().GetName() == "c" {
			return ct.Id, nil
		}
	}
	return "", nil
}

// removeSandbox is StopPodSandbox then RemovePodSandbox, retried; NotFound
// is done.
func (w *world) removeSandbox(ctx context.Context, c *harness.CRI, id string) error {
	if err := w.retry(ctx, "StopPodSandbox", func(ctx context.Context) error {
		_, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return notFoundOK(err)
	}); err != nil {
		return err
	}
	return w.retry(ctx, "RemovePodSandbox", func(ctx context.Context) error {
		_, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return notFoundOK(err)
	})
}

func notFoundOK(err error) error {
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// retry calls f until it succeeds, returns errAborted, or ctx ends; every
// failure is booked under rpc. Between tries a short, jittered pause, as
// kubelet's backoff starts.
func (w *world) retry(ctx context.Context, rpc string, f func(ctx context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		err := f(cctx)
		cancel()
		if err == nil || errors.Is(err, errAborted) {
			return err
		}
		w.res.errors.Add(rpc, err)
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up after %s: %w", rpc, lifecycleDeadline, err)
		}
		pause := time.NewTimer(time.Duration(100+w.intn(300)) * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		pause.Stop()
	}
}

// podsNamed lists the IDs of the run's sandboxes named name.
func (w *world) podsNamed(ctx context.Context, c *harness.CRI, name string) ([]string, error) {
	resp, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() == w.ns && p.GetMetadata().GetName() == name {
			ids = append(ids, p.Id)
		}
	}
	return ids, nil
}

// listPods lists the run's sandboxes through netshim's own client.
func (w *world) listPods(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	c := w.shim.CRI()
	if c == nil {
		return nil, errors.New("netshim is not running")
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := c.Runtime.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	var out []*runtimeapi.PodSandbox
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() == w.ns {
			out = append(out, p)
		}
	}
	return out, nil
}
