package crilog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// setVar sets a package variable for one test.
func setVar[T any](t *testing.T, v *T, value T) {
	t.Helper()
	old := *v
	*v = value
	t.Cleanup(func() { *v = old })
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
}

func lastTimestamp(t *testing.T, path string) time.Time {
	t.Helper()
	ts, err := LastTimestamp(path)
	if err != nil {
		t.Fatalf("LastTimestamp: %v", err)
	}
	return ts
}

func TestLastTimestampMissingAndEmpty(t *testing.T) {
	dir := t.TempDir()
	if ts := lastTimestamp(t, filepath.Join(dir, "missing.log")); !ts.IsZero() {
		t.Errorf("missing file: %v", ts)
	}
	if ts := lastTimestamp(t, filepath.Join(dir, "nodir", "missing.log")); !ts.IsZero() {
		t.Errorf("missing directory: %v", ts)
	}
	empty := filepath.Join(dir, "empty.log")
	writeFile(t, empty, "")
	if ts := lastTimestamp(t, empty); !ts.IsZero() {
		t.Errorf("empty file: %v", ts)
	}
	torn := filepath.Join(dir, "torn.log")
	writeFile(t, torn, "2024-01-02T03:04:05Z stdout F no newline yet")
	if ts := lastTimestamp(t, torn); !ts.IsZero() {
		t.Errorf("only an incomplete line: %v", ts)
	}
}

func TestLastTimestampSkipsIncompleteAndForeignLines(t *testing.T) {
	setVar(t, &tailChunkSize, 16)
	path := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, path, ""+
		"2024-01-02T03:04:05Z stdout F first\n"+
		"2024-01-02T03:04:06.25Z stderr P second\n"+
		"not an entry\n"+
		"2024-01-02T03:04:07Z stdout F this line was cut by a cra")
	want := time.Date(2024, 1, 2, 3, 4, 6, 250000000, time.UTC)
	if ts := lastTimestamp(t, path); !ts.Equal(want) {
		t.Errorf("LastTimestamp = %v, want %v", ts, want)
	}
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r    *os.File
	read atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.read.Add(int64(n))
	return n, err
}

// A file many chunks long, with entries longer than a chunk: the answer is
// right, and only the end of the file is read.
func TestLastTimestampBigFile(t *testing.T) {
	setVar(t, &tailChunkSize, 64)
	path := filepath.Join(t.TempDir(), "0.log")
	w := newTestWriter(t, path)
	t0 := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	var last time.Time
	for i := range 2000 {
		last = t0.Add(time.Duration(i) * time.Microsecond)
		mustWrite(t, w, Stdout, last, strings.Repeat("x", 150), i%3 == 0)
	}

	if ts := lastTimestamp(t, path); !ts.Equal(last) {
		t.Errorf("LastTimestamp = %v, want %v", ts, last)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	cr := &countingReaderAt{r: f}
	lines := 0
	if err := scanBackward(cr, fi.Size(), func([]byte) bool { lines++; return lines < 2 }); err != nil {
		t.Fatal(err)
	}
	if read := cr.read.Load(); read > 1024 {
		t.Errorf("read %d bytes of a %d-byte file for its last two lines", read, fi.Size())
	}
}

func TestScanBackwardVisitsEveryLine(t *testing.T) {
	setVar(t, &tailChunkSize, 7)
	content := "first\n\nthird line is longer than a chunk\nx\nincomplete"
	var got []string
	err := scanBackward(strings.NewReader(content), int64(len(content)), func(l []byte) bool {
		got = append(got, string(l))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"x", "third line is longer than a chunk", "", "first"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines = %q, want %q", got, want)
	}
}

// A line longer than maxScanLine is skipped without being held whole.
func TestScanBackwardSkipsOverlongLine(t *testing.T) {
	setVar(t, &tailChunkSize, 16)
	setVar(t, &maxScanLine, 64)
	content := "before\n" + strings.Repeat("y", 1000) + "\nafter\n"
	var got []string
	err := scanBackward(bytes.NewReader([]byte(content)), int64(len(content)), func(l []byte) bool {
		got = append(got, string(l))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"after", "before"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines = %q, want %q", got, want)
	}
}

func TestFindResumePointCountsBytesAtLastInstant(t *testing.T) {
	setVar(t, &tailChunkSize, 32)
	path := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, path, ""+
		"2024-01-02T03:04:05Z stdout F older\n"+
		"2024-01-02T03:04:06Z stdout P aaaa\n"+
		"2024-01-02T03:04:06Z stderr F e\n"+
		"2024-01-02T03:04:06Z stdout P bb\n"+
		"2024-01-02T03:04:06Z stdout F cc\n")
	rp, err := findResumePoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2024, 1, 2, 3, 4, 6, 0, time.UTC); !rp.last.Equal(want) {
		t.Errorf("last = %v, want %v", rp.last, want)
	}
	// stdout: "aaaa" + "bb" + "cc" + the newline the F stands for.
	if rp.written[Stdout] != 9 || rp.written[Stderr] != 2 {
		t.Errorf("written = %v, want stdout 9, stderr 2", rp.written)
	}
}

// After kubelet rotated the file, the fresh file may be empty or hold only
// the end of a line: the newest rotated file tells the rest.
func TestFindResumePointReadsRotatedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	writeFile(t, path+".20240103-000000.gz", "newest, but compressed: never read")
	writeFile(t, path+".20240102-000000", "2024-01-02T00:00:00Z stdout F old\n")
	writeFile(t, path+".20240102-030406", ""+
		"2024-01-02T03:04:05Z stdout F before\n"+
		"2024-01-02T03:04:06Z stdout P aaaa\n")
	writeFile(t, path+".20240102-030407.tmp", "2024-01-02T09:00:00Z stdout F half-compressed\n")
	t6 := time.Date(2024, 1, 2, 3, 4, 6, 0, time.UTC)

	// Empty current file: the rotated file's end is the resume point.
	writeFile(t, path, "")
	rp, err := findResumePoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if !rp.last.Equal(t6) || rp.written[Stdout] != 4 {
		t.Errorf("empty current file: %+v, want last %v with 4 stdout bytes", rp, t6)
	}

	// The current file continues the line: both files count.
	writeFile(t, path, "2024-01-02T03:04:06Z stdout P bb\n")
	if rp, err = findResumePoint(path); err != nil {
		t.Fatal(err)
	}
	if !rp.last.Equal(t6) || rp.written[Stdout] != 6 {
		t.Errorf("line across rotation: %+v, want last %v with 6 stdout bytes", rp, t6)
	}

	// The current file has an older entry: the rotated file is not needed.
	writeFile(t, path, "2024-01-02T03:04:07Z stdout F x\n2024-01-02T03:04:08Z stdout F y\n")
	if rp, err = findResumePoint(path); err != nil {
		t.Fatal(err)
	}
	if want := t6.Add(2 * time.Second); !rp.last.Equal(want) || rp.written[Stdout] != 2 {
		t.Errorf("current file only: %+v, want last %v with 2 stdout bytes", rp, want)
	}
}
