package layerusage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"
)

func writeFile(t testing.TB, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Repeat("x", size)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// walkAll walks root in one step.
func walkAll(t testing.TB, root string) (bytes, inodes uint64) {
	t.Helper()
	w := NewWalk(root)
	done, err := w.Step(context.Background(), Budget{})
	if err != nil || !done {
		t.Fatalf("walk of %s: done %v, err %v", root, done, err)
	}
	return w.Sums()
}

// walkInSteps walks w to its end, at most maxEntries a step, calling
// after (unless nil) after every step; it returns how many steps it took.
func walkInSteps(t *testing.T, w *Walk, maxEntries int, after func(step int)) int {
	t.Helper()
	for steps := 1; ; steps++ {
		done, err := w.Step(context.Background(), Budget{MaxEntries: maxEntries})
		if err != nil {
			t.Fatal(err)
		}
		if after != nil {
			after(steps)
		}
		if done {
			return steps
		}
		if steps > 1000 {
			t.Fatal("walk never ends")
		}
	}
}

// layerTree makes a writable layer as a container leaves it: a 1 MiB
// file, a hard link to it, a sparse file, small files in nested dirs, and
// a symlink to a big directory outside the layer. It returns the layer.
func layerTree(t testing.TB) string {
	t.Helper()
	base := t.TempDir()
	layer := filepath.Join(base, "layer")
	outside := filepath.Join(base, "outside")
	writeFile(t, filepath.Join(outside, "big"), 4<<20)
	writeFile(t, filepath.Join(layer, "data", "1mib"), 1<<20)
	mustDo(t, os.Link(filepath.Join(layer, "data", "1mib"), filepath.Join(layer, "data", "hardlink")))
	for i := range 5 {
		writeFile(t, filepath.Join(layer, "etc", "conf.d", strconv.Itoa(i)), 100)
	}
	sparse, err := os.Create(filepath.Join(layer, "sparse"))
	mustDo(t, err)
	mustDo(t, sparse.Truncate(1<<30))
	mustDo(t, sparse.Close())
	mustDo(t, os.Symlink(outside, filepath.Join(layer, "escape")))
	return layer
}

func TestWalkCountsAllocatedBytesAndInodesLikeDu(t *testing.T) {
	layer := layerTree(t)
	bytes, inodes := walkAll(t, layer)
	// layer, data, 1mib (its hard link once), etc, conf.d, 5 files,
	// sparse, escape.
	if inodes != 12 {
		t.Errorf("inodes %d, want 12 (hard link once, symlink as itself)", inodes)
	}
	// The 1 MiB file once, not the 4 MiB behind the symlink, nor the
	// 1 GiB the sparse file claims.
	if bytes < 1<<20 || bytes >= 2<<20 {
		t.Errorf("bytes %d, want [1 MiB, 2 MiB): allocated, hard link once, symlink not followed", bytes)
	}
	// GNU du is the reference, when there.
	for _, c := range []struct {
		arg  string
		want uint64
	}{{"-B1", bytes}, {"--inodes", inodes}} {
		out, err := exec.Command("du", "-s", "-x", c.arg, layer).Output()
		if err != nil {
			t.Logf("du %s unavailable: %v", c.arg, err)
			continue
		}
		f := strings.Fields(string(out))
		if len(f) == 0 || f[0] != strconv.FormatUint(c.want, 10) {
			t.Errorf("du %s says %q, walk says %d", c.arg, strings.TrimSpace(string(out)), c.want)
		}
	}
}

func TestWalkResumesAcrossSteps(t *testing.T) {
	root := t.TempDir()
	for d := range 7 {
		for f := range 13 {
			writeFile(t, filepath.Join(root, "d"+strconv.Itoa(d), "sub", strconv.Itoa(f)), 10*f)
		}
	}
	wantBytes, wantInodes := walkAll(t, root)
	for _, max := range []int{1, 5, 64} {
		t.Run(fmt.Sprintf("%d entries a step", max), func(t *testing.T) {
			w := NewWalk(root)
			steps := walkInSteps(t, w, max, nil)
			if b, i := w.Sums(); b != wantBytes || i != wantInodes {
				t.Errorf("resumed walk: %d bytes, %d inodes; one step: %d, %d", b, i, wantBytes, wantInodes)
			}
			// 7 + 7 + 91 entries below the root.
			if wantSteps := (105 + max - 1) / max; steps < wantSteps {
				t.Errorf("%d steps, want at least %d", steps, wantSteps)
			}
			if done, err := w.Step(context.Background(), Budget{}); !done || err != nil {
				t.Errorf("step after the end: done %v, err %v", done, err)
			}
		})
	}
}

func TestWalkStopsAtItsDeadline(t *testing.T) {
	root := t.TempDir()
	for f := range 1000 {
		writeFile(t, filepath.Join(root, strconv.Itoa(f)), 0)
	}
	// Each look at the clock sees a millisecond later.
	clk := &clocktesting.SimpleIntervalClock{Time: time.Unix(0, 0), Duration: time.Millisecond}
	w := NewWalk(root)
	done, err := w.Step(context.Background(), Budget{Deadline: time.Unix(0, 0).Add(3 * time.Millisecond), Now: clk.Now})
	if err != nil || done {
		t.Fatalf("step: done %v, err %v; want stopped by the deadline", done, err)
	}
	if _, inodes := w.Sums(); inodes > 1+4*timeCheckEvery {
		t.Errorf("%d inodes counted past a deadline checked every %d entries", inodes, timeCheckEvery)
	}
}

// A directory queued by one step and replaced by a symlink before the
// next is not followed: nothing outside the layer is read.
func TestWalkDoesNotFollowADirectoryReplacedBySymlink(t *testing.T) {
	base := t.TempDir()
	layer, outside := filepath.Join(base, "layer"), filepath.Join(base, "outside")
	writeFile(t, filepath.Join(layer, "a", "small"), 10)
	writeFile(t, filepath.Join(outside, "big"), 4<<20)
	w := NewWalk(layer)
	if done, err := w.Step(context.Background(), Budget{MaxEntries: 1}); done || err != nil {
		t.Fatalf("first step: done %v, err %v", done, err)
	}
	mustDo(t, os.RemoveAll(filepath.Join(layer, "a")))
	mustDo(t, os.Symlink(outside, filepath.Join(layer, "a")))
	if done, err := w.Step(context.Background(), Budget{}); !done || err != nil {
		t.Fatalf("second step: done %v, err %v", done, err)
	}
	if bytes, inodes := w.Sums(); bytes >= 4<<20 || inodes != 2 {
		t.Errorf("%d bytes, %d inodes: the symlinked directory was followed", bytes, inodes)
	}
}

func TestWalkRootErrors(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "real", "f"), 10)
	mustDo(t, os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "link")))
	writeFile(t, filepath.Join(base, "file"), 10)
	for name, root := range map[string]string{"missing": filepath.Join(base, "nope"), "symlink": filepath.Join(base, "link"), "file": filepath.Join(base, "file")} {
		t.Run(name, func(t *testing.T) {
			if done, err := NewWalk(root).Step(context.Background(), Budget{}); err == nil || done {
				t.Errorf("walk of %s: done %v, err %v; want an error", root, done, err)
			}
		})
	}
	if _, err := NewWalk(filepath.Join(base, "nope")).Step(context.Background(), Budget{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing root: %v, want ErrNotExist", err)
	}

	// Replaced between two steps.
	writeFile(t, filepath.Join(base, "layer", "a", "b"), 10)
	w := NewWalk(filepath.Join(base, "layer"))
	if _, err := w.Step(context.Background(), Budget{MaxEntries: 1}); err != nil {
		t.Fatal(err)
	}
	mustDo(t, os.Rename(filepath.Join(base, "layer"), filepath.Join(base, "old")))
	mustDo(t, os.Mkdir(filepath.Join(base, "layer"), 0o755))
	if _, err := w.Step(context.Background(), Budget{}); !errors.Is(err, ErrRootChanged) {
		t.Errorf("replaced root: %v, want ErrRootChanged", err)
	}
}

func TestWalkStopsWhenCancelled(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a"), 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if done, err := NewWalk(root).Step(ctx, Budget{}); done || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled walk: done %v, err %v", done, err)
	}
}

// Another filesystem mounted inside the layer is not counted (needs root
// and a tmpfs mount; the mount is undone at the end).
func TestWalkStaysOnOneDevice(t *testing.T) {
	root := t.TempDir()
	mnt := filepath.Join(root, "mnt")
	mustDo(t, os.Mkdir(mnt, 0o755))
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	writeFile(t, filepath.Join(mnt, "big"), 4<<20)
	writeFile(t, filepath.Join(root, "small"), 10)
	if bytes, inodes := walkAll(t, root); bytes >= 4<<20 || inodes != 2 {
		t.Errorf("%d bytes, %d inodes: the walk crossed into the mounted tmpfs", bytes, inodes)
	}
}

// synthTree makes dirs directories of files small files each.
func synthTree(b testing.TB, dirs, files int) string {
	root := b.TempDir()
	for d := range dirs {
		dir := filepath.Join(root, "d"+strconv.Itoa(d))
		mustDo(b, os.MkdirAll(dir, 0o755))
		for f := range files {
			mustDo(b, os.WriteFile(filepath.Join(dir, strconv.Itoa(f)), []byte("x"), 0o644))
		}
	}
	return root
}

// BenchmarkWalk walks a synthetic layer of 20,000 files in 100
// directories (warm cache), whole and in slices of 5,000 entries.
func BenchmarkWalk(b *testing.B) {
	root := synthTree(b, 100, 200)
	for _, slice := range []int{0, 5000} {
		b.Run(fmt.Sprintf("slice=%d", slice), func(b *testing.B) {
			var entries uint64
			for b.Loop() {
				w := NewWalk(root)
				for {
					done, err := w.Step(context.Background(), Budget{MaxEntries: slice})
					if err != nil {
						b.Fatal(err)
					}
					if done {
						break
					}
				}
				_, n := w.Sums()
				entries += n
			}
			b.ReportMetric(float64(entries)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// openFds counts the process's open file descriptors.
func openFds(t testing.TB) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(fds)
}

// A tree deeper than the directories a walk keeps open, walked in slices:
// every slice resumes inside directories closed at the end of the last,
// some of them below the open ones (read whole, reopened name by name).
// The sums are the one-step walk's, and no slice leaves a directory open.
func TestWalkResumesAcrossStepsInADeepTree(t *testing.T) {
	root := t.TempDir()
	deep := root
	for i := range maxOpenDirs + 8 {
		deep = filepath.Join(deep, "d"+strconv.Itoa(i))
		for f := range 3 {
			writeFile(t, filepath.Join(deep, "f"+strconv.Itoa(f)), 10*f)
		}
		mustDo(t, os.Mkdir(filepath.Join(deep, "empty"), 0o755))
	}
	wantBytes, wantInodes := walkAll(t, root)
	// The root, and each level's directory, three files and empty.
	if want := uint64(1 + 5*(maxOpenDirs+8)); wantInodes != want {
		t.Fatalf("one step: %d inodes, want %d", wantInodes, want)
	}
	fds := openFds(t)
	for _, max := range []int{1, 4, 7} {
		t.Run(fmt.Sprintf("%d entries a step", max), func(t *testing.T) {
			w := NewWalk(root)
			walkInSteps(t, w, max, func(step int) {
				if n := openFds(t); n != fds {
					t.Fatalf("%d files open after step %d, %d before the walk", n, step, fds)
				}
			})
			if b, i := w.Sums(); b != wantBytes || i != wantInodes {
				t.Errorf("resumed walk: %d bytes, %d inodes; one step: %d, %d", b, i, wantBytes, wantInodes)
			}
		})
	}
}

// duSums is what DiskUsage returns, comparable in one ==.
type duSums struct{ bytes, inodes uint64 }

func diskUsage(root string, dev uint64) duSums {
	bytes, inodes := DiskUsage(root, dev)
	return duSums{bytes, inodes}
}

// pathDiskUsage is ImageFsInfo's walk as it was written first
// (filepath.WalkDir, Lstat per entry): the reference the relative walk
// must agree with.
func pathDiskUsage(root string, dev uint64) duSums {
	var u duSums
	seen := map[uint64]bool{}
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d == nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Dev != dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && st.Nlink > 1 {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		u.inodes++
		u.bytes += uint64(st.Blocks) * 512
		return nil
	})
	return u
}

func devOf(t testing.TB, path string) uint64 {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Dev
}

func TestDiskUsage(t *testing.T) {
	root := t.TempDir()
	layer := filepath.Join(root, "layer")
	writeFile(t, filepath.Join(layer, "diff", "bin", "busybox"), 64<<10)
	// Hard links: counted once, whether both are inside or one is outside.
	if err := os.Link(filepath.Join(layer, "diff", "bin", "busybox"), filepath.Join(layer, "diff", "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "outside"), 8<<10)
	if err := os.Link(filepath.Join(root, "outside"), filepath.Join(layer, "diff", "inside")); err != nil {
		t.Fatal(err)
	}
	// A symlink is an entry, not followed (it points at the whole root).
	if err := os.Symlink(root, filepath.Join(layer, "diff", "loop")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(layer, "work", "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Deeper than the directories the walk keeps open: the rest read
	// whole and reopened name by name.
	deep := filepath.Join(layer, "diff", "deep")
	for i := range maxOpenDirs + 8 {
		deep = filepath.Join(deep, "d"+strconv.Itoa(i))
	}
	writeFile(t, filepath.Join(deep, "bottom"), 4<<10)
	if err := os.Link(filepath.Join(layer, "diff", "bin", "busybox"), filepath.Join(deep, "busybox-again")); err != nil {
		t.Fatal(err)
	}
	dev := devOf(t, root)

	got, want := diskUsage(layer, dev), pathDiskUsage(layer, dev)
	if got != want {
		t.Errorf("diskUsage = %+v, the path walk's %+v", got, want)
	}
	// layer, diff, bin, busybox (sh and busybox-again are the same
	// inode), inside, loop, work, work/work, deep = 9; maxOpenDirs+8
	// levels; bottom.
	if wantInodes := uint64(9 + maxOpenDirs + 8 + 1); got.inodes != wantInodes {
		t.Errorf("inodes %d, want %d", got.inodes, wantInodes)
	}
	for _, c := range []struct {
		name string
		path string
		dev  uint64
		want duSums
	}{
		{"a file", filepath.Join(root, "outside"), dev, pathDiskUsage(filepath.Join(root, "outside"), dev)},
		{"another device", layer, dev + 1, duSums{}},
		{"gone", filepath.Join(root, "nothing"), dev, duSums{}},
	} {
		if got := diskUsage(c.path, c.dev); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// benchLayers is how many writable layers BenchmarkDiskUsage walks: a
// node of 50 pods, a sandbox and a container each.
const benchLayers = 100

// BenchmarkDiskUsage walks 100 containers' writable layers as overlay2
// lays them out, what an ImageFsInfo refresh does: "relative" is
// DiskUsage, "paths" the filepath.WalkDir walk it replaced.
func BenchmarkDiskUsage(b *testing.B) {
	driver := filepath.Join(b.TempDir(), "docker", "overlay2")
	var layers []string
	for i := range benchLayers {
		l := filepath.Join(driver, strings.Repeat("0", 60)+strconv.Itoa(1000+i))
		for _, d := range []string{"diff/tmp", "work/work", "merged"} {
			if err := os.MkdirAll(filepath.Join(l, d), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		// overlay2's link holds the layer's short name, lower its
		// lower layers' ("l/" and a short name).
		writeFile(b, filepath.Join(l, "link"), len("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
		writeFile(b, filepath.Join(l, "lower"), len("l/ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
		writeFile(b, filepath.Join(l, "diff", "tmp", "out"), len("x"))
		layers = append(layers, l)
	}
	dev := devOf(b, driver)
	for _, c := range []struct {
		name string
		du   func(string, uint64) duSums
	}{{"relative", diskUsage}, {"paths", pathDiskUsage}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, l := range layers {
					c.du(l, dev)
				}
			}
		})
	}
}
