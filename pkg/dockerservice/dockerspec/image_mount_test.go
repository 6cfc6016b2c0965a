package dockerspec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestImageVolumeMountPerAPIVersion(t *testing.T) {
	want := []mount.Mount{
		{Type: mount.TypeImage, Source: imageID, Target: "/models", ReadOnly: true},
		{Type: mount.TypeImage, Source: imageID, Target: "/share", ReadOnly: true, ImageOptions: &mount.ImageOptions{Subpath: "usr/share"}},
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
