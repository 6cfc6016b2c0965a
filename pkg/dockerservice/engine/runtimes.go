package engine

import (
	"context"
	"encoding/json"
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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// The engine's runtimes, which CRI runtime handlers name (dockerservice's
// runtime_handlers.go), come from `docker info`, which is costly on the
// engine's side (it counts containers and images) and which kubelet would
// otherwise trigger every few seconds through Status. It is cached for
// RuntimesMaxAge; Status serves the cached answer at once and refreshes it
// in the background when it is older. A RunPodSandbox naming a handler the
// cache does not know reads it again at once: a runtime added to
// daemon.json (SIGHUP) is usable without waiting for the cache to age.

const (
	// OCIWrapperRuntime is the Docker runtime name cmd/netshim-oci must
	// be registered under. The catalogue keeps it apart from the
	// engine's runtimes: it is no runtime handler.
	OCIWrapperRuntime = "netshim-oci"
	// MinRecursiveReadOnlyAPI is the first Docker API with recursive
	// read-only bind mounts (BindOptions.ReadOnlyForceRecursive).
	MinRecursiveReadOnlyAPI = "1.44"

	// RuntimesMaxAge is how long docker info's runtimes are served before
	// a refresh starts.
	RuntimesMaxAge = 30 * time.Second
	// RuntimesRetryAfter spaces the reads after one failed: an engine
	// that does not answer is not asked at every Status poll.
	RuntimesRetryAfter = 5 * time.Second
	// RuntimesForcedMinGap spaces the reads a handler the cache does not
	// know forces: pods with a misspelt handler, retried by kubelet,
	// cost at most one docker info per gap.
	RuntimesForcedMinGap = time.Second
	// RuntimesReadTimeout bounds one docker info; the read runs detached
	// from the caller, which may stop waiting earlier.
	RuntimesReadTimeout = 10 * time.Second
	// rroMinKernelMajor/Minor: mount_setattr(2), which runc's "rro"
	// mount option needs, came with Linux 5.12.
	rroMinKernelMajor, rroMinKernelMinor = 5, 12
	// ociFeaturesKey is where Docker 25+ puts a runtime's OCI features
	// (`runc features`) in docker info's runtime status.
	ociFeaturesKey = "org.opencontainers.runtime-spec.features"
)

// Runtimes is what one docker info said about the engine's runtimes.
type Runtimes struct {
	at time.Time
	// Names are every runtime the engine has, sorted.
	Names []string
	// DefaultRuntime is the runtime handler "" stands for.
	DefaultRuntime string
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
	// HasWrapper says the engine has netshim's OCI runtime wrapper,
	// OCIWrapperRuntime (not in Names: it is no handler).
	HasWrapper bool
	// WrapperPath and WrapperArgs are the wrapper's registration (path
	// and runtimeArgs), with which netshim asks it for its runc's
	// features when Docker does not report them (before Docker 25).
	WrapperPath string
	WrapperArgs []string
	// WrapperFeatures is the wrapper's OCI features document as Docker
	// reported it (Docker 25+, which runs `features` as it runs the
	// runtime); nil when not reported.
	WrapperFeatures []byte
	// DataRoot is the engine's data root (docker info's DockerRootDir),
	// where its images' layers are.
	DataRoot string
	// WrapperMisuse, if not empty, says how the engine runs the wrapper
	// as something else than OCIWrapperRuntime: as its default runtime or
	// under another name, where it would run containers netshim did not
	// make for it. RunPodSandbox refuses pods while it lasts.
	WrapperMisuse string
}

// ociFeatures is the part of the OCI runtime features document
// (runtime-spec features.md) netshim reads.
type ociFeatures struct {
	MountOptions []string `json:"mountOptions"`
	Linux        struct {
		MountExtensions struct {
			IDMap struct {
				Enabled *bool `json:"enabled"`
			} `json:"idmap"`
		} `json:"mountExtensions"`
	} `json:"linux"`
}

// ParseIDMapFeature reads from an OCI features document (`runc features`)
// whether the runtime makes idmapped mounts: runc 1.2 and later say so;
// runc 1.1's document has no such member (false).
func ParseIDMapFeature(doc []byte) (bool, error) {
	var f ociFeatures
	if err := json.Unmarshal(doc, &f); err != nil {
		return false, fmt.Errorf("reading the runtime's OCI features: %w", err)
	}
	e := f.Linux.MountExtensions.IDMap.Enabled
	return e != nil && *e, nil
}

func newRuntimes(info system.Info, apiVersion string, at time.Time) *Runtimes {
	r := &Runtimes{at: at, DefaultRuntime: info.DefaultRuntime, kernel: info.KernelVersion, apiVersion: apiVersion, features: map[string]ociFeatures{}, DataRoot: info.DockerRootDir}
	if major, minor, ok := parseKernelVersion(info.KernelVersion); ok {
		r.kernelKnown = true
		r.kernelOK = major > rroMinKernelMajor || major == rroMinKernelMajor && minor >= rroMinKernelMinor
	}
	for name, rt := range info.Runtimes {
		if name == OCIWrapperRuntime {
			// netshim's own (sandbox_netns.go): kept apart, so that
			// Status does not offer it as a RuntimeClass handler.
			r.HasWrapper = true
			r.WrapperPath, r.WrapperArgs = rt.Path, rt.Args
			if doc, ok := rt.Status[ociFeaturesKey]; ok {
				r.WrapperFeatures = []byte(doc)
			}
			continue
		}
		r.Names = append(r.Names, name)
		if doc, ok := rt.Status[ociFeaturesKey]; ok {
			var f ociFeatures
			if err := json.Unmarshal([]byte(doc), &f); err != nil {
				klog.InfoS("WARNING: Docker reports OCI features of a runtime that cannot be read; treating them as unknown", "runtime", name, "err", err)
				continue
			}
			r.features[name] = f
		}
	}
	if r.DefaultRuntime != "" && !slices.Contains(r.Names, r.DefaultRuntime) {
		r.Names = append(r.Names, r.DefaultRuntime)
	}
	slices.Sort(r.Names)
	r.WrapperMisuse = wrapperMisuse(info, ownWrapper())
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

// Has says whether a runtime handler names one of the engine's runtimes.
func (r *Runtimes) Has(handler string) bool {
	return handler == "" || slices.Contains(r.Names, handler)
}

// runtimeOf is the Docker runtime a handler stands for.
func (r *Runtimes) runtimeOf(handler string) string {
	if handler == "" {
		return r.DefaultRuntime
	}
	return handler
}

// Support is an answer that may be unknown.
type Support int

const (
	SupportUnknown Support = iota
	Supported
	Unsupported
)

// RecursiveReadOnly says whether a handler's containers can have
// recursively read-only mounts, and if not, why. Docker can be asked for
// them from API 1.44 (BindOptions.ReadOnlyForceRecursive), and then
// refuses the start unless the kernel has mount_setattr and the runtime's
// OCI features list the "rro" mount option: each must be known to hold.
func (r *Runtimes) RecursiveReadOnly(handler, apiVersion string) (Support, string) {
	if !APIAtLeast(apiVersion, MinRecursiveReadOnlyAPI) {
		return Unsupported, fmt.Sprintf("this engine speaks Docker API %s; recursive read-only mounts need %s (Docker 25)", apiVersion, MinRecursiveReadOnlyAPI)
	}
	if r == nil {
		return SupportUnknown, ""
	}
	if r.kernelKnown && !r.kernelOK {
		return Unsupported, fmt.Sprintf("the engine's kernel %s is older than %d.%d (no mount_setattr)", r.kernel, rroMinKernelMajor, rroMinKernelMinor)
	}
	rt := r.runtimeOf(handler)
	if !slices.Contains(r.Names, rt) {
		return SupportUnknown, ""
	}
	f, ok := r.features[rt]
	switch {
	case !ok:
		return Unsupported, fmt.Sprintf("Docker reports no OCI features for runtime %q, and refuses recursive read-only mounts without them", rt)
	case !slices.Contains(f.MountOptions, "rro"):
		return Unsupported, fmt.Sprintf("runtime %q does not list the \"rro\" mount option among its OCI features", rt)
	case !r.kernelKnown:
		return SupportUnknown, ""
	}
	return Supported, ""
}

// Handlers is Status's runtime_handlers: the default handler "" first,
// then every runtime of the engine by name. Nothing read yet gives the
// default handler with no features claimed.
func (r *Runtimes) Handlers(apiVersion string) []*runtimeapi.RuntimeHandler {
	names := []string{""}
	if r != nil {
		names = append(names, r.Names...)
	}
	out := make([]*runtimeapi.RuntimeHandler, 0, len(names))
	for _, n := range names {
		rro, _ := r.RecursiveReadOnly(n, apiVersion)
		out = append(out, &runtimeapi.RuntimeHandler{
			Name: n,
			Features: &runtimeapi.RuntimeHandlerFeatures{
				RecursiveReadOnlyMounts: rro == Supported,
				// Docker has no per-container user namespace; netshim's
				// OCI wrapper gives one to the default handler's pods
				// where it can (dockerservice's Status sets it).
				UserNamespaces: false,
			},
		})
	}
	return out
}

// runtimeCatalog caches docker info's runtimes: one read at a time, run
// detached from the callers, who wait for it as long as they choose.
type runtimeCatalog struct {
	read func(ctx context.Context) (*Runtimes, error)
	now  func() time.Time

	mu   sync.Mutex
	snap *Runtimes
	// inflight is closed when the running read ends; nil when none runs.
	inflight chan struct{}
	lastTry  time.Time
	lastErr  error
}

func newRuntimeCatalog(read func(context.Context) (*Runtimes, error)) *runtimeCatalog {
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
		ctx, cancel := context.WithTimeout(context.Background(), RuntimesReadTimeout)
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

func (c *runtimeCatalog) snapshot() *Runtimes {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap
}

// get returns the cached runtimes (nil if never read), starting a
// refresh in the background when they are stale. Only when nothing was
// ever read does it wait, for at most wait, for the read to end.
func (c *runtimeCatalog) get(ctx context.Context, wait time.Duration) *Runtimes {
	c.mu.Lock()
	now := c.now()
	stale := c.snap == nil || now.Sub(c.snap.at) >= RuntimesMaxAge
	retryOK := c.lastErr == nil || now.Sub(c.lastTry) >= RuntimesRetryAfter
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
// RuntimesForcedMinGap ago, and waits for it (bounded by ctx). It returns
// the newest runtimes it has, and the error of the last read if it
// failed.
func (c *runtimeCatalog) refresh(ctx context.Context) (*Runtimes, error) {
	c.mu.Lock()
	done := c.inflight
	if done == nil && c.now().Sub(c.lastTry) >= RuntimesForcedMinGap {
		done = c.startLocked()
	}
	c.mu.Unlock()
	snap := c.snapshot()
	if done != nil {
		snap = c.await(ctx, done, RuntimesReadTimeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return snap, c.lastErr
}

func (c *runtimeCatalog) await(ctx context.Context, done chan struct{}, wait time.Duration) *Runtimes {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
	return c.snapshot()
}

// readRuntimes is the catalogue's read: docker info, with the API
// version (negotiated first if that has not happened yet).
func (e *Engine) readRuntimes(ctx context.Context) (*Runtimes, error) {
	api, err := e.APIVersion(ctx)
	if err != nil {
		return nil, err
	}
	info, err := e.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking Docker for its runtimes: %w", err)
	}
	return newRuntimes(info, api, e.runtimes.now()), nil
}

// LiveAPIVersion is the API version negotiated now, else the one r was
// read with: features follow the engine netshim talks to.
func (e *Engine) LiveAPIVersion(r *Runtimes) string {
	_, v := e.versions.get()
	if v == "" && r != nil {
		v = r.apiVersion
	}
	return v
}

// Runtimes returns the cached runtimes (nil if never read), starting a
// refresh in the background when they are stale. Only when nothing was
// ever read does it wait, for at most wait, for the read to end.
func (e *Engine) Runtimes(ctx context.Context, wait time.Duration) *Runtimes {
	return e.runtimes.get(ctx, wait)
}

// CachedRuntimes is the cache as it is, nil if never read: it reads
// nothing, for callers that must not cost a docker info.
func (e *Engine) CachedRuntimes() *Runtimes { return e.runtimes.snapshot() }

// RefreshRuntimes reads the runtimes again, unless a read ended less than
// RuntimesForcedMinGap ago, and waits for it (bounded by ctx). It returns
// the newest runtimes it has, and the error of the last read if it
// failed.
func (e *Engine) RefreshRuntimes(ctx context.Context) (*Runtimes, error) {
	return e.runtimes.refresh(ctx)
}

// SetClock sets the clock the catalogue ages its runtimes by, for tests;
// it may be called while reads run.
func (e *Engine) SetClock(now func() time.Time) {
	e.runtimes.mu.Lock()
	defer e.runtimes.mu.Unlock()
	e.runtimes.now = now
}
