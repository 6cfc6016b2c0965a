package network

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockingPlugin holds every SetUpPod until released, counting how many
// run at once, overall and per pod.
type blockingPlugin struct {
	NoopPlugin
	release chan struct{}
	entered chan string

	mu         sync.Mutex
	perPod     map[string]int
	maxPerPod  int
	running    atomic.Int32
	maxRunning atomic.Int32
}

func newBlockingPlugin() *blockingPlugin {
	return &blockingPlugin{release: make(chan struct{}), entered: make(chan string, 100), perPod: map[string]int{}}
}

func (p *blockingPlugin) enter(id string) {
	p.mu.Lock()
	p.perPod[id]++
	if p.perPod[id] > p.maxPerPod {
		p.maxPerPod = p.perPod[id]
	}
	p.mu.Unlock()
	n := p.running.Add(1)
	for {
		m := p.maxRunning.Load()
		if n <= m || p.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	p.entered <- id
	<-p.release
	p.running.Add(-1)
	p.mu.Lock()
	p.perPod[id]--
	p.mu.Unlock()
}

func (p *blockingPlugin) SetUpPod(_ context.Context, pod PodRef, _ map[string]string, _ SetUpOptions) error {
	p.enter(pod.SandboxID)
	return nil
}

func (p *blockingPlugin) TearDownPod(_ context.Context, pod PodRef) error {
	p.enter(pod.SandboxID)
	return nil
}

func waitEntered(t *testing.T, p *blockingPlugin, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-p.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d operations entered the plugin", i, n)
		}
	}
}

func TestPluginManagerParallelAcrossPods(t *testing.T) {
	p := newBlockingPlugin()
	pm := NewPluginManager(p)
	const pods = 8
	var wg sync.WaitGroup
	for i := 0; i < pods; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := PodRef{Namespace: "ns", Name: "p", SandboxID: string(rune('a' + i))}
			if err := pm.SetUpPod(context.Background(), pod, nil, SetUpOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	// All pods are inside the plugin at the same time: no global lock.
	waitEntered(t, p, pods)
	if got := p.maxRunning.Load(); got != pods {
		t.Errorf("max concurrent operations = %d, want %d", got, pods)
	}
	close(p.release)
	wg.Wait()
	if n := pm.inFlight(); n != 0 {
		t.Errorf("%d lock entries left after all operations finished", n)
	}
}

func TestPluginManagerSerialisesOnePod(t *testing.T) {
	p := newBlockingPlugin()
	pm := NewPluginManager(p)
	pod := PodRef{Namespace: "ns", Name: "p", SandboxID: "same"}
	const ops = 6
	var wg sync.WaitGroup
	for i := 0; i < ops; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				err = pm.SetUpPod(context.Background(), pod, nil, SetUpOptions{})
			} else {
				err = pm.TearDownPod(context.Background(), pod)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	// Let them through one at a time; each must be alone in the plugin.
	for i := 0; i < ops; i++ {
		waitEntered(t, p, 1)
		if got := p.running.Load(); got != 1 {
			t.Fatalf("%d operations on one pod running at once", got)
		}
		p.release <- struct{}{}
	}
	wg.Wait()
	if p.maxPerPod != 1 {
		t.Errorf("max concurrent operations on one pod = %d, want 1", p.maxPerPod)
	}
	if n := pm.inFlight(); n != 0 {
		t.Errorf("%d lock entries left", n)
	}
}

func TestPluginManagerWaitHonoursContext(t *testing.T) {
	p := newBlockingPlugin()
	pm := NewPluginManager(p)
	pod := PodRef{Namespace: "ns", Name: "p", SandboxID: "busy"}
	done := make(chan error, 1)
	go func() { done <- pm.SetUpPod(context.Background(), pod, nil, SetUpOptions{}) }()
	waitEntered(t, p, 1)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := pm.TearDownPod(ctx, pod); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting teardown with a cancelled context: %v, want context.Canceled", err)
	}
	p.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := pm.inFlight(); n != 0 {
		t.Errorf("%d lock entries left after a cancelled wait", n)
	}
}

type failingPlugin struct{ NoopPlugin }

func (failingPlugin) SetUpPod(context.Context, PodRef, map[string]string, SetUpOptions) error {
	return errors.New(`failed to find plugin "x" in path`)
}

func TestPluginManagerKeepsPluginError(t *testing.T) {
	pm := NewPluginManager(failingPlugin{})
	err := pm.SetUpPod(context.Background(), PodRef{Namespace: "ns", Name: "p", SandboxID: "id"}, nil, SetUpOptions{})
	if err == nil || !strings.Contains(err.Error(), `failed to find plugin "x"`) || !strings.Contains(err.Error(), "ns/p") {
		t.Errorf("error %q should name the pod and keep the plugin's text", err)
	}
}

func TestInitNetworkPluginSelection(t *testing.T) {
	if p, err := InitNetworkPlugin(nil, "", nil, PluginConfig{}); err != nil || p.Name() != NoopPluginName {
		t.Errorf("empty name: %v %v", p, err)
	}
	_, err := InitNetworkPlugin([]NetworkPlugin{failingPlugin{}}, "cni", nil, PluginConfig{})
	if err == nil || !strings.Contains(err.Error(), `"cni" not found`) {
		t.Errorf("unknown plugin: %v", err)
	}
}
