package stats

import (
	"testing"
	"time"
)

func TestRateKeeperWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var k rateKeeper
	for _, step := range []struct {
		name    string
		at      time.Duration
		usage   uint64
		want    uint64
		hasRate bool
	}{
		{"first reading: nothing to compare with", 0, 1_000_000_000, 0, false},
		{"moments later: too short a window, no rate yet", 10 * time.Millisecond, 1_000_100_000, 0, false},
		{"two seconds on: 1 s of CPU over 2 s", 2 * time.Second, 2_000_000_000, 500_000_000, true},
		{"moments later: the same rate again", 2*time.Second + 5*time.Millisecond, 2_000_500_000, 500_000_000, true},
		{"a second later: 0.25 s over 1 s", 3 * time.Second, 2_250_000_000, 250_000_000, true},
		{"the counter went back: start over", 4 * time.Second, 100, 0, false},
		{"and a window later a rate again", 5 * time.Second, 500_000_100, 500_000_000, true},
		{"the clock stepped back: start over", 1 * time.Second, 600_000_000, 0, false},
	} {
		got, ok := k.rate("c", t0.Add(step.at), step.usage)
		if got != step.want || ok != step.hasRate {
			t.Errorf("%s: rate = %d, %v; want %d, %v", step.name, got, ok, step.want, step.hasRate)
		}
	}
	k.forgetAllBut(map[string]bool{"other": true})
	if _, ok := k.rate("c", t0.Add(10*time.Second), 700_000_000); ok {
		t.Error("a forgotten sample still gave a rate")
	}
}
