package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// netshim as a systemd Type=notify service (deploy/systemd): READY=1 once
// the state of Docker's containers has been read, so that nothing ordered
// after netshim, and no client that connected early, sees a runtime that
// would answer "unavailable"; STATUS= lines saying what it does or waits
// for; STOPPING=1 when it begins to shut down; WATCHDOG=1 pings while the
// index loop is alive. Without NOTIFY_SOCKET every notification is a
// no-op.

// notifier sends the service manager a notification (sd_notify(3)).
type notifier interface {
	// Notify sends one message: "READY=1", "STATUS=...", several
	// newline-separated assignments.
	Notify(state string) error
}

// sdNotifier notifies the service manager at $NOTIFY_SOCKET, and nobody
// when it is unset. It leaves NOTIFY_SOCKET in the environment (go-systemd
// reads it on every call): the CNI plugins netshim runs inherit it, and
// NotifyAccess=main (netshim.service) makes systemd ignore anything they
// would send.
type sdNotifier struct{}

func (sdNotifier) Notify(state string) error {
	_, err := daemon.SdNotify(false, state)
	return err
}

// waitLogEvery is how often the log repeats that netshim still waits for
// Docker; waitPollEvery how often it looks whether the reason changed.
const (
	waitLogEvery  = 30 * time.Second
	waitPollEvery = 2 * time.Second
)

// supervisor is netshim's side of the service manager's supervision.
// A notification that cannot be sent is logged, never fatal: netshim
// serves kubelet either way, and systemd acts on what it did not get
// (start timeout, watchdog).
type supervisor struct {
	n notifier
	// managed: a service manager listens (NOTIFY_SOCKET is set) and
	// waits for READY=1.
	managed bool
	clock   clock.WithTicker

	mu sync.Mutex
	// status is the last STATUS= set, restored when the watchdog's
	// complaint ends.
	status string
}

func newSupervisor(n notifier, managed bool, clk clock.WithTicker) *supervisor {
	return &supervisor{n: n, managed: managed, clock: clk}
}

// newSystemdSupervisor supervises through $NOTIFY_SOCKET, if set.
func newSystemdSupervisor() *supervisor {
	return newSupervisor(sdNotifier{}, os.Getenv("NOTIFY_SOCKET") != "", clock.RealClock{})
}

func (s *supervisor) notify(state string) {
	if err := s.n.Notify(state); err != nil {
		klog.ErrorS(err, "Notifying the service manager", "state", state)
	}
}

// setStatus sends STATUS=msg, with extra assignments (READY=1, STOPPING=1)
// first in the same message so that systemd takes both at once.
func (s *supervisor) setStatus(msg string, extra ...string) {
	s.mu.Lock()
	s.status = msg
	s.mu.Unlock()
	s.notify(strings.Join(append(extra, "STATUS="+oneLine(msg)), "\n"))
}

// oneLine keeps a status on its line: a newline would start a new
// assignment.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func (s *supervisor) ready(status string)    { s.setStatus(status, daemon.SdNotifyReady) }
func (s *supervisor) stopping(status string) { s.setStatus(status, daemon.SdNotifyStopping) }

// waitSynced blocks until synced is closed (nil) or ctx ends (an error
// saying what netshim waited for). Meanwhile STATUS= says why it waits
// (reason(), each time that changes) and the log repeats it every
// waitLogEvery. It does not extend systemd's start timeout
// (EXTEND_TIMEOUT_USEC): TimeoutStartSec= is the bound on a Docker that
// never answers, after which systemd stops netshim and, Restart=always,
// starts it again.
func (s *supervisor) waitSynced(ctx context.Context, synced <-chan struct{}, what string, reason func() string) error {
	select {
	case <-synced:
		return nil
	default:
	}
	start := s.clock.Now()
	last := reason()
	klog.InfoS("Waiting for the first read of Docker's state before serving CRI", "docker", what, "reason", last)
	s.setStatus(fmt.Sprintf("Waiting for Docker at %s: %s", what, last))
	tick := s.clock.NewTicker(waitPollEvery)
	defer tick.Stop()
	lastLog := start
	for {
		select {
		case <-synced:
			klog.InfoS("Docker's state read; serving CRI", "waited", s.clock.Since(start).Round(time.Millisecond))
			return nil
		case <-ctx.Done():
			return fmt.Errorf("stopped after waiting %s for Docker at %s (%s): netshim serves CRI only once it has read Docker's containers", s.clock.Since(start).Round(time.Second), what, last)
		case <-tick.C():
		}
		now := s.clock.Now()
		r := reason()
		if r != last || now.Sub(lastLog) >= waitLogEvery {
			klog.InfoS("Still waiting for Docker before serving CRI", "docker", what, "reason", r, "waited", now.Sub(start).Round(time.Second))
			lastLog = now
		}
		if r != last {
			last = r
			s.setStatus(fmt.Sprintf("Waiting for Docker at %s: %s", what, r))
		}
	}
}

// statusEvery is how often the serving status (its counts) is refreshed.
const statusEvery = 30 * time.Second

// keepStatus sends STATUS=status() every `every` when it changed, until ctx
// ends; it returns once it sends no more.
func (s *supervisor) keepStatus(ctx context.Context, every time.Duration, status func() string) {
	tick := s.clock.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		msg := status()
		s.mu.Lock()
		same := msg == s.status
		s.mu.Unlock()
		if !same {
			s.setStatus(msg)
		}
	}
}

// heartbeatFunc says when the watched loop last beat and the longest a
// live loop goes between beats (DockerService.IndexHeartbeat).
type heartbeatFunc func() (last time.Time, period time.Duration)

// watchdog pings the service manager (WATCHDOG=1) every timeout/2 while
// the index loop beats, until ctx ends. A loop that stopped beating gets
// no pings: systemd then kills netshim (WatchdogSignal=, SIGABRT by
// default: the Go runtime prints every goroutine's stack to the journal
// first) and restarts it. timeout is WATCHDOG_USEC.
func (s *supervisor) watchdog(ctx context.Context, timeout time.Duration, heartbeat heartbeatFunc) {
	g := watchdogGate{timeout: timeout, since: s.clock.Now()}
	tick := s.clock.NewTicker(timeout / 2)
	defer tick.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C():
		}
		// Judged at the tick's time, not at the time of the check: a
		// beat read after the tick counts, and a check that runs late
		// does not count the delay against the loop.
		last, period := heartbeat()
		ping, changed, age := g.check(now, last, period)
		switch {
		case changed && !ping:
			klog.ErrorS(nil, "The Docker state index loop stopped: withholding systemd's watchdog ping, so that systemd restarts netshim", "lastBeat", age.Round(time.Millisecond), "watchdog", timeout)
			// Not setStatus: the status to restore is the one before.
			s.notify("STATUS=" + oneLine(fmt.Sprintf("The Docker state index loop has not run for %s: withholding the watchdog ping", age.Round(time.Second))))
		case changed:
			klog.InfoS("The Docker state index loop runs again: pinging systemd's watchdog again")
			s.mu.Lock()
			status := s.status
			s.mu.Unlock()
			if status != "" {
				s.notify("STATUS=" + oneLine(status))
			}
		}
		if ping {
			s.notify(daemon.SdNotifyWatchdog)
		}
	}
}

// watchdogGate decides, tick by tick, whether the watched loop is alive.
type watchdogGate struct {
	timeout time.Duration
	// since is when watching began: a loop that has not beaten yet is
	// given until then plus the allowance.
	since time.Time
	stuck bool
}

// check says whether to ping at now, given the loop's last beat and beat
// period; changed is true when the verdict differs from the last tick's,
// and age is how old the beat is. A beat is fresh while younger than the
// watchdog timeout, or than two beat periods when that is longer: a loop
// that beats every 7.5s must not be called stuck by a 2s watchdog. So a
// stuck loop is noticed after that allowance, and systemd acts one
// timeout after the last ping.
func (g *watchdogGate) check(now, last time.Time, period time.Duration) (ping, changed bool, age time.Duration) {
	if last.Before(g.since) {
		last = g.since
	}
	age = now.Sub(last)
	alive := age <= max(g.timeout, 2*period)
	changed = alive == g.stuck
	g.stuck = !alive
	return alive, changed, age
}

// watchdogTimeout is WATCHDOG_USEC if systemd watches this process (and
// unsets WATCHDOG_USEC and WATCHDOG_PID, which are not the children's),
// else 0.
func watchdogTimeout() time.Duration {
	d, err := daemon.SdWatchdogEnabled(true)
	if err != nil {
		klog.ErrorS(err, "Reading systemd's watchdog settings; not pinging it")
		return 0
	}
	return d
}

// wedgeIndexOnSignal wedges the index loop at the first SIGUSR2
// (--test-wedge-index-on-sigusr2): the way to show, on a real systemd, that
// a hung loop stops the watchdog pings and gets netshim restarted
// (make e2e-vm). The rest of netshim keeps running, as in a real deadlock.
func wedgeIndexOnSignal(ctx context.Context, ds interface{ WedgeIndexForTest() }) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	klog.InfoS("WARNING: --test-wedge-index-on-sigusr2: SIGUSR2 will wedge the Docker state index loop (a test hook)")
	go func() {
		defer signal.Stop(ch)
		select {
		case <-ctx.Done():
		case <-ch:
			klog.InfoS("SIGUSR2: wedging the Docker state index loop (--test-wedge-index-on-sigusr2)")
			ds.WedgeIndexForTest()
		}
	}()
}
