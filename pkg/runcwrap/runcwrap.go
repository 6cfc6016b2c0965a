// Package runcwrap is what an OCI runtime wrapper needs to sit between a
// Docker engine and runc: the engine (through its containerd shim) runs the
// wrapper with runc's command line; the wrapper may edit the bundle's
// config.json (for `create` and `run`) or the process file (for `exec`),
// and then execs the real runc with the same arguments, so that runc is
// the process the shim talks to.
//
// netshim's own wrapper, cmd/netshim-oci, and the test-only
// test/tools/oomclamp use it.
package runcwrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// globalValueFlags are runc's global flags that take a value in the next
// argument (when not written --flag=value).
var globalValueFlags = map[string]bool{"log": true, "log-format": true, "root": true, "criu": true, "rootless": true}

// commandValueFlags are the flags of runc's create, run and exec that take
// a value; the ones this package looks for are handled apart.
var commandValueFlags = map[string]bool{
	"console-socket": true, "pid-file": true, "preserve-fds": true, "pidfd-socket": true,
	"cwd": true, "env": true, "e": true, "user": true, "u": true, "additional-gids": true, "g": true,
	"process-label": true, "apparmor": true, "cap": true, "c": true, "cgroup": true,
}

// flagName returns the name of a flag argument ("--root=x" -> "root",
// true for an inline value; "-b" -> "b") and false for a non-flag.
func flagName(arg string) (name string, inline bool, ok bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", false, false
	}
	// runc's CLI takes -flag and --flag alike.
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	if n, _, found := strings.Cut(name, "="); found {
		return n, true, true
	}
	return name, false, true
}

// Command is a parsed runc command line (without argv[0]).
type Command struct {
	// Name is the subcommand ("create", "start", "exec", ...), "" if none.
	Name string
	// Bundle is the --bundle (-b) of create and run; "" means runc's
	// default, the working directory (see BundleDir).
	Bundle string
	// Process is the --process (-p) file of exec, "" if none.
	Process string
	// ID is the container ID, the command's first argument that is no
	// flag ("" if none): what the wrapper's errors name.
	ID string
	// Log and LogFormat are runc's global --log and --log-format: where
	// containerd's shim reads runc's error from (LogError).
	Log, LogFormat string
}

// Parse reads the parts of a runc command line a wrapper acts on.
func Parse(args []string) Command {
	var c Command
	i := 0
	for ; i < len(args); i++ {
		name, inline, isFlag := flagName(args[i])
		if !isFlag {
			break
		}
		var value string
		if inline {
			_, value, _ = strings.Cut(args[i], "=")
		} else if globalValueFlags[name] && i+1 < len(args) {
			i++
			value = args[i]
		}
		switch name {
		case "log":
			c.Log = value
		case "log-format":
			c.LogFormat = value
		}
	}
	if i >= len(args) {
		return c
	}
	c.Name = args[i]
	for i++; i < len(args); i++ {
		name, inline, isFlag := flagName(args[i])
		if !isFlag {
			if c.ID == "" {
				c.ID = args[i]
			}
			continue
		}
		value := func() string {
			if inline {
				_, v, _ := strings.Cut(args[i], "=")
				return v
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case (name == "bundle" || name == "b") && (c.Name == "create" || c.Name == "run"):
			c.Bundle = value()
		case (name == "process" || name == "p") && c.Name == "exec":
			c.Process = value()
		case (commandValueFlags[name] || name == "bundle" || name == "b" || name == "process" || name == "p") && !inline:
			// A value this command does not use: not the ID.
			i++
		}
	}
	return c
}

// Creates says whether the command creates a container from a bundle.
func (c Command) Creates() bool { return c.Name == "create" || c.Name == "run" }

// BundleDir is the bundle of a create or run: --bundle, else the working
// directory, as runc has it.
func (c Command) BundleDir() (string, error) {
	if c.Bundle != "" {
		return c.Bundle, nil
	}
	return os.Getwd()
}

// EditFile runs edit on the contents of path and, if it reports a change,
// replaces the file with the result (a renamed temp file in the same
// directory, same mode), so that runc never reads a half-written file. A
// missing file is left to runc, which says so in its own words.
func EditFile(path string, edit func([]byte) ([]byte, bool, error)) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	out, changed, err := edit(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !changed {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".runcwrap-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// RealRunc resolves the runc to exec: path if set, else runc on PATH. It
// must not be the running wrapper: a wrapper installed as "runc" on PATH
// would exec itself forever.
func RealRunc(path string) (string, error) {
	p := path
	if p == "" {
		var err error
		if p, err = exec.LookPath("runc"); err != nil {
			return "", fmt.Errorf("no runc on PATH (%s): %w", os.Getenv("PATH"), err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	si, err := os.Stat(self)
	if err != nil {
		return "", err
	}
	ri, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("the real runc: %w", err)
	}
	if os.SameFile(si, ri) {
		return "", errors.New("the real runc " + p + " is this wrapper")
	}
	return filepath.Abs(p)
}

// Exec replaces the process with runc and args (without argv[0]); it
// returns only on failure.
func Exec(runc string, args []string) error {
	argv := append([]string{runc}, args...)
	return syscall.Exec(runc, argv, os.Environ())
}

// LogError appends msg as an error to runc's log file (--log), in its
// format (--log-format: json, or text), as runc itself would: containerd's
// shim reports the last error of that file as the OCI runtime's error,
// which Docker returns to its client. Without it the client sees only
// "... did not terminate successfully: exit status 1". No --log: nothing.
func LogError(c Command, msg string) error {
	if c.Log == "" {
		return nil
	}
	f, err := os.OpenFile(c.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	var line []byte
	if c.LogFormat == "json" {
		line, err = json.Marshal(struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Time  string `json:"time"`
		}{"error", msg, now})
		if err != nil {
			f.Close()
			return err
		}
	} else {
		line = []byte(fmt.Sprintf("time=%q level=error msg=%q", now, msg))
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
