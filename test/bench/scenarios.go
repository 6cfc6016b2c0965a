package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// scenarios is the bench, in the order it runs. The item numbers in the
// table are those of the issues. Scenarios that need pods go after
// populate, which leaves b.population running until depopulate; the one
// that adds a container to each pod comes after the pod-only figures so
// that those stay comparable between runs. The pinned- and pause-less-mode
// netshims take part in the sequential rounds only (both chains), and are
// stopped after them.
func scenarios() []scenario {
	return []scenario{
		{"netshim RSS before any pod", scenarioIdleRSS},
		{"sequential RunPodSandbox/Stop/Remove, interleaved with the floor", scenarioSequential},
		{"sequential RunPodSandbox on the slow chain, interleaved with the floor", scenarioSlowChain},
		{"stop the pinned- and pause-less-mode netshims", scenarioStopModes},
		{"concurrent RunPodSandbox, then concurrent Stop+Remove", scenarioConcurrent},
		{"create the pods that stay present", scenarioPopulate},
		{"ListPodSandbox/PodSandboxStatus/Status latency with the pods present", scenarioReadLatency},
		{"Docker requests while idle with the pods present", scenarioIdleDocker},
		{"netshim RSS with the pods present", scenarioRSSWithPods},
		{"ListPodSandboxStats/ListContainerStats with one running container per pod", scenarioStatsWithContainers},
		{"remove the pods", scenarioDepopulate},
	}
}

func scenarioIdleRSS(ctx context.Context, b *bench) error {
	if err := sleepCtx(ctx, time.Second); err != nil {
		return err
	}
	rss, err := rssBytes(b.netshim.Pid())
	if err != nil {
		return err
	}
	b.report.add("5", "netshim RSS, idle, no pods", fmtBytes(rss))
	return nil
}

// scenarioSequential makes --seq rounds on the bridge chain of one pod of
// each kind: the default-mode netshim, the pinned- and pause-less-mode
// ones (when measured), the floor with and without loopback
// (sequentialRounds). The
// rows of items 1 and 6 are the default-mode netshim's.
func scenarioSequential(ctx context.Context, b *bench) error {
	s, err := b.sequentialRounds(ctx, "seq", b.roundKinds(true))
	if err != nil {
		return err
	}
	run, stopRemove := s.run[kindNetshim], s.down[kindNetshim]
	floorRun, floorDown := s.run, s.down
	runReqs, downReqs := s.runReqs[kindNetshim], s.downReqs[kindNetshim]
	n := len(run)
	r := b.report
	r.durs["run.p50"] = percentile(run, 50)
	r.durs["stopremove.p50"] = percentile(stopRemove, 50)
	r.durs["floor.lo.p50"] = percentile(floorRun[kindFloorLo], 50)
	r.durs["floor.nolo.p50"] = percentile(floorRun[kindFloorNoLo], 50)
	r.durs["teardown.lo.p50"] = percentile(floorDown[kindFloorLo], 50)
	r.durs["teardown.nolo.p50"] = percentile(floorDown[kindFloorNoLo], 50)

	r.add("1", fmt.Sprintf("RunPodSandbox p50 / p90 (%d sequential)", n), p50p90(run))
	r.add("1", "StopPodSandbox p50", fmtDur(percentile(s.stop[kindNetshim], 50)))
	r.add("1", "RemovePodSandbox p50", fmtDur(percentile(s.remove[kindNetshim], 50)))
	r.add("1", "Stop+Remove p50 (per pod, Stop then Remove)", fmtDur(percentile(stopRemove, 50)))
	r.add("1", "Docker requests per RunPodSandbox", fmt.Sprintf("%s: %s", perOp(runReqs.total(), n), fmtKinds(runReqs, n)))
	r.add("1", "Docker requests per Stop+Remove", fmt.Sprintf("%s: %s", perOp(downReqs.total(), n), fmtKinds(downReqs, n)))
	b.noteForeign("during the sequential RunPodSandbox calls", runReqs)
	b.noteForeign("during the sequential Stop+Remove calls", downReqs)
	r.add("6", "Floor: create+start+inspect, loopback ADD + ADD, p50 / p90", p50p90(floorRun[kindFloorLo]))
	r.add("6", "Floor without loopback: create+start+inspect + ADD, p50 / p90", p50p90(floorRun[kindFloorNoLo]))
	r.add("6", "Teardown floor: DEL + loopback DEL + remove -f, p50 / p90", p50p90(floorDown[kindFloorLo]))
	r.add("6", "Teardown floor without loopback: DEL + remove -f, p50 / p90", p50p90(floorDown[kindFloorNoLo]))
	r.add("1/6", "RunPodSandbox p50 / floor p50", fmt.Sprintf("%s (floor with loopback), %s (without)",
		ratio(r.durs["run.p50"], r.durs["floor.lo.p50"]), ratio(r.durs["run.p50"], r.durs["floor.nolo.p50"])))
	r.add("1/6", "  median of the per-round ratios (paired, same round)", fmt.Sprintf("%s (floor with loopback), %s (without)",
		pairedRatio(run, floorRun[kindFloorLo]), pairedRatio(run, floorRun[kindFloorNoLo])))
	r.add("1/6", "Stop+Remove p50 / teardown floor p50", fmt.Sprintf("%s (floor with loopback), %s (without)",
		ratio(r.durs["stopremove.p50"], r.durs["teardown.lo.p50"]), ratio(r.durs["stopremove.p50"], r.durs["teardown.nolo.p50"])))
	r.add("1/6", "  median of the per-round ratios (paired, same round)", fmt.Sprintf("%s (floor with loopback), %s (without)",
		pairedRatio(stopRemove, floorDown[kindFloorLo]), pairedRatio(stopRemove, floorDown[kindFloorNoLo])))

	b.reportMode(s, kindPinned, "Pinned mode")
	b.reportMode(s, kindPauseless, "Pauseless mode")
	b.reportChain(s, "bridge", "bridge chain")
	return nil
}

// reportMode adds the rows of item 13 for the netshim of kind k (pinned,
// pauseless) from the bridge chain's rounds, if it took part: its
// RunPodSandbox and Stop+Remove, their Docker requests, and its teardown
// against the floor's.
func (b *bench) reportMode(s *seqSamples, k podKind, label string) {
	if !s.has(k) {
		return
	}
	r := b.report
	run, down := s.run[k], s.down[k]
	runReqs, downReqs := s.runReqs[k], s.downReqs[k]
	r.add("13", fmt.Sprintf("%s: RunPodSandbox p50 / p90 (%d sequential)", label, len(run)), p50p90(run))
	r.add("13", label+": Stop+Remove p50 / p90", p50p90(down))
	r.add("13", label+": Docker requests per RunPodSandbox", fmt.Sprintf("%s: %s", perOp(runReqs.total(), len(run)), fmtKinds(runReqs, len(run))))
	r.add("13", label+": Docker requests per Stop+Remove", fmt.Sprintf("%s: %s", perOp(downReqs.total(), len(run)), fmtKinds(downReqs, len(run))))
	r.add("13", label+": Stop+Remove p50 / teardown floor p50", fmt.Sprintf("%s (paired: %s)",
		ratio(percentile(down, 50), r.durs["teardown.lo.p50"]), pairedRatio(down, s.down[kindFloorLo])))
	name := b.instanceOf(k).name
	b.noteForeign("during the "+name+" netshim's sequential RunPodSandbox calls", runReqs)
	b.noteForeign("during the "+name+" netshim's sequential Stop+Remove calls", downReqs)
}

func p50p90(s []time.Duration) string {
	return fmtDur(percentile(s, 50)) + " / " + fmtDur(percentile(s, 90))
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

// pairedRatio is the median of a[i]/b[i]: samples i of a and b were taken
// in the same round, so drift over the run cancels out.
func pairedRatio(a, b []time.Duration) string {
	if len(a) != len(b) || len(a) == 0 {
		return "n/a"
	}
	rs := make([]float64, 0, len(a))
	for i := range a {
		if b[i] > 0 {
			rs = append(rs, float64(a[i])/float64(b[i]))
		}
	}
	if len(rs) == 0 {
		return "n/a"
	}
	slices.Sort(rs)
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return fmt.Sprintf("%.2f×", m)
}

func perOp(n, ops int) string {
	if ops == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3g", float64(n)/float64(ops))
}

// scenarioConcurrent issues --concurrent RunPodSandbox calls at once and
// then their Stop+Remove at once, and reports the wall time of each burst.
func scenarioConcurrent(ctx context.Context, b *bench) error {
	n := b.opts.concurrent
	cfgs := make([]*runtimeapi.PodSandboxConfig, n)
	for i := range cfgs {
		cfgs[i] = b.podConfig(b.nextPodName("conc"))
	}
	ids := make([]string, n)
	errs := make([]error, n)
	wall := burst(n, func(i int) {
		ids[i], _, errs[i] = b.runPod(ctx, cfgs[i])
	})
	runErr := errors.Join(errs...)
	if runErr == nil {
		b.report.add("2", fmt.Sprintf("%d concurrent RunPodSandbox, wall time", n), fmtDur(wall))
	}

	var made []int
	for i, id := range ids {
		if id != "" {
			made = append(made, i)
		}
	}
	downErrs := make([]error, len(made))
	wall = burst(len(made), func(j int) {
		id := ids[made[j]]
		if _, err := b.stopPod(ctx, id); err != nil {
			downErrs[j] = err
			return
		}
		_, downErrs[j] = b.removePod(ctx, id)
	})
	downErr := errors.Join(downErrs...)
	if runErr == nil && downErr == nil {
		b.report.add("2", fmt.Sprintf("%d concurrent Stop+Remove, wall time", n), fmtDur(wall))
	}
	return errors.Join(runErr, downErr)
}

// burst runs f(0..n-1) in n goroutines released together and returns the
// wall time until the last one is done.
func burst(n int, f func(i int)) time.Duration {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	t := time.Now()
	close(start)
	wg.Wait()
	return time.Since(t)
}

func scenarioPopulate(ctx context.Context, b *bench) error {
	n := b.opts.pods
	ids := make([]string, n)
	cfgs := make([]*runtimeapi.PodSandboxConfig, n)
	t := time.Now()
	err := forEach(indices(n), b.opts.populateConc, func(i int) error {
		cfgs[i] = b.podConfig(b.nextPodName("pop"))
		id, _, err := b.runPod(ctx, cfgs[i])
		ids[i] = id
		return err
	})
	wall := time.Since(t)
	for i, id := range ids {
		if id != "" {
			b.population = append(b.population, id)
			b.popConfigs[id] = cfgs[i]
		}
	}
	if err != nil {
		return err
	}
	b.report.add("3", fmt.Sprintf("Creating the %d pods (%d at a time), wall time", n, b.opts.populateConc), fmtDur(wall))
	return nil
}

// scenarioReadLatency times the reads kubelet polls, with the pods present:
// ListPodSandbox unfiltered (kubelet's relist), PodSandboxStatus of each
// pod in turn, Status, and ListPodSandboxStats unfiltered (kubelet's
// summary with the PodAndContainerStatsFromCRI gate).
func scenarioReadLatency(ctx context.Context, b *bench) error {
	if len(b.population) == 0 {
		return errors.New("no pods present (populate failed)")
	}
	calls := b.opts.calls
	var last *runtimeapi.ListPodSandboxResponse
	list := func(ctx context.Context) error {
		r, err := b.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err == nil {
			last = r
		}
		return err
	}
	i := 0
	status := func(ctx context.Context) error {
		id := b.population[i%len(b.population)]
		i++
		_, err := b.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		return err
	}
	var raw rawAnswer
	listRaw := func(ctx context.Context) error {
		return b.conn.Invoke(ctx, runtimeapi.RuntimeService_ListPodSandbox_FullMethodName, &runtimeapi.ListPodSandboxRequest{}, &raw, grpc.ForceCodec(rawCodec{}))
	}
	rtStatus := func(ctx context.Context) error {
		_, err := b.rt.Status(ctx, &runtimeapi.StatusRequest{})
		return err
	}
	// The bench's pods have no workload container: this reads each
	// infra container's cgroup, its pod cgroup and its netns's counters.
	podStats := func(ctx context.Context) error {
		r, err := b.rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
		if err == nil && len(r.GetStats()) < len(b.population) {
			err = fmt.Errorf("listed %d pods, want at least %d", len(r.GetStats()), len(b.population))
		}
		return err
	}

	for _, m := range []struct {
		key, name string
		calls     int
		f         func(context.Context) error
	}{
		{"list", "ListPodSandbox", calls, list},
		{"listraw", "ListPodSandbox, answer not decoded", calls, listRaw},
		{"status", "PodSandboxStatus", calls, status},
		{"rtstatus", "Status", max(calls/10, 10), rtStatus},
		{"podstats", "ListPodSandboxStats", max(calls/10, 10), podStats},
	} {
		samples, reqs, err := b.timeCalls(ctx, m.calls, m.f)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		p50, p99 := percentile(samples, 50), percentile(samples, 99)
		b.report.durs[m.key+".p50"] = p50
		b.report.durs[m.key+".p99"] = p99
		what := fmt.Sprintf("%s p50 / p99 (%d pods, %d calls)", m.name, len(b.population), m.calls)
		if m.key == "listraw" {
			what = fmt.Sprintf("ListPodSandbox p50 / p99, answer kept as bytes: netshim + gRPC only (%d calls)", m.calls)
		}
		if m.key == "list" {
			what = fmt.Sprintf("ListPodSandbox p50 / p99 (%d pods, %d calls, %d items listed)", len(b.population), m.calls, len(last.GetItems()))
		}
		b.report.add("3", what, fmtDur(p50)+" / "+fmtDur(p99))
		if m.key == "list" {
			size, decode, err := decodeCost(last)
			if err != nil {
				return err
			}
			b.report.add("3", fmt.Sprintf("  decoding the %d-byte answer in the bench, p50 (measured apart)", size), fmtDur(decode))
		}
		if m.key != "listraw" {
			b.report.add("3", "Docker requests per "+m.name, fmt.Sprintf("%s: %s", perOp(reqs.total(), m.calls), fmtKinds(reqs, m.calls)))
		}
		b.noteForeign("during the "+m.name+" calls", reqs)
	}
	return nil
}

// decodeCost is what the client side of a ListPodSandbox costs the bench
// itself: the size of the answer and the p50 time to unmarshal it. It is
// part of every ListPodSandbox latency above, on the same two cores.
func decodeCost(r *runtimeapi.ListPodSandboxResponse) (int, time.Duration, error) {
	data, err := proto.Marshal(r)
	if err != nil {
		return 0, 0, err
	}
	samples := make([]time.Duration, 0, 200)
	for range 200 {
		var out runtimeapi.ListPodSandboxResponse
		t := time.Now()
		if err := proto.Unmarshal(data, &out); err != nil {
			return 0, 0, err
		}
		samples = append(samples, time.Since(t))
	}
	return len(data), percentile(samples, 50), nil
}

// scenarioIdleDocker counts the Docker requests netshim makes while a
// client relists once a second, as kubelet does at the least.
func scenarioIdleDocker(ctx context.Context, b *bench) error {
	if err := sleepCtx(ctx, time.Second); err != nil {
		return err
	}
	before := b.proxy.mark()
	start := time.Now()
	lists := 0
	for t := time.Duration(0); t < b.opts.idle; t += time.Second {
		if err := sleepCtx(ctx, time.Until(start.Add(t))); err != nil {
			return err
		}
		if _, err := b.call(ctx, func(ctx context.Context) error {
			_, err := b.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		}); err != nil {
			return fmt.Errorf("ListPodSandbox: %w", err)
		}
		lists++
	}
	if err := sleepCtx(ctx, time.Until(start.Add(b.opts.idle))); err != nil {
		return err
	}
	elapsed := time.Since(start)
	reqs := b.requestsSince(before)
	rps := float64(reqs.total()) / elapsed.Seconds()
	b.report.nums["idle.rps"] = rps
	kinds := "none"
	if reqs.total() > 0 {
		kinds = fmtKinds(reqs, 1) + fmt.Sprintf(" in %s", elapsed.Round(100*time.Millisecond))
	}
	b.report.add("4", fmt.Sprintf("Docker requests/s while idle, %d pods, ListPodSandbox every 1 s (%d calls), events stream excluded", len(b.population), lists),
		fmt.Sprintf("%.2f/s: %s", rps, kinds))
	b.noteForeign("while idle", reqs)
	total := b.proxy.mark()
	b.report.add("4", "Docker events streams: open now / opened since netshim started", fmt.Sprintf("%d / %d", total.eventsOpen, total.eventsOpened))
	return nil
}

func scenarioRSSWithPods(_ context.Context, b *bench) error {
	rss, err := rssBytes(b.netshim.Pid())
	if err != nil {
		return err
	}
	b.report.add("5", fmt.Sprintf("netshim RSS with %d pods, after the reads", len(b.population)), fmtBytes(rss))
	return nil
}

func scenarioDepopulate(ctx context.Context, b *bench) error {
	ids := b.population
	t := time.Now()
	err := forEach(ids, b.opts.populateConc, func(id string) error {
		if _, err := b.stopPod(ctx, id); err != nil {
			return err
		}
		_, err := b.removePod(ctx, id)
		return err
	})
	if err != nil {
		return err
	}
	what := fmt.Sprintf("Stop+Remove of the %d pods (%d at a time), wall time", len(ids), b.opts.populateConc)
	if len(b.workloads) > 0 {
		what = fmt.Sprintf("Stop+Remove of the %d pods with their running container (%d at a time), wall time", len(ids), b.opts.populateConc)
	}
	b.population = nil
	b.workloads = map[string]string{}
	b.report.add("3", what, fmtDur(time.Since(t)))
	return nil
}
