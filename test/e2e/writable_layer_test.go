//go:build e2e

package e2e

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestWritableLayerUsage: a container that writes a 1 MiB file reports a
// writable layer of at least 1 MiB in ContainerStats and
// ListContainerStats (measured in the background, here every second), on
// the filesystem ImageFsInfo reports for containers. Works whether Docker
// reports the layer (overlay2) or netshim finds it in the container's
// mountinfo (Docker 29's containerd image store).
func TestWritableLayerUsage(t *testing.T) {
	e := newEnv(t, envOptions{extraFlags: []string{"--writable-layer-measure-interval=1s"}})
	requireWorkloadImage(t)
	e.start()
	podJSON := e.writePodJSON("layer")
	podID := e.runp(podJSON)
	writer := e.crictlRun(podID, podJSON, "writer", "sh", "-c", "dd if=/dev/urandom of=/written bs=1024 count=1024 && exec sleep 3600")

	const mib = 1 << 20
	var wl *runtimeapi.FilesystemUsage
	if !poll(startDeadline, func() bool {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		resp, err := e.client.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: writer})
		if err != nil {
			t.Fatalf("ContainerStats: %v", err)
		}
		wl = resp.GetStats().GetWritableLayer()
		return wl.GetUsedBytes().GetValue() >= mib && wl.GetFsId() != nil
	}) {
		t.Fatalf("writable layer %v after %s, want >= 1 MiB with a filesystem ID\n%s", wl, startDeadline, e.logTail(30))
	}
	t.Logf("writable layer: %d bytes, %d inodes, on %s", wl.GetUsedBytes().GetValue(), wl.GetInodesUsed().GetValue(), wl.GetFsId().GetMountpoint())
	if n := wl.GetInodesUsed().GetValue(); n < 2 {
		t.Errorf("writable layer inodes %d, want at least the layer's root and the file", n)
	}

	ctx, cancel := e.rpcCtx()
	defer cancel()
	fsInfo, err := e.images().ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatalf("ImageFsInfo: %v", err)
	}
	if cf := fsInfo.GetContainerFilesystems(); len(cf) != 1 || cf[0].GetFsId().GetMountpoint() != wl.FsId.Mountpoint {
		t.Errorf("writable layer on %q, ImageFsInfo's container filesystems %v: want the same mountpoint", wl.FsId.Mountpoint, cf)
	}

	list, err := e.client.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: podID}})
	if err != nil {
		t.Fatalf("ListContainerStats: %v", err)
	}
	if s := list.GetStats(); len(s) != 1 || s[0].GetWritableLayer().GetUsedBytes().GetValue() < mib {
		t.Errorf("ListContainerStats = %v, want the writer with >= 1 MiB", s)
	}
}
