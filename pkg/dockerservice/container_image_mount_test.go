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

func TestImageVolumeMountPerAPIVersion(t *testing.T) {
	want := []mount.Mount{
		{Type: mount.TypeImage, Source: testImageID, Target: "/models", ReadOnly: true},
		{Type: mount.TypeImage, Source: testImageID, Target: "/share", ReadOnly: true, ImageOptions: &mount.ImageOptions{Subpath: "usr/share"}},
	}
	ms := []*runtimeapi.Mount{imageVolume("/models", ""), imageVolume("/share/", "usr/share")}
	for _, api := range []string{"1.48", "1.51"} {
		binds, mounts, err := containerMounts(ms, api, false)
		if err != nil || len(binds) != 0 || !reflect.DeepEqual(mounts, want) {
			t.Errorf("API %s: binds %v mounts %s err %v, want mounts %s", api, binds, mountsString(mounts), err, mountsString(want))
		}
	}
	for _, api := range []string{"", "1.41", "1.47"} {
		_, _, err := containerMounts(ms, api, false)
		if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "image volumes need Docker 28 (API 1.48)") || !strings.Contains(err.Error(), "speaks API "+api) {
			t.Errorf("API %q: got %v, want InvalidArgument naming the version needed and the engine's", api, err)
		}
	}
	for name, m := range map[string]*runtimeapi.Mount{
		"propagation": func() *runtimeapi.Mount {
			m := imageVolume("/x", "")
			m.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			return m
		}(),
		"id mapping": func() *runtimeapi.Mount {
			m := imageVolume("/x", "")
			m.UidMappings = []*runtimeapi.IDMapping{{HostId: 1000, Length: 1}}
			return m
		}(),
		"relative target": imageVolume("x", ""),
	} {
		if _, _, err := containerMounts([]*runtimeapi.Mount{m}, "1.48", false); codeOf(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", name, err)
		}
	}
	_, _, err := containerMounts([]*runtimeapi.Mount{{HostPath: "/data", ContainerPath: "/x"}, imageVolume("/x/", "")}, "1.48", false)
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "two mounts target /x") {
		t.Errorf("bind and image volume on one target: got %v", err)
	}
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
		t.Errorf("mounts = %s, want first %s", mountsString(hc.Mounts), mountsString([]mount.Mount{want}))
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
