//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	pauseImage = harness.DefaultPauseImage

	// conflistFile is the name of the env's network config in its conf dir.
	conflistFile = "10-nse2e.conflist"

	// maxSlots bounds the search for a free test network slot.
	maxSlots = 250

	// The suite's names for the harness's deadlines: every wait is bounded,
	// nothing sleeps for a fixed time.
	startDeadline   = harness.StartTimeout
	stopDeadline    = harness.StopTimeout
	commandDeadline = harness.CommandDeadline
	rpcDeadline     = harness.RPCTimeout

	// pingDeadline bounds the wait for a pod's address to answer a ping:
	// one just set up may not at once (ARP, an IPv6 address still
	// tentative), the less so on a loaded machine.
	pingDeadline = 10 * time.Second
)

// The suite's names for the harness's helpers.
var (
	runCmd  = harness.RunCmd
	mustRun = harness.MustRun
	poll    = harness.Eventually
)

// config is what the suite needs from its environment.
type config struct {
	netshim   string // NETSHIM_BIN: the daemon under test
	crictl    string // CRICTL_BIN: cri-tools' crictl
	cniBinDir string // CNI_BIN_DIR: bridge, host-local, portmap, loopback
}

// requireConfig skips the test when NETSHIM_BIN is unset (a plain `go test`
// run). Once NETSHIM_BIN is set the run is meant to be an e2e run, so a
// missing piece of the environment fails the test instead of skipping it.
func requireConfig(t *testing.T) config {
	t.Helper()
	c := config{
		netshim:   os.Getenv("NETSHIM_BIN"),
		crictl:    os.Getenv("CRICTL_BIN"),
		cniBinDir: os.Getenv("CNI_BIN_DIR"),
	}
	if c.netshim == "" {
		t.Skip("NETSHIM_BIN is not set: the e2e tests need a built netshim, root and a running dockerd (run `make e2e` as root)")
	}
	if c.crictl == "" {
		t.Fatalf("NETSHIM_BIN is set but CRICTL_BIN is not: point it at cri-tools' crictl (make crictl builds _output/crictl)")
	}
	if c.cniBinDir == "" {
		t.Fatalf("NETSHIM_BIN is set but CNI_BIN_DIR is not: point it at the CNI plugin binaries (e.g. /usr/lib/cni)")
	}
	for _, f := range []string{c.netshim, c.crictl, filepath.Join(c.cniBinDir, "bridge"), filepath.Join(c.cniBinDir, "host-local"),
		filepath.Join(c.cniBinDir, "portmap"), filepath.Join(c.cniBinDir, "loopback")} {
		if st, err := os.Stat(f); err != nil || st.Mode()&0o111 == 0 {
			t.Fatalf("e2e: %s is missing or not executable (err=%v)", f, err)
		}
	}
	for _, tool := range []string{"docker", "ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("e2e: %s is not in PATH: %v", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatalf("e2e: must run as root (it creates bridges, veths and iptables rules)")
	}
	if out, err := runCmd("docker", "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Fatalf("e2e: no Docker engine answers (start one with hack/dockerd.sh start): %v\n%s", err, out)
	}
	if out, err := runCmd("docker", "image", "inspect", "--format", "{{.Id}}", pauseImage); err != nil {
		t.Fatalf("e2e: image %s is missing (hack/images.sh builds it): %v\n%s", pauseImage, err, out)
	}
	return c
}

// env is one test's world: a network slot (bridge, subnet, host ports), a
// temp directory with the CNI config, netshim's root dir, libcni's cache
// and host-local's store, and the netshim daemon (a harness.Netshim)
// serving on a socket in it.
type env struct {
	t   *testing.T
	cfg config

	slot      int
	bridge    string // also the CNI network name
	subnet    *net.IPNet
	namespace string // pod namespace of every pod this test makes

	dir      string
	confDir  string
	rootDir  string
	cacheDir string
	ipamDir  string
	logPath  string
	sock     string
	crictlCf string

	dockerEndpoint string
	extraFlags     []string

	ns     *harness.Netshim
	conn   *grpc.ClientConn
	client runtimeapi.RuntimeServiceClient
}

// envOptions change the network config a test gets.
type envOptions struct {
	// extraPlugins are appended to the chain after bridge and before
	// portmap.
	extraPlugins []map[string]any
	// dockerEndpoint, when set, points netshim at another engine than
	// the host's (a private dockerd the test may stop and restart).
	dockerEndpoint string
	// extraFlags are appended to netshim's command line (e.g.
	// --network-plugin=kubenet).
	extraFlags []string
}

// newEnv reserves a network slot, writes the CNI config and registers the
// cleanup. It does not start netshim: call start.
func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	cfg := requireConfig(t)
	// os.MkdirTemp rather than t.TempDir: the socket path must stay well
	// under the 108 bytes a unix socket address may hold. The "nse2e"
	// prefix is what leak-audit.sh --e2e-tmp looks for.
	dir, err := os.MkdirTemp("", "nse2e")
	if err != nil {
		t.Fatalf("creating temp dir: %v", err)
	}
	// Searchable by others, as /run/netshim is: a pod with hostUsers:
	// false reaches its image under the netns dir in it.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	e := &env{
		t:        t,
		cfg:      cfg,
		dir:      dir,
		confDir:  filepath.Join(dir, "net.d"),
		rootDir:  filepath.Join(dir, "root"),
		cacheDir: filepath.Join(dir, "cnicache"),
		ipamDir:  filepath.Join(dir, "ipam"),
		logPath:  filepath.Join(dir, "netshim.log"),
		sock:     filepath.Join(dir, "netshim.sock"),
		crictlCf: filepath.Join(dir, "crictl.yaml"),

		dockerEndpoint: opts.dockerEndpoint,
		extraFlags:     opts.extraFlags,
	}
	t.Cleanup(e.cleanup)
	e.reserveSlot()
	e.namespace = fmt.Sprintf("nse2e-%d", e.slot)
	// The slot was free, so no other run uses this namespace: whatever
	// carries it is left over from a crashed run.
	e.removeLeftoverContainers()

	for _, d := range []string{e.confDir, e.rootDir, e.cacheDir, e.ipamDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("creating %s: %v", d, err)
		}
	}
	e.writeConflist(opts.extraPlugins)
	crictlYAML := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", e.sock, e.sock)
	if err := os.WriteFile(e.crictlCf, []byte(crictlYAML), 0o644); err != nil {
		t.Fatalf("writing %s: %v", e.crictlCf, err)
	}
	return e
}

// reserveSlot claims a test network by creating its bridge: `ip link add`
// fails if the name exists, so two runs on one machine (or a bridge left
// by a crashed run) never share a slot. The bridge plugin adopts the
// existing bridge.
func (e *env) reserveSlot() {
	e.t.Helper()
	for n := 1; n <= maxSlots; n++ {
		name := fmt.Sprintf("nse2e%d", n)
		out, err := runCmd("ip", "link", "add", "name", name, "type", "bridge")
		if err != nil {
			if strings.Contains(out, "File exists") {
				continue
			}
			e.t.Fatalf("ip link add name %s type bridge: %v\n%s", name, err, out)
		}
		e.slot = n
		e.bridge = name
		_, e.subnet, _ = net.ParseCIDR(fmt.Sprintf("10.123.%d.0/24", n))
		return
	}
	e.t.Fatalf("no free test bridge among nse2e1..nse2e%d: delete leftovers with `ip link del nse2eN`", maxSlots)
}

// hostPort is a host port owned by this slot.
func (e *env) hostPort(k int) int32 { return int32(18000 + e.slot*10 + k) }

func (e *env) ipamStoreDir() string { return filepath.Join(e.ipamDir, e.bridge) }

// conflistOptions describe this env's CNI config: bridge + host-local
// (store in the temp dir) [+ extra] + portmap.
func (e *env) conflistOptions(extra []map[string]any) []harness.ConflistOption {
	return []harness.ConflistOption{
		harness.WithBridge(e.bridge),
		harness.WithSubnets(e.subnet.String()),
		harness.WithIPAMDataDir(e.ipamDir),
		harness.WithPlugins(extra...),
		harness.WithFileName(conflistFile),
	}
}

// conflist is the JSON of this env's CNI config.
func (e *env) conflist(extra []map[string]any) []byte {
	e.t.Helper()
	data, err := harness.Conflist(e.conflistOptions(extra)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

func (e *env) writeConflist(extra []map[string]any) {
	e.t.Helper()
	harness.WriteConflist(e.t, e.confDir, e.conflistOptions(extra)...)
}

// start starts netshim (again, after a stop) and waits until it answers a
// CRI Version RPC. The first start registers netshim's cleanup, which
// removes this env's pods through it and stops it before the env's own
// cleanup runs.
func (e *env) start() {
	e.t.Helper()
	if e.ns == nil {
		opts := []harness.NetshimOption{
			harness.WithBinary(e.cfg.netshim),
			harness.WithDir(e.dir),
			harness.WithCNIBinDir(e.cfg.cniBinDir),
			harness.WithPauseImage(pauseImage),
			harness.WithCleanupNamespace(e.namespace),
			harness.WithArgs(e.extraFlags...),
		}
		if e.dockerEndpoint != "" {
			opts = append(opts, harness.WithDockerEndpoint(e.dockerEndpoint))
		}
		e.ns = harness.StartNetshim(e.t, opts...)
	} else {
		e.ns.MustStart(e.t)
	}
	cri := e.ns.CRI()
	e.conn, e.client = cri.Conn, cri.Runtime
	e.t.Logf("slot %d, bridge %s, subnet %s", e.slot, e.bridge, e.subnet)
}

// mustStop sends sig to netshim and waits for it to exit. After SIGTERM it
// must exit 0 and have removed its socket.
func (e *env) mustStop(sig syscall.Signal) {
	e.t.Helper()
	e.conn, e.client = nil, nil
	if e.ns != nil {
		e.ns.MustStop(e.t, sig)
	}
}

// logTail returns the last n lines of netshim's log.
func (e *env) logTail(n int) string {
	if e.ns == nil {
		return "(netshim was not started)"
	}
	return e.ns.LogTail(n)
}

// cleanup removes what the test made besides netshim and its pods (the
// harness's cleanup, which runs first): leftover containers, the bridge
// and the temp dir.
func (e *env) cleanup() {
	t := e.t
	if e.namespace != "" {
		e.removeLeftoverContainers()
	}
	if e.bridge != "" {
		if out, err := runCmd("ip", "link", "del", e.bridge); err != nil {
			t.Logf("cleanup: ip link del %s: %v\n%s", e.bridge, err, out)
		}
	}
	if err := os.RemoveAll(e.dir); err != nil {
		t.Logf("cleanup: removing %s: %v", e.dir, err)
	}
}

// removeLeftoverContainers force-removes the pause containers of this
// env's pods and the floor containers of the measurement.
func (e *env) removeLeftoverContainers() {
	for _, filter := range []string{"label=netshim.io/pod-namespace=" + e.namespace, "label=nse2e.floor=" + e.namespace} {
		out, err := runCmd("docker", "ps", "-aq", "--no-trunc", "--filter", filter)
		if err != nil {
			e.t.Logf("cleanup: docker ps --filter %s: %v\n%s", filter, err, out)
			continue
		}
		ids := strings.Fields(out)
		if len(ids) == 0 {
			continue
		}
		if out, err := runCmd("docker", append([]string{"rm", "-f"}, ids...)...); err != nil {
			e.t.Logf("cleanup: docker rm -f: %v\n%s", err, out)
		}
	}
}

// listPodIDs lists, through the CRI, the sandboxes of this env's
// namespace (netshim lists every sandbox of the Docker engine).
func (e *env) listPodIDs() []string {
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	defer cancel()
	resp, err := e.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		e.t.Logf("ListPodSandbox: %v", err)
		return nil
	}
	var ids []string
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() == e.namespace {
			ids = append(ids, p.Id)
		}
	}
	return ids
}

// ---- pods through the Go client ----

// podConfig is a minimal sandbox config for a pod of this env, changed by
// opts: in the env's namespace, with a log directory of its own in the
// env's dir and the label leak-audit.sh looks for, and the namespace
// options kubelet gives a pod that does not share its PID namespace (in
// the pauseless mode, such a pod has no pause container).
func (e *env) podConfig(name string, opts ...harness.PodOption) *runtimeapi.PodSandboxConfig {
	return harness.Pod(name, append([]harness.PodOption{
		kubeletPod,
		harness.InNamespace(e.namespace),
		harness.WithLogDirectory(filepath.Join(e.dir, "logs", name)),
		harness.WithPodLabels(map[string]string{"nse2e": e.namespace}),
	}, opts...)...)
}

func (e *env) rpcCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rpcDeadline)
}

func (e *env) mustStatus(id string) *runtimeapi.PodSandboxStatus {
	e.t.Helper()
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		e.t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return resp.Status
}

// ---- crictl ----

// crictl runs crictl against this env's netshim and returns stdout and
// stderr.
func (e *env) crictl(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	full := append([]string{"--config", e.crictlCf, "-r", "unix://" + e.sock, "-i", "unix://" + e.sock, "--timeout", "60s"}, args...)
	cmd := exec.CommandContext(ctx, e.cfg.crictl, full...)
	var so, se strings.Builder
	cmd.Stdout = &so
	cmd.Stderr = &se
	err = cmd.Run()
	return so.String(), se.String(), err
}

func (e *env) mustCrictl(args ...string) string {
	e.t.Helper()
	so, se, err := e.crictl(args...)
	if err != nil {
		e.t.Fatalf("crictl %s: %v\nstdout:\n%s\nstderr:\n%s\n%s", strings.Join(args, " "), err, so, se, e.logTail(30))
	}
	return so
}

// writePodJSON writes a crictl pod config file of e.podConfig(name,
// opts...) and returns its path. crictl decodes the file into the CRI's
// Go type by its JSON field names, so encoding that type writes what it
// reads.
func (e *env) writePodJSON(name string, opts ...harness.PodOption) string {
	e.t.Helper()
	data, err := json.MarshalIndent(e.podConfig(name, opts...), "", "  ")
	if err != nil {
		e.t.Fatalf("encoding pod config: %v", err)
	}
	path := filepath.Join(e.dir, name+"-pod.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		e.t.Fatalf("writing %s: %v", path, err)
	}
	return path
}

// runp runs `crictl runp` and returns the sandbox ID it prints.
func (e *env) runp(podJSON string) string {
	e.t.Helper()
	out := strings.TrimSpace(e.mustCrictl("runp", podJSON))
	if len(out) != 64 || strings.ContainsAny(out, " \n") {
		e.t.Fatalf("crictl runp %s printed %q, want a 64-character sandbox ID", podJSON, out)
	}
	return out
}

// inspectpStatus is the part of `crictl inspectp -o json` the tests read.
type inspectpStatus struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Network *struct {
		IP string `json:"ip"`
	} `json:"network"`
}

func (e *env) inspectp(id string) inspectpStatus {
	e.t.Helper()
	out := e.mustCrictl("inspectp", "-o", "json", id)
	var v struct {
		Status inspectpStatus `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("parsing crictl inspectp output: %v\n%s", err, out)
	}
	return v.Status
}

// crictlPod is one item of `crictl pods -o json`.
type crictlPod struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// crictlPods returns `crictl pods -o json` restricted to this env's
// namespace, by ID.
func (e *env) crictlPods() map[string]crictlPod {
	e.t.Helper()
	out := e.mustCrictl("pods", "-o", "json", "--namespace", e.namespace)
	var v struct {
		Items []crictlPod `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("parsing crictl pods output: %v\n%s", err, out)
	}
	pods := map[string]crictlPod{}
	for _, p := range v.Items {
		if p.Metadata.Namespace == e.namespace {
			pods[p.ID] = p
		}
	}
	return pods
}

// ---- what the host shows ----

// ipamStore reads host-local's store of this env's network: IP → the
// container ID that holds it.
func (e *env) ipamStore() map[string]string {
	e.t.Helper()
	entries, err := os.ReadDir(e.ipamStoreDir())
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}
	}
	if err != nil {
		e.t.Fatalf("reading host-local store: %v", err)
	}
	store := map[string]string{}
	for _, ent := range entries {
		if net.ParseIP(ent.Name()) == nil {
			continue // lock, last_reserved_ip.0
		}
		data, err := os.ReadFile(filepath.Join(e.ipamStoreDir(), ent.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // released between the listing and the read: not held
		}
		if err != nil {
			e.t.Fatalf("reading host-local store: %v", err)
		}
		// host-local writes "<containerID>\r\n<ifname>" (older: the ID alone).
		first, _, _ := strings.Cut(string(data), "\n")
		store[ent.Name()] = strings.TrimSpace(first)
	}
	return store
}

// requireIPReleased polls until host-local's store no longer holds ip.
// Teardown is synchronous in the daemon, so the first look should do; the
// poll only guards against reading a file being removed.
func (e *env) requireIPReleased(ip, sandboxID string) {
	e.t.Helper()
	var holder string
	if !poll(2*time.Second, func() bool {
		var held bool
		holder, held = e.ipamStore()[ip]
		return !held
	}) {
		e.t.Fatalf("IP %s of sandbox %s is still held in host-local's store %s (by %q)", ip, sandboxID, e.ipamStoreDir(), holder)
	}
}

// checkpointFile is the on-disk checkpoint, parsed independently of
// pkg/checkpoint.
type checkpointFile struct {
	Checksum string `json:"checksum"`
	Data     struct {
		SandboxID    string `json:"sandboxID"`
		Name         string `json:"name"`
		Namespace    string `json:"namespace"`
		UID          string `json:"uid"`
		HostNetwork  bool   `json:"hostNetwork"`
		PortMappings []struct {
			Protocol      string `json:"protocol"`
			ContainerPort int32  `json:"containerPort"`
			HostPort      int32  `json:"hostPort"`
		} `json:"portMappings"`
		IPs       []string `json:"ips"`
		NetNS     string   `json:"netns"`
		UserNS    string   `json:"userns"`
		Pauseless *struct {
			IPC     string `json:"ipc"`
			UTS     string `json:"uts"`
			Shm     string `json:"shm"`
			Stopped bool   `json:"stopped"`
		} `json:"pauseless"`
	} `json:"data"`
}

func (e *env) checkpointPath(id string) string {
	return filepath.Join(e.rootDir, "sandbox", id+".json")
}

func (e *env) readCheckpoint(id string) checkpointFile {
	e.t.Helper()
	data, err := os.ReadFile(e.checkpointPath(id))
	if err != nil {
		e.t.Fatalf("reading checkpoint of sandbox %s: %v", id, err)
	}
	var cp checkpointFile
	if err := json.Unmarshal(data, &cp); err != nil {
		e.t.Fatalf("parsing checkpoint %s: %v\n%s", e.checkpointPath(id), err, data)
	}
	return cp
}

// checkpointFiles lists the files in netshim's checkpoint directory.
func (e *env) checkpointFiles() []string {
	e.t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.rootDir, "sandbox"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("reading checkpoint dir: %v", err)
	}
	var names []string
	for _, ent := range entries {
		names = append(names, ent.Name())
	}
	return names
}

func (e *env) requireNoCheckpoint(id string) {
	e.t.Helper()
	if _, err := os.Stat(e.checkpointPath(id)); !errors.Is(err, os.ErrNotExist) {
		e.t.Fatalf("checkpoint %s of sandbox %s still exists (stat: %v)", e.checkpointPath(id), id, err)
	}
}

// dockerIDs lists all containers (running or not) matching the docker ps
// filters.
func dockerIDs(t *testing.T, filters ...string) []string {
	t.Helper()
	args := []string{"ps", "-aq", "--no-trunc"}
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	return strings.Fields(mustRun(t, "docker", args...))
}

// pauseContainers lists netshim's pause containers of this env's
// namespace.
func (e *env) pauseContainers() []string {
	e.t.Helper()
	return dockerIDs(e.t, "label=netshim.io/type=podsandbox", "label=netshim.io/pod-namespace="+e.namespace)
}

// vethsOnBridge lists the interfaces attached to the test bridge.
func (e *env) vethsOnBridge() []string {
	e.t.Helper()
	out := mustRun(e.t, "ip", "-o", "link", "show", "master", e.bridge)
	var names []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		// "12: veth1234abcd@if3: <BROADCAST,...> ..."
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			names = append(names, name)
		}
	}
	return names
}

// natRules returns `iptables -t nat -S`, one rule per element.
func natRules(t *testing.T) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(mustRun(t, "iptables", "-w", "-t", "nat", "-S")), "\n")
}

// grepRules returns the rules that contain every one of subs.
func grepRules(rules []string, subs ...string) []string {
	var out []string
	for _, r := range rules {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(r, s) }) {
			out = append(out, r)
		}
	}
	return out
}

// rulesForPort returns the nat rules that match a destination port.
func rulesForPort(rules []string, port int32) []string {
	var out []string
	p := fmt.Sprint(port)
	for _, r := range rules {
		f := strings.Fields(r)
		for i := 0; i+1 < len(f); i++ {
			if (f[i] == "--dport" || f[i] == "--dports") && slices.Contains(strings.Split(f[i+1], ","), p) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// ping pings ip from the host until it answers (pingPoll) and fails the
// test if it has not within pingDeadline. iputils' ping is used if
// installed, else busybox's (the busybox-static package that make deps
// installs has it).
func ping(t *testing.T, ip string) {
	t.Helper()
	_, err := exec.LookPath("ping")
	if _, berr := exec.LookPath("busybox"); err != nil && berr != nil {
		t.Fatalf("neither ping (iputils-ping) nor busybox is installed: cannot ping %s", ip)
	}
	if out, ok := pingPoll(ip, pingDeadline); !ok {
		t.Fatalf("%s does not answer a ping from the host within %s:\n%s", ip, pingDeadline, out)
	}
}

// requireInSubnet fails unless ip parses and lies in the env's subnet.
func (e *env) requireInSubnet(what, ip string) {
	e.t.Helper()
	parsed := net.ParseIP(ip)
	if parsed == nil || !e.subnet.Contains(parsed) {
		e.t.Fatalf("%s: IP %q is not in the test subnet %s", what, ip, e.subnet)
	}
}

// parallel runs f(i) for i in [0,n) in goroutines and waits.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// runPodsParallel runs n pods named <prefix>-NN at once through the CRI
// and returns their sandbox IDs in order; any failure fails the test.
func (e *env) runPodsParallel(prefix string, n int) []string {
	e.t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		resp, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig(fmt.Sprintf("%s-%02d", prefix, i))})
		if err != nil {
			errs[i] = err
			return
		}
		ids[i] = resp.PodSandboxId
	})
	for i, err := range errs {
		if err != nil {
			e.t.Errorf("RunPodSandbox %s-%02d: %v", prefix, i, err)
		}
	}
	if e.t.Failed() {
		e.t.FailNow()
	}
	return ids
}
