package dockerservice

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// pathDiskUsage is diskUsage as it was written first (filepath.WalkDir,
// Lstat per entry): the reference the relative walk must agree with.
func pathDiskUsage(root string, dev uint64) fsUsage {
	var u fsUsage
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
	writeSizedFile(t, filepath.Join(layer, "diff", "bin", "busybox"), 64<<10)
	// Hard links: counted once, whether both are inside or one is outside.
	if err := os.Link(filepath.Join(layer, "diff", "bin", "busybox"), filepath.Join(layer, "diff", "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	writeSizedFile(t, filepath.Join(root, "outside"), 8<<10)
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
	// Deeper than the directories the walk keeps open: the rest by path.
	deep := filepath.Join(layer, "diff", "deep")
	for i := range maxOpenDirs + 8 {
		deep = filepath.Join(deep, "d"+strconv.Itoa(i))
	}
	writeSizedFile(t, filepath.Join(deep, "bottom"), 4<<10)
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
		want fsUsage
	}{
		{"a file", filepath.Join(root, "outside"), dev, pathDiskUsage(filepath.Join(root, "outside"), dev)},
		{"another device", layer, dev + 1, fsUsage{}},
		{"gone", filepath.Join(root, "nothing"), dev, fsUsage{}},
	} {
		if got := diskUsage(c.path, c.dev); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// BenchmarkDiskUsage walks 100 containers' writable layers as overlay2
// lays them out, what an ImageFsInfo refresh does: "relative" is
// diskUsage, "paths" the filepath.WalkDir walk it replaced.
func BenchmarkDiskUsage(b *testing.B) {
	driver := filepath.Join(b.TempDir(), "docker", "overlay2")
	var layers []string
	for i := range 2 * statsBenchPods {
		l := filepath.Join(driver, strings.Repeat("0", 60)+strconv.Itoa(1000+i))
		for _, d := range []string{"diff/tmp", "work/work", "merged"} {
			if err := os.MkdirAll(filepath.Join(l, d), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		writeTextFile(b, filepath.Join(l, "link"), "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
		writeTextFile(b, filepath.Join(l, "lower"), "l/ABCDEFGHIJKLMNOPQRSTUVWXYZ")
		writeTextFile(b, filepath.Join(l, "diff", "tmp", "out"), "x")
		layers = append(layers, l)
	}
	dev := devOf(b, driver)
	for _, c := range []struct {
		name string
		du   func(string, uint64) fsUsage
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
