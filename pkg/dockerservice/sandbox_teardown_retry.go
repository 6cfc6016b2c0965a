package dockerservice

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// The start-up teardown retry: a sandbox whose infra container died or was
// removed while netshim was down (or whose DEL failed before a crash)
// still holds its IP until someone runs CNI DEL. kubelet may take a long
// time to ask, or never will (the pod is gone from the API server), so
// after the first index sync netshim retries the teardown of every such
// sandbox itself, in the background.
const (
	// startupTearDownWorkers bounds the CNI DELs in flight at once: a
	// node restarting with many dead pods must not fork hundreds of
	// plugins together.
	startupTearDownWorkers = 4
	// tearDownAttemptTimeout bounds one attempt, whatever the plugin's own
	// deadline is.
	tearDownAttemptTimeout = 2 * time.Minute
)

// tearDownRetryMinDelay and tearDownRetryMaxDelay bound the backoff between
// two attempts for one sandbox (variables for the tests).
var (
	tearDownRetryMinDelay = time.Second
	tearDownRetryMaxDelay = 2 * time.Minute
)

// startupTearDownRef returns the sandbox when it needs a teardown from the
// start-up retry: it has a checkpoint, a pod network that has not been torn
// down, and either no running infra container or a network setup that never
// completed (the daemon was killed during the ADD). A running, ready sandbox
// is a live pod: its network is left alone. Called with the sandbox's
// lifecycle lock held, a "pending" setup cannot belong to a RunPodSandbox of
// this process: it holds the lock until it has finished or undone its work.
func (ds *DockerService) startupTearDownRef(id string) (sandboxRef, bool) {
	ref, found, err := ds.lookupSandbox(id)
	if err != nil || !found || ref.cp == nil {
		return ref, false
	}
	if ref.running() && ref.cp.NetworkReady() {
		return ref, false
	}
	return ref, ref.needsTearDown()
}

// pendingTearDowns lists the sandboxes the start-up retry must tear down.
func (ds *DockerService) pendingTearDowns() []string {
	var out []string
	for _, id := range ds.pods.IDs() {
		if _, ok := ds.startupTearDownRef(id); ok {
			out = append(out, id)
		}
	}
	return out
}

// retryPendingTearDowns tears down, in the background of a started daemon,
// every sandbox that still holds a pod network it no longer uses. Each
// sandbox is retried with backoff until its DEL succeeds, something else
// (Stop, Remove) has done it, or ctx ends. It returns when all are done.
func (ds *DockerService) retryPendingTearDowns(ctx context.Context) {
	ids := ds.pendingTearDowns()
	if len(ids) == 0 {
		return
	}
	klog.InfoS("Tearing down the networks of sandboxes whose infra container is not running", "count", len(ids))
	sem := make(chan struct{}, startupTearDownWorkers)
	var wg sync.WaitGroup
	ds.cfg.Metrics.AddTeardownPending(len(ids))
	for _, id := range ids {
		wg.Go(func() {
			defer ds.cfg.Metrics.AddTeardownPending(-1)
			ds.retryTearDown(ctx, id, sem)
		})
	}
	wg.Wait()
}

// retryTearDown runs the teardown of one sandbox until it succeeds or is no
// longer needed. sem bounds the attempts in flight; the waits between
// attempts do not hold it.
func (ds *DockerService) retryTearDown(ctx context.Context, id string, sem chan struct{}) {
	delay := tearDownRetryMinDelay
	for attempt := 1; ; attempt++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		// Checked with the slot and the sandbox's lock held, so that a
		// Stop, Remove or RunPodSandbox that ran while this attempt
		// waited is seen and none runs alongside it.
		unlock, err := ds.pods.Lock(ctx, id)
		if err != nil {
			<-sem
			return
		}
		ref, ok := ds.startupTearDownRef(id)
		if !ok {
			unlock()
			<-sem
			if attempt > 1 {
				klog.InfoS("Sandbox network no longer needs the start-up teardown", "podSandboxID", id, "attempts", attempt-1)
			}
			return
		}
		actx, cancel := context.WithTimeout(ctx, tearDownAttemptTimeout)
		err = ds.tearDownSandboxNetwork(actx, ref)
		cancel()
		unlock()
		<-sem
		log := []any{"pod", klog.KRef(ref.cp.Namespace, ref.cp.Name), "podSandboxID", id, "attempt", attempt}
		if err == nil {
			klog.InfoS("Tore down the network of a sandbox whose infra container is not running or whose setup never completed", append(log, "ips", ref.cp.IPs)...)
			return
		}
		if ctx.Err() != nil {
			return
		}
		klog.ErrorS(err, "Failed to tear down the network of a sandbox whose infra container is not running; will retry", append(log, "retryIn", delay)...)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, tearDownRetryMaxDelay)
	}
}
