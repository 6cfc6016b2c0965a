package kubenet

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// fakeIPT is a tiny model of the nat table: chains with their rules, in
// `iptables -S` form, per family.
type fakeIPT struct {
	mu     sync.Mutex
	chains [2]map[string][]string // [v4, v6] chain → rules after "-A CHAIN "
	calls  []string
	fail   map[string]error // command prefix → error
}

func newFakeIPT() *fakeIPT {
	f := &fakeIPT{fail: map[string]error{}}
	for i := range f.chains {
		f.chains[i] = map[string][]string{"POSTROUTING": nil}
	}
	return f
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.Contains(a, " ") {
			a = `"` + a + `"`
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func (f *fakeIPT) run(v6 bool, args ...string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fam := 0
	if v6 {
		fam = 1
	}
	cmd := fmt.Sprintf("v%d %s", 4+2*fam, strings.Join(args, " "))
	f.calls = append(f.calls, cmd)
	for prefix, err := range f.fail {
		if strings.HasPrefix(cmd, prefix) {
			return err.Error(), err
		}
	}
	if len(args) < 4 || args[0] != "-t" || args[1] != "nat" {
		return "", fmt.Errorf("fake: unsupported %v", args)
	}
	c := f.chains[fam]
	op, chain, rest := args[2], args[3], args[4:]
	switch op {
	case "-N":
		if _, ok := c[chain]; ok {
			return "iptables: Chain already exists.", errors.New("exit status 1")
		}
		c[chain] = nil
	case "-F":
		if _, ok := c[chain]; !ok {
			return "No chain", errors.New("exit status 1")
		}
		c[chain] = nil
	case "-X":
		delete(c, chain)
	case "-A":
		c[chain] = append(c[chain], quoteArgs(rest))
	case "-D":
		r := quoteArgs(rest)
		for i, have := range c[chain] {
			if have == r {
				c[chain] = append(c[chain][:i:i], c[chain][i+1:]...)
				return "", nil
			}
		}
		return "Bad rule", errors.New("exit status 1")
	case "-S":
		rules, ok := c[chain]
		if !ok {
			return "No chain/target/match by that name.", errors.New("exit status 1")
		}
		out := "-N " + chain + "\n"
		for _, r := range rules {
			out += "-A " + chain + " " + r + "\n"
		}
		return out, nil
	default:
		return "", fmt.Errorf("fake: unsupported %v", args)
	}
	return "", nil
}

func (f *fakeIPT) rules(v6 bool, chain string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	fam := 0
	if v6 {
		fam = 1
	}
	return append([]string(nil), f.chains[fam][chain]...)
}

func (f *fakeIPT) hasChain(v6 bool, chain string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fam := 0
	if v6 {
		fam = 1
	}
	_, ok := f.chains[fam][chain]
	return ok
}

func TestEnsureMasqDualStack(t *testing.T) {
	f := newFakeIPT()
	chain := masqChain("cbr0")
	nonMasq, _ := ParseNonMasqCIDRs("10.0.0.0/8,fd00:aaaa::/32")
	if err := ensureMasq(f, chain, mustCIDRs(t, "10.88.0.0/16,fd00:88::/64"), nonMasq); err != nil {
		t.Fatal(err)
	}
	if got, want := f.rules(false, chain), []string{"-d 10.88.0.0/16 -j RETURN", "-d 10.0.0.0/8 -j RETURN", "-j MASQUERADE"}; !reflect.DeepEqual(got, want) {
		t.Errorf("v4 chain %q, want %q", got, want)
	}
	if got, want := f.rules(true, chain), []string{"-d fd00:88::/64 -j RETURN", "-d fd00:aaaa::/32 -j RETURN", "-j MASQUERADE"}; !reflect.DeepEqual(got, want) {
		t.Errorf("v6 chain %q, want %q", got, want)
	}
	jump4 := `-s 10.88.0.0/16 -m comment --comment "` + masqComment + `" -j ` + chain
	if got := f.rules(false, "POSTROUTING"); !reflect.DeepEqual(got, []string{jump4}) {
		t.Errorf("v4 POSTROUTING %q, want %q", got, jump4)
	}

	// Idempotent: a second run (a restart) adds no second jump.
	if err := ensureMasq(f, chain, mustCIDRs(t, "10.88.0.0/16,fd00:88::/64"), nonMasq); err != nil {
		t.Fatal(err)
	}
	if got := f.rules(false, "POSTROUTING"); len(got) != 1 {
		t.Errorf("after a second run POSTROUTING has %q", got)
	}
	if got := f.rules(false, chain); len(got) != 3 {
		t.Errorf("after a second run the chain has %q", got)
	}

	// A new, IPv4-only pod CIDR: the old jump goes, the v6 chain goes.
	if err := ensureMasq(f, chain, mustCIDRs(t, "10.99.0.0/24"), nonMasq); err != nil {
		t.Fatal(err)
	}
	got := f.rules(false, "POSTROUTING")
	if len(got) != 1 || !strings.HasPrefix(got[0], "-s 10.99.0.0/24 ") {
		t.Errorf("v4 POSTROUTING %q, want only the jump for 10.99.0.0/24", got)
	}
	if f.hasChain(true, chain) || len(f.rules(true, "POSTROUTING")) != 0 {
		t.Errorf("v6 chain or jump left: chain=%v POSTROUTING=%q", f.hasChain(true, chain), f.rules(true, "POSTROUTING"))
	}
}

func TestEnsureMasqKeepsOtherRules(t *testing.T) {
	f := newFakeIPT()
	f.chains[0]["POSTROUTING"] = []string{"-s 172.17.0.0/16 ! -o docker0 -j MASQUERADE"}
	if err := ensureMasq(f, "NETSHIM-MASQ-x", mustCIDRs(t, "10.1.0.0/24"), nil); err != nil {
		t.Fatal(err)
	}
	got := f.rules(false, "POSTROUTING")
	if len(got) != 2 || got[0] != "-s 172.17.0.0/16 ! -o docker0 -j MASQUERADE" {
		t.Errorf("POSTROUTING %q", got)
	}
	// No non-masquerade CIDR: only the pod CIDR itself is exempt.
	if got, want := f.rules(false, "NETSHIM-MASQ-x"), []string{"-d 10.1.0.0/24 -j RETURN", "-j MASQUERADE"}; !reflect.DeepEqual(got, want) {
		t.Errorf("chain %q, want %q", got, want)
	}
}

func TestEnsureMasqError(t *testing.T) {
	f := newFakeIPT()
	f.fail["v4 -t nat -A NETSHIM"] = errors.New("iptables: boom")
	if err := ensureMasq(f, "NETSHIM-MASQ-x", mustCIDRs(t, "10.1.0.0/24"), nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err %v, want the iptables failure", err)
	}
}

func TestSplitRule(t *testing.T) {
	got := splitRule(`-A POSTROUTING -s 10.1.0.0/24 -m comment --comment "a \"quoted\" comment" -j X`)
	want := []string{"-A", "POSTROUTING", "-s", "10.1.0.0/24", "-m", "comment", "--comment", `a "quoted" comment`, "-j", "X"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("splitRule = %q, want %q", got, want)
	}
	if got := splitRule("  "); len(got) != 0 {
		t.Errorf("blank: %q", got)
	}
}

func TestMasqChainNameFits(t *testing.T) {
	if n := len(masqChain("abcdefghijklmno")); n > 28 {
		t.Errorf("chain name for a 15-character bridge is %d characters; iptables takes 28", n)
	}
}
