package kubenet

import (
	"encoding/json"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/netshim/netshim/pkg/network"
)

func mustCIDRs(t *testing.T, s string) []*net.IPNet {
	t.Helper()
	n, err := ParseCIDRs(s)
	if err != nil {
		t.Fatalf("ParseCIDRs(%q): %v", s, err)
	}
	return n
}

// parsedList is the part of the built-in conflist the tests look at.
type parsedList struct {
	CNIVersion string           `json:"cniVersion"`
	Name       string           `json:"name"`
	Plugins    []map[string]any `json:"plugins"`
}

func buildList(t *testing.T, c netConfig) parsedList {
	t.Helper()
	raw, err := confList(c)
	if err != nil {
		t.Fatalf("confList: %v", err)
	}
	// libcni must accept it as is.
	if _, err := libcni.ConfListFromBytes(raw); err != nil {
		t.Fatalf("libcni refuses the built-in list: %v\n%s", err, raw)
	}
	var l parsedList
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatalf("decoding: %v", err)
	}
	return l
}

func pluginsByType(l parsedList) map[string]map[string]any {
	m := map[string]map[string]any{}
	for _, p := range l.Plugins {
		m[p["type"].(string)] = p
	}
	return m
}

func TestConfListSingleStack(t *testing.T) {
	l := buildList(t, netConfig{Bridge: "cbr0", PodCIDRs: mustCIDRs(t, "10.88.0.0/16"), MTU: 1450, Hairpin: network.HairpinVeth})
	if l.Name != "kubenet" || l.CNIVersion != "1.0.0" {
		t.Errorf("name %q version %q, want kubenet 1.0.0", l.Name, l.CNIVersion)
	}
	var types []string
	for _, p := range l.Plugins {
		types = append(types, p["type"].(string))
	}
	if want := []string{"bridge", "firewall", "portmap", "bandwidth"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("plugins %v, want %v", types, want)
	}
	p := pluginsByType(l)
	br := p["bridge"]
	for k, want := range map[string]any{"bridge": "cbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true, "promiscMode": false, "mtu": 1450.0} {
		if br[k] != want {
			t.Errorf("bridge %s = %v, want %v", k, br[k], want)
		}
	}
	if _, ok := br["isDefaultGateway"]; ok {
		t.Errorf("bridge sets isDefaultGateway; the default route comes from the IPAM routes")
	}
	ipam := br["ipam"].(map[string]any)
	if ipam["type"] != "host-local" {
		t.Errorf("ipam type %v", ipam["type"])
	}
	if _, ok := ipam["dataDir"]; ok {
		t.Errorf("ipam dataDir set without IPAMDataDir")
	}
	ranges, _ := json.Marshal(ipam["ranges"])
	routes, _ := json.Marshal(ipam["routes"])
	if string(ranges) != `[[{"subnet":"10.88.0.0/16"}]]` || string(routes) != `[{"dst":"0.0.0.0/0"}]` {
		t.Errorf("ranges %s routes %s", ranges, routes)
	}
	if p["firewall"]["backend"] != "iptables" {
		t.Errorf("firewall backend %v, want iptables (firewalld is not what Docker hosts run)", p["firewall"]["backend"])
	}
	if caps, _ := json.Marshal(p["portmap"]["capabilities"]); string(caps) != `{"portMappings":true}` || p["portmap"]["snat"] != true {
		t.Errorf("portmap %v", p["portmap"])
	}
	if caps, _ := json.Marshal(p["bandwidth"]["capabilities"]); string(caps) != `{"bandwidth":true}` {
		t.Errorf("bandwidth %v", p["bandwidth"])
	}
}

func TestConfListDualStack(t *testing.T) {
	// IPv6 first on input: the ranges still come IPv4 first.
	l := buildList(t, netConfig{Bridge: "br9", PodCIDRs: mustCIDRs(t, "fd00:10:244::/64, 10.244.1.0/24"), IPAMDataDir: "/tmp/ipam"})
	ipam := pluginsByType(l)["bridge"]["ipam"].(map[string]any)
	ranges, _ := json.Marshal(ipam["ranges"])
	routes, _ := json.Marshal(ipam["routes"])
	if string(ranges) != `[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244::/64"}]]` {
		t.Errorf("ranges %s", ranges)
	}
	if string(routes) != `[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]` {
		t.Errorf("routes %s", routes)
	}
	if ipam["dataDir"] != "/tmp/ipam" {
		t.Errorf("dataDir %v", ipam["dataDir"])
	}
	if _, ok := pluginsByType(l)["bridge"]["mtu"]; ok {
		t.Errorf("mtu set though MTU is 0")
	}
}

func TestConfListIPv6Only(t *testing.T) {
	l := buildList(t, netConfig{Bridge: "cbr0", PodCIDRs: mustCIDRs(t, "fd00:1::/64")})
	routes, _ := json.Marshal(pluginsByType(l)["bridge"]["ipam"].(map[string]any)["routes"])
	if string(routes) != `[{"dst":"::/0"}]` {
		t.Errorf("routes %s", routes)
	}
}

func TestConfListHairpinModes(t *testing.T) {
	for _, tc := range []struct {
		mode             network.HairpinMode
		hairpin, promisc bool
	}{
		{network.HairpinVeth, true, false},
		{network.PromiscuousBridge, false, true},
		{network.HairpinNone, false, false},
	} {
		br := pluginsByType(buildList(t, netConfig{Bridge: "cbr0", PodCIDRs: mustCIDRs(t, "10.1.0.0/24"), Hairpin: tc.mode}))["bridge"]
		if br["hairpinMode"] != tc.hairpin || br["promiscMode"] != tc.promisc {
			t.Errorf("%s: hairpinMode %v promiscMode %v, want %v %v", tc.mode, br["hairpinMode"], br["promiscMode"], tc.hairpin, tc.promisc)
		}
	}
}

func TestConfListErrors(t *testing.T) {
	if _, err := confList(netConfig{Bridge: "cbr0"}); err == nil {
		t.Error("no pod CIDR: no error")
	}
	if _, err := confList(netConfig{PodCIDRs: mustCIDRs(t, "10.1.0.0/24")}); err == nil {
		t.Error("no bridge: no error")
	}
}

func TestParseCIDRs(t *testing.T) {
	for in, want := range map[string]string{
		"10.88.0.5/16":               "10.88.0.0/16",
		" fd00::/64 , 10.1.2.0/24 ":  "10.1.2.0/24,fd00::/64",
		"10.1.2.0/24,":               "10.1.2.0/24",
		"10.0.0.0/8,fd00:1:2::1/112": "10.0.0.0/8,fd00:1:2::/112",
	} {
		got, err := ParseCIDRs(in)
		if err != nil {
			t.Errorf("ParseCIDRs(%q): %v", in, err)
			continue
		}
		if s := strings.Join(cidrStrings(got), ","); s != want {
			t.Errorf("ParseCIDRs(%q) = %s, want %s", in, s, want)
		}
	}
	for _, in := range []string{"", ",", "10.1.0.0", "10.1.0.0/24,10.2.0.0/24", "fd00::/64,fd01::/64", "10.1.1.1/32", "10.1.1.0/31"} {
		if got, err := ParseCIDRs(in); err == nil {
			t.Errorf("ParseCIDRs(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseNonMasqCIDRs(t *testing.T) {
	got, err := ParseNonMasqCIDRs("10.0.0.0/8, fd00::/8")
	if err != nil || strings.Join(cidrStrings(got), ",") != "10.0.0.0/8,fd00::/8" {
		t.Errorf("got %v, %v", got, err)
	}
	if got, err := ParseNonMasqCIDRs(""); err != nil || len(got) != 0 {
		t.Errorf("empty: got %v, %v", got, err)
	}
	if _, err := ParseNonMasqCIDRs("10.0.0.0"); err == nil {
		t.Error("no error for a CIDR without prefix")
	}
}
