//go:build cluster

package e2ecluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	rpcTimeout = 10 * time.Second
	webPort    = 8080
	// teardownTimeout bounds the wait for a deleted pod's sandbox to be
	// removed from netshim: kubelet stops it at once but removes it in its
	// container GC pass, once a minute (two passes when the first still
	// saw the containers).
	teardownTimeout = 3 * time.Minute
)

// deployment is a Deployment of replicas busybox web servers, each
// serving its own name on webPort.
func deployment(name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: %[3]s
        imagePullPolicy: Never
        command: ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p %[4]d -h /www"]
        ports:
        - containerPort: %[4]d
        readinessProbe:
          httpGet: {path: /, port: %[4]d}
          periodSeconds: 1
`, name, replicas, busybox, webPort)
}

// rollOut applies the Deployment and waits for all its pods to be
// available; it returns them.
func rollOut(t *testing.T, ns, name string, replicas int) []pod {
	t.Helper()
	apply(t, ns, deployment(name, replicas))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/"+name, "--timeout="+podTimeout.String())
	var pods podList
	getJSON(t, &pods, "get", "pods", "-n", ns, "-l", "app="+name)
	if len(pods.Items) != replicas {
		t.Fatalf("deployment %s has %d pods, want %d", name, len(pods.Items), replicas)
	}
	return pods.Items
}

// httpGet fetches url from the host (at most 10 s, 16 MiB).
func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// TestDeploymentPodIPs: a Deployment's pods run, each gets its own IP out
// of the Node's podCIDR, the host reaches each, and pods reach each other
// over the bridge.
func TestDeploymentPodIPs(t *testing.T) {
	ns := namespace(t)
	cidr := podCIDR(t)
	pods := rollOut(t, ns, "web", 3)
	seen := map[string]string{}
	for _, p := range pods {
		ip := net.ParseIP(p.Status.PodIP)
		if ip == nil || !cidr.Contains(ip) {
			t.Errorf("pod %s has IP %q, not in the podCIDR %s", p.Metadata.Name, p.Status.PodIP, cidr)
			continue
		}
		if other, dup := seen[p.Status.PodIP]; dup {
			t.Errorf("pods %s and %s share the IP %s", other, p.Metadata.Name, p.Status.PodIP)
		}
		seen[p.Status.PodIP] = p.Metadata.Name
		if p.Status.HostIP != nodeIP {
			t.Errorf("pod %s hostIP = %q, want %s", p.Metadata.Name, p.Status.HostIP, nodeIP)
		}
		body, err := httpGet(fmt.Sprintf("http://%s:%d/", p.Status.PodIP, webPort))
		if err != nil {
			t.Errorf("host -> pod %s: %v", p.Metadata.Name, err)
		} else if strings.TrimSpace(body) != p.Metadata.Name {
			t.Errorf("pod %s at %s answers %q: another pod has its IP?", p.Metadata.Name, p.Status.PodIP, body)
		}
	}
	if t.Failed() {
		return
	}
	// Pod to pod, on the bridge (FORWARD: the firewall plugin's rules).
	from, to := pods[0], pods[1]
	// busybox's nc: its static wget crashes (glibc NSS in a static binary).
	out := kubectl(t, "exec", "-n", ns, from.Metadata.Name, "--", "sh", "-c",
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s %d`, to.Status.PodIP, webPort))
	if !strings.HasSuffix(strings.TrimSpace(out), "\n"+to.Metadata.Name) {
		t.Errorf("pod %s -> pod %s answered %q, want its name as the body", from.Metadata.Name, to.Metadata.Name, out)
	}

	// netshim reports the same addresses kubelet put in the pods' status.
	sandboxes := sandboxesOf(t, ns)
	got := map[string]bool{}
	for _, s := range sandboxes {
		if s.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		st, err := w.cri.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.Id})
		cancel()
		if err != nil {
			t.Fatalf("PodSandboxStatus %s: %v", s.Id, err)
		}
		got[st.GetStatus().GetNetwork().GetIp()] = true
	}
	for ip := range seen {
		if !got[ip] {
			t.Errorf("netshim has no ready sandbox with IP %s (it has %v)", ip, got)
		}
	}
}

// sandboxesOf lists netshim's sandboxes of the pod namespace ns.
func sandboxesOf(t testing.TB, ns string) []*runtimeapi.PodSandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := w.cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.namespace": ns}},
	})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	return resp.Items
}

// containersOf lists netshim's containers of the pod namespace ns.
func containersOf(t testing.TB, ns string) []*runtimeapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := w.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.namespace": ns}},
	})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	return resp.Containers
}

// heldIPs are the addresses host-local holds in the kubenet store.
func heldIPs() map[string]bool {
	m := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(w.ipamDir, "*", "*"))
	for _, f := range files {
		if ip := net.ParseIP(filepath.Base(f)); ip != nil {
			m[ip.String()] = true
		}
	}
	return m
}

// TestDeleteDeployment: deleting a Deployment takes its pods down to
// nothing: pods gone from the API, containers and sandboxes stopped, IPs
// released, and then containers and sandboxes removed from netshim.
func TestDeleteDeployment(t *testing.T) {
	ns := namespace(t)
	pods := rollOut(t, ns, "doomed", 2)
	ips := map[string]bool{}
	for _, p := range pods {
		ips[p.Status.PodIP] = true
	}
	held := heldIPs()
	for ip := range ips {
		if !held[ip] {
			t.Errorf("host-local holds no file for pod IP %s (store %s holds %v)", ip, w.ipamDir, held)
		}
	}
	if n := len(sandboxesOf(t, ns)); n != len(pods) {
		t.Errorf("netshim has %d sandboxes of %s, want %d", n, ns, len(pods))
	}

	start := time.Now()
	kubectl(t, "delete", "deployment", "-n", ns, "doomed", "--wait=true", "--timeout="+podTimeout.String())
	if !harness.Eventually(podTimeout, func() bool {
		out, err := w.cp.Kubectl("get", "pods", "-n", ns, "-o", "name")
		return err == nil && strings.TrimSpace(out) == ""
	}) {
		out, _ := w.cp.Kubectl("get", "pods", "-n", ns, "-o", "wide")
		t.Fatalf("the Deployment's pods are still there after %s:\n%s", podTimeout, out)
	}
	t.Logf("pods gone from the API %s after the delete", time.Since(start).Round(time.Second))

	// Stopped at once: no running container, no ready sandbox, IPs back.
	if !harness.Eventually(time.Minute, func() bool {
		for _, c := range containersOf(t, ns) {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return false
			}
		}
		for _, s := range sandboxesOf(t, ns) {
			if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return false
			}
		}
		held := heldIPs()
		for ip := range ips {
			if held[ip] {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("a minute after the pods went, netshim still runs some of them or holds their IPs: containers %v sandboxes %v held %v",
			containersOf(t, ns), sandboxesOf(t, ns), heldIPs())
	}
	t.Logf("containers and sandboxes stopped, IPs released %s after the delete", time.Since(start).Round(time.Second))

	// Removed at kubelet's next container GC.
	if !harness.Eventually(teardownTimeout, func() bool {
		return len(containersOf(t, ns)) == 0 && len(sandboxesOf(t, ns)) == 0
	}) {
		t.Fatalf("%s after the pods went, netshim still has containers %v and sandboxes %v",
			teardownTimeout, containersOf(t, ns), sandboxesOf(t, ns))
	}
	t.Logf("containers and sandboxes removed %s after the delete", time.Since(start).Round(time.Second))
}
