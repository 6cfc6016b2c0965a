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
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/idmount"
	"github.com/netshim/netshim/pkg/podns"
)

// usernsCaps is what this node can do for pods with their own user
// namespace (hostUsers: false), read once per engine registration of the
// wrapper and once per data root: the wrapper's runc must make idmapped
// mounts (runc 1.2+), and the kernel and the engine's filesystem must take
// them for the image's overlayfs layers (Linux 5.19+). Kubelet sends such
// pods only to a handler that says it can (Status), and a pod that asks
// anyway where it cannot gets FailedPrecondition naming what is missing.
type usernsCaps struct {
	// probe checks the kernel and a data root (idmount.Probe).
	probe func(dir string) error
	// features runs the wrapper's `features` command (its runc's).
	features func(ctx context.Context, path string, args []string) ([]byte, error)

	mu      sync.Mutex
	kernel  map[string]error // by data root
	wrapper map[string]error // by registration and reported features

	// claims are the ranges of the pods being run.
	claims usernsClaims
}

// usernsRange is a pod's user namespace maps, for the overlap check.
type usernsRange struct {
	pod        string
	uids, gids []podns.IDMap
}

// usernsClaims keeps two pods from sharing node ids: kubelet gives each pod
// a range of its own, and a pod whose range overlaps another's could reach
// that pod's files and processes as their owner. A RunPodSandbox holds its
// pod's range from the check until the sandbox is in the index (or
// failed); the ones already made are usernsRangesInUse's.
type usernsClaims struct {
	mu       sync.Mutex
	inFlight map[string]usernsRange // by sandbox name
}

// claim checks the pod's range (if it asks for a user namespace) against
// inUse and the pods being run, and holds it until release.
func (c *usernsClaims) claim(name string, cfg *runtimeapi.PodSandboxConfig, inUse func() []usernsRange) (release func(), err error) {
	uids, gids, ok := dockerspec.PodUserNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())
	if !ok {
		return func() {}, nil
	}
	md := cfg.GetMetadata()
	mine := usernsRange{pod: md.GetNamespace() + "/" + md.GetName(), uids: uids, gids: gids}
	c.mu.Lock()
	defer c.mu.Unlock()
	others := inUse()
	for n, r := range c.inFlight {
		if n != name {
			others = append(others, r)
		}
	}
	for _, o := range others {
		if kind, ok := overlap(mine, o); ok {
			return nil, crirpc.InvalidArgf("pod sandbox: its user namespace's %s range %v overlaps that of pod %s (%v): each pod needs ids of its own, which kubelet gives it", kind, pickKind(mine, kind), o.pod, pickKind(o, kind))
		}
	}
	if c.inFlight == nil {
		c.inFlight = map[string]usernsRange{}
	}
	c.inFlight[name] = mine
	return func() {
		c.mu.Lock()
		delete(c.inFlight, name)
		c.mu.Unlock()
	}, nil
}

func pickKind(r usernsRange, kind string) []podns.IDMap {
	if kind == "gid" {
		return r.gids
	}
	return r.uids
}

// overlap says whether two pods' ranges share a node id, and of which kind.
func overlap(a, b usernsRange) (string, bool) {
	hit := func(x, y []podns.IDMap) bool {
		for _, m := range x {
			for _, n := range y {
				if uint64(m.HostID) < uint64(n.HostID)+uint64(n.Size) && uint64(n.HostID) < uint64(m.HostID)+uint64(m.Size) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case hit(a.uids, b.uids):
		return "uid", true
	case hit(a.gids, b.gids):
		return "gid", true
	}
	return "", false
}

// usernsRangesInUse are the ranges of the sandboxes whose pinned user
// namespace still exists: until it is torn down, a pod's processes may
// hold its ids.
func (ds *DockerService) usernsRangesInUse() []usernsRange {
	var out []usernsRange
	for _, rec := range ds.store().List(store.KindSandbox) {
		info := rec.SandboxInfo()
		uids, gids, ok := dockerspec.PodUserNS(info.NamespaceOptions)
		if !ok {
			continue
		}
		path := rec.DockerLabels[labelUserNS]
		if cp := ds.getCheckpoint(rec.ID); cp != nil && cp.UserNS != "" {
			path = cp.UserNS
		}
		if path == "" || podns.Verify(path, podns.User) != nil {
			continue
		}
		out = append(out, usernsRange{pod: info.Metadata.GetNamespace() + "/" + info.Metadata.GetName(), uids: uids, gids: gids})
	}
	return out
}

func newUsernsCaps() *usernsCaps {
	return &usernsCaps{probe: idmount.Probe, features: runWrapperFeatures}
}

// wrapperFeaturesTimeout bounds `netshim-oci features`, a short local
// command.
const wrapperFeaturesTimeout = 10 * time.Second

// runWrapperFeatures runs `PATH [ARGS] features`, as the engine would run
// the runtime, for its OCI features document.
func runWrapperFeatures(ctx context.Context, path string, args []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, wrapperFeaturesTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, append(slices.Clone(args), "features")...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%s features: %w: %s", path, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s features: %w", path, err)
	}
	return out, nil
}

// check says whether the engine's wrapper and this node can run a pod
// user namespace: nil, or what is missing.
func (u *usernsCaps) check(ctx context.Context, r *engine.Runtimes) error {
	if r == nil || !r.HasWrapper {
		return fmt.Errorf("the Docker engine has no runtime %s, through which a pod's containers join its user namespace", OCIWrapperRuntime)
	}
	if err := u.wrapperOK(ctx, r); err != nil {
		return err
	}
	dir := r.DataRoot
	if dir == "" {
		dir = "/var/lib/docker"
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.kernel == nil {
		u.kernel = map[string]error{}
	}
	err, ok := u.kernel[dir]
	if !ok {
		err = u.probe(dir)
		u.kernel[dir] = err
		if err != nil {
			klog.InfoS("Pods with their own user namespace (hostUsers: false) cannot run on this node", "reason", err)
		}
	}
	return err
}

// wrapperOK says whether the wrapper's runc makes idmapped mounts: from
// the features Docker reports for it (Docker 25+), else by running it.
func (u *usernsCaps) wrapperOK(ctx context.Context, r *engine.Runtimes) error {
	key := r.WrapperPath + "\x00" + strings.Join(r.WrapperArgs, "\x00") + "\x00" + string(r.WrapperFeatures)
	u.mu.Lock()
	err, ok := u.wrapper[key]
	u.mu.Unlock()
	if ok {
		return err
	}
	doc := r.WrapperFeatures
	if doc == nil {
		doc, err = u.features(ctx, r.WrapperPath, r.WrapperArgs)
	}
	if err == nil {
		var idmap bool
		idmap, err = engine.ParseIDMapFeature(doc)
		if err == nil && !idmap {
			err = fmt.Errorf("the runc that runtime %s execs does not make idmapped mounts (runc 1.2 or later does; give the wrapper one with runtimeArgs [\"--netshim-runc=/path/to/runc\"])", OCIWrapperRuntime)
		}
	}
	if ctx.Err() != nil {
		return err // not remembered: the caller gave up, not the wrapper
	}
	u.mu.Lock()
	if u.wrapper == nil {
		u.wrapper = map[string]error{}
	}
	u.wrapper[key] = err
	u.mu.Unlock()
	if err != nil {
		klog.InfoS("Pods with their own user namespace (hostUsers: false) cannot run with this Docker engine", "reason", err)
	}
	return err
}

// usernsSupport says whether a pod with its own user namespace can run
// now with the handler, pinned saying whether its sandbox would pin its
// namespaces: nil, or FailedPrecondition naming what is missing. Nothing
// is made before it is asked.
func (ds *DockerService) usernsSupport(ctx context.Context, handler string, pinned bool) error {
	fail := func(why string) error {
		return crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod with its own user namespace (hostUsers: false): %s", why))
	}
	switch {
	case handler != "":
		return fail(fmt.Sprintf("its containers run under netshim's OCI wrapper, which execs runc: runtime handler %q cannot give them one; run it without a RuntimeClass", handler))
	case ds.pins.pinner == nil || ds.pins.ociKey == nil:
		return fail("netshim pins the pod's user namespace under --netns-dir, and has none (or no key there)")
	case !pinned:
		m := ds.sandboxNetNSMode(ctx)
		return fail(fmt.Sprintf("it needs the pinned or pause-less sandbox mode, and new pods get mode %s (%s)", m.Mode, m.Reason))
	}
	if err := searchableByOthers(ds.pins.pinner.Dir()); err != nil {
		return fail(err.Error())
	}
	if err := ds.userns.check(ctx, ds.engine.Runtimes(ctx, engine.RuntimesReadTimeout)); err != nil {
		return fail(err.Error())
	}
	return nil
}

// handlerSupportsUserns is Status's user_namespaces feature of a runtime
// handler: only the default handler's pods run under the wrapper, and
// only where usernsSupport would let them.
func (ds *DockerService) handlerSupportsUserns(ctx context.Context, handler string) bool {
	if handler != "" {
		return false
	}
	switch ds.sandboxNetNSMode(ctx).Mode {
	case SandboxNetNSPinned, SandboxNetNSPauseless:
		return ds.usernsSupport(ctx, "", true) == nil
	}
	return false
}

// usernsInfo is Status's verbose info on pods with their own user
// namespace: whether the default handler's can run now, and if not why,
// as RunPodSandbox would refuse one.
func (ds *DockerService) usernsInfo(ctx context.Context) string {
	var err error
	switch m := ds.sandboxNetNSMode(ctx); m.Mode {
	case SandboxNetNSPinned, SandboxNetNSPauseless:
		err = ds.usernsSupport(ctx, "", true)
	default:
		err = ds.usernsSupport(ctx, "", false)
	}
	b, _ := json.Marshal(struct {
		Supported bool   `json:"supported"`
		Reason    string `json:"reason,omitempty"`
	}{err == nil, errMessage(err)})
	return string(b)
}

// errMessage is an error's message, "" for nil.
func errMessage(err error) string {
	if err == nil {
		return ""
	}
	return status.Convert(crirpc.ToStatus(err)).Message()
}

// wrapperRuntime is the runtime of a container whose marker asks the OCI
// wrapper for something (a pod user namespace, Strict groups), "" when the
// engine has no usable wrapper or the pod named a runtime handler, which
// the wrapper's runc would replace. The engine's runtimes come from the
// catalogue, read again only when stale (a netshim just started, an engine
// that was down).
func (ds *DockerService) wrapperRuntime(ctx context.Context, handler string) string {
	return ds.wrapperIn(ds.engine.Runtimes(ctx, engine.RuntimesReadTimeout), handler)
}

// wrapperIn is wrapperRuntime for the engine's runtimes r.
func (ds *DockerService) wrapperIn(r *engine.Runtimes, handler string) string {
	if handler != "" || ds.pins.ociKey == nil || r == nil || !r.HasWrapper || r.WrapperMisuse != "" {
		return ""
	}
	return OCIWrapperRuntime
}

// sandboxUserNS is the pinned user namespace a new container of the
// sandbox joins, with the pod's maps, or nil for a pod in the node's. One
// whose file is gone (unmounted behind netshim's back, a reboot) fails the
// create: the pod cannot get it back, kubelet makes a new sandbox.
func (ds *DockerService) sandboxUserNS(sb *store.Record, info *labelcodec.Sandbox) (*dockerspec.UserNS, *podns.Key, error) {
	uids, gids, ok := dockerspec.PodUserNS(info.NamespaceOptions)
	if !ok {
		return nil, nil, nil
	}
	cp := ds.getCheckpoint(sb.ID)
	path := ""
	if cp != nil {
		path = cp.UserNS
	}
	if path == "" {
		path = sb.DockerLabels[labelUserNS]
	}
	if path == "" {
		return nil, nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s asked for its own user namespace but has none recorded", sb.ID))
	}
	_, key, ok := ds.pinnerFor(path)
	if !ok {
		return nil, nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s: its user namespace %s is not in a directory of netshim's", sb.ID, path))
	}
	if err := podns.Verify(path, podns.User); err != nil {
		return nil, nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not ready: its user namespace is gone: %w", sb.ID, err))
	}
	return &dockerspec.UserNS{Path: path, UIDs: uids, GIDs: gids}, key, nil
}

// keyDir is the directory whose key signs markers that name no namespace.
func (p *nsPinning) keyDir() string {
	if p.pinner == nil {
		return ""
	}
	return p.pinner.Dir()
}

// searchableByOthers checks that every directory from / down to dir lets
// others through (o+x): the OCI wrapper mounts a container's idmapped
// image under the directory of its pod's pinned user namespace, and runc
// sets it up as the container's root, an unprivileged user of the node.
// (/run/netshim/netns, the default, is; a directory made by mktemp is
// not.) A directory that does not exist yet is made by netshim, 0711.
func searchableByOthers(dir string) error {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return err
		case st.Mode().Perm()&0o001 == 0:
			return fmt.Errorf("the directory %s (mode %#o) does not let others through, and a pod's root, an unprivileged user of the node, must reach its image, which netshim's OCI wrapper mounts under --netns-dir %s: chmod o+x %s", d, st.Mode().Perm(), dir, d)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}
