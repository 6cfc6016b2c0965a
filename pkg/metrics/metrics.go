// Package metrics holds netshim's Prometheus metrics: the collectors, the
// methods the daemon's code paths call to feed them, and the HTTP endpoint
// that serves them beside health checks and pprof (server.go).
//
// Every method is safe on a nil *Metrics and then does nothing, so code
// paths and tests built without metrics need no checks of their own.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const namespace = "netshim"

// Buckets for latencies, in seconds. RPCs and Docker calls range from
// sub-millisecond reads answered from memory to image pulls and container
// stops that take minutes; CNI plugins start at a few milliseconds (a fork
// and exec) and may wait for an IPAM datastore.
var (
	callBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	cniBuckets  = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180}
	lagBuckets  = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30}
)

// Metrics are netshim's collectors on their own registry (never the global
// one, so that two daemons in one test process do not collide).
type Metrics struct {
	reg *prometheus.Registry

	rpcDuration    *prometheus.HistogramVec
	cniDuration    *prometheus.HistogramVec
	cniErrors      *prometheus.CounterVec
	dockerDuration *prometheus.HistogramVec
	dockerErrors   *prometheus.CounterVec

	indexEvents  prometheus.Counter
	indexResyncs *prometheus.CounterVec
	indexLag     prometheus.Histogram

	teardownPending  prometheus.Gauge
	gcAttachments    prometheus.Counter
	followerRestarts prometheus.Counter

	states *stateCollector
}

// New builds the collectors and registers them, with the Go runtime's and
// the process's, on a new registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "rpc_duration_seconds",
			Help:    "Latency of CRI RPCs by method and gRPC status code (OK for success).",
			Buckets: callBuckets,
		}, []string{"rpc", "code"}),
		cniDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "cni_operation_duration_seconds",
			Help:    "Latency of CNI operations (ADD, DEL, CHECK, GC, STATUS) by verb and network name, failed ones included.",
			Buckets: cniBuckets,
		}, []string{"verb", "network"}),
		cniErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cni_operation_errors_total",
			Help: "CNI operations that failed, by verb and network name.",
		}, []string{"verb", "network"}),
		dockerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "docker_call_duration_seconds",
			Help:    "Latency of Docker API calls by call (for streams: until the stream is open), failed ones included.",
			Buckets: callBuckets,
		}, []string{"call"}),
		dockerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "docker_call_errors_total",
			Help: "Docker API calls that failed, by call.",
		}, []string{"call"}),
		indexEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "index_events_total",
			Help: "Docker events applied to the container index.",
		}),
		indexResyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "index_resyncs_total",
			Help: "Full resyncs of the container index from a Docker listing, by result (ok, error).",
		}, []string{"result"}),
		indexLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "index_loop_lag_seconds",
			Help:    "Time from a Docker event (its timestamp) to its application to the container index.",
			Buckets: lagBuckets,
		}),
		teardownPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "teardown_retries_pending",
			Help: "Sandboxes whose network teardown the start-up retry has not yet finished.",
		}),
		gcAttachments: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "gc_attachments_total",
			Help: "CNI attachments of sandboxes that no longer exist released by the network GC.",
		}),
		followerRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "log_follower_restarts_total",
			Help: "Restarts of container log followers (the Docker log stream ended or failed while the log was not complete).",
		}),
		states: newStateCollector(),
	}
	m.reg.MustRegister(
		m.rpcDuration, m.cniDuration, m.cniErrors, m.dockerDuration, m.dockerErrors,
		m.indexEvents, m.indexResyncs, m.indexLag,
		m.teardownPending, m.gcAttachments, m.followerRestarts,
		m.states,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Resyncs that never failed still show the series, at 0.
	m.indexResyncs.WithLabelValues("ok")
	m.indexResyncs.WithLabelValues("error")
	return m
}

// Registry is where the collectors are registered, for the HTTP handler
// and tests.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// ObserveRPC records one CRI RPC; code is its gRPC status code's name.
func (m *Metrics) ObserveRPC(rpc, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.rpcDuration.WithLabelValues(rpc, code).Observe(d.Seconds())
}

// ObserveCNI records one CNI operation (verb ADD, DEL, CHECK, GC or STATUS)
// on a network.
func (m *Metrics) ObserveCNI(verb, network string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.cniDuration.WithLabelValues(verb, network).Observe(d.Seconds())
	if err != nil {
		m.cniErrors.WithLabelValues(verb, network).Inc()
	}
}

// ObserveDockerCall records one Docker API call, named as the client
// method (ContainerCreate, ImagePull...).
func (m *Metrics) ObserveDockerCall(call string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.dockerDuration.WithLabelValues(call).Observe(d.Seconds())
	if err != nil {
		m.dockerErrors.WithLabelValues(call).Inc()
	}
}

// IndexEventApplied records one Docker event applied to the index, with
// the event's own time: the difference is the loop's lag. A zero or future
// event time (clock skew) counts the event and no lag.
func (m *Metrics) IndexEventApplied(eventTime, now time.Time) {
	if m == nil {
		return
	}
	m.indexEvents.Inc()
	if !eventTime.IsZero() && !now.Before(eventTime) {
		m.indexLag.Observe(now.Sub(eventTime).Seconds())
	}
}

// IndexResynced records one finished resync of the index.
func (m *Metrics) IndexResynced(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.indexResyncs.WithLabelValues(result).Inc()
}

// AddTeardownPending moves the count of sandboxes waiting for the start-up
// teardown retry by delta (+1 when one starts, -1 when it is done).
func (m *Metrics) AddTeardownPending(delta int) {
	if m == nil {
		return
	}
	m.teardownPending.Add(float64(delta))
}

// GCAttachmentReleased records one attachment the network GC freed.
func (m *Metrics) GCAttachmentReleased() {
	if m == nil {
		return
	}
	m.gcAttachments.Inc()
}

// LogFollowerRestarted records one restart of a container log follower.
func (m *Metrics) LogFollowerRestarted() {
	if m == nil {
		return
	}
	m.followerRestarts.Inc()
}

// SetStateCounts sets what netshim_sandboxes and netshim_containers report:
// fn is called at each scrape, never on a request's path, and returns the
// number of sandboxes and of containers per state name.
func (m *Metrics) SetStateCounts(fn func() (sandboxes, containers map[string]int)) {
	if m == nil {
		return
	}
	m.states.set(fn)
}

// SetModeCounts sets what netshim_sandbox_modes reports: fn is called at
// each scrape and returns the number of sandboxes per mode and reason.
func (m *Metrics) SetModeCounts(fn func() map[SandboxMode]int) {
	if m == nil {
		return
	}
	m.states.setModes(fn)
}
