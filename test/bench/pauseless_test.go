package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/netshim/netshim/test/harness"
)

// fakeInspector answers ContainerInspect with what it was given.
type fakeInspector struct {
	c   container.InspectResponse
	err error
	ids []string
}

func (f *fakeInspector) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	f.ids = append(f.ids, id)
	return f.c, f.err
}

func TestCheckPauseless(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name    string
		fake    fakeInspector
		wantErr string // substring; "" for no error
	}{
		{"no container: pause-less", fakeInspector{err: fmt.Errorf("no such container: %w", errdefs.ErrNotFound)}, ""},
		{"a pause container", fakeInspector{c: container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: id, Name: "/k8s_POD_seq-003_ns_uid_0"}}},
			"sandbox 0123456789ab has a Docker container (/k8s_POD_seq-003_ns_uid_0): the netshim made it with a pause container"},
		{"a container without its base fields", fakeInspector{c: container.InspectResponse{}}, "has a Docker container (?)"},
		{"engine error", fakeInspector{err: errors.New("connection refused")}, "checking that pause-less sandbox 0123456789ab has no container: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPauseless(context.Background(), &tc.fake, id)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("checkPauseless: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("checkPauseless: %v, want an error saying %q", err, tc.wantErr)
			}
			if !slices.Equal(tc.fake.ids, []string{id}) {
				t.Errorf("inspected %v, want the sandbox ID once", tc.fake.ids)
			}
		})
	}
}

// TestRoundKinds: a mode whose netshim is not there (not measured) or not
// running (stopped after the rounds) makes no pods.
func TestRoundKinds(t *testing.T) {
	notRunning, err := harness.NewNetshim(harness.WithBinary("/nonexistent/netshim"), harness.WithDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := &instance{name: "pauseless", netshim: notRunning}
	for _, tc := range []struct {
		name              string
		pinned, pauseless *instance
		withNoLo          bool
		want              []podKind
	}{
		{"modes not measured", nil, nil, false, []podKind{kindNetshim, kindFloorLo}},
		{"modes not measured, floor without loopback", nil, nil, true, []podKind{kindNetshim, kindFloorLo, kindFloorNoLo}},
		{"netshims not running", stopped, stopped, true, []podKind{kindNetshim, kindFloorLo, kindFloorNoLo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &bench{pinned: tc.pinned, pauseless: tc.pauseless}
			if got := b.roundKinds(tc.withNoLo); !slices.Equal(got, tc.want) {
				t.Errorf("roundKinds = %v, want %v", got, tc.want)
			}
		})
	}
	b := &bench{pinned: &instance{name: "pinned"}, pauseless: &instance{name: "pauseless"}}
	for k, want := range map[podKind]*instance{kindNetshim: nil, kindPinned: b.pinned, kindPauseless: b.pauseless, kindFloorLo: nil, kindFloorNoLo: nil} {
		if got := b.instanceOf(k); got != want {
			t.Errorf("instanceOf(%d) = %v, want %v", k, got, want)
		}
	}
}

// TestAllSinceAllAddsUpEveryOther: during one netshim's call, what each
// of the others did since its own mark is counted, and only that.
func TestAllSinceAllAddsUpEveryOther(t *testing.T) {
	dir := t.TempDir()
	upstream := filepath.Join(dir, "upstream.sock")
	ln, err := net.Listen("unix", upstream)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "{}") })}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	var ins []*instance
	for _, name := range []string{"pinned", "pauseless"} {
		p, err := startProxy(filepath.Join(dir, name+".sock"), upstream)
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		ins = append(ins, &instance{name: name, proxy: p})
	}
	get := func(in *instance, path string) {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", in.proxy.path)
		}}}
		resp, err := c.Get("http://docker" + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get(ins[0], "/v1.41/containers/json") // before the marks: not counted
	marks := markAll(ins)
	get(ins[0], "/v1.41/containers/abc/json")
	get(ins[1], "/v1.41/containers/def/json")
	get(ins[1], "/v1.41/containers/json")
	c := allSinceAll(ins, marks)
	if c.total() != 3 || c.byKind["GET /containers/{id}/json"] != 2 || c.byKind["GET /containers/json"] != 1 {
		t.Errorf("counts: %v, want 2 inspects and 1 list", c.byKind)
	}
	if c := allSinceAll(nil, nil); c.total() != 0 {
		t.Errorf("no others: %v", c.byKind)
	}
}
