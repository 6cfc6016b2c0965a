package cgstats

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// tree writes files (path below root -> content) and returns root.
func tree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	for p, data := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func u64(v uint64) *uint64 { return &v }

func TestReadPodCgroup(t *testing.T) {
	v2Pod := ParseProcCgroup([]byte("0::" + systemdPod + "/docker-" + ctrID + ".scope\n"))
	hybridCtr, _ := ParseProcCgroup([]byte(hybridDocker)).Container(ctrID)
	v2Files := func(withPSI bool) map[string][]byte {
		files := map[string][]byte{}
		names := []string{"cpu.stat", "memory.current", "memory.stat", "pids.current"}
		if withPSI {
			names = append(names, "cpu.pressure", "memory.pressure", "io.pressure")
		}
		for _, f := range names {
			files[systemdPod+"/"+f] = fixture(t, "v2/"+f)
		}
		return files
	}
	v2Want := Stats{
		CPUNanos: u64(1839047000),
		Memory: &Memory{Usage: 31911936, InactiveFile: 13701120, RSS: 9187328, Cache: 21417984,
			PageFaults: 10881, MajorPageFaults: 214},
		Tasks: u64(9),
	}
	v2WithPSI := v2Want
	v2WithPSI.CPUPressure = &PSI{Some: &PSIData{Avg10: 1.17, Avg60: 0.52, Avg300: 0.13, TotalMicros: 12345}, Full: &PSIData{TotalMicros: 6789}}
	v2WithPSI.MemoryPressure = &PSI{Some: &PSIData{}, Full: &PSIData{}}
	v2WithPSI.IOPressure = &PSI{Some: &PSIData{Avg10: 0.31, Avg60: 0.08, Avg300: 0.02, TotalMicros: 40218},
		Full: &PSIData{Avg10: 0.29, Avg60: 0.07, Avg300: 0.02, TotalMicros: 38766}}
	v1Want := Stats{
		CPUNanos: u64(77658340622),
		Memory: &Memory{Usage: 207908864, InactiveFile: 118460416, RSS: 1216512, Cache: 205479936,
			PageFaults: 471217, MajorPageFaults: 371},
		Tasks: u64(3),
	}

	for _, tc := range []struct {
		name   string
		paths  Paths
		files  map[string][]byte
		want   Stats
		wantWS uint64
	}{
		{
			name:  "cgroup v1 (hybrid host, cgroupfs driver)",
			paths: hybridCtr.Parent(),
			files: map[string][]byte{
				"cpuacct/" + cgroupfsPod + "/cpuacct.usage":        fixture(t, "v1-hybrid/cpuacct.usage"),
				"memory/" + cgroupfsPod + "/memory.usage_in_bytes": fixture(t, "v1-hybrid/memory.usage_in_bytes"),
				"memory/" + cgroupfsPod + "/memory.stat":           fixture(t, "v1-hybrid/memory.stat"),
				"pids/" + cgroupfsPod + "/pids.current":            []byte("3\n"),
				// The hybrid v2 tree has pressure files, but its
				// membership need not match v1's: not read.
				"unified/" + cgroupfsPod + "/cpu.pressure": fixture(t, "v1-hybrid/cpu.pressure"),
			},
			want: v1Want, wantWS: 207908864 - 118460416,
		},
		{
			name:  "cgroup v1 with cpu and cpuacct co-mounted, no symlinks",
			paths: hybridCtr.Parent(),
			files: map[string][]byte{
				"cpu,cpuacct/" + cgroupfsPod + "/cpuacct.usage":    fixture(t, "v1-hybrid/cpuacct.usage"),
				"memory/" + cgroupfsPod + "/memory.usage_in_bytes": fixture(t, "v1-hybrid/memory.usage_in_bytes"),
				"memory/" + cgroupfsPod + "/memory.stat":           fixture(t, "v1-hybrid/memory.stat"),
				"pids/" + cgroupfsPod + "/pids.current":            []byte("3\n"),
			},
			want: v1Want, wantWS: 207908864 - 118460416,
		},
		{
			name: "cgroup v2, systemd driver", paths: v2Pod.Parent(), files: v2Files(true),
			want: v2WithPSI, wantWS: 31911936 - 13701120,
		},
		{
			name: "cgroup v2 on a kernel without PSI", paths: v2Pod.Parent(), files: v2Files(false),
			want: v2Want, wantWS: 31911936 - 13701120,
		},
		{
			name: "cgroup gone", paths: v2Pod.Parent(), files: map[string][]byte{"other/cpu.stat": []byte("usage_usec 1\n")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FS{Root: tree(t, tc.files)}.Read(tc.paths)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %s\nwant %s", dump(got), dump(tc.want))
			}
			if got.Memory != nil && got.Memory.WorkingSet() != tc.wantWS {
				t.Errorf("working set = %d, want %d", got.Memory.WorkingSet(), tc.wantWS)
			}
		})
	}
}

func dump(s Stats) string {
	out := ""
	for _, f := range []struct {
		name string
		v    any
	}{{"cpu", s.CPUNanos}, {"mem", s.Memory}, {"tasks", s.Tasks}, {"cpuPSI", s.CPUPressure}, {"memPSI", s.MemoryPressure}, {"ioPSI", s.IOPressure}} {
		switch v := f.v.(type) {
		case *uint64:
			if v != nil {
				out += fmt.Sprintf(" %s=%d", f.name, *v)
			}
		case *Memory:
			if v != nil {
				out += fmt.Sprintf(" %s=%+v", f.name, *v)
			}
		case *PSI:
			if v != nil {
				out += fmt.Sprintf(" %s=some:%+v,full:%+v", f.name, v.Some, v.Full)
			}
		}
	}
	return "{" + out + " }"
}

func TestWorkingSetNeverNegative(t *testing.T) {
	// usage and memory.stat are read one after the other: the page cache
	// can grow in between.
	if ws := (&Memory{Usage: 100, InactiveFile: 150}).WorkingSet(); ws != 0 {
		t.Errorf("working set = %d, want 0", ws)
	}
}

func TestChildren(t *testing.T) {
	other := "d78f5c3f906b9abc39f1246680038accacc891b50d673ebce0f04ced412840b3"
	root := tree(t, map[string][]byte{
		"memory/" + cgroupfsPod + "/" + ctrID + "/memory.stat": nil,
		"memory/" + cgroupfsPod + "/" + other + "/memory.stat": nil,
		"memory/" + cgroupfsPod + "/memory.stat":               nil,
		systemdPod + "/docker-" + ctrID + ".scope/memory.stat": nil,
	})
	for _, tc := range []struct {
		name  string
		paths Paths
		want  []string
		ok    bool
	}{
		{"v1", Paths{"memory": cgroupfsPod, "cpu": cgroupfsPod}, []string{ctrID, other}, true},
		{"v2", Paths{"": systemdPod}, []string{"docker-" + ctrID + ".scope"}, true},
		{"gone", Paths{"": "/nowhere"}, nil, false},
		{"no hierarchy to look in", Paths{"cpu": "/x"}, nil, false},
	} {
		got, err := FS{Root: root}.Children(tc.paths)
		sort.Strings(got)
		sort.Strings(tc.want)
		if (err == nil) != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Children = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestSum(t *testing.T) {
	psi := &PSI{Some: &PSIData{TotalMicros: 1}}
	a := Stats{CPUNanos: u64(10), Tasks: u64(1), Memory: &Memory{Usage: 100, InactiveFile: 10, RSS: 50, Cache: 40, PageFaults: 3, MajorPageFaults: 1}, CPUPressure: psi}
	b := Stats{CPUNanos: u64(5), Memory: &Memory{Usage: 200, InactiveFile: 20, RSS: 60, Cache: 30, PageFaults: 4, MajorPageFaults: 2}, IOPressure: psi}
	gone := Stats{}
	got := Sum(a, b, gone)
	want := Stats{CPUNanos: u64(15), Tasks: u64(1), Memory: &Memory{Usage: 300, InactiveFile: 30, RSS: 110, Cache: 70, PageFaults: 7, MajorPageFaults: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Sum = %s, want %s", dump(got), dump(want))
	}
	if got := Sum(gone, gone); !reflect.DeepEqual(got, Stats{}) {
		t.Errorf("Sum of nothing = %s", dump(got))
	}
	if *a.CPUNanos != 10 {
		t.Error("Sum changed its input")
	}
}
