package crilog

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tailChunkSize is how much of a file is read per step when reading it from
// the end. A variable so that tests can exercise lines spanning chunks.
var tailChunkSize = 64 * 1024

// maxScanLine bounds what is kept of one line while reading backwards. An
// entry we write is at most the maximum line size plus a short header, so a
// longer line is not ours and is skipped without being held in memory.
var maxScanLine = 1 << 20

// LastTimestamp returns the timestamp of the last complete entry of the CRI
// log file at path, reading the file from its end so that a large file costs
// no more than its last lines. An incomplete last line (no newline yet) and
// lines that do not parse are passed over. It returns the zero time, and no
// error, if the file is missing or holds no entry.
func LastTimestamp(path string) (time.Time, error) {
	var last time.Time
	err := scanFileBackward(path, func(line []byte) bool {
		e, err := ParseLine(line)
		if err != nil {
			return true // not an entry: keep looking further back
		}
		last = e.Time
		return false
	})
	return last, err
}

// resumePoint tells how far a log file got, in terms a Follower can match
// against what Docker replays.
//
// The timestamp alone is not enough: Docker stamps every chunk of a long line
// with the time of its first chunk, and distinct lines can share a timestamp,
// so several entries may carry the last timestamp while Docker still holds
// more at that same instant. written counts, per stream, the bytes the file
// already holds at exactly that timestamp (content, plus one for the newline
// an F entry stands for), which is how much of Docker's replay at that
// instant to drop.
type resumePoint struct {
	last    time.Time
	written map[Stream]int
}

// findResumePoint reads the resume point of the log file at path.
//
// When the file has nothing before the last timestamp (it is empty, or holds
// only entries at that instant) the answer may continue in the file kubelet
// rotated away just before: after a rotation the fresh file is empty until
// the container writes again, and a netshim restarted then must not replay
// the whole log. kubelet names rotated files <path>.<YYYYMMDD-hhmmss> and
// leaves the newest uncompressed, so that one is read too when needed.
func findResumePoint(path string) (resumePoint, error) {
	rp := resumePoint{written: map[Stream]int{}}
	complete := false // an entry older than rp.last was seen
	visit := func(line []byte) bool {
		e, err := ParseLine(line)
		if err != nil {
			return true
		}
		if rp.last.IsZero() {
			rp.last = e.Time
		}
		if !e.Time.Equal(rp.last) {
			complete = true
			return false
		}
		n := len(e.Content)
		if !e.Partial {
			n++
		}
		rp.written[e.Stream] += n
		return true
	}

	if err := scanFileBackward(path, visit); err != nil || complete {
		return rp, err
	}
	rotated, err := newestRotated(path)
	if err != nil || rotated == "" {
		return rp, err
	}
	return rp, scanFileBackward(rotated, visit)
}

// newestRotated returns the newest uncompressed file kubelet rotated away
// from path, or "" if there is none. The timestamp suffix sorts in time
// order, so the greatest name is the newest.
func newestRotated(path string) (string, error) {
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(filepath.Clean(dir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	newest := ""
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, base+".") ||
			strings.HasSuffix(name, ".gz") || strings.HasSuffix(name, ".tmp") {
			continue
		}
		newest = max(newest, name)
	}
	if newest == "" {
		return "", nil
	}
	return filepath.Join(dir, newest), nil
}

// scanFileBackward calls visit with each complete line of the file at path,
// last line first, until visit returns false. A missing file has no lines.
// The file is opened as the writer opens it: no symlink followed, only a
// regular file.
func scanFileBackward(path string, visit func(line []byte) bool) error {
	f, err := openFile(path, openRead)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return scanBackward(f, fi.Size(), visit)
}

// scanBackward calls visit with each complete line of r (size bytes long),
// without its newline, last line first, until visit returns false. Bytes
// after the last newline are an incomplete line and are not visited. The
// slice passed to visit is only valid during the call.
func scanBackward(r io.ReaderAt, size int64, visit func(line []byte) bool) error {
	end, err := lastNewline(r, size)
	if err != nil || end < 0 {
		return err
	}

	// pending holds the bytes from off up to (not including) the newline
	// that ends the newest line not visited yet. Each step reads the chunk
	// before off and visits every line whose start is now in view.
	var pending []byte
	off := end
	skipping := false // pending is the tail of an overlong line, not kept
	for {
		for {
			nl := bytes.LastIndexByte(pending, '\n')
			if nl < 0 {
				break
			}
			line := pending[nl+1:]
			pending = pending[:nl]
			if skipping {
				skipping = false
				continue
			}
			if !visit(line) {
				return nil
			}
		}
		if off == 0 {
			// What is left is the first line of the file.
			if !skipping {
				visit(pending)
			}
			return nil
		}
		if len(pending) > maxScanLine {
			pending, skipping = pending[:0], true
		}

		n := min(int64(tailChunkSize), off)
		off -= n
		chunk := make([]byte, n, n+int64(len(pending)))
		if _, err := r.ReadAt(chunk, off); err != nil && err != io.EOF {
			return err
		}
		pending = append(chunk, pending...)
	}
}

// lastNewline returns the offset of the last '\n' among the first size bytes
// of r, or -1 if there is none, reading backwards in chunks.
func lastNewline(r io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, min(int64(tailChunkSize), size))
	for end := size; end > 0; {
		n := min(int64(len(buf)), end)
		start := end - n
		if _, err := r.ReadAt(buf[:n], start); err != nil && err != io.EOF {
			return -1, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i), nil
		}
		end = start
	}
	return -1, nil
}
