package cridockerd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
)

const sandboxID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Read takes a v1 checkpoint of the sandbox's pod, and nothing else.
func TestRead(t *testing.T) {
	md := &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default"}
	for _, tc := range []struct {
		name, content string
		id            string
		want          string // a substring of the error; "" for none
		none          bool   // (nil, nil): no checkpoint
	}{
		{name: "v1 of the pod", content: `{"version":"v1","name":"web","namespace":"default","data":{}}`},
		{name: "missing", none: true},
		{name: "id with a slash", id: "../etc", none: true},
		{name: "dot dot", id: "..", none: true},
		{name: "unreadable", content: `{"version":`, want: "cri-dockerd's checkpoint"},
		{name: "other version", content: `{"version":"v2","name":"web","namespace":"default"}`, want: `version "v2"`},
		{name: "other pod", content: `{"version":"v1","name":"db","namespace":"default"}`, want: "is for pod default/db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := Root(t.TempDir())
			id := tc.id
			if id == "" {
				id = sandboxID
			}
			if tc.content != "" {
				if err := os.MkdirAll(root.Dir(), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root.Dir(), id), []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cp, err := root.Read(id, md)
			switch {
			case tc.none:
				if cp != nil || err != nil {
					t.Errorf("Read = %+v, %v; want no checkpoint", cp, err)
				}
			case tc.want != "":
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Read error %v, want one saying %q", err, tc.want)
				}
			case err != nil || cp == nil || cp.Name != "web":
				t.Errorf("Read = %+v, %v", cp, err)
			}
		})
	}
}

// PortMappings keeps the host ports kubelet could have asked for and
// refuses a checkpoint with one it could not.
func TestPortMappings(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	str := func(s string) *string { return &s }
	type pm = portMapping
	for _, tc := range []struct {
		name string
		in   []*pm
		want []checkpoint.PortMapping
		err  string
	}{
		{name: "none"},
		{name: "tcp by default, udp lower-cased, container-only ports dropped",
			in:   []*pm{{ContainerPort: i32(80), HostPort: i32(8080)}, {Protocol: str("UDP"), ContainerPort: i32(53), HostPort: i32(5353), HostIP: "10.0.0.1"}, {ContainerPort: i32(9), HostPort: i32(0)}, nil, {ContainerPort: i32(1)}},
			want: []checkpoint.PortMapping{{Protocol: "tcp", ContainerPort: 80, HostPort: 8080}, {Protocol: "udp", ContainerPort: 53, HostPort: 5353, HostIP: "10.0.0.1"}}},
		{name: "unknown protocol", in: []*pm{{Protocol: str("icmp"), ContainerPort: i32(1), HostPort: i32(2)}}, err: `protocol "icmp"`},
		{name: "port out of range", in: []*pm{{ContainerPort: i32(70000), HostPort: i32(2)}}, err: "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := &Checkpoint{}
			if tc.in != nil {
				cp.Data = &checkpointData{PortMappings: tc.in}
			}
			got, err := cp.PortMappings()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("PortMappings error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("PortMappings = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestIsContainerID(t *testing.T) {
	for s, want := range map[string]bool{
		sandboxID:                  true,
		strings.ToUpper(sandboxID): false,
		sandboxID[:63]:             false,
		sandboxID + "0":            false,
		strings.Repeat("g", 64):    false,
		"":                         false,
	} {
		if got := IsContainerID(s); got != want {
			t.Errorf("IsContainerID(%q) = %v, want %v", s, got, want)
		}
	}
}
