// Command netshim is a CRI runtime daemon that runs Kubernetes pods on a
// Docker engine, with pod networking through CNI.
package main

import (
	"os"

	"k8s.io/klog/v2"
)

// netshim runs with Go's default GC target (GOGC=100; the environment can
// change it). It ran with 400 while every relist was encoded afresh, which
// made collections frequent enough to reach kubelet's p99; lists are now
// answered from encoded bytes, allocation is low, and 400 only made the
// heap grow to five times the live one: 57 MiB RSS against 32-34 MiB with
// 110 pods in `make bench`, the same ListPodSandbox p99 (docs/benchmarks.md).
func main() {
	if err := newRootCommand().Execute(); err != nil {
		klog.ErrorS(err, "netshim failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
