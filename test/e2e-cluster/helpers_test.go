//go:build cluster

package e2ecluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/netshim/netshim/test/harness"
)

const (
	// podTimeout bounds the wait for a pod to run (scheduling, sandbox,
	// containers, probes); seconds when all works.
	podTimeout = 2 * time.Minute
	// nodeTimeout bounds the wait for the Node to be Ready after the
	// kubelet started (registration, podCIDR, network ready).
	nodeTimeout = 2 * time.Minute
)

// The parts of the API objects the checks read.
type (
	objectMeta struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		UID       string            `json:"uid"`
		Labels    map[string]string `json:"labels"`
	}
	condition struct {
		Type   string `json:"type"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	containerState struct {
		Running *struct {
			StartedAt string `json:"startedAt"`
		} `json:"running"`
		Terminated *struct {
			ExitCode   int    `json:"exitCode"`
			Reason     string `json:"reason"`
			StartedAt  string `json:"startedAt"`
			FinishedAt string `json:"finishedAt"`
		} `json:"terminated"`
		Waiting *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"waiting"`
	}
	containerStatus struct {
		Name         string         `json:"name"`
		Ready        bool           `json:"ready"`
		Started      *bool          `json:"started"`
		RestartCount int            `json:"restartCount"`
		ContainerID  string         `json:"containerID"`
		State        containerState `json:"state"`
		LastState    containerState `json:"lastState"`
	}
	pod struct {
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
		Status struct {
			Phase  string `json:"phase"`
			HostIP string `json:"hostIP"`
			PodIP  string `json:"podIP"`
			PodIPs []struct {
				IP string `json:"ip"`
			} `json:"podIPs"`
			Conditions                 []condition       `json:"conditions"`
			ContainerStatuses          []containerStatus `json:"containerStatuses"`
			InitContainerStatuses      []containerStatus `json:"initContainerStatuses"`
			EphemeralContainerStatuses []containerStatus `json:"ephemeralContainerStatuses"`
		} `json:"status"`
	}
	podList struct {
		Items []pod `json:"items"`
	}
	node struct {
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			PodCIDR  string   `json:"podCIDR"`
			PodCIDRs []string `json:"podCIDRs"`
		} `json:"spec"`
		Status struct {
			Conditions []condition `json:"conditions"`
			Addresses  []struct {
				Type    string `json:"type"`
				Address string `json:"address"`
			} `json:"addresses"`
			NodeInfo struct {
				ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
				KubeletVersion          string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
)

func (p *pod) container(name string) *containerStatus {
	for _, list := range [][]containerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func (p *pod) condition(typ string) string {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// kubectl runs kubectl as the cluster admin and fails the test if it fails.
func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	return w.cp.MustKubectl(t, args...)
}

// getJSON decodes `kubectl get ... -o json` into v.
func getJSON(t testing.TB, v any, args ...string) {
	t.Helper()
	out := kubectl(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("decoding kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// tryGetJSON is getJSON that reports failure instead of failing.
func tryGetJSON(v any, args ...string) error {
	out, err := w.cp.Kubectl(append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(out), v)
}

func getPod(t testing.TB, ns, name string) *pod {
	t.Helper()
	var p pod
	getJSON(t, &p, "get", "pod", "-n", ns, name)
	return &p
}

// apply creates or updates the objects of a YAML manifest.
func apply(t testing.TB, ns, manifest string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), harness.CommandDeadline)
	defer cancel()
	if _, err := w.cp.KubectlStdin(ctx, strings.NewReader(manifest), "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, manifest)
	}
}

var nsName = regexp.MustCompile(`[^a-z0-9-]+`)

// namespace makes a namespace of the test's own, once the Node is Ready,
// and deletes it (without waiting; the audit does) when the test ends,
// describing its pods first if the test failed.
func namespace(t *testing.T) string {
	t.Helper()
	waitNodeReady(t)
	ns := nsPrefix + nsName.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-")
	if len(ns) > 63 {
		ns = ns[:63]
	}
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := w.cp.Kubectl("get", "pods", "-n", ns, "-o", "wide")
			t.Logf("pods of %s:\n%s", ns, out)
			out, _ = w.cp.Kubectl("describe", "pods", "-n", ns)
			t.Logf("describe:\n%s", out)
			out, _ = w.cp.Kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp")
			t.Logf("events:\n%s", out)
		}
		if _, err := w.cp.Kubectl("delete", "namespace", ns, "--wait=false"); err != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	})
	// The ServiceAccount admission plugin refuses pods until the
	// namespace's default ServiceAccount exists.
	if !harness.Eventually(time.Minute, func() bool {
		_, err := w.cp.Kubectl("get", "serviceaccount", "default", "-n", ns)
		return err == nil
	}) {
		t.Fatalf("namespace %s has no default ServiceAccount after a minute", ns)
	}
	return ns
}

// waitNodeReady waits (nodeTimeout) for the Node to be Ready.
func waitNodeReady(t testing.TB) *node {
	t.Helper()
	var n node
	var last string
	if !harness.Eventually(nodeTimeout, func() bool {
		if err := tryGetJSON(&n, "get", "node", nodeName); err != nil {
			last = err.Error()
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				last = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Reason)
				return c.Status == "True"
			}
		}
		last = "no Ready condition"
		return false
	}) {
		t.Fatalf("node %s is not Ready after %s: %s\n%s", nodeName, nodeTimeout, last, w.kubelet.LogTail(20))
	}
	return &n
}

// waitPod polls the pod until cond holds (podTimeout), and returns it.
func waitPod(t testing.TB, ns, name, what string, cond func(*pod) bool) *pod {
	t.Helper()
	var p pod
	var lastErr error
	if !harness.Eventually(podTimeout, func() bool {
		p = pod{}
		if lastErr = tryGetJSON(&p, "get", "pod", "-n", ns, name); lastErr != nil {
			return false
		}
		return cond(&p)
	}) {
		b, _ := json.MarshalIndent(p.Status, "", "  ")
		t.Fatalf("pod %s/%s: not %s within %s (last error: %v); status:\n%s", ns, name, what, podTimeout, lastErr, b)
	}
	return &p
}

// waitReady waits for the pod's Ready condition.
func waitReady(t testing.TB, ns, name string) *pod {
	t.Helper()
	return waitPod(t, ns, name, "Ready", func(p *pod) bool { return p.condition("Ready") == "True" })
}

// podCIDR is the Node's pod CIDR.
func podCIDR(t testing.TB) *net.IPNet {
	t.Helper()
	n := waitNodeReady(t)
	_, cidr, err := net.ParseCIDR(n.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("node %s has no usable podCIDR %q: %v", nodeName, n.Spec.PodCIDR, err)
	}
	return cidr
}

// podSpec is a one-container busybox pod that runs cmd (a shell line),
// with a short grace period: busybox as PID 1 ignores SIGTERM.
func podSpec(name, cmd string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
`, name, busybox, cmd)
}
