package pgbridge

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The Backend is a prometheus.Collector: register it with the proxy's
// registry to export the state of its sessions and pool.
var _ prometheus.Collector = (*Backend)(nil)

var (
	descHoldersUp = prometheus.NewDesc("lockproxy_postgres_holders_up",
		"Holder sessions (advisory strategy) that are connected.", nil, nil)
	descHolders = prometheus.NewDesc("lockproxy_postgres_holders",
		"Holder sessions (advisory strategy) configured.", nil, nil)
	descLost = prometheus.NewDesc("lockproxy_postgres_holder_sessions_lost_total",
		"Holder sessions that ended (an error, pg_terminate_backend, a restart of PostgreSQL); their locks ended with them.", nil, nil)
	descLeases = prometheus.NewDesc("lockproxy_postgres_leases_held",
		"Locks this instance holds on its holder sessions (advisory strategy).", nil, nil)
	descRouted = prometheus.NewDesc("lockproxy_postgres_routed_total",
		"Operations routed between instances by LISTEN/NOTIFY (advisory strategy): sent to the holding instance, or served for another.",
		[]string{"direction"}, nil)
	descWait = prometheus.NewDesc("lockproxy_postgres_restart_wait_seconds",
		"How long this instance still grants no lock after a restart of PostgreSQL, until the leases granted before it have ended (advisory strategy); 0 when it grants them.", nil, nil)
	descAdvisory = prometheus.NewDesc("lockproxy_postgres_advisory_locks",
		"Advisory locks this instance's holder sessions hold (advisory strategy): each is an entry of PostgreSQL's shared lock table.", nil, nil)
	descAdvisoryLimit = prometheus.NewDesc("lockproxy_postgres_advisory_locks_limit",
		"Advisory locks this instance holds at most (postgres-advisory-locks, at most 3/4 of PostgreSQL's lock table); a command that would take one more answers OOM.", nil, nil)
	descLockTable = prometheus.NewDesc("lockproxy_postgres_lock_table_size",
		"PostgreSQL's shared lock table as read at start: max_locks_per_transaction × (max_connections + max_prepared_transactions).", nil, nil)
	descPool = prometheus.NewDesc("lockproxy_postgres_pool_connections",
		"Connections of the pool that serves reads, lease transactions and NOTIFY, by state.", []string{"state"}, nil)
)

// Describe implements prometheus.Collector.
func (b *Backend) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHoldersUp, descHolders, descLost, descLeases, descRouted, descWait, descPool, descAdvisory, descAdvisoryLimit, descLockTable} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (b *Backend) Collect(ch chan<- prometheus.Metric) {
	st := b.pool.Stat()
	ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(st.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(st.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(st.TotalConns()), "total")
	b.store.collect(ch)
}

// collect adds the holder sessions, the routing and the restart wait.
func (a *advisory) collect(ch chan<- prometheus.Metric) {
	up, lost := a.holderCounts()
	ch <- prometheus.MustNewConstMetric(descHoldersUp, prometheus.GaugeValue, float64(up))
	ch <- prometheus.MustNewConstMetric(descHolders, prometheus.GaugeValue, float64(len(a.holders)))
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(lost))
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(a.rows.Load()))
	ch <- prometheus.MustNewConstMetric(descWait, prometheus.GaugeValue, a.waitLeft().Seconds())
	ch <- prometheus.MustNewConstMetric(descAdvisory, prometheus.GaugeValue, float64(a.locksHeld()))
	ch <- prometheus.MustNewConstMetric(descAdvisoryLimit, prometheus.GaugeValue, float64(a.cap.limit))
	ch <- prometheus.MustNewConstMetric(descLockTable, prometheus.GaugeValue, float64(a.cap.table))
	ch <- prometheus.MustNewConstMetric(descRouted, prometheus.CounterValue, float64(a.router.sent.Load()), "sent")
	ch <- prometheus.MustNewConstMetric(descRouted, prometheus.CounterValue, float64(a.router.served.Load()), "served")
}

// HeldLocks counts the locks held: this instance's leases (advisory), or
// the live rows of the lease table (lease; the last count that succeeded
// when PostgreSQL does not answer within a second). The proxy exports it
// as lockproxy_locks_held.
func (b *Backend) HeldLocks() int64 { return b.store.heldLocks() }

// ExpiredLocks counts the locks that ended at their deadline: released by
// this instance's timers (advisory), or reaped from the table by this
// instance (lease). The proxy exports it as lockproxy_lock_expiries_total.
func (b *Backend) ExpiredLocks() uint64 { return b.store.expiredLocks() }

func (a *advisory) heldLocks() int64 { return a.rows.Load() }

func (a *advisory) expiredLocks() uint64 { return a.expired.Load() }

func (s *leaseStore) heldLocks() int64 {
	ctx, cancel := context.WithTimeout(s.b.ctx, time.Second)
	defer cancel()
	var n int64
	if err := s.b.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.b.table+` WHERE `+leaseLive("deadline_ms")).Scan(&n); err == nil {
		s.heldLast.Store(n)
	}
	return s.heldLast.Load()
}

func (s *leaseStore) expiredLocks() uint64 { return s.expired.Load() }

// The lease strategy has no metrics and INFO lines of its own: it has no
// sessions, routing or restart wait.
func (s *leaseStore) collect(chan<- prometheus.Metric) {}

func (s *leaseStore) infoLines() []string { return nil }

// routeCounts are the router's counters.
type routeCounts struct {
	sent, served atomic.Int64
}

// InfoLines are the postgres lines of INFO's lockproxy section
// (proxy.InfoReporter): the strategy, the pool, and the holder sessions.
func (b *Backend) InfoLines() []string {
	st := b.pool.Stat()
	lines := []string{
		"lockproxy_postgres_strategy:" + b.cfg.Strategy,
		"lockproxy_postgres_pool_connections:" + strconv.Itoa(int(st.TotalConns())),
	}
	return append(lines, b.store.infoLines()...)
}

// infoLines are the holder sessions, the routing, the restart wait and
// the advisory locks held against the limit (capacity.go).
func (a *advisory) infoLines() []string {
	up, lost := a.holderCounts()
	return []string{
		"lockproxy_postgres_holders:" + strconv.Itoa(len(a.holders)),
		"lockproxy_postgres_holders_up:" + strconv.Itoa(up),
		"lockproxy_postgres_holder_sessions_lost:" + strconv.Itoa(lost),
		"lockproxy_postgres_routed_sent:" + strconv.FormatInt(a.router.sent.Load(), 10),
		"lockproxy_postgres_routed_served:" + strconv.FormatInt(a.router.served.Load(), 10),
		"lockproxy_postgres_restart_wait_ms:" + strconv.FormatInt(a.waitLeft().Milliseconds(), 10),
		"lockproxy_postgres_advisory_locks:" + strconv.FormatInt(a.locksHeld(), 10),
		"lockproxy_postgres_advisory_locks_limit:" + strconv.FormatInt(a.cap.limit, 10),
		"lockproxy_postgres_lock_table_size:" + strconv.FormatInt(a.cap.table, 10)}
}

// holderCounts returns how many holder sessions are connected and how many
// were lost since start.
func (a *advisory) holderCounts() (up, lost int) {
	for _, h := range a.holders {
		if h.gen.Load() != 0 {
			up++
		}
		lost += int(h.lost.Load())
	}
	return up, lost
}
