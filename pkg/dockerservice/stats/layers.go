package stats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/layerusage"
	"github.com/netshim/netshim/pkg/procutil"
)

// Containers' writable layers are measured in the background
// (pkg/layerusage) and ContainerStats reports the last measurement as the
// container's writable_layer, which kubelet shows as the container's
// rootfs usage and weighs for ephemeral-storage eviction. No RPC waits
// for a walk: a container not measured yet has no writable_layer.
//
// Where a layer is: with a graph driver (overlay2), Docker's inspect
// gives it (GraphDriver.Data["UpperDir"]), kept in the index's record. On
// the containerd image store (Docker 29's default) inspect has no
// GraphDriver data; the layer is then the upper directory of the overlay
// mounted at the root of the running container, read from its
// /proc/<pid>/mountinfo (once per container: a snapshot keeps its
// directory until the container is removed). Other drivers (btrfs, zfs,
// vfs, native snapshotters) are not measured.

const (
	// layerSyncPeriod is how often the measured set follows the index
	// (no Docker call: a read of the store).
	layerSyncPeriod = 2 * time.Second
	// Docker's storage paths, for fs_id, are read when a layer is first
	// tracked and then every layerInfoPeriod (every layerInfoRetry
	// while they cannot be read).
	layerInfoPeriod  = 10 * time.Minute
	layerInfoRetry   = 30 * time.Second
	layerInfoTimeout = 10 * time.Second
	layerStopTimeout = 5 * time.Second
)

// WritableLayerDir is a container's writable layer as Docker's inspect
// reports it (overlay2 and fuse-overlayfs), or "".
func WritableLayerDir(c container.InspectResponse) string {
	dir := c.GraphDriver.Data["UpperDir"]
	if !filepath.IsAbs(dir) {
		return ""
	}
	return filepath.Clean(dir)
}

// Layers keeps the measurer's set of layers in step with the index
// and turns its measurements into CRI figures.
type Layers struct {
	m        *layerusage.Measurer
	store    *store.Store
	info     func(context.Context) (system.Info, error)
	procRoot string

	// mountpoint is fs_id's mountpoint (ContainerFsMountpoint), "" until
	// known.
	mountpoint atomic.Pointer[string]
	nextInfo   time.Time

	// unresolved remembers, per container, the pid whose mountinfo gave
	// no layer, so that it is not read again every sync.
	unresolved map[string]int
	// syncedGen is the store generation the last sync followed (the
	// loop's own); a sync with nothing new in the store has nothing to
	// do.
	syncedGen uint64
	synced    bool
	// kick asks the loop for a sync now.
	kick chan struct{}

	startOnce sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// NewLayers measures the writable layers of the containers in st; info
// reads Docker's storage paths.
func NewLayers(info func(context.Context) (system.Info, error), st *store.Store, opts layerusage.Options) *Layers {
	return &Layers{m: layerusage.New(opts), store: st, info: info, procRoot: "/proc", unresolved: map[string]int{}, kick: make(chan struct{}, 1)}
}

// Start measures until ctx ends or Stop.
func (l *Layers) Start(ctx context.Context) {
	l.startOnce.Do(func() {
		ctx, l.cancel = context.WithCancel(ctx)
		l.wg.Add(2)
		go func() {
			defer l.wg.Done()
			l.m.Run(ctx)
		}()
		go func() {
			defer l.wg.Done()
			l.loop(ctx)
		}()
	})
}

// Stop ends the measuring and waits for it, but not for long: a walk
// blocked in a system call on a stuck filesystem must not hold up the
// daemon's shutdown.
func (l *Layers) Stop() {
	l.startOnce.Do(func() {}) // no start after stop
	if l.cancel == nil {
		return
	}
	l.cancel()
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(layerStopTimeout):
		klog.InfoS("Writable layer measuring did not stop in time; leaving it behind", "timeout", layerStopTimeout)
	}
}

func (l *Layers) loop(ctx context.Context) {
	t := time.NewTicker(layerSyncPeriod)
	defer t.Stop()
	for {
		l.sync()
		if len(l.m.IDs()) > 0 && !time.Now().Before(l.nextInfo) {
			l.refreshMountpoint(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
		}
	}
}

// SyncNow has the loop follow the index at once rather than at its next
// tick.
func (l *Layers) SyncNow() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// sync tracks the layers of the index's workload containers and forgets
// those of containers gone from it.
func (l *Layers) sync() {
	// Read before the list: a change made meanwhile is followed next time.
	gen := l.store.Generation()
	if l.synced && gen == l.syncedGen {
		return
	}
	l.syncedGen, l.synced = gen, true
	recs := l.store.List(store.KindContainer)
	listed := make(map[string]bool, len(recs))
	for _, rec := range recs {
		listed[rec.ID] = true
		if rec.WritableLayerDir != "" {
			l.m.Track(rec.ID, rec.WritableLayerDir)
			continue
		}
		if _, ok := l.m.Tracked(rec.ID); ok || !rec.Running() || rec.Pid <= 0 || l.unresolved[rec.ID] == rec.Pid {
			continue
		}
		dir, err := l.rootUpperDir(rec.ID, rec.Pid)
		if err != nil {
			l.unresolved[rec.ID] = rec.Pid
			klog.V(4).InfoS("Writable layer not found; its usage is not reported", "containerID", rec.ID, "pid", rec.Pid, "err", err)
			continue
		}
		delete(l.unresolved, rec.ID)
		l.m.Track(rec.ID, dir)
	}
	for _, id := range l.m.IDs() {
		if !listed[id] {
			l.m.Forget(id)
		}
	}
	for id := range l.unresolved {
		if !listed[id] {
			delete(l.unresolved, id)
		}
	}
}

// rootUpperDir reads a running container's layer from its mountinfo. The
// pid is checked to be the container's before and after the read, so a
// pid reused by another process (the container exited meanwhile) never
// makes another directory pass for the container's layer.
func (l *Layers) rootUpperDir(id string, pid int) (string, error) {
	if err := procutil.InContainer(l.procRoot, pid, id); err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(l.procRoot, strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return "", fmt.Errorf("reading the mounts of pid %d: %w", pid, err)
	}
	if err := procutil.InContainer(l.procRoot, pid, id); err != nil {
		return "", err
	}
	return layerusage.RootUpperDir(data)
}

func (l *Layers) refreshMountpoint(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, layerInfoTimeout)
	defer cancel()
	info, err := l.info(ctx)
	mp := ContainerFsMountpoint(info)
	if err == nil && mp == "" {
		err = errors.New("docker reports no root dir")
	}
	if err != nil {
		l.nextInfo = time.Now().Add(layerInfoRetry)
		klog.V(2).InfoS("Cannot read Docker's storage paths; writable layers are reported without a filesystem ID until then", "err", err)
		return
	}
	l.mountpoint.Store(&mp)
	l.nextInfo = time.Now().Add(layerInfoPeriod)
}

// ContainerFsMountpoint is the mountpoint ImageFsInfo reports for the
// container filesystem (pkg/dockerservice/images, fsinfo.go): the graph
// driver's directory, or Docker's root dir on the containerd image store
// and for a driver without a directory. Writable layers report the same, so that kubelet
// sees them on the filesystem it knows (it reads capacity and free space
// there).
func ContainerFsMountpoint(info system.Info) string {
	if info.DockerRootDir == "" || info.Driver == "" || engine.UsesContainerdStore(info) {
		return info.DockerRootDir
	}
	dir := filepath.Join(info.DockerRootDir, info.Driver)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return info.DockerRootDir
	}
	return dir
}

// WritableLayer is a container's last measured writable layer usage, or
// nil when none is known yet.
func (l *Layers) WritableLayer(id string) *runtimeapi.FilesystemUsage {
	u, ok := l.m.Get(id)
	if !ok {
		return nil
	}
	fu := &runtimeapi.FilesystemUsage{
		Timestamp:  u.At.UnixNano(),
		UsedBytes:  &runtimeapi.UInt64Value{Value: u.Bytes},
		InodesUsed: &runtimeapi.UInt64Value{Value: u.Inodes},
	}
	if mp := l.mountpoint.Load(); mp != nil {
		fu.FsId = &runtimeapi.FilesystemIdentifier{Mountpoint: *mp}
	}
	return fu
}

// TotalBytes is the sum of the last measurements of every layer.
func (l *Layers) TotalBytes() uint64 { return l.m.TotalBytes() }

// Tracked is the layer directory measured for container id, if any.
func (l *Layers) Tracked(id string) (string, bool) { return l.m.Tracked(id) }
