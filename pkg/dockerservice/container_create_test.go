package dockerservice

import (
	"testing"

	"github.com/docker/docker/api/types/image"
)

// Image IDs of the engines recorded in pkg/dockerservice/images'
// status_test.go: the busybox as Docker 20.10 imported it and pulled it
// back from a registry, and its manifest digest (its ID on Docker 29).
const (
	d20BusyboxID    = "sha256:bfa38246f50d2f09014881d428aa1e2e2cece40ea17425226a77c42d06b9b99f"
	d20RegistryID   = "sha256:8072f9ca6963fa1435a875cdfd3cedebc5a0c4a8d5afc521b0ef9a9e9081f5be"
	busyboxManifest = "sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0"
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
