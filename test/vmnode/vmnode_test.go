package vmnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQemuArgs(t *testing.T) {
	cfg := Config{Image: &Image{Kernel: "/k", Initrd: "/i", Cmdline: "root=LABEL=ROOT"}}
	cfg.defaults()
	args := strings.Join(QemuArgs(cfg, "/w/root.qcow2", "/w/in.img", "/w/out.img", "/w/console.log", "/w/results.log"), " ")
	for _, want := range []string{
		"-accel tcg,thread=multi",
		"-smp 2 -m 4096",
		"-kernel /k -initrd /i -append root=LABEL=ROOT",
		"file=/w/root.qcow2,if=virtio,format=qcow2",
		"file=/w/in.img,if=virtio,format=raw,readonly=on",
		"file=/w/out.img,if=virtio,format=raw",
		"socket,id=console,path=/w/console.log.sock,server=on,wait=off,logfile=/w/console.log",
		"virtserialport,chardev=results,name=netshim.results",
		"-nic none",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("qemu args lack %q:\n%s", want, args)
		}
	}
	// The node must have no way out: no user-mode or tap network.
	for _, bad := range []string{"-nic user", "-netdev", "hostfwd", "-device virtio-net"} {
		if strings.Contains(args, bad) {
			t.Errorf("qemu args have %q:\n%s", bad, args)
		}
	}
}

// A disk made from a directory holds its files, labelled, without a loop
// mount; debugfs reads them back as Collect does.
func TestMakeDiskHoldsTheDirectory(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (e2fsprogs): %v", tool, err)
		}
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.MkdirAll(filepath.Join(in, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "sub", "run"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mib, err := dirMiB(in)
	if err != nil || mib != 1 {
		t.Fatalf("dirMiB = %d, %v; want 1 (rounded up)", mib, err)
	}
	img := filepath.Join(dir, "in.img")
	if err := makeDisk(img, "NSIN", 16, in); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("debugfs", "-R", "cat /sub/run", img).Output()
	if err != nil || string(out) != "#!/bin/sh\necho hi\n" {
		t.Errorf("debugfs cat /sub/run = %q, %v", out, err)
	}
	label, err := exec.Command("e2label", img).Output()
	if err != nil || strings.TrimSpace(string(label)) != "NSIN" {
		t.Errorf("label %q, %v; want NSIN", label, err)
	}
	n := &Node{OutDisk: img, done: make(chan struct{})}
	if err := n.Collect(filepath.Join(dir, "x")); err == nil {
		t.Error("Collect while qemu runs succeeded")
	}
	close(n.done)
	if err := n.Collect(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "x", "sub", "run")); err != nil || !strings.Contains(string(b), "echo hi") {
		t.Errorf("collected sub/run = %q, %v", b, err)
	}
}

// Follow delivers every complete line as it arrives, and the last ones
// written before qemu exited.
func TestFollow(t *testing.T) {
	dir := t.TempDir()
	n := &Node{Results: filepath.Join(dir, "results.log"), done: make(chan struct{})}
	f, err := os.Create(n.Results)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer f.Close()
		_, _ = f.WriteString("PASS a (1s)\npartial")
		time.Sleep(700 * time.Millisecond) // a line split across two writes
		_, _ = f.WriteString(" line\nvm: done: 1 passed, 0 failed\n")
		close(n.done)
	}()
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.Follow(ctx, func(l string) bool { got = append(got, l); return true }); err != nil {
		t.Fatal(err)
	}
	want := []string{"PASS a (1s)", "partial line", "vm: done: 1 passed, 0 failed"}
	if !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}

func TestLoadImageNeedsACompleteImage(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadImage(dir); err == nil {
		t.Fatal("LoadImage of an empty directory succeeded")
	}
	for name, body := range map[string]string{".done": "", "cmdline": "root=LABEL=ROOT rw\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := LoadImage(dir)
	if err != nil || img.Cmdline != "root=LABEL=ROOT rw" || img.Root != filepath.Join(dir, "root.img") {
		t.Fatalf("LoadImage = %+v, %v", img, err)
	}
}
