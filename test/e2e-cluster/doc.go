// Package e2ecluster checks netshim as the runtime of a single-node
// Kubernetes cluster: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and a kubelet, all on 127.0.0.1, driven with kubectl. The
// checks are behind the "cluster" build tag and build their world
// themselves (TestMain); run `make e2e-cluster` as root.
package e2ecluster
