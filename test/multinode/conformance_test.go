//go:build multinode && conformancecluster

package multinode

import (
	"os"
	"testing"
)

// TestConformance runs Kubernetes' conformance suite on a kubeadm cluster
// of its own (runConformance): CONFORMANCE_SUBSET full (the default) or
// quick. make e2e-multinode runs the quick subset on TestKubeadmCluster's
// cluster instead, saving a cluster's bring-up.
func TestConformance(t *testing.T) {
	subset := os.Getenv("CONFORMANCE_SUBSET")
	if subset == "" {
		subset = "full"
	}
	c := startCluster(t)
	c.waitNodesReady(t)
	c.waitPodsReady(t)
	runConformance(t, c, subset)
}
