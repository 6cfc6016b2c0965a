package crilog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// ReplaceLink turns only a symlink to the given target into an empty file,
// and never follows a symlink on the way to it.
func TestReplaceLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup makes what is at path (in dir) and returns the path.
		setup        func(t *testing.T, dir, target string) string
		wantReplaced bool
		wantErr      error
		// wantLink: the path is still a symlink afterwards.
		wantLink bool
	}{
		{name: "link to the Docker log", wantReplaced: true, setup: func(t *testing.T, dir, target string) string {
			p := filepath.Join(dir, "0.log")
			must(t, os.Symlink(target, p))
			return p
		}},
		{name: "link elsewhere", wantErr: ErrUnsafeLogFile, wantLink: true, setup: func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "0.log")
			must(t, os.Symlink("/etc/shadow", p))
			return p
		}},
		{name: "regular file", setup: func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "0.log")
			must(t, os.WriteFile(p, []byte("x"), 0o640))
			return p
		}},
		{name: "missing", setup: func(_ *testing.T, dir, _ string) string { return filepath.Join(dir, "0.log") }},
		{name: "symlinked directory", wantErr: ErrUnsafeLogFile, wantLink: true, setup: func(t *testing.T, dir, target string) string {
			real := filepath.Join(dir, "real")
			must(t, os.Mkdir(real, 0o755))
			must(t, os.Symlink(target, filepath.Join(real, "0.log")))
			must(t, os.Symlink(real, filepath.Join(dir, "via")))
			return filepath.Join(dir, "via", "0.log")
		}},
		{name: "relative path", wantErr: ErrUnsafeLogFile, setup: func(_ *testing.T, _, _ string) string { return "pods/0.log" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "c-json.log")
			must(t, os.WriteFile(target, []byte(`{"log":"x\n"}`), 0o640))
			path := tc.setup(t, dir, target)
			replaced, err := ReplaceLink(path, target)
			if replaced != tc.wantReplaced || (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("ReplaceLink = %v, %v; want %v, %v", replaced, err, tc.wantReplaced, tc.wantErr)
			}
			if fi, err := os.Lstat(path); err == nil && (fi.Mode()&os.ModeSymlink != 0) != tc.wantLink {
				t.Errorf("after: mode %v, want symlink %v", fi.Mode(), tc.wantLink)
			}
			if tc.wantReplaced {
				fi, err := os.Lstat(path)
				if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o640 {
					t.Errorf("replaced file: %v, %v; want an empty regular 0640 file", fi, err)
				}
			}
			if b, _ := os.ReadFile(target); string(b) != `{"log":"x\n"}` {
				t.Errorf("the link's target was changed: %q", b)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
