package cgstats

import (
	"errors"
	"os"
	"reflect"
	"testing"
)

const (
	ctrID  = "0833ca6c5ed0c3b8e28f7ef4e1fa013937233881637352ebd364c8b68ed4a9a4"
	podUID = "6f1d2c3a-4b5e-4f60-9a7b-8c9d0e1f2a3b"
	// The systemd driver's pod slice: kubelet writes the UID with '_'.
	systemdPod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1d2c3a_4b5e_4f60_9a7b_8c9d0e1f2a3b.slice"
	// The cgroupfs driver's pod cgroup.
	cgroupfsPod = "/kubepods/burstable/pod" + podUID
)

// hybridDocker is /proc/<pid>/cgroup of a container started by Docker with
// the cgroupfs driver on a hybrid host like the development machine (its
// own /proc/self/cgroup is testdata/v1-hybrid/proc_cgroup): every
// hierarchy, the named and the v2 one included, holds the container.
const hybridDocker = "9:name=systemd:" + cgroupfsPod + "/" + ctrID + "\n" +
	"8:pids:" + cgroupfsPod + "/" + ctrID + "\n" +
	"7:blkio:" + cgroupfsPod + "/" + ctrID + "\n" +
	"4:memory:" + cgroupfsPod + "/" + ctrID + "\n" +
	"2:cpuacct:" + cgroupfsPod + "/" + ctrID + "\n" +
	"1:cpu:" + cgroupfsPod + "/" + ctrID + "\n" +
	"0::" + cgroupfsPod + "/" + ctrID + "\n"

func TestParseProcCgroup(t *testing.T) {
	machine, err := os.ReadFile("testdata/v1-hybrid/proc_cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		data   string
		want   Paths
		v2Only bool
		cgName string
	}{
		{
			name: "this machine's hybrid layout", data: string(machine),
			want: Paths{"name=systemd": "/", "pids": "/", "blkio": "/", "freezer": "/", "devices": "/",
				"memory": "/process_api/fe1f617e5703f83e3bf6ec6ecd76315c", "cpuset": "/", "cpuacct": "/", "cpu": "/", "": "/"},
			cgName: "/process_api/fe1f617e5703f83e3bf6ec6ecd76315c",
		},
		{
			name: "co-mounted controllers", data: "3:cpu,cpuacct:/docker/" + ctrID + "\n4:memory:/docker/" + ctrID + "\n",
			want:   Paths{"cpu": "/docker/" + ctrID, "cpuacct": "/docker/" + ctrID, "memory": "/docker/" + ctrID},
			cgName: "/docker/" + ctrID,
		},
		{
			name: "pure v2, systemd driver", data: "0::" + systemdPod + "/docker-" + ctrID + ".scope\n",
			want: Paths{"": systemdPod + "/docker-" + ctrID + ".scope"}, v2Only: true,
			cgName: systemdPod + "/docker-" + ctrID + ".scope",
		},
		{
			name: "malformed lines skipped", data: "garbage\n5:memory\n6:pids:relative\n\n0::/ok\n",
			want: Paths{"": "/ok"}, v2Only: true, cgName: "/ok",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ParseProcCgroup([]byte(tc.data))
			if !reflect.DeepEqual(p, tc.want) {
				t.Errorf("paths = %v, want %v", p, tc.want)
			}
			if p.V2Only() != tc.v2Only {
				t.Errorf("V2Only = %v", p.V2Only())
			}
			if p.Name() != tc.cgName {
				t.Errorf("Name = %q, want %q", p.Name(), tc.cgName)
			}
		})
	}
}

func TestReadProcCgroupOfExitedProcess(t *testing.T) {
	if _, err := ReadProcCgroup(t.TempDir(), 42); !errors.Is(err, ErrNoCgroup) {
		t.Errorf("err = %v, want ErrNoCgroup", err)
	}
}

func TestContainerAndPodCgroup(t *testing.T) {
	other := "d78f5c3f906b9abc39f1246680038accacc891b50d673ebce0f04ced412840b3"
	for _, tc := range []struct {
		name       string
		data       string
		ok         bool
		wantName   string // the container's cgroup
		wantParent string // the pod's
		podCgroup  bool   // kubelet's pod cgroup for podUID
	}{
		{name: "cgroupfs on a hybrid host", data: hybridDocker, ok: true,
			wantName: cgroupfsPod + "/" + ctrID, wantParent: cgroupfsPod, podCgroup: true},
		{name: "systemd on cgroup v2", data: "0::" + systemdPod + "/docker-" + ctrID + ".scope\n", ok: true,
			wantName: systemdPod + "/docker-" + ctrID + ".scope", wantParent: systemdPod, podCgroup: true},
		{name: "systemd guaranteed pod (no QoS slice)", ok: true,
			data:       "0::/kubepods.slice/kubepods-pod6f1d2c3a_4b5e_4f60_9a7b_8c9d0e1f2a3b.slice/docker-" + ctrID + ".scope\n",
			wantName:   "/kubepods.slice/kubepods-pod6f1d2c3a_4b5e_4f60_9a7b_8c9d0e1f2a3b.slice/docker-" + ctrID + ".scope",
			wantParent: "/kubepods.slice/kubepods-pod6f1d2c3a_4b5e_4f60_9a7b_8c9d0e1f2a3b.slice", podCgroup: true},
		{name: "no cgroup parent: Docker's own", data: "4:memory:/docker/" + ctrID + "\n0::/docker/" + ctrID + "\n", ok: true,
			wantName: "/docker/" + ctrID, wantParent: "/docker"},
		{name: "systemd in the container moved itself below", ok: true,
			data:     "0::" + systemdPod + "/docker-" + ctrID + ".scope/init.scope\n",
			wantName: systemdPod + "/docker-" + ctrID + ".scope", wantParent: systemdPod, podCgroup: true},
		{name: "pid reused by another container", data: "4:memory:/docker/" + other + "\n0::/docker/" + other + "\n"},
		{name: "pid reused by a host process", data: "0::/system.slice/sshd.service\n"},
		{name: "cgroup namespace shows a relative path", data: "0::/../docker-" + ctrID + ".scope\n"},
		{name: "an ID prefix is not the ID", data: "0::/docker/" + ctrID[:12] + "\n"},
		{name: "hybrid host whose v2 tree does not hold the container", ok: true,
			data:     "4:memory:/docker/" + ctrID + "\n2:cpuacct:/docker/" + ctrID + "\n0::/\n",
			wantName: "/docker/" + ctrID, wantParent: "/docker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := ParseProcCgroup([]byte(tc.data)).Container(ctrID)
			if ok != tc.ok {
				t.Fatalf("Container ok = %v (%v), want %v", ok, c, tc.ok)
			}
			if !ok {
				return
			}
			if c.Name() != tc.wantName {
				t.Errorf("container cgroup = %q, want %q", c.Name(), tc.wantName)
			}
			for k, v := range c {
				if !IsContainerCgroup(v, ctrID) {
					t.Errorf("hierarchy %q kept at %q, not the container's", k, v)
				}
			}
			pod := c.Parent()
			if pod.Name() != tc.wantParent {
				t.Errorf("pod cgroup = %q, want %q", pod.Name(), tc.wantParent)
			}
			if got := IsKubeletPodCgroup(pod.Name(), podUID); got != tc.podCgroup {
				t.Errorf("IsKubeletPodCgroup(%q) = %v", pod.Name(), got)
			}
		})
	}
}

func TestIsKubeletPodCgroup(t *testing.T) {
	for _, tc := range []struct {
		dir, uid string
		want     bool
	}{
		{cgroupfsPod, podUID, true},
		{"/kubepods/pod" + podUID, podUID, true},
		{systemdPod, podUID, true},
		{"/kubepods/burstable/pod" + podUID, "other", false},
		{systemdPod, "6f1d2c3a", false},
		{"/system.slice", podUID, false},
		{"/docker", podUID, false},
		{"/mypods/pod" + podUID, podUID, true},
		{"/x/y-pod6f1d2c3a_4b5e_4f60_9a7b_8c9d0e1f2a3b.slice", podUID, false},
		{"/kubepods", "", false},
	} {
		if got := IsKubeletPodCgroup(tc.dir, tc.uid); got != tc.want {
			t.Errorf("IsKubeletPodCgroup(%q, %q) = %v, want %v", tc.dir, tc.uid, got, tc.want)
		}
	}
}

func TestIsContainerCgroup(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want bool
	}{
		{"/docker/" + ctrID, true},
		{systemdPod + "/docker-" + ctrID + ".scope", true},
		{"/machine.slice/libpod-" + ctrID + ".scope", true},
		{"/x/-" + ctrID + ".scope", false},
		{"/docker/" + ctrID + "x", false},
		{"/docker", false},
	} {
		if got := IsContainerCgroup(tc.dir, ctrID); got != tc.want {
			t.Errorf("IsContainerCgroup(%q) = %v, want %v", tc.dir, got, tc.want)
		}
	}
}
