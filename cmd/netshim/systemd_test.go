package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/test/harness"
)

// fakeNotifier records what netshim would tell systemd.
type fakeNotifier struct{ sent chan string }

func newFakeNotifier() *fakeNotifier { return &fakeNotifier{sent: make(chan string, 100)} }

func (f *fakeNotifier) Notify(state string) error {
	f.sent <- state
	return nil
}

// next is the next notification, waiting a bounded time for it.
func (f *fakeNotifier) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-f.sent:
		return s
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("no notification")
		return ""
	}
}

// drained is what was sent and not read yet.
func (f *fakeNotifier) drained() []string {
	var out []string
	for {
		select {
		case s := <-f.sent:
			out = append(out, s)
		default:
			return out
		}
	}
}

var t0 = time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC)

func TestWatchdogGate(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type tick struct {
		now, beat   float64 // seconds after t0; beat < 0: never beat
		period      time.Duration
		ping, chg   bool
		wantAgeSecs float64
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		ticks   []tick
	}{
		{"a beating loop is fed", 10 * time.Second, []tick{
			{now: 5, beat: 4, period: time.Second, ping: true, wantAgeSecs: 1},
			{now: 10, beat: 9.5, period: time.Second, ping: true, wantAgeSecs: 0.5},
		}},
		{"a loop that stops beating is starved after the timeout, and fed again when it beats", 10 * time.Second, []tick{
			{now: 5, beat: 5, period: time.Second, ping: true, wantAgeSecs: 0},
			{now: 15, beat: 5, period: time.Second, ping: true, wantAgeSecs: 10},
			{now: 20, beat: 5, period: time.Second, ping: false, chg: true, wantAgeSecs: 15},
			{now: 25, beat: 5, period: time.Second, ping: false, wantAgeSecs: 20},
			{now: 30, beat: 29, period: time.Second, ping: true, chg: true, wantAgeSecs: 1},
		}},
		{"a watchdog shorter than the loop's beat waits two beat periods", 2 * time.Second, []tick{
			{now: 1, beat: 0, period: 7500 * time.Millisecond, ping: true, wantAgeSecs: 1},
			{now: 14, beat: 0, period: 7500 * time.Millisecond, ping: true, wantAgeSecs: 14},
			{now: 15.5, beat: 0, period: 7500 * time.Millisecond, ping: false, chg: true, wantAgeSecs: 15.5},
		}},
		{"a loop that has not beaten yet counts from the watchdog's start", 10 * time.Second, []tick{
			{now: 5, beat: -1, period: time.Second, ping: true, wantAgeSecs: 5},
			{now: 11, beat: -1, period: time.Second, ping: false, chg: true, wantAgeSecs: 11},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := watchdogGate{timeout: tc.timeout, since: t0}
			for i, k := range tc.ticks {
				beat := time.Time{}
				if k.beat >= 0 {
					beat = at(k.beat)
				}
				ping, chg, age := g.check(at(k.now), beat, k.period)
				if ping != k.ping || chg != k.chg || age != at(k.wantAgeSecs).Sub(t0) {
					t.Errorf("tick %d (now %v, beat %v): ping %v changed %v age %v; want %v %v %vs", i, k.now, k.beat, ping, chg, age, k.ping, k.chg, k.wantAgeSecs)
				}
			}
		})
	}
}

// The watchdog pings every timeout/2 while the loop beats, withholds the
// pings (and says why in STATUS=) once it stopped, and resumes when it
// beats again.
func TestWatchdogFollowsTheHeartbeat(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	n := newFakeNotifier()
	s := newSupervisor(n, true, fc)
	s.setStatus("Serving CRI on /run/netshim/netshim.sock; 0 sandboxes, 0 containers")
	n.next(t)

	var mu sync.Mutex
	beat := t0
	setBeat := func(b time.Time) { mu.Lock(); beat = b; mu.Unlock() }
	calls := make(chan struct{}, 100)
	heartbeat := func() (time.Time, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		calls <- struct{}{}
		return beat, time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchdog(ctx, 10*time.Second, heartbeat)
	}()
	testutil.Eventually(t, "the watchdog's ticker", fc.HasWaiters)
	// Each step is one tick; the next waits until the watchdog read the
	// heartbeat for it, so that no tick is merged into the next.
	step := func() {
		t.Helper()
		fc.Step(5 * time.Second)
		select {
		case <-calls:
		case <-time.After(testutil.EventuallyTimeout):
			t.Fatal("the watchdog did not tick")
		}
	}
	step() // +5s: beat 5s old
	setBeat(fc.Now())
	step() // +10s: 5s old
	step() // +15s: 10s old, the timeout: still fed
	step() // +20s: 15s old: starved
	step() // +25s: 20s old: starved, said once
	setBeat(fc.Now())
	step() // +30s: fresh again
	cancel()
	<-done

	var got []string
	for range 6 {
		got = append(got, n.next(t))
	}
	got = append(got, n.drained()...)
	want := []string{
		"WATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1",
		"STATUS=The Docker state index loop has not run for 15s: withholding the watchdog ping",
		"STATUS=Serving CRI on /run/netshim/netshim.sock; 0 sandboxes, 0 containers",
		"WATCHDOG=1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("notifications:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The serving status is re-sent when it changes, not on every tick.
func TestKeepStatus(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	n := newFakeNotifier()
	s := newSupervisor(n, true, fc)
	s.ready("Serving CRI on /s; 0 sandboxes, 0 containers")
	var mu sync.Mutex
	current := "Serving CRI on /s; 0 sandboxes, 0 containers"
	set := func(v string) { mu.Lock(); current = v; mu.Unlock() }
	calls := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.keepStatus(ctx, statusEvery, func() string {
			mu.Lock()
			defer mu.Unlock()
			calls <- struct{}{}
			return current
		})
	}()
	testutil.Eventually(t, "the status ticker", fc.HasWaiters)
	step := func() {
		t.Helper()
		fc.Step(statusEvery)
		select {
		case <-calls:
		case <-time.After(testutil.EventuallyTimeout):
			t.Fatal("keepStatus did not tick")
		}
	}
	step() // unchanged: nothing sent
	set("Serving CRI on /s; 1 sandboxes, 2 containers")
	step()
	step() // unchanged again
	set("Serving CRI on /s; 0 sandboxes, 0 containers")
	step()
	cancel()
	<-done
	var got []string
	for range 3 {
		got = append(got, n.next(t))
	}
	got = append(got, n.drained()...)
	want := []string{
		"READY=1\nSTATUS=Serving CRI on /s; 0 sandboxes, 0 containers",
		"STATUS=Serving CRI on /s; 1 sandboxes, 2 containers",
		"STATUS=Serving CRI on /s; 0 sandboxes, 0 containers",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
}

func TestWaitSynced(t *testing.T) {
	t.Run("already synced: no wait, no status", func(t *testing.T) {
		n := newFakeNotifier()
		s := newSupervisor(n, true, clocktesting.NewFakeClock(t0))
		synced := make(chan struct{})
		close(synced)
		if err := s.waitSynced(context.Background(), synced, "unix:///d.sock", func() string { return "r" }); err != nil {
			t.Fatal(err)
		}
		if got := n.drained(); len(got) != 0 {
			t.Errorf("sent %q, want nothing", got)
		}
	})

	t.Run("says why it waits until synced", func(t *testing.T) {
		fc := clocktesting.NewFakeClock(t0)
		n := newFakeNotifier()
		s := newSupervisor(n, true, fc)
		var mu sync.Mutex
		reason := "docker: not connected yet"
		setReason := func(r string) { mu.Lock(); reason = r; mu.Unlock() }
		synced := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- s.waitSynced(context.Background(), synced, "unix:///d.sock", func() string {
				mu.Lock()
				defer mu.Unlock()
				return reason
			})
		}()
		if got, want := n.next(t), "STATUS=Waiting for Docker at unix:///d.sock: docker: not connected yet"; got != want {
			t.Errorf("first status %q, want %q", got, want)
		}
		testutil.Eventually(t, "the wait's ticker", fc.HasWaiters)
		setReason("docker: Cannot connect to the Docker daemon\nat unix:///d.sock")
		fc.Step(waitPollEvery)
		if got, want := n.next(t), "STATUS=Waiting for Docker at unix:///d.sock: docker: Cannot connect to the Docker daemon at unix:///d.sock"; got != want {
			t.Errorf("second status %q, want %q", got, want)
		}
		close(synced)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("waitSynced = %v once synced", err)
			}
		case <-time.After(testutil.EventuallyTimeout):
			t.Fatal("waitSynced did not return once synced")
		}
	})

	t.Run("stopped while waiting", func(t *testing.T) {
		s := newSupervisor(newFakeNotifier(), true, clocktesting.NewFakeClock(t0))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := s.waitSynced(ctx, make(chan struct{}), "unix:///d.sock", func() string { return "docker: not connected yet" })
		for _, want := range []string{"stopped after waiting 0s for Docker at unix:///d.sock (docker: not connected yet)"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want one containing %q", err, want)
			}
		}
	})
}

func TestReadyAndStoppingMessages(t *testing.T) {
	n := newFakeNotifier()
	s := newSupervisor(n, true, clocktesting.NewFakeClock(t0))
	s.ready("Serving CRI on /s; 1 sandboxes, 2 containers")
	s.stopping("Shutting down:\nwaiting")
	got := n.drained()
	want := []string{"READY=1\nSTATUS=Serving CRI on /s; 1 sandboxes, 2 containers", "STOPPING=1\nSTATUS=Shutting down: waiting"}
	if !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
}

// sdNotifier speaks to a datagram socket at NOTIFY_SOCKET, as systemd's;
// without one it does nothing.
func TestSdNotifier(t *testing.T) {
	dir, err := os.MkdirTemp("", "nsh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := dir + "/notify"
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	t.Setenv("NOTIFY_SOCKET", path)
	if s := newSystemdSupervisor(); !s.managed {
		t.Error("not managed with NOTIFY_SOCKET set")
	}
	if err := (sdNotifier{}).Notify("READY=1\nSTATUS=serving"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(testutil.EventuallyTimeout))
	buf := make([]byte, 4096)
	k, err := conn.Read(buf)
	if err != nil || string(buf[:k]) != "READY=1\nSTATUS=serving" {
		t.Errorf("received %q, %v", buf[:k], err)
	}

	os.Unsetenv("NOTIFY_SOCKET")
	if s := newSystemdSupervisor(); s.managed {
		t.Error("managed without NOTIFY_SOCKET")
	}
	if err := (sdNotifier{}).Notify("READY=1"); err != nil {
		t.Errorf("Notify without NOTIFY_SOCKET = %v, want a no-op", err)
	}
}

func TestWatchdogTimeout(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name, usec, pid string
		want            time.Duration
	}{
		{"not set", "", "", 0},
		{"for this process", "60000000", self, time.Minute},
		{"no WATCHDOG_PID", "2000000", "", 2 * time.Second},
		{"for another process", "60000000", strconv.Itoa(os.Getpid() + 1), 0},
		{"garbage", "soon", self, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			if tc.usec == "" {
				os.Unsetenv("WATCHDOG_USEC")
			}
			if got := watchdogTimeout(); got != tc.want {
				t.Errorf("watchdogTimeout = %v, want %v", got, tc.want)
			}
			for _, v := range []string{"WATCHDOG_USEC", "WATCHDOG_PID"} {
				if _, ok := os.LookupEnv(v); ok {
					t.Errorf("%s left for children", v)
				}
			}
		})
	}
}

// Under systemd with Docker down, netshim holds its socket but serves
// nothing, says why in STATUS=, keeps feeding the watchdog (a Docker that
// is down is not a stuck loop), and on a stop says STOPPING=1 and removes
// the socket it made.
func TestRunUnderSystemdWaitsForDocker(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	sock := strings.TrimPrefix(opts.listen, "unix://")
	notify := harness.ListenNotify(t, filepath.Join(dir, "notify"))
	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "notify"))
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- run(ctx, opts) }()

	notify.Wait(t, testutil.EventuallyTimeout, "the start-up status", func(s string) bool {
		return s == "STATUS=Reading the state of Docker at "+opts.dockerEndpoint
	})
	notify.Wait(t, testutil.EventuallyTimeout, "the waiting status", func(s string) bool {
		return strings.HasPrefix(s, "STATUS=Waiting for Docker at "+opts.dockerEndpoint+": ")
	})
	// A client that connects now completes its handshake (gRPC clients
	// give it 5 s: kubelet's first call does not wait longer), and its
	// call is held, not answered.
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	testutil.Eventually(t, "the connection's handshake while netshim waits for Docker", func() bool {
		return conn.GetState() == connectivity.Ready
	})
	callCtx, cancelCall := context.WithCancel(context.Background())
	defer cancelCall()
	callErr := make(chan error, 1)
	go func() {
		_, err := runtimeapi.NewRuntimeServiceClient(conn).Version(callCtx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		callErr <- err
	}()
	for range 3 {
		notify.Wait(t, testutil.EventuallyTimeout, "a watchdog ping while Docker is down", func(s string) bool { return s == "WATCHDOG=1" })
	}

	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Errorf("run = %v after a stop while waiting, want nil", err)
		}
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("run did not return after the stop")
	}
	stopping := notify.Wait(t, testutil.EventuallyTimeout, "STOPPING=1", func(s string) bool { return strings.HasPrefix(s, "STOPPING=1\n") })
	if want := "STATUS=Stopped before serving: stopped after waiting "; !strings.Contains(stopping, want) {
		t.Errorf("stopping notification %q does not say %q", stopping, want)
	}
	for _, s := range notify.Received() {
		if strings.Contains(s, "READY=1") {
			t.Errorf("READY=1 sent without Docker: %q", s)
		}
	}
	// Never answered: held until netshim stopped, then Unavailable (the
	// runtime went away; kubelet retries), saying why.
	select {
	case err := <-callErr:
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "stopping before it served") {
			t.Errorf("the early call ended with %v, want Unavailable: stopping before it served", err)
		}
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("the early call did not end when netshim stopped")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket netshim made is still there after the stop (%v)", err)
	}
}

type wedgeRecorder struct{ wedged chan struct{} }

func (w *wedgeRecorder) WedgeIndexForTest() { close(w.wedged) }

// The hidden test hook wedges the index at SIGUSR2, and only then.
func TestWedgeIndexOnSignal(t *testing.T) {
	w := &wedgeRecorder{wedged: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wedgeIndexOnSignal(ctx, w)
	select {
	case <-w.wedged:
		t.Fatal("wedged before any SIGUSR2")
	default:
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.wedged:
	case <-time.After(30 * time.Second):
		t.Fatal("SIGUSR2 did not wedge the index within 30 s")
	}
}

func TestServeGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		act  func(g *serveGate, cancel context.CancelFunc)
		want codes.Code
	}{
		{"open", func(g *serveGate, _ context.CancelFunc) { g.Open() }, codes.OK},
		{"stopped before serving", func(g *serveGate, _ context.CancelFunc) { g.Close() }, codes.Unavailable},
		{"caller gave up", func(_ *serveGate, cancel context.CancelFunc) { cancel() }, codes.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newServeGate()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := g.Unary(ctx, nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { return "answered", nil })
				done <- err
			}()
			tc.act(g, cancel)
			select {
			case err := <-done:
				if status.Code(err) != tc.want {
					t.Errorf("held call ended with %v, want %v", err, tc.want)
				}
			case <-time.After(testutil.EventuallyTimeout):
				t.Fatal("the held call did not end")
			}
		})
	}
	// An open gate costs nothing more than a channel read.
	g := newServeGate()
	g.Open()
	g.Close()
	if err := g.wait(context.Background()); err != nil {
		t.Errorf("open gate: %v", err)
	}
}
