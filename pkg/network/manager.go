package network

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// PluginManager wraps a NetworkPlugin so that operations on one pod are
// serialised (a setup never races its own teardown) while operations on
// different pods run in parallel.
//
// Locks are kept per sandbox ID in a map whose entries are reference
// counted: an entry lives only while some operation holds or waits for it,
// so the map never grows beyond the number of pods in flight.
type PluginManager struct {
	plugin NetworkPlugin

	mu    sync.Mutex
	locks map[string]*podLock
}

type podLock struct {
	refs int // guarded by PluginManager.mu
	mu   chan struct{}
}

// NewPluginManager returns a manager around plugin.
func NewPluginManager(plugin NetworkPlugin) *PluginManager {
	return &PluginManager{plugin: plugin, locks: map[string]*podLock{}}
}

// PluginName is the wrapped plugin's name.
func (pm *PluginManager) PluginName() string { return pm.plugin.Name() }

// Plugin returns the wrapped plugin.
func (pm *PluginManager) Plugin() NetworkPlugin { return pm.plugin }

// Status is the plugin's readiness.
func (pm *PluginManager) Status() error { return pm.plugin.Status() }

// Event forwards a runtime event to the plugin.
func (pm *PluginManager) Event(name string, details map[string]any) { pm.plugin.Event(name, details) }

// lock takes the per-pod lock for id, honouring ctx while waiting. The
// returned function releases it.
func (pm *PluginManager) lock(ctx context.Context, id string) (func(), error) {
	pm.mu.Lock()
	l, ok := pm.locks[id]
	if !ok {
		l = &podLock{mu: make(chan struct{}, 1)}
		pm.locks[id] = l
	}
	l.refs++
	pm.mu.Unlock()

	deref := func() {
		pm.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(pm.locks, id)
		}
		pm.mu.Unlock()
	}
	select {
	case l.mu <- struct{}{}:
	case <-ctx.Done():
		deref()
		return nil, fmt.Errorf("waiting for another network operation on pod sandbox %s: %w", id, ctx.Err())
	}
	return func() {
		<-l.mu
		deref()
	}, nil
}

// inFlight returns the number of lock entries; for tests.
func (pm *PluginManager) inFlight() int {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return len(pm.locks)
}

// SetUpPod attaches the pod to the network.
func (pm *PluginManager) SetUpPod(ctx context.Context, pod PodRef, annotations map[string]string, opts SetUpOptions) error {
	unlock, err := pm.lock(ctx, pod.SandboxID)
	if err != nil {
		return err
	}
	defer unlock()
	start := time.Now()
	klog.V(3).InfoS("Setting up pod network", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
	if err := pm.plugin.SetUpPod(ctx, pod, annotations, opts); err != nil {
		return fmt.Errorf("network plugin %s failed to set up pod %s network: %w", pm.plugin.Name(), klog.KRef(pod.Namespace, pod.Name), err)
	}
	klog.V(4).InfoS("Pod network set up", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "duration", time.Since(start))
	return nil
}

// TearDownPod detaches the pod from the network.
func (pm *PluginManager) TearDownPod(ctx context.Context, pod PodRef) error {
	unlock, err := pm.lock(ctx, pod.SandboxID)
	if err != nil {
		return err
	}
	defer unlock()
	start := time.Now()
	klog.V(3).InfoS("Tearing down pod network", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
	if err := pm.plugin.TearDownPod(ctx, pod); err != nil {
		return fmt.Errorf("network plugin %s failed to tear down pod %s network: %w", pm.plugin.Name(), klog.KRef(pod.Namespace, pod.Name), err)
	}
	klog.V(4).InfoS("Pod network torn down", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "duration", time.Since(start))
	return nil
}

// GetPodNetworkStatus reports the pod's addresses.
func (pm *PluginManager) GetPodNetworkStatus(ctx context.Context, pod PodRef) (*PodNetworkStatus, error) {
	unlock, err := pm.lock(ctx, pod.SandboxID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, err := pm.plugin.GetPodNetworkStatus(ctx, pod)
	if err != nil {
		return nil, fmt.Errorf("network plugin %s failed to get status of pod %s: %w", pm.plugin.Name(), klog.KRef(pod.Namespace, pod.Name), err)
	}
	return st, nil
}

// Warnings returns the plugin's warnings (see WarningReporter), or nil.
func (pm *PluginManager) Warnings() []string {
	if w, ok := pm.plugin.(WarningReporter); ok {
		return w.Warnings()
	}
	return nil
}

// CheckPod verifies the pod's network (see PodChecker), serialised with the
// pod's other operations. It returns nil when the plugin cannot check.
func (pm *PluginManager) CheckPod(ctx context.Context, pod PodRef) *CheckResult {
	c, ok := pm.plugin.(PodChecker)
	if !ok {
		return nil
	}
	unlock, err := pm.lock(ctx, pod.SandboxID)
	if err != nil {
		return &CheckResult{Status: CheckFailed, Message: err.Error()}
	}
	defer unlock()
	res := c.CheckPod(ctx, pod)
	return &res
}
