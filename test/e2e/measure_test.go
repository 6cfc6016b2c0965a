//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// floorPod is a pause container attached to the network by hand: the
// least any runtime must do for a pod.
type floorPod struct {
	id    string
	netns string
	ip    string
}

// floor runs the bare minimum behind RunPodSandbox: docker run of the pause
// image without network, docker inspect for its pid, and one CNI ADD of the
// same conflist into its netns, in-process with libcni.
type floor struct {
	e    *env
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
}

func (e *env) newFloor() *floor {
	e.t.Helper()
	list, err := libcni.ConfListFromBytes(e.conflist(nil))
	if err != nil {
		e.t.Fatalf("parsing the conflist for the floor: %v", err)
	}
	return &floor{
		e:    e,
		cni:  libcni.NewCNIConfigWithCacheDir([]string{e.cfg.cniBinDir}, e.dir+"/floorcache", nil),
		list: list,
	}
}

func (f *floor) rt(p floorPod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.id, NetNS: p.netns, IfName: "eth0"}
}

func (f *floor) add() floorPod {
	t := f.e.t
	t.Helper()
	id := strings.TrimSpace(mustRun(t, "docker", "run", "-d", "--network", "none", "--label", "nse2e.floor="+f.e.namespace, pauseImage))
	pid := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.State.Pid}}", id))
	p := floorPod{id: id, netns: "/proc/" + pid + "/ns/net"}
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	res, err := f.cni.AddNetworkList(ctx, f.list, f.rt(p))
	if err != nil {
		t.Fatalf("floor: CNI ADD for container %s: %v", id, err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil || len(r.IPs) == 0 {
		t.Fatalf("floor: CNI ADD result for container %s has no IP (%v): %v", id, err, res)
	}
	p.ip = r.IPs[0].Address.IP.String()
	return p
}

func (f *floor) del(p floorPod) {
	t := f.e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	if err := f.cni.DelNetworkList(ctx, f.list, f.rt(p)); err != nil {
		t.Fatalf("floor: CNI DEL for container %s: %v", p.id, err)
	}
	mustRun(t, "docker", "rm", "-f", p.id)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) string { return fmt.Sprintf("%8.1f ms", float64(d.Microseconds())/1000) }

// TestMeasureRunPodSandboxLatency measures, in one run and interleaved so
// that both see the same machine load, the latency of `crictl runp`
// against its floor (docker run + inspect + one CNI ADD), and of
// `crictl stopp` + `crictl rmp` against CNI DEL + docker rm -f. It prints
// the medians (lines prefixed MEASURE:) and asserts only correctness: every
// pod got an IP on the subnet and every IP is released afterwards.
func TestMeasureRunPodSandboxLatency(t *testing.T) {
	const n = 20
	e := newEnv(t, envOptions{})
	e.start()
	fl := e.newFloor()
	// Whatever the test stops in, the floor's attachments are deleted so
	// that their IPs and veths go; the env's cleanup then removes the
	// containers.
	var floorPods []floorPod
	t.Cleanup(func() {
		for _, p := range floorPods {
			ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
			if err := fl.cni.DelNetworkList(ctx, fl.list, fl.rt(p)); err != nil {
				t.Logf("cleanup: floor CNI DEL %s: %v", p.id, err)
			}
			cancel()
		}
	})

	var runp, floorAdd, teardown, floorDel []time.Duration
	ids := make([]string, 0, n)
	for i := range n {
		podJSON := e.writePodJSON(fmt.Sprintf("lat-%02d", i))
		start := time.Now()
		id := e.runp(podJSON)
		runp = append(runp, time.Since(start))
		ids = append(ids, id)

		start = time.Now()
		p := fl.add()
		floorAdd = append(floorAdd, time.Since(start))
		floorPods = append(floorPods, p)
	}

	store := e.ipamStore()
	if len(store) != 2*n {
		t.Errorf("host-local store holds %d IPs, want %d (%d pods + %d floor attachments): %v", len(store), 2*n, n, n, store)
	}
	for i, id := range ids {
		ip := e.mustStatus(id).GetNetwork().GetIp()
		e.requireInSubnet(fmt.Sprintf("pod lat-%02d", i), ip)
		if store[ip] != id {
			t.Errorf("host-local store: %s of pod lat-%02d held by %q, want %s", ip, i, store[ip], id)
		}
	}
	for _, p := range floorPods {
		e.requireInSubnet("floor container "+p.id, p.ip)
		if store[p.ip] != p.id {
			t.Errorf("host-local store: %s of floor container %s held by %q", p.ip, p.id, store[p.ip])
		}
	}

	for i, id := range ids {
		start := time.Now()
		e.mustCrictl("stopp", id)
		e.mustCrictl("rmp", id)
		teardown = append(teardown, time.Since(start))

		start = time.Now()
		fl.del(floorPods[i])
		floorDel = append(floorDel, time.Since(start))
	}
	floorPods = nil

	if store := e.ipamStore(); len(store) != 0 {
		t.Errorf("host-local store still holds %v after teardown", store)
	}
	if files := e.checkpointFiles(); len(files) != 0 {
		t.Errorf("checkpoint dir still holds %v after teardown", files)
	}
	if left := e.pauseContainers(); len(left) != 0 {
		t.Errorf("pause containers left after teardown: %v", left)
	}
	if left := dockerIDs(t, "label=nse2e.floor="+e.namespace); len(left) != 0 {
		t.Errorf("floor containers left after teardown: %v", left)
	}

	rows := []struct {
		name string
		ds   []time.Duration
	}{
		{"crictl runp", runp},
		{"floor: docker run + inspect + CNI ADD", floorAdd},
		{"crictl stopp + rmp", teardown},
		{"floor: CNI DEL + docker rm -f", floorDel},
	}
	lines := []string{fmt.Sprintf("%-40s %11s %11s %11s   (n=%d, interleaved)", "operation", "median", "min", "max", n)}
	for _, r := range rows {
		lines = append(lines, fmt.Sprintf("%-40s %s %s %s", r.name, ms(median(r.ds)), ms(slices.Min(r.ds)), ms(slices.Max(r.ds))))
	}
	lines = append(lines,
		fmt.Sprintf("runp / floor median ratio: %.2f; teardown / floor median ratio: %.2f",
			float64(median(runp))/float64(median(floorAdd)), float64(median(teardown))/float64(median(floorDel))))
	for _, l := range lines {
		t.Log(l)
		fmt.Printf("MEASURE: %s\n", l)
	}
}
