package index

import "time"

// The heartbeat says whether Run's loop is alive, for a watchdog outside
// the index (systemd's, through cmd/netshim). The loop beats on every
// round of its reconnect loop and on a ticker inside the events session's
// select, so a loop that is retrying a Docker that is down keeps beating,
// and one blocked (on the index's lock, on a channel nobody serves) stops.
// The beat takes the index's lock, as the loop's own work does; the
// reader does not, so a watchdog never waits on what it watches.

// Heartbeat is when Run's loop last beat; zero before Run started.
func (x *Index) Heartbeat() time.Time {
	ns := x.heartbeat.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// HeartbeatPeriod is the longest a live loop goes between two beats (give
// or take scheduling): a session's ticker, then the stream breaks just
// before the next tick and the reconnect backoff runs its longest. A
// heartbeat much older than this means the loop is stuck.
func (x *Index) HeartbeatPeriod() time.Duration {
	return x.beatInterval() + x.opts.ReconnectMaxDelay
}

// beatInterval is the period of the events session's beat ticker.
func (x *Index) beatInterval() time.Duration {
	return max(x.opts.StuckAfter/4, time.Millisecond)
}

// WedgeForTest takes the index's lock and never gives it back: the loop
// stops at its next beat, as it would in a deadlock. Only for showing that
// the watchdog acts on a stuck loop (netshim --test-wedge-index-on-sigusr2).
func (x *Index) WedgeForTest() {
	x.mu.Lock()
}
