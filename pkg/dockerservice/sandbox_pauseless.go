package dockerservice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
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

// pauselessSandboxes is the pause-less mode's sandboxController.
type pauselessSandboxes struct{ ds *DockerService }

func (pauselessSandboxes) mode() string { return SandboxNetNSPauseless }

// pauseNeeded says why a pod whose netns is pinned cannot do without a
// pause container (a modeReason code), or "" if it can. Host-network and
// runtime-handler pods never get here: usePinnedNetNS gives them the
// docker mode (dockerModeReason).
func pauseNeeded(cfg *runtimeapi.PodSandboxConfig) string {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	switch {
	case ns.GetIpc() == runtimeapi.NamespaceMode_NODE:
		return reasonNodeIPC
	case ns.GetPid() == runtimeapi.NamespaceMode_POD:
		return reasonSharedPID
	}
	return ""
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

// run is RunPodSandbox for a pause-less sandbox: pin the namespaces,
// write the pod's sysctls into them, write the checkpoint, index the
// sandbox, CNI ADD. Any failure undoes all of it. The pod's cgroup parent
// (req.cgroupParent) goes into the checkpoint: every container of the pod
// gets it.
func (c pauselessSandboxes) run(ctx context.Context, req *sandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	ds, cfg, cgroupParent, t := c.ds, req.cfg, req.cgroupParent, req.timer
	md := cfg.GetMetadata()
	labels, err := labelcodec.SandboxLabels(cfg, "")
	if err != nil {
		return nil, err
	}
	info, _ := labelcodec.Decode("", labels)
	if info == nil {
		return nil, fmt.Errorf("pod sandbox %s: its own labels do not decode as a sandbox's", klog.KRef(md.Namespace, md.Name))
	}
	id, err := newSandboxID()
	if err != nil {
		return nil, err
	}
	uids, gids, _ := dockerspec.PodUserNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())
	paths, shm, done, err := ds.pinPauselessNamespaces(uids, gids)
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
	cp := newSandboxCheckpoint(id, req, paths[podns.Net])
	cp.UserNS = paths[podns.User]
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
	ds.store().Put(pauselessRecord(cp, info, store.StateRunning))
	err = ds.putCheckpoint(cp)
	done() // named by the checkpoint now, or removed just below
	if err != nil {
		ds.store().Delete(id)
		ds.removePauselessFiles(ctx, cp)
		return nil, err
	}
	t.step("checkpoint")

	if err := ds.setUpSandboxNetwork(ctx, cp, cfg); err != nil {
		c.undo(ctx, cp)
		return nil, err
	}
	t.step("network")
	t.done("podSandboxID", id, "pauseless", true)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// undo removes what a failed run made once its ADD was attempted: the
// network, the namespaces, the checkpoint, the index's record. What
// cannot be undone keeps the checkpoint and the sandbox stopped: listed
// NOTREADY (its setup is still "pending") until kubelet or an operator
// stops and removes it.
func (c pauselessSandboxes) undo(ctx context.Context, cp *checkpoint.PodSandbox) {
	u := c.ds.startUndo(ctx, cp)
	defer u.cancel()
	keep := !u.tearDownNetwork()
	if !keep {
		var removed bool
		if keep, removed = u.removeFiles(); removed {
			c.ds.store().Delete(cp.SandboxID)
		}
	}
	if keep {
		if err := c.ds.stopPauselessSandbox(cp.SandboxID); err != nil {
			u.logger.Error(err, "Failed to mark a failed pause-less sandbox stopped", u.log...)
		}
	}
}

// stop marks the sandbox stopped: it runs nothing.
func (c pauselessSandboxes) stop(_ context.Context, ref sandboxRef, t *stepTimer) error {
	if err := c.ds.stopPauselessSandbox(ref.id); err != nil {
		return fmt.Errorf("stopping pod sandbox %s: %w", ref.id, err)
	}
	t.step("sandbox")
	return nil
}

// remove removes the sandbox's namespaces and checkpoint, then its
// record in the index: there is nothing of it in Docker.
func (c pauselessSandboxes) remove(_ context.Context, ref sandboxRef) error {
	if err := c.ds.removeSandboxFiles(ref); err != nil {
		return err
	}
	if ref.rec != nil {
		c.ds.store().Delete(ref.id)
	}
	return nil
}

// existingSandboxByName answers a RunPodSandbox for a name a sandbox in the
// index already has, with or without a container, as existingSandbox does
// for Docker's name conflicts: a ready one is returned (a retry of a
// request that succeeded), anything else is AlreadyExists. A scan of the
// sandboxes, in memory, once per RunPodSandbox.
func (ds *DockerService) existingSandboxByName(ctx context.Context, name string, md *runtimeapi.PodSandboxMetadata) (resp *runtimeapi.RunPodSandboxResponse, err error, found bool) {
	for _, rec := range ds.store().List(store.KindSandbox) {
		if rec.Name != name {
			continue
		}
		if ds.sandboxState(rec.ID, rec.Running()) == runtimeapi.PodSandboxState_SANDBOX_READY {
			klog.FromContext(ctx).Info("RunPodSandbox for an existing ready sandbox: returning it", "pod", klog.KRef(md.Namespace, md.Name), "attempt", md.Attempt, "podSandboxID", rec.ID)
			return &runtimeapi.RunPodSandboxResponse{PodSandboxId: rec.ID}, nil, true
		}
		return nil, crirpc.WithCode(codes.AlreadyExists, fmt.Errorf("pod sandbox %s attempt %d already exists as %s and is not ready; stop and remove it before running it again", klog.KRef(md.Namespace, md.Name), md.Attempt, rec.ID)), true
	}
	return nil, nil, false
}

// pinPauselessNamespaces makes a new sandbox's net, IPC and UTS namespaces
// and its /dev/shm, and for a pod with its own user namespace (uids and
// gids not empty) that namespace, which owns the others. Until done is
// called the start-up sweep leaves them alone; on error nothing is left.
func (ds *DockerService) pinPauselessNamespaces(uids, gids []podns.IDMap) (paths podns.Paths, shm string, done func(), err error) {
	if ds.pins.ociKey == nil {
		return nil, "", nil, dockerspec.ErrNoOCIKey
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", nil, err
	}
	name := "pod-" + hex.EncodeToString(b[:])
	kinds := []podns.Kind{podns.Net, podns.IPC, podns.UTS}
	held := []string{ds.pins.pinner.ShmPath(name), ds.pins.pinner.Path(name, podns.User)}
	for _, k := range kinds {
		held = append(held, ds.pins.pinner.Path(name, k))
	}
	ds.pins.pinMu.Lock()
	for _, p := range held {
		ds.pins.pinning[p] = true
	}
	if len(uids) > 0 {
		paths, err = ds.pins.pinner.PinUser(name, uids, gids, kinds...)
	} else {
		paths, err = ds.pins.pinner.Pin(name, kinds...)
	}
	if err == nil {
		shm, err = ds.pins.pinner.MountShm(name, pauselessShmSize)
		if err != nil {
			for _, p := range paths {
				_ = ds.pins.pinner.Remove(p)
			}
		}
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
	if cp.UserNS != "" {
		out = append(out, cp.UserNS)
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
func pauselessRecord(cp *checkpoint.PodSandbox, info *labelcodec.Sandbox, state store.State) *store.Record {
	md := &runtimeapi.PodSandboxMetadata{Name: cp.Name, Namespace: cp.Namespace, Uid: cp.UID, Attempt: cp.Attempt}
	r := &store.Record{
		ID:           cp.SandboxID,
		Kind:         store.KindSandbox,
		Name:         labelcodec.SandboxName(md),
		DockerLabels: cp.Pauseless.Labels,
		State:        state,
		CreatedAt:    cp.CreatedAt,
		StartedAt:    cp.CreatedAt,
		Sandbox:      info,
		Local:        true,
	}
	if state == store.StateExited {
		r.FinishedAt = cp.CreatedAt
	}
	return r
}

// restore indexes, at start-up, the pause-less sandboxes of the
// checkpoints just loaded: running unless stopped or their pinned netns is
// gone (a reboot emptied --netns-dir), in which case they are NOTREADY for
// kubelet to stop and remove, and the start-up teardown releases what they
// hold.
func (c pauselessSandboxes) restore() {
	ds := c.ds
	cps := ds.pods.Select(func(cp *checkpoint.PodSandbox) bool { return cp.Pauseless != nil })
	for _, cp := range cps {
		info, _ := labelcodec.Decode(cp.SandboxID, cp.Pauseless.Labels)
		if info == nil {
			klog.InfoS("WARNING: a pause-less sandbox's checkpoint has labels netshim cannot decode; listing it from the checkpoint alone", "podSandboxID", cp.SandboxID)
			continue
		}
		state := store.StateRunning
		if _, ok := ds.pinnedNetNS(cp); cp.Pauseless.Stopped || !ok {
			state = store.StateExited
		}
		ds.store().Put(pauselessRecord(cp, info, state))
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
		_, err := ds.updateCheckpoint(id, func(cp *checkpoint.PodSandbox) {
			pl := *cp.Pauseless
			pl.Stopped = true
			cp.Pauseless = &pl
		})
		if err != nil {
			return err
		}
	}
	ds.store().Update(id, func(r *store.Record) {
		if r.State == store.StateRunning {
			r.State, r.FinishedAt = store.StateExited, time.Now().UnixNano()
		}
	})
	return nil
}

// podNetNS is the pod's pinned netns while it exists.
func (c pauselessSandboxes) podNetNS(rec *store.Record) (string, error) {
	if path, ok := c.ds.pinnedNetNS(c.ds.getCheckpoint(rec.ID)); ok {
		return path, nil
	}
	return "", errSandboxNotRunning(rec.ID)
}

// joinSandbox gives a new container the sandbox's checkpoint, whose
// namespaces it joins, and the pod's cgroup parent. The marker is signed
// with the key of the directory the pod's files are in, which may be an
// earlier --netns-dir (pinnerFor).
func (c pauselessSandboxes) joinSandbox(_ context.Context, sb *store.Record) (sandboxJoin, error) {
	cp, err := c.ds.pauselessOf(sb)
	if err != nil {
		return sandboxJoin{}, err
	}
	// The wrapper puts the container in the pod's pinned namespaces
	// (dockerspec.ContainerConfig names them).
	j := sandboxJoin{pauseless: cp, cgroupParent: cp.Pauseless.CgroupParent, ociKey: c.ds.pins.ociKey, runtime: OCIWrapperRuntime}
	if files := pauselessFiles(cp); len(files) > 0 {
		_, j.ociKey, _ = c.ds.pinnerFor(files[0])
	}
	return j, nil
}

// pauselessOf returns the checkpoint of a pause-less sandbox record, which
// its containers are created from.
func (ds *DockerService) pauselessOf(sb *store.Record) (*checkpoint.PodSandbox, error) {
	cp := ds.getCheckpoint(sb.ID)
	if cp == nil || cp.Pauseless == nil {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not ready: its checkpoint is gone", sb.ID))
	}
	if _, ok := ds.pinnedNetNS(cp); !ok {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not ready: its network namespace %s is gone", sb.ID, cp.NetNS))
	}
	return cp, nil
}

// pauselessPinned says whether a pause-less sandbox's pinned namespaces
// are still there (true for other sandboxes): a file unmounted or removed
// behind netshim's back (umount, a cleanup script, a reboot of a netshim
// whose --netns-dir outlives it) leaves no namespace for new containers
// and, for the netns, none for its IP, so the sandbox is not ready; judged
// at each state read (one statfs per file: kubelet lists every second).
func pauselessPinned(cp *checkpoint.PodSandbox) bool {
	pl := cp.Pauseless
	if pl == nil {
		return true
	}
	for _, f := range []string{cp.NetNS, pl.IPC, pl.UTS} {
		if f == "" {
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(f, &st); err != nil || st.Type != unix.NSFS_MAGIC {
			return false
		}
	}
	return true
}

// refreshPauselessPinned looks at every running pause-less sandbox's
// pinned files and bumps the pod state's generation when one's changed since the
// last look, so that ListPodSandbox's cached answer (wire_cache.go),
// which the files are no part of, is built again.
func (ds *DockerService) refreshPauselessPinned() {
	cps := ds.pods.Select(func(cp *checkpoint.PodSandbox) bool { return cp.Pauseless != nil && !cp.Pauseless.Stopped })
	if len(cps) == 0 && !ds.pods.HasUnpinned() {
		return // outside the pause-less mode, the usual case: nothing to look at
	}
	gone := map[string]bool{}
	for _, cp := range cps {
		if !pauselessPinned(cp) {
			gone[cp.SandboxID] = true
		}
	}
	ds.pods.SetUnpinned(gone) // a change bumps the generation the cache is keyed by
}
