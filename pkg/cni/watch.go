package cni

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// confLoop keeps the default network in step with ConfDir and the STATUS
// answer in step with the default network. It reacts to fsnotify events
// (debounced), re-reads ConfDir every SyncPeriod in case an event was
// lost, and asks CNI STATUS again on every change and every StatusPeriod.
//
// A conf dir that does not exist yet is not an error: its nearest existing
// ancestor is watched until it appears (Status says "no network config"
// meanwhile), and the same happens if it is removed later.
func (p *Plugin) confLoop(ctx context.Context) {
	w := newDirWatcher(p.opts.ConfDir)
	defer w.close()

	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	// A steady stream of events must not postpone the reload forever:
	// firstEvent bounds the wait at ten debounce periods.
	var firstEvent time.Time
	resync := time.NewTicker(p.opts.SyncPeriod)
	defer resync.Stop()
	statusTick := time.NewTicker(p.opts.StatusPeriod)
	defer statusTick.Stop()

	statusDone := make(chan struct{}, 1)
	statusInFlight := false
	var cancelStatus context.CancelFunc = func() {}
	defer func() { cancelStatus() }()
	// refresh asks STATUS of the current network (and looks at the host
	// firewall), unless an answer for it is on the way. A changed network
	// cancels the question asked of the old one.
	refresh := func(changed bool) {
		if changed {
			cancelStatus()
		} else if statusInFlight {
			return
		}
		var sctx context.Context
		sctx, cancelStatus = context.WithCancel(ctx)
		statusInFlight = true
		p.loops.Add(1)
		go func() {
			defer p.loops.Done()
			p.refreshStatus(sctx, changed)
			select {
			case statusDone <- struct{}{}:
			case <-ctx.Done():
			}
		}()
	}
	reload := func() {
		firstEvent = time.Time{}
		if p.syncNetworkConfig() {
			refresh(true)
		}
	}
	// Init read the dir before the watch existed: read it again, now that
	// no change can be missed.
	p.syncNetworkConfig()
	refresh(true)

	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.events():
			if !ok {
				continue
			}
			if w.handle(ev) {
				// The dir itself appeared or went away: re-read now.
				reload()
				continue
			}
			if firstEvent.IsZero() {
				firstEvent = time.Now()
			}
			d := p.opts.Debounce
			if time.Since(firstEvent)+d > 10*p.opts.Debounce {
				d = 0
			}
			debounce.Reset(d)
		case err, ok := <-w.errors():
			if ok {
				klog.ErrorS(err, "Watching the CNI conf dir; re-reading it", "confDir", p.opts.ConfDir)
				reload()
			}
		case <-debounce.C:
			reload()
		case <-resync.C:
			w.rewatch()
			reload()
		case <-statusTick.C:
			refresh(false)
		case <-statusDone:
			statusInFlight = false
		}
	}
}

// dirWatcher watches a directory that may not exist yet: it watches the
// directory when it exists, else its nearest existing ancestor. When
// fsnotify is unavailable (inotify instances exhausted) it has no events
// and the periodic re-read is all there is.
type dirWatcher struct {
	dir     string
	w       *fsnotify.Watcher
	watched string // the path currently watched: dir or an ancestor
}

func newDirWatcher(dir string) *dirWatcher {
	d := &dirWatcher{dir: filepath.Clean(dir)}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		klog.ErrorS(err, "Cannot watch the CNI conf dir; re-reading it periodically only", "confDir", dir)
		return d
	}
	d.w = w
	d.rewatch()
	return d
}

func (d *dirWatcher) events() <-chan fsnotify.Event {
	if d.w == nil {
		return nil
	}
	return d.w.Events
}

func (d *dirWatcher) errors() <-chan error {
	if d.w == nil {
		return nil
	}
	return d.w.Errors
}

func (d *dirWatcher) close() {
	if d.w != nil {
		d.w.Close()
	}
}

// rewatch watches dir if it exists, else its nearest existing ancestor.
// It repeats until the watched path is stable, so that a subdirectory
// created between two steps is not missed.
func (d *dirWatcher) rewatch() {
	for i := 0; i < 64; i++ {
		before := d.watched
		d.rewatchOnce()
		if d.watched == before || d.watched == d.dir || d.watched == "" {
			return
		}
	}
}

func (d *dirWatcher) rewatchOnce() {
	if d.w == nil {
		return
	}
	target := d.dir
	for {
		if st, err := os.Stat(target); err == nil && st.IsDir() {
			break
		}
		parent := filepath.Dir(target)
		if parent == target {
			return
		}
		target = parent
	}
	if target == d.watched {
		return
	}
	if d.watched != "" {
		// The old watch may be gone with its directory already.
		if err := d.w.Remove(d.watched); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) {
			klog.V(4).InfoS("Removing a CNI conf dir watch", "path", d.watched, "err", err)
		}
	}
	if err := d.w.Add(target); err != nil {
		klog.ErrorS(err, "Cannot watch the CNI conf dir; re-reading it periodically only", "path", target)
		d.watched = ""
		return
	}
	d.watched = target
	if target != d.dir {
		klog.InfoS("CNI conf dir does not exist yet; watching for it", "confDir", d.dir, "watching", target)
	}
}

// handle digests an event and reports whether the watch moved (the conf
// dir, or an ancestor on the way to it, was created or removed), in which
// case the caller re-reads the dir at once.
func (d *dirWatcher) handle(ev fsnotify.Event) bool {
	if d.watched == d.dir && filepath.Clean(ev.Name) != d.dir {
		return false // a file in the conf dir
	}
	before := d.watched
	if filepath.Clean(ev.Name) == d.watched && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		d.watched = "" // inotify dropped the watch with the directory
	}
	d.rewatch()
	return d.watched != before || d.watched == ""
}
