package pgbridge

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// outage tells the log that PostgreSQL cannot be reached, without a line
// per reconnect attempt of every session: the first failure at once, then
// again after 1 s, 2 s, 4 s … (at most a minute apart) with the number of
// failures since, and the recovery once, with how long the outage lasted.
// Holder sessions, the routing listener and the pool (both strategies)
// report to the one outage of their Backend. Safe for concurrent use; ok
// costs one atomic load while PostgreSQL is reachable.
type outage struct {
	log  *slog.Logger
	down atomic.Bool

	mu       sync.Mutex
	since    time.Time     // when the outage began
	next     time.Time     // when a failure is logged again
	every    time.Duration // the interval after next
	failures int
}

// maxOutageLogEvery bounds how far apart an outage's log lines get.
const maxOutageLogEvery = time.Minute

// fail reports a failure to reach PostgreSQL (what: which connection).
func (o *outage) fail(what string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if !o.down.Load() {
		o.down.Store(true)
		o.since, o.failures, o.every = now, 1, time.Second
		o.next = now.Add(o.every)
		o.log.Warn("pgbridge: PostgreSQL unreachable; retrying", "conn", what, "err", flatErr(err))
		return
	}
	o.failures++
	if now.Before(o.next) {
		return
	}
	o.every = min(2*o.every, maxOutageLogEvery)
	o.next = now.Add(o.every)
	o.log.Warn("pgbridge: PostgreSQL still unreachable", "for", now.Sub(o.since).Round(time.Millisecond).String(),
		"failures", o.failures, "conn", what, "err", flatErr(err))
}

// ok reports that PostgreSQL answered.
func (o *outage) ok() {
	if !o.down.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down.Load() {
		o.down.Store(false)
		o.log.Info("pgbridge: PostgreSQL reachable again", "after", time.Since(o.since).Round(time.Millisecond).String(),
			"failures", o.failures)
	}
}

// flatErr is err's text on one line: pgx joins the attempts of a
// connection with newlines and tabs.
func flatErr(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// clientText is err as a client reads it after "TRYAGAIN postgres: ": one
// line; a failure to connect says so and names only the network's or the
// server's reason (pgx's text repeats the address and names the user and
// the database).
func clientText(err error) string {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return flatErr(err)
	}
	var oe *net.OpError
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &oe):
		return "cannot connect to PostgreSQL: " + flatErr(oe)
	case errors.As(err, &pe):
		return "cannot connect to PostgreSQL: " + pe.Severity + ": " + flatErr(errors.New(pe.Message))
	}
	return "cannot connect to PostgreSQL"
}
