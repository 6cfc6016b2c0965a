package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// memTotal is the machine's memory, from /proc/meminfo.
func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "?"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			fields := strings.Fields(v)
			if kb, err := strconv.ParseFloat(fields[0], 64); err == nil {
				return strconv.FormatFloat(kb/(1<<20), 'f', 1, 64) + " GiB"
			}
		}
	}
	return "?"
}

// osName is PRETTY_NAME from /etc/os-release.
func osName() string {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "?"
}

func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(data))
}

// pluginVersion is what the bridge plugin says of itself when run with no
// CNI_COMMAND ("CNI bridge plugin v1.1.1"), or else the version of the
// Debian package that installed it (Debian's build says "version unknown").
func pluginVersion(binDir string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "bridge"))
	cmd.Env = []string{}
	out, _ := cmd.CombinedOutput()
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "v") && strings.Contains(f, ".") {
			return f
		}
	}
	out, err := exec.CommandContext(ctx, "dpkg-query", "-S", filepath.Join(binDir, "bridge")).Output()
	if err != nil {
		return "version unknown"
	}
	pkg, _, _ := strings.Cut(strings.TrimSpace(string(out)), ":")
	ver, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(ver) == 0 {
		return "version unknown"
	}
	return pkg + " " + string(ver)
}
