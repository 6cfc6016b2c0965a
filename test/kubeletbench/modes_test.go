package main

import (
	"slices"
	"strings"
	"testing"
)

func TestModeFlags(t *testing.T) {
	var f modeFlags
	for _, v := range []string{"pinned=--sandbox-netns=pinned", "both=--sandbox-netns=docker  -v=2", "same="} {
		if err := f.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	all := f.all()
	var got []string
	for _, m := range all {
		got = append(got, m.name+":"+strings.Join(m.args, ","))
	}
	want := []string{"default:", "pinned:--sandbox-netns=pinned", "both:--sandbox-netns=docker,-v=2", "same:"}
	if !slices.Equal(got, want) {
		t.Errorf("modes = %q, want %q", got, want)
	}
	for _, bad := range []string{
		"pinned=--x",           // given twice
		"default=--x",          // built in
		"noequals",             // no NAME=
		"=--x",                 // no name
		"a b=--x",              // bad name
		"q='--a --b'",          // quoting
		"v=value --flag",       // not starting with a flag
		`bs=--a\ b`,            // backslash
		"dq=--netns-dir=\"x\"", // double quote
		"containerd=--x",       // the peer's column
	} {
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q): no error", bad)
		}
	}
	if len(f.all()) != 4 {
		t.Errorf("a refused mode was added: %v", f.all())
	}
}

func TestSchedule(t *testing.T) {
	modes := []mode{{name: "a"}, {name: "b"}, {name: "c"}}
	var got []string
	for _, r := range schedule(modes, 3) {
		got = append(got, r.mode.name)
	}
	want := []string{"a", "b", "c", "b", "c", "a", "c", "a", "b"}
	if !slices.Equal(got, want) {
		t.Errorf("schedule = %v, want %v", got, want)
	}
	if n := len(schedule(modes[:1], 2)); n != 2 {
		t.Errorf("one mode, two rounds: %d runs", n)
	}
}

func TestColumns(t *testing.T) {
	netshim := []mode{{name: "default"}, {name: "pauseless", args: []string{"--sandbox-netns=pauseless"}}}
	if got := columns(netshim, false); len(got) != 2 {
		t.Errorf("without the peer: %v", got)
	}
	got := columns(netshim, true)
	if len(got) != 3 || got[2].name != containerdMode || got[2].kind != kindContainerd || got[0].kind != kindNetshim {
		t.Fatalf("with the peer: %v", got)
	}
	if len(netshim) != 2 {
		t.Error("columns changed its argument")
	}
	// The peer is rotated like any mode.
	var order []string
	for _, r := range schedule(got, 2) {
		order = append(order, r.mode.name)
	}
	if want := []string{"default", "pauseless", "containerd", "pauseless", "containerd", "default"}; !slices.Equal(order, want) {
		t.Errorf("schedule = %v, want %v", order, want)
	}
	if s := got[2].String(); !strings.Contains(s, "containerd's own CRI plugin") {
		t.Errorf("String = %q", s)
	}
}
