package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
)

// The restart quarantine (advisory strategy): Redlock's "delayed restart"
// applied to PostgreSQL. A crash or an immediate shutdown of PostgreSQL
// ends every holder session of every instance and empties the UNLOGGED
// lease table, fences included, while clients still hold locks until
// their TTLs run out. So every instance records, in a small LOGGED table
// (<schema>.horizon, one row), a horizon: a time on PostgreSQL's clock by
// which every lease granted under the current postmaster has ended. It is
// raised before a grant or an extension whose deadline lies beyond what
// the instance last recorded, by that deadline plus horizonSlack, so it
// is written about once per horizonSlack per instance under steady
// traffic, not per lock. The row also names the postmaster it was written
// under (pg_postmaster_start_time()); the first write under a new
// postmaster carries the old horizon into carried_ms.
//
// Each new holder session reads the row before it serves: when the
// postmaster is not the one the horizon was written under, leases granted
// before the restart may be live until the horizon, so the instance
// refuses to take advisory locks (TRYAGAIN) until then, plus the drift
// allowance; otherwise until carried_ms (normally past). A restart is thus
// seen by the first session of the new postmaster, before it takes any
// lock, whatever the instance knew before (also at start). Locks without
// a TTL are not bounded by anything: a crash of PostgreSQL loses them; so
// does a lease longer than maxCovered, which the horizon leaves out: one
// client's lock for a day must not stop every lock for a day after a crash.
//
// A crash of one backend (SIGKILL, the OOM killer, a segfault) is a restart
// too, without a new postmaster: PostgreSQL reinitialises its shared
// memory, every session ends and UNLOGGED tables are emptied, but
// pg_postmaster_start_time() stays (a second instance granted a lock still
// held: TestBackendCrashQuarantine). So an UNLOGGED one-row table,
// <schema>.horizon_alive, marks the current incarnation. Whoever touches
// the horizon first in a new incarnation finds the mark empty, fills it
// and carries horizon_ms into carried_ms in the same statement: a holder
// session before it reads the quarantine, or a grant's cover before it
// raises the horizon. Carrying inside cover matters: a refused acquire's
// cover may run before any holder session is back, and a horizon it raised
// for a lease never granted must not be carried into the wait (it made a
// restart wait 31 s for a 1 s lease). A concurrent fill waits on the mark's
// primary key and then finds it, so exactly one statement carries. A
// clean shutdown keeps UNLOGGED tables, so a clean restart is seen by
// pm_start as before. The first start of a version with the mark on a
// database used before carries too: a one-time wait for the horizon
// recorded so far.

// horizonSlack is how far past a deadline the horizon is raised: the
// longest a restart quarantine outlasts the leases, and the shortest time
// between two writes of one instance's horizon under steady traffic.
const horizonSlack = time.Second

// maxCovered is the longest lease the horizon covers, and so the longest
// wait after a restart of PostgreSQL (plus horizonSlack).
const maxCovered = time.Hour

// horizonDDL creates the horizon table.
func horizonDDL(schema string) string {
	return `CREATE TABLE IF NOT EXISTS ` + schema + `.horizon (
		one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
		pm_start   timestamptz NOT NULL,
		horizon_ms bigint      NOT NULL,
		carried_ms bigint      NOT NULL DEFAULT 0)`
}

// aliveDDL creates the incarnation mark (see above).
func aliveDDL(schema string) string {
	return `CREATE UNLOGGED TABLE IF NOT EXISTS ` + schema + `.horizon_alive (
		one boolean PRIMARY KEY DEFAULT true CHECK (one))`
}

// fillMark is a data-modifying WITH clause that fills an empty
// incarnation mark; `EXISTS (SELECT FROM raised)` is true in the statement
// that filled it, which then carries the horizon and, in evaluating it,
// raises the fencing tokens' sequence (fencing.go).
func fillMark(schema string) string {
	return `WITH mark AS (INSERT INTO ` + schema + `.horizon_alive (one) VALUES (true) ON CONFLICT DO NOTHING RETURNING one),
		raised AS (` + raiseFences(schema+".fencing_tokens") + `) `
}

// cover makes sure the horizon covers deadline (Unix ms on this process's
// clock) before a lease with it is granted or extended.
func (a *advisory) cover(ctx context.Context, deadline int64) error {
	if a.covered(deadline) {
		return nil
	}
	a.horizonMu.Lock()
	defer a.horizonMu.Unlock()
	if deadline <= a.horizon.Load() {
		return nil
	}
	sent := nowMS()
	ahead := addMS(deadline-sent, horizonSlack.Milliseconds())
	h := fillMark(a.b.cfg.Schema) + `INSERT INTO ` + a.b.cfg.Schema + `.horizon AS h (one, pm_start, horizon_ms)
		VALUES (true, pg_postmaster_start_time(), LEAST(` + pgNowMS + `::numeric + $1::bigint, 9223372036854775807)::bigint)
		ON CONFLICT (one) DO UPDATE SET
			carried_ms = CASE WHEN EXISTS (SELECT FROM raised) OR h.pm_start <> EXCLUDED.pm_start THEN GREATEST(h.carried_ms, h.horizon_ms) ELSE h.carried_ms END,
			horizon_ms = CASE WHEN h.pm_start <> EXCLUDED.pm_start THEN EXCLUDED.horizon_ms ELSE GREATEST(h.horizon_ms, EXCLUDED.horizon_ms) END,
			pm_start = EXCLUDED.pm_start
		RETURNING LEAST(h.horizon_ms::numeric - ` + pgNowMS + `, 9223372036854775807)::bigint`
	var left int64
	err := a.b.retryRead(ctx, func() error { return a.b.pool.QueryRow(ctx, h, ahead).Scan(&left) })
	if err != nil {
		return tryAgain(fmt.Errorf("recording the lease horizon: %w", err))
	}
	a.horizon.Store(addMS(sent, left))
	return nil
}

// covered reports whether cover has nothing to write for deadline.
func (a *advisory) covered(deadline int64) bool {
	return deadline == 0 || deadline <= a.horizon.Load() || deadline-nowMS() > maxCovered.Milliseconds()
}

// quarantineAfter reads, on a new holder session, how long leases granted
// under an earlier postmaster or incarnation may still be live (after
// carrying the horizon if it is the first to see the incarnation), and
// holds back locking until then (plus the drift allowance).
func (a *advisory) quarantineAfter(ctx context.Context, conn *pgx.Conn) error {
	// The horizon row first, then the mark, in cover's order: cover's
	// upsert locks the row and only then fills the mark (its SET reads
	// it), so a carry that filled the mark first and then waited for the
	// row would deadlock against it (a third session holding the row shows
	// it).
	carry := fillMark(a.b.cfg.Schema) + `UPDATE ` + a.b.cfg.Schema + `.horizon SET carried_ms = GREATEST(carried_ms, horizon_ms) WHERE EXISTS (SELECT FROM raised)`
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT FROM `+a.b.cfg.Schema+`.horizon FOR UPDATE`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, carry)
		return err
	})
	if err != nil {
		return err
	}
	var left *int64
	err = conn.QueryRow(ctx, `SELECT CASE WHEN pm_start = pg_postmaster_start_time() THEN carried_ms
			ELSE GREATEST(horizon_ms, carried_ms) END - `+pgNowMS+` FROM `+a.b.cfg.Schema+`.horizon`).Scan(&left)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (left == nil || *left <= 0)) {
		return nil
	}
	if err != nil {
		return err
	}
	d := time.Duration(*left) * time.Millisecond
	until := time.Since(a.epoch) + d + d/100 + 2*time.Millisecond
	for {
		cur := a.quarantine.Load()
		if int64(until) <= cur || a.quarantine.CompareAndSwap(cur, int64(until)) {
			break
		}
	}
	a.b.log.Warn("pgbridge: PostgreSQL restarted while leases may have been held; taking no locks until their horizon",
		"wait", d.Round(time.Millisecond))
	return nil
}

// waitLeft is how long this instance still takes no lock after a restart
// of PostgreSQL (0 when it takes them).
func (a *advisory) waitLeft() time.Duration {
	return max(time.Duration(a.quarantine.Load())-time.Since(a.epoch), 0)
}

// quarantined returns the error that refuses to take a lock now, or nil.
func (a *advisory) quarantined() error {
	left := a.waitLeft()
	if left <= 0 {
		return nil
	}
	return &backend.ReplyError{Reply: "TRYAGAIN postgres: " + waitReason(left)}
}

// waitReason says why no lock is granted for left more.
func waitReason(left time.Duration) string {
	return fmt.Sprintf("PostgreSQL restarted while locks were held; no lock is granted for %d ms more, until the leases granted before the restart have ended", max(left.Milliseconds(), 1))
}
