// Package vmnode boots a real Debian node in a VM for tests: systemd as
// PID 1, cgroup v2, Docker with its systemd cgroup driver, a real reboot.
// The image comes from hack/vm-image.sh (cached, built from Debian's
// packages); each run boots it under qemu's software emulation (KVM does
// not work on the development machines) through a qcow2 overlay, so the
// image is never written.
//
// A run passes its artefacts in on a disk of their own (an ext4 image with
// label NSIN, made by mkfs.ext4 -d from a directory: no loop mount), whose
// "run" the node's netshim-vmtest.service starts at every boot. The
// program's lines come out on a virtio-serial port (a file here, read as it
// grows), its logs on a second disk (label NSOUT) that Collect unpacks with
// debugfs once qemu exited. The node has no network card: nothing it does
// leaves the VM, and nothing of the host's Docker, cgroups or network is
// touched.
package vmnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Image is a built node image: hack/vm-image.sh's directory.
type Image struct {
	Dir     string
	Root    string // root.img (raw ext4)
	Kernel  string // vmlinuz
	Initrd  string // initrd.img
	Cmdline string
}

// LoadImage checks dir holds a complete image.
func LoadImage(dir string) (*Image, error) {
	img := &Image{
		Dir:    dir,
		Root:   filepath.Join(dir, "root.img"),
		Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.img"),
	}
	if _, err := os.Stat(filepath.Join(dir, ".done")); err != nil {
		return nil, fmt.Errorf("no complete VM image in %s (hack/vm-image.sh build): %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return nil, err
	}
	img.Cmdline = strings.TrimSpace(string(b))
	return img, nil
}

// Config is one boot of a node.
type Config struct {
	Image *Image
	// WorkDir holds the run's overlay, disks, console and results; it
	// must exist and be the run's own.
	WorkDir string
	// InputDir becomes the NSIN disk; it must hold an executable "run".
	InputDir string
	CPUs     int
	MemMiB   int
	// OutDiskMiB is the size of the NSOUT disk.
	OutDiskMiB int
	// Qemu is the emulator (default qemu-system-x86_64 on PATH).
	Qemu string
}

// Node is a running VM.
type Node struct {
	cfg     Config
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error

	Console string // the guest's serial console, as written
	Results string // the results port, as written
	OutDisk string
}

func (c *Config) defaults() {
	if c.CPUs == 0 {
		c.CPUs = 2
	}
	if c.MemMiB == 0 {
		c.MemMiB = 4096
	}
	if c.OutDiskMiB == 0 {
		c.OutDiskMiB = 512
	}
	if c.Qemu == "" {
		c.Qemu = "qemu-system-x86_64"
	}
}

// QemuArgs is the emulator's command line for cfg (exported for a person
// who wants to boot the same node by hand, and for tests).
func QemuArgs(cfg Config, overlay, inDisk, outDisk, console, results string) []string {
	return []string{
		// TCG: KVM guests hang on these machines (shared/notes/vm-nodes.md).
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", strconv.Itoa(cfg.CPUs), "-m", strconv.Itoa(cfg.MemMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none",
		"-kernel", cfg.Image.Kernel, "-initrd", cfg.Image.Initrd, "-append", cfg.Image.Cmdline,
		"-drive", "file=" + overlay + ",if=virtio,format=qcow2",
		"-drive", "file=" + inDisk + ",if=virtio,format=raw,readonly=on",
		"-drive", "file=" + outDisk + ",if=virtio,format=raw",
		// The console is a socket a person can attach to (socat -
		// UNIX-CONNECT:console.sock: root is logged in), logged to a file.
		"-chardev", "socket,id=console,path=" + console + ".sock,server=on,wait=off,logfile=" + console,
		"-serial", "chardev:console",
		"-device", "virtio-serial-pci",
		"-chardev", "file,id=results,path=" + results,
		"-device", "virtserialport,chardev=results,name=netshim.results",
		// No network card at all: the node is alone.
		"-nic", "none",
	}
}

// Boot makes the run's disks and starts qemu. The guest reboots inside
// the same qemu process; qemu exits when the guest powers off.
func Boot(cfg Config) (*Node, error) {
	cfg.defaults()
	if cfg.Image == nil {
		return nil, errors.New("vmnode: no image")
	}
	if fi, err := os.Stat(filepath.Join(cfg.InputDir, "run")); err != nil || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("vmnode: %s has no executable run (%v)", cfg.InputDir, err)
	}
	n := &Node{
		cfg:     cfg,
		done:    make(chan struct{}),
		Console: filepath.Join(cfg.WorkDir, "console.log"),
		Results: filepath.Join(cfg.WorkDir, "results.log"),
		OutDisk: filepath.Join(cfg.WorkDir, "out.img"),
	}
	overlay := filepath.Join(cfg.WorkDir, "root.qcow2")
	inDisk := filepath.Join(cfg.WorkDir, "in.img")
	for _, f := range []string{overlay, inDisk, n.OutDisk, n.Console, n.Console + ".sock", n.Results} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if err := command("qemu-img", "create", "-q", "-f", "qcow2", "-b", cfg.Image.Root, "-F", "raw", overlay); err != nil {
		return nil, err
	}
	inMiB, err := dirMiB(cfg.InputDir)
	if err != nil {
		return nil, err
	}
	// ext4's own metadata, and room: half again, plus 64 MiB.
	if err := makeDisk(inDisk, "NSIN", inMiB*3/2+64, cfg.InputDir); err != nil {
		return nil, err
	}
	if err := makeDisk(n.OutDisk, "NSOUT", cfg.OutDiskMiB, ""); err != nil {
		return nil, err
	}
	// The results file exists before qemu opens it, so a reader can
	// follow it from the start.
	if err := os.WriteFile(n.Results, nil, 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(cfg.WorkDir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	n.cmd = exec.Command(cfg.Qemu, QemuArgs(cfg, overlay, inDisk, n.OutDisk, n.Console, n.Results)...)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	// Its own process group: Kill ends qemu and nothing else.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", cfg.Qemu, err)
	}
	go func() {
		n.waitErr = n.cmd.Wait()
		log.Close()
		close(n.done)
	}()
	return n, nil
}

// Done is closed once qemu exited.
func (n *Node) Done() <-chan struct{} { return n.done }

// Kill ends qemu (the guest's power cord) and waits for it.
func (n *Node) Kill() {
	if n.cmd.Process != nil {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-n.done
}

// Err is qemu's exit error, once Done.
func (n *Node) Err() error { return n.waitErr }

// Follow calls line for each complete line of the results port as it
// arrives, until fn returns false, qemu exits (after the last lines were
// read) or ctx ends.
func (n *Node) Follow(ctx context.Context, line func(string) bool) error {
	f, err := os.Open(n.Results)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var partial strings.Builder
	exited := false
	for {
		s, err := r.ReadString('\n')
		partial.WriteString(s)
		if err == nil {
			l := strings.TrimRight(partial.String(), "\r\n")
			partial.Reset()
			if !line(l) {
				return nil
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		if exited {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.done:
			// One more pass reads what qemu wrote last.
			exited = true
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Collect unpacks the NSOUT disk's files into dest (qemu must have
// exited: the guest's page cache is flushed at power-off).
func (n *Node) Collect(dest string) error {
	select {
	case <-n.done:
	default:
		return errors.New("vmnode: Collect while qemu runs")
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	return command("debugfs", "-R", "rdump / "+dest, n.OutDisk)
}

// dirMiB is the size of the files under dir, in MiB, rounded up.
func dirMiB(dir string) (int, error) {
	var total int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		total += fi.Size()
		return nil
	})
	return int((total + (1<<20 - 1)) >> 20), err
}

// makeDisk writes an ext4 image of mib MiB with label, holding from's
// files (none if from is empty).
func makeDisk(path, label string, mib int, from string) error {
	if err := os.Truncate(path, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(mib) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	args := []string{"-q", "-F", "-L", label}
	if from != "" {
		args = append(args, "-d", from)
	}
	return command("mkfs.ext4", append(args, path)...)
}

func command(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
