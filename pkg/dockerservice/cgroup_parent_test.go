package dockerservice

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/netshim/netshim/internal/fakedocker"
)

// The parents are the ones kubelet v1.37 sent on the VM node of make e2e-vm
// (systemd driver, cgroup v2) and on the cgroup v1 machines (cgroupfs).
func TestCgroupParentFor(t *testing.T) {
	const systemdBurstable = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod263c09c3f49d9fb1657dbf17b64f6c6c.slice"
	for _, tc := range []struct{ driver, parent, want string }{
		{"systemd", systemdBurstable, "kubepods-burstable-pod263c09c3f49d9fb1657dbf17b64f6c6c.slice"},
		{"systemd", "/kubepods.slice/kubepods-pod91241282736171dc79cc716539a03fdb.slice", "kubepods-pod91241282736171dc79cc716539a03fdb.slice"},
		{"systemd", "kubepods-besteffort-podx.slice", "kubepods-besteffort-podx.slice"},
		{"systemd", "", ""},
		{"cgroupfs", "/kubepods/burstable/pod263c09c3", "/kubepods/burstable/pod263c09c3"},
		{"cgroupfs", systemdBurstable, systemdBurstable},
		{"", "/kubepods/pod1", "/kubepods/pod1"},
	} {
		if got := cgroupParentFor(tc.driver, tc.parent); got != tc.want {
			t.Errorf("%s driver, parent %q: %q, want %q", tc.driver, tc.parent, got, tc.want)
		}
	}
}

// On an engine with the systemd driver the pause container gets the slice's
// name; the driver is asked once, for the first slice.
func TestRunPodSandboxSystemdCgroupParent(t *testing.T) {
	e := newTestEnv(t)
	e.docker.Do(func(s *fakedocker.State) { s.Info.CgroupDriver = "systemd" })

	cfg := podConfig("web")
	cfg.Linux.CgroupParent = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid1.slice"
	id := e.run(t, cfg)
	c, err := e.docker.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.CgroupParent != "kubepods-burstable-poduid1.slice" {
		t.Errorf("pause container's cgroup parent %q, want the slice's name", c.HostConfig.CgroupParent)
	}

	second := podConfig("web2")
	second.Linux.CgroupParent = cfg.Linux.CgroupParent
	e.run(t, second)
	if n := e.docker.Count("Info"); n != 1 {
		t.Errorf("%d docker info calls for two sandboxes, want 1", n)
	}
}

// A pause-less pod's containers get the slice's name from its checkpoint.
func TestPauselessSystemdCgroupParent(t *testing.T) {
	e, _ := newPauselessEnv(t)
	e.docker.Do(func(s *fakedocker.State) { s.Info.CgroupDriver = "systemd" })
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := pauselessPodConfig("web")
	cfg.Linux.CgroupParent = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poduid3.slice"
	cfg.LogDirectory = filepath.Join(t.TempDir(), "pods", "web")
	pe := &podEnv{testEnv: e, sandboxID: e.run(t, cfg), sandbox: cfg}
	cp, err := e.ckpt.Get(pe.sandboxID)
	if err != nil || cp.Pauseless == nil {
		t.Fatalf("checkpoint %+v, %v: want a pause-less one", cp, err)
	}
	_, hc := pe.createInspect(t, ctrConfig("app"))
	if hc.CgroupParent != "kubepods-besteffort-poduid3.slice" {
		t.Errorf("container's cgroup parent %q, want the slice's name", hc.CgroupParent)
	}
}
