package dockerservice

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"k8s.io/klog/v2"
)

// capSysResource is CAP_SYS_RESOURCE's bit: without it a process may not
// lower an oom_score_adj below the floor it was given.
const capSysResource = 24

// OOMScoreAdjFloor decides the lowest oom_score_adj netshim asks Docker for.
//
// kubelet asks -998 for sandboxes (and -997 for Guaranteed pods), but
// lowering oom_score_adj needs CAP_SYS_RESOURCE; without it runc fails the
// start with an opaque "can't get final child's PID from pipe: EOF". In
// nested or VM setups root often lacks that capability, so in "auto" mode
// we detect it and clamp to our own oom_score_adj, the lowest value this
// process tree can still set. mode is "auto", "true" (always clamp) or
// "false" (never). The returned floor is nil when no clamping applies.
func OOMScoreAdjFloor(mode, procRoot string) (*int, error) {
	switch mode {
	case "false":
		return nil, nil
	case "true", "auto":
	default:
		return nil, fmt.Errorf("invalid --restrict-oom-score-adj %q: want auto, true or false", mode)
	}
	if mode == "auto" {
		has, err := hasCapability(procRoot+"/self/status", capSysResource)
		if err != nil {
			return nil, err
		}
		if has {
			return nil, nil
		}
	}
	raw, err := os.ReadFile(procRoot + "/self/oom_score_adj")
	if err != nil {
		return nil, fmt.Errorf("reading own oom_score_adj: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("parsing own oom_score_adj %q: %w", raw, err)
	}
	return &v, nil
}

// hasCapability reads the effective capability set from a /proc status file.
func hasCapability(statusPath string, bit uint) (bool, error) {
	f, err := os.Open(statusPath)
	if err != nil {
		return false, fmt.Errorf("reading capabilities: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("parsing CapEff in %s: %w", statusPath, err)
			}
			return caps&(1<<bit) != 0, nil
		}
	}
	if err := s.Err(); err != nil {
		return false, fmt.Errorf("reading %s: %w", statusPath, err)
	}
	return false, fmt.Errorf("no CapEff line in %s", statusPath)
}

// oomClamp applies the --restrict-oom-score-adj floor (Config's
// OOMScoreAdjFloor) to the oom_score_adj of every container netshim
// makes, infra containers included, warning once that it did.
type oomClamp struct {
	floor *int
	warn  sync.Once
}

func (o *oomClamp) apply(v int) int {
	c := clampOOMScoreAdj(v, o.floor)
	if c != v {
		o.warn.Do(func() {
			klog.InfoS("WARNING: netshim lacks CAP_SYS_RESOURCE, so negative oom_score_adj values cannot be set; clamping them (use --restrict-oom-score-adj=false to disable)", "requested", v, "used", c)
		})
	}
	return c
}

// clampOOMScoreAdj applies the floor, if any.
func clampOOMScoreAdj(v int, floor *int) int {
	if floor != nil && v < *floor {
		return *floor
	}
	return v
}
