package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// countingProxy serves the Docker API on a unix socket of its own and
// forwards every request to the real engine, logging each by kind
// ("GET /containers/{id}/json") and object. The events stream is counted
// apart: it is one long-lived request, not load.
type countingProxy struct {
	path string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	mu           sync.Mutex
	log          []request
	eventsOpened int
	eventsOpen   int
	errors       int
}

// request is one forwarded request other than the events stream.
type request struct {
	at     time.Time
	kind   string
	object string // the container (or other object) ID or name in the path, if any
}

// eventsKind is the kind of the Docker events stream.
const eventsKind = "GET /events"

// startProxy listens on path and forwards to the engine on upstream (a
// unix socket path).
func startProxy(path, upstream string) (*countingProxy, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	p := &countingProxy{path: path, ln: ln, done: make(chan struct{})}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", upstream)
		},
		MaxIdleConns:        128,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "docker"
			pr.Out.Host = pr.In.Host
		},
		Transport: transport,
		// Flush every write at once: /events and pull progress stream.
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// A client that went away (netshim stopping its events
			// stream) is not a proxy error.
			if !errors.Is(err, context.Canceled) {
				p.mu.Lock()
				p.errors++
				p.mu.Unlock()
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			kind, object := requestKind(r.Method, r.URL.Path)
			p.mu.Lock()
			if kind == eventsKind {
				p.eventsOpened++
				p.eventsOpen++
			} else {
				p.log = append(p.log, request{time.Now(), kind, object})
			}
			p.mu.Unlock()
			if kind == eventsKind {
				defer func() {
					p.mu.Lock()
					p.eventsOpen--
					p.mu.Unlock()
				}()
			}
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// close stops serving, cutting open streams, and removes the socket.
func (p *countingProxy) close() {
	_ = p.srv.Close()
	<-p.done
	_ = os.Remove(p.path)
}

// writeLog writes every request forwarded (not the events stream), one a
// line: milliseconds since start, kind, object.
func (p *countingProxy) writeLog(w io.Writer, start time.Time) error {
	p.mu.Lock()
	reqs := slices.Clone(p.log)
	p.mu.Unlock()
	bw := bufio.NewWriter(w)
	for _, r := range reqs {
		fmt.Fprintf(bw, "%10.3f %s %s\n", float64(r.at.Sub(start))/float64(time.Millisecond), r.kind, r.object)
	}
	return bw.Flush()
}

// mark is a moment of the proxy's log.
type mark struct {
	n            int // requests logged
	eventsOpened int // events streams opened
	eventsOpen   int // events streams open
	errors       int
}

func (p *countingProxy) mark() mark {
	p.mu.Lock()
	defer p.mu.Unlock()
	return mark{n: len(p.log), eventsOpened: p.eventsOpened, eventsOpen: p.eventsOpen, errors: p.errors}
}

// requestCounts are the requests made between two marks. Those about an
// object that foreign says is not ours (e.g. inspects of containers of
// another netshim on the same engine, which netshim's events watch sees
// too) are counted apart.
type requestCounts struct {
	byKind  map[string]int
	foreign map[string]int
}

func (p *countingProxy) between(from, to mark, foreign func(object string) bool) requestCounts {
	p.mu.Lock()
	reqs := slices.Clone(p.log[from.n:to.n])
	p.mu.Unlock()
	c := requestCounts{byKind: map[string]int{}, foreign: map[string]int{}}
	for _, r := range reqs {
		if r.object != "" && foreign != nil && foreign(r.object) {
			c.foreign[r.kind]++
		} else {
			c.byKind[r.kind]++
		}
	}
	return c
}

// add accumulates o into c.
func (c *requestCounts) add(o requestCounts) {
	if c.byKind == nil {
		c.byKind = map[string]int{}
		c.foreign = map[string]int{}
	}
	for k, v := range o.byKind {
		c.byKind[k] += v
	}
	for k, v := range o.foreign {
		c.foreign[k] += v
	}
}

func (c requestCounts) foreignTotal() int {
	n := 0
	for _, v := range c.foreign {
		n += v
	}
	return n
}

// total is the number of requests about this run's objects (or none).
func (c requestCounts) total() int {
	n := 0
	for _, v := range c.byKind {
		n += v
	}
	return n
}

type kindCount struct {
	kind  string
	count int
}

// top returns the request kinds, most frequent first (ties by name).
func (c requestCounts) top() []kindCount {
	out := make([]kindCount, 0, len(c.byKind))
	for k, v := range c.byKind {
		out = append(out, kindCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].count != out[j].count {
			return out[i].count > out[j].count
		}
		return out[i].kind < out[j].kind
	})
	return out
}

var apiVersionPrefix = regexp.MustCompile(`^/v[0-9]+\.[0-9]+/`)

// Path segments that name an operation on a whole collection, not an object.
var collectionOps = map[string]bool{"json": true, "create": true, "prune": true, "load": true, "search": true, "get": true}

// Trailing operations on an image, whose name may contain slashes.
var imageOps = map[string]bool{"json": true, "history": true, "push": true, "tag": true, "get": true}

// requestKind maps a request to its API pattern and the object it is
// about: the version prefix and the query are dropped and object IDs and
// names replaced by {id} or {name}, so that requests of the same kind are
// counted together.
func requestKind(method, path string) (kind, object string) {
	path = apiVersionPrefix.ReplaceAllString(path, "/")
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) >= 2 && !collectionOps[segs[1]] {
		switch segs[0] {
		case "containers", "networks", "volumes", "exec", "plugins", "secrets", "configs", "services", "nodes", "tasks":
			object = segs[1]
			segs[1] = "{id}"
		case "images", "distribution":
			last := segs[len(segs)-1]
			if len(segs) > 2 && imageOps[last] {
				object = strings.Join(segs[1:len(segs)-1], "/")
				segs = []string{segs[0], "{name}", last}
			} else {
				object = strings.Join(segs[1:], "/")
				segs = []string{segs[0], "{name}"}
			}
		}
	}
	return method + " /" + strings.Join(segs, "/"), object
}
