//go:build tools

// Package kubelet is a wrapper module that builds the kubelet of the
// k8s.io/kubernetes release named in go.mod from the Go module proxy; see
// hack/build-kubelet.sh. It is its own module so that the main module
// (github.com/netshim/netshim) never depends on k8s.io/kubernetes.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
