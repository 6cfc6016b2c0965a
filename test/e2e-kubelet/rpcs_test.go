//go:build kubelet

package e2ekubelet

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// rpcStats counts netshim's RPCs in its log (at -v>=6 every RPC is logged:
// "RPC" on success, "RPC failed" with the gRPC code otherwise; every line
// an RPC causes names it as rpc="Method").
type rpcStats struct {
	calls, fails map[string]int
	codes        map[string][]string       // method -> codes in the order first seen
	codeCount    map[string]map[string]int // method -> code -> failures
	// mentions counts every line naming a method, streams included
	// (GetContainerEvents is logged when its stream ends).
	mentions map[string]int
}

var (
	rpcMethod = regexp.MustCompile(`\brpc="([A-Za-z]+)"`)
	rpcCode   = regexp.MustCompile(`code="([A-Za-z]+)"`)
)

func parseRPCs(log string) *rpcStats {
	s := &rpcStats{calls: map[string]int{}, fails: map[string]int{}, codes: map[string][]string{},
		codeCount: map[string]map[string]int{}, mentions: map[string]int{}}
	for _, line := range strings.Split(log, "\n") {
		m := rpcMethod.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		method := m[1]
		s.mentions[method]++
		failed := strings.Contains(line, `"RPC failed"`)
		if !failed && !strings.Contains(line, `"RPC"`) {
			continue
		}
		s.calls[method]++
		if !failed {
			continue
		}
		s.fails[method]++
		if c := rpcCode.FindStringSubmatch(line); c != nil {
			if s.codeCount[method] == nil {
				s.codeCount[method] = map[string]int{}
			}
			if s.codeCount[method][c[1]] == 0 {
				s.codes[method] = append(s.codes[method], c[1])
			}
			s.codeCount[method][c[1]]++
		}
	}
	return s
}

// table is the RPC table: calls, failures and their codes per method.
func (s *rpcStats) table() string {
	var rows []string
	for m, n := range s.calls {
		var codes strings.Builder
		for _, c := range s.codes[m] {
			fmt.Fprintf(&codes, "%sx%d ", c, s.codeCount[m][c])
		}
		rows = append(rows, fmt.Sprintf("%-26s %7d %7d  %s\n", m, n, s.fails[m], codes.String()))
	}
	sort.Strings(rows)
	return fmt.Sprintf("%-26s %7s %7s  %s\n", "method", "calls", "failed", "codes") + strings.Join(rows, "")
}

func TestRPCTable(t *testing.T) {
	log := `I1124 13:13:29.381533    8952 interceptor.go:43] "RPC" rpc="Version" duration="2.483µs"
E1124 13:13:36.868271    8952 interceptor.go:40] "RPC failed" err="rpc error: code = NotFound desc = x" rpc="ContainerStatus" code="NotFound" duration="14µs"
I1124 13:13:37.000000    8952 interceptor.go:43] "RPC" rpc="ContainerStatus" duration="2µs"
E1124 13:13:38.868271    8952 interceptor.go:40] "RPC failed" err="x" rpc="ContainerStatus" code="Unavailable" duration="14µs"
E1124 13:13:39.868271    8952 interceptor.go:40] "RPC failed" err="x" rpc="ContainerStatus" code="NotFound" duration="14µs"
I1124 13:14:00.000000    8952 container_events.go:500] "Event stream ended" rpc="GetContainerEvents" subscribers=0
I1124 13:14:00.000001    8952 other.go:1] "no method here"
`
	s := parseRPCs(log)
	want := "method                       calls  failed  codes\n" +
		"ContainerStatus                  4       3  NotFoundx2 Unavailablex1 \n" +
		"Version                          1       0  \n"
	if got := s.table(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if s.mentions["GetContainerEvents"] != 1 || s.calls["GetContainerEvents"] != 0 {
		t.Errorf("GetContainerEvents: %d mentions, %d calls; want 1 and 0", s.mentions["GetContainerEvents"], s.calls["GetContainerEvents"])
	}
}
