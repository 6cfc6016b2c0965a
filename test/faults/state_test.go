//go:build faults

package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// cniTimeout is the --cni-timeout of scenario 4: short, so that a hung
// plugin costs seconds.
const cniTimeout = 2 * time.Second

// (4) The IPAM plugin hangs on ADD, hangs on DEL, or prints garbage.
// netshim runs with a short --cni-timeout: RunPodSandbox fails in time and
// leaves nothing; StopPodSandbox never reports success while the IP is
// held, and a later Stop, once the plugin works again, frees it.
func testCNIPluginHangsOrLies(t *testing.T, w *world) {
	bin := filepath.Join(w.sc.dir, "bin")
	flags := filepath.Join(w.sc.dir, "flags")
	if err := os.MkdirAll(flags, 0o755); err != nil {
		t.Fatal(err)
	}
	// A hung IPAM is the bridge plugin's child: the timeout kills the
	// bridge plugin and the sleeper lives on, so the test kills it by the
	// PID it wrote (it would also hold the fds it inherited, such as a
	// lock held by whoever runs the suite).
	t.Cleanup(func() { killHung(t, flags) })
	writeScript(t, filepath.Join(bin, "flaky-ipam"), fmt.Sprintf(`# host-local, unless a flag file says to hang or to lie
case "$CNI_COMMAND" in
ADD) [ -e %[1]s/hang-add ] && { echo $$ > %[1]s/pid-$$; exec sleep 600; }
     [ -e %[1]s/garbage ] && { echo 'this is not a CNI result {'; exit 0; } ;;
DEL) [ -e %[1]s/hang-del ] && { echo $$ > %[1]s/pid-$$; exec sleep 600; } ;;
esac
exec %[2]s/host-local
`, flags, w.suite.cniBinDir))
	w.start(w.conflist(harness.WithIPAM(w.hostLocalIPAM("flaky-ipam"))),
		harness.WithCNIBinDir(bin+","+w.suite.cniBinDir), harness.WithArgs("--cni-timeout", cniTimeout.String()))
	c := w.ns.CRI()

	// A failed RunPodSandbox must fail in bounded time and leave nothing.
	runMustFail := func(name, why string) {
		t.Helper()
		ctx, cancel := rpcCtx(t.Context())
		defer cancel()
		start := time.Now()
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: w.podConfig(name, w.hostPort(1))})
		took := time.Since(start)
		if err == nil {
			w.ledger.told(resp.PodSandboxId, name)
			t.Errorf("%s: RunPodSandbox succeeded (%s)", why, resp.PodSandboxId)
			return
		}
		t.Logf("%s: RunPodSandbox failed after %s: %v", why, took.Round(time.Millisecond), err)
		if took > cniTimeout*5 {
			t.Errorf("%s: RunPodSandbox took %s with --cni-timeout %s", why, took, cniTimeout)
		}
		// A plugin's failure is not the caller's fault: no code is asserted.
		if ids := w.mustSandboxes(); len(ids) > 0 {
			t.Errorf("%s: a failed RunPodSandbox left %d sandbox(es) listed", why, len(ids))
		}
		if ids := dockerPS(t, "label=netshim.io/pod-namespace="+w.sc.ns); len(ids) > 0 {
			t.Errorf("%s: a failed RunPodSandbox left containers %v", why, ids)
		}
		if held := w.ipamHeld(); len(held) > 0 {
			t.Errorf("%s: a failed RunPodSandbox left IPs held: %v", why, held)
		}
		w.sc.runs.Add(1)
	}

	flag(t, filepath.Join(flags, "hang-add"), true)
	runMustFail("hang-add", "IPAM hangs on ADD")
	flag(t, filepath.Join(flags, "hang-add"), false)

	flag(t, filepath.Join(flags, "garbage"), true)
	runMustFail("garbage", "IPAM prints garbage")
	flag(t, filepath.Join(flags, "garbage"), false)

	// DEL hangs: Stop must not report success while the IP is held.
	ctx, cancel := rpcCtx(t.Context())
	defer cancel()
	resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: w.podConfig("held", w.hostPort(2))})
	if err != nil {
		t.Fatalf("RunPodSandbox with a working plugin: %v", err)
	}
	id := resp.PodSandboxId
	w.ledger.told(id, "held")
	ip := w.status(id).GetNetwork().GetIp()
	flag(t, filepath.Join(flags, "hang-del"), true)
	for i := range 2 {
		sctx, scancel := rpcCtx(t.Context())
		_, err := c.Runtime.StopPodSandbox(sctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		scancel()
		_, held := w.ipamHeld()[ip]
		switch {
		case err == nil && held:
			t.Errorf("StopPodSandbox #%d reported success while DEL hangs and %s is still held", i+1, ip)
		case err != nil:
			t.Logf("StopPodSandbox #%d with DEL hanging: %v (IP held: %v)", i+1, err, held)
		}
	}
	flag(t, filepath.Join(flags, "hang-del"), false)
	if err := w.stopRemove(t.Context(), c, id); err != nil {
		t.Fatalf("Stop+Remove once the plugin works again: %v", err)
	}
	if _, held := w.ipamHeld()[ip]; held {
		t.Errorf("%s is still held after a successful Stop+Remove", ip)
	}
	w.sc.runs.Add(1)
}

// killHung kills the hung plugin processes whose PIDs are in dir.
func killHung(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "pid-*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(string(data), &pid); err != nil || pid <= 1 {
			continue
		}
		// Only the sleeper itself, never a process that reused its PID.
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || string(cmd) != "sleep\x00600\x00" {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			t.Logf("killed a hung plugin process left behind (pid %d)", pid)
		}
	}
}

// (5) Checkpoints damaged while netshim was down: one corrupt, one of a
// newer version (99), one unreadable (a directory in place of the file).
// netshim starts, reports each, and serves the intact sandbox and new ones.
// The corrupt one's pod has a container: its sandbox keeps the pod's name
// and namespace in every mode (a pause-less sandbox, which has no infra
// container, takes them from that container's labels).
func testDamagedCheckpoints(t *testing.T, w *world) {
	n := w.start(w.conflist())
	c := n.CRI()
	// The corrupt one's pod shares no PID namespace, as kubelet's pods by
	// default: under --sandbox-netns=pauseless it has no pause container.
	podCfg := func(name string) *runtimeapi.PodSandboxConfig {
		if name == "corrupt" {
			return w.podConfig(name, 0, harness.WithPodNamespaceModes(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD))
		}
		return w.podConfig(name, 0)
	}
	ids := map[string]string{}
	for _, name := range []string{"corrupt", "newer", "unreadable", "intact"} {
		ctx, cancel := rpcCtx(t.Context())
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg(name)})
		cancel()
		if err != nil {
			t.Fatalf("RunPodSandbox %s: %v", name, err)
		}
		ids[name] = resp.PodSandboxId
		w.ledger.told(resp.PodSandboxId, name)
	}
	intactIP := w.status(ids["intact"]).GetNetwork().GetIp()
	{
		ctx, cancel := rpcCtx(t.Context())
		cfg := harness.Container("app", workloadImage, harness.WithCommand("sleep", "300"))
		resp, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ids["corrupt"], Config: cfg, SandboxConfig: podCfg("corrupt")})
		if err == nil {
			_, err = c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
		}
		cancel()
		if err != nil {
			t.Fatalf("a container in the corrupt checkpoint's pod: %v", err)
		}
	}
	n.MustStop(t, syscall.SIGTERM)

	cpDir := filepath.Join(n.RootDir, "sandbox")
	cp := func(name string) string { return filepath.Join(cpDir, ids[name]+".json") }
	if err := os.WriteFile(cp("corrupt"), []byte(`{"checksum":"sha256:00","data":{"sandboxID":`), 0o600); err != nil {
		t.Fatal(err)
	}
	setVersion(t, cp("newer"), 99)
	if err := os.Remove(cp("unreadable")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cp("unreadable"), 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(cp("unreadable"))

	sctx, scancel := context.WithTimeout(t.Context(), time.Minute)
	defer scancel()
	started := n.Start(sctx)
	if err := started; err != nil {
		// Go on without the damaged files, so that the rest (and the
		// leak audit) still says something.
		t.Errorf("netshim does not start with damaged checkpoints: %v\n%s", err, n.LogTail(5))
		for _, name := range []string{"corrupt", "newer", "unreadable"} {
			if err := os.RemoveAll(cp(name)); err != nil {
				t.Fatal(err)
			}
		}
		n.MustStart(t)
	}
	c = n.CRI()
	w.sc.runs.Add(1)
	log, _ := os.ReadFile(n.LogPath)
	for _, name := range []string{"corrupt", "newer", "unreadable"} {
		if started == nil && !strings.Contains(string(log), ids[name]) {
			t.Errorf("netshim's log does not name the %s checkpoint's sandbox %s", name, ids[name])
		}
	}
	if st := w.status(ids["intact"]); st.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || st.GetNetwork().GetIp() != intactIP {
		t.Errorf("the intact sandbox is %s with IP %q after the restart, want READY with %s", st.GetState(), st.GetNetwork().GetIp(), intactIP)
	}
	if md, want := w.status(ids["corrupt"]).GetMetadata(), podCfg("corrupt").Metadata; md.GetName() != want.Name || md.GetNamespace() != want.Namespace || md.GetUid() != want.Uid {
		t.Errorf("the corrupt checkpoint's sandbox has metadata %v after the restart, want its pod's %v", md, want)
	}
	ctx, cancel := rpcCtx(t.Context())
	defer cancel()
	resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: w.podConfig("fresh", 0)})
	if err != nil {
		t.Fatalf("RunPodSandbox after the restart: %v", err)
	}
	w.ledger.told(resp.PodSandboxId, "fresh")
	// Every sandbox, damaged or not, must still stop and be removed.
	for _, name := range []string{"intact", "corrupt", "newer", "unreadable"} {
		sctx, scancel := context.WithTimeout(t.Context(), 20*time.Second)
		err := w.stopRemove(sctx, c, ids[name])
		scancel()
		if err != nil {
			t.Errorf("Stop+Remove of the %s sandbox: %v", name, err)
		}
	}
	if err := w.stopRemove(t.Context(), c, resp.PodSandboxId); err != nil {
		t.Errorf("Stop+Remove of a new sandbox: %v", err)
	}
	// A corrupt file moved aside is kept for a human to read: it is not a
	// leak, but it must be there.
	aside, _ := filepath.Glob(filepath.Join(cpDir, ids["corrupt"]+".json.corrupt-*"))
	if len(aside) == 0 {
		t.Logf("no moved-aside copy of the corrupt checkpoint in %s", cpDir)
	}
	for _, f := range aside {
		os.Remove(f)
	}
}

// setVersion rewrites a checkpoint with another version and a valid
// checksum, as a newer netshim would have written it.
func setVersion(t *testing.T, path string, version int) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	env.Data["version"] = version
	data, err := json.Marshal(env.Data)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	out := fmt.Sprintf(`{"checksum":"sha256:%s","data":%s}`, hex.EncodeToString(sum[:]), data)
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

// (6) netshim's root dir and the pods' log dir are on a small tmpfs that
// fills up: RunPodSandbox and CreateContainer fail cleanly and leave
// nothing; once there is room again both work.
func testDiskFull(t *testing.T, w *world) {
	full := filepath.Join(w.sc.dir, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	harness.MustRun(t, "mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=64", "nsflt-full", full)
	w.sc.mounts = append(w.sc.mounts, full)
	n := w.start(w.conflist(), harness.WithRootDir(filepath.Join(full, "root")))
	c := n.CRI()
	logs := filepath.Join(full, "logs")
	podCfg := func(name string) *runtimeapi.PodSandboxConfig {
		return w.podConfig(name, 0, harness.WithLogDirectory(filepath.Join(logs, name)))
	}
	run := func(name string) (string, error) {
		ctx, cancel := rpcCtx(t.Context())
		defer cancel()
		cfg := podCfg(name)
		if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil && !errors.Is(err, syscall.ENOSPC) {
			return "", err
		}
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			return "", err
		}
		w.ledger.told(resp.PodSandboxId, name)
		return resp.PodSandboxId, nil
	}
	createStart := func(podID, podName string) error {
		ctx, cancel := rpcCtx(t.Context())
		defer cancel()
		cfg := harness.Container("logger", workloadImage, harness.WithCommand("sh", "-c", "echo started; exec sleep 300"))
		resp, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg(podName)})
		if err != nil {
			return err
		}
		if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
			return errors.Join(err, w.removeContainer(resp.ContainerId))
		}
		return nil
	}

	before, err := run("before")
	if err != nil {
		t.Fatalf("RunPodSandbox with room: %v", err)
	}
	// The log dir kubelet would have made for the next pod.
	if err := os.MkdirAll(podCfg("full").LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(t, full)
	heldBefore := len(w.ipamHeld())
	if id, err := run("full"); err == nil {
		t.Errorf("RunPodSandbox succeeded with the root dir full (%s)", id)
	} else {
		t.Logf("RunPodSandbox with the root dir full: %v", err)
		if got := len(w.mustSandboxes()); got != 1 {
			t.Errorf("a failed RunPodSandbox left sandboxes: %d listed, want 1", got)
		}
		if held := len(w.ipamHeld()); held != heldBefore {
			t.Errorf("a failed RunPodSandbox left an IP held: %d held, want %d", held, heldBefore)
		}
	}
	if err := createStart(before, "before"); err == nil {
		t.Logf("CreateContainer+StartContainer succeeded with the log dir full (the log is written as output comes)")
	} else {
		t.Logf("CreateContainer+StartContainer with the log dir full: %v", err)
		if ids := dockerPS(t, "label=netshim.io/pod-namespace="+w.sc.ns, "label=netshim.io/type=container"); len(ids) > 0 {
			t.Errorf("a failed CreateContainer left containers %v", ids)
		}
	}
	w.sc.runs.Add(1)

	unfill(t, full)
	after, err := run("after")
	if err != nil {
		t.Fatalf("RunPodSandbox once there is room again: %v", err)
	}
	if err := createStart(after, "after"); err != nil {
		t.Errorf("CreateContainer+StartContainer once there is room again: %v", err)
	}
	w.sc.runs.Add(1)
	w.removeContainers()
	w.removeAll()
}

// fill takes every block and inode of the tmpfs at dir.
func fill(t *testing.T, dir string) {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	if err := os.MkdirAll(filler, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(filler, "blocks"))
	if err == nil {
		buf := make([]byte, 64<<10)
		for err == nil {
			_, err = f.Write(buf)
		}
		f.Close()
	}
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(filler, fmt.Sprint(i)), nil, 0o644); err != nil {
			break
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil {
		t.Logf("%s filled: %d blocks, %d inodes free", dir, st.Bavail, st.Ffree)
	}
}

func unfill(t *testing.T, dir string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
}

func (w *world) removeContainer(id string) error {
	ctx, cancel := rpcCtx(context.Background())
	defer cancel()
	_, err := w.ns.CRI().Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
	return err
}

// removeContainers stops and removes the scope's workload containers.
func (w *world) removeContainers() {
	w.t.Helper()
	ctx, cancel := rpcCtx(context.Background())
	defer cancel()
	c := w.ns.CRI()
	resp, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		w.t.Errorf("ListContainers: %v", err)
		return
	}
	for _, ctr := range resp.Containers {
		if ctr.GetLabels()["io.kubernetes.pod.namespace"] != w.sc.ns && !w.ownsSandbox(ctr.PodSandboxId) {
			continue
		}
		if _, err := c.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr.Id, Timeout: 1}); err != nil {
			w.t.Errorf("StopContainer %s: %v", ctr.Id, err)
		}
		if err := w.removeContainer(ctr.Id); err != nil {
			w.t.Errorf("RemoveContainer %s: %v", ctr.Id, err)
		}
	}
}

func (w *world) ownsSandbox(id string) bool {
	for _, p := range w.mustSandboxes() {
		if p.Id == id {
			return true
		}
	}
	return false
}

// (7) The same RunPodSandbox arrives several times at once (kubelet's
// retry racing its first try). At most one sandbox may come of it, every
// success must name that one, and a refusal must carry a precise code.
func testDuplicateRunPodSandbox(t *testing.T, w *world) {
	n := w.start(w.conflist())
	c := n.CRI()
	const rounds, dups = 5, 8
	for r := range rounds {
		name := fmt.Sprintf("dup%d", r)
		cfg := w.podConfig(name, w.hostPort(r))
		var mu sync.Mutex
		got := map[string]int{}
		var errs []error
		var wg sync.WaitGroup
		for range dups {
			wg.Go(func() {
				ctx, cancel := rpcCtx(t.Context())
				defer cancel()
				resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				got[resp.PodSandboxId]++
				w.ledger.told(resp.PodSandboxId, name)
			})
		}
		wg.Wait()
		if len(got) > 1 {
			t.Errorf("round %d: %d identical RunPodSandbox calls made %d different sandboxes: %v", r, dups, len(got), got)
		}
		for _, err := range errs {
			if code := status.Code(err); code == codes.Unknown || code == codes.Internal {
				t.Errorf("round %d: a duplicate RunPodSandbox failed with code %s; want a precise one: %v", r, code, err)
			}
		}
		listed := w.mustSandboxes()
		if len(listed) != 1 {
			t.Errorf("round %d: %d sandboxes listed after %d duplicate calls, want 1", r, len(listed), dups)
		}
		t.Logf("round %d: %d succeeded (%d sandbox IDs), %d refused", r, dups-len(errs), len(got), len(errs))
		w.removeAll()
		w.sc.runs.Add(1)
	}
}
