package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Bounds of the polls: an emulated node is 10-30x slower than a host.
const (
	podsUpTimeout   = 12 * time.Minute
	unitTimeout     = 5 * time.Minute
	statsTimeout    = 4 * time.Minute
	gcTimeout       = 6 * time.Minute
	watchdogTimeout = 6 * time.Minute
)

const criStatsGate = "PodAndContainerStatsFromCRI"

// phases of a run, in order. A phase that returns true reboots the node.
var phases = []phase{
	{"install", phaseInstall},
	{"after-reboot-default", func(r *t) bool { return phaseAfterReboot(r, "default") }},
	{"pauseless", phasePauseless},
	{"after-reboot-pauseless", func(r *t) bool { return phaseAfterReboot(r, "pauseless") }},
}

func phaseInstall(r *t) bool {
	r.must("node-is-cgroup-v2-systemd", checkNode)
	r.must("dpkg-install-enables-units", installPackage)
	r.must("test-images-imported", importImages)
	r.must("kubelet-installed", func() error {
		if err := writeCNIConfig(); err != nil {
			return err
		}
		if err := writeManifests(manifestDir); err != nil {
			return err
		}
		return installKubelet(nil)
	})
	r.must("netshim-socket-listens", func() error {
		if _, err := run(time.Minute, "systemctl", "start", "netshim.socket"); err != nil {
			return err
		}
		if err := wantProps("netshim.socket", map[string]string{"ActiveState": "active"}); err != nil {
			return err
		}
		return wantProps("netshim.service", map[string]string{"ActiveState": "inactive"})
	})
	r.must("socket-activation-at-kubelets-first-call", func() error {
		if _, err := run(time.Minute, "systemctl", "start", "kubelet.service"); err != nil {
			return err
		}
		return waitNetshimReady()
	})
	r.check("kubelet-cgroup-driver-systemd", checkKubeletSystemdDriver)
	modeChecks(r, "default", "docker")
	r.must("kubelet-cri-stats-gate", func() error { return setKubeletGates(map[string]bool{criStatsGate: true}) })
	r.check("default/stats-summary-cri-stats", func() error { return checkStats(r.env, runningPods, true) })
	restartChecks(r, "default", true)
	r.must("default/record-before-reboot", func() error { return record(r.s) })
	return true
}

// checkNode: the node is what the test claims (PID 1 systemd, cgroup v2,
// Docker with the systemd driver).
func checkNode() error {
	comm, err := readFile("/proc/1/comm")
	if err != nil || comm != "systemd" {
		return fmt.Errorf("PID 1 is %q (%v), want systemd", comm, err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		return fmt.Errorf("/sys/fs/cgroup is not cgroup v2: %w", err)
	}
	return poll(unitTimeout, 3*time.Second, func() error {
		out, err := run(time.Minute, "docker", "info", "--format", "{{.CgroupDriver}} {{.CgroupVersion}}")
		if err != nil {
			return err
		}
		if out != "systemd 2" {
			return fmt.Errorf("docker info: cgroup driver and version %q, want \"systemd 2\"", out)
		}
		return nil
	})
}

// waitNetshimReady: netshim.service, started by its socket, reached
// active through READY=1 (Type=notify) and says what it serves.
func waitNetshimReady() error {
	return poll(unitTimeout, 2*time.Second, func() error {
		p, err := unitProps("netshim.service", "ActiveState", "SubState", "Type", "StatusText", "TriggeredBy", "MainPID")
		if err != nil {
			return err
		}
		if p["ActiveState"] != "active" || p["SubState"] != "running" {
			return fmt.Errorf("netshim.service is %s/%s", p["ActiveState"], p["SubState"])
		}
		if p["Type"] != "notify" {
			return fmt.Errorf("netshim.service Type=%s, want notify", p["Type"])
		}
		if !strings.Contains(p["TriggeredBy"], "netshim.socket") {
			return fmt.Errorf("netshim.service TriggeredBy=%q, want netshim.socket", p["TriggeredBy"])
		}
		if p["StatusText"] == "" {
			return errors.New("netshim.service has no STATUS= text")
		}
		if _, err := runtimeStatus(); err != nil {
			return fmt.Errorf("CRI Status: %w", err)
		}
		return nil
	})
}

// checkKubeletSystemdDriver: kubelet took the systemd driver from the
// runtime and made its pod slices through systemd.
func checkKubeletSystemdDriver() error {
	return poll(unitTimeout, 3*time.Second, func() error {
		if _, err := os.Stat("/sys/fs/cgroup/kubepods.slice"); err != nil {
			return fmt.Errorf("no kubepods.slice (kubelet's systemd driver): %w", err)
		}
		if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
			return errors.New("kubelet made /sys/fs/cgroup/kubepods: the cgroupfs driver")
		}
		return nil
	})
}

// modeChecks: the pods under one sandbox mode ("docker": a pause container
// per pod; "pauseless": none).
func modeChecks(r *t, label, sandboxMode string) {
	r.must(label+"/static-pods-running", func() error { return waitPodsRunning(sandboxMode) })
	r.check(label+"/cgroup-v2-limits", checkCgroupLimits)
	r.check(label+"/stats-summary", func() error { return checkStats(r.env, runningPods, kubeletHasCRIStats()) })
	r.check(label+"/psi-in-stats", func() error { return checkPSI(r.env) })
	r.check(label+"/oom-killed", func() error { return checkOOM(r.env) })
	r.check(label+"/resize-applied-to-cgroup", checkResize)
}

// podView is one static pod as netshim reports it.
type podView struct {
	sandbox   *runtimeapi.PodSandbox
	container *runtimeapi.Container
}

// currentPods: for each named pod, its newest sandbox and that sandbox's
// newest container.
func currentPods(names []string) (map[string]podView, error) {
	sbs, err := sandboxes()
	if err != nil {
		return nil, err
	}
	cs, err := containers()
	if err != nil {
		return nil, err
	}
	out := map[string]podView{}
	for _, name := range names {
		var v podView
		for _, sb := range sbs {
			if sb.Metadata.GetName() == podName(name) && (v.sandbox == nil || sb.CreatedAt > v.sandbox.CreatedAt) {
				v.sandbox = sb
			}
		}
		if v.sandbox == nil {
			return nil, fmt.Errorf("no sandbox for pod %s", podName(name))
		}
		for _, c := range cs {
			if c.PodSandboxId == v.sandbox.Id && (v.container == nil || c.CreatedAt > v.container.CreatedAt) {
				v.container = c
			}
		}
		out[name] = v
	}
	return out, nil
}

func waitPodsRunning(sandboxMode string) error {
	return poll(podsUpTimeout, 5*time.Second, func() error {
		pods, err := currentPods(runningPods)
		if err != nil {
			return err
		}
		for name, v := range pods {
			if v.sandbox.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				return fmt.Errorf("pod %s: sandbox %s is %s", name, short(v.sandbox.Id), v.sandbox.State)
			}
			if v.container == nil || v.container.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				return fmt.Errorf("pod %s: container not running (%v)", name, v.container.GetState())
			}
			// The mode shows in Docker: a pause container (whose id is
			// the sandbox's) or none.
			pause := dockerHas(v.sandbox.Id)
			switch {
			case sandboxMode == "docker" && !pause:
				return fmt.Errorf("pod %s: no pause container in the docker mode", name)
			case sandboxMode == "pauseless" && pause:
				return fmt.Errorf("pod %s: a pause container in the pause-less mode", name)
			}
		}
		return nil
	})
}

// dockerHas says whether Docker has a container with this id.
func dockerHas(id string) bool {
	_, err := run(time.Minute, "docker", "inspect", "--type", "container", "--format", "{{.Id}}", id)
	return err == nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// containerCgroup is the cgroup v2 directory of a running container.
func containerCgroup(id string) (string, error) {
	pid, err := run(time.Minute, "docker", "inspect", "--format", "{{.State.Pid}}", id)
	if err != nil {
		return "", err
	}
	line, err := readFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(line, "0::")
	if !ok || strings.Contains(line, "\n") {
		return "", fmt.Errorf("/proc/%s/cgroup is not a cgroup v2 one: %q", pid, line)
	}
	return filepath.Join("/sys/fs/cgroup", rel), nil
}

func checkCgroupLimits() error {
	pods, err := currentPods(runningPods)
	if err != nil {
		return err
	}
	want := map[string]struct{ slice, cpuMax, memMax string }{
		"burstable":  {"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod", "50000 100000", "67108864"},
		"guaranteed": {"/sys/fs/cgroup/kubepods.slice/kubepods-pod", "25000 100000", "50331648"},
	}
	for name, w := range want {
		dir, err := containerCgroup(pods[name].container.Id)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(dir, w.slice) || !strings.HasSuffix(dir, "/docker-"+pods[name].container.Id+".scope") {
			return fmt.Errorf("pod %s: container cgroup %s, want docker-<id>.scope under %s*.slice", name, dir, w.slice)
		}
		if err := wantCgroupFile(dir, "cpu.max", w.cpuMax); err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		if err := wantCgroupFile(dir, "memory.max", w.memMax); err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
	}
	return nil
}

func wantCgroupFile(dir, file, want string) error {
	got, err := readFile(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s/%s = %q, want %q", dir, file, got, want)
	}
	return nil
}

// The parts of kubelet's /stats/summary the checks read.
type summary struct {
	Pods []struct {
		PodRef struct {
			Name string `json:"name"`
		} `json:"podRef"`
		CPU *struct {
			UsageCoreNanoSeconds uint64          `json:"usageCoreNanoSeconds"`
			PSI                  json.RawMessage `json:"psi"`
		} `json:"cpu"`
		Memory *struct {
			WorkingSetBytes uint64          `json:"workingSetBytes"`
			PSI             json.RawMessage `json:"psi"`
		} `json:"memory"`
		Network *struct {
			RxBytes uint64 `json:"rxBytes"`
			TxBytes uint64 `json:"txBytes"`
		} `json:"network"`
		Containers []struct {
			Name string `json:"name"`
			CPU  *struct {
				PSI json.RawMessage `json:"psi"`
			} `json:"cpu"`
			Rootfs *struct {
				UsedBytes uint64 `json:"usedBytes"`
			} `json:"rootfs"`
		} `json:"containers"`
	} `json:"pods"`
}

// kubeletHasCRIStats: kubelet's configuration (which outlives a reboot)
// turns the CRI stats gate on.
func kubeletHasCRIStats() bool {
	conf, _ := readFile(kubeletConfigPath)
	return strings.Contains(conf, criStatsGate+": true")
}

// checkStats: CPU, memory, rootfs and, with the CRI stats gate, network
// non-zero for each pod. Without the gate kubelet (1.37, Linux) takes a
// pod's network only from cAdvisor's figures for the sandbox's container,
// and cAdvisor has had no Docker support since kubelet 1.24: no runtime on
// Docker can give it (README, "Stats, events and RuntimeClass").
func checkStats(e *env, pods []string, network bool) error {
	return poll(statsTimeout, 5*time.Second, func() error {
		var s summary
		if err := e.kubeletGet("/stats/summary", &s); err != nil {
			return err
		}
		for _, name := range pods {
			found := false
			for _, p := range s.Pods {
				if p.PodRef.Name != podName(name) {
					continue
				}
				found = true
				var missing []string
				if p.CPU == nil || p.CPU.UsageCoreNanoSeconds == 0 {
					missing = append(missing, "cpu")
				}
				if p.Memory == nil || p.Memory.WorkingSetBytes == 0 {
					missing = append(missing, "memory")
				}
				if network && (p.Network == nil || p.Network.RxBytes+p.Network.TxBytes == 0) {
					missing = append(missing, "network")
				}
				rootfs := false
				for _, c := range p.Containers {
					if c.Name == "main" && c.Rootfs != nil && c.Rootfs.UsedBytes > 0 {
						rootfs = true
					}
				}
				if !rootfs {
					missing = append(missing, "rootfs")
				}
				if len(missing) > 0 {
					return fmt.Errorf("pod %s: no %s in /stats/summary", name, strings.Join(missing, ", "))
				}
			}
			if !found {
				return fmt.Errorf("pod %s not in /stats/summary", name)
			}
		}
		return nil
	})
}

// checkPSI: the kernel exposes pressure stall figures (psi=1), so the
// summary carries them for pods and containers.
func checkPSI(e *env) error {
	if _, err := os.Stat("/sys/fs/cgroup/kubepods.slice/cpu.pressure"); err != nil {
		return fmt.Errorf("the kernel exposes no PSI (the node boots with psi=1): %w", err)
	}
	return poll(statsTimeout, 5*time.Second, func() error {
		var s summary
		if err := e.kubeletGet("/stats/summary", &s); err != nil {
			return err
		}
		for _, name := range runningPods {
			ok := false
			for _, p := range s.Pods {
				if p.PodRef.Name != podName(name) {
					continue
				}
				if p.CPU == nil || !hasJSON(p.CPU.PSI) || p.Memory == nil || !hasJSON(p.Memory.PSI) {
					return fmt.Errorf("pod %s: no cpu/memory psi in /stats/summary", name)
				}
				for _, c := range p.Containers {
					if c.Name == "main" && c.CPU != nil && hasJSON(c.CPU.PSI) {
						ok = true
					}
				}
			}
			if !ok {
				return fmt.Errorf("pod %s: container main has no cpu psi in /stats/summary", name)
			}
		}
		return nil
	})
}

func hasJSON(m json.RawMessage) bool { return len(m) > 0 && string(m) != "null" && string(m) != "{}" }

// checkOOM: the container killed at its memory limit is OOMKilled, exit
// code 137, in netshim's answer and in kubelet's pod status.
func checkOOM(e *env) error {
	return poll(podsUpTimeout, 5*time.Second, func() error {
		pods, err := currentPods([]string{"oom"})
		if err != nil {
			return err
		}
		c := pods["oom"].container
		if c == nil {
			return errors.New("pod oom has no container yet")
		}
		st, err := containerStatus(c.Id)
		if err != nil {
			return err
		}
		s := st.Status
		if s.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("pod oom: container %s is %s", short(c.Id), s.State)
		}
		if s.Reason != "OOMKilled" || s.ExitCode != 137 {
			return fmt.Errorf("pod oom: CRI says reason %q, exit code %d; want OOMKilled, 137", s.Reason, s.ExitCode)
		}
		var list struct {
			Items []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Status struct {
					ContainerStatuses []struct {
						State struct {
							Terminated *struct {
								Reason   string `json:"reason"`
								ExitCode int    `json:"exitCode"`
							} `json:"terminated"`
						} `json:"state"`
					} `json:"containerStatuses"`
				} `json:"status"`
			} `json:"items"`
		}
		if err := e.kubeletGet("/pods", &list); err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Metadata.Name != podName("oom") {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if term := cs.State.Terminated; term != nil && term.Reason == "OOMKilled" && term.ExitCode == 137 {
					return nil
				}
			}
			return fmt.Errorf("kubelet's status of pod oom has no OOMKilled/137: %+v", p.Status.ContainerStatuses)
		}
		return errors.New("kubelet's /pods has no pod oom")
	})
}

// checkResize: an UpdateContainerResources as kubelet sends for an
// in-place resize reaches the running container's cgroup v2 files.
func checkResize() error {
	pods, err := currentPods([]string{"burstable"})
	if err != nil {
		return err
	}
	id := pods["burstable"].container.Id
	const mem = 96 << 20
	if err := updateResources(id, &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 30000, CpuShares: 102, MemoryLimitInBytes: mem,
	}); err != nil {
		return fmt.Errorf("UpdateContainerResources: %w", err)
	}
	dir, err := containerCgroup(id)
	if err != nil {
		return err
	}
	return poll(time.Minute, 2*time.Second, func() error {
		if err := wantCgroupFile(dir, "cpu.max", "30000 100000"); err != nil {
			return err
		}
		return wantCgroupFile(dir, "memory.max", strconv.Itoa(mem))
	})
}

// snapshot is what must not change when netshim restarts: every sandbox
// and container id of the running pods, and kubelet's restart counts.
func snapshot() (string, error) {
	pods, err := currentPods(runningPods)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, name := range runningPods {
		v := pods[name]
		if v.container == nil {
			return "", fmt.Errorf("pod %s has no container", name)
		}
		parts = append(parts, fmt.Sprintf("%s=%s/%s/%s/%d", name, short(v.sandbox.Id), v.sandbox.State, short(v.container.Id)+"/"+v.container.State.String(), v.container.Metadata.GetAttempt()))
	}
	return strings.Join(parts, " "), nil
}

// unchanged: the pods are the same ones, for a window of kubelet syncs.
func unchanged(before string) error {
	end := time.Now().Add(45 * time.Second)
	for time.Now().Before(end) {
		now, err := snapshot()
		if err != nil {
			return err
		}
		if now != before {
			return fmt.Errorf("pods changed: before %s, now %s", before, now)
		}
		time.Sleep(5 * time.Second)
	}
	return nil
}

func mainPID() (string, error) {
	p, err := unitProps("netshim.service", "MainPID")
	return p["MainPID"], err
}

// signalAndWaitNewPID sends netshim signal (systemctl kill) and waits for
// systemd to have started another netshim.
func signalAndWaitNewPID(signal string, timeout time.Duration) error {
	pid, err := mainPID()
	if err != nil {
		return err
	}
	if _, err := run(time.Minute, "systemctl", "kill", "-s", signal, "netshim.service"); err != nil {
		return err
	}
	return poll(timeout, 2*time.Second, func() error {
		now, err := mainPID()
		if err != nil {
			return err
		}
		if now == pid || now == "0" {
			return fmt.Errorf("netshim's main PID is %s (was %s)", now, pid)
		}
		return nil
	})
}

// restartChecks: systemctl restart, SIGKILL (Restart=always) and, once,
// the watchdog; pods run on through each.
func restartChecks(r *t, label string, watchdog bool) {
	r.check(label+"/systemctl-restart-keeps-pods", func() error {
		before, err := snapshot()
		if err != nil {
			return err
		}
		if _, err := run(unitTimeout, "systemctl", "restart", "netshim.service"); err != nil {
			return err
		}
		if err := waitNetshimReady(); err != nil {
			return err
		}
		return unchanged(before)
	})
	r.check(label+"/sigkill-restarted-by-systemd", func() error {
		before, err := snapshot()
		if err != nil {
			return err
		}
		if err := signalAndWaitNewPID("KILL", unitTimeout); err != nil {
			return err
		}
		if err := waitNetshimReady(); err != nil {
			return err
		}
		return unchanged(before)
	})
	if watchdog {
		r.check(label+"/watchdog-restarts-a-wedged-netshim", checkWatchdog)
	}
}

// checkWatchdog wedges netshim's index loop (SIGUSR2, which netshim takes as
// "wedge" only with --test-wedge-index-on-sigusr2) and waits for systemd's
// watchdog to kill and restart it.
func checkWatchdog() error {
	if err := setNetshimOpts("--test-wedge-index-on-sigusr2"); err != nil {
		return err
	}
	defer func() { _ = setNetshimOpts("") }()
	if err := waitNetshimReady(); err != nil {
		return err
	}
	before, err := snapshot()
	if err != nil {
		return err
	}
	since := time.Now().Format("2006-01-02 15:04:05")
	if err := signalAndWaitNewPID("USR2", watchdogTimeout); err != nil {
		return err
	}
	journal, err := run(time.Minute, "journalctl", "--no-pager", "-u", "netshim.service", "--since", since)
	if err != nil {
		return err
	}
	if !strings.Contains(journal, "Watchdog timeout") {
		return fmt.Errorf("netshim restarted, but systemd's journal shows no watchdog timeout: %s", tail(journal, 800))
	}
	if err := waitNetshimReady(); err != nil {
		return err
	}
	return unchanged(before)
}

// record keeps each static pod's sandbox and IP for after the reboot.
func record(s *state) error {
	pods, err := currentPods(append(runningPods, "oom"))
	if err != nil {
		return err
	}
	s.Before = map[string]podRecord{}
	for name, v := range pods {
		rec := podRecord{SandboxID: v.sandbox.Id}
		if v.sandbox.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			st, err := sandboxStatus(v.sandbox.Id)
			if err != nil {
				return err
			}
			rec.IP = st.Status.GetNetwork().GetIp()
			if rec.IP == "" {
				return fmt.Errorf("pod %s: a READY sandbox without an IP", name)
			}
		}
		s.Before[name] = rec
	}
	return s.save()
}

func phaseAfterReboot(r *t, label string) bool {
	r.must(label+"/units-back-after-reboot", func() error {
		for _, u := range []string{"docker.service", "netshim.socket", "kubelet.service"} {
			if err := poll(unitTimeout, 3*time.Second, func() error { return wantProps(u, map[string]string{"ActiveState": "active"}) }); err != nil {
				return err
			}
		}
		return waitNetshimReady()
	})
	// netshim starts at kubelet's first connection while Docker still
	// starts, and serves the handshake at once: kubelet's first call waits
	// instead of failing, so systemd never had to restart kubelet.
	r.check(label+"/kubelet-not-restarted-at-boot", func() error {
		return wantProps("kubelet.service", map[string]string{"NRestarts": "0"})
	})
	r.must(label+"/pods-back-with-new-sandboxes", func() error {
		return poll(podsUpTimeout, 5*time.Second, func() error {
			pods, err := currentPods(runningPods)
			if err != nil {
				return err
			}
			for name, v := range pods {
				if v.sandbox.Id == r.s.Before[name].SandboxID {
					return fmt.Errorf("pod %s: still the sandbox of before the reboot", name)
				}
				if v.sandbox.State != runtimeapi.PodSandboxState_SANDBOX_READY || v.container == nil ||
					v.container.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
					return fmt.Errorf("pod %s: not running yet", name)
				}
			}
			return nil
		})
	})
	r.check(label+"/old-sandboxes-leave-nothing", func() error { return checkOldGone(r.s) })
	r.check(label+"/old-ips-released", func() error { return checkIPs(r.s) })
	return false
}

// checkOldGone: the sandboxes of before the reboot are NOTREADY and hold
// nothing of the network (no libcni cache entry, no pinned namespace file),
// and once removed (RemovePodSandbox, as kubelet's garbage collection
// removes them; kubelet keeps a pod's last dead instance until a newer one
// dies, so the run does it itself) nothing of them is left: no container,
// no checkpoint, no file naming them.
func checkOldGone(s *state) error {
	return poll(gcTimeout, 10*time.Second, func() error {
		sbs, err := sandboxes()
		if err != nil {
			return err
		}
		listed := map[string]*runtimeapi.PodSandbox{}
		for _, sb := range sbs {
			listed[sb.Id] = sb
		}
		for name, rec := range s.Before {
			id := rec.SandboxID
			if sb, ok := listed[id]; ok {
				if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
					return fmt.Errorf("pod %s: sandbox %s of before the reboot is READY", name, short(id))
				}
				for _, dir := range []string{"/var/lib/cni", "/run/netshim"} {
					if left := filesNaming(dir, id); len(left) > 0 {
						return fmt.Errorf("pod %s: the NOTREADY sandbox %s of before the reboot still has %s", name, short(id), strings.Join(left, " "))
					}
				}
				if err := removeSandbox(id); err != nil {
					return fmt.Errorf("pod %s: RemovePodSandbox %s: %w", name, short(id), err)
				}
			}
			out, err := run(time.Minute, "docker", "ps", "-a", "-q", "--filter", "label=netshim.io/sandbox-id="+id)
			if err != nil {
				return err
			}
			if out != "" || dockerHas(id) {
				return fmt.Errorf("pod %s: containers of sandbox %s are left: %s", name, short(id), oneLine(out))
			}
			for _, dir := range []string{"/var/lib/netshim", "/run/netshim", "/var/lib/cni"} {
				if left := filesNaming(dir, id); len(left) > 0 {
					return fmt.Errorf("pod %s: files of sandbox %s are left: %s", name, short(id), strings.Join(left, " "))
				}
			}
		}
		return nil
	})
}

// filesNaming: the files under dir whose name or content names id.
func filesNaming(dir, id string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if strings.Contains(d.Name(), id) {
			out = append(out, path)
			return nil
		}
		if info, err := d.Info(); err == nil && info.Size() < 1<<16 {
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), id) {
				out = append(out, path)
			}
		}
		return nil
	})
	return out
}

// checkIPs: host-local holds exactly the IPs of the READY sandboxes.
func checkIPs(s *state) error {
	return poll(gcTimeout, 10*time.Second, func() error {
		sbs, err := sandboxes()
		if err != nil {
			return err
		}
		var want []string
		for _, sb := range sbs {
			if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				continue
			}
			st, err := sandboxStatus(sb.Id)
			if err != nil {
				return err
			}
			want = append(want, st.Status.GetNetwork().GetIp())
		}
		entries, err := os.ReadDir(filepath.Join("/var/lib/cni/networks", cniNetwork))
		if err != nil {
			return err
		}
		var got []string
		for _, e := range entries {
			if strings.Count(e.Name(), ".") == 3 {
				got = append(got, e.Name())
			}
		}
		sort.Strings(want)
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("host-local reserves %v, the READY sandboxes have %v (before the reboot: %v)", got, want, s.Before)
		}
		return nil
	})
}

func phasePauseless(r *t) bool {
	r.must("pauseless/wrapper-registered", registerWrapper)
	// netshim's default, auto, reads the engine's runtimes every 30 s:
	// no restart, no flag.
	r.must("pauseless/auto-picks-pauseless", func() error {
		return poll(2*time.Minute, 3*time.Second, func() error {
			if m, err := netshimMode(); err != nil || m != "pauseless" {
				return fmt.Errorf("netshim gives new pods mode %q (%v), want pauseless", m, err)
			}
			return nil
		})
	})
	r.must("pauseless/pods-recreated", recreatePods)
	modeChecks(r, "pauseless", "pauseless")
	restartChecks(r, "pauseless", false)
	r.must("pauseless/record-before-reboot", func() error { return record(r.s) })
	return true
}

// recreatePods takes the static pods away and brings them back, so that
// kubelet makes new sandboxes in netshim's new mode.
func recreatePods() error {
	if err := os.MkdirAll(parkedManifestDir, 0o755); err != nil {
		return err
	}
	// File by file: kubelet watches the directory itself.
	for name := range staticPods {
		if err := os.Rename(filepath.Join(manifestDir, name), filepath.Join(parkedManifestDir, name)); err != nil {
			return err
		}
	}
	if err := poll(podsUpTimeout, 5*time.Second, func() error {
		sbs, err := sandboxes()
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return fmt.Errorf("sandbox %s of pod %s still READY", short(sb.Id), sb.Metadata.GetName())
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for name := range staticPods {
		if err := os.Rename(filepath.Join(parkedManifestDir, name), filepath.Join(manifestDir, name)); err != nil {
			return err
		}
	}
	return nil
}
