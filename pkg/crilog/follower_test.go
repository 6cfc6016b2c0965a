package crilog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// The Docker client is a LogSource.
var _ LogSource = (*client.Client)(nil)

// dockerStamp formats t as Docker does in a log stream: UTC, fixed width.
func dockerStamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
}

// frame builds one frame of Docker's multiplexed stream.
func frame(stream byte, payload string) []byte {
	b := make([]byte, frameHeaderSize, frameHeaderSize+len(payload))
	b[0] = stream
	binary.BigEndian.PutUint32(b[4:], uint32(len(payload)))
	return append(b, payload...)
}

// dockerMsg is one message of a fake Docker log: text is what Docker sends
// after the timestamp (ending in "\n" unless Docker cut the line there).
type dockerMsg struct {
	stream byte
	ts     time.Time
	text   string
}

func (m dockerMsg) frame() []byte {
	return frame(m.stream, dockerStamp(m.ts)+" "+m.text)
}

// parseSince parses the since option the way Docker does.
func parseSince(t *testing.T, since string) time.Time {
	t.Helper()
	if since == "" {
		return time.Time{}
	}
	sec, nsec, ok := strings.Cut(since, ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	n, err2 := strconv.ParseInt(nsec, 10, 64)
	if !ok || len(nsec) != 9 || err1 != nil || err2 != nil {
		t.Fatalf("since %q is not <seconds>.<9-digit nanoseconds>", since)
	}
	return time.Unix(s, n)
}

type logsCall struct {
	id   string
	opts container.LogsOptions
}

// fakeSource is a LogSource whose streams the test provides.
type fakeSource struct {
	open func(ctx context.Context, opts container.LogsOptions) (io.ReadCloser, error)

	mu    sync.Mutex
	calls []logsCall
}

func (s *fakeSource) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	s.mu.Lock()
	s.calls = append(s.calls, logsCall{id, opts})
	s.mu.Unlock()
	return s.open(ctx, opts)
}

func (s *fakeSource) callList() []logsCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]logsCall(nil), s.calls...)
}

// streamSource sends the same bytes to every request.
func streamSource(stream []byte) *fakeSource {
	return &fakeSource{open: func(context.Context, container.LogsOptions) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(stream)), nil
	}}
}

// replaySource is a Docker log holding msgs: like Docker it sends every
// message stamped at or after the requested since, then ends the stream
// (the container has exited).
func replaySource(t *testing.T, msgs []dockerMsg) *fakeSource {
	return &fakeSource{open: func(_ context.Context, opts container.LogsOptions) (io.ReadCloser, error) {
		since := parseSince(t, opts.Since)
		var b bytes.Buffer
		for _, m := range msgs {
			if !m.ts.Before(since) {
				b.Write(m.frame())
			}
		}
		return io.NopCloser(&b), nil
	}}
}

// pipeSource hands out one followed stream that the test writes as it
// goes. A read without following, the drain once the followed stream has
// ended, finds nothing more: the pipe held the whole log.
type pipeSource struct {
	*fakeSource
	w *io.PipeWriter
}

func newPipeSource() *pipeSource {
	r, w := io.Pipe()
	return &pipeSource{
		fakeSource: &fakeSource{open: func(_ context.Context, opts container.LogsOptions) (io.ReadCloser, error) {
			if !opts.Follow {
				return io.NopCloser(bytes.NewReader(nil)), nil
			}
			return r, nil
		}},
		w: w,
	}
}

// send writes b into the stream. io.Pipe hands data over synchronously, so
// when send returns the follower has read all of b.
func (p *pipeSource) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := p.w.Write(b); err != nil {
		t.Fatal(err)
	}
}

func follow(t *testing.T, src LogSource, path string, tty bool) *Follower {
	t.Helper()
	f, err := Follow(context.Background(), src, "c1", path, tty)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// wait waits, boundedly, for f to end and returns its error.
func wait(t *testing.T, f *Follower) error {
	t.Helper()
	select {
	case <-f.Done():
		return f.Err()
	case <-time.After(10 * time.Second):
		t.Fatal("follower did not end")
		return nil
	}
}

// entry formats the CRI line the follower should write.
func entry(ts time.Time, stream Stream, tag, content string) string {
	return ts.UTC().Format(time.RFC3339Nano) + " " + string(stream) + " " + tag + " " + content + "\n"
}

func checkLines(t *testing.T, path string, want ...string) {
	t.Helper()
	got := strings.SplitAfter(readFile(t, path), "\n")
	got = got[:len(got)-1]
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %q\nwant %q", i+1, g, w)
		}
	}
}

var t0 = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestFollowerMultiplexed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c", "0.log")
	var stream []byte
	for _, m := range []dockerMsg{
		{frameStdout, at(1), "hello\n"},
		{frameStderr, at(2), "oops\n"},
		// Docker cut a long line: two messages at the first one's time.
		{frameStdout, at(3), "long line, first chunk|"},
		{frameStdout, at(3), "second chunk\n"},
		{frameStdout, at(4), "windows line\r\n"},
		{frameStdout, at(5), "\n"},
	} {
		stream = append(stream, m.frame()...)
	}
	stream = append(stream, frame(frameSystemErr, "Error grabbing logs: corrupt entry\n")...)
	stream = append(stream, frame(frameStderr, "")...)
	stream = append(stream, dockerMsg{frameStdout, at(6), "last line, no newline"}.frame()...)
	src := streamSource(stream)

	f := follow(t, src, path, false)
	if err := wait(t, f); err != nil {
		t.Fatalf("Err = %v", err)
	}

	checkLines(t, path,
		entry(at(1), Stdout, "F", "hello"),
		entry(at(2), Stderr, "F", "oops"),
		entry(at(3), Stdout, "P", "long line, first chunk|"),
		entry(at(3), Stdout, "F", "second chunk"),
		entry(at(4), Stdout, "F", "windows line"),
		entry(at(5), Stdout, "F", ""),
		entry(at(6), Stdout, "P", "last line, no newline"),
	)

	calls := src.callList()
	want := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true, Timestamps: true}
	if len(calls) != 1 || calls[0].id != "c1" || calls[0].opts != want {
		t.Errorf("ContainerLogs calls = %+v, want one for c1 with %+v", calls, want)
	}
}

// Several messages in one frame, as a sender other than Docker may pack them.
func TestFollowerSeveralMessagesInOneFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	payload := dockerStamp(at(1)) + " a\n" + dockerStamp(at(2)) + " b\n" + dockerStamp(at(3)) + " c"
	f := follow(t, streamSource(frame(frameStdout, payload)), path, false)
	if err := wait(t, f); err != nil {
		t.Fatal(err)
	}
	checkLines(t, path,
		entry(at(1), Stdout, "F", "a"),
		entry(at(2), Stdout, "F", "b"),
		entry(at(3), Stdout, "P", "c"),
	)
}

func TestFollowerBadStreams(t *testing.T) {
	ok := dockerMsg{frameStdout, at(1), "kept\n"}.frame()
	for name, stream := range map[string][]byte{
		"truncated header":  append(ok, 1, 0, 0),
		"truncated payload": append(ok, frame(frameStdout, dockerStamp(at(2))+" cut\n")[:20]...),
		"no timestamp":      append(ok, frame(frameStdout, "no timestamp here\n")...),
		"bad timestamp":     append(ok, frame(frameStdout, "2024-13-45T00:00:00Z x\n")...),
		"unknown stream":    append(ok, frame(7, dockerStamp(at(2))+" x\n")...),
		"huge frame":        append(ok, frameStdout, 0, 0, 0, 0xff, 0xff, 0xff, 0xff),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			f := follow(t, streamSource(stream), path, false)
			if err := wait(t, f); err == nil {
				t.Error("Err = nil, want an error")
			}
			// What came before the damage is in the file.
			checkLines(t, path, entry(at(1), Stdout, "F", "kept"))
		})
	}
}

func TestFollowerTTY(t *testing.T) {
	setVar(t, &rawChunk, 64)
	long := strings.Repeat("0123456789abcdef", 4) // exactly rawChunk bytes
	path := filepath.Join(t.TempDir(), "0.log")
	stream := "" +
		dockerStamp(at(1)) + " hello\r\n" +
		// Docker cut a line at rawChunk bytes: the next message follows
		// at once, without a newline in between.
		dockerStamp(at(2)) + " " + long +
		dockerStamp(at(2)) + " rest of the line\r\n" +
		// A line of exactly rawChunk bytes: Docker logs its newline apart.
		dockerStamp(at(3)) + " " + long +
		dockerStamp(at(3)) + " \r\n" +
		// A log driver with a bigger buffer: no new message after the cut.
		dockerStamp(at(4)) + " " + long + "more\n" +
		dockerStamp(at(5)) + " prompt> "
	f := follow(t, streamSource([]byte(stream)), path, true)
	if err := wait(t, f); err != nil {
		t.Fatalf("Err = %v", err)
	}
	checkLines(t, path,
		entry(at(1), Stdout, "F", "hello"),
		entry(at(2), Stdout, "P", long),
		entry(at(2), Stdout, "F", "rest of the line"),
		entry(at(3), Stdout, "P", long),
		entry(at(3), Stdout, "F", ""),
		entry(at(4), Stdout, "P", long),
		entry(at(4), Stdout, "F", "more"),
		entry(at(5), Stdout, "P", "prompt> "),
	)
}

func TestFollowerTTYBadStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	stream := dockerStamp(at(1)) + " kept\n" + "garbage without timestamp\n"
	f := follow(t, streamSource([]byte(stream)), path, true)
	if err := wait(t, f); err == nil {
		t.Error("Err = nil, want an error")
	}
	checkLines(t, path, entry(at(1), Stdout, "F", "kept"))
}

// dockerLog is a container's log as Docker holds it, with what makes
// resuming hard: a line cut in three messages sharing one timestamp,
// distinct lines sharing one timestamp, and a last line without newline.
var dockerLog = []dockerMsg{
	{frameStdout, at(1), "first\n"},
	{frameStderr, at(2), "an error\n"},
	{frameStdout, at(3), "long-a|"},
	{frameStdout, at(3), "long-b|"},
	{frameStdout, at(3), "long-c\n"},
	{frameStdout, at(4), "same instant 1\n"},
	{frameStdout, at(4), "same instant 2\n"},
	{frameStderr, at(4), "same instant, stderr\n"},
	{frameStdout, at(5), "tail"},
}

var dockerLogFile = []string{
	entry(at(1), Stdout, "F", "first"),
	entry(at(2), Stderr, "F", "an error"),
	entry(at(3), Stdout, "P", "long-a|"),
	entry(at(3), Stdout, "P", "long-b|"),
	entry(at(3), Stdout, "F", "long-c"),
	entry(at(4), Stdout, "F", "same instant 1"),
	entry(at(4), Stdout, "F", "same instant 2"),
	entry(at(4), Stderr, "F", "same instant, stderr"),
	entry(at(5), Stdout, "P", "tail"),
}

// netshim stopped after any number of messages, then a new follower
// resumes: it asks Docker for what follows the file's last timestamp and the
// file ends up as if it had never stopped.
func TestFollowerResume(t *testing.T) {
	for cut := range len(dockerLog) + 1 {
		t.Run(fmt.Sprintf("after %d messages", cut), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			first := follow(t, replaySource(t, dockerLog[:cut]), path, false)
			if err := wait(t, first); err != nil {
				t.Fatal(err)
			}
			last := lastTimestamp(t, path)

			src := replaySource(t, dockerLog)
			second := follow(t, src, path, false)
			if err := wait(t, second); err != nil {
				t.Fatal(err)
			}

			checkLines(t, path, dockerLogFile...)
			wantSince := ""
			if !last.IsZero() {
				wantSince = dockerSince(last)
			}
			if calls := src.callList(); calls[0].opts.Since != wantSince {
				t.Errorf("Since = %q, want %q", calls[0].opts.Since, wantSince)
			}
		})
	}
}

func TestDockerSince(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 1200, time.FixedZone("x", -3600))
	if got, want := dockerSince(ts), fmt.Sprintf("%d.000001200", ts.Unix()); got != want {
		t.Errorf("dockerSince = %q, want %q", got, want)
	}
}

// The file may stop inside one of our own entries' worth of a message (our
// writer split it, or a crash cut an entry): only the missing bytes are
// added, and the text of each stream reads as Docker's.
func TestFollowerResumeInsideMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, path, ""+
		entry(at(1), Stdout, "F", "first")+
		entry(at(2), Stderr, "F", "an error")+
		entry(at(3), Stdout, "P", "lon")+
		entry(at(3), Stdout, "P", "g-a|long-b")+ // all of long-b but its "|"
		entry(at(3), Stdout, "F", "long-c")[:30]) // torn write

	f := follow(t, replaySource(t, dockerLog), path, false)
	if err := wait(t, f); err != nil {
		t.Fatal(err)
	}

	text := map[Stream]string{}
	for _, l := range strings.SplitAfter(readFile(t, path), "\n") {
		if l == "" {
			continue
		}
		e, err := ParseLine([]byte(l))
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		text[e.Stream] += string(e.Content)
		if !e.Partial {
			text[e.Stream] += "\n"
		}
	}
	want := map[Stream]string{
		Stdout: "first\nlong-a|long-b|long-c\nsame instant 1\nsame instant 2\ntail",
		Stderr: "an error\nsame instant, stderr\n",
	}
	if text[Stdout] != want[Stdout] || text[Stderr] != want[Stderr] {
		t.Errorf("text = %q, want %q", text, want)
	}
}

// kubelet renames the file and asks for a reopen in the middle of a follow.
func TestFollowerReopenDuringFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	rotated := path + ".20240506-070809"
	src := newPipeSource()
	f := follow(t, src, path, false)

	src.send(t, dockerMsg{frameStdout, at(1), "before rotation\n"}.frame())
	second := dockerMsg{frameStderr, at(2), "after rotation\n"}.frame()
	// The follower reads the next header only after writing the previous
	// message, so once this send returns the first line is in the file.
	src.send(t, second[:frameHeaderSize])

	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := f.Reopen(); err != nil {
		t.Fatal(err)
	}
	src.send(t, second[frameHeaderSize:])
	src.w.Close()
	if err := wait(t, f); err != nil {
		t.Fatal(err)
	}

	checkLines(t, rotated, entry(at(1), Stdout, "F", "before rotation"))
	checkLines(t, path, entry(at(2), Stderr, "F", "after rotation"))

	if err := f.Reopen(); !errors.Is(err, ErrNotFollowing) {
		t.Errorf("Reopen after the end: %v, want ErrNotFollowing", err)
	}
}

func TestFollowerCancel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	src := newPipeSource()
	ctx, cancel := context.WithCancel(context.Background())
	f, err := Follow(ctx, src, "c1", path, false)
	if err != nil {
		t.Fatal(err)
	}
	src.send(t, dockerMsg{frameStdout, at(1), "one\n"}.frame())
	// A message without its frame's end: dropped on cancel, to be fetched
	// again by a resumed follower.
	src.send(t, dockerMsg{frameStdout, at(2), "two\n"}.frame()[:20])
	cancel()
	if err := wait(t, f); !errors.Is(err, context.Canceled) {
		t.Errorf("Err = %v, want context.Canceled", err)
	}
	checkLines(t, path, entry(at(1), Stdout, "F", "one"))
}

func TestFollowSetupError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	src := &fakeSource{open: func(context.Context, container.LogsOptions) (io.ReadCloser, error) {
		return nil, errors.New("no such container")
	}}
	if _, err := Follow(context.Background(), src, "c1", path, false); err == nil {
		t.Error("Follow succeeded with a failing source")
	}
	blocker := filepath.Join(t.TempDir(), "file")
	writeFile(t, blocker, "")
	if _, err := Follow(context.Background(), streamSource(nil), "c1", filepath.Join(blocker, "0.log"), false); err == nil {
		t.Error("Follow succeeded with an unusable path")
	}
}
