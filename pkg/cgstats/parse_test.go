package cgstats

import (
	"os"
	"reflect"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseUint(t *testing.T) {
	for _, tc := range []struct {
		data string
		want uint64
		ok   bool
	}{
		{string(fixture(t, "v1-hybrid/cpuacct.usage")), 77658340622, true},
		{string(fixture(t, "v2/memory.current")), 31911936, true},
		{"0\n", 0, true},
		{"max\n", 0, false}, // a limit file, not a counter
		{"", 0, false},
		{"-1\n", 0, false},
	} {
		v, err := ParseUint([]byte(tc.data))
		if (err == nil) != tc.ok || v != tc.want {
			t.Errorf("ParseUint(%q) = %d, %v; want %d, ok %v", tc.data, v, err, tc.want, tc.ok)
		}
	}
}

func TestParseFlatKeyed(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]uint64 // a subset
		keys int
	}{
		{"v1-hybrid/memory.stat", map[string]uint64{
			"total_inactive_file": 118460416, "total_rss": 1216512, "total_cache": 205479936,
			"total_pgfault": 471217, "total_pgmajfault": 371, "hierarchical_memory_limit": 9223372036854771712,
		}, 42},
		{"v2/memory.stat", map[string]uint64{
			"anon": 9187328, "file": 21417984, "inactive_file": 13701120, "pgfault": 10881, "pgmajfault": 214,
		}, 56},
		{"v2/cpu.stat", map[string]uint64{"usage_usec": 1839047, "core_sched.force_idle_usec": 0}, 9},
		{"v1-hybrid/unified-cpu.stat", map[string]uint64{"usage_usec": 6202882489}, 4},
	} {
		got := ParseFlatKeyed(fixture(t, tc.file))
		if len(got) != tc.keys {
			t.Errorf("%s: %d keys, want %d", tc.file, len(got), tc.keys)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %d, want %d", tc.file, k, got[k], v)
			}
		}
	}
	if got := ParseFlatKeyed([]byte("a 1\nbad\nb x\nc 3")); !reflect.DeepEqual(got, map[string]uint64{"a": 1, "c": 3}) {
		t.Errorf("malformed lines: %v", got)
	}
}

func TestParsePSI(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want *PSI
	}{
		{"this machine's cpu.pressure", string(fixture(t, "v1-hybrid/cpu.pressure")), &PSI{
			Some: &PSIData{Avg10: 9.92, Avg60: 10.66, Avg300: 8.02, TotalMicros: 1655468151},
			Full: &PSIData{},
		}},
		{"this machine's io.pressure", string(fixture(t, "v1-hybrid/io.pressure")), &PSI{
			Some: &PSIData{Avg10: 0.02, Avg60: 0.70, Avg300: 5.82, TotalMicros: 215834177},
			Full: &PSIData{Avg60: 0.37, Avg300: 4.35, TotalMicros: 128882042},
		}},
		{"v2 cpu.pressure", string(fixture(t, "v2/cpu.pressure")), &PSI{
			Some: &PSIData{Avg10: 1.17, Avg60: 0.52, Avg300: 0.13, TotalMicros: 12345},
			Full: &PSIData{TotalMicros: 6789},
		}},
		{"cpu.pressure before Linux 5.13: no full line", "some avg10=0.00 avg60=0.00 avg300=0.00 total=12345\n",
			&PSI{Some: &PSIData{TotalMicros: 12345}}},
		{"unknown fields ignored", "some avg10=1.00 avg60=0.00 avg300=0.00 total=5 future=1\n",
			&PSI{Some: &PSIData{Avg10: 1, TotalMicros: 5}}},
		{"empty", "", nil},
		{"no some line", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", nil},
		{"missing total", "some avg10=0.00 avg60=0.00 avg300=0.00\n", nil},
		{"bad number", "some avg10=x avg60=0.00 avg300=0.00 total=1\n", nil},
		{"not key=value", "some avg10 0.00\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePSI([]byte(tc.data))
			if tc.want == nil {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got some=%+v full=%+v, want some=%+v full=%+v", got.Some, got.Full, tc.want.Some, tc.want.Full)
			}
		})
	}
}

func TestParseNetDev(t *testing.T) {
	const header = "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	for _, tc := range []struct {
		name string
		data string
		want []Interface
		ok   bool
	}{
		{"this machine's /proc/net/dev", string(fixture(t, "v1-hybrid/net_dev")), []Interface{
			{Name: "lo", RxBytes: 302974614, RxPackets: 130292, TxBytes: 302974614, TxPackets: 130292},
			{Name: "ifb0"}, {Name: "ifb1"},
			{Name: "eth0", RxBytes: 672504475, RxPackets: 41015, TxBytes: 3051660, TxPackets: 28068},
		}, true},
		{"a pod's netns with errors and drops", header +
			"    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n" +
			"  eth0:    9342      61    2    5    0     0          0         0     2406      27    3    7    0     0       0          0\n",
			[]Interface{{Name: "lo"}, {Name: "eth0", RxBytes: 9342, RxPackets: 61, RxErrors: 2, RxDropped: 5,
				TxBytes: 2406, TxPackets: 27, TxErrors: 3, TxDropped: 7}}, true},
		{"header only", header, nil, true},
		{"no header", "eth0: 1 2 3\n", nil, false},
		{"short line", header + "eth0: 1 2 3\n", nil, false},
		{"not a number", header + "eth0: x 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n", nil, false},
		{"no name", header + "1 2 3\n", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNetDev([]byte(tc.data))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
