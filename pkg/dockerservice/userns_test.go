package dockerservice

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/podns"
)

// TestUsernsClaims: a pod's user namespace range may share no node id with
// another pod's, made or being made; kubelet never sends such ranges, so
// one is InvalidArgument naming the other pod. A released claim frees the
// range; a pod in the node's user namespace claims nothing.
func TestUsernsClaims(t *testing.T) {
	pod := func(name string, host, length uint32) *runtimeapi.PodSandboxConfig {
		m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: host, Length: length}}
		return &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns"},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}},
			}},
		}
	}
	running := []usernsRange{{pod: "ns/running", uids: []podns.IDMap{{HostID: 65536, Size: 65536}}, gids: []podns.IDMap{{HostID: 65536, Size: 65536}}}}
	inUse := func() []usernsRange { return running }
	var c usernsClaims
	release, err := c.claim("a", pod("a", 131072, 65536), inUse)
	if err != nil {
		t.Fatalf("a disjoint range: %v", err)
	}
	for _, tc := range []struct {
		name       string
		host, size uint32
		other      string // "" when it must be accepted
	}{
		{"same as a running pod's", 65536, 65536, "ns/running"},
		{"inside a running pod's", 70000, 10, "ns/running"},
		{"ending in a running pod's", 1000, 64537, "ns/running"},
		{"overlapping one being made", 131072 + 65535, 65536, "ns/a"},
		{"just after", 196608, 65536, ""},
		{"just before", 1, 65535, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel, err := c.claim("b", pod("b", tc.host, tc.size), inUse)
			if tc.other == "" {
				if err != nil {
					t.Fatalf("claim: %v", err)
				}
				rel()
				return
			}
			if crirpc.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pod "+tc.other) {
				t.Fatalf("claim: %v, want InvalidArgument naming pod %s", err, tc.other)
			}
		})
	}
	release()
	if rel, err := c.claim("b", pod("b", 131072, 65536), inUse); err != nil {
		t.Errorf("a's range once a is made or failed: %v", err)
	} else {
		rel()
	}
	if rel, err := c.claim("c", &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "c"}}, inUse); err != nil {
		t.Errorf("a pod in the node's user namespace: %v", err)
	} else {
		rel()
	}
	if len(c.inFlight) != 0 {
		t.Errorf("claims left: %v", c.inFlight)
	}
}
