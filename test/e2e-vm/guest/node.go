package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The node's configuration, as an operator writes it.
const (
	kubeletConfigPath = "/etc/kubernetes/kubelet.yaml"
	kubeletUnitPath   = "/etc/systemd/system/kubelet.service"
	manifestDir       = "/etc/kubernetes/manifests"
	parkedManifestDir = "/etc/kubernetes/manifests.parked"
	cniConfPath       = "/etc/cni/net.d/10-vmnet.conflist"
	cniNetwork        = "vmnet"
	podGateway        = "10.222.0.1"
	pauseImage        = "registry.k8s.io/pause:3.10"
	busyboxImage      = "netshim.local/busybox:latest"
	nodeName          = "netshim-vm"
)

// installPackage installs netshim's .deb as an operator does.
func installPackage() error {
	debs, _ := filepath.Glob(filepath.Join(inDir, "netshim_*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("want one netshim .deb in %s, found %v", inDir, debs)
	}
	if _, err := run(5*time.Minute, "dpkg", "-i", debs[0]); err != nil {
		return err
	}
	for _, u := range []string{"netshim.socket", "netshim.service"} {
		out, _ := run(time.Minute, "systemctl", "is-enabled", u)
		if out != "enabled" {
			return fmt.Errorf("after dpkg -i, %s is %q, want enabled", u, out)
		}
	}
	// Enabled, not started (the package's postinst).
	if out, _ := run(time.Minute, "systemctl", "is-active", "netshim.service"); out != "inactive" {
		return fmt.Errorf("after dpkg -i, netshim.service is %q, want inactive", out)
	}
	return nil
}

// importImages imports the test images from the rootfs tars the host
// made (no registry on the node).
func importImages() error {
	imgs := []struct{ tar, ref, change string }{
		{"pause.tar", pauseImage, `ENTRYPOINT ["/pause"]`},
		{"busybox.tar", busyboxImage, `CMD ["sh"]`},
	}
	for _, im := range imgs {
		if _, err := run(10*time.Minute, "docker", "import", "--change", im.change, filepath.Join(inDir, im.tar), im.ref); err != nil {
			return err
		}
	}
	return nil
}

// writeCNIConfig: a bridge network on the node, Debian's plugins.
func writeCNIConfig() error {
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.222.0.0/24", "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
`, cniNetwork, podGateway)
	if err := os.MkdirAll(filepath.Dir(cniConfPath), 0o755); err != nil {
		return err
	}
	return os.WriteFile(cniConfPath, []byte(conf), 0o644)
}

// kubeletConfig is kubelet's configuration file: the defaults but for what
// a node without an API server needs (static pods, anonymous access to the
// node's own loopback for the checks). No cgroupDriver: kubelet 1.37 takes
// it from the runtime (RuntimeConfig); no failCgroupV1: the node is v2.
func kubeletConfig(gates map[string]bool) string {
	var b strings.Builder
	b.WriteString(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://` + criSocket + `
staticPodPath: ` + manifestDir + `
address: 127.0.0.1
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`)
	if len(gates) > 0 {
		b.WriteString("featureGates:\n")
		for k, v := range gates {
			fmt.Fprintf(&b, "  %s: %t\n", k, v)
		}
	}
	return b.String()
}

const kubeletUnit = `[Unit]
Description=kubelet: the Kubernetes node agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet --config=` + kubeletConfigPath + ` --hostname-override=` + nodeName + ` --v=2
Restart=always
RestartSec=5
StartLimitInterval=0

[Install]
WantedBy=multi-user.target
`

// installKubelet puts kubelet in place as a systemd service (the way
// kubeadm's packages do) and enables it, without starting it.
func installKubelet(gates map[string]bool) error {
	if _, err := run(time.Minute, "install", "-m", "0755", filepath.Join(inDir, "kubelet"), "/usr/bin/kubelet"); err != nil {
		return err
	}
	if err := os.MkdirAll(manifestDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(kubeletConfigPath, []byte(kubeletConfig(gates)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(kubeletUnitPath, []byte(kubeletUnit), 0o644); err != nil {
		return err
	}
	if _, err := run(time.Minute, "systemctl", "daemon-reload"); err != nil {
		return err
	}
	_, err := run(time.Minute, "systemctl", "enable", "kubelet.service")
	return err
}

// setKubeletGates rewrites kubelet's configuration and restarts it.
func setKubeletGates(gates map[string]bool) error {
	if err := os.WriteFile(kubeletConfigPath, []byte(kubeletConfig(gates)), 0o644); err != nil {
		return err
	}
	_, err := run(2*time.Minute, "systemctl", "restart", "kubelet.service")
	return err
}

// registerWrapper registers netshim's OCI wrapper with the package's own
// command (README, "Fast sandboxes"): it merges the wrapper into
// /etc/docker/daemon.json, sends the dockerd systemd runs SIGHUP and waits
// until docker info lists it; running containers stay. docker info is
// checked here too, and that the file kept what Debian's engine needs.
func registerWrapper() error {
	if out, err := run(2*time.Minute, "netshim", "engine", "register"); err != nil {
		return fmt.Errorf("netshim engine register: %w\n%s", err, out)
	}
	out, err := run(time.Minute, "docker", "info", "--format", "{{json .Runtimes}}")
	if err != nil {
		return err
	}
	if !strings.Contains(out, `"netshim-oci"`) || !strings.Contains(out, "--netshim-netns-dir=/run/netshim/netns") {
		return fmt.Errorf("docker info lists runtimes %s, without netshim-oci restricted to /run/netshim/netns", out)
	}
	return nil
}

// netshimMode is the sandbox mode netshim gives new pods now, from its
// CRI Status (crictl info's sandboxNetns).
func netshimMode() (string, error) {
	st, err := runtimeStatus()
	if err != nil {
		return "", err
	}
	var m struct{ Mode, Reason string }
	if err := json.Unmarshal([]byte(st.Info["sandboxNetns"]), &m); err != nil {
		return "", fmt.Errorf("CRI Status sandboxNetns %q: %w", st.Info["sandboxNetns"], err)
	}
	return m.Mode, nil
}

// setNetshimOpts writes NETSHIM_OPTS in /etc/default/netshim and restarts
// netshim (the package's documented way to change its flags).
func setNetshimOpts(opts string) error {
	const path = "/etc/default/netshim"
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(withNetshimOpts(string(b), opts)), 0o644); err != nil {
		return err
	}
	_, err = run(5*time.Minute, "systemctl", "restart", "netshim.service")
	return err
}

// withNetshimOpts is /etc/default/netshim with its NETSHIM_OPTS line set
// to opts; the comments stay.
func withNetshimOpts(conf, opts string) string {
	var lines []string
	set := false
	for _, l := range strings.Split(strings.TrimRight(conf, "\n"), "\n") {
		if strings.HasPrefix(l, "NETSHIM_OPTS=") {
			l, set = fmt.Sprintf("NETSHIM_OPTS=%q", opts), true
		}
		lines = append(lines, l)
	}
	if !set {
		lines = append(lines, fmt.Sprintf("NETSHIM_OPTS=%q", opts))
	}
	return strings.Join(lines, "\n") + "\n"
}

// The static pods. Each pings the pod network's gateway (traffic for the
// network figures) and writes into its writable layer (rootfs figures).
const podCommand = `ping -c 3 -W 2 ` + podGateway + `; dd if=/dev/zero of=/fill bs=1M count=8 2>/dev/null; echo ready; exec sleep 100000000`

var staticPods = map[string]string{
	// Burstable: requests below limits.
	"burstable.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: burstable
  namespace: default
spec:
  containers:
  - name: main
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: ["sh", "-c", "` + podCommand + `"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 500m, memory: 64Mi}
`,
	// Guaranteed: requests equal limits.
	"guaranteed.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: guaranteed
  namespace: default
spec:
  containers:
  - name: main
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: ["sh", "-c", "` + podCommand + `"]
    resources:
      requests: {cpu: 250m, memory: 48Mi}
      limits: {cpu: 250m, memory: 48Mi}
`,
	// A container that outgrows its memory limit: dd's 64 MiB buffer
	// against 16 MiB. Docker learns of the kill from containerd 1.6's
	// shim, which watches the container's memory.events with inotify and
	// so misses a kill that happens outside its watch (no "oom" event,
	// OOMKilled false, exit code 137): the shim adds the watch only after
	// runc start returns, and stops reading once the cgroup is gone. So dd
	// starts 3 s after the container does (a kill before the watch is the
	// likely cause of one cold make test whose check polled 12 minutes),
	// and the shell outlives dd for 2 s (once in 8 kills in the VM the
	// cgroup was gone before the shim read it). Docker's limitation, not
	// one netshim can see past.
	"oom.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: oom
  namespace: default
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: ["sh", "-c", "sleep 3; dd if=/dev/zero of=/dev/null bs=64M count=1; rc=$?; sleep 2; exit $rc"]
    resources:
      limits: {memory: 16Mi}
`,
}

// runningPods are the static pods that run (oom ends at once).
var runningPods = []string{"burstable", "guaranteed"}

func writeManifests(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, body := range staticPods {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// podName is a static pod's name on this node.
func podName(pod string) string { return pod + "-" + nodeName }
