//go:build soak

package soak

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/netshim/netshim/test/harness"
)

// cniHunt bounds the wait for a CNI plugin to be running when a plugin
// kill is due: with pods starting every second, one runs within moments.
const cniHunt = 30 * time.Second

// kill carries out the schedule, relative to start, until ctx ends. A
// killed netshim and a killed dockerd are started again at once (systemd
// restarts both on a node); the run fails, and its load stops, if one
// does not come back.
func (w *world) kill(ctx context.Context, start time.Time, plan []Kill) {
	for _, k := range plan {
		wait := time.NewTimer(time.Until(start.Add(k.At)))
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		switch k.Kind {
		case KillNetshim:
			if err := w.shim.Kill(); err != nil {
				w.res.fail(fmt.Sprintf("killing netshim: %v", err))
				w.abort()
				return
			}
			w.res.kills.add(k.Kind, "")
			// Its own deadline, not ctx's: a restart must finish even when
			// the load ends meanwhile.
			rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := w.shim.Start(rctx)
			cancel()
			if err != nil {
				w.res.fail(fmt.Sprintf("netshim did not start again after SIGKILL: %v\n%s", err, w.shim.LogTail(30)))
				w.abort()
				return
			}
			w.newSegment()
		case KillDockerd:
			if err := w.engine.Kill(); err != nil {
				w.res.fail(fmt.Sprintf("killing dockerd: %v", err))
				w.abort()
				return
			}
			w.res.kills.add(k.Kind, "")
			// Its restore of the containers the kill left can take longer
			// than the harness's start bound on a loaded machine: give it
			// two minutes more before calling it failed.
			if err := w.engine.Start(); err != nil && !harness.Eventually(2*time.Minute, func() bool {
				_, verr := w.engine.Docker("version", "--format", "{{.Server.Version}}")
				return verr == nil
			}) {
				w.res.fail(fmt.Sprintf("dockerd did not start again after SIGKILL: %v\n%s", err, w.engine.LogTail(30)))
				w.abort()
				return
			}
		case KillCNI:
			what, err := w.killCNIPlugin(ctx)
			if err != nil {
				w.res.fail(fmt.Sprintf("killing a CNI plugin: %v", err))
				return
			}
			w.res.kills.add(k.Kind, what)
		}
	}
}

// killCNIPlugin SIGKILLs a CNI plugin netshim is running (a child of its
// with CNI_COMMAND in its environment), as the OOM killer or a node's
// watchdog might. It returns "bridge ADD" or the like, or "" when none ran
// within cniHunt.
func (w *world) killCNIPlugin(ctx context.Context) (string, error) {
	deadline := time.Now().Add(cniHunt)
	// A plugin lives for tens of milliseconds: look often.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if pid := w.shim.Pid(); pid > 0 && w.shim.Running() {
			for _, child := range children("/proc", pid) {
				cmd := cniCommand("/proc", child)
				if cmd == "" {
					continue
				}
				exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(child), "exe"))
				if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
					continue // it ended first
				}
				return filepath.Base(exe) + " " + cmd, nil
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return "", nil
}

// children lists the child processes of pid, from every thread's children
// file (a child belongs to the thread that forked it).
func children(proc string, pid int) []int {
	tasks, _ := filepath.Glob(filepath.Join(proc, strconv.Itoa(pid), "task", "*", "children"))
	var out []int
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// cniCommand is the CNI_COMMAND of a process's environment, or "".
func cniCommand(proc string, pid int) string {
	env, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "environ"))
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("CNI_COMMAND=")); ok {
			return string(v)
		}
	}
	return ""
}
