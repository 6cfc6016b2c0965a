package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// pluginWaitDelay bounds how long a plugin's output pipes are drained
// after it was killed or exited: a process it left behind that still
// holds them must not hold the call too.
const pluginWaitDelay = time.Second

// pluginExec runs CNI plugin binaries as libcni's own executor does, but
// each in a process group of its own that is killed whole when the call's
// context ends. A chained plugin runs its IPAM plugin as a child: killing
// only the plugin libcni started (exec.CommandContext's default) leaves a
// hung IPAM running as an orphan, still holding its locks and the pipes
// the call is waiting on, so the deadline would not end the call.
type pluginExec struct {
	// stderr receives what a successful plugin printed there.
	stderr io.Writer
}

var _ invoke.Exec = (*pluginExec)(nil)

// ExecPlugin runs the plugin with stdin and the environment, returning
// what it printed on stdout.
func (e *pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		stdout, stderr := &bytes.Buffer{}, &bytes.Buffer{}
		c := exec.CommandContext(ctx, pluginPath)
		c.Env = environ
		c.Stdin = bytes.NewReader(stdinData)
		c.Stdout, c.Stderr = stdout, stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error {
			// The group's ID is the plugin's pid (Setpgid).
			return syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
		c.WaitDelay = pluginWaitDelay
		err := c.Run()
		if err == nil {
			if e.stderr != nil && stderr.Len() > 0 {
				_, _ = stderr.WriteTo(e.stderr)
			}
			return stdout.Bytes(), nil
		}
		// The binary is being replaced (a CNI DaemonSet installing it):
		// libcni waits for that too.
		if strings.Contains(err.Error(), "text file busy") && attempt < 5 && ctx.Err() == nil {
			select {
			case <-time.After(time.Second):
				continue
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("plugin %s: %w (%v)", pluginPath, ctx.Err(), pluginError(err, stdout.Bytes(), stderr.Bytes()))
		}
		return nil, pluginError(err, stdout.Bytes(), stderr.Bytes())
	}
}

// pluginError is the CNI error a failed plugin reported on stdout, or one
// made from what it printed on stderr.
func pluginError(err error, stdout, stderr []byte) error {
	e := &types.Error{}
	switch {
	case len(stdout) > 0:
		if jerr := json.Unmarshal(stdout, e); jerr != nil {
			e.Msg = fmt.Sprintf("netplugin failed but its error message %q cannot be parsed: %v", stdout, jerr)
		}
	case len(stderr) > 0:
		e.Msg = fmt.Sprintf("netplugin failed: %q", stderr)
	default:
		e.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	}
	return e
}

// FindInPath finds a plugin binary in the configured directories.
func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// Decode reads a plugin's VERSION answer.
func (e *pluginExec) Decode(jsonBytes []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(jsonBytes)
}
