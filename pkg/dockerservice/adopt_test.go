package dockerservice

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/cridockerd"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/network"
)

const (
	adoptImageID     = "sha256:b0b0000000000000000000000000000000000000000000000000000000000001"
	adoptImageDigest = "busybox@sha256:d1d1000000000000000000000000000000000000000000000000000000000002"
	adoptSandboxID   = "5b1d0000000000000000000000000000000000000000000000000000000000aa"
	adoptContainerID = "c0de0000000000000000000000000000000000000000000000000000000000bb"
)

// criDockerdWorld is what cri-dockerd leaves on a node: a running sandbox
// and container on the engine, its checkpoint, and the container's log
// path as a symlink to Docker's json-file log.
type criDockerdWorld struct {
	docker                      *fakedocker.Engine
	criRoot, logPath, dockerLog string
}

func newCRIDockerdWorld(t *testing.T) *criDockerdWorld {
	t.Helper()
	w := &criDockerdWorld{docker: newFakeDocker(), criRoot: t.TempDir()}
	w.docker.Do(func(s *fakedocker.State) { s.Images[testPauseImage] = map[string]string{} })
	logDir := filepath.Join(t.TempDir(), "default_web_uid-1", "app")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	w.logPath = filepath.Join(logDir, "0.log")
	w.dockerLog = filepath.Join(t.TempDir(), adoptContainerID+"-json.log")
	if err := os.WriteFile(w.dockerLog, []byte(`{"log":"hello\n","stream":"stdout","time":"2026-11-24T10:00:00Z"}`+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(w.dockerLog, w.logPath); err != nil {
		t.Fatal(err)
	}
	started := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	sandbox := &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: adoptSandboxID, Name: "/k8s_POD_web_default_uid-1_2", Created: started, Image: "sha256:pause",
			State:      &container.State{Status: "running", Running: true, Pid: 4242, StartedAt: started},
			HostConfig: &container.HostConfig{NetworkMode: "none"},
		},
		Config: &container.Config{Image: testPauseImage, Labels: map[string]string{
			labelcodec.CRIDockerdLabelType:           labelcodec.TypeSandbox,
			labelcodec.CRIDockerdLabelContainerName:  "POD",
			"io.kubernetes.pod.name":                 "web",
			"io.kubernetes.pod.namespace":            "default",
			"io.kubernetes.pod.uid":                  "uid-1",
			"app":                                    "web",
			"annotation.kubernetes.io/config.source": "file",
		}},
	}
	ctr := &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: adoptContainerID, Name: "/k8s_app_web_default_uid-1_3", Created: started, Image: adoptImageID,
			State:      &container.State{Status: "running", Running: true, Pid: 4243, StartedAt: started},
			HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode("container:" + adoptSandboxID)},
			LogPath:    w.dockerLog,
		},
		Config: &container.Config{Image: adoptImageID, StopSignal: "SIGINT", Labels: map[string]string{
			labelcodec.CRIDockerdLabelType:            labelcodec.TypeContainer,
			labelcodec.CRIDockerdLabelSandboxID:       adoptSandboxID,
			labelcodec.CRIDockerdLabelLogPath:         w.logPath,
			labelcodec.CRIDockerdLabelContainerName:   "app",
			"io.kubernetes.pod.name":                  "web",
			"annotation.io.kubernetes.container.hash": "abc123",
		}},
		Mounts: []container.MountPoint{
			{Type: "bind", Source: "/var/lib/kubelet/pods/uid-1/volumes/x", Destination: "/data", RW: true, Propagation: "rslave"},
			{Type: "volume", Source: "/var/lib/docker/volumes/v", Destination: "/image-volume", RW: true},
		},
	}
	w.docker.Do(func(s *fakedocker.State) { s.Containers[adoptSandboxID], s.Containers[adoptContainerID] = sandbox, ctr })
	w.docker.AddImage(fakedocker.Image{ID: adoptImageID}, "busybox:1", adoptImageDigest)
	w.docker.AddLog(adoptContainerID, false, "hello\n")
	w.writeCheckpoint(t, `{"version":"v1","name":"web","namespace":"default","data":{"port_mappings":[{"protocol":"TCP","container_port":80,"host_port":8080},{"protocol":"UDP","container_port":53,"host_port":0}]},"checksum":1}`)
	return w
}

func (w *criDockerdWorld) writeCheckpoint(t *testing.T, content string) {
	t.Helper()
	dir := filepath.Join(w.criRoot, cridockerd.CheckpointDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, adoptSandboxID), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs netshim over the world, adopting or not; the network still
// holds the sandbox's IP, as libcni's cache would say.
func (w *criDockerdWorld) start(t *testing.T, adopt bool) (*DockerService, *fakePlugin, *checkpoint.Manager) {
	t.Helper()
	ckpt, err := checkpoint.NewManager(filepath.Join(t.TempDir(), "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	plugin := &fakePlugin{}
	cfg := Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake", AdoptCRIDockerd: adopt, CRIDockerdRootDir: w.criRoot}
	ds, err := NewDockerService(cfg, w.docker, ckpt, []network.NetworkPlugin{plugin})
	if err != nil {
		t.Fatal(err)
	}
	plugin.ips[adoptSandboxID] = net.ParseIP("10.0.0.7")
	startService(t, ds)
	return ds, plugin, ckpt
}

// Adopted pods are listed as cri-dockerd listed them, are READY with
// their IP, get a checkpoint with their host ports, and their log becomes
// a CRI file filled from Docker's log.
func TestAdoptCRIDockerdPods(t *testing.T) {
	w := newCRIDockerdWorld(t)
	ds, plugin, ckpt := w.start(t, true)
	ctx := context.Background()

	sbs, err := ds.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(sbs.Items) != 1 {
		t.Fatalf("ListPodSandbox = %v, %v; want the adopted sandbox", sbs, err)
	}
	sb := sbs.Items[0]
	wantLabels := map[string]string{"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "uid-1", "app": "web"}
	if sb.Id != adoptSandboxID || sb.State != runtimeapi.PodSandboxState_SANDBOX_READY ||
		sb.Metadata.Name != "web" || sb.Metadata.Namespace != "default" || sb.Metadata.Uid != "uid-1" || sb.Metadata.Attempt != 2 ||
		!maps.Equal(sb.Labels, wantLabels) || !maps.Equal(sb.Annotations, map[string]string{"kubernetes.io/config.source": "file"}) {
		t.Errorf("adopted sandbox = %v", sb)
	}
	st, err := ds.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: adoptSandboxID})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.Network.GetIp() != "10.0.0.7" || st.Status.Linux.GetNamespaces().GetOptions().GetNetwork() != runtimeapi.NamespaceMode_POD {
		t.Errorf("adopted sandbox status: network %v, namespaces %v; want IP 10.0.0.7 and network mode POD", st.Status.Network, st.Status.Linux.GetNamespaces())
	}
	cp, err := ckpt.Get(adoptSandboxID)
	if err != nil {
		t.Fatalf("netshim checkpoint of the adopted sandbox: %v", err)
	}
	if len(cp.PortMappings) != 1 || cp.PortMappings[0] != (checkpoint.PortMapping{Protocol: "tcp", ContainerPort: 80, HostPort: 8080}) || cp.Setup != checkpoint.SetupReady {
		t.Errorf("netshim checkpoint = %+v; want the one host port and setup ready", cp)
	}

	cs, err := ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(cs.Containers) != 1 {
		t.Fatalf("ListContainers = %v, %v; want the adopted container", cs, err)
	}
	c := cs.Containers[0]
	if c.Id != adoptContainerID || c.PodSandboxId != adoptSandboxID || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING ||
		c.Metadata.Name != "app" || c.Metadata.Attempt != 3 ||
		!maps.Equal(c.Labels, map[string]string{"io.kubernetes.container.name": "app", "io.kubernetes.pod.name": "web"}) ||
		!maps.Equal(c.Annotations, map[string]string{"io.kubernetes.container.hash": "abc123"}) {
		t.Errorf("adopted container = %v", c)
	}
	cst, err := ds.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: adoptContainerID})
	if err != nil {
		t.Fatal(err)
	}
	if cst.Status.LogPath != w.logPath || len(cst.Status.Mounts) != 1 || cst.Status.Mounts[0].ContainerPath != "/data" ||
		cst.Status.Mounts[0].Propagation != runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER {
		t.Errorf("adopted container status: log %q mounts %v", cst.Status.LogPath, cst.Status.Mounts)
	}
	// The image as cri-dockerd named it: kubelet shows it as the pod's.
	if cst.Status.Image.GetImage() != "busybox:1" || cst.Status.ImageRef != "docker-pullable://"+adoptImageDigest {
		t.Errorf("adopted container image = %v, ref %q; want busybox:1 and docker-pullable://%s", cst.Status.Image, cst.Status.ImageRef, adoptImageDigest)
	}

	// The symlink is now a CRI log file with the line from before.
	testutil.Eventually(t, "the adopted log to be a CRI file holding the old line", func() bool {
		fi, err := os.Lstat(w.logPath)
		if err != nil || !fi.Mode().IsRegular() {
			return false
		}
		b, _ := os.ReadFile(w.logPath)
		return strings.Contains(string(b), " stdout F hello\n")
	})
	if b, _ := os.ReadFile(w.dockerLog); !strings.HasPrefix(string(b), `{"log":"hello\n"`) {
		t.Errorf("Docker's own log was changed: %q", b)
	}

	// Remove tears the network down with the host ports from cri-dockerd's
	// checkpoint, and leaves neither checkpoint behind.
	if _, err := ds.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: adoptSandboxID}); err != nil {
		t.Fatal(err)
	}
	plugin.mu.Lock()
	ports, held := plugin.portsAtDown, plugin.ips[adoptSandboxID] != nil
	plugin.mu.Unlock()
	if held || len(ports) != 1 || ports[0].HostPort != 8080 {
		t.Errorf("after stop: IP held %v, teardown ports %v; want the IP released with host port 8080", held, ports)
	}
	if _, err := ds.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: adoptSandboxID}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w.criRoot, cridockerd.CheckpointDir, adoptSandboxID)); !os.IsNotExist(err) {
		t.Errorf("cri-dockerd's checkpoint after remove: %v, want it gone", err)
	}
	if _, err := ckpt.Get(adoptSandboxID); err == nil {
		t.Error("netshim's checkpoint of the removed sandbox is still there")
	}
}

// Without --adopt-cri-dockerd, cri-dockerd's pods are not netshim's: not
// listed, and nothing of theirs is touched.
func TestCRIDockerdPodsIgnoredWithoutAdopt(t *testing.T) {
	w := newCRIDockerdWorld(t)
	ds, _, ckpt := w.start(t, false)
	sbs, _ := ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	cs, _ := ds.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
	if len(sbs.GetItems()) != 0 || len(cs.GetContainers()) != 0 {
		t.Errorf("without adoption: %d sandboxes, %d containers listed; want none", len(sbs.GetItems()), len(cs.GetContainers()))
	}
	if ids, _ := ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoints written: %v", ids)
	}
	if fi, err := os.Lstat(w.logPath); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("cri-dockerd's log symlink: %v, %v; want it untouched", fi, err)
	}
}

// A checkpoint that does not match the sandbox, or that netshim cannot
// read, costs the host ports but not the pod; a sandbox whose IP cannot be
// found is NOTREADY, so that kubelet replaces it.
func TestAdoptCRIDockerdBadCheckpointAndNoIP(t *testing.T) {
	for _, tc := range []struct {
		name, checkpoint string
		ip               bool
		wantState        runtimeapi.PodSandboxState
	}{
		{"another pod's checkpoint", `{"version":"v1","name":"db","namespace":"default","data":{"port_mappings":[{"protocol":"TCP","container_port":80,"host_port":8080}]}}`, true, runtimeapi.PodSandboxState_SANDBOX_READY},
		{"unknown version", `{"version":"v9","name":"web","namespace":"default"}`, true, runtimeapi.PodSandboxState_SANDBOX_READY},
		{"garbage", `{`, true, runtimeapi.PodSandboxState_SANDBOX_READY},
		{"bad protocol", `{"version":"v1","name":"web","namespace":"default","data":{"port_mappings":[{"protocol":"ICMP","container_port":80,"host_port":8080}]}}`, true, runtimeapi.PodSandboxState_SANDBOX_READY},
		{"no IP", `{"version":"v1","name":"web","namespace":"default"}`, false, runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCRIDockerdWorld(t)
			w.writeCheckpoint(t, tc.checkpoint)
			ckpt, err := checkpoint.NewManager(filepath.Join(t.TempDir(), "sandbox"))
			if err != nil {
				t.Fatal(err)
			}
			plugin := &fakePlugin{}
			ds, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake", AdoptCRIDockerd: true, CRIDockerdRootDir: w.criRoot}, w.docker, ckpt, []network.NetworkPlugin{plugin})
			if err != nil {
				t.Fatal(err)
			}
			if tc.ip {
				plugin.ips[adoptSandboxID] = net.ParseIP("10.0.0.7")
			}
			startService(t, ds)
			cp, err := ckpt.Get(adoptSandboxID)
			if err != nil {
				t.Fatal(err)
			}
			if len(cp.PortMappings) != 0 {
				t.Errorf("host ports taken from a checkpoint netshim should not trust: %v", cp.PortMappings)
			}
			st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: adoptSandboxID})
			if err != nil || st.Status.State != tc.wantState {
				t.Errorf("state = %v, %v; want %v", st.GetStatus().GetState(), err, tc.wantState)
			}
		})
	}
}

// A container with netshim's own labels stays netshim's with adoption on,
// whatever cri-dockerd labels its image brought.
func TestAdoptingDecoderPrefersNetshimLabels(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("own"))
	var c container.InspectResponse
	e.docker.Do(func(s *fakedocker.State) { c = *s.Containers[id] })
	labels := maps.Clone(c.Config.Labels)
	labels[labelcodec.CRIDockerdLabelType] = labelcodec.TypeContainer
	cfg := *c.Config
	cfg.Labels = labels
	c.Config = &cfg
	rec := recordFromInspectAdopting(c)
	if rec == nil || rec.SandboxInfo().Adopted || rec.SandboxInfo().Metadata.GetName() != "own" {
		t.Errorf("record = %+v; want netshim's own sandbox", rec)
	}
}

// A cri-dockerd checkpoint whose sandbox container is gone is listed
// NOTREADY, as cri-dockerd listed it, and its network is freed at start-up;
// files that are not checkpoints are left alone.
func TestAdoptCRIDockerdOrphanCheckpoint(t *testing.T) {
	const orphan = "0bad000000000000000000000000000000000000000000000000000000000000"
	w := newCRIDockerdWorld(t)
	dir := filepath.Join(w.criRoot, cridockerd.CheckpointDir)
	if err := os.WriteFile(filepath.Join(dir, orphan), []byte(`{"version":"v1","name":"gone","namespace":"ns","data":{"port_mappings":[{"protocol":"TCP","container_port":80,"host_port":9090}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte(`{"version":"v1","name":"x","namespace":"y"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt, err := checkpoint.NewManager(filepath.Join(t.TempDir(), "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	plugin := &fakePlugin{}
	ds, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake", AdoptCRIDockerd: true, CRIDockerdRootDir: w.criRoot}, w.docker, ckpt, []network.NetworkPlugin{plugin})
	if err != nil {
		t.Fatal(err)
	}
	plugin.ips[adoptSandboxID] = net.ParseIP("10.0.0.7")
	plugin.ips[orphan] = net.ParseIP("10.0.0.8")
	startService(t, ds)

	sbs, err := ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: orphan}})
	if err != nil || len(sbs.Items) != 1 || sbs.Items[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || sbs.Items[0].Metadata.Name != "gone" {
		t.Fatalf("orphan sandbox listed as %v, %v; want it NOTREADY", sbs, err)
	}
	testutil.Eventually(t, "the orphan's network to be torn down", func() bool {
		plugin.mu.Lock()
		defer plugin.mu.Unlock()
		return plugin.ips[orphan] == nil
	})
	plugin.mu.Lock()
	ports := plugin.portsAtDown
	plugin.mu.Unlock()
	if len(ports) != 1 || ports[0].HostPort != 9090 {
		t.Errorf("orphan torn down with host ports %v, want 9090", ports)
	}
	if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: orphan}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, orphan)); !os.IsNotExist(err) {
		t.Errorf("cri-dockerd's checkpoint of the removed orphan: %v, want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Errorf("a file that is not a checkpoint was touched: %v", err)
	}
	if ids, _ := ckpt.List(); len(ids) != 1 || ids[0] != adoptSandboxID {
		t.Errorf("netshim checkpoints = %v, want only the live adopted sandbox's", ids)
	}
}
