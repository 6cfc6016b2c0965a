package cni

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/netshim/netshim/internal/testutil"
)

func writePlugin(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A plugin that hangs with a child of its own (a chained plugin waiting on
// its IPAM) is killed whole at the deadline: the call returns soon after,
// and the child does not live on holding the call's pipes.
func TestPluginExecKillsTheWholeGroupAtTheDeadline(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	plugin := writePlugin(t, "sleep 600 &\necho $! >"+pidFile+"\nwait\n")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := (&pluginExec{}).ExecPlugin(ctx, plugin, []byte("{}"), os.Environ())
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the deadline", err)
	}
	if took > 300*time.Millisecond+pluginWaitDelay+time.Second {
		t.Errorf("the call took %s past a 300ms deadline", took)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the plugin did not start its child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the plugin's child to be killed", func() bool {
		s := testutil.ProcState(pid)
		return s == "" || s == "Z"
	})
}

func TestPluginExecResults(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		wantOut      string
		wantMsg      string
	}{
		{"success", `cat; echo done >&2`, "{}", ""},
		{"CNI error on stdout", `echo '{"code":11,"msg":"no IP left"}'; exit 1`, "", "no IP left"},
		{"garbage on stdout", `echo 'not json'; exit 1`, "", "cannot be parsed"},
		{"stderr only", `echo 'boom' >&2; exit 1`, "", "boom"},
		{"silent failure", `exit 3`, "", "no error message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := (&pluginExec{}).ExecPlugin(context.Background(), writePlugin(t, tc.script), []byte("{}"), os.Environ())
			if tc.wantMsg == "" {
				if err != nil || strings.TrimSpace(string(out)) != tc.wantOut {
					t.Fatalf("out %q, err %v; want %q", out, err, tc.wantOut)
				}
				return
			}
			var ce *types.Error
			if !errors.As(err, &ce) || !strings.Contains(ce.Msg, tc.wantMsg) {
				t.Fatalf("err = %v, want a CNI error containing %q", err, tc.wantMsg)
			}
		})
	}
}
