package soak

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestKillsPerKind(t *testing.T) {
	for _, tc := range []struct {
		minutes float64
		want    int
	}{{0.5, 1}, {3, 1}, {10, 1}, {10.5, 2}, {60, 6}} {
		if got := KillsPerKind(tc.minutes); got != tc.want {
			t.Errorf("KillsPerKind(%g) = %d, want %d", tc.minutes, got, tc.want)
		}
	}
}

func TestSchedule(t *testing.T) {
	for _, tc := range []struct {
		d       time.Duration
		perKind int
	}{{3 * time.Minute, 1}, {time.Hour, 6}, {10 * time.Second, 2}} {
		for seed := range uint64(20) {
			ks := Schedule(tc.d, tc.perKind, rand.New(rand.NewPCG(seed, 2)))
			if len(ks) != 3*tc.perKind {
				t.Fatalf("%s, %d per kind: %d kills", tc.d, tc.perKind, len(ks))
			}
			count := map[KillKind]int{}
			slot := tc.d * 8 / 10 / time.Duration(len(ks))
			for i, k := range ks {
				count[k.Kind]++
				if k.At < tc.d/10 || k.At > tc.d*9/10 {
					t.Errorf("%s seed %d: kill %d at %s, outside the middle 80%%", tc.d, seed, i, k.At)
				}
				if i > 0 && k.At-ks[i-1].At < slot/2 {
					t.Errorf("%s seed %d: kills %d and %d only %s apart (slot %s)", tc.d, seed, i-1, i, k.At-ks[i-1].At, slot)
				}
			}
			for _, kind := range []KillKind{KillNetshim, KillDockerd, KillCNI} {
				if count[kind] != tc.perKind {
					t.Errorf("%s seed %d: %d kills of %s, want %d", tc.d, seed, count[kind], kind, tc.perKind)
				}
			}
		}
	}
}
