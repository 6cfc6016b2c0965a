package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// defaultMode is netshim with no flag beyond the bench's own; it is
// always measured, first in the table.
const defaultMode = "default"

// containerdMode names the column of containerd's own CRI plugin, the peer
// netshim is compared with (--containerd-bin-dir); a --mode cannot take it.
const containerdMode = "containerd"

// runtimeKind is which CRI runtime a mode runs. The zero value is netshim,
// so that every mode made from --mode is one.
type runtimeKind int

const (
	kindNetshim runtimeKind = iota
	kindContainerd
)

// mode is one column of the table: a netshim configuration (a name and the
// flags added to netshim's command line), or the containerd peer.
type mode struct {
	name string
	args []string
	kind runtimeKind
}

func (m mode) String() string {
	switch {
	case m.kind == kindContainerd:
		return m.name + " (containerd's own CRI plugin)"
	case len(m.args) == 0:
		return m.name + " (no extra flag)"
	}
	return m.name + " (" + strings.Join(m.args, " ") + ")"
}

var modeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// modeFlags is the repeated --mode NAME='--flag1 --flag2' flag.
type modeFlags struct{ modes []mode }

func (f *modeFlags) String() string {
	names := make([]string, len(f.modes))
	for i, m := range f.modes {
		names[i] = m.String()
	}
	return strings.Join(names, ", ")
}

// Set parses NAME=FLAGS. FLAGS split on white space; there is no quoting
// (a flag's value with a space is not something netshim takes), so a quote
// is refused rather than passed on as part of an argument.
func (f *modeFlags) Set(v string) error {
	name, args, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want NAME='--flag1 --flag2'", v)
	}
	if !modeName.MatchString(name) {
		return fmt.Errorf("mode name %q: want letters, digits, '.', '_' or '-'", name)
	}
	if name == defaultMode {
		return fmt.Errorf("mode %q is built in (netshim with no extra flag)", defaultMode)
	}
	if name == containerdMode {
		return fmt.Errorf("mode %q is the containerd peer's column (--containerd-bin-dir)", containerdMode)
	}
	for _, m := range f.modes {
		if m.name == name {
			return fmt.Errorf("mode %q given twice", name)
		}
	}
	if strings.ContainsAny(args, `"'\`) {
		return fmt.Errorf("mode %s: %q: no quoting; flags are split on white space", name, args)
	}
	fields := strings.Fields(args)
	if len(fields) > 0 && !strings.HasPrefix(fields[0], "-") {
		return fmt.Errorf("mode %s: %q does not start with a flag", name, args)
	}
	f.modes = append(f.modes, mode{name: name, args: fields})
	return nil
}

// all is the default mode followed by the ones given.
func (f *modeFlags) all() []mode {
	return append([]mode{{name: defaultMode}}, f.modes...)
}

// columns are the modes the bench runs and the table shows: netshim's,
// then, when asked for, containerd's CRI as their peer.
func columns(netshimModes []mode, withContainerd bool) []mode {
	out := slices.Clone(netshimModes)
	if withContainerd {
		out = append(out, mode{name: containerdMode, kind: kindContainerd})
	}
	return out
}

// schedule is the order of the runs: rounds of every mode, each round
// starting one mode later than the one before, so that no mode always runs
// first (on a fresh engine) or last (after the others warmed the caches).
func schedule(modes []mode, rounds int) []run {
	var out []run
	for r := 0; r < rounds; r++ {
		for i := range modes {
			out = append(out, run{round: r + 1, mode: modes[(r+i)%len(modes)]})
		}
	}
	return out
}

// run is one measurement of one mode.
type run struct {
	round int
	mode  mode
}

func (r run) String() string { return fmt.Sprintf("%s, round %d", r.mode.name, r.round) }
