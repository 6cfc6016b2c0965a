//go:build tools

// Package kubelet is a wrapper module that builds the kubelet of the
// k8s.io/kubernetes release named in go.mod from the Go module proxy; see
// hack/build-kubelet.sh. It is its own module so that the main module
// (github.com/netshim/netshim) never depends on k8s.io/kubernetes.
//
// The control plane `make e2e-cluster` runs, and kubeadm and kube-proxy for
// the kubeadm-built multi-node cluster, are built from the same module
// (hack/build-kubelet.sh cluster): go mod tidy resolves what these imports
// need, so each command built must be imported here.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
