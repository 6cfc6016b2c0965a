//go:build cluster

package e2ecluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/netshim/netshim/test/harness"
)

// hostSnapshot is what the host held before the world started, for the
// audit after it went.
type hostSnapshot struct {
	netns       map[string]bool
	podLogsDir  bool
	cgroups     map[string]bool // kubepods cgroups that existed
	clusterRule []string        // iptables lines naming the cluster CIDR or bridge
}

// clusterPrefix is the text every address of the cluster CIDR starts with.
var clusterPrefix = func() string {
	_, n, err := net.ParseCIDR(clusterCIDR)
	if err != nil {
		panic(err)
	}
	// 10.177.0.0/16 -> "10.177."
	parts := strings.Split(n.IP.String(), ".")
	return strings.Join(parts[:2], ".") + "."
}()

func netnsNames() map[string]bool {
	m := map[string]bool{}
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		m[e.Name()] = true
	}
	return m
}

func kubepodsCgroups() map[string]bool {
	m := map[string]bool{}
	for _, name := range harness.KubeletCgroupNames {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", name))
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", name)); err == nil {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", name))
		}
		for _, d := range dirs {
			m[d] = true
		}
	}
	return m
}

// clusterRules are the iptables and ip6tables lines that name the cluster
// CIDR or the bridge.
func clusterRules() []string {
	var lines []string
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out, err := harness.RunCmd(cmd)
		if err != nil {
			lines = append(lines, fmt.Sprintf("(%s failed: %v)", cmd, err))
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, clusterPrefix) || strings.Contains(l, bridge) {
				lines = append(lines, cmd+": "+l)
			}
		}
	}
	return lines
}

func snapshotHost() hostSnapshot {
	_, err := os.Stat(harness.DefaultPodLogsDir)
	return hostSnapshot{
		netns:       netnsNames(),
		podLogsDir:  err == nil,
		cgroups:     kubepodsCgroups(),
		clusterRule: clusterRules(),
	}
}

// auditHost checks, after the teardown, that the run left nothing on the
// host: bridge, iptables rules, network namespaces, mounts, processes,
// cgroups, pod logs, temp dir, state file.
func (w *world) auditHost() []string {
	if w == nil || w.dir == "" {
		return nil
	}
	var leaks []string
	add := func(format string, args ...any) { leaks = append(leaks, fmt.Sprintf(format, args...)) }
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err == nil {
		add("bridge %s is still there", bridge)
	}
	if has, err := hasNodeIP(); err != nil || has {
		add("the node address %s is still on lo (%v)", nodeIP, err)
	}
	before := map[string]bool{}
	for _, l := range w.before.clusterRule {
		before[l] = true
	}
	for _, l := range clusterRules() {
		if !before[l] {
			add("iptables rule left: %s", l)
		}
	}
	for n := range netnsNames() {
		if !w.before.netns[n] {
			add("network namespace /var/run/netns/%s left", n)
		}
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, w.dir) {
				add("mount left: %s", l)
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmd), w.dir) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
			continue // a zombie: PID 1 here does not reap
		}
		add("process left: %s %s", filepath.Base(filepath.Dir(p)), strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	for cg := range kubepodsCgroups() {
		if !w.before.cgroups[cg] {
			add("cgroup %s left", cg)
		}
	}
	if entries, err := os.ReadDir(w.podLogs); err == nil {
		if !w.before.podLogsDir {
			add("%s did not exist before and is still there", w.podLogs)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), nsPrefix) {
				add("pod logs left: %s", filepath.Join(w.podLogs, e.Name()))
			}
		}
	}
	if _, err := os.Stat(w.dir); err == nil {
		add("temp dir %s is still there", w.dir)
	}
	if w.guard == nil {
		return leaks
	}
	if p := w.guard.StatePath(); p != "" {
		if _, err := os.Stat(p); err == nil {
			add("state file %s is still there (something was not restored)", p)
		}
	}
	return leaks
}
