package dockerservice

import (
	"testing"

	"github.com/docker/docker/api/types/image"
)

// The image ref a container reports is the same on both engines and in
// the form ListImages gives digests, whichever name the container asked
// for its image by.
func TestImageRefIsNormalised(t *testing.T) {
	hub := image.InspectResponse{ID: d20RegistryID, RepoDigests: []string{"busybox@" + busyboxManifest, "quay.io/mirror/busybox@" + busyboxManifest}}
	imported20 := image.InspectResponse{ID: d20BusyboxID}
	imported29 := image.InspectResponse{ID: busyboxManifest, RepoDigests: []string{"netshim.local/busybox@" + busyboxManifest}}
	for _, c := range []struct {
		name      string
		img       image.InspectResponse
		requested string
		want      string
	}{
		{"short name", hub, "busybox:1.36", "docker.io/library/busybox@" + busyboxManifest},
		{"qualified name", hub, "docker.io/library/busybox:1.36", "docker.io/library/busybox@" + busyboxManifest},
		{"by digest", hub, "busybox@" + busyboxManifest, "docker.io/library/busybox@" + busyboxManifest},
		{"other repository", hub, "quay.io/mirror/busybox:1.36", "quay.io/mirror/busybox@" + busyboxManifest},
		{"by ID", hub, d20RegistryID, "docker.io/library/busybox@" + busyboxManifest},
		{"by ID prefix", hub, d20RegistryID[7:19], "docker.io/library/busybox@" + busyboxManifest},
		{"imported on 20.10", imported20, "netshim.local/busybox:latest", d20BusyboxID},
		{"imported on 29", imported29, "netshim.local/busybox:latest", "netshim.local/busybox@" + busyboxManifest},
	} {
		if got := imageRef(c.img, c.requested); got != c.want {
			t.Errorf("%s: imageRef(%q) = %q, want %q", c.name, c.requested, got, c.want)
		}
	}
}
