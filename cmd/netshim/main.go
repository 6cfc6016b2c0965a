// Command netshim is a CRI runtime daemon that runs Kubernetes pods on a
// Docker engine, with pod networking through CNI.
package main

import (
	"os"

	"k8s.io/klog/v2"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		klog.ErrorS(err, "netshim failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
