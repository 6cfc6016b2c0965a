package main

import (
	"context"
	"fmt"
	"time"
)

// podKind is one kind of pod the sequential rounds interleave.
type podKind int

const (
	kindNetshim   podKind = iota // through the default-mode netshim
	kindPinned                   // through the pinned-mode netshim
	kindPauseless                // through the pause-less-mode netshim
	kindFloorLo                  // the floor, with the loopback ADD netshim also does
	kindFloorNoLo                // the floor without it
	numKinds
)

// roundKinds are the kinds of a round: the pinned and pause-less modes
// when they are measured, the floor without loopback only when asked (the
// bridge chain's rows have it; the chain comparison needs the fair floor
// only).
func (b *bench) roundKinds(withNoLo bool) []podKind {
	kinds := []podKind{kindNetshim}
	if b.pinned != nil && b.pinned.netshim.Running() {
		kinds = append(kinds, kindPinned)
	}
	if b.pauseless != nil && b.pauseless.netshim.Running() {
		kinds = append(kinds, kindPauseless)
	}
	kinds = append(kinds, kindFloorLo)
	if withNoLo {
		kinds = append(kinds, kindFloorNoLo)
	}
	return kinds
}

// roundOrder is the order in which round makes its pods: kinds rotated by
// the round number, so that over len(kinds) rounds every kind comes in
// every place once, and drift of the engine (or of the machine) over the
// run weighs on all of them alike.
func roundOrder(kinds []podKind, round int) []podKind {
	out := make([]podKind, len(kinds))
	for i := range kinds {
		out[i] = kinds[(i+round)%len(kinds)]
	}
	return out
}

// instanceOf is the netshim that makes pods of kind k, nil for the floor.
func (b *bench) instanceOf(k podKind) *instance {
	switch k {
	case kindNetshim:
		return b.instance
	case kindPinned:
		return b.pinned
	case kindPauseless:
		return b.pauseless
	}
	return nil
}

// others are the other running netshims of the run.
func (b *bench) others(in *instance) []*instance {
	var out []*instance
	for _, o := range b.running() {
		if o != in {
			out = append(out, o)
		}
	}
	return out
}

// markAll marks the proxies of ins.
func markAll(ins []*instance) []mark {
	out := make([]mark, len(ins))
	for i, in := range ins {
		out[i] = in.proxy.mark()
	}
	return out
}

// allSinceAll adds up what each of ins did since its mark in from.
func allSinceAll(ins []*instance, from []mark) requestCounts {
	var c requestCounts
	for i, in := range ins {
		c.add(in.allSince(from[i]))
	}
	return c
}

// seqSamples are what the sequential rounds measured, per kind; sample i
// of every kind is from round i.
type seqSamples struct {
	kinds  []podKind
	rounds int
	// run is RunPodSandbox for the netshim kinds and the floor's
	// create+start+inspect+ADD; down is Stop+Remove and the floor's
	// teardown.
	run, down    [numKinds][]time.Duration
	stop, remove [numKinds][]time.Duration
	// The Docker requests of the netshim kinds' calls, and those the other
	// netshims made meanwhile (their events watches follow every netshim
	// pod).
	runReqs, downReqs, otherReqs [numKinds]requestCounts
	// floorPhases are the steps of the floor with loopback's set-up.
	floorPhases []floorPhases
}

func (s *seqSamples) has(k podKind) bool { return len(s.run[k]) > 0 }

// sequentialRounds makes --seq rounds (after one that warms the caches and
// is not counted) of one pod of each kind, one after the other in the
// order roundOrder gives, and then tears them down in the same order; at
// most one pod of each kind exists at a time.
func (b *bench) sequentialRounds(ctx context.Context, prefix string, kinds []podKind) (*seqSamples, error) {
	s := &seqSamples{kinds: kinds, rounds: b.opts.seq}
	for round := -1; round < b.opts.seq; round++ {
		counted := round >= 0
		order := roundOrder(kinds, max(round, 0))
		var ids [numKinds]string
		var floorPods [numKinds]*floorPod
		for _, k := range order {
			cfg := b.podConfig(b.nextPodName(prefix))
			if in := b.instanceOf(k); in != nil {
				cfg.Labels[instanceLabel] = in.name
				others := b.others(in)
				before, othersBefore := in.proxy.mark(), markAll(others)
				id, d, err := in.runPod(ctx, cfg)
				if err != nil {
					return nil, err
				}
				ids[k] = id
				if counted {
					s.run[k] = append(s.run[k], d)
					s.runReqs[k].add(in.requestsSince(before))
					s.otherReqs[k].add(allSinceAll(others, othersBefore))
				}
				if k == kindPauseless {
					// Untimed: a pod that got a pause container after all
					// would make these rows the pinned mode's.
					if err := checkPauseless(ctx, b.docker, id); err != nil {
						return nil, fmt.Errorf("pod %s of the %s netshim: %w", cfg.GetMetadata().GetName(), in.name, err)
					}
				}
				continue
			}
			p, d, err := b.floor.run(ctx, cfg, k == kindFloorLo)
			if err != nil {
				return nil, err
			}
			floorPods[k] = p
			if counted {
				s.run[k] = append(s.run[k], d)
				if k == kindFloorLo {
					s.floorPhases = append(s.floorPhases, p.phases)
				}
			}
		}
		for _, k := range order {
			if in := b.instanceOf(k); in != nil {
				others := b.others(in)
				before, othersBefore := in.proxy.mark(), markAll(others)
				ds, err := in.stopPod(ctx, ids[k])
				if err != nil {
					return nil, err
				}
				dr, err := in.removePod(ctx, ids[k])
				if err != nil {
					return nil, err
				}
				if counted {
					s.stop[k] = append(s.stop[k], ds)
					s.remove[k] = append(s.remove[k], dr)
					s.down[k] = append(s.down[k], ds+dr)
					s.downReqs[k].add(in.requestsSince(before))
					s.otherReqs[k].add(allSinceAll(others, othersBefore))
				}
				continue
			}
			d, err := b.floor.teardown(ctx, floorPods[k])
			if err != nil {
				return nil, err
			}
			if counted {
				s.down[k] = append(s.down[k], d)
			}
		}
		if counted && (round+1)%10 == 0 {
			fmt.Printf("   %d/%d rounds\n", round+1, b.opts.seq)
		}
	}
	return s, nil
}

// reportChain adds the chain comparison of the rounds (RunPodSandbox in
// each mode and on the floor) and notes what the other netshims did
// during each netshim's calls.
func (b *bench) reportChain(s *seqSamples, key, title string) {
	c := chainResult{key: key, title: title, rounds: s.rounds, def: s.run[kindNetshim], pinned: s.run[kindPinned], pauseless: s.run[kindPauseless],
		floor: s.run[kindFloorLo], floorPhases: s.floorPhases, pinnedSkip: b.pinnedSkip}
	b.report.addChain(c)
	for _, k := range []podKind{kindNetshim, kindPinned, kindPauseless} {
		if n := s.otherReqs[k].total(); n > 0 {
			b.report.note("%s: during the %s netshim's calls (RunPodSandbox, Stop, Remove) the other netshims made %s Docker requests per round: %s. Their events watches follow every netshim pod on the engine; this is load on the same two cores that the floor does not have.",
				title, b.instanceOf(k).name, perOp(n, s.rounds), fmtKinds(s.otherReqs[k], s.rounds))
		}
	}
}
