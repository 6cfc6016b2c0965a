package crilog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
)

// LogSource is the part of the Docker client a Follower needs.
// *client.Client satisfies it.
type LogSource interface {
	ContainerLogs(ctx context.Context, container string, options container.LogsOptions) (io.ReadCloser, error)
}

// ErrNotFollowing is returned when reopening the log of a container that has
// no running follower (unknown, or its log stream has ended).
var ErrNotFollowing = errors.New("crilog: container log is not being followed")

// Follower copies one container's Docker log stream into its CRI log file,
// until the stream ends (the container exited and Docker closed it) or its
// context is cancelled.
//
// Each Docker message becomes one line of the file (or several P entries and
// an F for one longer than the maximum line size): a message ending in '\n'
// is written as F, one without as P. That includes the very last message of
// a stream: a container whose last line has no newline leaves a final P
// entry, as containerd does, and kubelet shows that text without adding a
// newline, which is exactly what the container printed. No F is invented at
// the end, and none could be when the follower is stopped mid-line: a
// resumed follower continues that line.
type Follower struct {
	src  LogSource
	spec followSpec

	mu sync.Mutex
	w  *Writer // nil until start opens the file

	done    chan struct{}
	err     error // why it ended; written before done is closed
	written bool  // it wrote at least one entry; written before done is closed
}

// followSpec is what a Follower copies, and how.
type followSpec struct {
	id   string
	path string
	tty  bool
	// drain makes the follower a drain: the container has exited, the
	// follower copies what Docker holds (up to until, when set) and ends,
	// and a missing file is not created (kubelet removed it).
	drain bool
	until time.Time
	// writeErr, when set, is called before each write and fails it with
	// its error: tests inject a full disk with it.
	writeErr func() error
}

// Follow starts following containerID's log into the CRI log file at path,
// in the background. Setting up (opening the file, finding where it left off,
// asking Docker for the stream) happens before it returns, and its errors are
// returned. tty says whether the container has a terminal, in which case
// Docker sends a raw stream instead of a multiplexed one.
func Follow(ctx context.Context, src LogSource, containerID, path string, tty bool) (*Follower, error) {
	f := newFollower(src, followSpec{id: containerID, path: path, tty: tty})
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

func newFollower(src LogSource, spec followSpec) *Follower {
	return &Follower{src: src, spec: spec, done: make(chan struct{})}
}

// start sets the follower up, then copies in the background. On error the
// follower is finished (Done closed) and has nothing left open.
func (f *Follower) start(ctx context.Context) error {
	// Step 1: open the file. The lock makes a concurrent Reopen either come
	// before (and then we open the fresh file) or act on our writer.
	f.mu.Lock()
	w, err := newWriter(f.spec.path, !f.spec.drain)
	if err == nil {
		w.writeErr = f.spec.writeErr
	}
	f.w = w
	f.mu.Unlock()
	if err != nil {
		return f.finish(err)
	}

	// Step 2: find where the file left off. This comes after step 1, which
	// cut off any torn last line: that entry is then asked for again.
	rp, err := findResumePoint(f.spec.path)
	if err != nil {
		w.Close()
		return f.finish(fmt.Errorf("crilog: read %s: %w", f.spec.path, err))
	}

	// Step 3: ask Docker for the stream from there. Docker's since is
	// inclusive, so the replay starts at the file's last instant and dedup
	// drops what the file already holds. A drain does not follow: the
	// container has exited, Docker sends what it holds and ends.
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: !f.spec.drain, Timestamps: true}
	if !rp.last.IsZero() {
		opts.Since = dockerSince(rp.last)
	}
	if f.spec.drain && !f.spec.until.IsZero() {
		opts.Until = dockerSince(f.spec.until)
	}
	body, err := f.src.ContainerLogs(ctx, f.spec.id, opts)
	if err != nil {
		w.Close()
		return f.finish(fmt.Errorf("crilog: logs of container %s: %w", f.spec.id, err))
	}

	// Step 4: copy in the background.
	go func() {
		f.finish(f.run(ctx, body, w, newDedup(rp)))
	}()
	return nil
}

// dockerSince formats t as Docker's since parameter: Unix seconds and nine
// digits of nanoseconds, the precision Docker compares at.
func dockerSince(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// run copies body into w until the stream ends or ctx is cancelled, then
// closes both.
func (f *Follower) run(ctx context.Context, body io.ReadCloser, w *Writer, skip *dedup) error {
	// A copy blocked reading must end when ctx does. The Docker client's
	// body does so by itself; closing it makes sure for any source.
	stop := context.AfterFunc(ctx, func() { body.Close() })

	n, err := copyMessages(body, w, f.spec.tty, skip)
	f.written = n > 0
	if stop() {
		body.Close()
	} else if err != nil {
		err = ctx.Err() // the copy failed because ctx ended and closed the body
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyMessages decodes the stream and writes what is new to w. It returns
// how many messages it wrote.
func copyMessages(body io.Reader, w *Writer, tty bool, skip *dedup) (int, error) {
	var dec decoder = newMuxDecoder(body)
	if tty {
		dec = newRawDecoder(body)
	}
	n := 0
	for {
		m, err := dec.next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if !skip.keep(&m) {
			continue
		}
		if err := w.Write(m.stream, m.ts, m.content, !m.full); err != nil {
			return n, err
		}
		n++
	}
}

func (f *Follower) finish(err error) error {
	f.err = err
	close(f.done)
	return err
}

// Reopen makes the follower write to a fresh file at its path, after kubelet
// renamed the current one. It is safe while the copy goes on: the line being
// written lands whole in one file or the other.
func (f *Follower) Reopen() error {
	f.mu.Lock()
	w := f.w
	f.mu.Unlock()
	if w == nil {
		return nil // not started yet: start opens whatever is at the path then
	}
	if err := w.Reopen(); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("%w: %s", ErrNotFollowing, f.spec.id)
		}
		return err
	}
	return nil
}

// Done is closed when the follower has ended and closed its file.
func (f *Follower) Done() <-chan struct{} { return f.done }

// Err tells why the follower ended: nil when Docker ended the stream (the
// container exited), the context's error when it was cancelled, otherwise
// what went wrong. It is nil while the follower runs.
func (f *Follower) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// dedup drops the part of Docker's replay that the log file already holds.
//
// Docker replays every message stamped at or after the file's last instant.
// Older ones (which Docker should not send) are dropped. At that exact
// instant the file holds a known number of bytes per stream (see
// resumePoint), and so many bytes of the replay are dropped: whole messages,
// then the already written head of the one the file stopped in. Once a
// message is newer than the file, everything after it is new.
//
// The obvious rule, dropping every message stamped at or before the file's
// last entry, would lose data: the rest of a line Docker cut in chunks (they
// all carry the first chunk's time) and lines that share an instant.
type dedup struct {
	last    time.Time
	written map[Stream]int
	past    bool
}

func newDedup(rp resumePoint) *dedup {
	return &dedup{last: rp.last, written: rp.written, past: rp.last.IsZero()}
}

// keep reports whether m, trimmed of what the file already holds, is to be
// written.
func (d *dedup) keep(m *message) bool {
	if d.past {
		return true
	}
	switch {
	case m.ts.Before(d.last):
		return false
	case m.ts.After(d.last):
		d.past = true
		return true
	}
	held := d.written[m.stream]
	size := len(m.content)
	if m.full {
		size++ // the newline, which the file holds as an F tag
	}
	if held >= size {
		d.written[m.stream] = held - size
		return false
	}
	m.content = m.content[held:]
	d.written[m.stream] = 0
	return true
}
