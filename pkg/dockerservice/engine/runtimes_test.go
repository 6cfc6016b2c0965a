package engine

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"

	"github.com/netshim/netshim/internal/fakedocker"
)

// docker2010Info is what Docker 20.10 on this machine says.
func docker2010Info(kernel string) system.Info {
	return fakedocker.RuntimesInfo(kernel, "runc", map[string]string{"io.containerd.runc.v2": "", "io.containerd.runtime.v1.linux": "", "runc": ""})
}

func TestParseKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"6.18.44-fc-v669", 6, 18, true},
		{"5.12.0", 5, 12, true},
		{"5.10.0-23-amd64", 5, 10, true},
		{"5.15.153.1-microsoft-standard-WSL2", 5, 15, true},
		{"4.19", 4, 19, true},
		{"6", 0, 0, false},
		{"", 0, 0, false},
		{"x.y.z", 0, 0, false},
		{".12.0", 0, 0, false},
	} {
		major, minor, ok := parseKernelVersion(tc.in)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("parseKernelVersion(%q) = %d, %d, %v; want %d, %d, %v", tc.in, major, minor, ok, tc.major, tc.minor, tc.ok)
		}
	}
}

// TestRuntimeHandlerFeatures: every runtime is listed after the default
// handler "", and recursive read-only mounts are claimed for a handler
// only when Docker can be asked for them (API 1.44), the kernel has
// mount_setattr (5.12) and Docker reports "rro" for the runtime it runs.
func TestRuntimeHandlerFeatures(t *testing.T) {
	type handler struct {
		name string
		rro  bool
	}
	for _, tc := range []struct {
		name string
		info *system.Info // nil: nothing read yet
		api  string
		want []handler
	}{
		{
			name: "nothing read yet",
			api:  "1.51",
			want: []handler{{"", false}},
		},
		{
			name: "docker 20.10",
			info: ptr(docker2010Info("6.18.44-fc-v669")),
			api:  "1.41",
			want: []handler{{"", false}, {"io.containerd.runc.v2", false}, {"io.containerd.runtime.v1.linux", false}, {"runc", false}},
		},
		{
			name: "docker 29",
			info: ptr(fakedocker.Docker29Info("6.18.44-fc-v669")),
			api:  "1.51",
			want: []handler{{"", true}, {"runc", true}, {"runc-alt", true}},
		},
		{
			name: "docker 29 spoken to at API 1.43",
			info: ptr(fakedocker.Docker29Info("6.18.44-fc-v669")),
			api:  "1.43",
			want: []handler{{"", false}, {"runc", false}, {"runc-alt", false}},
		},
		{
			name: "API not negotiated",
			info: ptr(fakedocker.Docker29Info("6.18.44-fc-v669")),
			api:  "",
			want: []handler{{"", false}, {"runc", false}, {"runc-alt", false}},
		},
		{
			name: "kernel 5.10",
			info: ptr(fakedocker.Docker29Info("5.10.0-23-amd64")),
			api:  "1.51",
			want: []handler{{"", false}, {"runc", false}, {"runc-alt", false}},
		},
		{
			name: "kernel 5.12",
			info: ptr(fakedocker.Docker29Info("5.12.0")),
			api:  "1.44",
			want: []handler{{"", true}, {"runc", true}, {"runc-alt", true}},
		},
		{
			name: "kernel unknown",
			info: ptr(fakedocker.Docker29Info("")),
			api:  "1.51",
			want: []handler{{"", false}, {"runc", false}, {"runc-alt", false}},
		},
		{
			name: "one runtime without rro, one without features, one unreadable",
			info: ptr(fakedocker.RuntimesInfo("6.1.0", "crun", map[string]string{
				"crun":   fakedocker.RROFeatures,
				"old":    `{"mountOptions":["ro"]}`,
				"shimv2": "",
				"broken": "{",
			})),
			api:  "1.51",
			want: []handler{{"", true}, {"broken", false}, {"crun", true}, {"old", false}, {"shimv2", false}},
		},
		{
			name: "default runtime without features",
			info: ptr(fakedocker.RuntimesInfo("6.1.0", "plain", map[string]string{"plain": "", "runc": fakedocker.RROFeatures})),
			api:  "1.51",
			want: []handler{{"", false}, {"plain", false}, {"runc", true}},
		},
		{
			name: "default runtime missing from the map",
			info: ptr(fakedocker.RuntimesInfo("6.1.0", "ghost", map[string]string{"runc": fakedocker.RROFeatures})),
			api:  "1.51",
			want: []handler{{"", false}, {"ghost", false}, {"runc", true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *Runtimes
			if tc.info != nil {
				r = newRuntimes(*tc.info, tc.api, time.Now())
			}
			var got []handler
			for _, h := range r.Handlers(tc.api) {
				if h.GetFeatures().GetUserNamespaces() {
					t.Errorf("handler %q claims user namespaces", h.Name)
				}
				got = append(got, handler{h.Name, h.GetFeatures().GetRecursiveReadOnlyMounts()})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("handlers = %v, want %v", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestWrapperMisuse: netshim's OCI wrapper applies namespaces only from
// markers netshim signed, but registered as the engine's default runtime
// or under another name it would run containers netshim never made for
// it; netshim finds it by its path and says how to fix the registration.
func TestWrapperMisuse(t *testing.T) {
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "bin", "netshim-oci")
	renamed := filepath.Join(dir, "sbin", "oci-hook")
	for _, p := range []string{wrapper, renamed} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(wrapper, renamed); err != nil {
		t.Fatal(err)
	}
	runc := filepath.Join(dir, "runc")
	if err := os.WriteFile(runc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := func(p string) system.RuntimeWithStatus {
		return system.RuntimeWithStatus{Runtime: system.Runtime{Path: p}}
	}
	for _, tc := range []struct {
		name     string
		def      string
		runtimes map[string]system.RuntimeWithStatus
		own      string
		want     string
	}{
		{name: "as netshim-oci", def: "runc", runtimes: map[string]system.RuntimeWithStatus{"runc": rt("runc"), OCIWrapperRuntime: rt(wrapper)}},
		{name: "no wrapper", def: "runc", runtimes: map[string]system.RuntimeWithStatus{"runc": rt("runc"), "alt": rt(runc)}, own: wrapper},
		{name: "default runtime by name", def: OCIWrapperRuntime, runtimes: map[string]system.RuntimeWithStatus{"runc": rt("runc"), OCIWrapperRuntime: rt(wrapper)}, want: `default runtime "netshim-oci" is netshim's OCI wrapper`},
		{name: "default runtime under another name", def: "secure", runtimes: map[string]system.RuntimeWithStatus{"runc": rt("runc"), "secure": rt(wrapper)}, want: `default runtime "secure" is netshim's OCI wrapper`},
		{name: "same file as netshim-oci's", def: "runc", runtimes: map[string]system.RuntimeWithStatus{"runc": rt("runc"), OCIWrapperRuntime: rt(wrapper), "hook": rt(renamed)}, want: "as runtime hook,"},
		{name: "same file as the one beside netshim", def: "runc", runtimes: map[string]system.RuntimeWithStatus{"runc": rt("runc"), "hook": rt(renamed)}, own: wrapper, want: "as runtime hook,"},
		{name: "by its file name", def: "runc", runtimes: map[string]system.RuntimeWithStatus{"runc": rt("runc"), "pinned": rt("/opt/x/netshim-oci")}, want: "as runtime pinned,"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := wrapperMisuse(system.Info{DefaultRuntime: tc.def, Runtimes: tc.runtimes}, tc.own)
			if tc.want == "" {
				if got != "" {
					t.Fatalf("misuse %q, want none", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) || !strings.Contains(got, `register it only as runtime "netshim-oci"`) {
				t.Fatalf("misuse %q, want one containing %q and the fix", got, tc.want)
			}
		})
	}
}
