package dockerspec

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
)

// TestRecursiveReadOnlyWithRelabel: critest (and kubelet on any node)
// may ask for an SELinux relabel with a recursive read-only mount. Off an
// SELinux host the relabel is a no-op and the mount is made; on one,
// Docker's mount API cannot relabel and the request is refused.
func TestRecursiveReadOnlyWithRelabel(t *testing.T) {
	ms := []*runtimeapi.Mount{{HostPath: "/src", ContainerPath: "/dst", Readonly: true, RecursiveReadOnly: true, SelinuxRelabel: true}}
	_, mounts, err := containerMounts(ms, "1.44", false)
	if err != nil || len(mounts) != 1 || mounts[0].BindOptions == nil || !mounts[0].BindOptions.ReadOnlyForceRecursive {
		t.Errorf("without SELinux: mounts %+v, err %v; want one forced-recursive read-only bind", mounts, err)
	}
	if _, _, err := containerMounts(ms, "1.44", true); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "SELinux") {
		t.Errorf("with SELinux: err %v, want InvalidArgument naming SELinux", err)
	}
}

// TestMountsPerAPIVersion maps every kind of mount on the API versions
// netshim meets: 1.41 (Docker 20.10), 1.43 (Docker 24), 1.44 (Docker 25,
// where "ro" binds turned recursive), 1.45 and 1.52 (Docker 29). A
// read-only mount must be read-only at its top only on all of them unless
// it asks for recursive read-only, and no field newer than the engine is
// sent.
func TestMountsPerAPIVersion(t *testing.T) {
	const (
		resolv = "/var/lib/docker/containers/sb/resolv.conf"
		hosts  = "/var/lib/docker/containers/sb/hosts"
	)
	bind := func(src, dst string, ro bool, opts mount.BindOptions) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: ro, BindOptions: &opts}
	}
	type want struct {
		binds  []string
		mounts []mount.Mount
		err    string // a substring of an InvalidArgument error
	}
	cases := []struct {
		name           string
		mount          *runtimeapi.Mount // nil: none of the config's own
		readonlyRootfs bool
		selinux        bool // SELinux enabled on the host
		// old is the answer below API 1.44, new from 1.44 on.
		old, new want
	}{
		{
			name:  "read-write",
			mount: &runtimeapi.Mount{HostPath: "/data", ContainerPath: "/data"},
			old:   want{binds: []string{"/data:/data"}},
			new:   want{binds: []string{"/data:/data"}},
		},
		{
			name:  "read-only",
			mount: &runtimeapi.Mount{HostPath: "/ro", ContainerPath: "/ro", Readonly: true},
			old:   want{binds: []string{"/ro:/ro:ro"}},
			new:   want{mounts: []mount.Mount{bind("/ro", "/ro", true, mount.BindOptions{ReadOnlyNonRecursive: true, CreateMountpoint: true})}},
		},
		{
			name:  "read-only host-to-container",
			mount: &runtimeapi.Mount{HostPath: "/ro", ContainerPath: "/ro", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
			old:   want{binds: []string{"/ro:/ro:ro,rslave"}},
			new:   want{mounts: []mount.Mount{bind("/ro", "/ro", true, mount.BindOptions{Propagation: mount.PropagationRSlave, ReadOnlyNonRecursive: true, CreateMountpoint: true})}},
		},
		{
			name:  "read-only bidirectional",
			mount: &runtimeapi.Mount{HostPath: "/ro", ContainerPath: "/ro", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL},
			old:   want{binds: []string{"/ro:/ro:ro,rshared"}},
			new:   want{mounts: []mount.Mount{bind("/ro", "/ro", true, mount.BindOptions{Propagation: mount.PropagationRShared, ReadOnlyNonRecursive: true, CreateMountpoint: true})}},
		},
		{
			name:  "read-write relabeled",
			mount: &runtimeapi.Mount{HostPath: "/rw", ContainerPath: "/rw", SelinuxRelabel: true},
			old:   want{binds: []string{"/rw:/rw:Z"}},
			new:   want{binds: []string{"/rw:/rw:Z"}},
		},
		{
			// Docker's mount API cannot relabel: on an SELinux host the
			// bind syntax stays.
			name:    "read-only relabeled on an SELinux host",
			mount:   &runtimeapi.Mount{HostPath: "/ro", ContainerPath: "/ro", Readonly: true, SelinuxRelabel: true},
			selinux: true,
			old:     want{binds: []string{"/ro:/ro:ro,Z"}},
			new:     want{binds: []string{"/ro:/ro:ro,Z"}},
		},
		{
			// Without SELinux a relabel changes nothing, so the mount
			// stays non-recursive (critest asks for both).
			name:  "read-only relabeled without SELinux",
			mount: &runtimeapi.Mount{HostPath: "/ro", ContainerPath: "/ro", Readonly: true, SelinuxRelabel: true},
			old:   want{binds: []string{"/ro:/ro:ro,Z"}},
			new:   want{mounts: []mount.Mount{bind("/ro", "/ro", true, mount.BindOptions{ReadOnlyNonRecursive: true, CreateMountpoint: true})}},
		},
		{
			name:  "read-write with a colon",
			mount: &runtimeapi.Mount{HostPath: "/a:b", ContainerPath: "/ab"},
			old:   want{mounts: []mount.Mount{bind("/a:b", "/ab", false, mount.BindOptions{})}},
			new:   want{mounts: []mount.Mount{bind("/a:b", "/ab", false, mount.BindOptions{})}},
		},
		{
			name:  "read-only with a colon",
			mount: &runtimeapi.Mount{HostPath: "/a:b", ContainerPath: "/ab", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
			old:   want{mounts: []mount.Mount{bind("/a:b", "/ab", true, mount.BindOptions{Propagation: mount.PropagationRSlave})}},
			new:   want{mounts: []mount.Mount{bind("/a:b", "/ab", true, mount.BindOptions{Propagation: mount.PropagationRSlave, ReadOnlyNonRecursive: true})}},
		},
		{
			name:  "recursive read-only",
			mount: &runtimeapi.Mount{HostPath: "/rro", ContainerPath: "/rro", Readonly: true, RecursiveReadOnly: true},
			old:   want{err: "need Docker API 1.44 or later"},
			new:   want{mounts: []mount.Mount{bind("/rro", "/rro", true, mount.BindOptions{ReadOnlyForceRecursive: true, CreateMountpoint: true})}},
		},
		{
			name: "sandbox files",
			old:  want{binds: []string{resolv + ":/etc/resolv.conf", hosts + ":/etc/hosts"}},
			new:  want{binds: []string{resolv + ":/etc/resolv.conf", hosts + ":/etc/hosts"}},
		},
		{
			name:           "sandbox files with a read-only rootfs",
			readonlyRootfs: true,
			old:            want{binds: []string{resolv + ":/etc/resolv.conf:ro", hosts + ":/etc/hosts:ro"}},
			new: want{mounts: []mount.Mount{
				bind(resolv, "/etc/resolv.conf", true, mount.BindOptions{ReadOnlyNonRecursive: true}),
				bind(hosts, "/etc/hosts", true, mount.BindOptions{ReadOnlyNonRecursive: true}),
			}},
		},
	}
	for _, api := range []string{"1.41", "1.43", "1.44", "1.45", "1.52"} {
		for _, c := range cases {
			t.Run(api+"/"+c.name, func(t *testing.T) {
				cfg := ctrConfig("m")
				sc(cfg).ReadonlyRootfs = c.readonlyRootfs
				in := ContainerInput{Config: cfg, SandboxID: "sb", APIVersion: api, SELinux: c.selinux}
				if c.mount != nil {
					cfg.Mounts = []*runtimeapi.Mount{c.mount}
				} else {
					in.ResolvConfPath, in.HostsPath = resolv, hosts
				}
				w := c.new
				if api == "1.41" || api == "1.43" {
					w = c.old
				}
				_, hc, err := ContainerConfig(in)
				if w.err != "" {
					if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), w.err) {
						t.Fatalf("got %v, want InvalidArgument containing %q", err, w.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(hc.Binds, w.binds) {
					t.Errorf("binds = %q, want %q", hc.Binds, w.binds)
				}
				if !slices.EqualFunc(hc.Mounts, w.mounts, func(a, b mount.Mount) bool { return reflect.DeepEqual(a, b) }) {
					t.Errorf("mounts = %s, want %s", mountsString(hc.Mounts), mountsString(w.mounts))
				}
			})
		}
	}
}

func mountsString(ms []mount.Mount) string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%+v %+v", m, m.BindOptions))
	}
	return "[" + strings.Join(out, "; ") + "]"
}

func TestPauselessShmBind(t *testing.T) {
	cp := &checkpoint.PodSandbox{Pauseless: &checkpoint.Pauseless{Shm: "/run/netshim/netns/pod-1.shm"}}
	noShm := &checkpoint.PodSandbox{Pauseless: &checkpoint.Pauseless{}}
	bind := []string{"/run/netshim/netns/pod-1.shm:/dev/shm"}
	cfgWith := func(ns *runtimeapi.NamespaceOption, dsts ...string) *runtimeapi.ContainerConfig {
		cfg := withNamespaces(ctrConfig("app"), ns)
		for _, d := range dsts {
			cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{HostPath: "/h", ContainerPath: d})
		}
		return cfg
	}
	for _, tc := range []struct {
		name string
		cp   *checkpoint.PodSandbox
		cfg  *runtimeapi.ContainerConfig
		want []string
	}{
		{name: "pause-less", cp: cp, cfg: cfgWith(nil), want: bind},
		{name: "a mount below /dev/shm", cp: cp, cfg: cfgWith(nil, "/dev/shm/sub", "/data"), want: bind},
		{name: "own /dev/shm", cp: cp, cfg: cfgWith(nil, "/data", "/dev/shm")},
		{name: "own /dev/shm, unclean path", cp: cp, cfg: cfgWith(nil, "/dev//shm/")},
		{name: "node IPC", cp: cp, cfg: cfgWith(&runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE})},
		{name: "sandbox with a pause container", cfg: cfgWith(nil)},
		{name: "checkpoint without shm", cp: noShm, cfg: cfgWith(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ContainerInput{Config: tc.cfg, Pauseless: tc.cp}
			if got := pauselessShmBind(tc.cfg.GetMounts(), in); !slices.Equal(got, tc.want) {
				t.Errorf("binds %q, want %q", got, tc.want)
			}
		})
	}
}
