package dockerservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/system"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
)

// RuntimeClass support. A CRI runtime handler is a Docker runtime by name
// (daemon.json "runtimes", dockerd --add-runtime): the handler "" is the
// engine's default runtime, any other handler must be a runtime the
// engine has. The sandbox and every container of the pod run with it
// (HostConfig.Runtime); the handler is kept in the sandbox's meta label,
// so CreateContainer needs no lookup.
//
// What the engine has comes from `docker info`, which is costly on the
// engine's side (it counts containers and images) and which kubelet would
// otherwise trigger every few seconds through Status. It is cached for
// runtimesMaxAge; Status serves the cached answer at once and refreshes it
// in the background when it is older. A RunPodSandbox naming a handler the
// cache does not know reads it again at once: a runtime added to
// daemon.json (SIGHUP) is usable without waiting for the cache to age.

const (
	// runtimesMaxAge is how long docker info's runtimes are served before
	// a refresh starts.
	runtimesMaxAge = 30 * time.Second
	// runtimesRetryAfter spaces the reads after one failed: an engine
	// that does not answer is not asked at every Status poll.
	runtimesRetryAfter = 5 * time.Second
	// runtimesForcedMinGap spaces the reads a handler the cache does not
	// know forces: pods with a misspelt handler, retried by kubelet,
	// cost at most one docker info per gap.
	runtimesForcedMinGap = time.Second
	// runtimesReadTimeout bounds one docker info; the read runs detached
	// from the caller, which may stop waiting earlier.
	runtimesReadTimeout = 10 * time.Second
	// statusFirstReadWait is how long a Status that finds nothing cached
	// yet waits for the first read: long enough for an engine that
	// answers, short enough that kubelet's poll is not held by one that
	// does not.
	statusFirstReadWait = 2 * time.Second

	// rroMinKernelMajor/Minor: mount_setattr(2), which runc's "rro"
	// mount option needs, came with Linux 5.12.
	rroMinKernelMajor, rroMinKernelMinor = 5, 12
	// ociFeaturesKey is where Docker 25+ puts a runtime's OCI features
	// (`runc features`) in docker info's runtime status.
	ociFeaturesKey = "org.opencontainers.runtime-spec.features"
)

// engineRuntimes is what one docker info said about the engine's runtimes.
type engineRuntimes struct {
	at time.Time
	// names are every runtime the engine has, sorted.
	names []string
	// defaultRuntime is the runtime handler "" stands for.
	defaultRuntime string
	// kernel is the engine host's kernel release; kernelOK whether it
	// can make read-only mounts recursive, known only if kernelKnown.
	kernel                string
	kernelKnown, kernelOK bool
	// features holds, per runtime, the OCI features Docker reported;
	// a runtime without an entry has none reported (Docker < 25, or a
	// runtime without a `features` command).
	features map[string]ociFeatures
	// apiVersion is the API version negotiated when this was read.
	apiVersion string
	// hasWrapper says the engine has netshim's OCI runtime wrapper,
	// OCIWrapperRuntime (not in names: it is no handler).
	hasWrapper bool
	// wrapperMisuse, if not empty, says how the engine runs the wrapper
	// as something else than OCIWrapperRuntime: as its default runtime or
	// under another name, where it would run containers netshim did not
	// make for it. RunPodSandbox refuses pods while it lasts.
	wrapperMisuse string
}

// ociFeatures is the part of the OCI runtime features document
// (runtime-spec features.md) netshim reads.
type ociFeatures struct {
	MountOptions []string `json:"mountOptions"`
}

func newEngineRuntimes(info system.Info, apiVersion string, at time.Time) *engineRuntimes {
	r := &engineRuntimes{at: at, defaultRuntime: info.DefaultRuntime, kernel: info.KernelVersion, apiVersion: apiVersion, features: map[string]ociFeatures{}}
	if major, minor, ok := parseKernelVersion(info.KernelVersion); ok {
		r.kernelKnown = true
		r.kernelOK = major > rroMinKernelMajor || major == rroMinKernelMajor && minor >= rroMinKernelMinor
	}
	for name, rt := range info.Runtimes {
		if name == OCIWrapperRuntime {
			// netshim's own (sandbox_netns.go): kept apart, so that
			// Status does not offer it as a RuntimeClass handler.
			r.hasWrapper = true
			continue
		}
		r.names = append(r.names, name)
		if doc, ok := rt.Status[ociFeaturesKey]; ok {
			var f ociFeatures
			if err := json.Unmarshal([]byte(doc), &f); err != nil {
				klog.InfoS("WARNING: Docker reports OCI features of a runtime that cannot be read; treating them as unknown", "runtime", name, "err", err)
				continue
			}
			r.features[name] = f
		}
	}
	if r.defaultRuntime != "" && !slices.Contains(r.names, r.defaultRuntime) {
		r.names = append(r.names, r.defaultRuntime)
	}
	slices.Sort(r.names)
	r.wrapperMisuse = wrapperMisuse(info, ownWrapper())
	return r
}

// ownWrapper is the netshim-oci installed beside the running netshim
// (the package puts both in /usr/bin), "" if there is none.
var ownWrapper = sync.OnceValue(func() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(self), OCIWrapperRuntime)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
})

// wrapperMisuse says whether the engine runs netshim's OCI wrapper as
// anything but runtime OCIWrapperRuntime: the wrapper is recognised by
// its file name, or as the same file as runtime OCIWrapperRuntime's path
// or as own (the wrapper beside netshim). "" when it does not.
func wrapperMisuse(info system.Info, own string) string {
	known := []string{own}
	if rt, ok := info.Runtimes[OCIWrapperRuntime]; ok {
		known = append(known, rt.Path)
	}
	isWrapper := func(p string) bool {
		if p == "" {
			return false
		}
		if filepath.Base(p) == OCIWrapperRuntime {
			return true
		}
		if !filepath.IsAbs(p) {
			// Found on dockerd's PATH; netshim's is the best guess.
			lp, err := exec.LookPath(p)
			if err != nil {
				return false
			}
			p = lp
		}
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		for _, k := range known {
			if k == "" {
				continue
			}
			if ki, err := os.Stat(k); err == nil && os.SameFile(fi, ki) {
				return true
			}
		}
		return false
	}
	var names []string
	for name, rt := range info.Runtimes {
		if name != OCIWrapperRuntime && isWrapper(rt.Path) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	fix := fmt.Sprintf("register it only as runtime %q, never as the default runtime or under another name (daemon.json \"runtimes\": {%q: {\"path\": \"/usr/bin/netshim-oci\"}}), then SIGHUP dockerd", OCIWrapperRuntime, OCIWrapperRuntime)
	switch {
	case info.DefaultRuntime == OCIWrapperRuntime || slices.Contains(names, info.DefaultRuntime):
		return fmt.Sprintf("the Docker engine's default runtime %q is netshim's OCI wrapper, which would then run every container of the node, netshim's or not: %s", info.DefaultRuntime, fix)
	case len(names) > 0:
		return fmt.Sprintf("the Docker engine runs netshim's OCI wrapper as runtime %s, where it would run containers netshim did not make for it: %s", strings.Join(names, ", "), fix)
	}
	return ""
}

// parseKernelVersion reads major and minor of a kernel release such as
// "6.1.0-23-amd64" or "5.15.153.1-microsoft-standard-WSL2".
func parseKernelVersion(s string) (major, minor int, ok bool) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	leadingInt := func(p string) (int, bool) {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		return n, err == nil
	}
	major, ok1 := leadingInt(parts[0])
	minor, ok2 := leadingInt(parts[1])
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	return major, minor, true
}

// has says whether a runtime handler names one of the engine's runtimes.
func (r *engineRuntimes) has(handler string) bool {
	return handler == "" || slices.Contains(r.names, handler)
}

// runtimeOf is the Docker runtime a handler stands for.
func (r *engineRuntimes) runtimeOf(handler string) string {
	if handler == "" {
		return r.defaultRuntime
	}
	return handler
}

// featureSupport is an answer that may be unknown.
type featureSupport int

const (
	supportUnknown featureSupport = iota
	supported
	unsupported
)

// recursiveReadOnly says whether a handler's containers can have
// recursively read-only mounts, and if not, why. Docker can be asked for
// them from API 1.44 (BindOptions.ReadOnlyForceRecursive), and then
// refuses the start unless the kernel has mount_setattr and the runtime's
// OCI features list the "rro" mount option: each must be known to hold.
func (r *engineRuntimes) recursiveReadOnly(handler, apiVersion string) (featureSupport, string) {
	if !engine.APIAtLeast(apiVersion, minRecursiveReadOnlyAPI) {
		return unsupported, fmt.Sprintf("this engine speaks Docker API %s; recursive read-only mounts need %s (Docker 25)", apiVersion, minRecursiveReadOnlyAPI)
	}
	if r == nil {
		return supportUnknown, ""
	}
	if r.kernelKnown && !r.kernelOK {
		return unsupported, fmt.Sprintf("the engine's kernel %s is older than %d.%d (no mount_setattr)", r.kernel, rroMinKernelMajor, rroMinKernelMinor)
	}
	rt := r.runtimeOf(handler)
	if !slices.Contains(r.names, rt) {
		return supportUnknown, ""
	}
	f, ok := r.features[rt]
	switch {
	case !ok:
		return unsupported, fmt.Sprintf("Docker reports no OCI features for runtime %q, and refuses recursive read-only mounts without them", rt)
	case !slices.Contains(f.MountOptions, "rro"):
		return unsupported, fmt.Sprintf("runtime %q does not list the \"rro\" mount option among its OCI features", rt)
	case !r.kernelKnown:
		return supportUnknown, ""
	}
	return supported, ""
}

// handlers is Status's runtime_handlers: the default handler "" first,
// then every runtime of the engine by name. Nothing read yet gives the
// default handler with no features claimed.
func (r *engineRuntimes) handlers(apiVersion string) []*runtimeapi.RuntimeHandler {
	names := []string{""}
	if r != nil {
		names = append(names, r.names...)
	}
	out := make([]*runtimeapi.RuntimeHandler, 0, len(names))
	for _, n := range names {
		rro, _ := r.recursiveReadOnly(n, apiVersion)
		out = append(out, &runtimeapi.RuntimeHandler{
			Name: n,
			Features: &runtimeapi.RuntimeHandlerFeatures{
				RecursiveReadOnlyMounts: rro == supported,
				// Docker has no per-container user namespace.
				UserNamespaces: false,
			},
		})
	}
	return out
}

// runtimeCatalog caches docker info's runtimes: one read at a time, run
// detached from the callers, who wait for it as long as they choose.
type runtimeCatalog struct {
	read func(ctx context.Context) (*engineRuntimes, error)
	now  func() time.Time

	mu   sync.Mutex
	snap *engineRuntimes
	// inflight is closed when the running read ends; nil when none runs.
	inflight chan struct{}
	lastTry  time.Time
	lastErr  error
}

func newRuntimeCatalog(read func(context.Context) (*engineRuntimes, error)) *runtimeCatalog {
	return &runtimeCatalog{read: read, now: time.Now}
}

// startLocked starts a read unless one runs, and returns its channel.
func (c *runtimeCatalog) startLocked() chan struct{} {
	if c.inflight != nil {
		return c.inflight
	}
	done := make(chan struct{})
	c.inflight = done
	c.lastTry = c.now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), runtimesReadTimeout)
		defer cancel()
		snap, err := c.read(ctx)
		if err != nil {
			klog.ErrorS(err, "Failed to read the Docker engine's runtimes; serving the previous answer", "haveOne", c.snapshot() != nil)
		}
		c.mu.Lock()
		if err == nil {
			c.snap = snap
		}
		c.lastErr = err
		c.inflight = nil
		c.mu.Unlock()
		close(done)
	}()
	return done
}

func (c *runtimeCatalog) snapshot() *engineRuntimes {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap
}

// get returns the cached runtimes (nil if never read), starting a
// refresh in the background when they are stale. Only when nothing was
// ever read does it wait, for at most wait, for the read to end.
func (c *runtimeCatalog) get(ctx context.Context, wait time.Duration) *engineRuntimes {
	c.mu.Lock()
	now := c.now()
	stale := c.snap == nil || now.Sub(c.snap.at) >= runtimesMaxAge
	retryOK := c.lastErr == nil || now.Sub(c.lastTry) >= runtimesRetryAfter
	var done chan struct{}
	if stale && (retryOK || c.inflight != nil) {
		done = c.startLocked()
	}
	snap := c.snap
	c.mu.Unlock()
	if snap != nil || done == nil || wait <= 0 {
		return snap
	}
	return c.await(ctx, done, wait)
}

// refresh reads the runtimes again, unless a read ended less than
// runtimesForcedMinGap ago, and waits for it (bounded by ctx). It returns
// the newest runtimes it has, and the error of the last read if it
// failed.
func (c *runtimeCatalog) refresh(ctx context.Context) (*engineRuntimes, error) {
	c.mu.Lock()
	done := c.inflight
	if done == nil && c.now().Sub(c.lastTry) >= runtimesForcedMinGap {
		done = c.startLocked()
	}
	c.mu.Unlock()
	snap := c.snapshot()
	if done != nil {
		snap = c.await(ctx, done, runtimesReadTimeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return snap, c.lastErr
}

func (c *runtimeCatalog) await(ctx context.Context, done chan struct{}, wait time.Duration) *engineRuntimes {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
	return c.snapshot()
}

// readEngineRuntimes is the catalog's read: docker info, with the API
// version (negotiated first if that has not happened yet).
func (ds *DockerService) readEngineRuntimes(ctx context.Context) (*engineRuntimes, error) {
	api, err := ds.engine.APIVersion(ctx)
	if err != nil {
		return nil, err
	}
	info, err := ds.engine.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking Docker for its runtimes: %w", err)
	}
	return newEngineRuntimes(info, api, ds.engine.runtimes.now()), nil
}

// liveAPIVersion is the API version negotiated now, else the one the
// runtimes were read with: features follow the engine netshim talks to.
func (ds *DockerService) liveAPIVersion(r *engineRuntimes) string {
	_, v := ds.engine.Versions()
	if v == "" && r != nil {
		v = r.apiVersion
	}
	return v
}

// statusRuntimeHandlers is Status's runtime_handlers, from the cache. It
// waits for the first read only while the engine is known to answer.
func (ds *DockerService) statusRuntimeHandlers(ctx context.Context) []*runtimeapi.RuntimeHandler {
	var wait time.Duration
	if ready, _ := ds.index.Health(); ready {
		wait = statusFirstReadWait
	}
	r := ds.engine.runtimes.get(ctx, wait)
	return r.handlers(ds.liveAPIVersion(r))
}

// checkRuntimeHandler refuses, before anything is created, a handler that
// names no runtime of the engine. The default handler needs no look-up.
func (ds *DockerService) checkRuntimeHandler(ctx context.Context, handler string) error {
	// From the cache as it is, reading nothing: the default handler
	// costs no docker info; Status (kubelet polls it) keeps it fresh.
	if r := ds.engine.runtimes.snapshot(); r != nil && r.wrapperMisuse != "" {
		return crirpc.WithCode(codes.FailedPrecondition, errors.New(r.wrapperMisuse))
	}
	if handler == "" {
		return nil
	}
	if handler == OCIWrapperRuntime {
		// It runs whatever namespaces a container's environment names:
		// only netshim may choose them (sandbox_netns.go).
		return crirpc.InvalidArgf("runtime handler %s is netshim's internal OCI runtime wrapper for pinned sandbox namespaces, not a RuntimeClass handler; use \"\" (the default) or another runtime", shortQuote(handler))
	}
	if r := ds.engine.runtimes.get(ctx, runtimesReadTimeout); r != nil && r.has(handler) {
		return nil
	}
	// Not in the cache: the runtime may just have been added.
	r, err := ds.engine.runtimes.refresh(ctx)
	if r == nil {
		if err == nil {
			err = ctx.Err()
		}
		return crirpc.WithCode(codes.Unavailable, fmt.Errorf("cannot check runtime handler %s: the Docker engine's runtimes are unknown: %w", shortQuote(handler), err))
	}
	if r.has(handler) {
		return nil
	}
	known := "no runtimes"
	if len(r.names) > 0 {
		known = "runtimes " + strings.Join(r.names, ", ")
	}
	return crirpc.InvalidArgf("unknown runtime handler %s: this Docker engine has %s; register one in daemon.json \"runtimes\" (or dockerd --add-runtime)", shortQuote(handler), known)
}

// checkRecursiveReadOnlyMounts refuses a recursive read-only mount the
// sandbox's runtime is known not to be able to make: Docker would accept
// the create and fail only the start. An API too old for it is left to
// the mount mapping, which says so; what is not known is left to Docker.
func (ds *DockerService) checkRecursiveReadOnlyMounts(ctx context.Context, mounts []*runtimeapi.Mount, handler, apiVersion string) error {
	i := slices.IndexFunc(mounts, func(m *runtimeapi.Mount) bool { return m.GetRecursiveReadOnly() })
	if i < 0 || !engine.APIAtLeast(apiVersion, minRecursiveReadOnlyAPI) {
		return nil
	}
	r := ds.engine.runtimes.get(ctx, runtimesReadTimeout)
	if s, why := r.recursiveReadOnly(handler, apiVersion); s == unsupported {
		return crirpc.InvalidArgf("mount %s: recursive read-only mounts are not supported with runtime handler %s: %s", mounts[i].GetContainerPath(), shortQuote(handler), why)
	}
	return nil
}
