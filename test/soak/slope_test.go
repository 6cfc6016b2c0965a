package soak

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFitSlope(t *testing.T) {
	line := func(seg int, x0, x1, step, base, slope float64) []Sample {
		var out []Sample
		for x := x0; x <= x1; x += step {
			out = append(out, Sample{Seg: seg, X: x, Y: base + slope*x})
		}
		return out
	}
	noisy := func(ss []Sample, sd float64, seed uint64) []Sample {
		r := rand.New(rand.NewPCG(seed, 1))
		out := make([]Sample, len(ss))
		for i, s := range ss {
			s.Y += r.NormFloat64() * sd
			out[i] = s
		}
		return out
	}
	tests := []struct {
		name         string
		samples      []Sample
		slope        float64 // want, within tol
		tol          float64
		insufficient bool
		exceeds      float64 // a bound the fit must exceed (0: none)
		within       float64 // a bound the fit must not exceed (0: none)
	}{
		{name: "flat", samples: line(1, 0, 1000, 50, 40e6, 0), slope: 0, tol: 1e-9, within: 1e-6},
		{name: "one segment growing", samples: line(1, 0, 1000, 50, 40e6, 1000), slope: 1000, tol: 1e-6, exceeds: 500},
		{
			// Each restart resets the value: one line through all of it
			// would fall; the fit must see the growth within each process.
			name:    "restarts reset the value",
			samples: append(append(line(1, 0, 300, 10, 50, 0.1), line(2, 310, 600, 10, 10, 0.1)...), line(3, 610, 900, 10, 5, 0.1)...),
			slope:   0.1, tol: 1e-9, exceeds: 0.05,
		},
		{
			name:    "a one-sample segment is left out",
			samples: append(line(1, 0, 500, 10, 0, 2), Sample{Seg: 2, X: 510, Y: -1e9}),
			slope:   2, tol: 1e-9,
		},
		{
			// Noise with no growth over few samples: a wide error, so the
			// bound is not exceeded by chance.
			name:    "noise without growth",
			samples: noisy(line(1, 0, 150, 10, 300, 0), 20, 7),
			slope:   0, tol: 0.5, within: 0.05,
		},
		{name: "no samples", insufficient: true},
		{name: "one sample per segment", samples: []Sample{{1, 0, 1}, {2, 10, 2}, {3, 20, 3}}, insufficient: true},
		{name: "two samples: nothing left for the scatter", samples: line(1, 0, 10, 10, 0, 1), insufficient: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := FitSlope(tc.samples)
			if f.Insufficient != tc.insufficient {
				t.Fatalf("Insufficient = %v, want %v (%+v)", f.Insufficient, tc.insufficient, f)
			}
			if tc.insufficient {
				if f.Exceeds(0) {
					t.Errorf("an insufficient fit exceeds a bound of 0")
				}
				return
			}
			if math.Abs(f.Slope-tc.slope) > tc.tol {
				t.Errorf("slope = %g ± %g, want %g ± %g", f.Slope, f.SE, tc.slope, tc.tol)
			}
			if tc.exceeds != 0 && !f.Exceeds(tc.exceeds) {
				t.Errorf("fit %+v does not exceed %g", f, tc.exceeds)
			}
			if tc.within != 0 && f.Exceeds(tc.within) {
				t.Errorf("fit %+v exceeds %g", f, tc.within)
			}
		})
	}
}

func TestFitPer1000(t *testing.T) {
	f := Fit{Slope: 2048, SE: 1024, N: 10, Segments: 1}
	if got, want := f.Per1000(1<<20), "+1.95 ± 0.98"; got != want {
		t.Errorf("Per1000 = %q, want %q", got, want)
	}
	if got, want := (Fit{N: 1, Segments: 0, Insufficient: true}).Per1000(1), "n/a (1 samples in 0 segments)"; got != want {
		t.Errorf("Per1000 = %q, want %q", got, want)
	}
}
