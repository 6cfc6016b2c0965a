// Command etcd is the etcd server kubeadm's etcd static pod runs: the
// version kubeadm v1.36 pins (constants.DefaultEtcdVersion 3.6.8-0), built
// from the Go module proxy by hack/cluster-images.sh. It hands its arguments to
// etcd's own entry point, as etcd's main package does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
