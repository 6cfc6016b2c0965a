package dockerspec

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/podns"
)

// markerOf reads the marker netshim put in a container's environment,
// without its signature; ok false when there is none.
func markerOf(t *testing.T, env []string) (podns.Marker, bool) {
	t.Helper()
	for _, e := range env {
		if !podns.IsEnvEntry(e) {
			continue
		}
		spec, _, _ := strings.Cut(strings.TrimPrefix(e, podns.EnvKey+"="), ";mac=")
		m, err := podns.ParseMarker(spec)
		if err != nil {
			t.Fatalf("marker %q: %v", e, err)
		}
		return m, true
	}
	return podns.Marker{}, false
}

// TestContainerMarker: what the OCI wrapper is asked for a container of a
// pod with its own user namespace (as kubelet sends it: the pod's options
// with each container, every mount with the pod's maps) or with Strict
// groups, and the refusals, each with its code and nothing made.
func TestContainerMarker(t *testing.T) {
	dir := t.TempDir()
	key, err := podns.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	kmap := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 65536, Length: 65536}}
	pmap := []podns.IDMap{{ContainerID: 0, HostID: 65536, Size: 65536}}
	podUserns := &UserNS{Path: dir + "/pod-1.user", UIDs: pmap, GIDs: pmap}
	nsPOD := &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: kmap, Gids: kmap}}
	cfg := func(ns *runtimeapi.NamespaceOption, mounts ...*runtimeapi.Mount) *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
			Image:    &runtimeapi.ImageSpec{Image: "busybox"},
			Mounts:   mounts,
			Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}},
		}
	}
	idmapped := func(dst string) *runtimeapi.Mount {
		return &runtimeapi.Mount{HostPath: "/var/lib/kubelet/pods/x/volumes/d", ContainerPath: dst, UidMappings: kmap, GidMappings: kmap}
	}
	strict := func(c *runtimeapi.ContainerConfig, groups ...int64) *runtimeapi.ContainerConfig {
		c.Linux.SecurityContext.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		c.Linux.SecurityContext.SupplementalGroups = groups
		return c
	}
	for _, tc := range []struct {
		name     string
		cfg      *runtimeapi.ContainerConfig
		userns   *UserNS
		wrapper  string
		want     *podns.Marker // nil: no marker, the pod's runtime
		wantCode codes.Code
		wantErr  string
	}{
		{name: "node's user namespace", cfg: cfg(nil), wrapper: "netshim-oci"},
		{name: "pod user namespace", cfg: cfg(nsPOD, idmapped("/data"), idmapped("/etc/hosts/")), userns: podUserns, wrapper: "netshim-oci",
			want: &podns.Marker{Paths: podns.Paths{podns.User: podUserns.Path}, UIDs: pmap, GIDs: pmap, IDMapMounts: []string{"/data", "/etc/hosts"}}},
		{name: "pod user namespace, options left out", cfg: cfg(nil), userns: podUserns, wrapper: "netshim-oci",
			want: &podns.Marker{Paths: podns.Paths{podns.User: podUserns.Path}, UIDs: pmap, GIDs: pmap}},
		{name: "a mount not idmapped", cfg: cfg(nsPOD, &runtimeapi.Mount{HostPath: "/etc/os-release", ContainerPath: "/host-os"}), userns: podUserns, wrapper: "netshim-oci",
			want: &podns.Marker{Paths: podns.Paths{podns.User: podUserns.Path}, UIDs: pmap, GIDs: pmap}},
		{name: "strict groups", cfg: strict(cfg(nil), 1234, 5678), wrapper: "netshim-oci",
			want: &podns.Marker{Paths: podns.Paths{}, StrictGroups: true, Groups: []uint32{1234, 5678}, Dir: dir}},
		{name: "strict, no groups", cfg: strict(cfg(nil)), wrapper: "netshim-oci",
			want: &podns.Marker{Paths: podns.Paths{}, StrictGroups: true, Dir: dir}},
		{name: "strict in a pod user namespace", cfg: strict(cfg(nsPOD), 7), userns: podUserns, wrapper: "netshim-oci",
			want: &podns.Marker{Paths: podns.Paths{podns.User: podUserns.Path}, UIDs: pmap, GIDs: pmap, StrictGroups: true, Groups: []uint32{7}}},
		{name: "strict without the wrapper", cfg: strict(cfg(nil), 1), wantCode: codes.FailedPrecondition, wantErr: "supplementalGroupsPolicy: Strict needs netshim's OCI wrapper"},
		{name: "user namespace without the wrapper", cfg: cfg(nsPOD), userns: podUserns, wantCode: codes.FailedPrecondition, wantErr: "hostUsers: false) needs netshim's OCI wrapper"},
		{name: "user namespace in a pod without one", cfg: cfg(nsPOD), wrapper: "netshim-oci", wantCode: codes.InvalidArgument, wantErr: "runs in the node's"},
		{name: "idmapped mount in a pod without one", cfg: cfg(nil, idmapped("/data")), wrapper: "netshim-oci", wantCode: codes.InvalidArgument, wantErr: "idmapped mounts need the pod's own user namespace"},
		{name: "node user namespace in a pod with one", cfg: cfg(&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}), userns: podUserns, wrapper: "netshim-oci",
			wantCode: codes.InvalidArgument, wantErr: "node's user namespace"},
		{name: "other maps than the pod's", cfg: cfg(&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 131072, Length: 65536}}, Gids: kmap}}), userns: podUserns, wrapper: "netshim-oci",
			wantCode: codes.InvalidArgument, wantErr: "differ from its pod's"},
		{name: "a mount with other maps", cfg: cfg(nsPOD, &runtimeapi.Mount{HostPath: "/d", ContainerPath: "/d", UidMappings: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 1, Length: 1}}}), userns: podUserns, wrapper: "netshim-oci",
			wantCode: codes.InvalidArgument, wantErr: "differ from the pod's user namespace's"},
		{name: "user namespace mode CONTAINER", cfg: cfg(&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}}), userns: podUserns, wrapper: "netshim-oci",
			wantCode: codes.InvalidArgument, wantErr: "mode CONTAINER is not supported"},
		{name: "node pid namespace in a pod user namespace", cfg: cfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE, UsernsOptions: nsPOD.UsernsOptions}), userns: podUserns, wrapper: "netshim-oci",
			wantCode: codes.InvalidArgument, wantErr: "node's pid namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ContainerInput{Config: tc.cfg, SandboxID: "sb", APIVersion: "1.41", OCIKey: key, KeyDir: dir, WrapperRuntime: tc.wrapper, UserNS: tc.userns}
			config, hc, err := ContainerConfig(in)
			if tc.wantErr != "" {
				if crirpc.Code(err) != tc.wantCode || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v (code %s), want %s mentioning %q", err, crirpc.Code(err), tc.wantCode, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, found := markerOf(t, config.Env)
			if tc.want == nil {
				if found || hc.Runtime != "" {
					t.Fatalf("marker %+v (found %v), runtime %q; want none, the pod's runtime", got, found, hc.Runtime)
				}
				return
			}
			if !found || hc.Runtime != "netshim-oci" {
				t.Fatalf("marker found %v, runtime %q; want a marker and runtime netshim-oci", found, hc.Runtime)
			}
			if !reflect.DeepEqual(got, *tc.want) {
				t.Errorf("marker\n got %+v\nwant %+v", got, *tc.want)
			}
			// The signature is the key's: the wrapper accepts it.
			for _, e := range config.Env {
				if podns.IsEnvEntry(e) && !strings.Contains(e, ";mac=") {
					t.Errorf("marker %q is not signed", e)
				}
			}
		})
	}
}
