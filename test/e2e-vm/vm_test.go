//go:build vm

// Package e2evm is `make e2e-vm`: netshim on the node users run, a Debian
// 12 VM (test/vmnode) with systemd as PID 1, cgroup v2 and Docker's systemd
// cgroup driver, driven from inside by the guest program (./guest), which
// installs netshim's .deb, runs kubelet v1.37 as a systemd service with its
// defaults, and checks pods, cgroups, stats, restarts, the watchdog and two
// reboots, in the default and the pause-less sandbox modes. hack/e2e-vm.sh
// assembles the input directory (VM_INPUT_DIR) and builds the image
// (VM_IMAGE_DIR); the artefacts (console, results, the node's journal) go to
// VM_ARTIFACTS.
package e2evm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netshim/netshim/test/vmnode"
)

// wantPassed is how many checks the guest program runs (test/e2e-vm/guest,
// checks.go): a run that passes fewer fails, so a check that silently
// stopped running is seen.
const wantPassed = 41

// budget bounds the whole run; past it qemu is killed and the console kept.
func budget() time.Duration {
	if v := os.Getenv("VM_BUDGET"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return 45 * time.Minute
}

var (
	passRe = regexp.MustCompile(`^PASS (\S+)`)
	failRe = regexp.MustCompile(`^FAIL (\S+): (.*)$`)
	doneRe = regexp.MustCompile(`^vm: done: (\d+) passed, (\d+) failed`)
)

func TestVMNode(t *testing.T) {
	imageDir, inputDir, artifacts := os.Getenv("VM_IMAGE_DIR"), os.Getenv("VM_INPUT_DIR"), os.Getenv("VM_ARTIFACTS")
	if imageDir == "" || inputDir == "" || artifacts == "" {
		t.Fatal("VM_IMAGE_DIR, VM_INPUT_DIR and VM_ARTIFACTS must be set (make e2e-vm sets them)")
	}
	img, err := vmnode.LoadImage(imageDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	node, err := vmnode.Boot(vmnode.Config{Image: img, WorkDir: artifacts, InputDir: inputDir})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Kill()
	fmt.Printf("e2e-vm: qemu started (console %s)\n", node.Console)

	ctx, cancel := context.WithTimeout(context.Background(), budget())
	defer cancel()
	type result struct{ name, why string }
	var results []result
	done, donePassed, doneFailed := false, -1, -1
	err = node.Follow(ctx, func(line string) bool {
		fmt.Printf("[%s] %s\n", time.Since(start).Round(time.Second), line)
		switch {
		case passRe.MatchString(line):
			results = append(results, result{name: passRe.FindStringSubmatch(line)[1]})
		case failRe.MatchString(line):
			m := failRe.FindStringSubmatch(line)
			results = append(results, result{name: m[1], why: m[2]})
		case doneRe.MatchString(line):
			m := doneRe.FindStringSubmatch(line)
			donePassed, _ = strconv.Atoi(m[1])
			doneFailed, _ = strconv.Atoi(m[2])
			done = true
		}
		return true
	})
	if err != nil {
		t.Errorf("following the node's results: %v (after %s; console: %s)", err, time.Since(start).Round(time.Second), node.Console)
		node.Kill()
	}
	// The guest powers off after its last line; give it the time.
	select {
	case <-node.Done():
	case <-time.After(3 * time.Minute):
		t.Errorf("qemu still runs 3 minutes after the guest's last line; killed")
		node.Kill()
	}
	if err := node.Collect(filepath.Join(artifacts, "node")); err != nil {
		t.Errorf("collecting the node's logs: %v", err)
	}
	passed, failed := 0, 0
	for _, r := range results {
		t.Run(r.name, func(t *testing.T) {
			if r.why != "" {
				t.Error(r.why)
			}
		})
		if r.why == "" {
			passed++
		} else {
			failed++
		}
	}
	if !done {
		failed++
		t.Errorf("the guest never finished (budget %s; last console lines:\n%s)", budget(), consoleTail(node.Console, 30))
	} else if donePassed != passed || doneFailed != failed {
		t.Errorf("the guest counted %d passed, %d failed; the lines say %d, %d", donePassed, doneFailed, passed, failed)
	}
	if passed < wantPassed {
		t.Errorf("%d checks passed, want %d", passed, wantPassed)
	}
	fmt.Printf("e2e-vm: run time %s\n", time.Since(start).Round(time.Second))
	fmt.Printf("e2e-vm: %d passed, %d failed\n", passed, failed)
}

func consoleTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
