package soak

import (
	"math/rand/v2"
	"time"
)

// KillKind is what a kill hits.
type KillKind string

// The kinds of kill: SIGKILL to netshim (restarted at once, as systemd
// would), to dockerd (restarted at once; its containers die with it, as
// there is no live-restore), and to a CNI plugin netshim is running (its
// ADD or DEL fails half-way).
const (
	KillNetshim KillKind = "netshim"
	KillDockerd KillKind = "dockerd"
	KillCNI     KillKind = "cni-plugin"
)

// Kill is one planned kill, At after the start of the load.
type Kill struct {
	At   time.Duration
	Kind KillKind
}

// KillsPerKind is how many kills of each kind a run of minutes gets: one
// per started 10 minutes, so CI's 3 minutes see each once and an hour
// six of each. Bounded, so that the load, not recovery, fills the run.
func KillsPerKind(minutes float64) int {
	n := int(minutes/10 + 0.999)
	return max(n, 1)
}

// Schedule spreads perKind kills of each kind over the middle 80 % of a
// run of length d (the first tenth lets the load build up; the last
// leaves time to see recovery before the load stops). The span is cut
// into one slot per kill and each kill falls at a random point of the
// middle half of its slot, so two kills are at least half a slot apart
// and recovery from one is under way before the next; which kind falls in
// which slot is random too.
func Schedule(d time.Duration, perKind int, rng *rand.Rand) []Kill {
	kinds := make([]KillKind, 0, 3*perKind)
	for range perKind {
		kinds = append(kinds, KillNetshim, KillDockerd, KillCNI)
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	start, span := d/10, d*8/10
	slot := span / time.Duration(len(kinds))
	out := make([]Kill, len(kinds))
	for i, k := range kinds {
		jitter := time.Duration(rng.Int64N(int64(slot/2) + 1))
		out[i] = Kill{At: start + time.Duration(i)*slot + slot/4 + jitter, Kind: k}
	}
	return out
}
