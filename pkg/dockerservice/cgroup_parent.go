package dockerservice

import (
	"context"
	"path"
	"strings"
)

// dockerCgroupParent is the cgroup parent to give Docker for the one
// kubelet sends. kubelet names a pod's cgroup by its path under either
// driver: /kubepods/burstable/pod<uid> (cgroupfs) or
// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice
// (systemd). Docker's cgroupfs driver takes the path as it is; its systemd
// driver takes a slice's name alone (systemd finds the slice's parents from
// the dashes in it) and runc refuses a path ("invalid slice name"), which
// failed every pod on a systemd node. So with the systemd driver, the last
// element.
//
// Only a slice needs Docker's driver looked up: kubelet names pods that way
// only with the systemd driver, which it takes from RuntimeConfig, so the
// driver is known (cached) by then and no call costs a Docker round trip.
// A cgroupfs path sent to a systemd Docker (kubelet forced to cgroupfs) is
// passed on, and Docker refuses it, saying it wants a slice.
func (ds *DockerService) dockerCgroupParent(ctx context.Context, parent string) (string, error) {
	if !strings.HasSuffix(parent, ".slice") {
		return parent, nil
	}
	driver, err := ds.dockerCgroupDriver(ctx)
	if err != nil {
		return "", err
	}
	return cgroupParentFor(driver, parent), nil
}

func cgroupParentFor(driver, parent string) string {
	if driver != "systemd" || !strings.Contains(parent, "/") {
		return parent
	}
	return path.Base(parent)
}
