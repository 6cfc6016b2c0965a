package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDockerdRuntimeArgs(t *testing.T) {
	// No netshim-oci beside a netshim binary: only the runtimes asked for.
	t.Setenv("NETSHIM_BIN", "")
	t.Setenv("NETSHIM_OCI_BIN", "")
	engineDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(engineDir, "runc"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		e2eDockerd string
		opts       []DockerdOption
		want       []string
		wantErr    string
	}{
		{name: "none"},
		{
			name: "explicit path",
			opts: []DockerdOption{WithRuntime(AltRuntime, "/usr/bin/runc")},
			want: []string{"--add-runtime", "netshim-alt=/usr/bin/runc"},
		},
		{
			name:       "the engine's runc next to E2E_DOCKERD",
			e2eDockerd: filepath.Join(engineDir, "dockerd"),
			opts:       []DockerdOption{WithRuntime(AltRuntime, ""), WithRuntime("second", "/opt/runc")},
			want:       []string{"--add-runtime", "netshim-alt=" + filepath.Join(engineDir, "runc"), "--add-runtime", "second=/opt/runc"},
		},
		{
			name:       "no runc next to E2E_DOCKERD",
			e2eDockerd: filepath.Join(t.TempDir(), "dockerd"),
			opts:       []DockerdOption{WithRuntime(AltRuntime, "")},
			wantErr:    "no runc next to it",
		},
		{name: "relative path", opts: []DockerdOption{WithRuntime("x", "runc")}, wantErr: "absolute path"},
		{name: "name with =", opts: []DockerdOption{WithRuntime("a=b", "/usr/bin/runc")}, wantErr: "without '='"},
		{name: "empty name", opts: []DockerdOption{WithRuntime("", "/usr/bin/runc")}, wantErr: "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("E2E_DOCKERD", tc.e2eDockerd)
			d := &Dockerd{}
			for _, o := range tc.opts {
				o(d)
			}
			got, err := d.runtimeArgs()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("runtimeArgs() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestOCIWrapperRegistered(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "netshim")
	wrapper := filepath.Join(dir, OCIWrapperRuntime)
	for _, f := range []string{bin, wrapper} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("NETSHIM_OCI_BIN", "")
	t.Setenv("NETSHIM_BIN", bin)
	if got := OCIWrapperBin(); got != wrapper {
		t.Errorf("OCIWrapperBin next to NETSHIM_BIN = %q, want %q", got, wrapper)
	}
	args, err := NewDockerd(t.TempDir()).runtimeArgs()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--add-runtime", OCIWrapperRuntime + "=" + wrapper}; !slices.Equal(args, want) {
		t.Errorf("runtime args = %q, want %q", args, want)
	}
	if args, _ := NewDockerd(t.TempDir(), WithoutOCIWrapper()).runtimeArgs(); len(args) != 0 {
		t.Errorf("WithoutOCIWrapper: runtime args %q, want none", args)
	}

	other := filepath.Join(t.TempDir(), "wrapper")
	if err := os.WriteFile(other, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NETSHIM_OCI_BIN", other)
	if got := OCIWrapperBin(); got != other {
		t.Errorf("OCIWrapperBin with NETSHIM_OCI_BIN = %q, want %q", got, other)
	}
	t.Setenv("NETSHIM_OCI_BIN", "")
	t.Setenv("NETSHIM_BIN", filepath.Join(t.TempDir(), "netshim"))
	if got := OCIWrapperBin(); got != "" {
		t.Errorf("OCIWrapperBin with no wrapper beside NETSHIM_BIN = %q, want \"\"", got)
	}
}
