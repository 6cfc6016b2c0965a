package dockerservice

import (
	"reflect"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageVolume is the mount kubelet 1.36 sends for an image volume: the
// pulled image's ref, no host path, and the volume mount's subPath.
func imageVolume(dst, subPath string) *runtimeapi.Mount {
	return &runtimeapi.Mount{ContainerPath: dst, Readonly: true, Image: &runtimeapi.ImageSpec{Image: testImageID, UserSpecifiedImage: "busybox:1.36"}, ImageSubPath: subPath}
}

func TestCreateContainerWithImageVolume(t *testing.T) {
	e := newPodEnv(t)
	e.ds.engine.SetAPIVersion("1.48") // a Docker 28 engine

	cfg := ctrConfig("vol")
	cfg.Mounts = []*runtimeapi.Mount{imageVolume("/models", "usr/share"), {HostPath: "/data", ContainerPath: "/data"}}
	id := e.create(t, cfg)
	hc := e.dockerInspect(t, id).HostConfig
	want := mount.Mount{Type: mount.TypeImage, Source: testImageID, Target: "/models", ReadOnly: true, ImageOptions: &mount.ImageOptions{Subpath: "usr/share"}}
	if len(hc.Mounts) == 0 || !reflect.DeepEqual(hc.Mounts[0], want) {
		t.Errorf("mounts = %+v, want first %+v with %+v", hc.Mounts, want, want.ImageOptions)
	}
	// The status reports the mount as asked.
	st := e.status(t, id)
	if len(st.Mounts) != 2 || st.Mounts[0].GetImage().GetImage() != testImageID || st.Mounts[0].GetImageSubPath() != "usr/share" {
		t.Errorf("status mounts = %v", st.Mounts)
	}

	// An image kubelet has not pulled: NotFound naming it, nothing made.
	cfg = ctrConfig("missing")
	missing := "sha256:" + strings.Repeat("e", 64)
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/models", Image: &runtimeapi.ImageSpec{Image: missing}}}
	e.docker.ResetCalls()
	_, err := e.createErr(cfg)
	if codeOf(err) != codes.NotFound || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "image volume at /models") {
		t.Errorf("missing image: got %v, want NotFound naming the image volume's image", err)
	}
	if n := e.docker.Count("ContainerCreate"); n != 0 {
		t.Errorf("%d containers created for a missing image volume image", n)
	}
}
