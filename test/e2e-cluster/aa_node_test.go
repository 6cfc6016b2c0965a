//go:build cluster

package e2ecluster

// This file's name sorts first: go test runs the tests of a package in the
// order of its files, so the Node is checked before the pods.

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestNodeReady: the kubelet registers the Node, the controller-manager
// gives it a podCIDR, the kubelet hands it to netshim (which started
// without --pod-cidr) through UpdateRuntimeConfig, netshim's network turns
// ready, and with it the Node, which reports netshim's runtime.
func TestNodeReady(t *testing.T) {
	n := waitNodeReady(t)
	if v := n.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "docker://") || len(v) == len("docker://") {
		t.Errorf("containerRuntimeVersion = %q, want docker://<engine version>", v)
	}
	_, cluster, _ := net.ParseCIDR(clusterCIDR)
	ip, cidr, err := net.ParseCIDR(n.Spec.PodCIDR)
	if err != nil || !cluster.Contains(ip) {
		t.Fatalf("podCIDR = %q (%v), want a /%d of %s", n.Spec.PodCIDR, err, nodeMaskSize, clusterCIDR)
	}
	if ones, _ := cidr.Mask.Size(); ones != nodeMaskSize {
		t.Errorf("podCIDR %s is not a /%d", cidr, nodeMaskSize)
	}
	var internal string
	for _, a := range n.Status.Addresses {
		if a.Type == "InternalIP" {
			internal = a.Address
		}
	}
	if internal != nodeIP {
		t.Errorf("InternalIP = %q, want %s (kube-apiserver reaches the kubelet there)", internal, nodeIP)
	}

	// netshim's own view: network ready, through the CIDR kubelet sent.
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	st, err := w.cri.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("CRI Status: %v", err)
	}
	for _, c := range st.GetStatus().GetConditions() {
		if !c.Status {
			t.Errorf("netshim reports %s false: %s %s", c.Type, c.Reason, c.Message)
		}
	}
	log, err := os.ReadFile(w.netshim.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	// netshim logs the CIDRs UpdateRuntimeConfig brings.
	found := false
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "Pod CIDR updated") && strings.Contains(l, n.Spec.PodCIDR) {
			found = true
		}
	}
	if !found {
		t.Errorf("netshim's log shows no UpdateRuntimeConfig with the podCIDR %s", n.Spec.PodCIDR)
	}
}
