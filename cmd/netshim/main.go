// Command netshim is a CRI runtime daemon that runs Kubernetes pods on a
// Docker engine, with pod networking through CNI.
package main

import (
	"os"
	"runtime/debug"

	"k8s.io/klog/v2"
)

// defaultGCPercent trades a little memory for latency: netshim's live heap
// is a few MiB, so with Go's default of 100 it collects after every few
// relists of a full node and the collections show up in kubelet's p99.
// GOGC in the environment still wins.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if err := newRootCommand().Execute(); err != nil {
		klog.ErrorS(err, "netshim failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
