package dockerservice

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/procutil"
)

// orphanWait bounds the wait for killed plugin processes to go.
const orphanWait = 10 * time.Second

// killOrphanedPlugins kills, at start-up, the CNI plugins a netshim that
// died (SIGKILL, OOM) left running for its sandboxes. Such a plugin
// carries on with its ADD after its parent is gone; were it to finish
// after this netshim's start-up teardown ran the DEL of the same sandbox,
// what it added last (a portmap rule, an IP) would be held with nobody
// left to release it. Killed, it leaves a half-done ADD, which the DEL
// (from the attachment ledger netshim wrote before the ADD) undoes. The
// plugins are found by CNI_CONTAINERID, a sandbox of this netshim's
// checkpoints, and killed by process group (netshim starts each plugin as
// a group leader, with its IPAM plugin inside). It runs before anything is
// served, so none of them is this netshim's.
func (ds *DockerService) killOrphanedPlugins() {
	ids := ds.pods.KnownIDs()
	if len(ids) == 0 {
		return
	}
	procRoot := ds.containers.procRoot
	pids, err := procutil.PidsWithEnv(procRoot, "CNI_CONTAINERID", ids)
	if err != nil {
		klog.ErrorS(err, "Failed to look for CNI plugins a previous netshim left running")
		return
	}
	for pid, id := range pids {
		target := pid
		// The plugin's whole group at once, it and its IPAM child (which
		// carries CNI_CONTAINERID too), whichever of the two comes first
		// here: a child killed alone would let the plugin run on.
		if pgid, err := unix.Getpgid(pid); err == nil {
			if _, leader := pids[pgid]; leader {
				target = -pgid
			}
		}
		if err := unix.Kill(target, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			klog.ErrorS(err, "Failed to kill a CNI plugin a previous netshim left running", "pid", pid, "podSandboxID", id)
			continue
		}
		klog.InfoS("Killed a CNI plugin a previous netshim left running; the sandbox's teardown undoes what it did", "pid", pid, "podSandboxID", id)
	}
	deadline := time.Now().Add(orphanWait)
	for pid := range pids {
		for processLives(procRoot, pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// processLives says whether pid is a process that has not exited (a zombie
// has: its parent just has not reaped it).
func processLives(procRoot string, pid int) bool {
	stat, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
		}
	}
	return true
}
