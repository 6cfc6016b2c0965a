//go:build takeover

package takeover

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	// watchFor is how long the adopted pods are watched under netshim:
	// more than three of kubelet's sync periods (syncFrequency 10 s in
	// the harness's kubelet config) and several PLEG relists, any of
	// which would restart a container kubelet found changed.
	watchFor = 35 * time.Second
	// kubeletSeesPods bounds the wait for the restarted kubelet to list
	// the static pods again.
	kubeletSeesPods = 60 * time.Second
	// newLinesWithin bounds the wait for the logger's lines after the
	// switch to show in the log.
	newLinesWithin = 30 * time.Second
	// teardownDeadline: a removed static pod's containers go at kubelet's
	// next 1-minute container GC, its sandbox in that pass or the next
	// (test/e2e-kubelet saw 56 s and 99 s).
	teardownDeadline = 150 * time.Second
)

// snapshot is one runtime's answers about the test's pods.
type snapshot struct {
	runtime string
	// The ListPodSandbox and ListContainers items of the namespace, by id.
	sandboxes  map[string]*runtimeapi.PodSandbox
	containers map[string]*runtimeapi.Container
	// PodSandboxStatus and ContainerStatus of each.
	sandboxStatus   map[string]*runtimeapi.PodSandboxStatus
	containerStatus map[string]*runtimeapi.ContainerStatus
	// kubelet's /pods: pod name -> container name -> status.
	kubelet map[string]map[string]kubeletContainer
	// dockerIDs are all the engine's containers (docker ps -a).
	dockerIDs []string
}

// takeSnapshot asks the runtime behind c, kubelet and the engine.
func (w *world) takeSnapshot(c *harness.CRI, runtime string) (*snapshot, error) {
	s := &snapshot{runtime: runtime, sandboxes: map[string]*runtimeapi.PodSandbox{},
		containers: map[string]*runtimeapi.Container{}, sandboxStatus: map[string]*runtimeapi.PodSandboxStatus{},
		containerStatus: map[string]*runtimeapi.ContainerStatus{}}
	ctx, cancel := callCtx()
	defer cancel()
	sbs, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s ListPodSandbox: %w", runtime, err)
	}
	for _, sb := range sbs.Items {
		if sb.GetMetadata().GetNamespace() != namespace {
			continue
		}
		s.sandboxes[sb.Id] = sb
		st, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id})
		if err != nil {
			return nil, fmt.Errorf("%s PodSandboxStatus %s: %w", runtime, short(sb.Id), err)
		}
		s.sandboxStatus[sb.Id] = st.GetStatus()
	}
	cs, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s ListContainers: %w", runtime, err)
	}
	for _, ctr := range cs.Containers {
		if s.sandboxes[ctr.PodSandboxId] == nil {
			continue
		}
		s.containers[ctr.Id] = ctr
		st, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.Id})
		if err != nil {
			return nil, fmt.Errorf("%s ContainerStatus %s: %w", runtime, short(ctr.Id), err)
		}
		s.containerStatus[ctr.Id] = st.GetStatus()
	}
	if s.kubelet, _, err = w.kubeletPods(); err != nil {
		return nil, fmt.Errorf("kubelet's /pods: %w", err)
	}
	out, err := w.dockerd.Docker("ps", "-a", "-q", "--no-trunc")
	if err != nil {
		return nil, fmt.Errorf("docker ps -a: %w: %s", err, out)
	}
	s.dockerIDs = strings.Fields(out)
	slices.Sort(s.dockerIDs)
	return s, nil
}

// sandboxOf returns the newest sandbox of a static pod.
func (s *snapshot) sandboxOf(pod string) *runtimeapi.PodSandbox {
	var found *runtimeapi.PodSandbox
	for _, sb := range s.sandboxes {
		if sb.GetMetadata().GetName() == mirrorName(pod) &&
			(found == nil || sb.GetMetadata().GetAttempt() > found.GetMetadata().GetAttempt()) {
			found = sb
		}
	}
	return found
}

// containerOf returns the newest container named ctr in the pod's sandbox.
func (s *snapshot) containerOf(pod, ctr string) *runtimeapi.Container {
	sb := s.sandboxOf(pod)
	if sb == nil {
		return nil
	}
	var found *runtimeapi.Container
	for _, c := range s.containers {
		if c.PodSandboxId == sb.Id && c.GetMetadata().GetName() == ctr &&
			(found == nil || c.GetMetadata().GetAttempt() > found.GetMetadata().GetAttempt()) {
			found = c
		}
	}
	return found
}

func (s *snapshot) podIP(pod string) string {
	if sb := s.sandboxOf(pod); sb != nil {
		return s.sandboxStatus[sb.Id].GetNetwork().GetIp()
	}
	return ""
}

// running says whether both pods are up: sandbox READY with an IP in the
// subnet, container RUNNING, kubelet reporting it running. If not, why.
func (s *snapshot) running() (bool, string) {
	_, subnet, _ := net.ParseCIDR(subnetCIDR)
	for _, pc := range [][2]string{{webPod, webCtr}, {loggerPod, loggerCtr}} {
		pod, ctr := pc[0], pc[1]
		sb := s.sandboxOf(pod)
		switch {
		case sb == nil:
			return false, fmt.Sprintf("%s: no sandbox on %s", pod, s.runtime)
		case sb.State != runtimeapi.PodSandboxState_SANDBOX_READY:
			return false, fmt.Sprintf("%s: sandbox %s is %s", pod, short(sb.Id), sb.State)
		case !subnet.Contains(net.ParseIP(s.podIP(pod))):
			return false, fmt.Sprintf("%s: sandbox %s has IP %q, not in %s", pod, short(sb.Id), s.podIP(pod), subnetCIDR)
		}
		c := s.containerOf(pod, ctr)
		if c == nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return false, fmt.Sprintf("%s: container %s not running on %s (%v)", pod, ctr, s.runtime, c.GetState())
		}
		k, ok := s.kubelet[mirrorName(pod)][ctr]
		if !ok || k.State.Running == nil {
			return false, fmt.Sprintf("%s: kubelet does not report %s running (%v)", pod, ctr, k)
		}
	}
	return true, ""
}

// dump writes the snapshot's answers as JSON (an artifact).
func (s *snapshot) dump() []byte {
	data, _ := json.MarshalIndent(map[string]any{
		"runtime":         s.runtime,
		"sandboxes":       protoSection(s.sandboxes),
		"containers":      protoSection(s.containers),
		"sandboxStatus":   protoSection(s.sandboxStatus),
		"containerStatus": protoSection(s.containerStatus),
		"kubelet":         s.kubelet,
		"docker":          s.dockerIDs,
	}, "", "  ")
	return data
}

func protoSection[M proto.Message](ms map[string]M) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for id, m := range ms {
		data, err := protojson.Marshal(m)
		if err != nil {
			data, _ = json.Marshal(err.Error())
		}
		out[id] = data
	}
	return out
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ---------------------------------------------------------------- the test

// TestTakeOverCRIDockerd: issue 12's take-over of a cri-dockerd node.
// (a) kubelet runs two static pods on cri-dockerd v0.4.3; (b) kubelet and
// cri-dockerd stop; (c) netshim starts with --adopt-cri-dockerd and
// kubelet restarts on netshim's socket; (d) for watchFor, nothing is
// restarted or recreated and netshim answers what cri-dockerd answered,
// the pods serve, their logs go on in CRI format; (e) removing the
// manifests tears the pods down through netshim and nothing is left.
// With E2E_TAKEOVER_ONLY_CRI_DOCKERD=1 it runs (a) and then (e) on
// cri-dockerd: the world without netshim.
func TestTakeOverCRIDockerd(t *testing.T) {
	cfg := loadConfig(t)
	w := newWorld(t, cfg)
	v := w.crid.Version()
	t.Logf("(a) cri-dockerd %s on Docker %s; kubelet %s on its socket", strings.TrimSpace(mustOut(cfg.criDockerdBin, "--version")),
		v.GetRuntimeVersion(), strings.TrimSpace(mustOut(cfg.kubeletBin, "--version")))

	// (a) The pods run on cri-dockerd.
	w.startKubelet(w.crid.Sock, "cri-dockerd")
	w.writeManifests()
	before := w.waitRunning(w.crid.CRI(), "cri-dockerd")
	w.writeArtifact("cri-dockerd-answers.json", before.dump())
	for _, pod := range []string{webPod, loggerPod} {
		sb := before.sandboxOf(pod)
		c := before.containerOf(pod, map[string]string{webPod: webCtr, loggerPod: loggerCtr}[pod])
		t.Logf("(a) %s: sandbox %s (attempt %d) IP %s, container %s (attempt %d), kubelet: %v", pod, short(sb.Id),
			sb.GetMetadata().GetAttempt(), before.podIP(pod), short(c.Id), c.GetMetadata().GetAttempt(),
			before.kubelet[mirrorName(pod)])
	}
	t.Run("a-serving", func(t *testing.T) { w.checkServing(t, before) })
	loggerLog := before.containerStatus[before.containerOf(loggerPod, loggerCtr).Id].GetLogPath()
	var linesBefore int
	t.Run("a-logs", func(t *testing.T) { linesBefore = w.checkLogsOnCRIDockerd(t, loggerLog) })
	if t.Failed() {
		t.Fatalf("the pods do not work on cri-dockerd: the world is broken, not the take-over\n%s", w.tails())
	}

	if cfg.onlyCRIDockerd {
		t.Log("E2E_TAKEOVER_ONLY_CRI_DOCKERD=1: tearing the pods down through cri-dockerd, no take-over")
		w.teardownAndAudit(t, w.crid.CRI(), "cri-dockerd", before)
		return
	}

	// (b) kubelet and cri-dockerd stop; the pods keep running in Docker.
	if err := w.kubelet.Stop(); err != nil {
		t.Fatalf("(b) stopping kubelet: %v", err)
	}
	if err := w.crid.Stop(); err != nil {
		t.Fatalf("(b) stopping cri-dockerd: %v", err)
	}
	running := strings.Fields(w.dockerd.MustDocker(t, "ps", "-q", "--no-trunc"))
	for id := range before.containers {
		if !slices.Contains(running, id) {
			t.Fatalf("(b) container %s stopped with cri-dockerd", short(id))
		}
	}
	for id := range before.sandboxes {
		if !slices.Contains(running, id) {
			t.Fatalf("(b) sandbox %s stopped with cri-dockerd", short(id))
		}
	}
	switchLine := w.lastDockerLine(before.containerOf(loggerPod, loggerCtr).Id)
	t.Logf("(b) kubelet and cri-dockerd stopped; %d containers run on; the logger is at line %d", len(running), switchLine)

	// (c) netshim adopts; kubelet restarts on its socket.
	w.startNetshim()
	w.startKubelet(w.netshim.Sock, "netshim")
	t.Logf("(c) netshim %s serves on %s; kubelet restarted on it", w.netshim.Version().GetRuntimeVersion(), w.netshim.Sock)

	// (d) Nothing restarts; netshim answers what cri-dockerd answered.
	after := w.watchAdopted(t, before)
	if after == nil {
		t.Fatalf("(d) the adopted pods changed under netshim\n%s", w.tails())
	}
	w.writeArtifact("netshim-answers.json", after.dump())
	t.Run("d-same-answers", func(t *testing.T) { compareSnapshots(t, before, after) })
	t.Run("d-kubelet-restarted-nothing", func(t *testing.T) { compareKubelet(t, before, after) })
	t.Run("d-serving", func(t *testing.T) { w.checkServing(t, after) })
	t.Run("d-logs", func(t *testing.T) { w.checkLogsAfterSwitch(t, loggerLog, linesBefore, switchLine) })

	// (e) Removed through netshim, with the network config they were set
	// up with; nothing left.
	w.teardownAndAudit(t, w.netshim.CRI(), "netshim", before)
}

func mustOut(bin string, args ...string) string {
	out, err := harness.RunCmd(bin, args...)
	if err != nil {
		return fmt.Sprintf("(%s %s: %v)", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return out
}

// waitRunning waits until both pods run on the runtime and kubelet says
// so, and the logger has written a few lines.
func (w *world) waitRunning(c *harness.CRI, runtime string) *snapshot {
	t := w.t
	var s *snapshot
	var why string
	start := time.Now()
	ok := harness.Eventually(runDeadline, func() bool {
		var err error
		if s, err = w.takeSnapshot(c, runtime); err != nil {
			why = err.Error()
			return false
		}
		var up bool
		if up, why = s.running(); !up {
			return false
		}
		// Lines to carry over: 2 s of them.
		out, err := w.kubeletLog(loggerPod, loggerCtr)
		if n := len(lineNumbers(strings.Split(out, "\n"))); err != nil || n < 10 {
			why = fmt.Sprintf("the logger has %d lines through kubelet (err %v)", n, err)
			return false
		}
		return true
	})
	if !ok {
		t.Fatalf("(a) the pods did not run on %s within %s: %s\n%s", runtime, runDeadline, why, w.tails())
	}
	t.Logf("(a) both pods run on %s after %s", runtime, time.Since(start).Round(time.Second))
	return s
}

// checkServing: web answers on its pod IP, and on the hostPort through
// 127.0.0.1 and through the bridge's address (portmap's DNAT).
func (w *world) checkServing(t *testing.T, s *snapshot) {
	ip := s.podIP(webPod)
	urls := []string{
		fmt.Sprintf("http://%s/index.html", net.JoinHostPort(ip, strconv.Itoa(webPort))),
		fmt.Sprintf("http://127.0.0.1:%d/index.html", hostPortNumber),
		fmt.Sprintf("http://%s/index.html", net.JoinHostPort(gatewayIP, strconv.Itoa(hostPortNumber))),
	}
	for _, u := range urls {
		var body string
		var err error
		// httpd may still be starting right after the pod runs.
		harness.Eventually(10*time.Second, func() bool {
			body, err = httpGet(plainClient, u)
			return err == nil
		})
		switch {
		case err != nil:
			t.Errorf("%s: %v", s.runtime, err)
		case strings.TrimSpace(body) != token:
			t.Errorf("%s: GET %s: %q, want %q", s.runtime, u, body, token)
		}
	}
}

// checkLogsOnCRIDockerd: with cri-dockerd, the log at kubelet's path is a
// symlink to Docker's json log, and kubelet reads it. It returns how many
// numbered lines kubelet read.
func (w *world) checkLogsOnCRIDockerd(t *testing.T, logPath string) int {
	if logPath == "" {
		t.Fatal("cri-dockerd reports no log path for the logger")
	}
	if fi, err := os.Lstat(logPath); err != nil {
		t.Errorf("the logger's log %s: %v", logPath, err)
	} else if fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the logger's log %s is %v, not the symlink to Docker's json log cri-dockerd makes", logPath, fi.Mode())
	} else {
		target, _ := os.Readlink(logPath)
		t.Logf("%s -> %s", logPath, target)
	}
	out, err := w.kubeletLog(loggerPod, loggerCtr)
	if err != nil {
		t.Fatal(err)
	}
	nums := lineNumbers(strings.Split(out, "\n"))
	if err := checkNumbering(nums, 10); err != nil {
		t.Errorf("the logger's log through kubelet: %v", err)
	}
	return len(nums)
}

// lastDockerLine is the number of the logger's last line in Docker's own
// log (docker logs), 0 if it has none.
func (w *world) lastDockerLine(id string) int {
	out, err := w.dockerd.Docker("logs", "--tail", "1", id)
	if err != nil {
		w.t.Fatalf("docker logs %s: %v: %s", short(id), err, out)
	}
	nums := lineNumbers(strings.Split(strings.TrimSpace(out), "\n"))
	if len(nums) == 0 {
		return 0
	}
	return nums[len(nums)-1]
}

// watchAdopted watches the pods through netshim for watchFor: kubelet
// lists them again, and no sandbox or container goes, comes, changes
// state or attempt, and the engine gets no new container. It returns the
// last snapshot, or nil after a failure (reported).
func (w *world) watchAdopted(t *testing.T, before *snapshot) *snapshot {
	c := w.netshim.CRI()
	var last *snapshot
	var lastErr error
	// kubelet lists the pods again (through netshim) first.
	if !harness.Eventually(kubeletSeesPods, func() bool {
		last, lastErr = w.takeSnapshot(c, "netshim")
		if lastErr != nil {
			return false
		}
		up, why := last.running()
		if !up {
			lastErr = errors.New(why)
		}
		return up
	}) {
		t.Errorf("(d) within %s of kubelet's restart, the pods are not all running and listed by kubelet through netshim: %v", kubeletSeesPods, lastErr)
		if last != nil {
			w.writeArtifact("netshim-answers.json", last.dump())
			t.Errorf("(d) %s", setDiff(before, last))
		}
		return nil
	}
	end := time.Now().Add(watchFor)
	looks := 0
	for {
		looks++
		if d := setDiff(before, last); d != "" {
			t.Errorf("(d) after %d looks through netshim: %s", looks, d)
			w.writeArtifact("netshim-answers.json", last.dump())
			return nil
		}
		if !w.kubelet.Running() {
			t.Errorf("(d) kubelet exited")
			return nil
		}
		if time.Now().After(end) {
			break
		}
		time.Sleep(time.Second)
		if last, lastErr = w.takeSnapshot(c, "netshim"); lastErr != nil {
			t.Errorf("(d) %v", lastErr)
			return nil
		}
	}
	t.Logf("(d) %d looks over %s through netshim: same sandboxes, containers, states and attempts; no new container in the engine", looks, watchFor)
	return last
}

// setDiff says how the sets of sandboxes and containers, their states
// and attempts, and the engine's containers changed; "" if they did not.
func setDiff(before, after *snapshot) string {
	var out []string
	for id, sb := range before.sandboxes {
		a, ok := after.sandboxes[id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("sandbox %s (%s) is gone", short(id), sb.GetMetadata().GetName()))
		case a.State != sb.State || a.GetMetadata().GetAttempt() != sb.GetMetadata().GetAttempt():
			out = append(out, fmt.Sprintf("sandbox %s: %s attempt %d -> %s attempt %d", short(id),
				sb.State, sb.GetMetadata().GetAttempt(), a.State, a.GetMetadata().GetAttempt()))
		}
	}
	for id, sb := range after.sandboxes {
		if before.sandboxes[id] == nil {
			out = append(out, fmt.Sprintf("new sandbox %s (%s attempt %d, %s)", short(id), sb.GetMetadata().GetName(), sb.GetMetadata().GetAttempt(), sb.State))
		}
	}
	for id, c := range before.containers {
		a, ok := after.containers[id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("container %s (%s) is gone", short(id), c.GetMetadata().GetName()))
		case a.State != c.State || a.GetMetadata().GetAttempt() != c.GetMetadata().GetAttempt():
			out = append(out, fmt.Sprintf("container %s: %s attempt %d -> %s attempt %d", short(id),
				c.State, c.GetMetadata().GetAttempt(), a.State, a.GetMetadata().GetAttempt()))
		}
	}
	for id, c := range after.containers {
		if before.containers[id] == nil {
			out = append(out, fmt.Sprintf("new container %s (%s attempt %d, %s)", short(id), c.GetMetadata().GetName(), c.GetMetadata().GetAttempt(), c.State))
		}
	}
	if !slices.Equal(before.dockerIDs, after.dockerIDs) {
		var added, gone []string
		for _, id := range after.dockerIDs {
			if !slices.Contains(before.dockerIDs, id) {
				added = append(added, short(id))
			}
		}
		for _, id := range before.dockerIDs {
			if !slices.Contains(after.dockerIDs, id) {
				gone = append(gone, short(id))
			}
		}
		out = append(out, fmt.Sprintf("the engine's containers changed: new %v, gone %v", added, gone))
	}
	return strings.Join(out, "; ")
}

// compareSnapshots: netshim's ListPodSandbox, ListContainers,
// PodSandboxStatus and ContainerStatus answers about the adopted pods are
// cri-dockerd's, field by field (compareRules lists every exception and
// why).
// sortedMounts is a copy of a container status with its mounts sorted by
// container path: cri-dockerd lists them in Docker's inspect order, which
// comes from a map and changes from call to call.
func sortedMounts(st *runtimeapi.ContainerStatus) *runtimeapi.ContainerStatus {
	if st == nil {
		return nil
	}
	c := proto.Clone(st).(*runtimeapi.ContainerStatus)
	slices.SortFunc(c.Mounts, func(a, b *runtimeapi.Mount) int { return strings.Compare(a.ContainerPath, b.ContainerPath) })
	return c
}

func compareSnapshots(t *testing.T, before, after *snapshot) {
	var extras []string
	check := func(what, id string, want, got proto.Message) {
		if got == nil || !got.ProtoReflect().IsValid() {
			t.Errorf("%s %s: netshim has none", what, short(id))
			return
		}
		diffs, extra := fieldDiffs(want, got, compareRules)
		for _, d := range diffs {
			t.Errorf("%s %s: %s", what, short(id), d)
		}
		for _, e := range extra {
			extras = append(extras, what+"."+e)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(before.sandboxes)) {
		check("ListPodSandbox item", id, before.sandboxes[id], after.sandboxes[id])
		check("PodSandboxStatus", id, before.sandboxStatus[id], after.sandboxStatus[id])
	}
	for _, id := range slices.Sorted(maps.Keys(before.containers)) {
		check("ListContainers item", id, before.containers[id], after.containers[id])
		check("ContainerStatus", id, sortedMounts(before.containerStatus[id]), sortedMounts(after.containerStatus[id]))
	}
	slices.Sort(extras)
	extras = slices.Compact(extras)
	if len(extras) > 0 {
		t.Logf("fields netshim fills that cri-dockerd v0.4.3 cannot or does not (not compared): %s", strings.Join(extras, ", "))
	}
	for _, pod := range []string{webPod, loggerPod} {
		if a, b := before.podIP(pod), after.podIP(pod); a != b {
			t.Errorf("%s: pod IP %s on cri-dockerd, %s on netshim", pod, a, b)
		}
	}
}

// compareKubelet: kubelet, restarted on netshim, reports the same
// containers (ids), still running, with the same restartCount.
func compareKubelet(t *testing.T, before, after *snapshot) {
	for _, pod := range []string{webPod, loggerPod} {
		name := mirrorName(pod)
		for ctr, b := range before.kubelet[name] {
			a, ok := after.kubelet[name][ctr]
			switch {
			case !ok:
				t.Errorf("kubelet on netshim does not report %s/%s", name, ctr)
			case a.ContainerID != b.ContainerID:
				t.Errorf("%s/%s: kubelet's containerID %s on cri-dockerd, %s on netshim", name, ctr, b.ContainerID, a.ContainerID)
			case a.RestartCount != b.RestartCount:
				t.Errorf("%s/%s: restartCount %d on cri-dockerd, %d on netshim", name, ctr, b.RestartCount, a.RestartCount)
			case a.State.Running == nil:
				t.Errorf("%s/%s: kubelet on netshim reports %v", name, ctr, a)
			case a.State.Running.StartedAt != b.State.Running.StartedAt:
				t.Errorf("%s/%s: started at %s on cri-dockerd, %s on netshim", name, ctr, b.State.Running.StartedAt, a.State.Running.StartedAt)
			default:
				t.Logf("%s/%s: %v (kubelet's /pods, same as on cri-dockerd)", name, ctr, a)
			}
		}
	}
}

// checkLogsAfterSwitch: the log at kubelet's path is now a regular file in
// CRI format, holding the lines from before the switch and new ones, with
// none lost or doubled; kubelet's log reads show the same.
func (w *world) checkLogsAfterSwitch(t *testing.T, logPath string, linesBefore, switchLine int) {
	want := max(linesBefore, switchLine) + 25 // 5 s of lines after the switch
	var nums []int
	var err error
	harness.Eventually(newLinesWithin, func() bool {
		nums, err = readCRILogNumbers(logPath)
		return err == nil && len(nums) > 0 && nums[len(nums)-1] >= want
	})
	switch {
	case err != nil:
		t.Errorf("kubelet's log path %s: %v", logPath, err)
	default:
		if err := checkNumbering(nums, want); err != nil {
			t.Errorf("kubelet's log path %s: %v (kubelet read %d lines before the switch; Docker was at line %d when cri-dockerd stopped)",
				logPath, err, linesBefore, switchLine)
		} else {
			t.Logf("%s: regular file, CRI format, lines 1..%d (line %d when cri-dockerd stopped)", logPath, nums[len(nums)-1], switchLine)
		}
	}
	out, err := w.kubeletLog(loggerPod, loggerCtr)
	if err != nil {
		t.Errorf("kubelet's log of the logger: %v", err)
		return
	}
	if err := checkNumbering(lineNumbers(strings.Split(out, "\n")), want); err != nil {
		t.Errorf("kubelet's log of the logger (kubectl logs): %v", err)
	}
}

// readCRILogNumbers reads the numbered lines of a CRI-format log file,
// which must be a regular file (not cri-dockerd's symlink any more).
func readCRILogNumbers(path string) ([]int, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		target, _ := os.Readlink(path)
		return nil, fmt.Errorf("is %v (-> %s), not a regular file", fi.Mode(), target)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	entries, err := parseCRILog(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var texts []string
	for _, e := range entries {
		if e.stream == "stdout" {
			texts = append(texts, e.text)
		}
	}
	return lineNumbers(texts), nil
}

// teardownAndAudit removes the manifests, waits until kubelet has torn
// the pods down through the runtime behind c, and audits the node: no
// container in the engine, no IP held, no veth on the bridge, no portmap
// or firewall rule, no checkpoint (netshim's nor cri-dockerd's), no
// cached CNI result.
func (w *world) teardownAndAudit(t *testing.T, c *harness.CRI, runtime string, before *snapshot) {
	w.removeManifests()
	start := time.Now()
	var left *snapshot
	var err error
	if !harness.Eventually(teardownDeadline, func() bool {
		left, err = w.takeSnapshot(c, runtime)
		return err == nil && len(left.sandboxes) == 0 && len(left.containers) == 0 && len(left.kubelet) == 0
	}) {
		if err != nil {
			t.Fatalf("(e) %s after removing the manifests: %v\n%s", teardownDeadline, err, w.tails())
		}
		t.Fatalf("(e) %s after removing the manifests, %d sandbox(es) and %d container(s) are left, kubelet lists %d pod(s): %s\n%s",
			teardownDeadline, len(left.sandboxes), len(left.containers), len(left.kubelet), setDiff(&snapshot{}, left), w.tails())
	}
	t.Logf("(e) manifests removed: kubelet tore the pods down through %s in %s", runtime, time.Since(start).Round(time.Second))
	t.Run("e-leak-audit", func(t *testing.T) { w.audit(t, before) })
}

func (w *world) audit(t *testing.T, before *snapshot) {
	if ids := lines(t, "the engine's containers")(w.dockerd.Docker("ps", "-a", "-q")); len(ids) > 0 {
		t.Errorf("containers left in the private dockerd: %v", ids)
	}
	var ips []string
	for _, pod := range []string{webPod, loggerPod} {
		ips = append(ips, before.podIP(pod))
	}
	store := filepath.Join(w.ipamDir, networkName)
	if held := dirEntries(t, store, func(name string) bool { return net.ParseIP(name) != nil }); len(held) > 0 {
		t.Errorf("host-local (%s) still holds %v (the pods had %v)", store, held, ips)
	}
	if veths := lines(t, "veths")(harness.RunCmd("ip", "-o", "link", "show", "master", bridgeName)); len(veths) > 0 {
		t.Errorf("interfaces left on %s: %v", bridgeName, veths)
	}
	rules, err := harness.CNIRulesLeft(networkName, subnetCIDR)
	if err != nil {
		t.Error(err)
	}
	for _, r := range rules {
		t.Errorf("iptables rule left: %s", r)
	}
	dirs := []string{filepath.Join(w.criDockerdRoot, "sandbox")}
	if w.netshim != nil {
		dirs = append(dirs, filepath.Join(w.netshim.RootDir, "sandbox"))
	}
	for _, d := range dirs {
		if cps := dirEntries(t, d, func(string) bool { return true }); len(cps) > 0 {
			t.Errorf("checkpoints left in %s: %v", d, cps)
		}
	}
	results := filepath.Join(w.cacheDir, "results")
	if cached := dirEntries(t, results, func(string) bool { return true }); len(cached) > 0 {
		t.Errorf("cached CNI results left in %s: %v", results, cached)
	}
	if w.cfg.leakAudit != "" {
		w.runLeakAudit(t)
	}
	if !t.Failed() {
		t.Logf("(e) leak audit clean: no container, held IP (%v released), veth, portmap/firewall rule, checkpoint or cached CNI result left", ips)
	}
}

// lines takes a listing command's output and error and returns its lines
// (none: nothing left); a failed listing fails the test.
func lines(t *testing.T, what string) func(string, error) []string {
	return func(out string, err error) []string {
		if err != nil {
			t.Errorf("listing %s: %v: %s", what, err, out)
			return nil
		}
		return strings.FieldsFunc(strings.TrimSpace(out), func(r rune) bool { return r == '\n' })
	}
}

// dirEntries lists the entries of dir that keep says count; a missing
// dir holds none.
func dirEntries(t *testing.T, dir string, keep func(string) bool) []string {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Errorf("reading %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		if keep(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// runLeakAudit runs test/e2e/leak-audit.sh on the world's directories and
// engine, as the other suites do; the host-wide iptables check is left to
// CNIRulesLeft above (other runs' leftovers would count), and containers
// to the engine check above (cri-dockerd's carry no netshim label).
func (w *world) runLeakAudit(t *testing.T) {
	args := []string{"--no-defaults", "--ipam-dir", w.ipamDir, "--cache-dir", w.cacheDir,
		"--root-dir", w.criDockerdRoot, "--bridge", bridgeName, "--skip", "iptables", "--skip", "containers"}
	if w.netshim != nil {
		args = append(args, "--root-dir", w.netshim.RootDir)
	}
	cmd := exec.Command(w.cfg.leakAudit, args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+w.dockerd.Endpoint())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %v\n%s", w.cfg.leakAudit, err, out)
	} else {
		t.Logf("leak-audit.sh:\n%s", out)
	}
}
