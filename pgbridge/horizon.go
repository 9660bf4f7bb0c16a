package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockproxy/lockproxy/backend"
)

// Restarts of PostgreSQL (advisory strategy). Any restart ends every
// holder session, and with them every advisory lock, while clients still
// hold their locks until their TTLs run out. What else is lost depends on
// the kind of restart:
//
//   - A clean shutdown (pg_ctl stop -m fast or smart) keeps the UNLOGGED
//     tables: every lease row is still there and fences its key (fence.go)
//     on every instance; the row-less locks of the sessions it ended fence
//     every key through their sessions rows until their instance has
//     written their fence rows (deferred.go: fenceRowless, which retries
//     until PostgreSQL is back). So a clean restart holds back exactly the
//     keys that were held, for their TTLs, and every other key for as
//     long as the instances take to reconnect.
//   - A crash, an immediate shutdown, a kill of the postmaster, the crash
//     of one backend (PostgreSQL then reinitialises) or a failover to a
//     standby empties the UNLOGGED tables, fences included. The leases
//     are then known only to the instances that granted them, in memory.
//
// So the second case must be told from the first, and a lease of a crash
// must be fenced again by its instance before anyone grants its key:
//
// The incarnation mark. <schema>.horizon_alive is an UNLOGGED one-row
// table: a crash empties it, a clean shutdown does not. The first
// statement to find it empty (fillMark, run before any holder session
// serves) fills it with a random id, the incarnation's, and in the same
// statement carries the horizons and raises the fencing sequence
// (fencing.go). Exactly one statement fills it: a concurrent one waits on
// its primary key and then finds it filled.
//
// The horizons. Each instance (its random per-process name) has a row in
// the LOGGED table <schema>.instance_horizons: horizon_ms, a time on
// PostgreSQL's clock by which every lease it granted has ended, raised
// before a grant or extension whose deadline lies beyond what it last
// recorded (cover: by that deadline plus horizonSlack, so about once per
// horizonSlack under steady traffic, not per lock). The carry copies
// every instance's horizon_ms into its carried_ms: until then, that
// instance may have live leases nobody else knows of.
//
// The restore. An instance that finds its own carried_ms ahead, once each
// of its holder sessions has connected in the new incarnation (so every
// session from before is known to be gone, and no lease of the
// incarnation can be in its memory: no lock is granted while a carried_ms
// is ahead), writes a fence row (holder_pid 0: no session's) for each of
// its leases whose deadline lies ahead, and sets its carried_ms to 0, in
// one transaction of the incarnation (restore). Every lease a client was
// told of is in its instance's memory until its deadline: a grant is
// stored before the client hears OK, and a lease whose release or write
// failed stays as a fence (expiry.go, advisory.go).
//
// The wait. No instance takes an advisory lock while any instance's
// carried_ms is ahead (quarantine): each holder session reads them when
// it connects, after the carry, and a watcher reads them again until none
// is left (watchRestart). An instance that is alive restores within a
// round trip of its holders' reconnect, so a crash costs seconds for the
// keys that were not held. An instance that is gone (killed, or shut down
// while its leases ran: their fence rows died with the crash) cannot, and
// its carried_ms runs out at its horizon: every key waits until then, at
// most maxCovered plus horizonSlack. A lease longer than maxCovered is not
// covered (a crash of PostgreSQL loses it, as a lock without TTL).
//
// Why no key gets two holders. A grant after the crash happens on a holder
// session of the new incarnation, which read the carried_ms values after
// the carry (fillMark runs before its read); every lease from before is
// covered by its instance's carried_ms (horizon_ms is raised before the
// grant and only ever grows), so the grant waits until that instance has
// restored or the lease has ended. A restore commits its fence rows in
// the same transaction that clears its carried_ms, so whoever sees it
// cleared sees the fences; if the incarnation ends before the commit,
// neither is there, and the next carry covers the leases again. A session
// that is not a lockproxy holder (pg_advisory_lock from SQL) is not held
// back: fences exclude lockproxy clients only (docs/postgres.md).

// horizonSlack is how far past a deadline the horizon is raised: the
// longest a restart wait outlasts the leases of a gone instance, and the
// shortest time between two writes of one instance's horizon under steady
// traffic.
const horizonSlack = time.Second

// maxCovered is the longest lease the horizon covers, and so the longest
// wait after a crash of PostgreSQL (plus horizonSlack).
const maxCovered = time.Hour

// horizonsDDL creates the horizon table.
func horizonsDDL(schema string) string {
	return `CREATE TABLE IF NOT EXISTS ` + schema + `.instance_horizons (
		instance   text   PRIMARY KEY,
		horizon_ms bigint NOT NULL,
		carried_ms bigint NOT NULL DEFAULT 0)`
}

// aliveDDL creates the incarnation mark (see above); aliveIDDDL gives a
// mark made by an earlier version its id.
func aliveDDL(schema string) string {
	return `CREATE UNLOGGED TABLE IF NOT EXISTS ` + schema + `.horizon_alive (
		one boolean PRIMARY KEY DEFAULT true CHECK (one),
		id  uuid    NOT NULL DEFAULT gen_random_uuid())`
}

func aliveIDDDL(schema string) string {
	return `ALTER TABLE ` + schema + `.horizon_alive ADD COLUMN IF NOT EXISTS id uuid NOT NULL DEFAULT gen_random_uuid()`
}

// fillMark is a data-modifying WITH clause that fills an empty
// incarnation mark; `EXISTS (SELECT FROM raised)` is true in the statement
// that filled it, which then carries the horizons and, in evaluating it,
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
	h := `INSERT INTO ` + a.b.cfg.Schema + `.instance_horizons AS h (instance, horizon_ms)
		VALUES ($2, LEAST(` + pgNowMS + `::numeric + $1::bigint, 9223372036854775807)::bigint)
		ON CONFLICT (instance) DO UPDATE SET horizon_ms = GREATEST(h.horizon_ms, EXCLUDED.horizon_ms)
		RETURNING LEAST(h.horizon_ms::numeric - ` + pgNowMS + `, 9223372036854775807)::bigint`
	var left int64
	err := a.b.retryRead(ctx, func() error { return a.b.pool.QueryRow(ctx, h, ahead, a.b.instance).Scan(&left) })
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

// queryer is a session or a transaction.
type queryer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// incarnation is what readIncarnation found.
type incarnation struct {
	id   string        // the mark's id
	wait time.Duration // until the last carried_ms ahead (0: none is)
	mine bool          // this instance's carried_ms is ahead: it must restore
}

// readIncarnation fills the mark if it is empty (carrying the horizons),
// then reads its id and the carried_ms values ahead, in that order on q.
func (a *advisory) readIncarnation(ctx context.Context, q queryer) (incarnation, error) {
	s := a.b.cfg.Schema
	carry := fillMark(s) + `UPDATE ` + s + `.instance_horizons SET carried_ms = GREATEST(carried_ms, horizon_ms) WHERE EXISTS (SELECT FROM raised)`
	if _, err := q.Exec(ctx, carry); err != nil {
		return incarnation{}, err
	}
	var inc incarnation
	var left int64
	err := q.QueryRow(ctx, `SELECT (SELECT id::text FROM `+s+`.horizon_alive),
			COALESCE(max(carried_ms) - `+pgNowMS+`, 0), COALESCE(bool_or(instance = $1), false)
		FROM `+s+`.instance_horizons WHERE carried_ms > `+pgNowMS, a.b.instance).Scan(&inc.id, &left, &inc.mine)
	if err != nil {
		return incarnation{}, err
	}
	inc.wait = time.Duration(max(left, 0)) * time.Millisecond
	return inc, nil
}

// quarantineAfter runs on a new holder session before it serves: it reads
// the incarnation (carrying the horizons if it is the first to see it),
// notes the session's incarnation, and holds back locking while any
// instance's carried_ms is ahead, waking the watcher to end that wait.
func (a *advisory) quarantineAfter(ctx context.Context, conn *pgx.Conn, h *holder) error {
	a.gateMu.Lock()
	defer a.gateMu.Unlock()
	inc, err := a.readIncarnation(ctx, conn)
	if err != nil {
		return err
	}
	h.inc.Store(&inc.id)
	a.setQuarantine(inc)
	return nil
}

// setQuarantine holds locking back for inc.wait (plus the drift
// allowance: the wait is on PostgreSQL's clock), or ends the wait; a.gateMu
// held, so that a later reading is never overwritten by an earlier one.
func (a *advisory) setQuarantine(inc incarnation) {
	if inc.wait <= 0 {
		a.quarantine.Store(0)
		return
	}
	d := inc.wait
	was := a.waitLeft()
	a.quarantine.Store(int64(time.Since(a.epoch) + d + d/100 + 2*time.Millisecond))
	if was == 0 {
		a.b.log.Warn("pgbridge: PostgreSQL lost its lease table while leases may have been held; taking no locks until their instances have fenced them",
			"at_most", d.Round(time.Millisecond), "this_instance_restores", inc.mine)
	}
	select {
	case a.gateKick <- struct{}{}:
	default:
	}
}

// errNotYet is a restore that waits for a holder session to reconnect.
var errNotYet = errors.New("a holder session from before the restart is still being replaced")

// watchRestart ends restart waits: woken by a holder session that found
// one, it restores this instance's leases when its own carried_ms is ahead
// and reads the carried_ms values again, every restartPoll at first, until
// none is ahead.
func (a *advisory) watchRestart() {
	defer a.b.wg.Done()
	for {
		select {
		case <-a.b.ctx.Done():
			return
		case <-a.gateKick:
		}
		every := restartPoll
		for a.b.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(a.b.ctx, a.b.cfg.OpTimeout)
			inc, err := a.refresh(ctx)
			if err == nil && inc.mine {
				err = a.restore(ctx)
				if err == nil {
					inc, err = a.refresh(ctx)
				}
			}
			cancel()
			if err == nil && inc.wait <= 0 {
				break
			}
			if err != nil && !errors.Is(err, errNotYet) && a.b.ctx.Err() == nil {
				a.b.log.Warn("pgbridge: reading the restart wait", "err", flatErr(err))
			}
			t := time.NewTimer(every)
			select {
			case <-a.b.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			every = min(2*every, time.Second)
		}
	}
}

// restartPoll is how soon the watcher reads the carried_ms values again.
const restartPoll = 50 * time.Millisecond

// refresh reads the incarnation on the pool and sets the wait by it.
func (a *advisory) refresh(ctx context.Context) (incarnation, error) {
	a.gateMu.Lock()
	defer a.gateMu.Unlock()
	var inc incarnation
	err := pgx.BeginFunc(ctx, a.b.pool, func(tx pgx.Tx) (err error) {
		inc, err = a.readIncarnation(ctx, tx)
		return err
	})
	if err != nil {
		return incarnation{}, err
	}
	a.setQuarantine(inc)
	return inc, nil
}

// restore writes a fence row for each lease of this instance from before
// the incarnation whose deadline lies ahead, and clears its carried_ms, in
// one transaction (see above). errNotYet while a holder session has not
// connected in the incarnation.
func (a *advisory) restore(ctx context.Context) error {
	n := 0
	err := pgx.BeginFunc(ctx, a.b.pool, func(tx pgx.Tx) error {
		inc, err := a.readIncarnation(ctx, tx)
		if err != nil || !inc.mine {
			return err
		}
		for _, h := range a.holders {
			if id := h.inc.Load(); h.gen.Load() == 0 || id == nil || *id != inc.id {
				return errNotYet
			}
		}
		var f fenceRows
		now := nowMS()
		for i := range a.b.stripes {
			st := &a.b.stripes[i]
			st.mu.Lock()
			for k, e := range st.owned {
				// A valid lease is one of a session of this incarnation.
				if !e.valid() && (e.row || e.deferred) && e.deadline > now {
					f.add(k, e)
				}
			}
			st.mu.Unlock()
		}
		n = len(f.keys)
		if n > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO `+a.b.table+` AS t (db, key, lock_id, token, kind, deadline_ms, holder, holder_pid, fencing_token)
				SELECT u.db, u.key, u.id, u.token, u.kind, u.dl, u.holder, 0, u.f
				FROM unnest($1::int[], $2::bytea[], $3::bigint[], $4::bytea[], $5::bigint[], $6::smallint[], $7::bigint[], $8::text[])
					AS u(db, key, id, token, dl, kind, f, holder)
				ON CONFLICT (db, key) DO UPDATE SET lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, kind = EXCLUDED.kind,
					deadline_ms = EXCLUDED.deadline_ms, holder = EXCLUDED.holder, holder_pid = 0,
					fencing_token = EXCLUDED.fencing_token
				WHERE t.deadline_ms IS NULL OR t.deadline_ms <= EXCLUDED.deadline_ms`,
				f.dbs, f.keys, f.ids, f.toks, f.dls, f.kinds, f.fencings, f.holders); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE `+a.b.cfg.Schema+`.instance_horizons SET carried_ms = 0 WHERE instance = $1`, a.b.instance)
		return err
	})
	if err == nil {
		a.b.log.Info("pgbridge: fenced this instance's leases from before PostgreSQL lost its lease table", "leases", n)
	}
	return err
}

// fenceRows are the columns of fence rows to write, as arrays.
type fenceRows struct {
	dbs      []int32
	keys     [][]byte
	toks     [][]byte
	ids, dls []int64
	kinds    []int16
	fencings []*int64
	holders  []string
}

func (f *fenceRows) add(k dbKey, e *held) {
	f.dbs, f.keys, f.toks = append(f.dbs, int32(k.db)), append(f.keys, []byte(k.key)), append(f.toks, append([]byte{}, e.token...))
	f.ids, f.dls, f.kinds, f.holders = append(f.ids, e.lockID), append(f.dls, e.deadline), append(f.kinds, int16(e.kind)), append(f.holders, e.h.name)
	var fe *int64
	if e.fencing != 0 {
		v := e.fencing
		fe = &v
	}
	f.fencings = append(f.fencings, fe)
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
	return fmt.Sprintf("PostgreSQL lost its lease table while locks were held; no lock is granted until their instances have fenced them again, %d ms more at most", max(left.Milliseconds(), 1))
}
