package engine

import "github.com/docker/docker/api/types/system"

// containerdSnapshotter is the driver-type Docker reports in DriverStatus
// when images live in containerd's image store (the default from Docker
// 29): the "driver" is a containerd snapshotter.
const containerdSnapshotter = "io.containerd.snapshotter.v1"

// UsesContainerdStore reports whether the engine keeps its images in
// containerd's image store rather than in a graph driver's directory:
// what ImageFsInfo measures and the container filesystem's mountpoint
// both depend on it.
func UsesContainerdStore(info system.Info) bool {
	for _, kv := range info.DriverStatus {
		if len(kv) == 2 && kv[0] == "driver-type" && kv[1] == containerdSnapshotter {
			return true
		}
	}
	return false
}
