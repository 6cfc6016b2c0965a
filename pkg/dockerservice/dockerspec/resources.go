package dockerspec

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
)

// This file maps CRI LinuxContainerResources to Docker's Resources, for
// CreateContainer and UpdateContainerResources alike.
//
// What kubelet 1.36 sends (kuberuntime's container and sandbox resource
// builders):
//   - on cgroup v1: cpu_shares; cpu_period 100000 and cpu_quota (0 without
//     a CPU limit, -1 when exclusive CPUs disable the quota);
//     memory_limit_in_bytes (0 without a limit); oom_score_adj; one
//     hugepage_limits entry per page size of the node (limit 0 unless the
//     container asks for hugepages); and, when the node accounts swap,
//     memory_swap_limit_in_bytes equal to the memory limit (NoSwap);
//   - on cgroup v2: the same fields, except swap, and in unified
//     "memory.oom.group": "1" (unless singleProcessOOMKill),
//     "memory.swap.max": "0" (NoSwap) or "<bytes>" (LimitedSwap), and with
//     the MemoryQoS gate "memory.min", "memory.low" and "memory.high".
//
// Docker has a field for some unified keys (below); the others cannot be
// set through its API at all. They are skipped and named in one warning
// per request: refusing would fail every container kubelet creates on a
// cgroup v2 node, for settings that tune rather than confine it.
//
// Docker reads 0 as "unchanged" in an update and refuses a memory limit
// of -1 (its minimum is 6 MiB), so "no memory limit" is said with
// DockerNoMemoryLimit where Docker needs a number.

const (
	// DockerNoMemoryLimit is what netshim gives Docker as the memory limit
	// (and memory+swap limit) to mean none: the kernel's own maximum
	// (PAGE_COUNTER_MAX pages), which cgroup v1 reads back for "no limit"
	// and cgroup v2 shows as "max", whatever the page size.
	DockerNoMemoryLimit int64 = 1<<63 - 1<<12
	// noMemoryLimitFloor: Docker memory limits from here up (2 EiB) are
	// netshim's "none" (DockerNoMemoryLimit minus at most maxSwapBytes)
	// and reported so.
	noMemoryLimitFloor int64 = 1 << 61
	// maxSwapBytes (1 EiB) bounds a swap limit, so that a container with
	// a swap limit and no memory limit keeps a memory limit above
	// noMemoryLimitFloor. It stands for "no swap limit" where a number is
	// needed: no machine has that much swap.
	maxSwapBytes int64 = 1 << 60
	// dockerMinMemory is Docker's smallest memory limit and reservation.
	dockerMinMemory int64 = 6 << 20
)

// Keys of LinuxContainerResources.unified that Docker has a field for.
const (
	unifiedMemoryMax  = "memory.max"
	unifiedSwapMax    = "memory.swap.max"
	unifiedMemoryLow  = "memory.low"
	unifiedCPUMax     = "cpu.max"
	unifiedPidsMax    = "pids.max"
	unifiedCpusetCPUs = "cpuset.cpus"
	unifiedCpusetMems = "cpuset.mems"
)

// unifiedDefaults are the values a new cgroup v2 cgroup has: asking for
// them changes nothing, so they are not worth a warning when Docker cannot
// set the key (kubelet sends "memory.min": "0" with MemoryQoS).
var unifiedDefaults = map[string]string{
	"memory.min":       "0",
	"memory.low":       "0",
	"memory.high":      "max",
	"memory.oom.group": "0",
	"cpu.idle":         "0",
}

// ResourceRequest is a CRI resources request with the unified entries
// Docker can express folded into fields. For every int64, 0 means "not
// asked" (as in the CRI and in Docker) and -1 "no limit".
type ResourceRequest struct {
	cpuShares, cpuPeriod, cpuQuota int64
	cpusetCpus, cpusetMems         string
	memory                         int64
	// memsw is memory+swap, cgroup v1's memsw and Docker's MemorySwap
	// (memory_swap_limit_in_bytes).
	memsw int64
	// swap is swap alone, cgroup v2's memory.swap.max; only meaningful
	// when swapSet ("0" is a limit: no swap).
	swap    int64
	swapSet bool
	pids    *int64
	// reservation is memory.low, Docker's MemoryReservation.
	reservation int64
	// skipped names what Docker cannot set ("key=value").
	Skipped []string
}

// ResolveResources folds the unified entries into the CRI fields. A key
// that says the same as a field must agree with it; a value Docker's field
// cannot hold, or that is malformed, is InvalidArgument.
func ResolveResources(res *runtimeapi.LinuxContainerResources) (ResourceRequest, error) {
	q := ResourceRequest{
		cpuShares: res.GetCpuShares(), cpuPeriod: res.GetCpuPeriod(), cpuQuota: res.GetCpuQuota(),
		cpusetCpus: res.GetCpusetCpus(), cpusetMems: res.GetCpusetMems(),
		memory: res.GetMemoryLimitInBytes(), memsw: res.GetMemorySwapLimitInBytes(),
	}
	unified := res.GetUnified()
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range unified {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		v := strings.TrimSpace(unified[k])
		if err := q.fold(k, v); err != nil {
			return ResourceRequest{}, crirpc.InvalidArgf("unified %s: %s %v", ShortQuote(k), ShortQuote(v), err)
		}
	}
	for _, h := range res.GetHugepageLimits() {
		// kubelet sends a 0 limit for every page size the node has; Docker
		// has no hugetlb limits at all, so only a real one is worth a word.
		if h.GetLimit() > 0 {
			q.Skipped = append(q.Skipped, fmt.Sprintf("hugepage_limits[%s]=%d", h.GetPageSize(), h.GetLimit()))
		}
	}
	if q.memory > 0 && q.memory < dockerMinMemory {
		// Docker would refuse it only at create.
		return ResourceRequest{}, crirpc.InvalidArgf("memory limit %d is below Docker's minimum of %d bytes (6 MiB)", q.memory, dockerMinMemory)
	}
	if q.memsw != 0 && q.swapSet {
		return ResourceRequest{}, crirpc.InvalidArgf("memory_swap_limit_in_bytes and unified %s both limit swap; give one", unifiedSwapMax)
	}
	if q.reservation > 0 && q.memory > 0 && q.reservation > q.memory {
		// Docker refuses a reservation above the limit; the kernel would
		// simply never reach it.
		q.Skipped = append(q.Skipped, fmt.Sprintf("%s=%d (above the memory limit)", unifiedMemoryLow, q.reservation))
		q.reservation = 0
	}
	return q, nil
}

// fold takes one unified entry into q. The error completes a sentence.
func (q *ResourceRequest) fold(key, v string) error {
	switch key {
	case unifiedMemoryMax:
		n, err := parseMaxOrBytes(v)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrString("would leave the container no memory")
		}
		return agree(&q.memory, n, "memory_limit_in_bytes")
	case unifiedSwapMax:
		n, err := parseMaxOrBytes(v)
		if err != nil {
			return err
		}
		if n > maxSwapBytes {
			return fmt.Errorf("is more swap than netshim can ask Docker for (at most %d bytes, or \"max\")", maxSwapBytes)
		}
		q.swap, q.swapSet = n, true
	case unifiedMemoryLow:
		n, err := parseMaxOrBytes(v)
		switch {
		case err != nil:
			return err
		case n == 0:
			// The default: nothing to do.
		case n > 0 && n < dockerMinMemory:
			q.Skipped = append(q.Skipped, fmt.Sprintf("%s=%s (below Docker's minimum reservation of %d bytes)", key, v, dockerMinMemory))
		case n > 0:
			q.reservation = n
		default:
			q.Skipped = append(q.Skipped, key+"="+v)
		}
	case unifiedCPUMax:
		quota, period, err := parseCPUMax(v)
		if err != nil {
			return err
		}
		if err := agree(&q.cpuQuota, quota, "cpu_quota"); err != nil {
			return err
		}
		if period != 0 {
			return agree(&q.cpuPeriod, period, "cpu_period")
		}
	case unifiedPidsMax:
		n, err := parseMaxOrBytes(v)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrString("would let the container start no process")
		}
		q.pids = &n
	case unifiedCpusetCPUs, unifiedCpusetMems:
		if !ValidCPUSet(v) {
			return ErrString("is not a list like 0-3,5")
		}
		if key == unifiedCpusetCPUs {
			return agreeString(&q.cpusetCpus, v, "cpuset_cpus")
		}
		return agreeString(&q.cpusetMems, v, "cpuset_mems")
	default:
		if unifiedDefaults[key] != v {
			q.Skipped = append(q.Skipped, key+"="+v)
		}
	}
	return nil
}

// parseMaxOrBytes reads a cgroup v2 limit: "max" is -1, else a
// non-negative integer.
func parseMaxOrBytes(v string) (int64, error) {
	if v == "max" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, ErrString(`is neither "max" nor a non-negative integer`)
	}
	return n, nil
}

// parseCPUMax reads cpu.max, "$QUOTA [$PERIOD]" with QUOTA "max" for no
// limit, into CFS quota (-1 for none) and period (0 when not given).
func parseCPUMax(v string) (quota, period int64, err error) {
	f := strings.Fields(v)
	if len(f) == 0 || len(f) > 2 {
		return 0, 0, ErrString(`is not "$QUOTA $PERIOD" (QUOTA a number of microseconds or "max")`)
	}
	if quota, err = parseMaxOrBytes(f[0]); err != nil || (quota >= 0 && quota < minCPUQuota) {
		return 0, 0, fmt.Errorf("has quota %s: want \"max\" or at least %d microseconds", ShortQuote(f[0]), minCPUQuota)
	}
	if len(f) == 2 {
		if period, err = strconv.ParseInt(f[1], 10, 64); err != nil || period < minCPUPeriod || period > maxCPUPeriod {
			return 0, 0, fmt.Errorf("has period %s: want %d-%d microseconds", ShortQuote(f[1]), minCPUPeriod, maxCPUPeriod)
		}
	}
	return quota, period, nil
}

// agree sets *field to v unless the field already asks for something
// else: a request saying two things is refused rather than guessed at.
func agree(field *int64, v int64, name string) error {
	if *field != 0 && *field != v {
		return fmt.Errorf("contradicts %s %d", name, *field)
	}
	*field = v
	return nil
}

func agreeString(field *string, v, name string) error {
	if *field != "" && *field != v {
		return fmt.Errorf("contradicts %s %s", name, ShortQuote(*field))
	}
	*field = v
	return nil
}

// applyCommon sets the fields that map one to one, the same way for a
// create and an update (CPU, cpusets, pids, reservation):
// 0 is "not set"/"unchanged" for Docker too, and a quota of -1 lifts a
// CFS limit (Docker hands it to runc, which writes the kernel's "no
// limit").
func (q *ResourceRequest) applyCommon(r *container.Resources) {
	r.CPUShares, r.CPUPeriod, r.CPUQuota = q.cpuShares, q.cpuPeriod, q.cpuQuota
	r.CpusetCpus, r.CpusetMems = q.cpusetCpus, q.cpusetMems
	r.PidsLimit = q.pids
	r.MemoryReservation = q.reservation
}

// ApplyCreate sets Docker's resources for a new container. Memory and
// swap follow Docker's rules: MemorySwap is memory+swap, -1 for no swap
// limit, and needs a memory limit; with a memory limit and MemorySwap 0
// Docker would pick twice the memory, which no CRI request means.
func (q *ResourceRequest) ApplyCreate(r *container.Resources) error {
	q.applyCommon(r)
	mem := max(q.memory, 0) // -1: no limit, Docker's default
	switch {
	case q.memsw > 0:
		if mem == 0 {
			return crirpc.InvalidArgf("memory_swap_limit_in_bytes %d needs memory_limit_in_bytes: Docker limits memory+swap only together with memory", q.memsw)
		}
		r.Memory, r.MemorySwap = mem, q.memsw
	case q.swapSet && q.swap >= 0:
		return q.setSwap(r, mem)
	case mem > 0:
		// No swap limit of its own (swap not asked, or unlimited).
		r.Memory, r.MemorySwap = mem, -1
	}
	return nil
}

// ApplyUpdate sets what an update changes. cur is the container's current
// limits (as ResourcesFromHostConfig reports them): a memory limit of 0
// in the request leaves the memory limit as it is, as Docker, runc and
// crictl read it, but a swap request still needs it (runc derives cgroup
// v2's swap limit from memory+swap minus memory).
//
// Docker passes MemorySwap to runc only when positive: -1 would leave the
// kernel's swap limit as it is, so a lifted swap limit is
// DockerNoMemoryLimit.
func (q *ResourceRequest) ApplyUpdate(r *container.Resources, cur *runtimeapi.LinuxContainerResources) error {
	q.applyCommon(r)
	swapUnlimited := q.memsw == -1 || (q.swapSet && q.swap == -1)
	if q.memory == 0 && q.memsw == 0 && !q.swapSet {
		return nil
	}
	mem := q.memory
	if mem == 0 {
		mem = cur.GetMemoryLimitInBytes()
	}
	if mem <= 0 {
		// No memory limit, asked (a lift) or kept. Docker refuses -1, so
		// the limit is the kernel's maximum.
		switch {
		case q.memsw > 0:
			return crirpc.InvalidArgf("memory_swap_limit_in_bytes %d needs a memory limit: Docker limits memory+swap only together with memory", q.memsw)
		case q.swapSet && q.swap >= 0:
			return q.setSwap(r, 0)
		case swapUnlimited:
			r.Memory, r.MemorySwap = DockerNoMemoryLimit-maxSwapBytes, DockerNoMemoryLimit
		default:
			// As runc does for a memory limit of -1: swap is lifted
			// with it (on cgroup v1 a swap limit below the memory limit
			// would make the kernel refuse the new one).
			r.Memory, r.MemorySwap = DockerNoMemoryLimit, DockerNoMemoryLimit
		}
		return nil
	}
	switch {
	case q.memsw > 0:
		if q.memsw < mem {
			return crirpc.InvalidArgf("memory_swap_limit_in_bytes %d is below the memory limit %d (it counts memory plus swap)", q.memsw, mem)
		}
		r.Memory, r.MemorySwap = mem, q.memsw
	case q.swapSet && q.swap >= 0:
		return q.setSwap(r, mem)
	case swapUnlimited:
		r.Memory, r.MemorySwap = mem, DockerNoMemoryLimit
	default:
		// Swap not asked: the container keeps the swap it has, so its
		// memory+swap moves with the memory (runc keeps the old one
		// otherwise, below a raised memory limit: the kernel refuses).
		// Without a swap limit, -1 keeps Docker from refusing a memory
		// limit above the MemorySwap it has recorded.
		r.Memory, r.MemorySwap = mem, -1
		if cm, cs := cur.GetMemoryLimitInBytes(), cur.GetMemorySwapLimitInBytes(); cm > 0 && cs >= cm && cs-cm <= maxSwapBytes && mem <= math.MaxInt64-(cs-cm) {
			r.MemorySwap = mem + (cs - cm)
		}
	}
	return nil
}

// setSwap sets a swap limit of q.swap bytes (cgroup v2's memory.swap.max)
// on top of a memory limit of mem bytes (0: none).
func (q *ResourceRequest) setSwap(r *container.Resources, mem int64) error {
	if mem == 0 {
		// Docker needs a memory limit to limit swap: the kernel's maximum
		// less the swap, which runc subtracts again.
		r.Memory, r.MemorySwap = DockerNoMemoryLimit-q.swap, DockerNoMemoryLimit
		return nil
	}
	if mem > math.MaxInt64-q.swap {
		return crirpc.InvalidArgf("memory limit %d plus swap %d overflows", mem, q.swap)
	}
	r.Memory, r.MemorySwap = mem, mem+q.swap
	return nil
}

// WarnSkipped reports, in one line, what of a request Docker cannot set.
func WarnSkipped(container, action string, skipped []string) {
	if len(skipped) == 0 {
		return
	}
	klog.InfoS("WARNING: Docker has no setting for these cgroup resources; they are not applied", "container", container, "request", action, "skipped", skipped)
}

// ResourcesFromHostConfig is the CRI view of a container's Docker limits.
func ResourcesFromHostConfig(hc *container.HostConfig) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{
		CpuPeriod:          hc.CPUPeriod,
		CpuQuota:           hc.CPUQuota,
		CpuShares:          hc.CPUShares,
		MemoryLimitInBytes: reportedMemory(hc.Memory),
		OomScoreAdj:        int64(hc.OomScoreAdj),
		CpusetCpus:         hc.CpusetCpus,
		CpusetMems:         hc.CpusetMems,
	}
	// -1 (and DockerNoMemoryLimit) is how netshim asks Docker for "no
	// swap limit of its own"; the CRI says that with 0.
	r.MemorySwapLimitInBytes = reportedMemory(hc.MemorySwap)
	return r
}

// reportedMemory is the CRI view of a Docker memory limit: netshim's
// stand-ins for "none" are reported as none (0).
func reportedMemory(v int64) int64 {
	if v < 0 || v >= noMemoryLimitFloor {
		return 0
	}
	return v
}
