package dockerspec

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// engineModel is a Docker engine (20.10 to 29) with runc (1.1 to 1.4) as
// far as memory, swap and CFS quota go, so that a mapping is checked by
// what the kernel ends up with rather than by which numbers were sent. It
// follows, from reading them: Docker's resource validation (create and
// update), the 2× default swap at create, the merge of an update into the
// stored HostConfig (a 0 field is "unchanged", a memory limit above the
// stored MemorySwap needs a MemorySwap), what Docker hands runc (a memory
// limit when nonzero, memory+swap only when positive), runc update's
// merge with the values it keeps, and how runc writes cgroup v1
// (memory.limit_in_bytes <= memsw.limit_in_bytes, or EINVAL) and v2
// (memory.swap.max = memory+swap - memory, which needs a memory limit).
type engineModel struct {
	v2 bool
	// hc is Docker's stored HostConfig resources.
	hc container.Resources
	// runc keeps the last values it was given.
	mem, memsw, quota int64
}

const pageCounterMax = (1<<63 - 1) / 4096

func (m *engineModel) validate(r container.Resources, update bool) error {
	switch {
	case r.Memory != 0 && r.Memory < dockerMinMemory:
		return errors.New("docker: Minimum memory limit allowed is 6MB")
	case r.Memory > 0 && r.MemorySwap > 0 && r.MemorySwap < r.Memory:
		return errors.New("docker: Minimum memoryswap limit should be larger than memory limit")
	case !update && r.Memory == 0 && r.MemorySwap > 0:
		return errors.New("docker: You should always set the Memory limit when using Memoryswap limit")
	case r.MemoryReservation > 0 && r.MemoryReservation < dockerMinMemory:
		return errors.New("docker: Minimum memory reservation allowed is 6MB")
	case r.Memory > 0 && r.MemoryReservation > 0 && r.Memory < r.MemoryReservation:
		return errors.New("docker: Minimum memory limit can not be less than memory reservation limit")
	case r.CPUQuota > 0 && r.CPUQuota < 1000:
		return errors.New("docker: CPU cfs quota can not be less than 1ms")
	}
	return nil
}

func (m *engineModel) create(r container.Resources) error {
	if err := m.validate(r, false); err != nil {
		return err
	}
	if r.Memory > 0 && r.MemorySwap == 0 {
		r.MemorySwap = 2 * r.Memory
	}
	m.hc = r
	m.mem, m.memsw, m.quota = max(r.Memory, 0), max(r.MemorySwap, 0), r.CPUQuota
	return m.check()
}

func (m *engineModel) update(r container.Resources) error {
	if err := m.validate(r, true); err != nil {
		return err
	}
	if r.Memory != 0 && r.Memory > m.hc.MemorySwap && r.MemorySwap == 0 {
		return errors.New("docker: Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time")
	}
	set := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	set(&m.hc.Memory, r.Memory)
	set(&m.hc.MemorySwap, r.MemorySwap)
	set(&m.hc.CPUQuota, r.CPUQuota)
	set(&m.hc.CPUPeriod, r.CPUPeriod)
	set(&m.hc.CPUShares, r.CPUShares)
	set(&m.mem, r.Memory)
	set(&m.memsw, max(r.MemorySwap, 0))
	set(&m.quota, r.CPUQuota)
	return m.check()
}

// check is runc writing its values: an error is a failed create or update.
func (m *engineModel) check() error {
	if m.v2 {
		_, err := m.v2Swap()
		return err
	}
	if m.mem > 0 && m.memsw > 0 && m.mem > m.memsw {
		return errors.New("runc: memory.limit_in_bytes above memory.memsw.limit_in_bytes: EINVAL")
	}
	return nil
}

func (m *engineModel) v2Swap() (int64, error) {
	switch {
	case m.memsw == 0:
		return -2, nil // not written: the kernel's default
	case m.mem <= 0:
		return 0, errors.New("runc: unable to set swap limit without memory limit")
	case m.memsw < m.mem:
		return 0, errors.New("runc: memory+swap limit should be >= memory limit")
	}
	return m.memsw - m.mem, nil
}

// show is a limit as the kernel reads it back.
func show(bytes int64) string {
	if bytes < 0 || bytes/4096 >= pageCounterMax {
		return "max"
	}
	return strconv.FormatInt(bytes/4096*4096, 10)
}

// kernel returns the memory and swap limits the kernel holds: memory.max
// and memory.swap.max on cgroup v2, memory.limit_in_bytes and
// memory.memsw.limit_in_bytes on v1 ("max" for none), and the CFS quota.
func (m *engineModel) kernel() (mem, swap, quota string) {
	mem = "max"
	if m.mem > 0 {
		mem = show(m.mem)
	}
	if m.v2 {
		s, _ := m.v2Swap()
		swap = show(s)
	} else {
		swap = "max"
		if m.memsw > 0 {
			swap = show(m.memsw)
		}
	}
	quota = "max"
	if m.quota > 0 {
		quota = strconv.FormatInt(m.quota, 10)
	}
	return mem, swap, quota
}

const (
	mi = int64(1) << 20
	// nearlyMax is the memory.max of a container with a swap limit and
	// no memory limit: the kernel's maximum less the swap, 8 EiB.
	nearlyMaxLess128Mi = "9223372036720553984"
)

func hugepages(limits ...uint64) []*runtimeapi.HugepageLimit {
	var hs []*runtimeapi.HugepageLimit
	for i, size := range []string{"2MB", "1GB"} {
		hs = append(hs, &runtimeapi.HugepageLimit{PageSize: size, Limit: limits[i]})
	}
	return hs
}

// oomGroupNoSwap is the unified map kubelet 1.36 sends on every cgroup v2
// node by default (singleProcessOOMKill false, NoSwap, swap controller
// present).
func oomGroupNoSwap() map[string]string {
	return map[string]string{"memory.oom.group": "1", "memory.swap.max": "0"}
}

// TestResourcesKubeletSends runs the LinuxContainerResources kubelet 1.36
// builds (kuberuntime's generateLinuxContainerResources, for each QoS class
// and swap behaviour, cgroup v1 and v2), and what in-place resize and
// crictl update send after them, through the mapping and the engine model,
// and checks the limits the kernel ends up with.
func TestResourcesKubeletSends(t *testing.T) {
	type want struct {
		mem, swap, quota string
		skipped          []string
		err              string // InvalidArgument from the mapping
	}
	cases := []struct {
		name   string
		v2     bool
		create *runtimeapi.LinuxContainerResources
		// update, if set, is sent after the create.
		update *runtimeapi.LinuxContainerResources
		want   want
		// reportedMem is the memory limit ContainerStatus reports.
		reportedMem int64
	}{
		// cgroup v1.
		{
			name: "v1 Guaranteed, NoSwap with swap accounting",
			create: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000,
				MemoryLimitInBytes: 256 * mi, MemorySwapLimitInBytes: 256 * mi, OomScoreAdj: -997, HugepageLimits: hugepages(0, 0)},
			want:        want{mem: "268435456", swap: "268435456", quota: "100000"},
			reportedMem: 256 * mi,
		},
		{
			name:   "v1 Burstable without limits, no swap accounting",
			create: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, OomScoreAdj: 999, HugepageLimits: hugepages(0, 0)},
			want:   want{mem: "max", swap: "max", quota: "max"},
		},
		{
			name:        "v1 Burstable with a memory limit, no swap accounting",
			create:      &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, MemoryLimitInBytes: 128 * mi, OomScoreAdj: 968},
			want:        want{mem: "134217728", swap: "max", quota: "max"},
			reportedMem: 128 * mi,
		},
		{
			name:   "v1 BestEffort",
			create: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000, HugepageLimits: hugepages(0, 0)},
			want:   want{mem: "max", swap: "max", quota: "max"},
		},
		{
			name: "v1 hugepages asked: warned, not refused",
			create: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000,
				MemoryLimitInBytes: 256 * mi, OomScoreAdj: -997, HugepageLimits: hugepages(4<<20, 0)},
			want:        want{mem: "268435456", swap: "max", quota: "100000", skipped: []string{"hugepage_limits[2MB]=4194304"}},
			reportedMem: 256 * mi,
		},
		{
			name:        "v1 exclusive CPUs: quota disabled",
			create:      &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuPeriod: 100000, CpuQuota: -1, MemoryLimitInBytes: 256 * mi},
			want:        want{mem: "268435456", swap: "max", quota: "max"},
			reportedMem: 256 * mi,
		},
		{
			name:        "v1 resize up, NoSwap",
			create:      &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 128 * mi},
			update:      &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 256 * mi, MemorySwapLimitInBytes: 256 * mi, OomScoreAdj: 968, HugepageLimits: hugepages(0, 0)},
			want:        want{mem: "268435456", swap: "268435456", quota: "100000"},
			reportedMem: 256 * mi,
		},
		{
			name:        "v1 resize down, NoSwap",
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 * mi, MemorySwapLimitInBytes: 256 * mi},
			update:      &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 128 * mi},
			want:        want{mem: "134217728", swap: "134217728", quota: "max"},
			reportedMem: 128 * mi,
		},
		{
			name:        "v1 resize up, no swap accounting",
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi},
			update:      &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, MemoryLimitInBytes: 256 * mi},
			want:        want{mem: "268435456", swap: "max", quota: "max"},
			reportedMem: 256 * mi,
		},
		{
			name:        "v1 crictl update --memory on a NoSwap container keeps it without swap",
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 128 * mi},
			update:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 * mi},
			want:        want{mem: "268435456", swap: "268435456", quota: "max"},
			reportedMem: 256 * mi,
		},
		{
			name:        "v1 crictl update --cpu-quota leaves memory alone",
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 128 * mi},
			update:      &runtimeapi.LinuxContainerResources{CpuQuota: 20000},
			want:        want{mem: "134217728", swap: "134217728", quota: "20000"},
			reportedMem: 128 * mi,
		},
		{
			name:   "v1 CPU limit lifted (-1)",
			create: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000},
			update: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: -1},
			want:   want{mem: "max", swap: "max", quota: "max"},
		},
		{
			name:   "v1 memory limit lifted (-1) with its swap limit",
			create: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 128 * mi},
			update: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1},
			want:   want{mem: "max", swap: "max", quota: "max"},
		},
		{
			name:   "v1 swap limit without a memory limit",
			create: &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 128 * mi},
			want:   want{err: "needs memory_limit_in_bytes"},
		},
		{
			name:   "v1 update: swap limit for a container without a memory limit",
			create: &runtimeapi.LinuxContainerResources{},
			update: &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 128 * mi},
			want:   want{err: "needs a memory limit"},
		},

		// cgroup v2.
		{
			name: "v2 Guaranteed, NoSwap",
			v2:   true,
			create: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000,
				MemoryLimitInBytes: 256 * mi, OomScoreAdj: -997, HugepageLimits: hugepages(0, 0), Unified: oomGroupNoSwap()},
			want:        want{mem: "268435456", swap: "0", quota: "100000", skipped: []string{"memory.oom.group=1"}},
			reportedMem: 256 * mi,
		},
		{
			name:   "v2 BestEffort, NoSwap",
			v2:     true,
			create: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000, HugepageLimits: hugepages(0, 0), Unified: oomGroupNoSwap()},
			want:   want{mem: "max", swap: "0", quota: "max", skipped: []string{"memory.oom.group=1"}},
		},
		{
			name:   "v2 singleProcessOOMKill, NoSwap",
			v2:     true,
			create: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, MemoryLimitInBytes: 128 * mi, Unified: map[string]string{"memory.swap.max": "0"}},
			want:   want{mem: "134217728", swap: "0", quota: "max"}, reportedMem: 128 * mi,
		},
		{
			name: "v2 Burstable, LimitedSwap",
			v2:   true,
			create: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, MemoryLimitInBytes: 512 * mi,
				Unified: map[string]string{"memory.oom.group": "1", "memory.swap.max": strconv.FormatInt(128*mi, 10)}},
			want:        want{mem: "536870912", swap: "134217728", quota: "max", skipped: []string{"memory.oom.group=1"}},
			reportedMem: 512 * mi,
		},
		{
			name:   "v2 Burstable with a memory request only, LimitedSwap",
			v2:     true,
			create: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, Unified: map[string]string{"memory.swap.max": strconv.FormatInt(128*mi, 10)}},
			want:   want{mem: nearlyMaxLess128Mi, swap: "134217728", quota: "max"},
		},
		{
			name: "v2 MemoryQoS, not tiered",
			v2:   true,
			create: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, MemoryLimitInBytes: 512 * mi,
				Unified: map[string]string{"memory.min": "0", "memory.low": "0", "memory.high": "483183820", "memory.swap.max": "0"}},
			want:        want{mem: "536870912", swap: "0", quota: "max", skipped: []string{"memory.high=483183820"}},
			reportedMem: 512 * mi,
		},
		{
			name:        "v2 exclusive CPUs: quota disabled",
			v2:          true,
			create:      &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuPeriod: 100000, CpuQuota: -1, MemoryLimitInBytes: 256 * mi, Unified: oomGroupNoSwap()},
			want:        want{mem: "268435456", swap: "0", quota: "max", skipped: []string{"memory.oom.group=1"}},
			reportedMem: 256 * mi,
		},
		{
			name:        "v2 resize up, NoSwap",
			v2:          true,
			create:      &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 * mi, Unified: oomGroupNoSwap()},
			update:      &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 256 * mi, OomScoreAdj: -997, HugepageLimits: hugepages(0, 0), Unified: oomGroupNoSwap()},
			want:        want{mem: "268435456", swap: "0", quota: "100000", skipped: []string{"memory.oom.group=1"}},
			reportedMem: 256 * mi,
		},
		{
			name:        "v2 resize down, NoSwap",
			v2:          true,
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 * mi, Unified: oomGroupNoSwap()},
			update:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: oomGroupNoSwap()},
			want:        want{mem: "134217728", swap: "0", quota: "max", skipped: []string{"memory.oom.group=1"}},
			reportedMem: 128 * mi,
		},
		{
			name:        "v2 resize, LimitedSwap follows the request",
			v2:          true,
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 512 * mi, Unified: map[string]string{"memory.swap.max": strconv.FormatInt(128*mi, 10)}},
			update:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1024 * mi, Unified: map[string]string{"memory.swap.max": strconv.FormatInt(256*mi, 10)}},
			want:        want{mem: "1073741824", swap: "268435456", quota: "max"},
			reportedMem: 1024 * mi,
		},
		{
			name:   "v2 CPU resize of a container without a memory limit",
			v2:     true,
			create: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, Unified: oomGroupNoSwap()},
			update: &runtimeapi.LinuxContainerResources{CpuShares: 204, CpuPeriod: 100000, Unified: oomGroupNoSwap()},
			want:   want{mem: "max", swap: "0", quota: "max", skipped: []string{"memory.oom.group=1"}},
		},
		{
			name:        "v2 crictl update --memory keeps the container without swap",
			v2:          true,
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: oomGroupNoSwap()},
			update:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 * mi},
			want:        want{mem: "268435456", swap: "0", quota: "max"},
			reportedMem: 256 * mi,
		},
		{
			name:        "v2 swap alone changed",
			v2:          true,
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: oomGroupNoSwap()},
			update:      &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.swap.max": strconv.FormatInt(64*mi, 10)}},
			want:        want{mem: "134217728", swap: "67108864", quota: "max"},
			reportedMem: 128 * mi,
		},
		{
			name:   "v2 memory limit lifted (-1), NoSwap kept",
			v2:     true,
			create: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: oomGroupNoSwap()},
			update: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1, Unified: map[string]string{"memory.swap.max": "0"}},
			want:   want{mem: "max", swap: "0", quota: "max"},
		},
		{
			name:   "v2 memory limit lifted with memory.max",
			v2:     true,
			create: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: oomGroupNoSwap()},
			update: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.max": "max", "memory.swap.max": "0"}},
			want:   want{mem: "max", swap: "0", quota: "max"},
		},
		{
			name:        "v2 swap limit lifted",
			v2:          true,
			create:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: oomGroupNoSwap()},
			update:      &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: map[string]string{"memory.swap.max": "max"}},
			want:        want{mem: "134217728", swap: nearlyMaxLess128Mi, quota: "max"},
			reportedMem: 128 * mi,
		},
		{
			name:   "v2 cpu.max and pids.max from unified",
			v2:     true,
			create: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"cpu.max": "50000 100000", "pids.max": "100", "io.weight": "default 100"}},
			want:   want{mem: "max", swap: "max", quota: "50000", skipped: []string{"io.weight=default 100"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &engineModel{v2: tc.v2}
			var skipped []string
			err := func() error {
				q, err := ResolveResources(tc.create)
				if err != nil {
					return err
				}
				skipped = q.Skipped
				var r container.Resources
				if err := q.ApplyCreate(&r); err != nil {
					return err
				}
				if err := m.create(r); err != nil {
					t.Fatalf("the engine refuses the create %+v: %v", r, err)
				}
				if tc.update == nil {
					return nil
				}
				cur := ResourcesFromHostConfig(&container.HostConfig{Resources: m.hc})
				q, err = ResolveResources(tc.update)
				if err != nil {
					return err
				}
				skipped = q.Skipped
				var u container.Resources
				if err := q.ApplyUpdate(&u, cur); err != nil {
					return err
				}
				if err := m.update(u); err != nil {
					t.Fatalf("the engine refuses the update %+v (current %+v): %v", u, m.hc, err)
				}
				return nil
			}()
			if tc.want.err != "" {
				if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want.err) {
					t.Fatalf("got %v, want InvalidArgument saying %q", err, tc.want.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mem, swap, quota := m.kernel()
			if mem != tc.want.mem || swap != tc.want.swap || quota != tc.want.quota {
				t.Errorf("kernel memory/swap/quota = %s/%s/%s, want %s/%s/%s (Docker has %+v)", mem, swap, quota, tc.want.mem, tc.want.swap, tc.want.quota, m.hc)
			}
			if !slices.Equal(skipped, tc.want.skipped) {
				t.Errorf("skipped %q, want %q", skipped, tc.want.skipped)
			}
			if got := ResourcesFromHostConfig(&container.HostConfig{Resources: m.hc}).GetMemoryLimitInBytes(); got != tc.reportedMem {
				t.Errorf("reported memory limit %d, want %d", got, tc.reportedMem)
			}
		})
	}
}

// TestUnifiedKeysDockerHasAFieldFor checks each unified key that maps to a
// Docker field, and that unknown keys are skipped unless they ask for the
// kernel's default.
func TestUnifiedKeysDockerHasAFieldFor(t *testing.T) {
	pids := func(n int64) *int64 { return &n }
	cases := []struct {
		unified map[string]string
		want    container.Resources
		skipped []string
	}{
		{map[string]string{"memory.max": "268435456"}, container.Resources{Memory: 256 * mi, MemorySwap: -1}, nil},
		{map[string]string{"memory.max": "max"}, container.Resources{}, nil},
		{map[string]string{"memory.max": "268435456", "memory.swap.max": "max"}, container.Resources{Memory: 256 * mi, MemorySwap: -1}, nil},
		{map[string]string{"cpu.max": "max 100000"}, container.Resources{CPUQuota: -1, CPUPeriod: 100000}, nil},
		{map[string]string{"cpu.max": "20000"}, container.Resources{CPUQuota: 20000}, nil},
		{map[string]string{"pids.max": "max"}, container.Resources{PidsLimit: pids(-1)}, nil},
		{map[string]string{"cpuset.cpus": "0-1", "cpuset.mems": "0"}, container.Resources{CpusetCpus: "0-1", CpusetMems: "0"}, nil},
		{map[string]string{"memory.low": "134217728"}, container.Resources{MemoryReservation: 128 * mi}, nil},
		{map[string]string{"memory.low": "1048576"}, container.Resources{}, []string{"memory.low=1048576 (below Docker's minimum reservation of 6291456 bytes)"}},
		{map[string]string{"memory.max": "67108864", "memory.low": "134217728"}, container.Resources{Memory: 64 * mi, MemorySwap: -1}, []string{"memory.low=134217728 (above the memory limit)"}},
		{map[string]string{"memory.min": "0", "memory.high": "max", "memory.oom.group": "0", "cpu.idle": "0"}, container.Resources{}, nil},
		{map[string]string{"cpu.weight": "100", "cpu.idle": "1", "hugetlb.2MB.max": "0", "memory.min": "1"}, container.Resources{},
			[]string{"cpu.idle=1", "cpu.weight=100", "hugetlb.2MB.max=0", "memory.min=1"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.unified), func(t *testing.T) {
			q, err := ResolveResources(&runtimeapi.LinuxContainerResources{Unified: tc.unified})
			if err != nil {
				t.Fatal(err)
			}
			var r container.Resources
			if err := q.ApplyCreate(&r); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, tc.want) {
				t.Errorf("resources %+v, want %+v", r, tc.want)
			}
			if !slices.Equal(q.Skipped, tc.skipped) {
				t.Errorf("skipped %q, want %q", q.Skipped, tc.skipped)
			}
		})
	}
}

func TestUnifiedValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		res  *runtimeapi.LinuxContainerResources
		want string
	}{
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.max": "lots"}}, `"memory.max"`},
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.max": "0"}}, "no memory"},
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.swap.max": "-1"}}, "non-negative"},
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.swap.max": strconv.FormatInt(1<<61, 10)}}, "more swap"},
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"cpu.max": ""}}, "$QUOTA $PERIOD"},
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"cpu.max": "max 10"}}, "period"},
		{&runtimeapi.LinuxContainerResources{CpuQuota: 50000, Unified: map[string]string{"cpu.max": "max"}}, "contradicts cpu_quota 50000"},
		{&runtimeapi.LinuxContainerResources{CpuPeriod: 100000, Unified: map[string]string{"cpu.max": "50000 50000"}}, "contradicts cpu_period"},
		{&runtimeapi.LinuxContainerResources{CpusetCpus: "0", Unified: map[string]string{"cpuset.cpus": "1"}}, "contradicts cpuset_cpus"},
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"cpuset.mems": "x"}}, "0-3,5"},
		{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"pids.max": "0"}}, "no process"},
	} {
		_, err := ResolveResources(tc.res)
		if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want InvalidArgument saying %q", tc.res, err, tc.want)
		}
	}
	// A field and a unified key saying the same are fine.
	if _, err := ResolveResources(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi, Unified: map[string]string{"memory.max": "67108864"}}); err != nil {
		t.Errorf("agreeing field and key: %v", err)
	}
}

func TestMemoryPlusSwapOverflowIsRefused(t *testing.T) {
	q := ResourceRequest{memory: 1<<63 - 1<<40, swap: maxSwapBytes, swapSet: true}
	var r container.Resources
	if err := q.ApplyCreate(&r); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "overflows") {
		t.Fatalf("got %v, want InvalidArgument saying it overflows", err)
	}
}
