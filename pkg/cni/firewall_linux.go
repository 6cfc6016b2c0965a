package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// probeHostFirewall reads bridge netfilter's sysctl and, only when it is
// on, the filter table (one iptables fork; this runs on a config change
// and at most once a minute, never for a status poll).
func probeHostFirewall(ctx context.Context) (hostFirewall, error) {
	var fw hostFirewall
	data, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
	if errors.Is(err, os.ErrNotExist) {
		return fw, nil // br_netfilter not loaded: bridged traffic skips iptables
	}
	if err != nil {
		return fw, err
	}
	fw.bridgeNFCallIPTables = strings.TrimSpace(string(data)) == "1"
	if !fw.bridgeNFCallIPTables {
		return fw, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "iptables", "-w", "5", "-t", "filter", "-S").Output()
	if err != nil {
		return fw, fmt.Errorf("iptables -S: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if f := strings.Fields(line); len(f) == 3 && f[0] == "-P" && f[1] == "FORWARD" {
			fw.forwardPolicy = f[2]
		}
		if line != "" {
			fw.rules = append(fw.rules, line)
		}
	}
	return fw, nil
}
