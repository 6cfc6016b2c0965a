package takeover

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func crid() *runtimeapi.Container {
	return &runtimeapi.Container{
		Id:           "c1",
		PodSandboxId: "s1",
		Metadata:     &runtimeapi.ContainerMetadata{Name: "logger", Attempt: 0},
		Image:        &runtimeapi.ImageSpec{Image: "netshim.local/busybox:latest"},
		ImageRef:     "sha256:aa",
		State:        runtimeapi.ContainerState_CONTAINER_RUNNING,
		CreatedAt:    1700000000 * int64(time.Second),
		Labels:       map[string]string{"io.kubernetes.pod.name": "p", "io.kubernetes.container.name": "logger"},
		Annotations:  map[string]string{"io.kubernetes.container.hash": "abc"},
	}
}

func TestFieldDiffs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edit      func(c *runtimeapi.Container)
		rules     map[protoreflect.FullName]fieldRule
		wantDiffs []string // substrings, one per difference, in order
		wantExtra []string
	}{
		{name: "same", edit: func(*runtimeapi.Container) {}},
		{
			name: "fields cri-dockerd's CRI lacks are extra, not different",
			edit: func(c *runtimeapi.Container) {
				c.ImageId = "sha256:aa"
				c.Image.UserSpecifiedImage = "busybox"
			},
			rules:     compareRules,
			wantExtra: []string{"image.user_specified_image", "image_id"},
		},
		{
			name:      "new attempt (0 is a zero value, compared all the same)",
			edit:      func(c *runtimeapi.Container) { c.Metadata.Attempt = 1 },
			wantDiffs: []string{"metadata.attempt: cri-dockerd 0, netshim 1"},
		},
		{
			name:      "a field cri-dockerd leaves unset is compared without a rule",
			edit:      func(c *runtimeapi.Container) { c.ImageId = "sha256:aa" },
			wantDiffs: []string{`image_id: cri-dockerd "", netshim "sha256:aa"`},
		},
		{
			name:      "image lost",
			edit:      func(c *runtimeapi.Container) { c.Image = nil },
			wantDiffs: []string{`image.image: cri-dockerd "netshim.local/busybox:latest", netshim ""`},
		},
		{
			name:      "exited",
			edit:      func(c *runtimeapi.Container) { c.State = runtimeapi.ContainerState_CONTAINER_EXITED },
			wantDiffs: []string{"state: cri-dockerd CONTAINER_RUNNING, netshim CONTAINER_EXITED"},
		},
		{
			name: "labels: changed, missing and added keys",
			edit: func(c *runtimeapi.Container) {
				c.Labels = map[string]string{"io.kubernetes.pod.name": "q", "x": "y"}
			},
			wantDiffs: []string{
				`labels[io.kubernetes.container.name]: cri-dockerd "logger", netshim none`,
				`labels[io.kubernetes.pod.name]: cri-dockerd "p", netshim "q"`,
				`labels[x]: cri-dockerd none, netshim "y"`,
			},
		},
		{
			name:      "annotations gone",
			edit:      func(c *runtimeapi.Container) { c.Annotations = nil },
			wantDiffs: []string{`annotations[io.kubernetes.container.hash]: cri-dockerd "abc", netshim none`},
		},
		{
			name:      "nanoseconds differ: exact rule",
			edit:      func(c *runtimeapi.Container) { c.CreatedAt += 123 },
			wantDiffs: []string{"created_at"},
		},
		{
			name:  "nanoseconds differ: list rule compares seconds",
			edit:  func(c *runtimeapi.Container) { c.CreatedAt += 123 },
			rules: compareRules,
		},
		{
			name:      "another second: list rule",
			edit:      func(c *runtimeapi.Container) { c.CreatedAt += int64(time.Second) },
			rules:     compareRules,
			wantDiffs: []string{"created_at: cri-dockerd 1700000000000000000, netshim 1700000001000000000 (cri-dockerd's ListContainers"},
		},
		{
			name:      "unfilled field that cri-dockerd did fill",
			edit:      func(c *runtimeapi.Container) { c.ImageId = "sha256:bb" },
			rules:     map[protoreflect.FullName]fieldRule{"runtime.v1.Container.image_id": {unfilled: true}},
			wantDiffs: []string{`image_id: cri-dockerd "sha256:aa", netshim "sha256:bb"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := crid(), crid()
			if tc.name == "unfilled field that cri-dockerd did fill" {
				want.ImageId = "sha256:aa"
			}
			tc.edit(got)
			diffs, extra := fieldDiffs(want, got, tc.rules)
			if len(diffs) != len(tc.wantDiffs) {
				t.Fatalf("diffs %q, want %d like %q", diffs, len(tc.wantDiffs), tc.wantDiffs)
			}
			for i, d := range diffs {
				if !strings.Contains(d, tc.wantDiffs[i]) {
					t.Errorf("diff %d = %q, want it to contain %q", i, d, tc.wantDiffs[i])
				}
			}
			slices.Sort(extra)
			if !slices.Equal(extra, tc.wantExtra) {
				t.Errorf("extra %q, want %q", extra, tc.wantExtra)
			}
		})
	}
}

// TestFieldDiffsNested: messages are compared leaf by leaf, an unset one
// as an empty one; lists of messages by length, then element by element.
func TestFieldDiffsNested(t *testing.T) {
	want := &runtimeapi.PodSandboxStatus{
		Id:      "s1",
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.181.0.2"},
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	got := &runtimeapi.PodSandboxStatus{
		Id:      "s1",
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.181.0.3", AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::3"}}},
	}
	diffs, extra := fieldDiffs(want, got, nil)
	wantDiffs := []string{
		`network.ip: cri-dockerd "10.181.0.2", netshim "10.181.0.3"`,
		`network.additional_ips: cri-dockerd [], netshim [{ip:"fd00::3"}]`,
		"linux.namespaces.options.pid: cri-dockerd CONTAINER, netshim POD",
	}
	if !slices.Equal(diffs, wantDiffs) {
		t.Errorf("diffs\n%q\nwant\n%q", diffs, wantDiffs)
	}
	if len(extra) != 0 {
		t.Errorf("extra %q", extra)
	}
}

func TestParseCRILog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    []string // stream:text
		wantErr string
	}{
		{name: "empty"},
		{
			name: "full and partial lines",
			in: "2026-11-24T22:00:00.000000001Z stdout F line 1\n" +
				"2026-11-24T22:00:00.1Z stderr P par\n" +
				"2026-11-24T22:00:00.2Z stdout F line 2\n" +
				"2026-11-24T22:00:00.3Z stderr F tial\n" +
				"2026-11-24T22:00:00.4Z stdout F \n",
			want: []string{"stdout:line 1", "stdout:line 2", "stderr:partial", "stdout:"},
		},
		{
			name:    "docker json-file line",
			in:      `{"log":"line 1\n","stream":"stdout","time":"2026-11-24T22:00:00.0Z"}` + "\n",
			wantErr: "line 1 is not a CRI log line",
		},
		{
			name:    "bad timestamp",
			in:      "yesterday stdout F line 1\n",
			wantErr: `timestamp "yesterday"`,
		},
		{
			name:    "no space after the tag",
			in:      "2026-11-24T22:00:00Z stdout F\n",
			wantErr: "not a CRI log line",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, err := parseCRILog(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.stream+":"+e.text)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckNumbering(t *testing.T) {
	for _, tc := range []struct {
		name    string
		texts   []string
		atLeast int
		wantErr string
	}{
		{name: "continuous", texts: []string{"line 1", "line 2", "other", "line 3"}, atLeast: 3},
		{name: "none", texts: []string{"hello"}, atLeast: 1, wantErr: "no numbered line"},
		{name: "gap", texts: []string{"line 1", "line 2", "line 4"}, atLeast: 1, wantErr: "numbered line 3 of 3 is 4, want 3"},
		{name: "doubled", texts: []string{"line 1", "line 2", "line 2", "line 3"}, atLeast: 1, wantErr: "is 2, want 3"},
		{name: "starts late", texts: []string{"line 5", "line 6"}, atLeast: 1, wantErr: "is 5, want 1"},
		{name: "too short", texts: []string{"line 1", "line 2"}, atLeast: 10, wantErr: "end at 2, want at least 10"},
		{name: "not quite numbered", texts: []string{"line 1", "line 2x", "xline 3", "line 2"}, atLeast: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNumbering(lineNumbers(tc.texts), tc.atLeast)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestFieldDiffsStatusRules: the ContainerStatus exceptions.
func TestFieldDiffsStatusRules(t *testing.T) {
	zero := (time.Time{}).UnixNano()
	want := &runtimeapi.ContainerStatus{Id: "c1", FinishedAt: zero, StartedAt: 5, LogPath: "/p/0.log"}
	for _, tc := range []struct {
		name      string
		got       *runtimeapi.ContainerStatus
		wantDiffs []string
		wantExtra []string
	}{
		{name: "not finished: 0", got: &runtimeapi.ContainerStatus{Id: "c1", StartedAt: 5, LogPath: "/p/0.log"}},
		{name: "not finished: the same zero time", got: &runtimeapi.ContainerStatus{Id: "c1", FinishedAt: zero, StartedAt: 5, LogPath: "/p/0.log"}},
		{name: "finished", got: &runtimeapi.ContainerStatus{Id: "c1", FinishedAt: 7, StartedAt: 5, LogPath: "/p/0.log"},
			wantDiffs: []string{"finished_at: cri-dockerd -6795364578871345152, netshim 7 (cri-dockerd reports"}},
		{name: "fields cri-dockerd's CRI lacks", got: &runtimeapi.ContainerStatus{Id: "c1", StartedAt: 5, LogPath: "/p/0.log",
			StopSignal: runtimeapi.Signal_SIGNAL_SIGUSR1, Image: &runtimeapi.ImageSpec{ImageRef: "sha256:aa"},
			Mounts: nil}, wantExtra: []string{"image.image_ref", "stop_signal"}},
		{name: "another log path", got: &runtimeapi.ContainerStatus{Id: "c1", StartedAt: 5, LogPath: "/q/0.log"},
			wantDiffs: []string{`log_path: cri-dockerd "/p/0.log", netshim "/q/0.log"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			diffs, extra := fieldDiffs(want, tc.got, compareRules)
			if len(diffs) != len(tc.wantDiffs) {
				t.Fatalf("diffs %q, want %q", diffs, tc.wantDiffs)
			}
			for i := range diffs {
				if !strings.HasPrefix(diffs[i], tc.wantDiffs[i]) {
					t.Errorf("diff %q, want prefix %q", diffs[i], tc.wantDiffs[i])
				}
			}
			slices.Sort(extra)
			if !slices.Equal(extra, tc.wantExtra) {
				t.Errorf("extra %q, want %q", extra, tc.wantExtra)
			}
		})
	}
}
