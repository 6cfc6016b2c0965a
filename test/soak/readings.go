package soak

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// gauge reads an unlabelled sample, `name value`, from Prometheus's text
// exposition format.
func gauge(text, name string) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %q: %w", name, line, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("metric %s is not in the exposition", name)
}

// heapAlloc reads the live heap from a heap profile in its text form
// (/debug/pprof/heap?debug=1): the runtime.MemStats footer's HeapAlloc.
// With gc=1 the profile is taken right after a collection, so the number
// is what is live, not what garbage happens to be waiting.
func heapAlloc(profile string) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(profile))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no HeapAlloc line in the heap profile")
}

// rssBytes reads a process's resident set size from /proc/PID/status.
func rssBytes(procDir string, pid int) (float64, error) {
	data, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("pid %d: VmRSS line %q", pid, line)
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		return kb * 1024, err
	}
	return 0, fmt.Errorf("pid %d: no VmRSS in its status", pid)
}

// openFDs counts a process's open descriptors.
func openFDs(procDir string, pid int) (float64, error) {
	ents, err := os.ReadDir(filepath.Join(procDir, strconv.Itoa(pid), "fd"))
	return float64(len(ents)), err
}
