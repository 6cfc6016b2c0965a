package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/netshim/netshim/test/harness"
)

const (
	// bridgeConfName is the bridge chain's file in the shared conf dir.
	bridgeConfName = "10-nsbench.conflist"
	// slowConfName sorts before bridgeConfName: while it is present the
	// netshims use it (the first file in lexical order is the default
	// network), and removing it brings the bridge chain back.
	slowConfName = "05-nsbench-slow.conflist"
	// reloadTimeout bounds the wait for a netshim to take a changed
	// conf dir (it reacts within a fraction of a second).
	reloadTimeout = 30 * time.Second
)

// slowConfList is the bridge chain with the cni-sleep plugin appended,
// its ADD sleeping for sleep: the same network, made slower by a plugin
// that stands for one waiting on a datastore or an agent.
func slowConfList(base []byte, pluginType string, sleep time.Duration) ([]byte, error) {
	var list map[string]any
	if err := json.Unmarshal(base, &list); err != nil {
		return nil, fmt.Errorf("decoding the bench network: %w", err)
	}
	plugins, ok := list["plugins"].([]any)
	if !ok || len(plugins) == 0 {
		return nil, errors.New("the bench network has no plugins")
	}
	list["plugins"] = append(plugins, map[string]any{"type": pluginType, "sleep": sleep.String()})
	return json.MarshalIndent(list, "", "  ")
}

// switchChain makes the netshims and the floor use the slow chain (slow)
// or the bridge chain, and waits until every running netshim has logged
// that it loaded it.
func (b *bench) switchChain(ctx context.Context, slow bool) error {
	confDir := filepath.Join(b.dir, "net.d")
	slowPath := filepath.Join(confDir, slowConfName)
	want, list := filepath.Join(confDir, bridgeConfName), b.confList
	if slow {
		want, list = slowPath, b.slowList
	}
	offsets := map[*instance]int64{}
	for _, in := range b.running() {
		st, err := os.Stat(in.netshim.LogPath)
		if err != nil {
			return err
		}
		offsets[in] = st.Size()
	}
	if slow {
		// Written aside and renamed, so that no netshim reads half a
		// file (a .tmp is not a network config).
		tmp := slowPath + ".tmp"
		if err := os.WriteFile(tmp, list, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, slowPath); err != nil {
			return err
		}
	} else if err := os.Remove(slowPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := b.floor.setNetwork(list); err != nil {
		return err
	}
	for in, off := range offsets {
		var lerr error
		if !harness.EventuallyCtx(ctx, reloadTimeout, func() bool {
			ok, err := loggedConfigSince(in.netshim.LogPath, off, want)
			lerr = err
			return ok
		}) {
			return errors.Join(fmt.Errorf("the %s netshim did not log loading %s within %s (its log: %s)", in.name, want, reloadTimeout, in.netshim.LogPath), lerr, ctx.Err())
		}
	}
	return nil
}

// loggedConfigSince says whether the netshim log at path, from offset on,
// has netshim's line for taking confPath as its network.
func loggedConfigSince(path string, offset int64, confPath string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return false, err
	}
	want := `path="` + confPath + `"`
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.Contains(line, `"Using CNI network config"`) && strings.Contains(line, want) {
			return true, nil
		}
	}
	return false, s.Err()
}

// running are the netshims of the run that are up.
func (b *bench) running() []*instance {
	var out []*instance
	for _, in := range b.instances() {
		if in.netshim.Running() {
			out = append(out, in)
		}
	}
	return out
}

// scenarioSlowChain repeats the sequential rounds on the slow chain, then
// puts the bridge chain back for the scenarios after it. If it cannot,
// the run stops: they would measure the slow chain.
func scenarioSlowChain(ctx context.Context, b *bench) (err error) {
	if b.slowList == nil {
		fmt.Println("   left out (--slow-chain-sleep 0)")
		return nil
	}
	// Deferred before the switch: a switch that failed half-way is
	// undone too.
	defer func() {
		if rerr := b.switchChain(ctx, false); rerr != nil {
			b.broken = "the bridge chain could not be put back after the slow-chain rounds: " + oneLine(rerr)
			err = errors.Join(err, rerr)
		}
	}()
	if err := b.switchChain(ctx, true); err != nil {
		return err
	}
	s, err := b.sequentialRounds(ctx, "slow", b.roundKinds(false))
	if err != nil {
		return err
	}
	b.reportChain(s, "slow", fmt.Sprintf("slow chain (+ %s, ADD sleeps %s)", filepath.Base(b.opts.cniSleep), b.opts.slowSleep))
	return nil
}

// scenarioStopModes stops the pinned- and pause-less-mode netshims once
// the sequential rounds are done, so that the scenarios after them run
// with one netshim on the engine, as before there were several modes (the
// others' events watches follow every netshim pod and would weigh on
// them).
func scenarioStopModes(ctx context.Context, b *bench) error {
	var errs []error
	for _, in := range []*instance{b.pinned, b.pauseless} {
		if in == nil || !in.netshim.Running() {
			continue
		}
		errs = append(errs, in.removeAllPods(ctx, b.runID), in.stop())
	}
	return errors.Join(errs...)
}
