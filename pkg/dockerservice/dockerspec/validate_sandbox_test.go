package dockerspec

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestValidateSandboxConfig(t *testing.T) {
	hostNet := func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	}
	hostIPC := func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}}
	}
	sysctl := func(k, v string) func(*runtimeapi.PodSandboxConfig) {
		return func(c *runtimeapi.PodSandboxConfig) { c.Linux.Sysctls = map[string]string{k: v} }
	}
	seccomp := func(ref string) func(*runtimeapi.PodSandboxConfig) {
		return func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}}
		}
	}
	idm := func(c, h, l uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{ContainerId: c, HostId: h, Length: l}}
	}
	userns := func(mode runtimeapi.NamespaceMode, uids, gids []*runtimeapi.IDMapping) func(*runtimeapi.PodSandboxConfig) {
		return func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: mode, Uids: uids, Gids: gids}}}
		}
	}
	cases := []struct {
		name   string
		mutate []func(*runtimeapi.PodSandboxConfig)
		// wantErr is a part of the message; "" means valid.
		wantErr string
	}{
		{"valid", nil, ""},
		{"hostname with dots", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "web.v1-a" }}, ""},
		{"hostname 63", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = strings.Repeat("a", 63) }}, ""},
		{"hostname 64", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = strings.Repeat("a", 64) }}, "hostname"},
		{"hostname underscore", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "web_1" }}, "RFC 1123"},
		{"hostname leading dash", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "-web" }}, "RFC 1123"},
		{"hostname empty label", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "a..b" }}, "RFC 1123"},
		{"hostname absolute FQDN", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "web-1.sub.ns.svc." }}, ""},
		{"hostname two trailing dots", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "web.svc.." }}, "RFC 1123"},
		{"hostname only a dot", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "." }}, "RFC 1123"},
		{"hostname 64 with trailing dot", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = strings.Repeat("a", 63) + "." }}, "hostname"},
		{"hostname newline", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "a\nb" }}, "hostname"},
		{"name with slash", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = "a/b" }}, "metadata: name"},
		{"huge namespace", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Namespace = strings.Repeat("n", 300) }}, "metadata: namespace"},
		{"huge annotations", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Annotations["big"] = strings.Repeat("x", MaxLabelBytes) }}, "annotations"},
		{"net sysctl", []func(*runtimeapi.PodSandboxConfig){sysctl("net.ipv4.ip_unprivileged_port_start", "0")}, ""},
		{"slashed net sysctl", []func(*runtimeapi.PodSandboxConfig){sysctl("net/ipv4/conf/eth0.100/forwarding", "1")}, ""},
		{"ipc sysctls", []func(*runtimeapi.PodSandboxConfig){sysctl("kernel.shm_rmid_forced", "1"), func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.Sysctls["kernel.msgmax"], c.Linux.Sysctls["kernel.sem"], c.Linux.Sysctls["fs.mqueue.msg_max"] = "1", "1 2 3 4", "10"
		}}, ""},
		{"node-wide sysctl", []func(*runtimeapi.PodSandboxConfig){sysctl("kernel.panic", "1")}, "not namespaced"},
		{"vm sysctl", []func(*runtimeapi.PodSandboxConfig){sysctl("vm.swappiness", "1")}, "not namespaced"},
		{"unknown kernel.sem prefix", []func(*runtimeapi.PodSandboxConfig){sysctl("kernel.semfoo.x", "1")}, "not namespaced"},
		{"fs.mqueue alone", []func(*runtimeapi.PodSandboxConfig){sysctl("fs.mqueue", "1")}, "not namespaced"},
		{"net alone", []func(*runtimeapi.PodSandboxConfig){sysctl("net", "1")}, "not namespaced"},
		{"uts sysctl", []func(*runtimeapi.PodSandboxConfig){sysctl("kernel.hostname", "x")}, "hostname"},
		{"traversing sysctl", []func(*runtimeapi.PodSandboxConfig){sysctl("net/../../etc/passwd", "x")}, "not a valid sysctl name"},
		{"dotdot sysctl", []func(*runtimeapi.PodSandboxConfig){sysctl("net..ipv4", "x")}, "not a valid sysctl name"},
		{"sysctl value newline", []func(*runtimeapi.PodSandboxConfig){sysctl("net.ipv4.ip_forward", "1\n2")}, "one line"},
		{"net sysctl host network", []func(*runtimeapi.PodSandboxConfig){hostNet, sysctl("net.ipv4.ip_forward", "1")}, "host network"},
		{"ipc sysctl host network ok", []func(*runtimeapi.PodSandboxConfig){hostNet, sysctl("kernel.shmmax", "1")}, ""},
		{"ipc sysctl host ipc", []func(*runtimeapi.PodSandboxConfig){hostIPC, sysctl("kernel.shmmax", "1")}, "host IPC"},
		{"net sysctl host ipc ok", []func(*runtimeapi.PodSandboxConfig){hostIPC, sysctl("net.core.somaxconn", "1")}, ""},
		{"host port negative", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].HostPort = -1 }}, "host port -1"},
		{"host port 65536", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].HostPort = 65536 }}, "host port 65536"},
		{"container port negative", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].ContainerPort = -80 }}, "container port -80"},
		{"nil port mapping", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.PortMappings = append(c.PortMappings, nil) }}, "port mapping 1"},
		{"dns server", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.DnsConfig.Servers = []string{"dns.example"} }}, "server"},
		{"dns search injection", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.DnsConfig.Searches = []string{"a\nnameserver 6.6.6.6"} }}, "search domain"},
		{"cgroup parent traversal", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) { c.Linux.CgroupParent = "/kubepods/../../escape" }}, "cgroup parent"},
		{"negative run_as_user", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: -1}}
		}}, "run_as_user"},
		{"negative group", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{SupplementalGroups: []int64{5, -2}}
		}}, "supplemental group -2"},
		{"unknown pid mode", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: 9}}
		}}, "pid namespace mode 9"},
		{"user namespace as kubelet sends it", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, idm(0, 65536, 65536), idm(0, 65536, 65536))}, ""},
		{"user namespace as critest sends it", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, idm(0, 1000, 100000), idm(0, 1000, 100000))}, ""},
		{"user namespace NODE", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_NODE, nil, nil)}, ""},
		{"user namespace POD without maps", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, nil, nil)}, "without uid mappings"},
		{"user namespace POD without gid maps", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, idm(0, 65536, 65536), nil)}, "without gid mappings"},
		{"user namespace two ranges", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, append(idm(0, 1000, 100000), idm(0, 2000, 100000)...), idm(0, 1000, 100000))}, "2 uid mapping ranges"},
		{"user namespace root not mapped", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, idm(1, 1000, 100000), idm(1, 1000, 100000))}, "must map container id 0"},
		{"user namespace onto node root", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, idm(0, 0, 65536), idm(0, 0, 65536))}, "onto the node's root"},
		{"user namespace empty range", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, idm(0, 65536, 0), idm(0, 65536, 0))}, "length 0"},
		{"user namespace too long", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_POD, idm(0, 65536, 4294967295), idm(0, 65536, 65536))}, "past the largest id"},
		{"user namespace NODE with maps", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_NODE, idm(0, 65536, 65536), idm(0, 65536, 65536))}, "mode NODE with id mappings"},
		{"user namespace CONTAINER", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_CONTAINER, nil, nil)}, "mode CONTAINER is not supported"},
		{"user namespace TARGET", []func(*runtimeapi.PodSandboxConfig){userns(runtimeapi.NamespaceMode_TARGET, nil, nil)}, "mode TARGET is not supported"},
		{"user namespace unknown mode", []func(*runtimeapi.PodSandboxConfig){userns(7, nil, nil)}, "unknown user namespace mode 7"},
		{"user namespace with host network", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE,
				UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: idm(0, 65536, 65536), Gids: idm(0, 65536, 65536)}}}
		}}, "cannot use the node's network namespace"},
		{"seccomp relative", []func(*runtimeapi.PodSandboxConfig){seccomp("profiles/a.json")}, "seccomp profile"},
		{"seccomp traversal", []func(*runtimeapi.PodSandboxConfig){seccomp("/var/lib/kubelet/seccomp/../../../../etc/shadow")}, "seccomp profile"},
		{"seccomp unknown type", []func(*runtimeapi.PodSandboxConfig){func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: 42}}
		}}, "seccomp profile type 42"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := podConfig("v")
			for _, m := range tc.mutate {
				m(cfg)
			}
			err := ValidateSandboxConfig(cfg)
			requireInvalidArgument(t, err, tc.wantErr)
			if err == nil {
				return
			}
			if len(err.Error()) > 600 {
				t.Errorf("message is %d bytes long: a hostile value must be cut short", len(err.Error()))
			}
		})
	}
}

func TestReadSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, maxSeccompProfileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadSeccompProfile(good); err != nil || !strings.Contains(string(data), "SCMP_ACT_ALLOW") {
		t.Fatalf("good profile: %q, %v", data, err)
	}
	cases := map[string]string{
		"relative":  "good.json",
		"traversal": dir + "/../" + filepath.Base(dir) + "/good.json",
		"missing":   filepath.Join(dir, "missing.json"),
		"directory": dir,
		"empty":     empty,
		"too big":   big,
		// A FIFO would block the RPC until a writer came.
		"fifo": fifo,
		// procfs files look regular but may block (kmsg) or have side
		// effects when read.
		"procfs": "/proc/self/status",
		"device": "/dev/zero",
	}
	for name, path := range cases {
		t.Run(name, func(t *testing.T) {
			if data, err := ReadSeccompProfile(path); err == nil {
				t.Fatalf("read %d bytes from %s, want an error", len(data), path)
			}
		})
	}
}

// requireInvalidArgument checks a validation result: no error when wantErr
// is empty, else InvalidArgument with a message mentioning wantErr.
func requireInvalidArgument(t *testing.T, err error, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("valid config refused: %v", err)
		}
		return
	}
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("got %v (code %v), want InvalidArgument mentioning %q", err, codeOf(err), wantErr)
	}
}

func TestValidateLogDirectory(t *testing.T) {
	for _, tc := range []struct {
		dir     string
		wantErr string // a part of the message; "" means accepted
	}{
		{"", ""}, // no logs
		{"/var/log/pods/ns_web_0d3c1f6e-1a2b-4c5d-8e9f-0a1b2c3d4e5f", ""},
		{"/", ""},
		{"logs/../../etc", "must be an absolute path"},
		{"../etc", "must be an absolute path"},
		{"var/log/pods/ns_web_uid", "must be an absolute path"},
		{".", "must be an absolute path"},
		{"/var/log/pods/../../etc", `".." component`},
		{"/var/log/pods/ns/..", `".." component`},
		{"/var/log/pods//ns", "not a clean path"},
		{"/var/log/pods/ns/", "not a clean path"},
		{"/var/log/pods/./ns", "not a clean path"},
		{"/var/log/pods/ns\x00", "NUL"},
		{"/var/log/pods/..ns", ""}, // a name that starts with dots climbs nowhere
	} {
		t.Run(tc.dir, func(t *testing.T) {
			err := ValidateLogDirectory(tc.dir)
			requireInvalidArgument(t, err, tc.wantErr)
			if err != nil && !strings.Contains(err.Error(), "log_directory") {
				t.Errorf("%v does not name the field", err)
			}
		})
	}
}

func TestValidateID(t *testing.T) {
	hex64 := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name, id, wantErr string
	}{
		{"full id", hex64, ""},
		{"prefix", hex64[:12], ""},
		{"docker name", "k8s_POD_web_ns_uid-1_0", ""},
		{"name with dots and dashes", "a.b-c", ""},
		{"empty", "", "is empty"},
		{"space", " ", "only white space"},
		{"tabs and newlines", "\t\n", "only white space"},
		{"padded id", " " + hex64 + " ", "is not a container ID"},
		{"slash", "a/b", "is not a container ID"},
		{"traversal", "../containers/x", "is not a container ID"},
		{"leading dash", "-x", "is not a container ID"},
		{"leading dot", ".x", "is not a container ID"},
		{"NUL", "ab\x00", "is not a container ID"},
		{"query", "ab?force=1", "is not a container ID"},
		{"non-ASCII", "abç", "is not a container ID"},
		{"huge", strings.Repeat("/", 1<<16), "is not a container ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateID("container", "container_id", tc.id)
			requireInvalidArgument(t, err, tc.wantErr)
			if err == nil {
				return
			}
			if !strings.Contains(err.Error(), "container_id") {
				t.Errorf("%v does not name the field", err)
			}
			if len(err.Error()) > 300 {
				t.Errorf("message is %d bytes long: a hostile value must be cut short", len(err.Error()))
			}
		})
	}
}
