package harness

import (
	"net"
	"slices"
	"testing"
)

func TestDNATRulesOf(t *testing.T) {
	listing := `Chain CNI-HOSTPORT-DNAT (2 references)
num  target     prot opt source               destination
1    CNI-DN-8f26ae3262b89d052ce87  tcp  --  0.0.0.0/0            0.0.0.0/0            /* dnat name: "nskub" id: "699c" */ multiport dports 17890
2    CNI-DN-aaaaaaaaaaaaaaaaaaaaa  tcp  --  0.0.0.0/0            0.0.0.0/0            /* dnat name: "other" id: "1234" */ multiport dports 80
3    CNI-DN-bbbbbbbbbbbbbbbbbbbbb  tcp  --  0.0.0.0/0            0.0.0.0/0            /* dnat name: "nskub" id: "5678" */ multiport dports 81
4    CNI-DN-ccccccccccccccccccccc  tcp  --  0.0.0.0/0            0.0.0.0/0            /* dnat name: "nskub2" id: "9" */ multiport dports 82
`
	nums, chains := dnatRulesOf(listing, "nskub")
	if !slices.Equal(nums, []int{3, 1}) {
		t.Errorf("rule numbers = %v, want [3 1] (highest first, only network nskub)", nums)
	}
	if !slices.Equal(chains, []string{"CNI-DN-8f26ae3262b89d052ce87", "CNI-DN-bbbbbbbbbbbbbbbbbbbbb"}) {
		t.Errorf("chains = %v", chains)
	}
	if nums, chains := dnatRulesOf(listing, "none"); nums != nil || chains != nil {
		t.Errorf("an unknown network matched %v %v", nums, chains)
	}
}

func TestForwardRulesIn(t *testing.T) {
	listing := `Chain CNI-FORWARD (1 references)
num  target     prot opt source               destination
1    CNI-ADMIN  all  --  0.0.0.0/0            0.0.0.0/0            /* CNI firewall plugin rules */
2    ACCEPT     all  --  0.0.0.0/0            10.176.0.2           ctstate RELATED,ESTABLISHED
3    ACCEPT     all  --  10.176.0.2           0.0.0.0/0
4    ACCEPT     all  --  10.88.0.5            0.0.0.0/0
5    ACCEPT     all  --  0.0.0.0/0            10.176.0.9/32        ctstate RELATED,ESTABLISHED
`
	_, cidr, _ := net.ParseCIDR("10.176.0.0/24")
	if got := forwardRulesIn(listing, cidr); !slices.Equal(got, []int{5, 3, 2}) {
		t.Errorf("rules = %v, want [5 3 2]", got)
	}
}

func TestWatchCNIRulesRefusesBadSubnet(t *testing.T) {
	g, err := NewHostGuard("")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WatchCNIRules("net", "not-a-cidr"); err == nil {
		t.Error("a bad subnet was accepted")
	}
}
