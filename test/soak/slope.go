package soak

import (
	"fmt"
	"math"
)

// Sample is one reading of a metric: X is the number of lifecycles
// completed when it was taken, Y the metric's value, and Seg the netshim
// process it was read from (its start count). A restarted netshim starts
// from a fresh heap, so each process is its own segment.
type Sample struct {
	Seg  int
	X, Y float64
}

// Fit is the growth of a metric with the lifecycles: Slope per lifecycle,
// its standard error, and how many samples and segments went into it.
type Fit struct {
	Slope, SE    float64
	N, Segments  int
	Insufficient bool // too few samples to fit (Slope and SE are 0)
}

// FitSlope fits one slope common to every segment, each segment with an
// intercept of its own (a fixed-effects least-squares fit): a netshim
// restart resets memory, goroutines and descriptors, which a single line
// through all the samples would read as shrinkage, and the reset must not
// hide growth within each process. Segments of one sample tell nothing
// about growth and are left out.
func FitSlope(samples []Sample) Fit {
	bySeg := map[int][]Sample{}
	var order []int
	for _, s := range samples {
		if _, ok := bySeg[s.Seg]; !ok {
			order = append(order, s.Seg)
		}
		bySeg[s.Seg] = append(bySeg[s.Seg], s)
	}
	type centred struct{ dx, dy float64 }
	var pts []centred
	segs := 0
	for _, seg := range order {
		ss := bySeg[seg]
		if len(ss) < 2 {
			continue
		}
		var mx, my float64
		for _, s := range ss {
			mx += s.X
			my += s.Y
		}
		mx /= float64(len(ss))
		my /= float64(len(ss))
		for _, s := range ss {
			pts = append(pts, centred{s.X - mx, s.Y - my})
		}
		segs++
	}
	var sxx, sxy float64
	for _, p := range pts {
		sxx += p.dx * p.dx
		sxy += p.dx * p.dy
	}
	// One degree of freedom per intercept and one for the slope; at least
	// one must be left to estimate the scatter.
	dof := len(pts) - segs - 1
	if sxx == 0 || dof < 1 {
		return Fit{N: len(pts), Segments: segs, Insufficient: true}
	}
	b := sxy / sxx
	var sse float64
	for _, p := range pts {
		e := p.dy - b*p.dx
		sse += e * e
	}
	return Fit{Slope: b, SE: math.Sqrt(sse / float64(dof) / sxx), N: len(pts), Segments: segs}
}

// Exceeds says whether the metric grows faster than bound per lifecycle
// with about 97.5 % confidence: the slope less two standard errors is
// above the bound. A short run (CI's 3 minutes) has wide errors and fails
// only on a steep leak; an hour's run pins the slope down. A fit without
// enough samples exceeds nothing, and the report says so.
func (f Fit) Exceeds(bound float64) bool {
	return !f.Insufficient && f.Slope-2*f.SE > bound
}

// Per1000 formats the slope per 1,000 lifecycles, divided by unit (e.g.
// 1<<20 for MiB), with its standard error.
func (f Fit) Per1000(unit float64) string {
	if f.Insufficient {
		return fmt.Sprintf("n/a (%d samples in %d segments)", f.N, f.Segments)
	}
	return fmt.Sprintf("%+.2f ± %.2f", f.Slope*1000/unit, f.SE*1000/unit)
}
