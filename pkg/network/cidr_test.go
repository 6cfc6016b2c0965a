package network

import "testing"

func TestParsePodCIDRs(t *testing.T) {
	ok := map[string]string{
		"10.244.1.7/24":              "10.244.1.0/24",
		"fd00:1::/64, 10.244.1.0/24": "10.244.1.0/24 fd00:1::/64",
		"10.244.1.0/24,fd00:1::/64":  "10.244.1.0/24 fd00:1::/64",
	}
	for in, want := range ok {
		nets, err := ParsePodCIDRs(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		got := ""
		for i, n := range nets {
			if i > 0 {
				got += " "
			}
			got += n.String()
		}
		if got != want {
			t.Errorf("%q = %s, want %s (IPv4 first, network form)", in, got, want)
		}
	}
	for _, in := range []string{"", " , ", "bogus", "10.0.0.0/24,10.1.0.0/24", "fd00::/64,fd01::/64"} {
		if _, err := ParsePodCIDRs(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}
