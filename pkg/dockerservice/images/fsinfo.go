package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/layerusage"
)

// ImageFsInfo reports the image filesystem and the container (writable
// layer) filesystem, both of which kubelet ≥ 1.31 reads.
//
// Where: Docker keeps image layers and container writable layers side by
// side in its storage driver's directory (/var/lib/docker/overlay2), so
// both report that directory as mountpoint. kubelet sees the two
// mountpoints are the same and treats the node as having no separate
// image disk; it takes capacity and free space from statfs of the
// mountpoint itself.
//
// Used bytes and inodes are measured by walking the driver directory, as
// `du` does (allocated blocks, hard links once), sorted by Docker's layer
// database: layers listed in image/<driver>/layerdb/mounts (each
// container's mount-id and init-id) are the container filesystem, the
// rest the image filesystem. Docker's DiskUsage API is not used: it walks
// every writable layer on each call and is slow on big hosts.
//
// Cost: an image layer registered in the layer database never changes
// under its cache ID, and a container's init layer (the files Docker puts
// in every container, /etc/hosts and the like, written once at create and
// only read after, as a lower layer of the container's mount) never
// changes under its ID either: each is walked once and remembered, as are
// the IDs read from the layer database. A container's writable layer is
// walked again once its last walk is writableRemeasure old: kubelet asks
// every 10 s, and walking every container's layer that often was a quarter
// of netshim's CPU under a kubelet with 50 pods (pprof); a minute is how
// stale each container's own writable_layer figure may be too
// (pkg/layerusage), and how often cAdvisor measured containers for
// dockershim. A new writable layer is walked at once, a removed one stops
// counting at once. Only layers being pulled and the small link directory
// are walked every time. A result is served for fsUsageTTL; after that the next
// call still answers at once with the last result and starts one refresh
// in the background (kubelet polls this often and must never wait for a
// walk). Only the very first call waits. Timestamps say when a result was
// measured.
func (s *Service) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	st, err := s.fs.get(ctx, s.measureFsUsage)
	if err != nil {
		return nil, err
	}
	usage := func(u fsUsage) []*runtimeapi.FilesystemUsage {
		fu := &runtimeapi.FilesystemUsage{
			Timestamp: st.at.UnixNano(),
			FsId:      &runtimeapi.FilesystemIdentifier{Mountpoint: st.mountpoint},
			UsedBytes: &runtimeapi.UInt64Value{Value: u.bytes},
		}
		// kubelet reads a missing inode count as unknown, not as zero.
		if !st.inodesUnknown {
			fu.InodesUsed = &runtimeapi.UInt64Value{Value: u.inodes}
		}
		return []*runtimeapi.FilesystemUsage{fu}
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     usage(st.images),
		ContainerFilesystems: usage(st.containers),
	}, nil
}

// fsUsageTTL is how long a measurement is served before a refresh starts.
const fsUsageTTL = 5 * time.Second

// writableRemeasure is how old a writable layer's walk may be before a
// refresh walks it again (see ImageFsInfo).
const writableRemeasure = layerusage.DefaultInterval

type fsUsage struct{ bytes, inodes uint64 }

func (u *fsUsage) add(v fsUsage) { u.bytes += v.bytes; u.inodes += v.inodes }

// diskUsage measures a layer directory like `du -x`, on the driver
// directory's device dev: a running container's overlay mount at
// <layer>/merged would count the whole image again.
func diskUsage(root string, dev uint64) fsUsage {
	bytes, inodes := layerusage.DiskUsage(root, dev)
	return fsUsage{bytes: bytes, inodes: inodes}
}

// fsStats is one measurement.
type fsStats struct {
	at                 time.Time
	mountpoint         string
	images, containers fsUsage
	// inodesUnknown is set on the containerd image store, where usage
	// comes from Docker's disk usage API, which counts no inodes.
	inodesUnknown bool
}

// fsUsageCache serves the last measurement and refreshes it in the
// background, one refresh at a time.
type fsUsageCache struct {
	mu       sync.Mutex
	ttl      time.Duration // fsUsageTTL unless a test sets it
	last     *fsStats
	inflight *fsRefresh
	// memo is what the last measurement remembered for the next.
	memo *fsMemo
}

// fsMemo is what a measurement remembers for the next: Docker's storage
// settings, and in a driver directory what never changes once written.
type fsMemo struct {
	// storage is Docker's storage settings, read from its Info in the
	// engine session engine (Engine.Session): they change
	// only with a restart of dockerd, which ends the events stream and
	// so the session.
	storage storageSettings
	engine  uint64
	// driverDir is the directory the layers and IDs below are of.
	driverDir string
	// layers is the usage of the immutable layers (image layers, init
	// layers) by the name of their directory.
	layers map[string]fsUsage
	// ids is what each entry of the layer database names (its cache-id,
	// or its mount-id and init-id), by the entry's path.
	ids map[string][]string
	// writable is the last walk of each container's writable layer, by
	// the name of its directory.
	writable map[string]timedUsage
}

// timedUsage is a walk's result and when it was taken.
type timedUsage struct {
	fsUsage
	at time.Time
}

type fsRefresh struct {
	done  chan struct{}
	stats *fsStats
	err   error
}

// measureFunc measures with the previous measurement's memo (nil for
// none; read-only) and returns the new one.
type measureFunc func(ctx context.Context, memo *fsMemo) (*fsStats, *fsMemo, error)

// get returns the last measurement, starting a refresh if it is stale;
// with none yet it waits for the first.
func (c *fsUsageCache) get(ctx context.Context, measure measureFunc) (*fsStats, error) {
	c.mu.Lock()
	ttl := c.ttl
	if ttl == 0 {
		ttl = fsUsageTTL
	}
	if c.last != nil {
		last := c.last
		if time.Since(last.at) >= ttl && c.inflight == nil {
			c.startLocked(ctx, measure)
		}
		c.mu.Unlock()
		return last, nil
	}
	if c.inflight == nil {
		c.startLocked(ctx, measure)
	}
	r := c.inflight
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.stats, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *fsUsageCache) startLocked(ctx context.Context, measure measureFunc) {
	r := &fsRefresh{done: make(chan struct{})}
	c.inflight = r
	memo := c.memo
	// The walk outlives the RPC that started it: it serves later ones.
	// It has no deadline: a walk that hangs (a stuck filesystem) blocks
	// only itself, never starts again on top of itself, and callers keep
	// the last measurement meanwhile.
	bg := context.WithoutCancel(ctx)
	go func() {
		stats, newMemo, err := measure(bg, memo)
		c.mu.Lock()
		if err == nil {
			c.last, c.memo = stats, newMemo
		} else if c.last != nil {
			klog.ErrorS(err, "Measuring the image filesystem failed; serving the previous measurement", "measuredAt", c.last.at)
		}
		c.inflight = nil
		c.mu.Unlock()
		r.stats, r.err = stats, err
		close(r.done)
	}()
}

// storageSettings is what ImageFsInfo needs of Docker's Info.
type storageSettings struct {
	rootDir, driver string
	// containerdStore: images live in containerd's image store
	// (engine.UsesContainerdStore).
	containerdStore bool
}

// storageSettings reads Docker's storage settings, or takes them from memo
// when they were read in engine session session, the current one.
func (s *Service) storageSettings(ctx context.Context, memo *fsMemo, session uint64) (storageSettings, error) {
	if memo != nil && memo.storage.rootDir != "" && memo.engine == session {
		return memo.storage, nil
	}
	info, err := s.engine.Info(ctx)
	if err != nil {
		return storageSettings{}, fmt.Errorf("reading Docker's storage settings: %w", err)
	}
	if info.DockerRootDir == "" || info.Driver == "" {
		return storageSettings{}, fmt.Errorf("docker reports no root dir or storage driver (root %q, driver %q)", info.DockerRootDir, info.Driver)
	}
	return storageSettings{rootDir: info.DockerRootDir, driver: info.Driver, containerdStore: engine.UsesContainerdStore(info)}, nil
}

// measureFsUsage measures Docker's storage. memo is the previous
// measurement's (read-only here, nil for none); the new one is returned.
func (s *Service) measureFsUsage(ctx context.Context, memo *fsMemo) (*fsStats, *fsMemo, error) {
	// The session is read before the settings: if it ends meanwhile,
	// the next measurement reads them again.
	session := s.engine.Session()
	settings, err := s.storageSettings(ctx, memo, session)
	if err != nil {
		return nil, nil, err
	}
	next := &fsMemo{storage: settings, engine: session}
	at := time.Now()
	if settings.containerdStore {
		st, err := s.measureContainerdStore(ctx, settings.rootDir, at)
		return st, next, err
	}
	driverDir := filepath.Join(settings.rootDir, settings.driver)
	st, err := os.Stat(driverDir)
	if err != nil {
		// Not a graph driver with a directory of its own: report the
		// root dir, usage unknown.
		klog.V(4).InfoS("Storage driver has no directory; image filesystem usage not measured", "dir", driverDir, "err", err)
		return &fsStats{at: at, mountpoint: settings.rootDir, inodesUnknown: true}, next, nil
	}
	dev := st.Sys().(*syscall.Stat_t).Dev
	if memo == nil || memo.driverDir != driverDir {
		memo = &fsMemo{}
	}
	next.driverDir, next.layers, next.ids, next.writable = driverDir, map[string]fsUsage{}, map[string][]string{}, map[string]timedUsage{}
	layerdb := filepath.Join(settings.rootDir, "image", settings.driver, "layerdb")
	mounts := readLayerIDs(filepath.Join(layerdb, "mounts"), memo.ids, next.ids, "mount-id", "init-id")
	imageLayers := readLayerIDs(filepath.Join(layerdb, "sha256"), memo.ids, next.ids, "cache-id")

	stats := &fsStats{at: at, mountpoint: driverDir}
	entries, err := os.ReadDir(driverDir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", driverDir, err)
	}
	// immutable is the usage of a layer that never changes once
	// registered: remembered, walked only the first time.
	immutable := func(name, path string) fsUsage {
		u, ok := memo.layers[name]
		if !ok {
			u = diskUsage(path, dev)
		}
		next.layers[name] = u
		return u
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("measuring %s: %w", driverDir, err)
		}
		name := e.Name()
		path := filepath.Join(driverDir, name)
		switch {
		case mounts[name] == "mount-id":
			// A container's writable layer: it changes as the
			// container writes, and is walked again once its last
			// walk is old.
			w, ok := memo.writable[name]
			if !ok || at.Sub(w.at) >= writableRemeasure || w.at.After(at) {
				w = timedUsage{diskUsage(path, dev), at}
			}
			next.writable[name] = w
			stats.containers.add(w.fsUsage)
		case mounts[name] == "init-id":
			stats.containers.add(immutable(name, path))
		case imageLayers[name] != "":
			// Registered in the layer database only once fully
			// written: from then on it never changes.
			stats.images.add(immutable(name, path))
		default:
			// A layer being pulled, overlay2's "l" directory of short
			// links, anything else: measured every time.
			stats.images.add(diskUsage(path, dev))
		}
	}
	return stats, next, nil
}

// readLayerIDs reads the driver directory names (cache IDs) that Docker's
// layer database records: under layerdb/sha256/<chain ID>/cache-id for
// image layers, under layerdb/mounts/<container>/{mount-id,init-id} for
// containers' writable and init layers. It returns, for each name, the
// file that named it. An entry's files never change once all are written
// (a layer's cache ID and a container's layer IDs are fixed for their
// life): an entry in known is not read again, and every entry read whole
// is added to learned for the next call.
func readLayerIDs(dir string, known, learned map[string][]string, files ...string) map[string]string {
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			klog.V(4).InfoS("Cannot read Docker's layer database", "dir", dir, "err", err)
		}
		return out
	}
	for _, e := range entries {
		entry := filepath.Join(dir, e.Name())
		ids, ok := known[entry]
		if !ok {
			ids = make([]string, len(files))
			complete := true
			for i, f := range files {
				data, err := os.ReadFile(filepath.Join(entry, f))
				ids[i] = strings.TrimSpace(string(data))
				if err != nil || ids[i] == "" {
					// Missing (a container without an init layer) or
					// not written yet: read again next time.
					complete = false
				}
			}
			if !complete {
				for i, id := range ids {
					if id != "" {
						out[id] = files[i]
					}
				}
				continue
			}
		}
		learned[entry] = ids
		for i, id := range ids {
			out[id] = files[i]
		}
	}
	return out
}

// measureContainerdStore measures the containerd image store. Its layers
// and snapshots live under containerd's root, whose path Docker does not
// report, so there is no directory to walk: image usage is what Docker's
// disk usage API counts for images (layers shared between images once;
// committed snapshots' sizes are recorded by containerd, so asking costs
// no walk), inodes are unknown, and the mountpoint is Docker's root dir,
// on the same filesystem as containerd's root on a standard node (/var).
// The container filesystem's usage is the sum of the writable layers last
// measured in the background for ContainerStats (Options.WritableLayerBytes:
// pkg/dockerservice/stats, layers.go): no walk here.
func (s *Service) measureContainerdStore(ctx context.Context, rootDir string, at time.Time) (*fsStats, error) {
	du, err := s.engine.DiskUsage(ctx, types.DiskUsageOptions{Types: []types.DiskUsageObject{types.ImageObject}})
	if err != nil {
		return nil, fmt.Errorf("asking Docker for the image store's disk usage: %w", err)
	}
	return &fsStats{
		at:            at,
		mountpoint:    rootDir,
		images:        fsUsage{bytes: uint64(max(du.LayersSize, 0))},
		containers:    fsUsage{bytes: s.writableLayerBytes()},
		inodesUnknown: true,
	}, nil
}
