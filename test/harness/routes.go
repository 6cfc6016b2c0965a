package harness

import (
	"fmt"
	"strings"
)

// RoutesOverlapping returns the host's IPv4 routes, other than the default
// one, that contain cidr or lie inside it: a test network on that subnet
// would fight them (or, for the test's own bridge route, is left over from
// an earlier run).
func RoutesOverlapping(cidr string) ([]string, error) {
	var overlap []string
	for _, sel := range []string{"match", "root"} {
		out, err := RunCmd("ip", "-4", "route", "show", sel, cidr)
		if err != nil {
			return nil, fmt.Errorf("ip route show %s %s: %w: %s", sel, cidr, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line != "" && !strings.HasPrefix(line, "default") {
				overlap = append(overlap, line)
			}
		}
	}
	return overlap, nil
}
