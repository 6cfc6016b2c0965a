package dockerservice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/podns"
)

// Pause-less sandboxes (--sandbox-netns=pauseless, docs/design/sandbox-modes.md).
//
// A pause-less sandbox is namespaces netshim holds itself (net, IPC and UTS
// pinned under --netns-dir, and a tmpfs for the pod's /dev/shm) and its
// checkpoint: no Docker container, so no pause process and no containerd
// shim for it. Its containers run under the OCI wrapper, which puts them in
// the pinned namespaces, and are created with what a pause container would
// have given them (hostname, DNS, cgroup parent, /dev/shm; the pod's
// sysctls netshim writes into the namespaces itself). The index holds a
// Local record for it, built from the checkpoint, so every reader (List,
// Status, stats, events, CreateContainer) finds it like any sandbox and
// no Docker listing drops it.
//
// A pod whose containers share a PID namespace keeps a pause container
// (the pinned mode): a PID namespace cannot outlive its first process, and
// the CRI expects that process not to be one of the pod's containers. So
// do pods with a RuntimeClass handler (the wrapper execs runc), host-network
// pods (no netns to pin) and pods sharing the node's IPC namespace.

// SandboxNetNSPauseless is the --sandbox-netns value of this mode.
const SandboxNetNSPauseless = "pauseless"

// pauselessShmSize is a pod's /dev/shm size: Docker's default for a
// container's, which a pause container's was.
const pauselessShmSize = 64 << 20

// sandboxPath is how a new sandbox is made.
type sandboxPath int

const (
	sandboxDocker    sandboxPath = iota // pause container in its own netns
	sandboxPinned                       // pause container in a pinned netns
	sandboxPauseless                    // no container at all
)

// canBePauseless says whether a pod can do without a pause container.
func canBePauseless(cfg *runtimeapi.PodSandboxConfig, handler string) bool {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	return handler == "" &&
		ns.GetNetwork() != runtimeapi.NamespaceMode_NODE &&
		ns.GetIpc() != runtimeapi.NamespaceMode_NODE &&
		ns.GetPid() != runtimeapi.NamespaceMode_POD
}

// chooseSandboxPath decides how a new sandbox is made: pause-less when the
// mode is on and the pod can be, else as usePinnedNetNS says.
func (ds *DockerService) chooseSandboxPath(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (sandboxPath, error) {
	hostNetwork := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	pinned, err := ds.usePinnedNetNS(ctx, hostNetwork, handler)
	switch {
	case err != nil:
		return 0, err
	case !pinned:
		return sandboxDocker, nil
	case ds.cfg.SandboxNetNS == SandboxNetNSPauseless && canBePauseless(cfg, handler):
		return sandboxPauseless, nil
	}
	return sandboxPinned, nil
}

// newSandboxID makes the ID of a pause-less sandbox: 64 hex characters,
// like Docker's, so that no client can tell the two apart.
func newSandboxID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a sandbox ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// runPauselessSandbox is RunPodSandbox for a pause-less sandbox: pin the
// namespaces, write the pod's sysctls into them, write the checkpoint,
// index the sandbox, CNI ADD. Any failure undoes all of it. RunPodSandbox
// has checked that no sandbox has the name. cgroupParent is the pod's
// cgroup parent in Docker's form (dockerCgroupParent): every container of
// the pod gets it.
func (ds *DockerService) runPauselessSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, name, cgroupParent string, t *stepTimer) (*runtimeapi.RunPodSandboxResponse, error) {
	md := cfg.GetMetadata()
	labels, err := sandboxLabels(cfg, "")
	if err != nil {
		return nil, err
	}
	kind, extra := decodeOwned("", labels)
	if kind != store.KindSandbox {
		return nil, fmt.Errorf("pod sandbox %s: its own labels do not decode as a sandbox's", klog.KRef(md.Namespace, md.Name))
	}
	id, err := newSandboxID()
	if err != nil {
		return nil, err
	}
	paths, shm, done, err := ds.pinPauselessNamespaces()
	if err != nil {
		return nil, err
	}
	linux := cfg.GetLinux()
	hostname := cfg.GetHostname()
	if hostname == "" {
		// The one a pause container would have had: Docker names a
		// container without a hostname by its short ID. Left empty,
		// each container would get its own and set it in the shared
		// UTS namespace as it starts.
		hostname = id[:12]
	}
	pl := &checkpoint.Pauseless{
		IPC:          paths[podns.IPC],
		UTS:          paths[podns.UTS],
		Shm:          shm,
		Labels:       labels,
		Hostname:     hostname,
		Sysctls:      maps.Clone(linux.GetSysctls()),
		CgroupParent: cgroupParent,
	}
	if dns := cfg.GetDnsConfig(); dns != nil {
		pl.DNS = &checkpoint.DNS{Servers: dns.Servers, Searches: dns.Searches, Options: dns.Options}
	}
	cp := newSandboxCheckpoint(id, cfg, paths[podns.Net])
	cp.Pauseless = pl
	// The pod's sysctls go into its namespaces now, before the ADD and
	// before any container (sandbox_sysctls.go): its containers are
	// created without them, and none of their starts changes what the
	// ADD (or a CNI tuning plugin) set.
	if err := ds.writePodSysctls(cfg, paths); err != nil {
		done()
		ds.removePauselessFiles(ctx, cp)
		return nil, err
	}
	t.step("namespaces")

	// Nobody knows the ID yet; the lock keeps a Stop or Remove of a client
	// that lists the sandbox from interleaving with its setup or undo.
	unlock, err := ds.pods.Lock(backgroundCtx(ctx), id)
	if err != nil {
		done()
		ds.removePauselessFiles(ctx, cp)
		return nil, fmt.Errorf("locking new sandbox %s: %w", id, err)
	}
	defer unlock()
	// Indexed before the checkpoint is written: the events loop, finding
	// a checkpoint whose sandbox the index does not know, would take it
	// for one whose infra container is gone and tell subscribers STOPPED
	// before it ever started.
	ds.store.Put(pauselessRecord(cp, extra, store.StateRunning))
	err = ds.putCheckpoint(cp)
	done() // named by the checkpoint now, or removed just below
	if err != nil {
		ds.store.Delete(id)
		ds.removePauselessFiles(ctx, cp)
		return nil, err
	}
	t.step("checkpoint")

	if err := ds.setUpSandboxNetwork(ctx, cp, cfg); err != nil {
		ds.undoRunPodSandbox(ctx, cp, true)
		return nil, err
	}
	t.step("network")
	t.done("podSandboxID", id, "pauseless", true)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// existingSandboxByName answers a RunPodSandbox for a name a sandbox in the
// index already has, with or without a container, as existingSandbox does
// for Docker's name conflicts: a ready one is returned (a retry of a
// request that succeeded), anything else is AlreadyExists. A scan of the
// sandboxes, in memory, once per RunPodSandbox.
func (ds *DockerService) existingSandboxByName(ctx context.Context, name string, md *runtimeapi.PodSandboxMetadata) (resp *runtimeapi.RunPodSandboxResponse, err error, found bool) {
	for _, rec := range ds.store.List(store.KindSandbox) {
		if rec.Name != name {
			continue
		}
		if ds.sandboxState(rec.ID, rec.Running()) == runtimeapi.PodSandboxState_SANDBOX_READY {
			klog.FromContext(ctx).Info("RunPodSandbox for an existing ready sandbox: returning it", "pod", klog.KRef(md.Namespace, md.Name), "attempt", md.Attempt, "podSandboxID", rec.ID)
			return &runtimeapi.RunPodSandboxResponse{PodSandboxId: rec.ID}, nil, true
		}
		return nil, withCode(codes.AlreadyExists, fmt.Errorf("pod sandbox %s attempt %d already exists as %s and is not ready; stop and remove it before running it again", klog.KRef(md.Namespace, md.Name), md.Attempt, rec.ID)), true
	}
	return nil, nil, false
}

// pinPauselessNamespaces makes a new sandbox's net, IPC and UTS namespaces
// and its /dev/shm. Until done is called the start-up sweep leaves them
// alone; on error nothing is left.
func (ds *DockerService) pinPauselessNamespaces() (paths podns.Paths, shm string, done func(), err error) {
	if ds.ociKey == nil {
		return nil, "", nil, errNoOCIKey
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", nil, err
	}
	name := "pod-" + hex.EncodeToString(b[:])
	kinds := []podns.Kind{podns.Net, podns.IPC, podns.UTS}
	held := []string{ds.pinner.ShmPath(name)}
	for _, k := range kinds {
		held = append(held, ds.pinner.Path(name, k))
	}
	ds.pinMu.Lock()
	for _, p := range held {
		ds.pinning[p] = true
	}
	paths, err = ds.pinner.Pin(name, kinds...)
	if err == nil {
		shm, err = ds.pinner.MountShm(name, pauselessShmSize)
		if err != nil {
			for _, p := range paths {
				_ = ds.pinner.Remove(p)
			}
		}
	}
	ds.pinMu.Unlock()
	done = func() {
		ds.pinMu.Lock()
		for _, p := range held {
			delete(ds.pinning, p)
		}
		ds.pinMu.Unlock()
	}
	if err != nil {
		done()
		return nil, "", nil, fmt.Errorf("making the pod's namespaces: %w", err)
	}
	return paths, shm, done, nil
}

// pauselessFiles are the files a sandbox holds under --netns-dir: its
// pinned netns (any sandbox may have one) and, when pause-less, its other
// namespaces and /dev/shm.
func pauselessFiles(cp *checkpoint.PodSandbox) []string {
	var out []string
	if cp.NetNS != "" {
		out = append(out, cp.NetNS)
	}
	if pl := cp.Pauseless; pl != nil {
		for _, f := range []string{pl.IPC, pl.UTS, pl.Shm} {
			if f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

// removePauselessFiles removes a sandbox's files when the sandbox was never
// recorded (its checkpoint could not be written).
func (ds *DockerService) removePauselessFiles(ctx context.Context, cp *checkpoint.PodSandbox) {
	if err := ds.releasePinnedNamespaces(cp); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove the namespaces of a sandbox that was not created")
	}
}

// pauselessRecord is the index's record of a pause-less sandbox.
func pauselessRecord(cp *checkpoint.PodSandbox, extra any, state store.State) *store.Record {
	md := &runtimeapi.PodSandboxMetadata{Name: cp.Name, Namespace: cp.Namespace, Uid: cp.UID, Attempt: cp.Attempt}
	r := &store.Record{
		ID:           cp.SandboxID,
		Kind:         store.KindSandbox,
		Name:         sandboxContainerName(md),
		DockerLabels: cp.Pauseless.Labels,
		State:        state,
		CreatedAt:    cp.CreatedAt,
		StartedAt:    cp.CreatedAt,
		Extra:        extra,
		Local:        true,
	}
	if state == store.StateExited {
		r.FinishedAt = cp.CreatedAt
	}
	return r
}

// restorePauselessSandboxes indexes, at start-up, the pause-less sandboxes
// of the checkpoints just loaded: running unless stopped or their pinned
// netns is gone (a reboot emptied --netns-dir), in which case they are
// NOTREADY for kubelet to stop and remove, and the start-up teardown
// releases what they hold.
func (ds *DockerService) restorePauselessSandboxes() {
	cps := ds.pods.Select(func(cp *checkpoint.PodSandbox) bool { return cp.Pauseless != nil })
	for _, cp := range cps {
		kind, extra := decodeOwned(cp.SandboxID, cp.Pauseless.Labels)
		if kind != store.KindSandbox {
			klog.InfoS("WARNING: a pause-less sandbox's checkpoint has labels netshim cannot decode; listing it from the checkpoint alone", "podSandboxID", cp.SandboxID)
			continue
		}
		state := store.StateRunning
		if _, ok := ds.pinnedNetNS(cp); cp.Pauseless.Stopped || !ok {
			state = store.StateExited
		}
		ds.store.Put(pauselessRecord(cp, extra, state))
	}
	if len(cps) > 0 {
		klog.InfoS("Restored pause-less sandboxes from their checkpoints", "count", len(cps))
	}
}

// stopPauselessSandbox marks a pause-less sandbox stopped, on disk and in
// the index, once its containers are stopped and its network torn down
// (or the teardown failed, which the caller reports). Its namespaces are
// released with the network, or by RemovePodSandbox.
func (ds *DockerService) stopPauselessSandbox(id string) error {
	cur := ds.getCheckpoint(id)
	if cur != nil && cur.Pauseless != nil && !cur.Pauseless.Stopped {
		updated := *cur
		pl := *cur.Pauseless
		pl.Stopped = true
		updated.Pauseless = &pl
		if err := ds.putCheckpoint(&updated); err != nil {
			return err
		}
	}
	ds.store.Update(id, func(r *store.Record) {
		if r.State == store.StateRunning {
			r.State, r.FinishedAt = store.StateExited, time.Now().UnixNano()
		}
	})
	return nil
}

// pauselessOf returns the checkpoint of a pause-less sandbox record, which
// its containers are created from.
func (ds *DockerService) pauselessOf(sb *store.Record) (*checkpoint.PodSandbox, error) {
	cp := ds.getCheckpoint(sb.ID)
	if cp == nil || cp.Pauseless == nil {
		return nil, withCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not ready: its checkpoint is gone", sb.ID))
	}
	if _, ok := ds.pinnedNetNS(cp); !ok {
		return nil, withCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not ready: its network namespace %s is gone", sb.ID, cp.NetNS))
	}
	return cp, nil
}
