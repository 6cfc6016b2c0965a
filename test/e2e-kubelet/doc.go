// Package e2ekubelet checks netshim under a real kubelet (v1.36, v1.37) run
// standalone (static pods, no API server). The checks are behind the
// "kubelet" build tag; their TestMain sets up the world through test/harness
// when hack/e2e-kubelet.sh runs the test binary: run `make e2e-kubelet` as root.
package e2ekubelet
