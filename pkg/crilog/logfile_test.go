package crilog

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	criLine1 = "2024-01-02T03:04:05Z stdout F one\n"
	criLine2 = "2024-01-02T03:04:06.5Z stderr P two\n"
)

// snapshot records what is at each of paths (kind, link target, content),
// to show that a refused open changed nothing.
func snapshot(t *testing.T, paths ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out[p] = "missing"
		case err != nil:
			t.Fatal(err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[p] = "symlink to " + target
		case fi.Mode().IsRegular():
			out[p] = "file " + readFile(t, p)
		default:
			out[p] = fi.Mode().String()
		}
	}
	return out
}

// TestOpenRefusesUnsafeFiles: a log path kubelet (or a pod that can write
// the log directory) points anywhere else, or at something that is not a
// CRI log, is refused and nothing on the node changes. Each case runs with
// openat2 and with the component-by-component walk of old kernels.
func TestOpenRefusesUnsafeFiles(t *testing.T) {
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			if walk {
				openat2Missing.Store(true)
				t.Cleanup(func() { openat2Missing.Store(false) })
			}
			testOpenRefusesUnsafeFiles(t)
		})
	}
}

func testOpenRefusesUnsafeFiles(t *testing.T) {
	type setup struct {
		path    string   // the log path to open
		watched []string // paths that must not change
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, root, outside string) setup
		want  error
	}{{
		name: "symlinked final file",
		setup: func(t *testing.T, root, outside string) setup {
			target := filepath.Join(outside, "shadow")
			writeFile(t, target, "root:x:0:0\n")
			mustSymlink(t, target, filepath.Join(root, "0.log"))
			return setup{filepath.Join(root, "0.log"), []string{target, filepath.Join(root, "0.log")}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "dangling symlink as final file",
		setup: func(t *testing.T, root, outside string) setup {
			target := filepath.Join(outside, "new")
			mustSymlink(t, target, filepath.Join(root, "0.log"))
			return setup{filepath.Join(root, "0.log"), []string{target}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "symlinked directory component",
		setup: func(t *testing.T, root, outside string) setup {
			mustSymlink(t, outside, filepath.Join(root, "c"))
			return setup{filepath.Join(root, "c", "0.log"), []string{filepath.Join(outside, "0.log")}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "symlinked directory component with missing directories after it",
		setup: func(t *testing.T, root, outside string) setup {
			mustSymlink(t, outside, filepath.Join(root, "c"))
			return setup{filepath.Join(root, "c", "d", "0.log"), []string{filepath.Join(outside, "d")}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "log directory is a symlink",
		setup: func(t *testing.T, root, outside string) setup {
			dir := filepath.Join(root, "pod")
			mustSymlink(t, outside, dir)
			return setup{filepath.Join(dir, "0.log"), []string{filepath.Join(outside, "0.log"), dir}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "component is a file",
		setup: func(t *testing.T, root, _ string) setup {
			writeFile(t, filepath.Join(root, "c"), "x")
			return setup{filepath.Join(root, "c", "0.log"), []string{filepath.Join(root, "c")}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "FIFO",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			if err := syscall.Mkfifo(p, 0o640); err != nil {
				t.Fatal(err)
			}
			return setup{p, []string{p}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "device",
		setup: func(*testing.T, string, string) setup {
			return setup{"/dev/null", []string{"/dev/null"}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "directory",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return setup{p, []string{p}}
		},
		want: ErrUnsafeLogFile,
	}, {
		name: "foreign content",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			writeFile(t, p, "[global]\nkey = value\n")
			return setup{p, []string{p}}
		},
		want: ErrNotCRILog,
	}, {
		// The old writer cut this file to nothing: no newline, so it
		// was all an "incomplete last line".
		name: "foreign content without a newline",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			writeFile(t, p, "#!/bin/sh\nexit 0")
			return setup{p, []string{p}}
		},
		want: ErrNotCRILog,
	}, {
		name: "foreign single line without a newline",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			writeFile(t, p, "secret-token")
			return setup{p, []string{p}}
		},
		want: ErrNotCRILog,
	}, {
		name: "CRI entries then a foreign incomplete line",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			writeFile(t, p, criLine1+"2024-01-02T03:04:05Z journal: x")
			return setup{p, []string{p}}
		},
		want: ErrNotCRILog,
	}, {
		name: "CRI head, foreign tail",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			big := strings.Repeat(criLine1, int(2*contentWindow)/len(criLine1))
			writeFile(t, p, big+"not a log line\n")
			return setup{p, []string{p}}
		},
		want: ErrNotCRILog,
	}, {
		name: "foreign head, CRI tail",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			big := strings.Repeat(criLine1, int(2*contentWindow)/len(criLine1))
			writeFile(t, p, "ELF binary\n"+big)
			return setup{p, []string{p}}
		},
		want: ErrNotCRILog,
	}, {
		name: "line longer than any entry",
		setup: func(t *testing.T, root, _ string) setup {
			p := filepath.Join(root, "0.log")
			writeFile(t, p, strings.Repeat("x", int(contentWindow)+10))
			return setup{p, []string{p}}
		},
		want: ErrNotCRILog,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			s := tc.setup(t, root, outside)
			before := snapshot(t, s.watched...)

			if err := Check(s.path); !errors.Is(err, tc.want) {
				t.Errorf("Check = %v, want %v", err, tc.want)
			}
			w, err := NewWriter(s.path)
			if err == nil {
				w.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("NewWriter = %v, want %v", err, tc.want)
			}
			if _, err := findResumePoint(s.path); err != nil && tc.want == ErrUnsafeLogFile && !errors.Is(err, ErrUnsafeLogFile) {
				t.Errorf("findResumePoint = %v, want nil or %v", err, ErrUnsafeLogFile)
			}
			if after := snapshot(t, s.watched...); !equalMaps(before, after) {
				t.Errorf("changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestOpenAcceptsCRILogs: what netshim itself leaves behind is opened and
// appended to, its torn last line cut off, with or without openat2.
func TestOpenAcceptsCRILogs(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"empty", "", ""},
		{"whole entries", criLine1 + criLine2, criLine1 + criLine2},
		{"torn in the content", criLine1 + "2024-01-02T03:04:06Z stdout F tor", criLine1},
		{"torn in the tag", criLine1 + "2024-01-02T03:04:06Z stderr ", criLine1},
		{"torn in the stream", criLine1 + "2024-01-02T03:04:06Z std", criLine1},
		{"torn in the timestamp", criLine1 + "2024-01-02T03:0", criLine1},
		{"only a torn entry", "2024-01-02T03:04:06Z stdout P x", ""},
		{"extra tags", "2024-01-02T03:04:05Z stdout F:x one\n", "2024-01-02T03:04:05Z stdout F:x one\n"},
	}
	for _, walk := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				openat2Missing.Store(walk)
				t.Cleanup(func() { openat2Missing.Store(false) })
				path := filepath.Join(t.TempDir(), "0.log")
				writeFile(t, path, tc.content)
				if err := Check(path); err != nil {
					t.Fatalf("Check: %v", err)
				}
				w := newTestWriter(t, path)
				mustWrite(t, w, Stdout, time.Date(2024, 1, 2, 3, 4, 7, 0, time.UTC), "new", false)
				if got, want := readFile(t, path), tc.want+"2024-01-02T03:04:07Z stdout F new\n"; got != want {
					t.Errorf("file = %q, want %q", got, want)
				}
			})
		}
	}
}

// Missing directories are made, each relative to its parent, and only a
// missing file is left alone when the writer must not create it.
func TestOpenCreatesDirectoriesOnlyWhenAsked(t *testing.T) {
	for _, walk := range []bool{false, true} {
		openat2Missing.Store(walk)
		root := t.TempDir()
		path := filepath.Join(root, "a", "b", "0.log")
		if err := Check(path); err != nil {
			t.Errorf("Check of a path to be made: %v", err)
		}
		if _, err := newWriter(path, false); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("newWriter without create = %v, want ErrNotExist", err)
		}
		if _, err := os.Lstat(filepath.Join(root, "a")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("directory made without create: %v", err)
		}
		w, err := NewWriter(path)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
			t.Errorf("log file: %v %v", fi, err)
		}
		if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("log directory: %v %v", fi, err)
		}
	}
	openat2Missing.Store(false)
}

func TestOpenRefusesRelativeOrUncleanPaths(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"0.log", dir + "/../x/0.log", dir + "//0.log", dir + "/", dir + "/."} {
		if _, err := NewWriter(p); !errors.Is(err, ErrUnsafeLogFile) {
			t.Errorf("NewWriter(%q) = %v, want ErrUnsafeLogFile", p, err)
		}
	}
}
