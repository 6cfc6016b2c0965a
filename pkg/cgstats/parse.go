package cgstats

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// ParseUint parses a single-value cgroup file (memory.usage_in_bytes,
// memory.current, cpuacct.usage, pids.current).
func ParseUint(data []byte) (uint64, error) {
	v, err := strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a counter: %w", err)
	}
	return v, nil
}

// ParseFlatKeyed parses a "key value" per line cgroup file (memory.stat,
// cpu.stat). Lines whose value is not a number are skipped.
func ParseFlatKeyed(data []byte) map[string]uint64 {
	out := make(map[string]uint64, 48)
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err == nil {
			out[string(k)] = n
		}
	}
	return out
}

// PSI is one resource's pressure stall information (cpu.pressure,
// memory.pressure, io.pressure). Full is nil when the kernel does not
// report it (cpu.pressure before Linux 5.13).
type PSI struct {
	Some, Full *PSIData
}

// PSIData is one line of a pressure file: the share of time (percent)
// some or all tasks stalled, averaged over 10 s, 60 s and 300 s, and the
// cumulative stall time in microseconds.
type PSIData struct {
	Avg10, Avg60, Avg300 float64
	TotalMicros          uint64
}

// ParsePSI parses a pressure file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
func ParsePSI(data []byte) (*PSI, error) {
	psi := &PSI{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		d := &PSIData{}
		seen := 0
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("pressure line %q: field %q is not key=value", line, f)
			}
			var err error
			switch k {
			case "avg10":
				d.Avg10, err = strconv.ParseFloat(v, 64)
			case "avg60":
				d.Avg60, err = strconv.ParseFloat(v, 64)
			case "avg300":
				d.Avg300, err = strconv.ParseFloat(v, 64)
			case "total":
				d.TotalMicros, err = strconv.ParseUint(v, 10, 64)
			default:
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("pressure line %q: %w", line, err)
			}
			seen++
		}
		if seen != 4 {
			return nil, fmt.Errorf("pressure line %q: want avg10, avg60, avg300 and total", line)
		}
		switch fields[0] {
		case "some":
			psi.Some = d
		case "full":
			psi.Full = d
		}
	}
	if psi.Some == nil {
		return nil, fmt.Errorf("pressure file has no \"some\" line")
	}
	return psi, nil
}

// Interface is one network interface's counters from /proc/<pid>/net/dev.
type Interface struct {
	Name                                    string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// ParseNetDev parses /proc/<pid>/net/dev: two header lines, then
// "name: 8 receive counters 8 transmit counters" per interface, in the
// order the kernel lists them.
func ParseNetDev(data []byte) ([]Interface, error) {
	lines := strings.Split(string(data), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "|") {
		return nil, fmt.Errorf("net/dev has no header")
	}
	var out []Interface
	for _, line := range lines[2:] {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			if strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("net/dev line %q has no interface name", line)
			}
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			return nil, fmt.Errorf("net/dev line %q: want 16 counters, got %d", line, len(f))
		}
		var n [16]uint64
		for i := range n {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("net/dev line %q: %w", line, err)
			}
			n[i] = v
		}
		out = append(out, Interface{
			Name:    strings.TrimSpace(name),
			RxBytes: n[0], RxPackets: n[1], RxErrors: n[2], RxDropped: n[3],
			TxBytes: n[8], TxPackets: n[9], TxErrors: n[10], TxDropped: n[11],
		})
	}
	return out, nil
}
