// Package e2ekubelet checks netshim under a real kubelet v1.36 run standalone
// (static pods, no API server). The checks are behind the "kubelet" build tag
// and need the world hack/e2e-kubelet.sh sets up: run `make e2e-kubelet` as root.
package e2ekubelet
