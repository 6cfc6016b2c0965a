package crilog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// ErrUnsafeLogFile is returned for a log path netshim refuses to open: a
// symlink in any of its components, a component that is not a directory,
// or a file that is not a regular file (a FIFO, a device, ...).
var ErrUnsafeLogFile = errors.New("crilog: unsafe log file")

// ErrNotCRILog is returned for an existing file whose content is not CRI
// log entries. Such a file is never written, let alone truncated: the path
// a pod spec names may be someone else's file.
var ErrNotCRILog = errors.New("crilog: existing file is not a CRI log")

// contentWindow is how much of each end of an existing file is checked to
// hold CRI entries. An entry netshim writes is at most the maximum line
// size plus a short header, so a window holds several whole ones and a
// file of ours never has a line longer than it.
var contentWindow int64 = 64 * 1024

// openMode says how openFile opens a log file.
type openMode int

const (
	// openAppend opens for appending, creating the file and its missing
	// directories.
	openAppend openMode = iota
	// openAppendExisting opens for appending a file that must exist.
	openAppendExisting
	// openRead opens an existing file for reading.
	openRead
)

// Check reports whether the log file at path could be written without
// changing anything: every component of the path that exists is a real
// directory (no symlink), and the file, if it exists, is a regular file
// holding CRI entries. Missing directories and a missing file are fine
// (they are made when the container starts).
func Check(path string) error {
	f, err := openFile(path, openRead)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = checkContent(f)
	return err
}

// openLogFile opens the log file at path for appending (see openFile for
// how it is confined), after making sure it is a CRI log, and cuts off an
// incomplete last line: a write cut short by a crash or a full disk.
// Appending after it would glue the next entry onto it, and the follower
// re-fetches that entry from Docker anyway.
func openLogFile(path string, create bool) (*os.File, error) {
	mode := openAppendExisting
	if create {
		mode = openAppend
	}
	f, err := openFile(path, mode)
	if err != nil {
		return nil, fmt.Errorf("crilog: open log file: %w", err)
	}
	keep, err := checkContent(f)
	if err == nil && keep >= 0 {
		err = f.Truncate(keep)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("crilog: repair %s: %w", path, err)
	}
	return f, nil
}

// checkContent checks that the file's first and last contentWindow bytes
// are CRI entries: every whole line there parses, and the bytes after the
// last newline, if any, are the beginning of an entry. It returns where to
// cut the file to drop that incomplete line, or -1 when there is none.
//
// Both ends rather than the whole file, as a file of ours can be as large
// as kubelet lets it grow; a foreign file (a config file, a binary, another
// program's log) fails at its first line already.
func checkContent(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if size == 0 {
		return -1, nil
	}
	head, err := readAt(f, 0, min(size, contentWindow))
	if err != nil {
		return 0, err
	}
	if err := checkWindow(f.Name(), head, true); err != nil {
		return 0, err
	}
	tailStart := max(0, size-contentWindow)
	tail := head
	if tailStart > 0 {
		if tail, err = readAt(f, tailStart, size-tailStart); err != nil {
			return 0, err
		}
		if err := checkWindow(f.Name(), tail, false); err != nil {
			return 0, err
		}
	}

	nl := bytes.LastIndexByte(tail, '\n')
	if nl == len(tail)-1 {
		return -1, nil
	}
	torn := tail[nl+1:]
	if nl < 0 && tailStart > 0 {
		return 0, notCRI(f.Name(), torn, errors.New("line longer than any entry"))
	}
	if err := checkEntryPrefix(torn); err != nil {
		return 0, notCRI(f.Name(), torn, err)
	}
	return tailStart + int64(nl) + 1, nil
}

func readAt(f *os.File, off, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// checkWindow checks the whole lines of b, a window of a file. fromStart
// says b starts at the beginning of the file; otherwise its first line may
// be the tail of a longer one and is skipped. The bytes after b's last
// newline are left to the caller.
func checkWindow(name string, b []byte, fromStart bool) error {
	if !fromStart {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return notCRI(name, b, errors.New("line longer than any entry"))
		}
		b = b[i+1:]
	}
	nl := bytes.LastIndexByte(b, '\n')
	if nl < 0 {
		if fromStart && int64(len(b)) == contentWindow {
			return notCRI(name, b, errors.New("line longer than any entry"))
		}
		return nil
	}
	for line := range bytes.SplitSeq(b[:nl], []byte{'\n'}) {
		if _, err := ParseLine(line); err != nil {
			return notCRI(name, line, err)
		}
	}
	return nil
}

// checkEntryPrefix checks that b, an incomplete last line, is the
// beginning of an entry: a (possibly cut) timestamp, then a (possibly cut)
// stream name, then a (possibly cut) tag, then anything.
func checkEntryPrefix(b []byte) error {
	stamp, rest, whole := bytes.Cut(b, []byte{' '})
	if !whole {
		if len(stamp) > maxStampLen || bytes.IndexFunc(stamp, notStampRune) >= 0 {
			return errors.New("not the beginning of a timestamp")
		}
		return nil
	}
	if _, err := time.Parse(timeFormat, string(stamp)); err != nil {
		return fmt.Errorf("bad timestamp: %w", err)
	}
	stream, rest, whole := bytes.Cut(rest, []byte{' '})
	if !whole {
		if !bytes.HasPrefix([]byte(Stdout), stream) && !bytes.HasPrefix([]byte(Stderr), stream) {
			return fmt.Errorf("unknown stream %q", stream)
		}
		return nil
	}
	if s := Stream(stream); s != Stdout && s != Stderr {
		return fmt.Errorf("unknown stream %q", stream)
	}
	if len(rest) > 0 && rest[0] != tagFull[0] && rest[0] != tagPartial[0] {
		return fmt.Errorf("unknown tag in %q", rest)
	}
	return nil
}

func notStampRune(r rune) bool {
	return !('0' <= r && r <= '9') && r != '-' && r != ':' && r != 'T' && r != '.' && r != 'Z' && r != '+'
}

// notCRI describes a line that shows the file is not a CRI log.
func notCRI(name string, line []byte, why error) error {
	if len(line) > 60 {
		line = append(line[:60:60], "..."...)
	}
	return fmt.Errorf("%w: %s holds %q (%v); netshim writes only to an empty file or a CRI log, and leaves this one as it is", ErrNotCRILog, name, line, why)
}
