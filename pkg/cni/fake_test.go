package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/netshim/netshim/pkg/network"
)

// execCall is one plugin invocation seen by fakeExec.
type execCall struct {
	Plugin      string // binary name
	Command     string // CNI_COMMAND
	ContainerID string // CNI_CONTAINERID
	NetNS       string // CNI_NETNS
	IfName      string // CNI_IFNAME
	Args        string // CNI_ARGS
	Conf        map[string]any
}

// runtimeConfig returns the "runtimeConfig" object of the call's stdin.
func (c execCall) runtimeConfig() map[string]any {
	rc, _ := c.Conf["runtimeConfig"].(map[string]any)
	return rc
}

func (c execCall) String() string { return c.Command + " " + c.Plugin }

// fakeExec is an invoke.Exec that records invocations instead of running
// binaries and answers ADD with canned results.
type fakeExec struct {
	version.PluginDecoder

	mu      sync.Mutex
	calls   []execCall
	results map[string]string // plugin type → ADD stdout
	errs    map[string]error  // "ADD bridge" → error to return
	missing map[string]bool   // plugin types FindInPath does not find
	// hook, when set, runs before each invocation is answered (outside
	// the lock); a non-nil error is the invocation's.
	hook func(ctx context.Context, c execCall) error
}

func newFakeExec() *fakeExec {
	return &fakeExec{results: map[string]string{}, errs: map[string]error{}, missing: map[string]bool{}}
}

func (f *fakeExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	conf := map[string]any{}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, fmt.Errorf("fake exec: bad stdin: %w", err)
	}
	call := execCall{
		Plugin:      filepath.Base(pluginPath),
		Command:     env["CNI_COMMAND"],
		ContainerID: env["CNI_CONTAINERID"],
		NetNS:       env["CNI_NETNS"],
		IfName:      env["CNI_IFNAME"],
		Args:        env["CNI_ARGS"],
		Conf:        conf,
	}
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, call); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if err := f.errs[call.Command+" "+call.Plugin]; err != nil {
		return nil, err
	}
	if call.Command != "ADD" {
		return nil, nil
	}
	if res, ok := f.results[call.Plugin]; ok {
		return []byte(res), nil
	}
	// A chained plugin passes the previous result on, as real ones do.
	if prev, ok := conf["prevResult"]; ok {
		return json.Marshal(prev)
	}
	return []byte(`{}`), nil
}

func (f *fakeExec) FindInPath(plugin string, paths []string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing[plugin] {
		return "", fmt.Errorf("failed to find plugin %q in path %s", plugin, paths)
	}
	return filepath.Join("/fake/bin", plugin), nil
}

// Calls returns the invocations in a canonical order: the pod network's
// plugins in the order they ran, then loopback's. Loopback runs beside the
// pod network, so its place in the real sequence is not fixed.
func (f *fakeExec) Calls() []execCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var net, lo []execCall
	for _, c := range f.calls {
		if c.Plugin == "loopback" {
			lo = append(lo, c)
		} else {
			net = append(net, c)
		}
	}
	return append(net, lo...)
}

func (f *fakeExec) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// fakeHost is a network.Host (and network.SandboxLister) with settable
// answers.
type fakeHost struct {
	mu        sync.Mutex
	netns     map[string]string
	ports     map[string][]network.PortMapping
	nsErr     error
	portErr   error
	live      []string // ListSandboxes' answer
	listErr   error
	listCalls int
}

func (h *fakeHost) ListSandboxes(context.Context) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listCalls++
	if h.listErr != nil {
		return nil, h.listErr
	}
	return append([]string(nil), h.live...), nil
}

func (h *fakeHost) setLive(err error, ids ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live, h.listErr = ids, err
}

func (h *fakeHost) lists() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listCalls
}

func newFakeHost() *fakeHost {
	// Like the runtime before its first sync: GC waits until a test says
	// which sandboxes exist.
	return &fakeHost{netns: map[string]string{}, ports: map[string][]network.PortMapping{}, listErr: errors.New("not synced yet")}
}

func (h *fakeHost) GetNetNS(_ context.Context, id string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.netns[id], h.nsErr
}

func (h *fakeHost) GetPodPortMappings(_ context.Context, id string) ([]network.PortMapping, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ports[id], h.portErr
}

func (h *fakeHost) setNetNS(id, path string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.netns[id] = path
}

func (h *fakeHost) setPorts(id string, pm []network.PortMapping) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ports[id] = pm
}

// writeFile writes content to dir/name.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// callsOf returns the recorded invocations with command cmd, in order.
func (f *fakeExec) callsOf(cmd string) []execCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []execCall
	for _, c := range f.calls {
		if c.Command == cmd {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeExec) setErr(key string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.errs, key)
	} else {
		f.errs[key] = err
	}
}

func (f *fakeExec) setHook(h func(ctx context.Context, c execCall) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = h
}

// noFirewall is a host whose packet filter lets bridged traffic through.
func noFirewall(context.Context) (hostFirewall, error) { return hostFirewall{}, nil }
