package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// instance is one netshim under test with its own counting proxy, so
// that the Docker requests of each are counted apart. The bench runs one
// in the default sandbox netns mode for every scenario, and one in the
// pinned mode for the sequential rounds.
type instance struct {
	name        string // "default" or "pinned", for messages and its pods' instanceLabel
	mode        string // its --sandbox-netns
	cacheDir    string
	netnsDir    string
	callTimeout time.Duration

	proxy   *countingProxy
	netshim *harness.Netshim
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient

	mu     sync.Mutex
	pods   map[string]bool // sandboxes created through this netshim and not yet removed
	ownIDs map[string]bool // every sandbox (and container) created through it in this run
}

// instanceConfig is what startInstance needs besides the bench's options.
type instanceConfig struct {
	name, mode string
	dir        string // created by the caller
	confDir    string // shared by every instance and switched per chain
	cniBinDirs []string
	logPath    string
}

// startInstance starts the counting proxy and netshim and waits until
// netshim says it is ready. On failure it stops what it started.
func startInstance(ctx context.Context, o options, c instanceConfig) (_ *instance, err error) {
	in := &instance{
		name: c.name, mode: c.mode,
		cacheDir:    filepath.Join(c.dir, "cache"),
		netnsDir:    filepath.Join(c.dir, "netns"),
		callTimeout: o.callTimeout,
		pods:        map[string]bool{}, ownIDs: map[string]bool{},
	}
	defer func() {
		if err != nil {
			in.stop()
		}
	}()
	in.proxy, err = startProxy(filepath.Join(c.dir, "docker.sock"), o.dockerSocket)
	if err != nil {
		return nil, fmt.Errorf("starting the counting Docker proxy of the %s netshim: %w", c.name, err)
	}
	in.netshim, err = harness.NewNetshim(
		harness.WithBinary(o.netshim),
		harness.WithDir(c.dir),
		harness.WithSocket(filepath.Join(c.dir, "ns.sock")),
		harness.WithCNIConfDir(c.confDir),
		harness.WithCNICacheDir(in.cacheDir),
		harness.WithLogFile(c.logPath),
		harness.WithDockerEndpoint("unix://"+in.proxy.path),
		harness.WithCNIBinDir(strings.Join(c.cniBinDirs, ",")),
		harness.WithPauseImage(o.pauseImage),
		harness.WithVerbosity(1),
		harness.WithOwnProcessGroup(),
		harness.WithStartTimeout(o.startTimeout),
		harness.WithSandboxNetNS(c.mode),
		harness.WithNetNSDir(in.netnsDir),
	)
	if err != nil {
		return nil, err
	}
	if err := in.netshim.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the %s netshim: %w; last log lines:\n%s", c.name, err, in.netshim.LogTail(30))
	}
	in.conn = in.netshim.CRI().Conn
	in.rt = runtimeapi.NewRuntimeServiceClient(in.conn)
	st, err := in.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI Status of the %s netshim: %w", c.name, err)
	}
	for _, cond := range st.GetStatus().GetConditions() {
		if !cond.Status {
			return nil, fmt.Errorf("the %s netshim is not ready: %s %s: %s", c.name, cond.Type, cond.Reason, cond.Message)
		}
	}
	// What it measures must be the mode it is named for: netshim says
	// which mode new pods get, and why.
	if err := checkMode(ctx, in.rt, c.mode); err != nil {
		return nil, fmt.Errorf("the %s netshim: %w", c.name, err)
	}
	return in, nil
}

// checkMode asks netshim (CRI Status, verbose) which sandbox netns mode
// new pods get, and fails unless it is want.
func checkMode(ctx context.Context, rt runtimeapi.RuntimeServiceClient, want string) error {
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return fmt.Errorf("CRI Status (verbose): %w", err)
	}
	mode, reason, err := parseModeInfo(st.GetInfo())
	if err != nil {
		return err
	}
	if mode != want {
		return fmt.Errorf("new pods get the sandbox netns mode %q, not %q: %s", mode, want, reason)
	}
	return nil
}

// parseModeInfo reads the sandboxNetns entry of Status's verbose info.
func parseModeInfo(info map[string]string) (mode, reason string, err error) {
	raw, ok := info["sandboxNetns"]
	if !ok {
		return "", "", errors.New("CRI Status (verbose) has no sandboxNetns info: a netshim from before the pinned netns mode?")
	}
	var m struct{ Mode, Reason string }
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return "", "", fmt.Errorf("CRI Status (verbose) sandboxNetns %q: %w", raw, err)
	}
	return m.Mode, m.Reason, nil
}

// stop stops netshim (SIGTERM) and the proxy; stopping a stopped
// instance does nothing.
func (in *instance) stop() error {
	var err error
	if in.netshim != nil {
		// Stop closes netshim's client connection too.
		err = in.netshim.Stop(syscall.SIGTERM)
	}
	if in.proxy != nil {
		in.proxy.close()
	}
	return err
}

// call runs one CRI call with the per-call deadline and returns its
// in-process duration.
func (in *instance) call(ctx context.Context, f func(ctx context.Context) error) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, in.callTimeout)
	defer cancel()
	start := time.Now()
	err := f(cctx)
	return time.Since(start), err
}

// runPod runs one sandbox through netshim.
func (in *instance) runPod(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, time.Duration, error) {
	var id string
	d, err := in.call(ctx, func(ctx context.Context) error {
		r, err := in.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err == nil {
			id = r.PodSandboxId
		}
		return err
	})
	if err != nil {
		return "", 0, fmt.Errorf("RunPodSandbox %s (%s netshim): %w", cfg.GetMetadata().GetName(), in.name, err)
	}
	in.mu.Lock()
	in.pods[id] = true
	in.ownIDs[id] = true
	in.mu.Unlock()
	return id, d, nil
}

func (in *instance) stopPod(ctx context.Context, id string) (time.Duration, error) {
	d, err := in.call(ctx, func(ctx context.Context) error {
		_, err := in.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("StopPodSandbox %s (%s netshim): %w", id, in.name, err)
	}
	return d, nil
}

func (in *instance) removePod(ctx context.Context, id string) (time.Duration, error) {
	d, err := in.call(ctx, func(ctx context.Context) error {
		_, err := in.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("RemovePodSandbox %s (%s netshim): %w", id, in.name, err)
	}
	in.mu.Lock()
	delete(in.pods, id)
	in.mu.Unlock()
	return d, nil
}

// requestsSince returns the Docker requests netshim made since from, those
// about containers of others (the other netshim of the run, or another
// one on the same engine: their events reach this one too) apart.
func (in *instance) requestsSince(from mark) requestCounts {
	return in.proxy.between(from, in.proxy.mark(), in.foreign)
}

// allSince returns every Docker request netshim made since from, about
// whichever container.
func (in *instance) allSince(from mark) requestCounts {
	return in.proxy.between(from, in.proxy.mark(), nil)
}

// foreign says whether a request's object is a container ID that is not
// one of this netshim's sandboxes or containers. Names and image
// references count as its own.
func (in *instance) foreign(object string) bool {
	if len(object) != 64 || strings.Trim(object, "0123456789abcdef") != "" {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return !in.ownIDs[object]
}

// removeAllPods stops and removes, through netshim, every pod of this run
// it made: those the bench knows and any it lists with the run's and its
// own label (a RunPodSandbox whose answer was lost). The other netshim's
// pods are listed too (both follow every netshim-labelled container), but
// only their own netshim can tear them down properly.
func (in *instance) removeAllPods(ctx context.Context, runID string) error {
	in.mu.Lock()
	ids := map[string]bool{}
	for id := range in.pods {
		ids[id] = true
	}
	in.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	r, err := in.rt.ListPodSandbox(lctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{runLabel: runID, instanceLabel: in.name}}})
	cancel()
	if err == nil {
		for _, p := range r.Items {
			ids[p.Id] = true
		}
	}
	if len(ids) == 0 {
		return err
	}
	fmt.Printf("cleanup: removing %d pods through the %s netshim\n", len(ids), in.name)
	list := make([]string, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	return errors.Join(err, forEach(list, 4, func(id string) error {
		if _, err := in.stopPod(ctx, id); err != nil {
			return err
		}
		_, err := in.removePod(ctx, id)
		return err
	}))
}
