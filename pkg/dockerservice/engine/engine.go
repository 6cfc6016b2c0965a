package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/docker/docker/api/types/versions"
	"k8s.io/klog/v2"
)

// minAPI is the oldest Docker API netshim is made for (Docker 20.10).
const minAPI = "1.41"

// Engine is the engine netshim talks to: its client, whose calls are the
// engine's (ds.engine.ContainerInspect), and what netshim knows of it.
type Engine struct {
	Client
	// session counts the events streams that synced the index: a
	// dockerd restart starts a new one (settings read of the engine are
	// read again then).
	session atomic.Uint64
	// versions are the engine's version, read when the events stream
	// connects, and the negotiated API version.
	versions engineVersions
	// runtimes caches the engine's runtimes, which runtime handlers name
	// (runtimes.go).
	runtimes *runtimeCatalog
}

// New is the engine behind client, of which nothing is known yet.
func New(client Client) *Engine {
	e := &Engine{Client: client}
	e.runtimes = newRuntimeCatalog(e.readRuntimes)
	return e
}

// Session is the number of the current events session: a value read
// before some settings of the engine and compared after says whether
// dockerd may have restarted meanwhile.
func (e *Engine) Session() uint64 { return e.session.Load() }

// NextSession starts a new session: called when a new events stream has
// synced the index, which may be a new dockerd.
func (e *Engine) NextSession() { e.session.Add(1) }

// Versions are the engine's version and the negotiated API version, ""
// where not known yet.
func (e *Engine) Versions() (engine, api string) { return e.versions.get() }

// SetEngineVersion records the engine's version, which Version reports.
func (e *Engine) SetEngineVersion(v string) { e.versions.setEngine(v) }

// SetAPIVersion records v as the negotiated API version; "" forgets it,
// so that the next request that needs it negotiates again. Tests use it to
// stand for an engine spoken to at v.
func (e *Engine) SetAPIVersion(v string) { e.versions.setAPI(v) }

// Docker reads a request by the API version in its path: from 1.44 a
// read-only bind is recursively read-only unless told otherwise, and a
// field newer than that version is ignored or refused. So what netshim
// asks for depends on the version the client sends, which is the client's
// newest (1.51) until the first request negotiates it down to the
// engine's; before that, or if that first ping failed, ClientVersion()
// says a version the engine may not speak. netshim therefore negotiates
// itself, once when the events stream first connects (and again on each
// reconnect: the engine may have been replaced by an older one), or at the
// first request that needs the version, and keeps the answer.

// Negotiate pings the engine, lowers the client's API version to the
// engine's, and records the result.
func (e *Engine) Negotiate(ctx context.Context) (string, error) {
	ping, err := e.Ping(ctx)
	if err != nil {
		return "", fmt.Errorf("negotiating the Docker API version: %w", err)
	}
	e.NegotiateAPIVersionPing(ping)
	v := e.ClientVersion()
	if changed := e.versions.setAPI(v); changed {
		klog.InfoS("Docker API version negotiated", "apiVersion", v, "engineAPIVersion", ping.APIVersion)
		if versions.LessThan(v, minAPI) {
			klog.InfoS("WARNING: the Docker engine is older than netshim supports; some requests may fail", "apiVersion", v, "minimum", minAPI)
		}
	}
	return v, nil
}

// APIVersion is the negotiated API version, negotiating it if that has
// not been done yet.
func (e *Engine) APIVersion(ctx context.Context) (string, error) {
	if _, v := e.versions.get(); v != "" {
		return v, nil
	}
	return e.Negotiate(ctx)
}

// APIAtLeast reports whether the negotiated API version is want or newer.
// An unknown version ("") counts as old: a newer field sent to an older
// engine is ignored, or refused, rather than obeyed.
func APIAtLeast(apiVersion, want string) bool {
	return apiVersion != "" && !versions.LessThan(apiVersion, want)
}

// engineVersions is what netshim learnt of the engine it talks to: its
// version, which Version reports, and the negotiated API version, which
// decides what netshim asks for. Both are read again when the events
// stream reconnects, as the engine may have been replaced; they have
// their own lock, as they change apart from any other state.
type engineVersions struct {
	mu          sync.Mutex
	engine, api string
}

func (v *engineVersions) get() (engine, api string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.engine, v.api
}

func (v *engineVersions) setEngine(engine string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.engine = engine
}

// setAPI records the negotiated API version and reports whether it
// changed.
func (v *engineVersions) setAPI(api string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	changed := v.api != api
	v.api = api
	return changed
}
