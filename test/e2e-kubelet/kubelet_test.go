//go:build kubelet

// Package e2ekubelet checks netshim under a real kubelet. TestMain
// (main_test.go) sets up the world through test/harness (a private dockerd,
// netshim on a temp socket with a CNI bridge network, kubelet standalone
// with a static pod dir) when hack/e2e-kubelet.sh (`make e2e-kubelet`)
// runs the test binary with KUBELET_BIN and the other variables it sets;
// without them the checks skip.
//
// The test writes one static pod of two busybox containers, watches it through
// the CRI (netshim's socket) and through kubelet's own API (its authenticated
// port, anonymous access allowed), then removes the manifest and watches the
// teardown. Every check is printed as PASS/FAIL and appended to
// E2E_KUBELET_RESULTS; a failed check does not stop the later ones.
package e2ekubelet

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	podName = "kubelet-e2e"
	// usernsPodName is the static pod with hostUsers: false and
	// supplementalGroupsPolicy: Strict; usernsGroup its one group.
	usernsPodName = "kubelet-e2e-userns"
	usernsName    = "userns"
	usernsGroup   = 1234
	webName       = "web"
	crasherName   = "crasher"
	busyName      = "busy"
	// busyFillBytes is what busy writes to its writable layer.
	busyFillBytes = 2 << 20
	// bigBytes is the size of the file web serves for network traffic.
	bigBytes      = 256 << 10
	webPort       = 8080
	crasherExit   = 2
	token         = "netshim-kubelet-e2e-ok"
	longLineBytes = 20000 // longer than Docker's 16 KiB log chunks: may come as P lines

	pollInterval = 500 * time.Millisecond
	// runDeadline bounds the wait for the pod to run, pass its probe and
	// restart the crashing container once (about 15 s when all works: 3 s
	// run + 10 s back-off).
	runDeadline = 120 * time.Second
	// teardownDeadline: a removed static pod's containers go at kubelet's
	// next 1-minute container GC, and its sandbox in that pass or, when
	// the pass still saw the containers, in the next one (seen: 56 s and
	// 99 s after the manifest went).
	teardownDeadline = 150 * time.Second
	rpcTimeout       = 10 * time.Second
)

type env struct {
	sock, staticDir, kubeletURL, healthzURL string
	namespace, node, image                  string
	gateway                                 string
	subnet                                  *net.IPNet
	ipamDir, podLogsDir                     string
	results, artifacts                      string
	hostPort                                int
	kubelet                                 *harness.Kubelet
	// criStats: kubelet runs with PodAndContainerStatsFromCRI=true, so
	// pod network stats come from netshim too.
	criStats bool
	// gates is kubelet's feature gates, for the record.
	gates string
}

// loadEnv is the world TestMain set up; without one the checks skip.
func loadEnv(t *testing.T) *env {
	t.Helper()
	if theEnv == nil {
		t.Skip("no world: run `make e2e-kubelet` (hack/e2e-kubelet.sh) as root; it sets KUBELET_BIN")
	}
	return theEnv
}

// recorder prints and records the checks.
type recorder struct {
	t              *testing.T
	path           string
	passed, failed int
}

// outcome is a check's result: err nil means it passed.
type outcome struct {
	detail string
	err    error
}

func pass(detail string) outcome { return outcome{detail: detail} }
func fail(err error) outcome     { return outcome{err: err} }

func (r *recorder) check(name string, o outcome) {
	r.t.Helper()
	var line string
	if o.err == nil {
		r.passed++
		line = fmt.Sprintf("PASS %s: %s", name, o.detail)
	} else {
		r.failed++
		line = fmt.Sprintf("FAIL %s: %v", name, o.err)
		r.t.Fail()
	}
	fmt.Println(line)
	f, ferr := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if ferr != nil {
		r.t.Errorf("recording %s: %v", name, ferr)
		return
	}
	defer f.Close()
	if _, ferr := fmt.Fprintln(f, line); ferr != nil {
		r.t.Errorf("recording %s: %v", name, ferr)
	}
}

// ---------------------------------------------------------------- the pod

// manifest is the static pod, as JSON (kubelet's file source reads YAML,
// of which JSON is a subset).
func (e *env) manifest() ([]byte, error) {
	web := "mkdir -p /tmp/www && echo " + token + " >/tmp/www/index.html" +
		" && head -c " + strconv.Itoa(bigBytes) + " /dev/zero >/tmp/www/big" +
		" && echo web-started && echo web-stderr >&2" +
		" && head -c " + strconv.Itoa(longLineBytes) + " /dev/zero | tr '\\0' x && echo" +
		" && exec httpd -f -p " + strconv.Itoa(webPort) + " -h /tmp/www"
	crasher := "echo crasher-run; sleep 3; exit " + strconv.Itoa(crasherExit)
	// busy burns CPU (capped at 0.2 core) and has written to its layer.
	busy := "trap 'exit 0' TERM; head -c " + strconv.Itoa(busyFillBytes) + " /dev/zero >/fill && echo busy-filled" +
		" && while :; do :; done"
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": podName, "namespace": e.namespace},
		"spec": map[string]any{
			"restartPolicy":                 "Always",
			"dnsPolicy":                     "Default",
			"terminationGracePeriodSeconds": 2,
			"containers": []any{
				map[string]any{
					"name":            webName,
					"image":           e.image,
					"imagePullPolicy": "Never",
					"command":         []string{"sh", "-c", web},
					"ports": []any{map[string]any{
						"containerPort": webPort, "hostPort": e.hostPort, "protocol": "TCP",
					}},
					"readinessProbe": map[string]any{
						"exec": map[string]any{"command": []string{
							"wget", "-q", "-O", "/dev/null", fmt.Sprintf("http://127.0.0.1:%d/index.html", webPort),
						}},
						"periodSeconds": 2, "timeoutSeconds": 3, "failureThreshold": 3,
					},
				},
				map[string]any{
					"name":            crasherName,
					"image":           e.image,
					"imagePullPolicy": "Never",
					"command":         []string{"sh", "-c", crasher},
				},
				map[string]any{
					"name":            busyName,
					"image":           e.image,
					"imagePullPolicy": "Never",
					"command":         []string{"sh", "-c", busy},
					"resources": map[string]any{
						"limits": map[string]any{"cpu": "200m", "memory": "64Mi"},
					},
				},
			},
		},
	}
	return json.MarshalIndent(pod, "", "  ")
}

func (e *env) manifestPath() string { return filepath.Join(e.staticDir, podName+".yaml") }

// usernsManifest is the second static pod: its own user namespace
// (hostUsers: false) and exactly the groups it asks for
// (supplementalGroupsPolicy: Strict); its container writes to its image's
// /etc, which only an idmapped image lets its root do.
func (e *env) usernsManifest() ([]byte, error) {
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": usernsPodName, "namespace": e.namespace},
		"spec": map[string]any{
			"hostUsers":                     false,
			"restartPolicy":                 "Always",
			"dnsPolicy":                     "Default",
			"terminationGracePeriodSeconds": 2,
			"securityContext": map[string]any{
				"supplementalGroupsPolicy": "Strict",
				"supplementalGroups":       []int{usernsGroup},
			},
			"containers": []any{map[string]any{
				"name":            usernsName,
				"image":           e.image,
				"imagePullPolicy": "Never",
				"command":         []string{"sh", "-c", "echo written >/etc/userns-ok && exec sleep 3600"},
			}},
		},
	}
	return json.MarshalIndent(pod, "", "  ")
}

func (e *env) usernsManifestPath() string {
	return filepath.Join(e.staticDir, usernsPodName+".yaml")
}

// writeManifest writes the manifests atomically: kubelet ignores dot
// files, so it never reads a partial one.
func (e *env) writeManifest() error {
	for _, m := range []struct {
		name, path string
		make       func() ([]byte, error)
	}{{podName, e.manifestPath(), e.manifest}, {usernsPodName, e.usernsManifestPath(), e.usernsManifest}} {
		data, err := m.make()
		if err != nil {
			return err
		}
		_ = os.WriteFile(filepath.Join(e.artifacts, m.name+".json"), data, 0o644)
		tmp := filepath.Join(e.staticDir, "."+m.name+".tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, m.path); err != nil {
			return err
		}
	}
	return nil
}

// kubelet's static pod is named after the manifest's pod and the node.
func (e *env) mirrorName() string { return podName + "-" + e.node }

// ---------------------------------------------------------------- kubelet API

type kubeletPodList struct {
	Items []kubeletPod `json:"items"`
}

type kubeletPod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		ContainerStatuses []kubeletContainerStatus `json:"containerStatuses"`
	} `json:"status"`
}

type kubeletContainerState struct {
	Waiting *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"waiting,omitempty"`
	Running *struct {
		StartedAt string `json:"startedAt"`
	} `json:"running,omitempty"`
	Terminated *struct {
		ExitCode int32  `json:"exitCode"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	} `json:"terminated,omitempty"`
}

func (s kubeletContainerState) String() string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(exit %d, %s %s)", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	case s.Waiting != nil:
		return fmt.Sprintf("waiting(%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	}
	return "unknown"
}

type kubeletContainerStatus struct {
	Name         string                `json:"name"`
	Ready        bool                  `json:"ready"`
	RestartCount int32                 `json:"restartCount"`
	State        kubeletContainerState `json:"state"`
	LastState    kubeletContainerState `json:"lastState"`
	ContainerID  string                `json:"containerID"`
}

var kubeletClient = &http.Client{
	Timeout: rpcTimeout,
	Transport: &http.Transport{
		Proxy: nil,
		// kubelet serves a self-signed certificate on 127.0.0.1.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	},
}

func httpGet(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, body)
	}
	return string(body), nil
}

// kubeletPod returns kubelet's view of the test pod (nil when kubelet does not
// list it) and the raw answer of /pods.
func (e *env) kubeletPod() (*kubeletPod, []byte, error) { return e.kubeletPodNamed(podName) }

// kubeletPodNamed is kubeletPod for the static pod of a manifest's name.
func (e *env) kubeletPodNamed(name string) (*kubeletPod, []byte, error) {
	body, err := httpGet(kubeletClient, e.kubeletURL+"/pods")
	if err != nil {
		return nil, nil, err
	}
	var list kubeletPodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		return nil, []byte(body), fmt.Errorf("decoding kubelet's /pods: %w", err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Metadata.Namespace == e.namespace && p.Metadata.Name == name+"-"+e.node {
			return p, []byte(body), nil
		}
	}
	return nil, []byte(body), nil
}

func (p *kubeletPod) container(name string) *kubeletContainerStatus {
	if p == nil {
		return nil
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// describe sums up kubelet's view of the pod for a failure message.
func (p *kubeletPod) describe() string {
	if p == nil {
		return "kubelet does not list the pod"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kubelet: phase %q", p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "; %s: %s, ready=%v, restarts=%d", c.Name, c.State, c.Ready, c.RestartCount)
	}
	return b.String()
}

// ---------------------------------------------------------------- CRI view

type observation struct {
	sandboxID     string
	sandboxReady  bool
	podIP         string
	podUID        string
	podCRIName    string
	running       map[string]bool  // container name -> seen RUNNING
	maxAttempt    map[string]int   // container name -> highest attempt seen
	exitCodes     map[string][]int // container name -> exit codes of exited containers seen
	webReady      bool             // kubelet reported web ready at some point
	restartCount  int32            // kubelet's restartCount of crasher, highest seen
	lastPod       *kubeletPod
	lastPodJSON   []byte
	lastErr       error
	kubeletErrors int
}

func (o *observation) done() bool {
	return o.sandboxReady && o.running[webName] && o.running[crasherName] && o.webReady &&
		o.restartCount >= 1 && o.maxAttempt[crasherName] >= 1 && hasExit(o.exitCodes[crasherName], crasherExit)
}

func hasExit(codes []int, want int) bool {
	for _, c := range codes {
		if c == want {
			return true
		}
	}
	return false
}

type cri struct {
	rt runtimeapi.RuntimeServiceClient
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rpcTimeout)
}

// podSandboxes returns the sandboxes of the test's namespace.
func (c *cri) podSandboxes(namespace string) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	var out []*runtimeapi.PodSandbox
	for _, s := range resp.Items {
		if s.GetMetadata().GetNamespace() == namespace {
			out = append(out, s)
		}
	}
	return out, nil
}

func (c *cri) containers(sandboxID string) ([]*runtimeapi.Container, error) {
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID},
	})
	if err != nil {
		return nil, fmt.Errorf("ListContainers: %w", err)
	}
	return resp.Containers, nil
}

// observe takes one look through the CRI and kubelet's API.
func (e *env) observe(c *cri, o *observation) {
	o.lastErr = nil
	sbs, err := c.podSandboxes(e.namespace)
	if err != nil {
		o.lastErr = err
	}
	// kubelet makes a new sandbox (attempt+1) if one dies: follow the newest.
	// The user namespace pod is checked on its own (checkUsernsPod).
	var sb *runtimeapi.PodSandbox
	for _, s := range sbs {
		if s.GetMetadata().GetName() != e.mirrorName() {
			continue
		}
		if sb == nil || s.GetMetadata().GetAttempt() > sb.GetMetadata().GetAttempt() {
			sb = s
		}
	}
	if sb != nil {
		o.sandboxID = sb.Id
		o.podUID = sb.GetMetadata().GetUid()
		o.podCRIName = sb.GetMetadata().GetName()
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ctx, cancel := callCtx()
			st, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id})
			cancel()
			if err != nil {
				o.lastErr = fmt.Errorf("PodSandboxStatus: %w", err)
			} else if st.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
				o.sandboxReady = true
				if ip := st.GetStatus().GetNetwork().GetIp(); ip != "" {
					o.podIP = ip
				}
			}
		}
		cs, err := c.containers(sb.Id)
		if err != nil {
			o.lastErr = err
		}
		for _, ctr := range cs {
			name := ctr.GetMetadata().GetName()
			if a := int(ctr.GetMetadata().GetAttempt()); a > o.maxAttempt[name] {
				o.maxAttempt[name] = a
			}
			switch ctr.State {
			case runtimeapi.ContainerState_CONTAINER_RUNNING:
				o.running[name] = true
			case runtimeapi.ContainerState_CONTAINER_EXITED:
				ctx, cancel := callCtx()
				st, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.Id})
				cancel()
				if err != nil {
					o.lastErr = fmt.Errorf("ContainerStatus: %w", err)
				} else if code := int(st.GetStatus().GetExitCode()); !hasExit(o.exitCodes[name], code) {
					o.exitCodes[name] = append(o.exitCodes[name], code)
				}
			}
		}
	}
	p, raw, err := e.kubeletPod()
	if err != nil {
		o.kubeletErrors++
		o.lastErr = err
		return
	}
	o.lastPod, o.lastPodJSON = p, raw
	if w := p.container(webName); w != nil && w.Ready {
		o.webReady = true
	}
	if cr := p.container(crasherName); cr != nil && cr.RestartCount > o.restartCount {
		o.restartCount = cr.RestartCount
	}
}

// ---------------------------------------------------------------- logs

// criLine is `<RFC3339Nano> <stdout|stderr> <F|P> <text>`, exactly as
// kubelet's parser wants it (the space after the tag is required).
var criLine = regexp.MustCompile(`^(\S+) (stdout|stderr) ([FP]) (.*)$`)

// parseCRILog parses a CRI-format log file and returns its complete lines
// per stream, P fragments joined.
func parseCRILog(path string) (map[string][]string, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	out := map[string][]string{}
	partial := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	n := 0
	var last time.Time
	for sc.Scan() {
		n++
		m := criLine.FindStringSubmatch(sc.Text())
		if m == nil {
			return nil, n, fmt.Errorf("%s:%d: not a CRI log line: %.120q", path, n, sc.Text())
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return nil, n, fmt.Errorf("%s:%d: timestamp %q: %v", path, n, m[1], err)
		}
		if ts.Before(last.Add(-time.Second)) {
			return nil, n, fmt.Errorf("%s:%d: timestamp %s goes back from %s", path, n, m[1], last.Format(time.RFC3339Nano))
		}
		if ts.After(last) {
			last = ts
		}
		stream, tag, text := m[2], m[3], m[4]
		if tag == "P" {
			partial[stream] += text
			continue
		}
		out[stream] = append(out[stream], partial[stream]+text)
		delete(partial, stream)
	}
	if err := sc.Err(); err != nil {
		return nil, n, fmt.Errorf("%s: %w", path, err)
	}
	return out, n, nil
}

func contains(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- the test

// kubeletUpTimeout bounds the wait for kubelet's authenticated API.
const kubeletUpTimeout = 30 * time.Second

func TestKubeletStaticPod(t *testing.T) {
	e := loadEnv(t)
	r := &recorder{t: t, path: e.results}
	defer func() {
		fmt.Printf("e2e-kubelet checks: %d passed, %d failed\n", r.passed, r.failed)
	}()

	c := &cri{rt: harness.ConnectCRI(t, e.sock).Runtime}

	// kubelet answers on its healthz and its authenticated API. The
	// harness waited for healthz; the API server is started by another
	// goroutine of kubelet's and may listen a moment later (seen once:
	// connection refused on 10250 with healthz ok).
	{
		var err error
		harness.Eventually(kubeletUpTimeout, func() bool {
			body, herr := httpGet(kubeletClient, e.healthzURL)
			if herr != nil || strings.TrimSpace(body) != "ok" {
				err = fmt.Errorf("healthz: %q, %v", body, herr)
			} else if _, _, perr := e.kubeletPod(); perr != nil {
				err = perr
			} else {
				err = nil
			}
			return err == nil
		})
		r.check("kubelet-up", outcome{"healthz ok, /pods answers on the authenticated port", err})
	}

	if err := e.writeManifest(); err != nil {
		r.check("manifest", fail(err))
		return
	}
	start := time.Now()
	o := &observation{running: map[string]bool{}, maxAttempt: map[string]int{}, exitCodes: map[string][]int{}}
	for {
		e.observe(c, o)
		if o.done() || time.Since(start) > runDeadline || !e.kubelet.Running() {
			break
		}
		time.Sleep(pollInterval)
	}
	elapsed := time.Since(start).Round(time.Second)
	if o.lastPodJSON != nil {
		_ = os.WriteFile(filepath.Join(e.artifacts, "kubelet-pods.json"), o.lastPodJSON, 0o644)
	}
	why := func() error {
		msg := o.lastPod.describe()
		if !e.kubelet.Running() {
			msg = "kubelet exited; " + msg
		}
		if o.lastErr != nil {
			msg += "; last error: " + o.lastErr.Error()
		}
		return errors.New(msg)
	}
	t.Logf("observed for %s: sandbox %s ready=%v ip=%s running=%v attempts=%v exits=%v webReady=%v restarts=%d",
		elapsed, short(o.sandboxID), o.sandboxReady, o.podIP, o.running, o.maxAttempt, o.exitCodes, o.webReady, o.restartCount)

	// 1. The sandbox.
	switch {
	case o.sandboxID == "":
		r.check("sandbox-ready", fail(fmt.Errorf("no sandbox in namespace %s after %s: %v", e.namespace, elapsed, why())))
	case !o.sandboxReady:
		r.check("sandbox-ready", fail(fmt.Errorf("sandbox %s never READY: %v", short(o.sandboxID), why())))
	case o.podIP == "" || !e.subnet.Contains(net.ParseIP(o.podIP)):
		r.check("sandbox-ready", fail(fmt.Errorf("sandbox %s is READY but its IP %q is not in %s", short(o.sandboxID), o.podIP, e.subnet)))
	case o.podCRIName != e.mirrorName():
		r.check("sandbox-ready", fail(fmt.Errorf("sandbox is named %q, want %q", o.podCRIName, e.mirrorName())))
	default:
		r.check("sandbox-ready", pass(fmt.Sprintf("sandbox %s of %s/%s READY, IP %s", short(o.sandboxID), e.namespace, o.podCRIName, o.podIP)))
	}

	// 2. Both containers ran.
	if o.running[webName] && o.running[crasherName] {
		r.check("containers-running", pass("web and crasher seen CONTAINER_RUNNING"))
	} else {
		r.check("containers-running", fail(fmt.Errorf("seen running: web=%v crasher=%v; %v", o.running[webName], o.running[crasherName], why())))
	}

	// 3. The exec readiness probe passed (kubelet's view).
	if o.webReady {
		r.check("readiness-probe", pass("kubelet reports web ready (exec wget probe through ExecSync)"))
	} else {
		r.check("readiness-probe", fail(fmt.Errorf("kubelet never reported web ready; %v", why())))
	}

	// 4. The exiting container was restarted.
	if o.restartCount >= 1 && o.maxAttempt[crasherName] >= 1 && hasExit(o.exitCodes[crasherName], crasherExit) {
		r.check("restart", pass(fmt.Sprintf("crasher exited %d and was restarted: kubelet restartCount %d, CRI attempt %d",
			crasherExit, o.restartCount, o.maxAttempt[crasherName])))
	} else {
		r.check("restart", fail(fmt.Errorf("kubelet restartCount %d, highest CRI attempt %d, exit codes seen %v (want exit %d and a restart); %v",
			o.restartCount, o.maxAttempt[crasherName], o.exitCodes[crasherName], crasherExit, why())))
	}

	// 2b. The pod with hostUsers: false and Strict groups runs.
	r.check("userns-pod", e.checkUsernsPod(c))

	// 5. Logs: CRI format under the pod logs dir, and through kubelet.
	r.check("logs-cri-format", e.checkLogFiles(o))
	r.check("logs-kubelet", e.checkKubeletLogs())

	// 6. hostPort on the host.
	r.check("hostport", e.checkHostPort(o))

	// 7. kubelet's summary API shows the pod's and containers' usage.
	r.check("summary-stats", e.checkSummary(o))
	if e.criStats {
		r.check("summary-network", e.checkSummaryNetwork(o))
	}

	// 8. Removing the manifest tears the pod down and frees its IP.
	r.check("teardown", e.checkTeardown(c, o))
	r.check("ip-released", e.checkIPReleased(o))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	if id == "" {
		return "(none)"
	}
	return id
}

func (e *env) podLogDir(o *observation) string {
	return filepath.Join(e.podLogsDir, fmt.Sprintf("%s_%s_%s", e.namespace, e.mirrorName(), o.podUID))
}

func (e *env) checkLogFiles(o *observation) outcome {
	if o.podUID == "" {
		return fail(errors.New("no sandbox, so no pod log directory"))
	}
	dir := e.podLogDir(o)
	web := filepath.Join(dir, webName, "0.log")
	lines, n, err := parseCRILog(web)
	if err != nil {
		return fail(err)
	}
	long := strings.Repeat("x", longLineBytes)
	var missing []string
	if !contains(lines["stdout"], "web-started") {
		missing = append(missing, "stdout web-started")
	}
	if !contains(lines["stderr"], "web-stderr") {
		missing = append(missing, "stderr web-stderr")
	}
	if !contains(lines["stdout"], long) {
		missing = append(missing, fmt.Sprintf("stdout line of %d x", longLineBytes))
	}
	if len(missing) > 0 {
		return fail(fmt.Errorf("%s (%d lines) lacks %s", web, n, strings.Join(missing, ", ")))
	}
	crasher := filepath.Join(dir, crasherName, "0.log")
	clines, cn, err := parseCRILog(crasher)
	if err != nil {
		return fail(err)
	}
	if !contains(clines["stdout"], "crasher-run") {
		return fail(fmt.Errorf("%s (%d lines) lacks stdout crasher-run", crasher, cn))
	}
	return pass(fmt.Sprintf("%s: %d CRI lines (stdout, stderr, a %d-byte line rejoined); crasher/0.log: %d", web, n, longLineBytes, cn))
}

func (e *env) checkKubeletLogs() outcome {
	base := fmt.Sprintf("%s/containerLogs/%s/%s/", e.kubeletURL, e.namespace, e.mirrorName())
	body, err := httpGet(kubeletClient, base+webName)
	if err != nil {
		return fail(err)
	}
	if !strings.Contains(body, "web-started\n") || !strings.Contains(body, "web-stderr\n") {
		return fail(fmt.Errorf("kubelet's log of web lacks web-started/web-stderr: %.200q", body))
	}
	prev, err := httpGet(kubeletClient, base+crasherName+"?previous=true")
	if err != nil {
		return fail(err)
	}
	if !strings.Contains(prev, "crasher-run\n") {
		return fail(fmt.Errorf("kubelet's previous log of crasher lacks crasher-run: %.200q", prev))
	}
	return pass("kubelet's /containerLogs serves web's log and crasher's previous log")
}

func (e *env) checkHostPort(o *observation) outcome {
	if o.podIP == "" {
		return fail(errors.New("the pod has no IP"))
	}
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	urls := []string{
		fmt.Sprintf("http://%s/index.html", net.JoinHostPort(o.podIP, strconv.Itoa(webPort))),
		fmt.Sprintf("http://127.0.0.1:%d/index.html", e.hostPort),
		fmt.Sprintf("http://%s/index.html", net.JoinHostPort(e.gateway, strconv.Itoa(e.hostPort))),
	}
	var bad []string
	for _, u := range urls {
		var body string
		var err error
		// The rules are in place once the sandbox is up; allow a few tries
		// for a slow httpd start.
		for i := 0; i < 5; i++ {
			if body, err = httpGet(plain, u); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		switch {
		case err != nil:
			bad = append(bad, err.Error())
		case strings.TrimSpace(body) != token:
			bad = append(bad, fmt.Sprintf("GET %s: %q, want %q", u, body, token))
		}
	}
	if len(bad) > 0 {
		return fail(errors.New(strings.Join(bad, "; ")))
	}
	return pass("GET " + strings.Join(urls, ", ") + " -> " + token)
}

func (e *env) checkTeardown(c *cri, o *observation) outcome {
	// Both pods at once: kubelet's container GC, which the wait is
	// mostly for, removes them in the same passes.
	if err := os.Remove(e.usernsManifestPath()); err != nil {
		return fail(fmt.Errorf("removing the user namespace pod's manifest: %w", err))
	}
	if err := os.Remove(e.manifestPath()); err != nil {
		return fail(fmt.Errorf("removing the manifest: %w", err))
	}
	if o.sandboxID == "" {
		return fail(errors.New("manifest removed, but there was never a sandbox to tear down"))
	}
	start := time.Now()
	var left []*runtimeapi.PodSandbox
	var ctrs []*runtimeapi.Container
	var lastErr error
	var stoppedAfter time.Duration
	for time.Since(start) < teardownDeadline {
		lastErr = nil
		sbs, err := c.podSandboxes(e.namespace)
		if err != nil {
			lastErr = err
		} else {
			left = sbs
			ctrs = nil
			for _, s := range sbs {
				if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
					continue
				}
				if stoppedAfter == 0 {
					stoppedAfter = time.Since(start)
				}
			}
			for _, s := range sbs {
				cs, err := c.containers(s.Id)
				if err != nil {
					lastErr = err
				}
				ctrs = append(ctrs, cs...)
			}
			if len(sbs) == 0 && len(ctrs) == 0 {
				break
			}
		}
		time.Sleep(pollInterval)
	}
	took := time.Since(start).Round(time.Second)
	if lastErr != nil || len(left) > 0 || len(ctrs) > 0 {
		var states []string
		for _, s := range left {
			states = append(states, short(s.Id)+"="+s.State.String())
		}
		return fail(fmt.Errorf("%s after removing the manifest: sandboxes left %v, containers left %d (last error: %v)",
			took, states, len(ctrs), lastErr))
	}
	if p, _, err := e.kubeletPod(); err == nil && p != nil {
		return fail(fmt.Errorf("sandbox gone after %s but kubelet still lists the pod", took))
	}
	detail := fmt.Sprintf("manifest removed: sandbox and containers gone from the CRI after %s", took)
	if stoppedAfter > 0 {
		detail += fmt.Sprintf(" (seen NOTREADY after %s)", stoppedAfter.Round(time.Second))
	}
	return pass(detail)
}

func (e *env) checkIPReleased(o *observation) outcome {
	if o.podIP == "" {
		return fail(errors.New("the pod never had an IP"))
	}
	// host-local keeps one file per allocated IP in its data dir.
	entries, err := os.ReadDir(e.ipamDir)
	if err != nil && !os.IsNotExist(err) {
		return fail(err)
	}
	var held []string
	for _, en := range entries {
		if ip := net.ParseIP(en.Name()); ip != nil && e.subnet.Contains(ip) {
			held = append(held, en.Name())
		}
	}
	if len(held) > 0 {
		return fail(fmt.Errorf("host-local (%s) still holds %v (the pod had %s)", e.ipamDir, held, o.podIP))
	}
	return pass(fmt.Sprintf("%s no longer allocated in %s", o.podIP, e.ipamDir))
}

// checkUsernsPod waits for the static pod with hostUsers: false to run,
// then checks through the CRI what its container is: root inside a user
// namespace mapping it to an unprivileged range of the node (the one
// kubelet chose, of 65536 ids), with exactly its gid and the pod's group
// (Strict), as ContainerStatus reports too, and its write to the image's
// /etc went through.
func (e *env) checkUsernsPod(c *cri) outcome {
	var ctr *runtimeapi.Container
	var lastErr error
	if !harness.Eventually(runDeadline, func() bool {
		ctr, lastErr = e.usernsContainer(c)
		return ctr != nil
	}) {
		p, _, _ := e.kubeletPodNamed(usernsPodName)
		return fail(fmt.Errorf("container %s of %s never running (last error: %v); kubelet: %s", usernsName, usernsPodName, lastErr, p.describe()))
	}
	exec := func(cmd ...string) (string, error) {
		ctx, cancel := callCtx()
		defer cancel()
		resp, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr.Id, Cmd: cmd, Timeout: 10})
		if err != nil {
			return "", err
		}
		if resp.ExitCode != 0 {
			return "", fmt.Errorf("%v: exit %d: %s", cmd, resp.ExitCode, resp.Stderr)
		}
		return strings.TrimSpace(string(resp.Stdout)), nil
	}
	var bad []string
	uidMap, err := exec("cat", "/proc/self/uid_map")
	f := strings.Fields(uidMap)
	if err != nil || len(f) != 3 || f[0] != "0" || f[1] == "0" || f[2] != "65536" {
		bad = append(bad, fmt.Sprintf("uid_map %q (%v), want 0 -> an unprivileged range of 65536", uidMap, err))
	}
	if got, err := exec("id", "-u"); err != nil || got != "0" {
		bad = append(bad, fmt.Sprintf("id -u %q (%v), want 0", got, err))
	}
	if got, err := exec("id", "-G"); err != nil || got != fmt.Sprintf("0 %d", usernsGroup) {
		bad = append(bad, fmt.Sprintf("id -G %q (%v), want exactly \"0 %d\" (Strict)", got, err, usernsGroup))
	}
	if got, err := exec("cat", "/etc/userns-ok"); err != nil || got != "written" {
		bad = append(bad, fmt.Sprintf("/etc/userns-ok %q (%v): the container's root could not write its image's /etc", got, err))
	}
	ctx, cancel := callCtx()
	st, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.Id})
	cancel()
	if err != nil {
		bad = append(bad, "ContainerStatus: "+err.Error())
	} else if u := st.GetStatus().GetUser().GetLinux(); u == nil || u.GetUid() != 0 || u.GetGid() != 0 ||
		fmt.Sprint(u.GetSupplementalGroups()) != fmt.Sprint([]int64{0, usernsGroup}) {
		bad = append(bad, fmt.Sprintf("ContainerStatus user %v, want uid 0 gid 0 groups [0 %d]", u, usernsGroup))
	}
	if len(bad) > 0 {
		return fail(errors.New(strings.Join(bad, "; ")))
	}
	return pass(fmt.Sprintf("%s runs as root in its own user namespace (uid_map %s), groups exactly 0 and %d, its image's /etc writable", usernsPodName, strings.Join(f, " "), usernsGroup))
}

// usernsContainer is the running container of the user namespace pod.
func (e *env) usernsContainer(c *cri) (*runtimeapi.Container, error) {
	sbs, err := c.podSandboxes(e.namespace)
	if err != nil {
		return nil, err
	}
	for _, sb := range sbs {
		if sb.GetMetadata().GetName() != usernsPodName+"-"+e.node || sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		cs, err := c.containers(sb.Id)
		if err != nil {
			return nil, err
		}
		for _, ctr := range cs {
			if ctr.GetMetadata().GetName() == usernsName && ctr.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return ctr, nil
			}
		}
	}
	return nil, errors.New("no running container yet")
}
