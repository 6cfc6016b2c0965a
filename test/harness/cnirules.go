package harness

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// removeCNIRules deletes what the portmap and firewall plugins added for
// pods of network in subnet: the CNI-HOSTPORT-DNAT rules whose comment
// names the network, the CNI-DN-* chains they jump to, and the CNI-FORWARD
// rules for addresses in subnet. Missing chains are not an error (the
// plugins never ran, or DEL removed everything).
func removeCNIRules(network, subnet string) error {
	_, cidr, err := net.ParseCIDR(subnet)
	if err != nil {
		return fmt.Errorf("CNI subnet %q: %w", subnet, err)
	}
	var errs []error
	out, err := RunCmd("iptables", "-w", "-t", "nat", "-L", "CNI-HOSTPORT-DNAT", "-n", "--line-numbers")
	if err == nil {
		nums, chains := dnatRulesOf(out, network)
		for _, n := range nums {
			if o, err := RunCmd("iptables", "-w", "-t", "nat", "-D", "CNI-HOSTPORT-DNAT", strconv.Itoa(n)); err != nil {
				errs = append(errs, fmt.Errorf("deleting the DNAT rule %d of network %s: %w: %s", n, network, err, strings.TrimSpace(o)))
			}
		}
		for _, c := range chains {
			_, _ = RunCmd("iptables", "-w", "-t", "nat", "-F", c)
			if o, err := RunCmd("iptables", "-w", "-t", "nat", "-X", c); err != nil {
				errs = append(errs, fmt.Errorf("deleting chain %s of network %s: %w: %s", c, network, err, strings.TrimSpace(o)))
			}
		}
	}
	out, err = RunCmd("iptables", "-w", "-t", "filter", "-L", "CNI-FORWARD", "-n", "--line-numbers")
	if err == nil {
		for _, n := range forwardRulesIn(out, cidr) {
			if o, err := RunCmd("iptables", "-w", "-t", "filter", "-D", "CNI-FORWARD", strconv.Itoa(n)); err != nil {
				errs = append(errs, fmt.Errorf("deleting the CNI-FORWARD rule %d for %s: %w: %s", n, subnet, err, strings.TrimSpace(o)))
			}
		}
	}
	return errors.Join(errs...)
}

// dnatRulesOf reads `iptables -L CNI-HOSTPORT-DNAT -n --line-numbers` and
// returns the numbers of the rules portmap made for network, highest first
// (so that deleting one does not renumber the next), and their target chains.
func dnatRulesOf(listing, network string) (nums []int, chains []string) {
	marker := `dnat name: "` + network + `"`
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.Contains(line, marker) {
			continue
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		nums = append(nums, n)
		if strings.HasPrefix(f[1], "CNI-DN-") && !slices.Contains(chains, f[1]) {
			chains = append(chains, f[1])
		}
	}
	slices.Sort(nums)
	slices.Reverse(nums)
	return nums, chains
}

// forwardRulesIn reads `iptables -L CNI-FORWARD -n --line-numbers` and
// returns the numbers, highest first, of the rules whose source or
// destination is an address in cidr (the firewall plugin's per-pod rules).
func forwardRulesIn(listing string, cidr *net.IPNet) []int {
	var nums []int
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		// num target prot opt source destination [match...]
		if len(f) < 6 {
			continue
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		for _, addr := range f[4:6] {
			ip := net.ParseIP(strings.TrimSuffix(addr, "/32"))
			if ip != nil && cidr.Contains(ip) {
				nums = append(nums, n)
				break
			}
		}
	}
	slices.Sort(nums)
	slices.Reverse(nums)
	return nums
}

// CNIRulesLeft lists the iptables rules the portmap and firewall plugins
// made for pods of network in subnet that are still there (what
// removeCNIRules would delete): the CNI-HOSTPORT-DNAT rules naming the
// network and the CNI-FORWARD rules of addresses in subnet, one line of
// iptables' listing each. After every pod
// of the network was torn down, the list must be empty: a leak audit.
func CNIRulesLeft(network, subnet string) ([]string, error) {
	_, cidr, err := net.ParseCIDR(subnet)
	if err != nil {
		return nil, fmt.Errorf("CNI subnet %q: %w", subnet, err)
	}
	var left []string
	pick := func(listing string, nums []int, what string) {
		byNum := map[int]string{}
		for _, line := range strings.Split(listing, "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					byNum[n] = strings.Join(f[1:], " ")
				}
			}
		}
		for _, n := range nums {
			left = append(left, what+": "+byNum[n])
		}
	}
	// iptables-nft 1.8.9 says "incompatible" of a chain that does not
	// exist: look first whether it does.
	list := func(table, chain string) (string, error) {
		rules, err := RunCmd("iptables", "-w", "-t", table, "-S")
		if err != nil {
			return "", fmt.Errorf("iptables -t %s -S: %w: %s", table, err, strings.TrimSpace(rules))
		}
		if !slices.Contains(strings.Split(rules, "\n"), "-N "+chain) {
			return "", nil
		}
		out, err := RunCmd("iptables", "-w", "-t", table, "-L", chain, "-n", "--line-numbers")
		if err != nil {
			return "", fmt.Errorf("iptables -t %s -L %s: %w: %s", table, chain, err, strings.TrimSpace(out))
		}
		return out, nil
	}
	out, err := list("nat", "CNI-HOSTPORT-DNAT")
	if err != nil {
		return nil, err
	}
	nums, _ := dnatRulesOf(out, network)
	pick(out, nums, "nat CNI-HOSTPORT-DNAT")
	if out, err = list("filter", "CNI-FORWARD"); err != nil {
		return nil, err
	}
	pick(out, forwardRulesIn(out, cidr), "filter CNI-FORWARD")
	return left, nil
}
