// Command guest is the test program of `make e2e-vm` that runs inside the VM
// node (test/vmnode boots it; hack/vm-image.sh makes the node's image). The
// node's netshim-vmtest.service starts it at every boot from the run's input
// disk, mounted at /mnt/nsin; it walks the node operator's path (README, "Run
// it on a node") and checks what a node of 2026 shows: cgroup v2, systemd as
// PID 1, Docker's systemd cgroup driver, kubelet v1.37 with its defaults.
//
// A run spans several boots: the program keeps its state (the phase reached,
// the counts, what it must find again after a reboot) in stateFile, reboots
// the node itself, and goes on where it stopped when systemd starts it
// again. Every check prints one line, "PASS name (took)" or "FAIL name:
// why", on the results port (a virtio-serial port the host reads), on the
// console and in /mnt/nsout/results.log; the last line is "vm: done: N
// passed, N failed" (or "vm: aborted: ..."), after which the node powers off.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	inDir       = "/mnt/nsin"
	outDir      = "/mnt/nsout"
	stateDir    = "/var/lib/netshim-vmtest"
	stateFile   = stateDir + "/state.json"
	resultsPort = "/dev/virtio-ports/netshim.results"
)

// state is what survives a reboot.
type state struct {
	// Phase is the next phase to run (phases, by name).
	Phase  string `json:"phase"`
	Boot   int    `json:"boot"`
	Passed int    `json:"passed"`
	Failed int    `json:"failed"`
	// Before is what the node ran before the last reboot: each static
	// pod's sandbox id and IP.
	Before map[string]podRecord `json:"before,omitempty"`
	// Started is when the first boot's program started.
	Started time.Time `json:"started"`
}

type podRecord struct {
	SandboxID string `json:"sandboxID"`
	IP        string `json:"ip"`
}

// out writes every line to the results port, the console and the results file.
type out struct {
	ws []io.Writer
}

func (o *out) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(line, "\n") {
		line += "\n"
	}
	for _, w := range o.ws {
		_, _ = io.WriteString(w, line)
		if f, ok := w.(*os.File); ok {
			_ = f.Sync()
		}
	}
}

func openOut() *out {
	o := &out{ws: []io.Writer{os.Stdout}}
	// The port appears once udev ran; the unit starts after udev settled.
	for i := 0; i < 30; i++ {
		if f, err := os.OpenFile(resultsPort, os.O_WRONLY, 0); err == nil {
			o.ws = append(o.ws, f)
			break
		}
		time.Sleep(time.Second)
	}
	if f, err := os.OpenFile(filepath.Join(outDir, "results.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
		o.ws = append(o.ws, f)
	}
	return o
}

func loadState() (*state, error) {
	b, err := os.ReadFile(stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return &state{Phase: phases[0].name, Started: time.Now()}, nil
	}
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", stateFile, err)
	}
	return &s, nil
}

func (s *state) save() error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := stateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, stateFile); err != nil {
		return err
	}
	return syncFS()
}

func syncFS() error { return exec.Command("sync").Run() }

// t is one run of the program: the state, the output, the check counter.
type t struct {
	s   *state
	o   *out
	env *env
}

// check runs one named check and prints its line.
func (r *t) check(name string, fn func() error) bool {
	start := time.Now()
	err := fn()
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		r.s.Failed++
		r.o.printf("FAIL %s: %s (after %s)", name, oneLine(err.Error()), took)
		return false
	}
	r.s.Passed++
	r.o.printf("PASS %s (%s)", name, took)
	return true
}

// must runs a check whose failure makes the rest meaningless.
func (r *t) must(name string, fn func() error) {
	if !r.check(name, fn) {
		panic(abort{name})
	}
}

type abort struct{ check string }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// phase is one part of the run; a phase that reboots the node returns
// reboot=true and the next phase runs at the next boot.
type phase struct {
	name string
	run  func(r *t) (reboot bool)
}

func main() {
	o := openOut()
	s, err := loadState()
	if err != nil {
		o.printf("vm: aborted: reading the state: %v", err)
		finish(o, nil)
		return
	}
	s.Boot++
	o.printf("vm: boot %d, phase %s, %s since the run started", s.Boot, s.Phase, time.Since(s.Started).Round(time.Second))
	r := &t{s: s, o: o, env: newEnv()}
	for i, p := range phases {
		if p.name != s.Phase {
			continue
		}
		for _, p := range phases[i:] {
			s.Phase = p.name
			if err := s.save(); err != nil {
				o.printf("vm: aborted: saving the state: %v", err)
				finish(o, s)
				return
			}
			o.printf("vm: phase %s", p.name)
			reboot, aborted := runPhase(r, p)
			if aborted != "" {
				o.printf("vm: aborted: check %s failed, the rest cannot run", aborted)
				finish(o, s)
				return
			}
			if reboot {
				s.Phase = nextPhase(p.name)
				if err := s.save(); err != nil {
					o.printf("vm: aborted: saving the state: %v", err)
					finish(o, s)
					return
				}
				o.printf("vm: rebooting the node (systemctl reboot)")
				_ = syncFS()
				if err := exec.Command("systemctl", "reboot").Run(); err != nil {
					o.printf("vm: aborted: systemctl reboot: %v", err)
					finish(o, s)
				}
				return
			}
		}
		finish(o, s)
		return
	}
	o.printf("vm: aborted: unknown phase %q", s.Phase)
	finish(o, s)
}

func runPhase(r *t, p phase) (reboot bool, aborted string) {
	defer func() {
		if v := recover(); v != nil {
			a, ok := v.(abort)
			if !ok {
				r.s.Failed++
				r.o.printf("FAIL %s: panic: %v", p.name, v)
				aborted = p.name
				return
			}
			aborted = a.check
		}
	}()
	return p.run(r), ""
}

func nextPhase(name string) string {
	for i, p := range phases {
		if p.name == name && i+1 < len(phases) {
			return phases[i+1].name
		}
	}
	return "done"
}

// finish saves the node's logs on the output disk, prints the last line
// and powers the node off (the host waits for qemu to exit).
func finish(o *out, s *state) {
	collectLogs(o)
	if s == nil {
		o.printf("vm: done: 0 passed, 1 failed")
	} else {
		s.Phase = "done"
		_ = s.save()
		o.printf("vm: done: %d passed, %d failed (%s)", s.Passed, s.Failed, time.Since(s.Started).Round(time.Second))
	}
	_ = syncFS()
	_ = exec.Command("systemctl", "poweroff").Run()
}

// collectLogs copies what a person needs to see why a check failed.
func collectLogs(o *out) {
	dir := filepath.Join(outDir, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		o.printf("vm: no logs: %v", err)
		return
	}
	cmds := map[string][]string{
		"journal.txt":       {"journalctl", "--no-pager", "-o", "short-precise"},
		"netshim.txt":       {"journalctl", "--no-pager", "-o", "short-precise", "-u", "netshim.service", "-u", "netshim.socket"},
		"kubelet.txt":       {"journalctl", "--no-pager", "-o", "short-precise", "-u", "kubelet.service"},
		"docker.txt":        {"journalctl", "--no-pager", "-o", "short-precise", "-u", "docker.service", "-u", "containerd.service"},
		"docker-ps.txt":     {"docker", "ps", "-a", "--no-trunc"},
		"systemctl.txt":     {"systemctl", "status", "--no-pager", "netshim.socket", "netshim.service", "kubelet.service", "docker.service"},
		"cgroups.txt":       {"systemd-cgls", "--no-pager", "/kubepods.slice"},
		"netshim-files.txt": {"sh", "-c", "ls -laR /var/lib/netshim /run/netshim /var/lib/cni /etc/cni/net.d 2>&1"},
	}
	for name, argv := range cmds {
		b, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	// kubelet's view, for the stats and status checks.
	var raw json.RawMessage
	for _, path := range []string{"/stats/summary", "/pods"} {
		if err := newEnv().kubeletGet(path, &raw); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "kubelet"+strings.ReplaceAll(path, "/", "_")+".json"), raw, 0o644)
		}
	}
	for _, f := range []string{stateFile, kubeletConfigPath, "/etc/default/netshim", "/etc/docker/daemon.json"} {
		if b, err := os.ReadFile(f); err == nil {
			_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(f, "/"), "/", "_")), b, 0o644)
		}
	}
}
