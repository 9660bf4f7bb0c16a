package migrate

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// status is the cutover's progress as the status loop last saw it, and
// the migration's counters. Safe for concurrent use.
type status struct {
	state       atomic.Int32 // stateUnknown until the first read, then stateUp or stateDown
	failed      atomic.Int32 // reads failed in a row
	clients     atomic.Int64 // other clients of the legacy Redis; -1 until first read
	lastCommand atomic.Int64 // Unix ms of the last command a direct client ran; 0: none seen
	polled      atomic.Int64 // Unix ms of the last successful read

	legacyErrors  atomic.Int64 // operations the legacy Redis failed (TRYAGAIN)
	refusedLegacy atomic.Int64 // acquires the legacy Redis refused (held there)
	refusedInner  atomic.Int64 // acquires the legacy Redis granted and the inner backend refused
	undoLegacy    atomic.Int64 // keys removed again from the legacy Redis
	undoInner     atomic.Int64 // keys removed again from the inner backend
	undoFailed    atomic.Int64 // undos that failed (the key stays until its TTL)
}

const (
	stateUnknown int32 = iota
	stateUp            // the last CLIENT LIST succeeded
	stateDown
)

func (s *status) init() { s.clients.Store(-1) }

// up reports whether the last read of CLIENT LIST succeeded.
func (s *status) up() bool { return s.state.Load() == stateUp }

// statusLoop reads the legacy Redis's CLIENT LIST every StatusInterval
// until Close.
func (b *Backend) statusLoop() {
	defer close(b.done)
	t := time.NewTicker(b.cfg.StatusInterval)
	defer t.Stop()
	for {
		b.poll()
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
	}
}

// poll reads CLIENT LIST once and updates the status.
func (b *Backend) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), max(b.cfg.Timeout, time.Second))
	defer cancel()
	go func() { // Close must not wait for a slow legacy Redis
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	list, err := b.client(0).ClientList(ctx).Result()
	if err != nil {
		if b.st.failure() { // logged once per outage, and at start
			b.cfg.Logger.Warn("migrate: the legacy Redis does not answer", "legacy", MaskURL(b.cfg.URL), "err", err)
		}
		return
	}
	if b.st.success() {
		b.cfg.Logger.Info("migrate: the legacy Redis answers", "legacy", MaskURL(b.cfg.URL))
	}
	now := time.Now()
	n, idle := directClients(list, b.cfg.ClientName, b.own.has)
	b.st.clients.Store(n)
	if n > 0 {
		last := now.Add(-time.Duration(idle) * time.Second).UnixMilli()
		if last > b.st.lastCommand.Load() {
			b.st.lastCommand.Store(last)
		}
	}
	b.st.polled.Store(now.UnixMilli())
}

// downAfter is how many reads of CLIENT LIST in a row must fail before the
// legacy Redis is reported down.
const downAfter = 2

// failure records a failed read and reports whether the legacy Redis is
// down from now on: after downAfter failures in a row, or at once before
// any read succeeded. One slow answer does not turn the status red.
func (s *status) failure() bool {
	if s.failed.Add(1) < downAfter && s.state.Load() == stateUp {
		return false
	}
	return s.state.Swap(stateDown) != stateDown
}

// success records a read that succeeded and reports whether the legacy
// Redis was not up before.
func (s *status) success() bool {
	s.failed.Store(0)
	return s.state.Swap(stateUp) != stateUp
}

// directClients counts the clients of a CLIENT LIST reply that are not
// lockproxy's (named name, this instance's and every other instance's; or
// at an address own knows, this instance's connections whose name is not
// set yet) and not replicas or a master link, and returns the smallest
// idle time among them in seconds.
func directClients(list, name string, own func(addr string) bool) (n, minIdle int64) {
	minIdle = -1
	for line := range strings.Lines(list) {
		f := clientFields(line)
		if f["id"] == "" || f["name"] == name || own(f["addr"]) || strings.ContainsAny(f["flags"], "SM") {
			continue
		}
		n++
		if idle, err := strconv.ParseInt(f["idle"], 10, 64); err == nil && (minIdle < 0 || idle < minIdle) {
			minIdle = idle
		}
	}
	return n, max(minIdle, 0)
}

// clientFields splits one CLIENT LIST line into its key=value fields.
func clientFields(line string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// InfoLines implements the proxy's InfoReporter: the inner backend's lines
// and the migration's.
func (b *Backend) InfoLines() []string {
	var lines []string
	if r, ok := b.inner.(interface{ InfoLines() []string }); ok {
		lines = r.InfoLines()
	}
	up := "0"
	if b.st.up() {
		up = "1"
	}
	lines = append(lines,
		"lockproxy_migrate_from:"+MaskURL(b.cfg.URL),
		"lockproxy_migration_legacy_up:"+up,
		"lockproxy_migration_legacy_clients:"+strconv.FormatInt(b.st.clients.Load(), 10),
	)
	if last := b.st.lastCommand.Load(); last > 0 {
		ago := time.Since(time.UnixMilli(last)).Seconds()
		lines = append(lines, "lockproxy_migration_seconds_since_direct_command:"+strconv.FormatInt(int64(ago), 10))
	} else {
		lines = append(lines, "lockproxy_migration_seconds_since_direct_command:-1")
	}
	return append(lines,
		"lockproxy_migration_legacy_errors:"+strconv.FormatInt(b.st.legacyErrors.Load(), 10),
		"lockproxy_migration_refused_by_legacy:"+strconv.FormatInt(b.st.refusedLegacy.Load(), 10),
		"lockproxy_migration_refused_by_backend:"+strconv.FormatInt(b.st.refusedInner.Load(), 10),
		"lockproxy_migration_undone_legacy:"+strconv.FormatInt(b.st.undoLegacy.Load(), 10),
		"lockproxy_migration_undone_backend:"+strconv.FormatInt(b.st.undoInner.Load(), 10),
		"lockproxy_migration_undo_failures:"+strconv.FormatInt(b.st.undoFailed.Load(), 10),
	)
}

// HeldLocks implements the proxy's HeldLocksCounter: the inner backend's
// count (0 when it cannot count). Locks held only on the legacy Redis are
// not counted.
func (b *Backend) HeldLocks() int64 {
	if c, ok := b.inner.(interface{ HeldLocks() int64 }); ok {
		return c.HeldLocks()
	}
	return 0
}

// ExpiredLocks implements the proxy's ExpiryCounter: the inner backend's.
func (b *Backend) ExpiredLocks() uint64 {
	if c, ok := b.inner.(interface{ ExpiredLocks() uint64 }); ok {
		return c.ExpiredLocks()
	}
	return 0
}

var (
	descClients = prometheus.NewDesc("lockproxy_migration_legacy_clients",
		"Clients of the legacy Redis other than lockproxy's own connections, from its CLIENT LIST (-1 before the first read).", nil, nil)
	descLast = prometheus.NewDesc("lockproxy_migration_legacy_last_command_timestamp_seconds",
		"When a direct client of the legacy Redis last ran a command (Unix time, to the second; 0: none seen since start).", nil, nil)
	descUp = prometheus.NewDesc("lockproxy_migration_legacy_up",
		"1 when the last read of the legacy Redis's CLIENT LIST succeeded.", nil, nil)
	descErrors = prometheus.NewDesc("lockproxy_migration_legacy_errors_total",
		"Operations the legacy Redis failed or did not answer in time (the client got TRYAGAIN).", nil, nil)
	descRefused = prometheus.NewDesc("lockproxy_migration_acquire_refused_total",
		"Acquires refused by one side: legacy (held on the legacy Redis) or backend (granted on the legacy Redis, refused by the backend).", []string{"side"}, nil)
	descUndone = prometheus.NewDesc("lockproxy_migration_undone_total",
		"Keys a partial acquire left on one side and removed again with an owner-checked delete.", []string{"side"}, nil)
	descUndoFailed = prometheus.NewDesc("lockproxy_migration_undo_failures_total",
		"Undos that failed: the key stays until its TTL.", nil, nil)
)

// Describe implements prometheus.Collector: the inner backend's metrics
// and the migration's.
func (b *Backend) Describe(ch chan<- *prometheus.Desc) {
	if c, ok := b.inner.(prometheus.Collector); ok {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{descClients, descLast, descUp, descErrors, descRefused, descUndone, descUndoFailed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (b *Backend) Collect(ch chan<- prometheus.Metric) {
	if c, ok := b.inner.(prometheus.Collector); ok {
		c.Collect(ch)
	}
	up := 0.0
	if b.st.up() {
		up = 1
	}
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(descClients, gauge, float64(b.st.clients.Load()))
	ch <- prometheus.MustNewConstMetric(descLast, gauge, float64(b.st.lastCommand.Load()/1000))
	ch <- prometheus.MustNewConstMetric(descUp, gauge, up)
	ch <- prometheus.MustNewConstMetric(descErrors, counter, float64(b.st.legacyErrors.Load()))
	ch <- prometheus.MustNewConstMetric(descRefused, counter, float64(b.st.refusedLegacy.Load()), "legacy")
	ch <- prometheus.MustNewConstMetric(descRefused, counter, float64(b.st.refusedInner.Load()), "backend")
	ch <- prometheus.MustNewConstMetric(descUndone, counter, float64(b.st.undoLegacy.Load()), "legacy")
	ch <- prometheus.MustNewConstMetric(descUndone, counter, float64(b.st.undoInner.Load()), "backend")
	ch <- prometheus.MustNewConstMetric(descUndoFailed, counter, float64(b.st.undoFailed.Load()))
}

// ownConns are the local addresses of this instance's open connections to
// the legacy Redis: a connection shows in CLIENT LIST before the name it
// sets, and must not count as a direct client meanwhile. Safe for
// concurrent use.
type ownConns struct{ addrs sync.Map }

// has reports whether addr is one of this instance's connections.
func (o *ownConns) has(addr string) bool {
	_, ok := o.addrs.Load(addr)
	return ok
}

// dialer wraps dial so that every connection it opens is known by its
// local address until closed.
func (o *ownConns) dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		local := c.LocalAddr().String()
		o.addrs.Store(local, struct{}{})
		return &ownConn{Conn: c, forget: func() { o.addrs.Delete(local) }}, nil
	}
}

// ownConn forgets its address when closed.
type ownConn struct {
	net.Conn
	once   sync.Once
	forget func()
}

func (c *ownConn) Close() error {
	c.once.Do(c.forget)
	return c.Conn.Close()
}
