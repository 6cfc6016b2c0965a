package procutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

func TestPidsWithEnv(t *testing.T) {
	root := t.TempDir()
	write := func(pid, env string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10", "PATH=/bin\x00CNI_COMMAND=ADD\x00CNI_CONTAINERID=aaa\x00")
	write("11", "CNI_CONTAINERID=bbb\x00")
	write("12", "CNI_CONTAINERID=zzz\x00")                                // not asked for
	write("13", "XCNI_CONTAINERID=aaa\x00")                               // another key
	write("14", "")                                                       // a kernel thread
	write("self", "CNI_CONTAINERID=aaa\x00")                              // not a pid
	if err := os.MkdirAll(filepath.Join(root, "15"), 0o755); err != nil { // exited meanwhile
		t.Fatal(err)
	}
	got, err := PidsWithEnv(root, "CNI_CONTAINERID", map[string]bool{"aaa": true, "bbb": true})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int]string{10: "aaa", 11: "bbb"}; !reflect.DeepEqual(got, want) {
		t.Errorf("PidsWithEnv = %v, want %v", got, want)
	}
	if _, err := PidsWithEnv(filepath.Join(root, "missing"), "K", nil); err == nil {
		t.Error("missing proc root: no error")
	}
}

// A real process started with the variable is found in the real /proc.
func TestPidsWithEnvReal(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "NETSHIM_PIDS_WITH_ENV_TEST=on")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	got, err := PidsWithEnv("/proc", "NETSHIM_PIDS_WITH_ENV_TEST", map[string]bool{"on": true})
	if err != nil {
		t.Fatal(err)
	}
	if got[cmd.Process.Pid] != "on" || len(got) != 1 {
		t.Errorf("PidsWithEnv = %v, want only pid %d", got, cmd.Process.Pid)
	}
}
