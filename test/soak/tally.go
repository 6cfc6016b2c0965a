package soak

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tally counts the failed calls a kubelet would have seen, by RPC and
// gRPC code.
type Tally struct {
	mu sync.Mutex
	m  map[string]map[codes.Code]int
}

// Add books err (nil books nothing) as a failure of rpc.
func (t *Tally) Add(rpc string, err error) {
	if err == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]map[codes.Code]int{}
	}
	if t.m[rpc] == nil {
		t.m[rpc] = map[codes.Code]int{}
	}
	t.m[rpc][status.Code(err)]++
}

// Total is the number of failed calls.
func (t *Tally) Total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, byCode := range t.m {
		for _, c := range byCode {
			n += c
		}
	}
	return n
}

// String is "none" or "RunPodSandbox Unavailable=3 Unknown=1; StopPodSandbox
// Unavailable=2", RPCs and codes sorted.
func (t *Tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) == 0 {
		return "none"
	}
	rpcs := make([]string, 0, len(t.m))
	for rpc := range t.m {
		rpcs = append(rpcs, rpc)
	}
	sort.Strings(rpcs)
	parts := make([]string, 0, len(rpcs))
	for _, rpc := range rpcs {
		var cs []string
		for code, n := range t.m[rpc] {
			cs = append(cs, fmt.Sprintf("%s=%d", code, n))
		}
		sort.Strings(cs)
		parts = append(parts, rpc+" "+strings.Join(cs, " "))
	}
	return strings.Join(parts, "; ")
}
