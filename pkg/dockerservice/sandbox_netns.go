package dockerservice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"google.golang.org/grpc/codes"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/podns"
)

// Where a sandbox's network namespace comes from (--sandbox-netns).
//
// In the docker mode, today's and the one that works on any engine, the
// pause container's own netns is the pod's: CNI ADD can only start once the
// container runs, and teardown finds the netns through the container's
// process, so a DEL after the container is gone gets no netns at all.
//
// In the pinned mode netshim makes the pod's netns itself, a bind mount
// under --netns-dir (package podns), runs CNI ADD into it while Docker
// creates and starts the pause container in it, and DELs with that path
// until the pod is torn down, when it removes the file. Docker cannot put a
// container in a netns given by path, so the pause container runs under
// netshim's OCI runtime wrapper (cmd/netshim-oci), registered in the engine
// as the runtime OCIWrapperRuntime; netshim names the netns in the
// container's environment (podns.EnvKey) and the wrapper moves it into the
// OCI config before it execs runc.
const (
	SandboxNetNSAuto   = "auto"
	SandboxNetNSPinned = "pinned"
	SandboxNetNSDocker = "docker"

	// OCIWrapperRuntime is the Docker runtime name cmd/netshim-oci must
	// be registered under.
	OCIWrapperRuntime = engine.OCIWrapperRuntime
)

// ValidSandboxNetNSMode checks a --sandbox-netns value.
func ValidSandboxNetNSMode(mode string) error {
	switch mode {
	case SandboxNetNSAuto, SandboxNetNSPinned, SandboxNetNSDocker, SandboxNetNSPauseless:
		return nil
	}
	return fmt.Errorf("--sandbox-netns %q: want auto, pinned, pauseless or docker", mode)
}

// nsPinning is what the pinning of pod namespaces needs, in every mode
// that pins (pinned, pause-less) and for the teardown of sandboxes made
// in one.
type nsPinning struct {
	// pinner makes the pinned namespaces; nil without a --netns-dir.
	// pinning holds the files a RunPodSandbox is making, which the
	// start-up sweep must leave; pinMu orders the two.
	pinner *podns.Pinner
	// ociKey signs the markers naming pinned namespaces (podns.KeyFile in
	// --netns-dir), which the OCI wrapper applies only with its MAC: an
	// image's ENV cannot name a namespace. nil without a --netns-dir.
	ociKey  *podns.Key
	pinMu   sync.Mutex
	pinning map[string]bool
	// writeSysctls writes a pod's sysctls into its pinned namespaces,
	// before the CNI ADD (podns.WriteSysctls; sandbox_sysctls.go).
	writeSysctls func(podns.Paths, map[string]string) error
	// netSysctlDefaults are the engine's defaults for a pod network
	// namespace, written with the pod's own before the ADD
	// (engineNetSysctlDefaults; sandbox_sysctls.go).
	netSysctlDefaults map[string]string
}

// initPinning checks --sandbox-netns and, with a --netns-dir, sets up the
// pinning of namespaces there: the pinner and the OCI wrapper's key.
func (ds *DockerService) initPinning() error {
	cfg := ds.cfg
	if cfg.SandboxNetNS != "" {
		if err := ValidSandboxNetNSMode(cfg.SandboxNetNS); err != nil {
			return err
		}
	}
	if cfg.NetNSDir == "" {
		if cfg.SandboxNetNS == SandboxNetNSAuto || cfg.SandboxNetNS == SandboxNetNSPinned || cfg.SandboxNetNS == SandboxNetNSPauseless {
			return fmt.Errorf("--sandbox-netns=%s needs a --netns-dir", cfg.SandboxNetNS)
		}
		return nil
	}
	// Also in the docker mode: sandboxes made while pinned still tear
	// down with, and then remove, the netns they name.
	ds.pins.pinner = podns.NewPinner(cfg.NetNSDir)
	key, err := podns.LoadOrCreateKey(cfg.NetNSDir)
	switch {
	case err == nil:
		ds.pins.ociKey = key
	case cfg.SandboxNetNS == SandboxNetNSDocker || cfg.SandboxNetNS == "":
		// Only pinning needs it; a pod's start must not fail for it.
		klog.ErrorS(err, "Cannot make the OCI wrapper's key; pinned sandboxes stay possible to tear down", "netnsDir", cfg.NetNSDir)
	default:
		return fmt.Errorf("--netns-dir %s: %w", cfg.NetNSDir, err)
	}
	return nil
}

// netnsMode is the sandbox netns mode in effect, and why.
type netnsMode struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason"`
	// code is the modeReason of a docker mode that auto fell back to
	// (reasonNoWrapper, reasonEngineDefaultRuntime), "" otherwise.
	code string
}

// sandboxNetNSMode says which mode new sandboxes (with the default
// runtime handler and their own network) get now: in the pauseless mode,
// and in auto with the wrapper, those that need no pause container
// (chooseSandboxController has the rest). auto follows the engine: the
// runtimes are read again every engine.RuntimesMaxAge, so registering the
// wrapper (`netshim engine register`) switches new pods to the fast modes
// without a restart, and unregistering it switches them back.
func (ds *DockerService) sandboxNetNSMode(ctx context.Context) netnsMode {
	switch ds.cfg.SandboxNetNS {
	case SandboxNetNSDocker, "":
		// No read for this mode; a misregistered wrapper fails every
		// pod in any mode (checkRuntimeHandler).
		if r := ds.engine.CachedRuntimes(); r != nil && r.WrapperMisuse != "" {
			return netnsMode{Mode: "unavailable", Reason: "RunPodSandbox fails: " + r.WrapperMisuse}
		}
		return netnsMode{Mode: SandboxNetNSDocker, Reason: "--sandbox-netns=docker"}
	}
	r := ds.engine.Runtimes(ctx, engine.RuntimesReadTimeout)
	if r != nil && r.WrapperMisuse != "" {
		return netnsMode{Mode: "unavailable", Reason: "RunPodSandbox fails: " + r.WrapperMisuse}
	}
	if r != nil && r.HasWrapper && ds.cfg.SandboxNetNS == SandboxNetNSAuto && r.DefaultRuntime != "" && r.DefaultRuntime != "runc" {
		// The wrapper execs runc: on an engine whose default runtime is
		// another (gVisor, say), auto must not move the pause containers
		// of default-handler pods to runc.
		return netnsMode{SandboxNetNSDocker, fmt.Sprintf("--sandbox-netns=auto and the Docker engine's default runtime is %q, not runc, which %s execs", r.DefaultRuntime, OCIWrapperRuntime), reasonEngineDefaultRuntime}
	}
	if r != nil && r.HasWrapper && ds.cfg.SandboxNetNS != SandboxNetNSPinned {
		return netnsMode{Mode: SandboxNetNSPauseless, Reason: fmt.Sprintf("--sandbox-netns=%s and the Docker engine has runtime %s; pods that share a PID namespace or use the node's IPC namespace get a pause container (pinned), host-network pods and pods with a runtime handler the docker mode", ds.cfg.SandboxNetNS, OCIWrapperRuntime)}
	}
	if r != nil && r.HasWrapper {
		return netnsMode{Mode: SandboxNetNSPinned, Reason: fmt.Sprintf("--sandbox-netns=%s and the Docker engine has runtime %s", ds.cfg.SandboxNetNS, OCIWrapperRuntime)}
	}
	why := "the Docker engine's runtimes are not known yet"
	if r != nil {
		why = fmt.Sprintf("the Docker engine has no runtime %s (it has %v)", OCIWrapperRuntime, r.Names)
	}
	if ds.cfg.SandboxNetNS == SandboxNetNSPinned || ds.cfg.SandboxNetNS == SandboxNetNSPauseless {
		return netnsMode{Mode: "unavailable", Reason: "--sandbox-netns=" + ds.cfg.SandboxNetNS + " but " + why + ": RunPodSandbox fails until it is registered (netshim engine register)"}
	}
	return netnsMode{SandboxNetNSDocker, "--sandbox-netns=auto and " + why + " (netshim engine register adds it)", reasonNoWrapper}
}

// usePinnedNetNS decides for one sandbox. Host-network pods have no netns
// of their own. A pod with a RuntimeClass handler keeps the docker mode:
// the wrapper execs runc, and the pod asked for another runtime (a VM
// runtime must make its own sandbox). With --sandbox-netns=pinned an
// engine without the wrapper is an error the operator must fix, not a
// silent fallback.
func (ds *DockerService) usePinnedNetNS(ctx context.Context, hostNetwork bool, handler string) (bool, error) {
	if hostNetwork || handler != "" || ds.cfg.SandboxNetNS == SandboxNetNSDocker || ds.cfg.SandboxNetNS == "" {
		return false, nil
	}
	switch m := ds.sandboxNetNSMode(ctx); m.Mode {
	case SandboxNetNSPinned, SandboxNetNSPauseless:
		return true, nil
	case SandboxNetNSDocker:
		return false, nil
	}
	// Pinned asked for, wrapper not seen: it may just have been added.
	if r, _ := ds.engine.RefreshRuntimes(ctx); r != nil && r.WrapperMisuse != "" {
		return false, crirpc.WithCode(codes.FailedPrecondition, errors.New(r.WrapperMisuse))
	} else if r != nil && r.HasWrapper {
		return true, nil
	}
	return false, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("--sandbox-netns=%s needs netshim's OCI runtime wrapper registered in the Docker engine as runtime %q (daemon.json \"runtimes\": {%q: {\"path\": \"/usr/bin/netshim-oci\"}}, then SIGHUP dockerd), or run netshim with --sandbox-netns=auto", ds.cfg.SandboxNetNS, OCIWrapperRuntime, OCIWrapperRuntime))
}

// pinnerFor returns the Pinner that owns a pinned file and the key of its
// directory: --netns-dir's, or, for a sandbox made while netshim ran with
// another --netns-dir, that directory's, provided it holds netshim's key
// (podns.KeyFile, which only netshim makes): such a pod's teardown
// removes its files and its new containers get markers its directory's
// key signed, instead of stranding the pod and leaking the mounts. A path
// in no such directory is no file of netshim's (false).
func (ds *DockerService) pinnerFor(path string) (*podns.Pinner, *podns.Key, bool) {
	if ds.pins.pinner == nil || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, nil, false
	}
	if ds.pins.pinner.Owns(path) {
		return ds.pins.pinner, ds.pins.ociKey, ds.pins.ociKey != nil
	}
	dir := filepath.Dir(path)
	key, err := podns.ReadKey(dir)
	if err != nil {
		return nil, nil, false
	}
	return podns.NewPinner(dir), key, true
}

// labelNetNS names a sandbox's pinned netns on its infra container: the
// second record of it, which rebuilds a lost or damaged checkpoint's
// (checkpoint_recover.go) and keeps the start-up sweep off the file.
const labelNetNS = labelcodec.Prefix + "netns"

// labelUserNS names a sandbox's pinned user namespace (hostUsers: false) on
// its infra container, as labelNetNS its netns.
const labelUserNS = labelcodec.Prefix + "userns"

// pinSandboxNetNS makes a new pinned netns for a sandbox being created,
// and for a pod with its own user namespace (uids and gids not empty) that
// namespace too, which then owns the netns. Its name is random: the
// sandbox ID is Docker's, known only after the create, and the path must
// be in the create's config. Until done is called (once the checkpoint
// names the files, or they were removed) the start-up sweep leaves them
// alone.
func (ds *DockerService) pinSandboxNetNS(uids, gids []podns.IDMap) (paths podns.Paths, done func(), err error) {
	if ds.pins.ociKey == nil {
		return nil, nil, dockerspec.ErrNoOCIKey
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, nil, err
	}
	name := "pod-" + hex.EncodeToString(b[:])
	held := []string{ds.pins.pinner.Path(name, podns.Net), ds.pins.pinner.Path(name, podns.User)}
	ds.pins.pinMu.Lock()
	for _, p := range held {
		ds.pins.pinning[p] = true
	}
	if len(uids) > 0 {
		paths, err = ds.pins.pinner.PinUser(name, uids, gids, podns.Net)
	} else {
		paths, err = ds.pins.pinner.Pin(name, podns.Net)
	}
	ds.pins.pinMu.Unlock()
	done = func() {
		ds.pins.pinMu.Lock()
		for _, p := range held {
			delete(ds.pins.pinning, p)
		}
		ds.pins.pinMu.Unlock()
	}
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("making the pod's network namespace: %w", err)
	}
	return paths, done, nil
}

// pinnedNetNS returns the sandbox's pinned netns path if it has one that
// still exists.
func (ds *DockerService) pinnedNetNS(cp *checkpoint.PodSandbox) (string, bool) {
	if cp == nil || cp.NetNS == "" {
		return "", false
	}
	if _, _, ok := ds.pinnerFor(cp.NetNS); !ok {
		return "", false
	}
	if err := podns.Verify(cp.NetNS, podns.Net); err != nil {
		return "", false
	}
	return cp.NetNS, true
}

// releasePinnedNamespaces removes a sandbox's pinned netns (and, for a
// pause-less sandbox, its other namespaces and /dev/shm) once its network
// is torn down and its containers stopped. Idempotent. A container still
// running keeps a namespace alive without its file.
func (ds *DockerService) releasePinnedNamespaces(cp *checkpoint.PodSandbox) error {
	if cp == nil || ds.pins.pinner == nil {
		return nil
	}
	for _, f := range pauselessFiles(cp) {
		pinner, _, ok := ds.pinnerFor(f)
		if !ok {
			// A checkpoint naming a file elsewhere is not netshim's to
			// remove; nothing netshim made is left there.
			klog.InfoS("WARNING: sandbox checkpoint names a namespace outside --netns-dir and any directory holding netshim's key; not removing it", "podSandboxID", cp.SandboxID, "path", f, "netnsDir", ds.pins.pinner.Dir())
			continue
		}
		if err := pinner.Remove(f); err != nil {
			return fmt.Errorf("pod sandbox %s: %w", cp.SandboxID, err)
		}
	}
	return nil
}

// sweepPinnedNetNS removes, once at start-up, the pinned netns files no
// sandbox names: left by a daemon killed between making one and writing
// the sandbox's checkpoint (whose container then never started), or by a
// sandbox whose checkpoint and container are both gone. It runs after the
// first index sync and the rebuild of damaged checkpoints, so a sandbox
// names its file through its checkpoint or its infra container's label;
// files a RunPodSandbox is making are skipped (pinMu orders the two).
func (ds *DockerService) sweepPinnedNetNS() {
	if ds.pins.pinner == nil {
		return
	}
	ds.pins.pinMu.Lock()
	defer ds.pins.pinMu.Unlock()
	files, err := ds.pins.pinner.List()
	if err != nil {
		klog.ErrorS(err, "Failed to list pinned network namespaces; leaving them", "netnsDir", ds.pins.pinner.Dir())
		return
	}
	if len(files) == 0 {
		return
	}
	used := map[string]bool{}
	for _, cp := range ds.pods.All() {
		for _, f := range pauselessFiles(cp) {
			used[f] = true
		}
	}
	for _, r := range ds.store().List(store.KindSandbox) {
		for _, l := range []string{labelNetNS, labelUserNS} {
			if path := r.DockerLabels[l]; path != "" {
				used[path] = true
			}
		}
	}
	removed := 0
	for _, f := range files {
		if used[f] || ds.pins.pinning[f] {
			continue
		}
		if err := ds.pins.pinner.Remove(f); err != nil {
			klog.ErrorS(err, "Failed to remove a pinned network namespace no sandbox uses", "netns", f)
			continue
		}
		removed++
	}
	if removed > 0 {
		klog.InfoS("Removed pinned network namespaces no sandbox uses", "count", removed, "netnsDir", ds.pins.pinner.Dir())
	}
}

// SandboxNetNSMode is the mode new sandboxes get now and why, for the
// daemon's start-up log.
func (ds *DockerService) SandboxNetNSMode(ctx context.Context) (mode, reason string) {
	m := ds.sandboxNetNSMode(ctx)
	return m.Mode, m.Reason
}

// netnsModeInfo is Status's verbose info about the mode, as JSON.
func (ds *DockerService) netnsModeInfo(ctx context.Context) string {
	b, _ := json.Marshal(ds.sandboxNetNSMode(ctx))
	return string(b)
}
