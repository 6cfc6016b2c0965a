package kubenet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"
)

// Masquerading. Traffic from the pod CIDR to destinations outside the
// non-masquerade CIDR (and outside the pod CIDR) leaves the node with the
// node's address. It is done with a rule of netshim's own rather than the
// bridge plugin's ipMasq, which would masquerade everything not in the
// pod subnet, including the rest of the cluster network:
//
//	-t nat -A POSTROUTING -s <pod CIDR> -m comment --comment "..." -j NETSHIM-MASQ-<bridge>
//	-t nat -A NETSHIM-MASQ-<bridge> -d <pod CIDR> -j RETURN
//	-t nat -A NETSHIM-MASQ-<bridge> -d <non-masquerade CIDR> -j RETURN   (each of that family)
//	-t nat -A NETSHIM-MASQ-<bridge> -j MASQUERADE
//
// per family (iptables, ip6tables). The rules are (re)written when the
// pod CIDR is set and left in place when netshim exits: pods keep running
// across a restart or upgrade of netshim and must keep their egress. A
// stale jump (from an older pod CIDR) is removed at the next set-up; an
// operator who stops using kubenet removes the chain by hand (README).

const masqComment = "netshim kubenet: masquerade pod traffic leaving the non-masquerade CIDR"

// masqChain is the nat chain of the network on bridge (iptables chain
// names hold at most 28 characters; a Linux interface name 15).
func masqChain(bridge string) string { return "NETSHIM-MASQ-" + bridge }

// iptables runs iptables (v6: ip6tables) with args and returns its
// combined output.
type iptables interface {
	run(v6 bool, args ...string) (string, error)
}

type execIPTables struct{}

func (execIPTables) run(v6 bool, args ...string) (string, error) {
	bin := "iptables"
	if v6 {
		bin = "ip6tables"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ensureMasq writes the masquerade rules of both families: those of a
// family with a pod CIDR are (re)written, those of a family without one
// are removed.
func ensureMasq(ipt iptables, chain string, podCIDRs, nonMasq []*net.IPNet) error {
	var errs []error
	for _, v6 := range []bool{false, true} {
		var pod *net.IPNet
		for _, n := range podCIDRs {
			if isV4(n) != v6 {
				pod = n
			}
		}
		if pod == nil {
			if err := removeMasq(ipt, v6, chain); err != nil && v6 {
				// A host without IPv6 netfilter has nothing to remove.
				continue
			} else if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		var keep []*net.IPNet
		for _, n := range nonMasq {
			if isV4(n) != v6 {
				keep = append(keep, n)
			}
		}
		if err := writeMasq(ipt, v6, chain, pod, keep); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func writeMasq(ipt iptables, v6 bool, chain string, pod *net.IPNet, nonMasq []*net.IPNet) error {
	if out, err := ipt.run(v6, "-t", "nat", "-N", chain); err != nil && !strings.Contains(out, "exists") {
		return err
	}
	if _, err := ipt.run(v6, "-t", "nat", "-F", chain); err != nil {
		return err
	}
	rules := [][]string{{"-d", pod.String(), "-j", "RETURN"}}
	for _, n := range nonMasq {
		rules = append(rules, []string{"-d", n.String(), "-j", "RETURN"})
	}
	rules = append(rules, []string{"-j", "MASQUERADE"})
	for _, r := range rules {
		if _, err := ipt.run(v6, append([]string{"-t", "nat", "-A", chain}, r...)...); err != nil {
			return err
		}
	}
	// The jump: drop those for another pod CIDR, add ours if missing.
	jumps, err := jumpRules(ipt, v6, chain)
	if err != nil {
		return err
	}
	have := false
	for _, j := range jumps {
		if argValue(j, "-s") == pod.String() && !have {
			have = true
			continue
		}
		if _, err := ipt.run(v6, append([]string{"-t", "nat", "-D", "POSTROUTING"}, j...)...); err != nil {
			return err
		}
	}
	if !have {
		spec := []string{"-s", pod.String(), "-m", "comment", "--comment", masqComment, "-j", chain}
		if _, err := ipt.run(v6, append([]string{"-t", "nat", "-A", "POSTROUTING"}, spec...)...); err != nil {
			return err
		}
	}
	return nil
}

// removeMasq deletes the chain and the jumps to it, if any.
func removeMasq(ipt iptables, v6 bool, chain string) error {
	if _, err := ipt.run(v6, "-t", "nat", "-S", chain); err != nil {
		// No such chain (or no such table): nothing to remove.
		return nil
	}
	jumps, err := jumpRules(ipt, v6, chain)
	if err != nil {
		return err
	}
	for _, j := range jumps {
		if _, err := ipt.run(v6, append([]string{"-t", "nat", "-D", "POSTROUTING"}, j...)...); err != nil {
			return err
		}
	}
	if _, err := ipt.run(v6, "-t", "nat", "-F", chain); err != nil {
		return err
	}
	_, err = ipt.run(v6, "-t", "nat", "-X", chain)
	return err
}

// jumpRules returns the POSTROUTING rules that jump to chain, each as the
// arguments after "-A POSTROUTING".
func jumpRules(ipt iptables, v6 bool, chain string) ([][]string, error) {
	out, err := ipt.run(v6, "-t", "nat", "-S", "POSTROUTING")
	if err != nil {
		return nil, err
	}
	var rules [][]string
	for _, line := range strings.Split(out, "\n") {
		args := splitRule(line)
		if len(args) < 2 || args[0] != "-A" || args[1] != "POSTROUTING" || argValue(args, "-j") != chain {
			continue
		}
		rules = append(rules, args[2:])
	}
	return rules, nil
}

// argValue returns the value following flag in args, or "".
func argValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

// splitRule splits a line of `iptables -S` into arguments: fields
// separated by spaces, double-quoted strings (comments) kept whole with
// the quotes removed and \" unescaped.
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuote, inArg := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote = !inQuote
			inArg = true
		case c == ' ' && !inQuote:
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}
