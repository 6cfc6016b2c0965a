package crilog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// readFile returns the content of path, failing the test if it cannot.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newTestWriter(t *testing.T, path string) *Writer {
	t.Helper()
	w, err := NewWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func mustWrite(t *testing.T, w *Writer, s Stream, ts time.Time, content string, partial bool) {
	t.Helper()
	if err := w.Write(s, ts, []byte(content), partial); err != nil {
		t.Fatal(err)
	}
}

func TestWriterFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods", "c", "0.log") // parents created
	w := newTestWriter(t, path)

	plus1 := time.FixedZone("plus1", 3600)
	mustWrite(t, w, Stdout, time.Date(2024, 1, 2, 4, 4, 5, 123456789, plus1), "hello world", false)
	mustWrite(t, w, Stderr, time.Date(2024, 1, 2, 3, 4, 5, 500000000, time.UTC), "half", true)
	mustWrite(t, w, Stderr, time.Date(2024, 1, 2, 3, 4, 5, 500000000, time.UTC), "", false)
	mustWrite(t, w, Stdout, time.Date(2024, 1, 2, 3, 4, 6, 0, time.UTC), "  spaced  ", false)
	mustWrite(t, w, Stdout, time.Date(2024, 1, 2, 3, 4, 7, 0, time.UTC), "", true) // dropped

	// UTC, RFC3339Nano (trailing zeros of the fraction trimmed).
	want := "" +
		"2024-01-02T03:04:05.123456789Z stdout F hello world\n" +
		"2024-01-02T03:04:05.5Z stderr P half\n" +
		"2024-01-02T03:04:05.5Z stderr F \n" +
		"2024-01-02T03:04:06Z stdout F   spaced  \n"
	if got := readFile(t, path); got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriterSplitsLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w := newTestWriter(t, path)
	w.maxLine = 4
	ts := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

	mustWrite(t, w, Stdout, ts, "abcdefghij", false) // P P F
	mustWrite(t, w, Stdout, ts, "abcd", false)       // exactly the max: one F
	mustWrite(t, w, Stderr, ts, "12345678", true)    // partial: all P

	want := "" +
		"2024-01-02T03:04:05Z stdout P abcd\n" +
		"2024-01-02T03:04:05Z stdout P efgh\n" +
		"2024-01-02T03:04:05Z stdout F ij\n" +
		"2024-01-02T03:04:05Z stdout F abcd\n" +
		"2024-01-02T03:04:05Z stderr P 1234\n" +
		"2024-01-02T03:04:05Z stderr P 5678\n"
	if got := readFile(t, path); got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriterRejects(t *testing.T) {
	w := newTestWriter(t, filepath.Join(t.TempDir(), "0.log"))
	ts := time.Now()
	if err := w.Write(Stdout, ts, []byte("a\nb"), false); !errors.Is(err, ErrNewline) {
		t.Errorf("content with newline: err = %v, want ErrNewline", err)
	}
	if err := w.Write("stdin", ts, []byte("a"), false); err == nil {
		t.Error("unknown stream: no error")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Write(Stdout, ts, []byte("a"), false); !errors.Is(err, os.ErrClosed) {
		t.Errorf("write after close: err = %v, want os.ErrClosed", err)
	}
	if err := w.Reopen(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("reopen after close: err = %v, want os.ErrClosed", err)
	}
}

// Each Write lands whole: its P entries and final F are never separated by
// another writer's entries.
func TestWriterConcurrentWritesDoNotInterleave(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w := newTestWriter(t, path)
	w.maxLine = 8

	const writers, lines = 8, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			content := strings.Repeat(string(rune('a'+g)), 20) // P, P, F
			stream := []Stream{Stdout, Stderr}[g%2]
			for range lines {
				if err := w.Write(stream, time.Now(), []byte(content), false); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()

	all := strings.Split(strings.TrimSuffix(readFile(t, path), "\n"), "\n")
	if len(all) != writers*lines*3 {
		t.Fatalf("%d entries, want %d", len(all), writers*lines*3)
	}
	for i := 0; i < len(all); i += 3 {
		var group []Entry
		for _, l := range all[i : i+3] {
			e, err := ParseLine([]byte(l))
			if err != nil {
				t.Fatalf("entry %q: %v", l, err)
			}
			group = append(group, e)
		}
		letter := group[0].Content[0]
		text := string(group[0].Content) + string(group[1].Content) + string(group[2].Content)
		if !group[0].Partial || !group[1].Partial || group[2].Partial ||
			text != strings.Repeat(string(letter), 20) {
			t.Fatalf("entries %d-%d are not one whole line: %q", i, i+2, all[i:i+3])
		}
	}
}

// kubelet rotates by renaming the file and calling Reopen: lines written
// before stay in the renamed file, lines after go to a new file at the path.
func TestWriterReopenAfterRename(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	rotated := path + ".20240102-030405"
	w := newTestWriter(t, path)
	ts := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

	mustWrite(t, w, Stdout, ts, "one", false)
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Stdout, ts, "two", false) // before Reopen: still the old file
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	// kubelet stats the path right after the reopen: it must exist.
	if got := readFile(t, path); got != "" {
		t.Errorf("fresh file holds %q", got)
	}
	mustWrite(t, w, Stdout, ts, "three", false)

	wantOld := "2024-01-02T03:04:05Z stdout F one\n2024-01-02T03:04:05Z stdout F two\n"
	if got := readFile(t, rotated); got != wantOld {
		t.Errorf("rotated file:\n%s\nwant:\n%s", got, wantOld)
	}
	if got, want := readFile(t, path), "2024-01-02T03:04:05Z stdout F three\n"; got != want {
		t.Errorf("new file:\n%s\nwant:\n%s", got, want)
	}
}

func TestNewWriterAppendsAndCutsTornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	old := "2024-01-02T03:04:05Z stdout F kept\n"
	if err := os.WriteFile(path, []byte(old+"2024-01-02T03:04:06Z stdout F tor"), 0o640); err != nil {
		t.Fatal(err)
	}
	w := newTestWriter(t, path)
	mustWrite(t, w, Stdout, time.Date(2024, 1, 2, 3, 4, 6, 0, time.UTC), "torn line", false)

	want := old + "2024-01-02T03:04:06Z stdout F torn line\n"
	if got := readFile(t, path); got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}

	// Nothing but a torn line: nothing is kept.
	only := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, only, "2024-01-02T03:04:06Z std")
	newTestWriter(t, only)
	if got := readFile(t, only); got != "" {
		t.Errorf("file = %q, want it empty", got)
	}
}

func ExampleWriter() {
	dir, _ := os.MkdirTemp("", "crilog")
	defer os.RemoveAll(dir)
	w, _ := NewWriter(filepath.Join(dir, "0.log"))
	ts := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
	w.Write(Stdout, ts, []byte("ready"), false)
	w.Write(Stderr, ts, []byte("no newline at the end"), true)
	w.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "0.log"))
	fmt.Print(string(b))
	// Output:
	// 2024-01-02T03:04:05.000006Z stdout F ready
	// 2024-01-02T03:04:05.000006Z stderr P no newline at the end
}
