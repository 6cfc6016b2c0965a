package crilog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Stream names the output a log entry came from, as written in the file.
type Stream string

// The two streams of the CRI log format.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Tags of the CRI log format.
const (
	tagFull    = "F"
	tagPartial = "P"
)

// timeFormat is the timestamp format of CRI log entries. kubelet and
// containerd use RFC3339Nano (trailing zeros of the fraction trimmed); we
// always write it in UTC so that entries sort and compare as text too.
const timeFormat = time.RFC3339Nano

// DefaultMaxLineSize is the longest content one entry carries; a longer line
// is written as several P entries followed by an F. 16 KiB matches Docker's
// own chunk size, so one Docker message never needs more than one entry.
const DefaultMaxLineSize = 16 * 1024

// ErrNewline is returned by Writer.Write for content that contains a
// newline: one call writes one line, and the newline is the entry separator.
var ErrNewline = errors.New("crilog: log content contains a newline")

// Writer appends CRI log entries to a file. It is safe for concurrent use:
// each Write lands in the file with a single write call, so entries of
// concurrent writers never interleave.
type Writer struct {
	path    string
	create  bool // a missing file is made, on open and on Reopen
	maxLine int  // longest content of one entry; tests lower it

	// writeErr, when set, fails each write with its error before it
	// reaches the file (tests inject a full disk).
	writeErr func() error

	mu  sync.Mutex
	f   *os.File // nil once closed
	buf []byte   // reused to format a Write
}

// NewWriter opens the log file at path for appending, creating it (mode
// 0640) and its missing parent directories (mode 0755). No symlink is
// followed in any component of path, and an existing file is written only
// if it is a regular file holding CRI entries (ErrUnsafeLogFile,
// ErrNotCRILog otherwise). An incomplete last line (a write cut short by a
// crash or a full disk) is cut off: appending after it would glue the next
// entry onto it, and the follower re-fetches that entry from Docker anyway.
//
// A symlink at path (how the Docker runtime exposed Docker's JSON log) is
// refused like any other, not replaced: it is not ours to remove.
func NewWriter(path string) (*Writer, error) {
	return newWriter(path, true)
}

// newWriter is NewWriter; without create, a missing file is an error
// (errors.Is fs.ErrNotExist) rather than made.
func newWriter(path string, create bool) (*Writer, error) {
	f, err := openLogFile(path, create)
	if err != nil {
		return nil, err
	}
	return &Writer{path: path, create: create, maxLine: DefaultMaxLineSize, f: f}, nil
}

// Write appends content as one line of stream, stamped ts. partial says the
// line continues in a later Write (its last entry is tagged P instead of F).
// content longer than the maximum line size is split into P entries. It must
// not contain a newline. An empty partial write has nothing to record and is
// dropped.
func (w *Writer) Write(stream Stream, ts time.Time, content []byte, partial bool) error {
	if stream != Stdout && stream != Stderr {
		return fmt.Errorf("crilog: unknown stream %q", stream)
	}
	if bytes.IndexByte(content, '\n') >= 0 {
		return ErrNewline
	}
	if partial && len(content) == 0 {
		return nil
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("crilog: write %s: %w", w.path, os.ErrClosed)
	}

	// Format every entry of this line into one buffer: one write call keeps
	// the line whole with respect to other writers and to Reopen.
	stamp := ts.UTC().AppendFormat(nil, timeFormat)
	w.buf = w.buf[:0]
	for {
		chunk, rest := content, []byte(nil)
		if len(chunk) > w.maxLine {
			chunk, rest = content[:w.maxLine], content[w.maxLine:]
		}
		tag := tagFull
		if len(rest) > 0 || partial {
			tag = tagPartial
		}
		w.buf = appendEntry(w.buf, stamp, stream, tag, chunk)
		if len(rest) == 0 {
			break
		}
		content = rest
	}
	if w.writeErr != nil {
		if err := w.writeErr(); err != nil {
			return fmt.Errorf("crilog: write %s: %w", w.path, err)
		}
	}
	if _, err := w.f.Write(w.buf); err != nil {
		return fmt.Errorf("crilog: write %s: %w", w.path, err)
	}
	return nil
}

// appendEntry formats one entry: "<ts> <stream> <tag> <content>\n".
func appendEntry(buf, stamp []byte, stream Stream, tag string, content []byte) []byte {
	buf = append(buf, stamp...)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	buf = append(buf, ' ')
	buf = append(buf, tag...)
	buf = append(buf, ' ')
	buf = append(buf, content...)
	return append(buf, '\n')
}

// Reopen switches to a fresh file at the writer's path. kubelet calls for it
// (through ReopenContainerLog) after renaming the current file, which keeps
// every line written so far. The new file is opened before the old one is
// closed: if opening fails the writer keeps the old file, which is what
// kubelet expects, as it renames the file back when the reopen fails.
func (w *Writer) Reopen() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("crilog: reopen %s: %w", w.path, os.ErrClosed)
	}
	f, err := openLogFile(w.path, w.create)
	if err != nil {
		return err
	}
	old := w.f
	w.f = f
	if err := old.Close(); err != nil {
		return fmt.Errorf("crilog: close rotated %s: %w", w.path, err)
	}
	return nil
}

// Close closes the file. Later writes fail; closing twice is harmless.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
