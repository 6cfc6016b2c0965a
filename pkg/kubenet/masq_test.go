package kubenet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
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
	// restores are the iptables-restore inputs, in order, each prefixed
	// with its family ("v4 " or "v6 ").
	restores []string
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

// restore models iptables-restore --noflush on the nat table: it applies
// the input to a copy of the family's chains and installs the copy at
// COMMIT, so a failing line changes nothing, as in the kernel.
func (f *fakeIPT) restore(v6 bool, input string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fam := 0
	if v6 {
		fam = 1
	}
	f.restores = append(f.restores, fmt.Sprintf("v%d %s", 4+2*fam, input))
	for prefix, err := range f.fail {
		if strings.HasPrefix(fmt.Sprintf("v%d restore", 4+2*fam), prefix) {
			return err
		}
	}
	work := map[string][]string{}
	for k, v := range f.chains[fam] {
		work[k] = append([]string(nil), v...)
	}
	table := ""
	for n, line := range strings.Split(strings.TrimSuffix(input, "\n"), "\n") {
		bad := func(why string) error { return fmt.Errorf("fake restore: line %d %q: %s", n+1, line, why) }
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case line == "COMMIT":
			if table != "nat" {
				return bad("COMMIT outside *nat")
			}
			f.chains[fam] = work
			table = ""
		case strings.HasPrefix(line, ":"):
			name, _, ok := strings.Cut(line[1:], " ")
			if !ok || table != "nat" {
				return bad("bad chain line")
			}
			work[name] = nil // created or flushed
		case strings.HasPrefix(line, "-A "), strings.HasPrefix(line, "-D "):
			args := splitRule(line)
			chain, rule := args[1], quoteArgs(args[2:])
			if _, ok := work[chain]; !ok {
				return bad("no such chain")
			}
			if args[0] == "-A" {
				work[chain] = append(work[chain], rule)
				continue
			}
			i := slices.Index(work[chain], rule)
			if i < 0 {
				return bad("no such rule")
			}
			work[chain] = slices.Delete(work[chain], i, i+1)
		default:
			return bad("unsupported")
		}
	}
	if table != "" {
		return fmt.Errorf("fake restore: no COMMIT")
	}
	return nil
}

func (f *fakeIPT) restoreInputs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.restores...)
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
	chain := "NETSHIM-MASQ-x"
	if err := ensureMasq(f, chain, mustCIDRs(t, "10.1.0.0/24"), nil); err != nil {
		t.Fatal(err)
	}
	before := f.rules(false, chain)
	// A failed rewrite changes nothing: the old rules keep masquerading.
	f.fail["v4 restore"] = errors.New("iptables-restore: boom")
	nonMasq, _ := ParseNonMasqCIDRs("10.0.0.0/8")
	if err := ensureMasq(f, chain, mustCIDRs(t, "10.1.0.0/24"), nonMasq); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err %v, want the iptables-restore failure", err)
	}
	if got := f.rules(false, chain); !reflect.DeepEqual(got, before) {
		t.Errorf("after a failed rewrite the chain is %q, want the old %q", got, before)
	}
}

// TestRenderMasqGolden pins the exact iptables-restore input: one
// transaction that declares (creates or empties) the chain, writes all of
// its rules, and fixes the jump up.
func TestRenderMasqGolden(t *testing.T) {
	chain := masqChain("cbr0")
	nonMasq, _ := ParseNonMasqCIDRs("10.0.0.0/8,192.168.0.0/16")
	pod := mustCIDRs(t, "10.88.0.0/16")[0]
	ours := `-A POSTROUTING -s 10.88.0.0/16 -m comment --comment "` + masqComment + `" -j ` + chain
	old := `-A POSTROUTING -s 10.77.0.0/16 -m comment --comment "` + masqComment + `" -j ` + chain
	jump := func(line string) jumpRule { return jumpRule{line: line, args: splitRule(line)[2:]} }
	for _, tc := range []struct {
		name     string
		existing []jumpRule
		want     string
	}{
		{"fresh", nil, `*nat
:NETSHIM-MASQ-cbr0 - [0:0]
-A NETSHIM-MASQ-cbr0 -d 10.88.0.0/16 -j RETURN
-A NETSHIM-MASQ-cbr0 -d 10.0.0.0/8 -j RETURN
-A NETSHIM-MASQ-cbr0 -d 192.168.0.0/16 -j RETURN
-A NETSHIM-MASQ-cbr0 -j MASQUERADE
-A POSTROUTING -s 10.88.0.0/16 -m comment --comment "netshim kubenet: masquerade pod traffic leaving the non-masquerade CIDR" -j NETSHIM-MASQ-cbr0
COMMIT
`},
		{"jump in place", []jumpRule{jump(ours)}, `*nat
:NETSHIM-MASQ-cbr0 - [0:0]
-A NETSHIM-MASQ-cbr0 -d 10.88.0.0/16 -j RETURN
-A NETSHIM-MASQ-cbr0 -d 10.0.0.0/8 -j RETURN
-A NETSHIM-MASQ-cbr0 -d 192.168.0.0/16 -j RETURN
-A NETSHIM-MASQ-cbr0 -j MASQUERADE
COMMIT
`},
		{"stale and duplicate jumps", []jumpRule{jump(old), jump(ours), jump(ours)}, `*nat
:NETSHIM-MASQ-cbr0 - [0:0]
-A NETSHIM-MASQ-cbr0 -d 10.88.0.0/16 -j RETURN
-A NETSHIM-MASQ-cbr0 -d 10.0.0.0/8 -j RETURN
-A NETSHIM-MASQ-cbr0 -d 192.168.0.0/16 -j RETURN
-A NETSHIM-MASQ-cbr0 -j MASQUERADE
-D POSTROUTING -s 10.77.0.0/16 -m comment --comment "netshim kubenet: masquerade pod traffic leaving the non-masquerade CIDR" -j NETSHIM-MASQ-cbr0
-D POSTROUTING -s 10.88.0.0/16 -m comment --comment "netshim kubenet: masquerade pod traffic leaving the non-masquerade CIDR" -j NETSHIM-MASQ-cbr0
COMMIT
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := renderMasq(chain, pod, nonMasq[:2], tc.existing); got != tc.want {
				t.Errorf("renderMasq =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestEnsureMasqIsOneRestorePerFamily checks that a rewrite goes through
// iptables-restore only (no rule-by-rule -F/-A/-D on the live table) and
// that re-syncing keeps exactly one jump, also when duplicates were there.
func TestEnsureMasqIsOneRestorePerFamily(t *testing.T) {
	f := newFakeIPT()
	chain := masqChain("cbr0")
	ours := `-s 10.88.0.0/16 -m comment --comment "` + masqComment + `" -j ` + chain
	// Left by something else (or an older netshim): twice the same jump.
	f.chains[0]["POSTROUTING"] = []string{"-s 172.17.0.0/16 ! -o docker0 -j MASQUERADE", ours, ours}
	f.chains[0][chain] = []string{"-j MASQUERADE"}
	for range 3 {
		if err := ensureMasq(f, chain, mustCIDRs(t, "10.88.0.0/16,fd00:88::/64"), nil); err != nil {
			t.Fatal(err)
		}
		if got, want := f.rules(false, "POSTROUTING"), []string{"-s 172.17.0.0/16 ! -o docker0 -j MASQUERADE", ours}; !reflect.DeepEqual(got, want) {
			t.Fatalf("v4 POSTROUTING %q, want %q", got, want)
		}
		if got := f.rules(true, "POSTROUTING"); len(got) != 1 {
			t.Fatalf("v6 POSTROUTING %q, want one jump", got)
		}
	}
	for _, c := range f.calls {
		if !strings.Contains(c, " -S ") {
			t.Errorf("rule changed outside iptables-restore: %s", c)
		}
	}
	in := f.restoreInputs()
	if len(in) != 6 || !strings.HasPrefix(in[0], "v4 *nat\n") || !strings.HasPrefix(in[1], "v6 *nat\n") {
		t.Errorf("restore inputs %q, want one per family per sync", in)
	}
	// After the first sync there is nothing left to fix: no -D, no jump.
	if strings.Contains(in[2], "POSTROUTING") {
		t.Errorf("re-sync touched POSTROUTING:\n%s", in[2])
	}
}

// TestEnsureMasqRealIPTables feeds the rendered input to the real
// iptables-restore, in a throwaway network namespace so that the host's
// tables are never touched.
func TestEnsureMasqRealIPTables(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, b := range []string{"ip", "iptables-restore", "ip6tables-restore"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed", b)
		}
	}
	ns := fmt.Sprintf("nsmasq-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a netns: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipt := execIPTables{wrap: []string{"ip", "netns", "exec", ns}}
	if _, err := ipt.run(false, "-t", "nat", "-S"); err != nil {
		t.Skipf("iptables does not work here: %v", err)
	}
	chain := masqChain("cbr0")
	nonMasq, _ := ParseNonMasqCIDRs("10.0.0.0/8")
	for _, cidrs := range []string{"10.88.0.0/16", "10.88.0.0/16", "10.99.0.0/24"} {
		if err := ensureMasq(ipt, chain, mustCIDRs(t, cidrs), nonMasq); err != nil {
			t.Fatal(err)
		}
		jumps, err := jumpRules(ipt, false, chain)
		if err != nil {
			t.Fatal(err)
		}
		if len(jumps) != 1 || argValue(jumps[0].args, "-s") != cidrs || argValue(jumps[0].args, "--comment") != masqComment {
			t.Fatalf("after sync for %s the jumps are %+v", cidrs, jumps)
		}
		out, err := ipt.run(false, "-t", "nat", "-S", chain)
		if err != nil {
			t.Fatal(err)
		}
		want := "-N " + chain + "\n-A " + chain + " -d " + cidrs + " -j RETURN\n-A " + chain + " -d 10.0.0.0/8 -j RETURN\n-A " + chain + " -j MASQUERADE\n"
		if out != want {
			t.Fatalf("chain after sync for %s:\n%s\nwant\n%s", cidrs, out, want)
		}
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
