package dockerservice

import (
	"testing"

	"github.com/docker/docker/api/types/image"
)

// The image ref a container reports is the same on both engines and in
// the form ListImages gives digests, whichever name the container asked
// for its image by.
func TestImageRefIsNormalised(t *testing.T) {
	hub := image.InspectResponse{ID: d20Hub136ID, RepoDigests: []string{"busybox@" + hub136Index, "quay.io/mirror/busybox@" + hub136Index}}
	imported20 := image.InspectResponse{ID: d20BusyboxID}
	imported29 := image.InspectResponse{ID: d29BusyboxID, RepoDigests: []string{"netshim.local/busybox@" + d29BusyboxID}}
	for _, c := range []struct {
		name      string
		img       image.InspectResponse
		requested string
		want      string
	}{
		{"short name", hub, "busybox:1.36", "docker.io/library/busybox@" + hub136Index},
		{"qualified name", hub, "docker.io/library/busybox:1.36", "docker.io/library/busybox@" + hub136Index},
		{"by digest", hub, "busybox@" + hub136Index, "docker.io/library/busybox@" + hub136Index},
		{"other repository", hub, "quay.io/mirror/busybox:1.36", "quay.io/mirror/busybox@" + hub136Index},
		{"by ID", hub, d20Hub136ID, "docker.io/library/busybox@" + hub136Index},
		{"by ID prefix", hub, d20Hub136ID[7:19], "docker.io/library/busybox@" + hub136Index},
		{"imported on 20.10", imported20, "netshim.local/busybox:latest", d20BusyboxID},
		{"imported on 29", imported29, "netshim.local/busybox:latest", "netshim.local/busybox@" + d29BusyboxID},
	} {
		if got := imageRef(c.img, c.requested); got != c.want {
			t.Errorf("%s: imageRef(%q) = %q, want %q", c.name, c.requested, got, c.want)
		}
	}
}
