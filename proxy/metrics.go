package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// metrics are the proxy's Prometheus series, registered on the Registerer
// of its Config (never the global one). Labels are bounded: command names
// come from the command tables, anything else is "unknown".
type metrics struct {
	byCmd         map[string]*cmdMetrics // written once in newMetrics, read-only after
	locks         *lockMetrics
	forceReleases prometheus.Counter // LOCKPROXY RELEASE of a held key
}

// alerted are the commands whose series exist from the start, at zero,
// because operators alert on them (rates of errors and TRYAGAIN of the lock
// commands, their latency); every other command's series appear when it is
// first answered, so an idle server's /metrics stays short.
var alerted = []string{"set", "setnx", "get", "del", "pexpire", "eval", "evalsha"}

// cmdMetrics are one command's series, resolved on first use and kept, so
// the hot path does no label lookups after that.
type cmdMetrics struct {
	name     string
	commands *prometheus.CounterVec
	duration *prometheus.HistogramVec
	series   atomic.Pointer[cmdSeries]
}

type cmdSeries struct {
	ok, nilReply, errReply, tryagain prometheus.Counter
	duration                         prometheus.Observer
}

// get returns the command's series, creating them on first use. Two
// connections racing here resolve the same series (the vectors dedupe).
func (cm *cmdMetrics) get() *cmdSeries {
	if s := cm.series.Load(); s != nil {
		return s
	}
	s := &cmdSeries{
		ok:       cm.commands.WithLabelValues(cm.name, "ok"),
		nilReply: cm.commands.WithLabelValues(cm.name, "nil"),
		errReply: cm.commands.WithLabelValues(cm.name, "error"),
		tryagain: cm.commands.WithLabelValues(cm.name, "tryagain"),
		duration: cm.duration.WithLabelValues(cm.name),
	}
	cm.series.Store(s)
	return s
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockproxy_commands_total",
		Help: "Commands answered, by command and outcome (ok, nil, error, tryagain).",
	}, []string{"command", "outcome"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lockproxy_command_duration_seconds",
		Help:    "Time from a command's arrival to its reply, by command.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"command"})
	clients := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockproxy_connected_clients",
		Help: "Client connections open now.",
	}, func() float64 { return float64(s.clientCount()) })
	scripts := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockproxy_script_cache_entries",
		Help: "Scripts in the EVALSHA cache.",
	}, func() float64 { return float64(s.scripts.len()) })
	maxClients := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lockproxy_max_clients",
		Help: "The client connection limit (max-clients); a client beyond it is refused.",
	})
	maxClients.Set(float64(s.cfg.MaxClients))
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockproxy_ready",
		Help: "1 when the backend can serve (what /readyz answers 200 for), 0 when not; asked at each scrape.",
	}, s.ready)
	forced := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lockproxy_force_releases_total",
		Help: "Held locks deleted by LOCKPROXY RELEASE or the admin port's POST /locks/{key}/release.",
	})
	reg.MustRegister(commands, duration, clients, maxClients, ready, scripts, forced)

	m := &metrics{byCmd: map[string]*cmdMetrics{}, locks: newLockMetrics(reg, s.b), forceReleases: forced}
	names := append([]string{"unknown", "passthrough"}, keycmd.Names()...)
	for n := range commandsTable() {
		names = append(names, n)
	}
	for _, n := range names {
		m.byCmd[n] = &cmdMetrics{name: n, commands: commands, duration: duration}
	}
	for _, n := range alerted {
		m.byCmd[n].get()
	}
	return m
}

// ready is lockproxy_ready: 1 when the backend's Check passes within a
// second, as /readyz asks it (a backend without backend.Checker is always
// ready), 0 otherwise. A scrape runs it, so a backend that cannot decide
// costs the scrape that second at most.
func (s *Server) ready() float64 {
	if checkReady(s.ctx, s.b, time.Second) != nil {
		return 0
	}
	return 1
}

// commandsTable lists the proxy's own command names.
func commandsTable() map[string]*connCmd { return commands }

// observe counts one answered command.
func (m *metrics) observe(cmd string, v backend.Value, took time.Duration) {
	cm := m.byCmd[cmd]
	if cm == nil {
		cm = m.byCmd["unknown"]
	}
	s := cm.get()
	switch {
	case v.Kind == backend.KindError && strings.HasPrefix(string(v.Str), "TRYAGAIN"):
		s.tryagain.Inc()
	case v.Kind == backend.KindError:
		s.errReply.Inc()
	case v.IsNil():
		s.nilReply.Inc()
	default:
		s.ok.Inc()
	}
	s.duration.Observe(took.Seconds())
}

// AdminHandler serves /metrics from gatherer, /healthz (the process is
// alive) and /readyz (the backend can serve: a quorum of nodes, the
// database; a backend without backend.Checker is always ready).
func AdminHandler(gatherer prometheus.Gatherer, b backend.Backend) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := checkReady(r.Context(), b, 2*time.Second); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// checkReady asks b whether it can serve, within d: nil when it can, or
// when it has no check (a backend without backend.Checker is always
// ready). /readyz, lockproxy_ready, INFO lockproxy and the status page
// all ask it.
func checkReady(ctx context.Context, b backend.Backend, d time.Duration) error {
	c, ok := b.(backend.Checker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.Check(ctx)
}
