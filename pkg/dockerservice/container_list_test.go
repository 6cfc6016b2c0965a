package dockerservice

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// The image a container's status and list entry show: the pod spec's
// reference when kubelet passed one, whatever it resolved it to.
func TestImageSpecOf(t *testing.T) {
	const id = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name      string
		recImage  string
		requested *runtimeapi.ImageSpec
		want      string
	}{
		{"kubelet: resolved ID and user's reference", id, &runtimeapi.ImageSpec{Image: id, UserSpecifiedImage: "localhost:5000/busybox:1.37"}, "localhost:5000/busybox:1.37"},
		{"reference only (crictl)", "busybox:1.36", &runtimeapi.ImageSpec{Image: "busybox:1.36"}, "busybox:1.36"},
		{"both the same", "busybox:1.36", &runtimeapi.ImageSpec{Image: "busybox:1.36", UserSpecifiedImage: "busybox:1.36"}, "busybox:1.36"},
		{"no spec recorded (created outside netshim's labels)", "busybox:1.36", &runtimeapi.ImageSpec{}, "busybox:1.36"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &store.Record{Image: tc.recImage}
			info := &containerInfo{image: tc.requested}
			got := imageSpecOf(rec, info)
			if got.GetImage() != tc.want {
				t.Errorf("image = %q, want %q", got.GetImage(), tc.want)
			}
			if tc.requested.GetUserSpecifiedImage() != "" && got.GetUserSpecifiedImage() != tc.requested.GetUserSpecifiedImage() {
				t.Errorf("user_specified_image = %q, want it kept", got.GetUserSpecifiedImage())
			}
			if tc.name == tests[0].name && tc.requested.Image != id {
				t.Error("the recorded spec was modified")
			}
		})
	}
}
