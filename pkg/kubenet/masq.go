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
//
// A (re)write is one iptables-restore --noflush transaction per family:
// ":CHAIN - [0:0]" creates or empties the chain, the rules follow, and the
// jump is fixed up in the same transaction, so the kernel swaps the whole
// nat table at COMMIT. Flushing and re-adding rule by rule (what this did
// before) leaves a window in which the chain is empty, i.e. pod egress
// leaves unmasqueraded, and a failure halfway leaves it half-written.

const masqComment = "netshim kubenet: masquerade pod traffic leaving the non-masquerade CIDR"

// masqChain is the nat chain of the network on bridge (iptables chain
// names hold at most 28 characters; a Linux interface name 15).
func masqChain(bridge string) string { return "NETSHIM-MASQ-" + bridge }

// iptables runs iptables (v6: ip6tables) with args and returns its
// combined output; restore feeds input to iptables-restore --noflush (v6:
// ip6tables-restore). Tests fake it to see the exact input without root.
type iptables interface {
	run(v6 bool, args ...string) (string, error)
	restore(v6 bool, input string) error
}

// execIPTables runs the binaries. wrap, when set, is a command prefix
// (tests run them under `ip netns exec` in a throwaway netns).
type execIPTables struct {
	wrap []string
}

func (e execIPTables) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	argv := append(append(append([]string(nil), e.wrap...), bin), args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

func (e execIPTables) run(v6 bool, args ...string) (string, error) {
	bin := "iptables"
	if v6 {
		bin = "ip6tables"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.command(ctx, bin, append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (e execIPTables) restore(v6 bool, input string) error {
	bin := "iptables-restore"
	if v6 {
		bin = "ip6tables-restore"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// --noflush: only the chains and rules named in the input change; the
	// rest of the nat table (Docker's, kube-proxy's) is left alone.
	cmd := e.command(ctx, bin, "-w", "--noflush")
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --noflush: %w: %s (input: %q)", bin, err, strings.TrimSpace(string(out)), input)
	}
	return nil
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

// writeMasq replaces the chain's rules and makes the POSTROUTING jump
// into it exist exactly once, for pod, in one iptables-restore
// transaction (see renderMasq).
func writeMasq(ipt iptables, v6 bool, chain string, pod *net.IPNet, nonMasq []*net.IPNet) error {
	jumps, err := jumpRules(ipt, v6, chain)
	if err != nil {
		return err
	}
	return ipt.restore(v6, renderMasq(chain, pod, nonMasq, jumps))
}

// renderMasq is the iptables-restore --noflush input that sets chain to
// its rules for pod and leaves exactly one POSTROUTING jump into it, the
// one for pod: the jumps found (existing, as `-S` printed them) other than
// the first one for pod are deleted (those of an older pod CIDR, and
// duplicates), and the jump is appended if none is there.
func renderMasq(chain string, pod *net.IPNet, nonMasq []*net.IPNet, existing []jumpRule) string {
	var b strings.Builder
	b.WriteString("*nat\n")
	// Declaring a chain with --noflush creates it or, if it exists,
	// empties it: the rules below are its complete new content.
	fmt.Fprintf(&b, ":%s - [0:0]\n", chain)
	fmt.Fprintf(&b, "-A %s -d %s -j RETURN\n", chain, pod)
	for _, n := range nonMasq {
		fmt.Fprintf(&b, "-A %s -d %s -j RETURN\n", chain, n)
	}
	fmt.Fprintf(&b, "-A %s -j MASQUERADE\n", chain)
	have := false
	for _, j := range existing {
		if argValue(j.args, "-s") == pod.String() && !have {
			have = true
			continue
		}
		// The rule as iptables printed it, "-A" turned into "-D": -S
		// output is meant to be read back by iptables-restore.
		fmt.Fprintf(&b, "-D %s\n", strings.TrimPrefix(j.line, "-A "))
	}
	if !have {
		fmt.Fprintf(&b, "-A POSTROUTING -s %s -m comment --comment %q -j %s\n", pod, masqComment, chain)
	}
	b.WriteString("COMMIT\n")
	return b.String()
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
		if _, err := ipt.run(v6, append([]string{"-t", "nat", "-D", "POSTROUTING"}, j.args...)...); err != nil {
			return err
		}
	}
	if _, err := ipt.run(v6, "-t", "nat", "-F", chain); err != nil {
		return err
	}
	_, err = ipt.run(v6, "-t", "nat", "-X", chain)
	return err
}

// jumpRule is a POSTROUTING rule that jumps to netshim's chain: its line
// as `iptables -S` printed it, and its arguments after "-A POSTROUTING".
type jumpRule struct {
	line string
	args []string
}

// jumpRules returns the POSTROUTING rules that jump to chain.
func jumpRules(ipt iptables, v6 bool, chain string) ([]jumpRule, error) {
	out, err := ipt.run(v6, "-t", "nat", "-S", "POSTROUTING")
	if err != nil {
		return nil, err
	}
	var rules []jumpRule
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		args := splitRule(line)
		if len(args) < 2 || args[0] != "-A" || args[1] != "POSTROUTING" || argValue(args, "-j") != chain {
			continue
		}
		rules = append(rules, jumpRule{line: line, args: args[2:]})
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
