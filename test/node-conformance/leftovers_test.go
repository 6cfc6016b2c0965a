package nodeconformance

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLeftovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dirs  []string
		files []string
		max   int
		want  []string
	}{
		{name: "missing dir", want: nil, max: 5},
		{name: "empty dir", dirs: []string{"."}, max: 5},
		{name: "a killed kubelet's empty device-plugins dir", dirs: []string{"device-plugins", "plugins_registry"}, max: 5},
		{name: "a dead kubelet's socket", dirs: []string{"device-plugins"}, files: []string{"device-plugins/kubelet.sock"}, max: 5,
			want: []string{"device-plugins/kubelet.sock"}},
		{name: "a pod's volume and a checkpoint", dirs: []string{"pods/uid/volumes/x", "device-plugins"},
			files: []string{"pods/uid/volumes/x/data", "cpu_manager_state"}, max: 5,
			want: []string{"cpu_manager_state", "pods/uid/volumes/x/data"}},
		{name: "at most max", files: []string{"a", "b", "c"}, max: 2, want: []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "kubelet")
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range tc.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Leftovers(root, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			var rel []string
			for _, p := range got {
				r, err := filepath.Rel(root, p)
				if err != nil {
					t.Fatal(err)
				}
				rel = append(rel, r)
			}
			if !slices.Equal(rel, tc.want) {
				t.Errorf("Leftovers = %q, want %q", rel, tc.want)
			}
		})
	}
}

func TestLeftoversUnreadable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A path through a file: not "missing", an error to report.
	if _, err := Leftovers(filepath.Join(file, "kubelet"), 5); err == nil {
		t.Error("Leftovers of a path through a file succeeded")
	}
}
