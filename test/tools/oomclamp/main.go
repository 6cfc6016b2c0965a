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
	"fmt"
	"os"

	"github.com/netshim/netshim/pkg/runcwrap"
)

// runc is the real runc, set at build time (see the package comment).
var runc string

func main() {
	p := os.Getenv("OOMCLAMP_RUNC")
	if p == "" {
		p = runc
	}
	real, err := runcwrap.RealRunc(p)
	if err != nil {
		fail(err)
	}
	if cmd := runcwrap.Parse(os.Args[1:]); cmd.Creates() {
		bundle, err := cmd.BundleDir()
		if err != nil {
			fail(err)
		}
		if err := clampBundle(bundle); err != nil {
			fail(err)
		}
	}
	fail(runcwrap.Exec(real, os.Args[1:]))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "oomclamp: %v\n", err)
	os.Exit(1)
}
