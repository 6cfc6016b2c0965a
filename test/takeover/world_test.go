//go:build takeover

package takeover

import (
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
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// The world's fixed names and addresses: a run holds the Docker lock
// (make e2e-takeover runs alone), so no other run owns them.
const (
	bridgeName  = "nstko0"
	networkName = "nstko"
	subnetCIDR  = "10.181.0.0/24"
	gatewayIP   = "10.181.0.1"
	namespace   = "netshim-takeover"
	nodeName    = "netshim-takeover-node"
	// hostPortNumber is the web pod's hostPort; the kubelet ports are not
	// kubelet's defaults, so that a kubelet left running elsewhere on the
	// host shows up as a preflight failure, not as a confusing answer.
	hostPortNumber     = 17893
	kubeletPort        = 10270
	kubeletHealthzPort = 10268
	webPort            = 8080
	token              = "netshim-takeover-ok"

	// The static pods (their names in kubelet and the CRI get "-<node>").
	webPod      = "web"
	loggerPod   = "logger"
	webCtr      = "web"
	loggerCtr   = "logger"
	rpcTimeout  = 10 * time.Second
	pollEvery   = 500 * time.Millisecond
	runDeadline = 120 * time.Second
)

// config is what make e2e-takeover passes in the environment.
type config struct {
	kubeletBin, criDockerdBin, oomclampBin, netshimBin string
	cniBinDir, pauseImage, busyboxImage                string
	artifacts, statePath, leakAudit                    string
	netshimV                                           int
	// onlyCRIDockerd runs the world on cri-dockerd alone: the pods run,
	// are checked and are torn down through cri-dockerd, and the audit
	// runs. It proves the world without netshim's adoption.
	onlyCRIDockerd bool
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// loadConfig reads the environment; without KUBELET_BIN the test skips.
func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{
		kubeletBin:     os.Getenv("KUBELET_BIN"),
		criDockerdBin:  os.Getenv("CRI_DOCKERD_BIN"),
		oomclampBin:    os.Getenv("OOMCLAMP_BIN"),
		netshimBin:     os.Getenv("NETSHIM_BIN"),
		cniBinDir:      getenv("CNI_BIN_DIR", "/usr/lib/cni"),
		pauseImage:     getenv("PAUSE_IMAGE", harness.DefaultPauseImage),
		busyboxImage:   getenv("BUSYBOX_IMAGE", "netshim.local/busybox:latest"),
		artifacts:      os.Getenv("E2E_TAKEOVER_ARTIFACTS"),
		statePath:      os.Getenv("E2E_TAKEOVER_STATE"),
		leakAudit:      os.Getenv("LEAK_AUDIT"),
		onlyCRIDockerd: os.Getenv("E2E_TAKEOVER_ONLY_CRI_DOCKERD") == "1",
	}
	if c.kubeletBin == "" {
		t.Skip("no world: run `make e2e-takeover` as root; it sets KUBELET_BIN, CRI_DOCKERD_BIN, OOMCLAMP_BIN and NETSHIM_BIN")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the take-over test must run as root")
	}
	var err error
	if c.netshimV, err = strconv.Atoi(getenv("NETSHIM_V", "5")); err != nil {
		t.Fatalf("NETSHIM_V: %v", err)
	}
	required := map[string]string{"CRI_DOCKERD_BIN": c.criDockerdBin, "OOMCLAMP_BIN": c.oomclampBin}
	if !c.onlyCRIDockerd {
		required["NETSHIM_BIN"] = c.netshimBin
	}
	for k, v := range required {
		if v == "" {
			t.Fatalf("%s is not set (make e2e-takeover sets it)", k)
		}
		if fi, err := os.Stat(v); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s=%s is not an executable: %v", k, v, err)
		}
	}
	return c
}

// world is the node under test: a private dockerd whose default runtime
// is the oomclamp wrapper, a CNI bridge network, cri-dockerd, then netshim,
// and kubelet on one and then the other, with one static pod dir, root
// dir, pod logs dir, CNI cache and host-local store throughout.
type world struct {
	t   *testing.T
	cfg config

	tmp                               string
	confDir, cacheDir, ipamDir        string
	staticDir, kubeletDir, podLogsDir string
	criDockerdRoot                    string
	guard                             *harness.HostGuard
	dockerd                           *harness.Dockerd
	crid                              *harness.CRIDockerd
	netshim                           *harness.Netshim
	kubelet                           *harness.Kubelet // the one started last
	kubeletURL                        string
}

// newWorld builds everything up to a running cri-dockerd; each piece
// registers its own undoing, in an order that stops kubelet before pods
// are removed through a runtime, and the runtime before the engine.
func newWorld(t *testing.T, cfg config) *world {
	t.Helper()
	w := &world{t: t, cfg: cfg, kubeletURL: fmt.Sprintf("https://127.0.0.1:%d", kubeletPort)}
	if cfg.artifacts != "" {
		if err := os.MkdirAll(cfg.artifacts, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// The guard restores the host last (its cleanup is the first one
	// registered) and cleans up what a killed run left (the state file).
	w.guard = harness.GuardHost(t, cfg.statePath)
	w.removeLeftovers()
	w.preflight()
	tmp, err := os.MkdirTemp("", "nstko.")
	if err != nil {
		t.Fatal(err)
	}
	w.tmp = tmp
	must(t, errors.Join(
		w.guard.RecordTempDir(tmp),
		w.guard.WatchLink(bridgeName),
		w.guard.WatchCNIRules(networkName, subnetCIDR),
		w.guard.RemoveAtRestore(filepath.Join(harness.KubeletContainerLogsDir, "*_"+namespace+"_*.log")),
	))
	w.confDir = filepath.Join(tmp, "net.d")
	w.cacheDir = filepath.Join(tmp, "cnicache")
	w.ipamDir = filepath.Join(tmp, "ipam")
	w.staticDir = filepath.Join(tmp, "manifests")
	w.kubeletDir = filepath.Join(tmp, "kubelet")
	w.podLogsDir = filepath.Join(tmp, "pods")
	w.criDockerdRoot = filepath.Join(tmp, "cri-dockerd")
	for _, d := range []string{w.confDir, w.cacheDir, w.ipamDir, w.staticDir} {
		must(t, os.MkdirAll(d, 0o755))
	}
	// The artifacts are copied before the guard removes the temp dir.
	t.Cleanup(w.keepArtifacts)

	w.startDockerd()
	// The network cri-dockerd sets pods up with, and netshim later tears
	// them down with: bridge, host-local, portmap for the hostPort, and
	// firewall, without which Docker's FORWARD policy drops pod traffic
	// that crosses the bridge.
	harness.WriteConflist(t, w.confDir,
		harness.WithNetworkName(networkName),
		harness.WithBridge(bridgeName),
		harness.WithHairpin(false),
		harness.WithIPAM(map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": subnetCIDR, "gateway": gatewayIP}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": w.ipamDir,
		}),
		harness.WithFirewall(),
	)
	w.startCRIDockerd()
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// removeLeftovers removes what an earlier run left that no state file
// names: its bridge (fixed name, so this run's own).
func (w *world) removeLeftovers() {
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridgeName)); err == nil {
		w.t.Logf("removing bridge %s left by an earlier run", bridgeName)
		if out, err := harness.RunCmd("ip", "link", "del", bridgeName); err != nil {
			w.t.Fatalf("removing bridge %s: %v: %s", bridgeName, err, out)
		}
	}
}

// preflight refuses to run where the world would collide with the host:
// the hostPort or kubelet's ports taken, or a route to the test's subnet.
func (w *world) preflight() {
	for _, p := range []int{hostPortNumber, kubeletPort, kubeletHealthzPort} {
		l, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(p)))
		if err != nil {
			w.t.Fatalf("port %d, which the test needs, is in use: %v", p, err)
		}
		l.Close()
	}
	for _, sel := range []string{"match", "root"} {
		out, err := harness.RunCmd("ip", "-4", "route", "show", sel, subnetCIDR)
		if err != nil {
			w.t.Fatalf("ip route show %s %s: %v: %s", sel, subnetCIDR, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line != "" && !strings.HasPrefix(line, "default") {
				w.t.Fatalf("%s, which the test needs, overlaps a route here: %s", subnetCIDR, line)
			}
		}
	}
}

// startDockerd starts the private engine with the oomclamp wrapper as its
// default runtime: cri-dockerd asks oom_score_adj -998 for sandboxes,
// which runc cannot set here (no CAP_SYS_RESOURCE).
func (w *world) startDockerd() {
	t := w.t
	w.dockerd = harness.NewDockerd(filepath.Join(w.tmp, "docker"),
		harness.WithImages(w.cfg.pauseImage, w.cfg.busyboxImage),
		harness.WithRuntime("oomclamp", w.cfg.oomclampBin),
		harness.WithDockerdArgs("--default-runtime", "oomclamp"))
	must(t, os.MkdirAll(w.dockerd.Dir, 0o755))
	t.Cleanup(func() {
		w.copyArtifact(w.dockerd.LogPath(), "dockerd.log")
		if err := w.dockerd.Remove(); err != nil {
			t.Errorf("removing the private dockerd: %v", err)
		}
	})
	if err := w.dockerd.Start(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(w.dockerd.Dir, "docker.pid"))
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(data))); pid > 1 {
		must(t, w.guard.RecordProcess("dockerd", pid, w.tmp))
	}
	must(t, w.dockerd.LoadImages())
	if rt := strings.TrimSpace(w.dockerd.MustDocker(t, "info", "--format", "{{.DefaultRuntime}}")); rt != "oomclamp" {
		t.Fatalf("the private dockerd's default runtime is %q, want oomclamp", rt)
	}
}

func (w *world) startCRIDockerd() {
	t := w.t
	w.crid = harness.StartCRIDockerd(t,
		harness.WithCRIDockerdBinary(w.cfg.criDockerdBin),
		harness.WithCRIDockerdDir(filepath.Join(w.tmp, "crid")),
		harness.WithCRIDockerdRootDir(w.criDockerdRoot),
		harness.WithCRIDockerdDockerEndpoint(w.dockerd.Endpoint()),
		harness.WithCRIDockerdCNIConfDir(w.confDir),
		harness.WithCRIDockerdCNIBinDir(w.cfg.cniBinDir),
		harness.WithCRIDockerdCNICacheDir(w.cacheDir),
		harness.WithCRIDockerdPauseImage(w.cfg.pauseImage),
		harness.WithCRIDockerdLogLevel("debug"),
	)
	must(t, w.guard.RecordProcess("cri-dockerd", w.crid.Pid(), w.tmp))
	// Runs before StartCRIDockerd's own cleanup stops it: pods still on
	// cri-dockerd (a run that ended before the take-over) are torn down
	// through it, so that their network goes with them.
	t.Cleanup(func() {
		if c := w.crid.CRI(); c != nil {
			if n, err := removeSandboxes(c, namespace); err != nil {
				t.Errorf("cleanup: removing the pods through cri-dockerd: %v", err)
			} else if n > 0 {
				t.Logf("cleanup: removed %d pod(s) through cri-dockerd", n)
			}
		}
		w.copyArtifact(w.crid.LogPath, "cri-dockerd.log")
	})
}

// startNetshim starts netshim on the node cri-dockerd left: same engine,
// same CNI config, bin and cache dirs, same pause image, adopting
// cri-dockerd's containers and checkpoints.
func (w *world) startNetshim() {
	t := w.t
	w.netshim = harness.StartNetshim(t,
		harness.WithBinary(w.cfg.netshimBin),
		harness.WithDir(filepath.Join(w.tmp, "netshim")),
		harness.WithDockerEndpoint(w.dockerd.Endpoint()),
		harness.WithCNIConfDir(w.confDir),
		harness.WithCNIBinDir(w.cfg.cniBinDir),
		harness.WithCNICacheDir(w.cacheDir),
		harness.WithPauseImage(w.cfg.pauseImage),
		harness.WithVerbosity(w.cfg.netshimV),
		harness.WithOwnProcessGroup(),
		harness.WithCleanupNamespace(namespace),
		harness.WithArgs("--network-plugin=cni", "--adopt-cri-dockerd", "--cri-dockerd-root-dir="+w.criDockerdRoot),
	)
	must(t, w.guard.RecordProcess("netshim", w.netshim.Pid(), w.tmp))
	t.Cleanup(func() { w.copyArtifact(w.netshim.LogPath, "netshim.log") })
}

// startKubelet starts kubelet on the runtime at sock; runtime names its
// log. The second kubelet reuses the first's root dir, static pods and
// pod logs: the node's kubelet, restarted with another
// --container-runtime-endpoint.
func (w *world) startKubelet(sock, runtime string) {
	t := w.t
	logPath := filepath.Join(w.tmp, "kubelet-"+runtime+".log")
	opts := []harness.KubeletOption{
		harness.WithKubeletBinary(w.cfg.kubeletBin),
		harness.WithRuntimeEndpoint(sock),
		harness.WithKubeletDir(w.kubeletDir),
		harness.WithStaticPodPath(w.staticDir),
		harness.WithNodeName(nodeName),
		harness.WithPodLogsDir(w.podLogsDir),
		harness.WithKubeletPorts(kubeletPort, kubeletHealthzPort),
		harness.WithHostGuard(w.guard),
		harness.WithKubeletLog(logPath),
	}
	if w.kubelet != nil {
		// The pod logs dir holds the pods' entries now, which the
		// preflight would take for another kubelet's; the ports were
		// checked by the world's preflight and freed by Stop.
		opts = append(opts, harness.WithoutKubeletPreflight())
	}
	// Start records kubelet's pid in the guard itself.
	w.kubelet = harness.StartKubelet(t, opts...)
	t.Cleanup(func() { w.copyArtifact(logPath, "kubelet-"+runtime+".log") })
}

// tails is what a failure message carries: kubelet's errors and last
// lines, and the runtime's last lines.
func (w *world) tails() string {
	var b strings.Builder
	if w.kubelet != nil {
		b.WriteString(w.kubelet.LogTail(25))
		b.WriteString("\n")
	}
	if w.netshim != nil {
		fmt.Fprintf(&b, "---- netshim (%s) ----\n%s\n", w.netshim.LogPath, w.netshim.LogTail(25))
	} else if w.crid != nil {
		fmt.Fprintf(&b, "---- cri-dockerd (%s) ----\n%s\n", w.crid.LogPath, w.crid.LogTail(25))
	}
	return b.String()
}

func (w *world) copyArtifact(src, name string) {
	if w.cfg.artifacts == "" {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return
	}
	if err := os.WriteFile(filepath.Join(w.cfg.artifacts, name), data, 0o644); err != nil {
		w.t.Logf("keeping %s: %v", name, err)
	}
}

func (w *world) writeArtifact(name string, data []byte) {
	if w.cfg.artifacts == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(w.cfg.artifacts, name), data, 0o644); err != nil {
		w.t.Logf("keeping %s: %v", name, err)
	}
}

// keepArtifacts copies the manifests (the logs are copied by each piece's
// own cleanup).
func (w *world) keepArtifacts() {
	for _, p := range []string{webPod, loggerPod} {
		w.copyArtifact(filepath.Join(w.staticDir, p+".yaml"), "static-pod-"+p+".json")
	}
}

// ---------------------------------------------------------------- pods

// manifests are the two static pods, as JSON (which kubelet's YAML
// reader takes): web serves a token over HTTP on a containerPort with a
// hostPort; logger writes "line N" every 200 ms.
func manifests(image string) map[string][]byte {
	pod := func(name string, ctr map[string]any) []byte {
		data, _ := json.MarshalIndent(map[string]any{
			"apiVersion": "v1",
			"kind":       "Pod",
			"metadata":   map[string]any{"name": name, "namespace": namespace},
			"spec": map[string]any{
				"restartPolicy":                 "Always",
				"dnsPolicy":                     "Default",
				"terminationGracePeriodSeconds": 2,
				"containers":                    []any{ctr},
			},
		}, "", "  ")
		return data
	}
	web := "mkdir -p /tmp/www && echo " + token + " >/tmp/www/index.html && exec httpd -f -p " + strconv.Itoa(webPort) + " -h /tmp/www"
	logger := `trap 'exit 0' TERM; i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.2; done`
	return map[string][]byte{
		webPod: pod(webPod, map[string]any{
			"name": webCtr, "image": image, "imagePullPolicy": "Never",
			"command": []string{"sh", "-c", web},
			"ports":   []any{map[string]any{"containerPort": webPort, "hostPort": hostPortNumber, "protocol": "TCP"}},
		}),
		loggerPod: pod(loggerPod, map[string]any{
			"name": loggerCtr, "image": image, "imagePullPolicy": "Never",
			"command": []string{"sh", "-c", logger},
		}),
	}
}

// writeManifests writes the static pods atomically (kubelet ignores dot
// files, so it never reads a partial one).
func (w *world) writeManifests() {
	for name, data := range manifests(w.cfg.busyboxImage) {
		tmp := filepath.Join(w.staticDir, "."+name+".tmp")
		must(w.t, os.WriteFile(tmp, data, 0o644))
		must(w.t, os.Rename(tmp, filepath.Join(w.staticDir, name+".yaml")))
	}
}

func (w *world) removeManifests() {
	for _, name := range []string{webPod, loggerPod} {
		if err := os.Remove(filepath.Join(w.staticDir, name+".yaml")); err != nil {
			w.t.Errorf("removing the manifest of %s: %v", name, err)
		}
	}
}

// mirrorName is a static pod's name in kubelet and in the CRI metadata.
func mirrorName(pod string) string { return pod + "-" + nodeName }

// ---------------------------------------------------------------- CRI

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rpcTimeout)
}

// removeSandboxes stops and removes, through a runtime, every sandbox of
// the namespace, and says how many there were.
func removeSandboxes(c *harness.CRI, ns string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), harness.RPCTimeout)
	defer cancel()
	resp, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("ListPodSandbox: %w", err)
	}
	var errs []error
	n := 0
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() != ns {
			continue
		}
		n++
		if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("StopPodSandbox %s: %w", p.Id, err))
		}
		if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("RemovePodSandbox %s: %w", p.Id, err))
		}
	}
	return n, errors.Join(errs...)
}

// ---------------------------------------------------------------- kubelet API

var kubeletClient = &http.Client{
	Timeout: rpcTimeout,
	Transport: &http.Transport{
		Proxy: nil,
		// kubelet serves a self-signed certificate on 127.0.0.1.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	},
}

var plainClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func httpGet(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, body)
	}
	return string(body), nil
}

// kubeletContainer is kubelet's view of one container (its /pods).
type kubeletContainer struct {
	ContainerID  string `json:"containerID"`
	RestartCount int32  `json:"restartCount"`
	Ready        bool   `json:"ready"`
	State        struct {
		Running *struct {
			StartedAt string `json:"startedAt"`
		} `json:"running,omitempty"`
		Waiting *struct {
			Reason string `json:"reason"`
		} `json:"waiting,omitempty"`
		Terminated *struct {
			ExitCode int32  `json:"exitCode"`
			Reason   string `json:"reason"`
		} `json:"terminated,omitempty"`
	} `json:"state"`
}

func (c kubeletContainer) String() string {
	state := "unknown"
	switch {
	case c.State.Running != nil:
		state = "running since " + c.State.Running.StartedAt
	case c.State.Waiting != nil:
		state = "waiting: " + c.State.Waiting.Reason
	case c.State.Terminated != nil:
		state = fmt.Sprintf("terminated: exit %d %s", c.State.Terminated.ExitCode, c.State.Terminated.Reason)
	}
	return fmt.Sprintf("%s, %s, restarts %d", c.ContainerID, state, c.RestartCount)
}

// kubeletPods returns kubelet's /pods for the test's namespace: pod name
// -> container name -> status, and the raw answer.
func (w *world) kubeletPods() (map[string]map[string]kubeletContainer, []byte, error) {
	body, err := httpGet(kubeletClient, w.kubeletURL+"/pods")
	if err != nil {
		return nil, nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Status struct {
				ContainerStatuses []struct {
					Name string `json:"name"`
					kubeletContainer
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		return nil, []byte(body), fmt.Errorf("decoding kubelet's /pods: %w", err)
	}
	out := map[string]map[string]kubeletContainer{}
	for _, p := range list.Items {
		if p.Metadata.Namespace != namespace {
			continue
		}
		cs := map[string]kubeletContainer{}
		for _, c := range p.Status.ContainerStatuses {
			cs[c.Name] = c.kubeletContainer
		}
		out[p.Metadata.Name] = cs
	}
	return out, []byte(body), nil
}

// kubeletLog is kubectl logs through kubelet: its /containerLogs.
func (w *world) kubeletLog(pod, ctr string) (string, error) {
	return httpGet(kubeletClient, fmt.Sprintf("%s/containerLogs/%s/%s/%s", w.kubeletURL, namespace, mirrorName(pod), ctr))
}
