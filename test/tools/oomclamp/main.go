// Command oomclamp is a test-only OCI runtime for Docker engines on
// machines whose root lacks CAP_SYS_RESOURCE: there runc cannot set a
// negative oom_score_adj and fails the start ("can't get final child's PID
// from pipe: EOF"), and cri-dockerd asks -998 for every pod sandbox, with
// no flag to change it. Registered as the engine's default runtime
// (dockerd --add-runtime oomclamp=PATH --default-runtime oomclamp), it gets
// runc's command line; for `create` and `run` it raises a negative
// process.oomScoreAdj in the bundle's config.json to 0, and then it execs
// the real runc with the same arguments, so that runc is the process the
// engine's shim talks to.
//
// The real runc is $OOMCLAMP_RUNC, else the path baked in at build time
// (go build -ldflags "-X main.runc=/usr/sbin/runc"; hack/build-cri-dockerd.sh
// oomclamp does that), else runc on PATH.
//
// Not for production: an OOM score is part of what a pod asked for.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// runc is the real runc, set at build time (see the package comment).
var runc string

func main() {
	real, err := realRunc()
	if err != nil {
		fail(err)
	}
	if bundle, ok := bundleOf(os.Args[1:]); ok {
		if bundle == "" {
			// runc's own default: the bundle is the working directory.
			if bundle, err = os.Getwd(); err != nil {
				fail(err)
			}
		}
		if err := clampBundle(bundle); err != nil {
			fail(err)
		}
	}
	argv := append([]string{real}, os.Args[1:]...)
	fail(syscall.Exec(real, argv, os.Environ()))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "oomclamp: %v\n", err)
	os.Exit(1)
}

// realRunc resolves the runc to exec, which must not be this wrapper
// (a wrapper installed as "runc" on PATH would exec itself forever).
func realRunc() (string, error) {
	p := os.Getenv("OOMCLAMP_RUNC")
	if p == "" {
		p = runc
	}
	if p == "" {
		var err error
		if p, err = exec.LookPath("runc"); err != nil {
			return "", fmt.Errorf("no real runc: set OOMCLAMP_RUNC or build with -ldflags -X main.runc=PATH: %w", err)
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
