package stats

import (
	"testing"

	"github.com/netshim/netshim/pkg/cgstats"
)

// A pod netns with interfaces but no eth0 still gets a default interface:
// kubelet dereferences it unchecked.
func TestNetworkUsageDefaultInterface(t *testing.T) {
	for _, tc := range []struct {
		names       []string
		wantDefault string
		wantOthers  int
	}{
		{[]string{"net1", "eth0"}, "eth0", 1},
		{[]string{"net1", "net2"}, "net1", 1},
		{[]string{"eth0"}, "eth0", 0},
		{nil, "", 0},
	} {
		var ifaces []cgstats.Interface
		for _, n := range tc.names {
			ifaces = append(ifaces, cgstats.Interface{Name: n})
		}
		n := networkUsage(ifaces, 1)
		if tc.wantDefault == "" {
			if n != nil {
				t.Errorf("%v: network = %v, want none", tc.names, n)
			}
			continue
		}
		if n.GetDefaultInterface().GetName() != tc.wantDefault || len(n.Interfaces) != tc.wantOthers {
			t.Errorf("%v: network = %v", tc.names, n)
		}
	}
}
