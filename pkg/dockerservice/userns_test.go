package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/system"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/podns"
)

// TestUsernsClaims: a pod's user namespace range may share no node id with
// another pod's, made or being made; kubelet never sends such ranges, so
// one is InvalidArgument naming the other pod. A released claim frees the
// range; a pod in the node's user namespace claims nothing.
func TestUsernsClaims(t *testing.T) {
	pod := func(name string, host, length uint32) *runtimeapi.PodSandboxConfig {
		m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: host, Length: length}}
		return &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns"},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}},
			}},
		}
	}
	running := []usernsRange{{pod: "ns/running", uids: []podns.IDMap{{HostID: 65536, Size: 65536}}, gids: []podns.IDMap{{HostID: 65536, Size: 65536}}}}
	inUse := func() []usernsRange { return running }
	var c usernsClaims
	release, err := c.claim("a", pod("a", 131072, 65536), inUse)
	if err != nil {
		t.Fatalf("a disjoint range: %v", err)
	}
	for _, tc := range []struct {
		name       string
		host, size uint32
		other      string // "" when it must be accepted
	}{
		{"same as a running pod's", 65536, 65536, "ns/running"},
		{"inside a running pod's", 70000, 10, "ns/running"},
		{"ending in a running pod's", 1000, 64537, "ns/running"},
		{"overlapping one being made", 131072 + 65535, 65536, "ns/a"},
		{"just after", 196608, 65536, ""},
		{"just before", 1, 65535, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel, err := c.claim("b", pod("b", tc.host, tc.size), inUse)
			if tc.other == "" {
				if err != nil {
					t.Fatalf("claim: %v", err)
				}
				rel()
				return
			}
			if crirpc.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pod "+tc.other) {
				t.Fatalf("claim: %v, want InvalidArgument naming pod %s", err, tc.other)
			}
		})
	}
	release()
	if rel, err := c.claim("b", pod("b", 131072, 65536), inUse); err != nil {
		t.Errorf("a's range once a is made or failed: %v", err)
	} else {
		rel()
	}
	if rel, err := c.claim("c", &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "c"}}, inUse); err != nil {
		t.Errorf("a pod in the node's user namespace: %v", err)
	} else {
		rel()
	}
	if len(c.inFlight) != 0 {
		t.Errorf("claims left: %v", c.inFlight)
	}
}

// idmapFeatures is `runc features` of a runc that makes idmapped mounts
// (1.2+); runc 1.1's has no mountExtensions.
const (
	idmapFeatures   = `{"ociVersionMin":"1.0.0","mountOptions":["rro"],"linux":{"mountExtensions":{"idmap":{"enabled":true}}}}`
	runc11Features  = `{"ociVersionMin":"1.0.0","mountOptions":["rro"]}`
	testUsernsHost  = 1 << 22
	testUsernsRange = 65536
)

// newUsernsEnv is a service in mode whose engine has the wrapper, which
// reports features (Docker 25+ does), on a node whose kernel check says
// probeErr. Its --netns-dir is in directories others may enter.
func newUsernsEnv(t *testing.T, mode, features string, probeErr error) (*testEnv, string) {
	t.Helper()
	// t.TempDir() is <the test's directory>/<n>, both 0700.
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "netns")
	docker := newFakeDocker()
	docker.Do(func(s *fakedocker.State) {
		s.Info.DefaultRuntime = "runc"
		s.Info.Runtimes = map[string]system.RuntimeWithStatus{
			"runc":            {Status: map[string]string{fakedocker.OCIFeaturesKey: features}},
			OCIWrapperRuntime: {Runtime: system.Runtime{Path: "/usr/bin/netshim-oci"}, Status: map[string]string{fakedocker.OCIFeaturesKey: features}},
		}
	})
	e := newTestEnvWith(t, docker, func(c *Config) { c.SandboxNetNS, c.NetNSDir = mode, dir })
	e.ds.userns.probe = func(string) error { return probeErr }
	t.Cleanup(func() {
		pinner := podns.NewPinner(dir)
		files, _ := pinner.List()
		for _, f := range files {
			_ = pinner.Remove(f)
		}
	})
	return e, dir
}

func usernsPod(name string, host uint32) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: host, Length: testUsernsRange}}
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		Pid:           runtimeapi.NamespaceMode_CONTAINER,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m},
	}}
	return cfg
}

// TestStatusUserNamespaces: Status offers pods with their own user
// namespace (the default handler's user_namespaces) only where the engine's
// wrapper and the node can give them one, says why not in its verbose info,
// and SupplementalGroupsPolicy wherever the wrapper is; RunPodSandbox
// refuses such a pod with the same reason, having made nothing.
func TestStatusUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name, mode, features string
		probeErr             error
		wantUserns           bool
		wantReason           string
	}{
		{name: "runc 1.2+, pinned", mode: SandboxNetNSAuto, features: idmapFeatures, wantUserns: true},
		{name: "runc 1.2+, pause-less", mode: SandboxNetNSPauseless, features: idmapFeatures, wantUserns: true},
		{name: "runc 1.1", mode: SandboxNetNSAuto, features: runc11Features, wantReason: "runc 1.2 or later"},
		{name: "an old kernel", mode: SandboxNetNSAuto, features: idmapFeatures, probeErr: errors.New("kernel 5.10 cannot idmap overlayfs layers"), wantReason: "kernel 5.10"},
		{name: "docker mode", mode: SandboxNetNSDocker, features: idmapFeatures, wantReason: "pinned or pause-less sandbox mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, dir := newUsernsEnv(t, tc.mode, tc.features, tc.probeErr)
			resp, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			if !resp.GetFeatures().GetSupplementalGroupsPolicy() {
				t.Error("supplemental_groups_policy false with the wrapper registered")
			}
			var def *runtimeapi.RuntimeHandler
			for _, h := range resp.GetRuntimeHandlers() {
				if h.GetName() == "" {
					def = h
				} else if h.GetFeatures().GetUserNamespaces() {
					t.Errorf("handler %q says user_namespaces: only the default handler's pods run under the wrapper", h.GetName())
				}
			}
			if def == nil || def.GetFeatures().GetUserNamespaces() != tc.wantUserns {
				t.Fatalf("default handler %v, want user_namespaces %v", def, tc.wantUserns)
			}
			info := resp.GetInfo()["userNamespaces"]
			if !strings.Contains(info, fmt.Sprintf(`"supported":%v`, tc.wantUserns)) || !strings.Contains(info, tc.wantReason) {
				t.Errorf("info userNamespaces %s, want supported %v and %q", info, tc.wantUserns, tc.wantReason)
			}
			if tc.wantUserns {
				return
			}
			_, err = e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: usernsPod("u", testUsernsHost)})
			if codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.wantReason) {
				t.Errorf("RunPodSandbox: %v, want FailedPrecondition saying %q", err, tc.wantReason)
			}
			if files := listDir(t, dir); len(files) != 0 {
				t.Errorf("files left: %v", files)
			}
			if ids := e.docker.ContainerIDs(); len(ids) != 0 {
				t.Errorf("containers left: %v", ids)
			}
		})
	}
	t.Run("without the wrapper", func(t *testing.T) {
		e := newTestEnv(t)
		resp, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetFeatures().GetSupplementalGroupsPolicy() {
			t.Error("supplemental_groups_policy true without the wrapper: Docker merges the image's groups")
		}
		for _, h := range resp.GetRuntimeHandlers() {
			if h.GetFeatures().GetUserNamespaces() {
				t.Errorf("handler %q says user_namespaces without the wrapper", h.GetName())
			}
		}
	})
}

// TestUsernsSandboxLifecycle: in each pinning mode, a pod with its own user
// namespace gets it pinned with the namespaces it owns, named by its
// checkpoint (and its pause container's label), its containers run under
// the wrapper with a signed marker naming it, its maps and the mounts to
// idmap; Stop removes it; a failed RunPodSandbox leaves nothing.
func TestUsernsSandboxLifecycle(t *testing.T) {
	requireRoot(t)
	for _, mode := range []string{SandboxNetNSPinned, SandboxNetNSPauseless} {
		t.Run(mode, func(t *testing.T) {
			e, dir := newUsernsEnv(t, mode, idmapFeatures, nil)
			e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
			pod := usernsPod("u", testUsernsHost)
			id := e.run(t, pod)
			cp, err := e.ckpt.Get(id)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Dir(cp.UserNS) != dir || podns.Verify(cp.UserNS, podns.User) != nil {
				t.Fatalf("checkpoint user namespace %q, want a pinned one in %s", cp.UserNS, dir)
			}
			if mode == SandboxNetNSPinned {
				c, err := e.docker.ContainerInspect(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if c.Config.Labels[labelUserNS] != cp.UserNS || c.HostConfig.Runtime != OCIWrapperRuntime {
					t.Errorf("pause container label %q runtime %q, want %s and the wrapper", c.Config.Labels[labelUserNS], c.HostConfig.Runtime, cp.UserNS)
				}
				if m := markerIn(t, c.Config.Env); m.Paths[podns.User] != cp.UserNS || m.Paths[podns.Net] != cp.NetNS || len(m.UIDs) != 1 {
					t.Errorf("pause container's marker %+v, want the user namespace, the netns and the maps", m)
				}
			}
			kmap := pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Uids
			cfg := usernsCtrConfig(pod)
			cfg.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data", UidMappings: kmap, GidMappings: kmap}}
			resp, err := e.ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: cfg, SandboxConfig: pod})
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			c, err := e.docker.ContainerInspect(context.Background(), resp.ContainerId)
			if err != nil {
				t.Fatal(err)
			}
			m := markerIn(t, c.Config.Env)
			if c.HostConfig.Runtime != OCIWrapperRuntime || m.Paths[podns.User] != cp.UserNS || !slices.Equal(m.IDMapMounts, []string{"/data"}) {
				t.Errorf("container runtime %q marker %+v, want the wrapper, the user namespace and /data idmapped", c.HostConfig.Runtime, m)
			}
			// Signed with the key the wrapper reads.
			key, err := podns.ReadKey(dir)
			if err != nil {
				t.Fatal(err)
			}
			v := podns.Verifier{ReadKey: func(string) (*podns.Key, error) { return key, nil }, Check: podns.Verify}
			if _, err := v.Accept(markerValue(c.Config.Env)); err != nil {
				t.Errorf("the wrapper would refuse the marker: %v", err)
			}
			if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(cp.UserNS); !os.IsNotExist(err) {
				t.Errorf("user namespace %s after Stop: %v", cp.UserNS, err)
			}
			if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatal(err)
			}
			if files := listDir(t, dir); len(files) != 0 {
				t.Errorf("files left: %v", files)
			}
		})
	}
	t.Run("a failed run", func(t *testing.T) {
		e, dir := newUsernsEnv(t, SandboxNetNSPinned, idmapFeatures, nil)
		e.plugin.setUpErr = errors.New("no IPs left")
		if _, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: usernsPod("u", testUsernsHost)}); err == nil {
			t.Fatal("RunPodSandbox succeeded")
		}
		if files := listDir(t, dir); len(files) != 0 {
			t.Errorf("files left: %v", files)
		}
		if ids := e.docker.ContainerIDs(); len(ids) != 0 {
			t.Errorf("containers left: %v", ids)
		}
		// The range is free again.
		e.plugin.setUpErr = nil
		id := e.run(t, usernsPod("u", testUsernsHost))
		if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
	})
}

// usernsCtrConfig is kubelet's container of the pod: its namespace options
// with the pod's user namespace.
func usernsCtrConfig(pod *runtimeapi.PodSandboxConfig) *runtimeapi.ContainerConfig {
	cfg := ctrConfig("app")
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	cfg.Linux.SecurityContext.NamespaceOptions = pod.Linux.SecurityContext.NamespaceOptions
	return cfg
}

// markerValue is the value of netshim's marker in an environment.
func markerValue(env []string) string {
	for _, e := range env {
		if podns.IsEnvEntry(e) {
			return strings.TrimPrefix(e, podns.EnvKey+"=")
		}
	}
	return ""
}

// markerIn reads the marker, unverified.
func markerIn(t *testing.T, env []string) podns.Marker {
	t.Helper()
	spec, _, _ := strings.Cut(markerValue(env), ";mac=")
	m, err := podns.ParseMarker(spec)
	if err != nil {
		t.Fatalf("marker: %v", err)
	}
	return m
}

// TestUsernsSandboxSurvivesRestart: a netshim restarted under a running
// pod with its own user namespace finds the pinned namespace again in the
// checkpoint and gives a new container of the pod the same marker; the
// start-up sweep keeps the file, and the range stays the pod's.
func TestUsernsSandboxSurvivesRestart(t *testing.T) {
	requireRoot(t)
	for _, mode := range []string{SandboxNetNSPinned, SandboxNetNSPauseless} {
		t.Run(mode, func(t *testing.T) {
			e, dir := newUsernsEnv(t, mode, idmapFeatures, nil)
			e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
			pod := usernsPod("u", testUsernsHost)
			id := e.run(t, pod)
			cp, err := e.ckpt.Get(id)
			if err != nil {
				t.Fatal(err)
			}
			ds, _ := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = mode, dir })
			ds.userns.probe = func(string) error { return nil }
			if err := podns.Verify(cp.UserNS, podns.User); err != nil {
				t.Fatalf("the user namespace after the restart: %v", err)
			}
			cfg := usernsCtrConfig(pod)
			resp, err := ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: cfg, SandboxConfig: pod})
			if err != nil {
				t.Fatalf("CreateContainer after the restart: %v", err)
			}
			c, err := e.docker.ContainerInspect(context.Background(), resp.ContainerId)
			if err != nil {
				t.Fatal(err)
			}
			if m := markerIn(t, c.Config.Env); m.Paths[podns.User] != cp.UserNS || c.HostConfig.Runtime != OCIWrapperRuntime {
				t.Errorf("after the restart: runtime %q marker %+v, want the wrapper and %s", c.HostConfig.Runtime, m, cp.UserNS)
			}
			_, err = ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: usernsPod("other", testUsernsHost)})
			if codeOf(err) != codes.InvalidArgument {
				t.Errorf("a second pod with the restored pod's range: %v, want InvalidArgument", err)
			}
			if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatal(err)
			}
			if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatal(err)
			}
			if files := listDir(t, dir); len(files) != 0 {
				t.Errorf("files left: %v", files)
			}
		})
	}
}
