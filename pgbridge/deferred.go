package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Deferred lease rows (advisory strategy, Config.LeaseRowDelay = D > 0).
// Most locks live a few milliseconds, and their lease row costs PostgreSQL
// about three times the advisory lock. So SET NX with a TTL of at most
// maxDeferredTTL takes the lock without a row; a timer writes the row D
// after the grant if the lock is still held (expiry.go). A lock released
// or expired before D never touches the lease table. A lock without a TTL,
// or with a longer one, and a key written by the general path (a script,
// an extension) get their row at once, as with D = 0.
//
// Answers. An instance that finds no row for a key asks pg_locks which
// session holds the key's advisory lock, and <schema>.sessions which
// lockproxy instance that session belongs to (readTable); GET, PTTL and
// EXISTS go to that instance by NOTIFY like the writes (route.go), and a
// key no session holds is absent (unless fenced, below). DBSIZE asks the
// instances that may hold row-less locks for their count (count.go). So
// every instance answers the same within D and after it.
//
// Fences. A row is also the fence a lost lease leaves (fence.go): when a
// holder session ends, its rows keep its keys from every other session
// until their deadlines. A row-less lock fences nothing by itself, and
// nobody knows its key once its instance is gone. So each holder session
// has a row in <schema>.sessions: its pid, a marker (the oid of a
// temporary table it creates at start) and rowless_until_ms, a time (on
// PostgreSQL's clock, raiseSQL) by which every row-less lock it granted
// has ended. The holder raises it, in
// the batch that grants the lock (one transaction: before the client
// hears OK), whenever a row-less lock's deadline passes it, by
// rowlessSlack more than needed, so that it is written about once per
// rowlessSlack, not per lock. Every grant (SET NX, and the general path's
// locking of an absent key) checks, after it has taken the advisory lock,
// in a statement whose snapshot is newer than the lock, that no session
// that has ended has a rowless_until_ms ahead; if one has, the key is
// fenced until then: SET NX answers nil and other writes TRYAGAIN, as for
// a fence row; a read of a key nobody holds shows the fence too.
//
// Why "has ended" is safe to decide from the marker. A session ends
// (pg_terminate_backend, its client gone) by running its exit callbacks
// in reverse order of registration: the one that drops its temporary
// tables was registered when the first temporary table was created, after
// the one that releases its advisory locks (registered when the session
// started), so it runs first and commits the marker's removal before any
// advisory lock of the session is released. A session that took one of
// its keys' locks afterwards therefore sees, in any later snapshot, the
// marker gone. (The session's pg_stat_activity entry is cleared only
// after its locks are released, so "its pid is still listed" would let a
// dying session pass for a live one.) A crash of a backend restarts
// PostgreSQL, which empties the UNLOGGED sessions table like the lease
// table: the LOGGED horizon (horizon.go), raised before every grant with
// a deadline, covers row-less locks exactly as it covers rows.
//
// The price, written down in docs/postgres.md: a holder session that ends while
// row-less locks of it may be live fences every key of the database, on
// every instance, until its rowless_until_ms (at most the longest TTL
// granted row-less in its last moments plus rowlessSlack and D), because
// nobody knows which keys it held. A minute of TTL bounds that wait.
// Instances that share a database must all know of the sessions table
// (this version or later): an older one would not honour it.

// maxDeferredTTL is the longest TTL whose lock may start without a row:
// the longest wait a lost holder session can impose on every key.
const maxDeferredTTL = time.Minute

// rowlessSlack is how far past a deadline a session's rowless_until_ms is
// raised.
const rowlessSlack = time.Second

// sessionsDDL creates the holder session table.
func sessionsDDL(schema string) string {
	return `CREATE UNLOGGED TABLE IF NOT EXISTS ` + schema + `.sessions (
		pid              integer NOT NULL,
		marker           oid     NOT NULL,
		holder           text    NOT NULL,
		rowless_until_ms bigint  NOT NULL DEFAULT 0,
		PRIMARY KEY (pid, marker))`
}

// markerGone holds for a sessions row (alias s) whose session has ended:
// its temporary marker table is gone. (A correlated count, probed by
// pg_class's oid index per row: as NOT EXISTS the planner, without
// statistics on the small table, hashed all of pg_class on every check,
// 0.2 ms a batch.)
const markerGone = `(SELECT count(*) FROM pg_catalog.pg_class c WHERE c.oid = s.marker) = 0`

// deadUntilSQL is, in SQL, the latest rowless_until_ms ahead (by
// PostgreSQL's clock) of a session that has ended, or NULL.
func (a *advisory) deadUntilSQL() string {
	return `(SELECT max(s.rowless_until_ms) FROM ` + a.b.cfg.Schema + `.sessions s
		WHERE s.rowless_until_ms > ` + pgNowMS + ` AND ` + markerGone + `)`
}

// lockHolderSQL is, in SQL, the holder name (instance/idx) of the live
// lockproxy session holding the advisory lock id (an SQL expression), or
// NULL: nobody, or a session that is not a holder.
func (a *advisory) lockHolderSQL(id string) string {
	return `(SELECT s.holder FROM pg_locks p JOIN ` + a.b.cfg.Schema + `.sessions s ON s.pid = p.pid
		WHERE p.locktype = 'advisory' AND p.granted AND p.objsubid = 1
		AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND p.classid = ((` + id + ` >> 32) & 4294967295)::oid AND p.objid = (` + id + ` & 4294967295)::oid
		AND NOT ` + markerGone + ` LIMIT 1)`
}

// registerSession creates a new holder session's marker and its sessions
// row.
func (h *holder) registerSession(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS lockproxy_session_marker ()`); err != nil {
		return err
	}
	err := conn.QueryRow(ctx, `INSERT INTO `+h.a.b.cfg.Schema+`.sessions (pid, marker, holder)
		VALUES (pg_backend_pid(), 'pg_temp.lockproxy_session_marker'::regclass, $1) RETURNING pid, marker`, h.name).Scan(&h.pid, &h.marker)
	h.until = 0
	h.rowless.Store(new(atomic.Int64))
	return err
}

// session is a holder session that was lost.
type session struct {
	h      *holder
	gen    uint64
	pid    int32
	marker uint32
}

// fenceRowless runs when a holder session is lost while this instance
// lives: it turns the session's row-less leases whose deadline lies ahead
// into fence rows (holder_pid the lost session's) and, in the same
// transaction, sets the session's rowless_until_ms to 0, so that the keys
// it did not hold are free again at once instead of at rowless_until_ms.
// Every row-less lock of the session that a client was told it holds is
// among this instance's leases: a grant is stored under its stripe's lock
// before the client hears of it, and this reads every stripe under its
// lock. On failure the session's rowless_until_ms keeps fencing every key,
// so a failure is safe but stops every lock until then: it tries again,
// waiting twice as long each time from fenceRetryWait up to
// fenceRetryMax, reading the leases anew each time, for as long as
// rowless_until_ms can be ahead (maxDeferredTTL and rowlessSlack from the
// loss): a restart of PostgreSQL (pg_ctl restart) lasts longer than a
// few tries, and until the rows are written every key waits.
func (a *advisory) fenceRowless(s session) {
	wait := fenceRetryWait
	end := time.Now().Add(maxDeferredTTL + rowlessSlack + a.b.cfg.LeaseRowDelay)
	for try := 1; ; try++ {
		err := a.fenceRowlessOnce(s)
		if err == nil || a.b.ctx.Err() != nil {
			return
		}
		if time.Now().After(end) {
			a.b.log.Warn("pgbridge: could not fence the lost session's locks without rows: every key waited until they had ended", "holder", s.h.idx, "tries", try, "err", flatErr(err))
			return
		}
		if try == 1 {
			a.b.log.Warn("pgbridge: could not fence the lost session's locks without rows; trying again until PostgreSQL answers", "holder", s.h.idx, "err", flatErr(err))
		}
		t := time.NewTimer(wait)
		select {
		case <-a.b.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, fenceRetryMax)
	}
}

// fenceRetryWait and fenceRetryMax space fenceRowless's attempts: the
// first soon (a transient failure), then at most fenceRetryMax apart, so
// that keys are free again within that of PostgreSQL's return.
const (
	fenceRetryWait = 50 * time.Millisecond
	fenceRetryMax  = 250 * time.Millisecond
)

// fenceRowlessOnce is one attempt of fenceRowless, in one transaction.
func (a *advisory) fenceRowlessOnce(s session) error {
	type lostLease struct {
		k dbKey
		e *held
	}
	var ls []lostLease
	var dbs []int32
	var keys, toks [][]byte
	var ids, dls []int64
	var fencings []*int64
	var kinds []int16
	now := nowMS()
	for i := range a.b.stripes {
		st := &a.b.stripes[i]
		st.mu.Lock()
		for k, e := range st.owned {
			if e.h == s.h && e.gen == s.gen && e.deferred && !e.row && e.deadline > now {
				ls = append(ls, lostLease{k, e})
				dbs, keys, toks = append(dbs, int32(k.db)), append(keys, []byte(k.key)), append(toks, e.token)
				ids, dls, kinds = append(ids, e.lockID), append(dls, e.deadline), append(kinds, int16(e.kind))
				var f *int64
				if e.fencing != 0 {
					f = &e.fencing
				}
				fencings = append(fencings, f)
			}
		}
		st.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(a.b.ctx, a.b.cfg.OpTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, a.b.pool, func(tx pgx.Tx) error {
		if len(ls) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO `+a.b.table+` AS t (db, key, lock_id, token, kind, deadline_ms, holder, holder_pid, fencing_token)
				SELECT u.db, u.key, u.id, u.token, u.kind, u.dl, $6, $7, u.f
				FROM unnest($1::int[], $2::bytea[], $3::bigint[], $4::bytea[], $5::bigint[], $8::smallint[], $9::bigint[]) AS u(db, key, id, token, dl, kind, f)
				ON CONFLICT (db, key) DO UPDATE SET lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, kind = EXCLUDED.kind,
					deadline_ms = EXCLUDED.deadline_ms, holder = EXCLUDED.holder, holder_pid = EXCLUDED.holder_pid,
					fencing_token = EXCLUDED.fencing_token
				WHERE t.deadline_ms IS NULL OR t.deadline_ms < EXCLUDED.deadline_ms`,
				dbs, keys, ids, toks, dls, s.h.name, s.pid, kinds, fencings); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE `+a.b.cfg.Schema+`.sessions SET rowless_until_ms = 0 WHERE pid = $1 AND marker = $2`, s.pid, s.marker)
		return err
	})
	if err != nil {
		return err
	}
	for _, l := range ls {
		st := a.b.stripe(l.k)
		st.mu.Lock()
		if st.owned[l.k] == l.e && !l.e.row {
			l.e.row = true // a fence now (fence.go); sweep counts it lost
			a.settled(l.k, l.e)
			a.arm(l.k, l.e) // its deadline ends it
		}
		st.mu.Unlock()
	}
	return nil
}

// raiseSQL raises the session's rowless_until_ms to $1 ms after
// PostgreSQL's now; it answers no row when the session's row is missing
// (deleted by hand), which ends the session.
//
// rowless_until_ms is on PostgreSQL's clock, the one every check compares
// it with, whatever this instance's clock says (horizon.go's cover does
// the same): $1 is the time left on this instance's clock, measured before
// the batch is sent, and the transaction's now is later than the sending,
// so the value is never early however far the two clocks are apart.
func (h *holder) raiseSQL() string {
	return `UPDATE ` + h.a.b.cfg.Schema + `.sessions SET rowless_until_ms = GREATEST(rowless_until_ms, ` + pgNowMS + ` + $1::bigint)
		WHERE pid = pg_backend_pid() AND marker = 'pg_temp.lockproxy_session_marker'::regclass RETURNING 1`
}

// checkSQL runs after a batch's acquires, with a newer snapshot than
// their locks: for each acquire (ordinality), until when the key is
// fenced (NULL: it is not): a fence row for a row-less grant (a row
// grant checked it in its INSERT), or a session that has ended with
// row-less locks that may still be live.
func (h *holder) checkSQL() string {
	return `SELECT u.ord, GREATEST(CASE WHEN u.d THEN (SELECT f.deadline_ms FROM ` + h.a.b.table + ` f
			WHERE f.db = u.db AND f.key = u.key AND ` + fencedBy("f") + `) END, g.until)
		FROM unnest($1::int[], $2::bytea[], $3::bool[]) WITH ORDINALITY AS u(db, key, d, ord)
		CROSS JOIN (SELECT ` + h.a.deadUntilSQL() + ` AS until) g ORDER BY u.ord`
}

// checkDeadSQL is checkSQL for a batch without deferred acquires (whose
// rows' INSERT checked their fences): only the ended sessions, one row.
func (h *holder) checkDeadSQL() string { return `SELECT ` + h.a.deadUntilSQL() }

// readDeadCheck reads checkDeadSQL's row: while an ended session's
// row-less locks may be live, every acquire that took its lock is refused.
func readDeadCheck(br pgx.BatchResults, qs []*query) error {
	var until *int64
	if err := br.QueryRow().Scan(&until); err != nil {
		return err
	}
	for _, q := range qs {
		if until != nil && q.ok {
			q.fenced = true
		}
	}
	return nil
}

func checkArgs(qs []*query) []any {
	dbs, keys, ds := make([]int32, len(qs)), make([][]byte, len(qs)), make([]bool, len(qs))
	for i, q := range qs {
		dbs[i], keys[i], ds[i] = int32(q.k.db), []byte(q.k.key), q.deferred
	}
	return []any{dbs, keys, ds}
}

// readChecks reads checkSQL's rows: an acquire that took its lock on a
// fenced key is refused (fenced), and its lock must be released again.
func readChecks(br pgx.BatchResults, qs []*query) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var ord int64
		var until *int64
		if err := rows.Scan(&ord, &until); err != nil {
			return err
		}
		if ord < 1 || int(ord) > len(qs) {
			return fmt.Errorf("fence check answered row %d of %d", ord, len(qs))
		}
		if q := qs[ord-1]; until != nil && q.ok {
			q.fenced = true
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != len(qs) {
		return fmt.Errorf("fence check answered %d rows for %d acquires", seen, len(qs))
	}
	return nil
}

// deferrable reports whether a lock granted at now (Unix ms) with deadline
// may start without a row.
func (a *advisory) deferrable(deadline, now int64) bool {
	return a.b.cfg.LeaseRowDelay > 0 && deadline != 0 && deadline-now <= maxDeferredTTL.Milliseconds() && !a.drained.Load()
}

// rowQuery writes the lease row of k, held by e's session, with state s,
// unless another session's row fences the key (q.fenced). A key locked
// for one operation (neither a row nor deferred) becomes a lease with it,
// counted for DBSIZE (count.go).
func (a *advisory) rowQuery(k dbKey, e *held, s state) *query {
	begins, h, gen := !e.row && !e.deferred, e.h, e.gen
	q := &query{sql: `INSERT INTO ` + a.b.table + ` AS t (db, key, lock_id, token, kind, deadline_ms, holder, holder_pid, fencing_token,
			granted_ms, client_addr, client_name, client_user, granted_by)
		VALUES ($1, $2, $3, $4, $7, $5, $6, pg_backend_pid(), $8, $9, $10, $11, $12, $13)
		ON CONFLICT (db, key) DO UPDATE SET lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, kind = EXCLUDED.kind,
			deadline_ms = EXCLUDED.deadline_ms, holder = EXCLUDED.holder, holder_pid = EXCLUDED.holder_pid,
			fencing_token = EXCLUDED.fencing_token, granted_ms = EXCLUDED.granted_ms, client_addr = EXCLUDED.client_addr,
			client_name = EXCLUDED.client_name, client_user = EXCLUDED.client_user, granted_by = EXCLUDED.granted_by
		WHERE NOT ` + fencedBy("t") + ` RETURNING 1`,
		args: append([]any{k.db, []byte(k.key), e.lockID, s.token, deadlineParam(s.deadline), e.h.name, int16(s.kind), fencingParam(s.fencing)}, grantParams(s.grant)...), want: e.gen}
	q.scan = func(r pgx.Row) error {
		var one int
		if err := r.Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			q.fenced = true
		} else if err != nil {
			return err
		} else if begins {
			h.counted(k.db, gen)
		}
		return nil
	}
	return q
}

// writeRow writes the row of a lease granted without one, D after its
// grant, if its session still holds it; then the timer waits for its
// deadline.
func (a *advisory) writeRow(k dbKey, e *held) {
	st := a.b.stripe(k)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.owned[k] != e || e.row {
		return
	}
	if !e.valid() {
		if _, fenced := e.fence(nowMS()); !fenced {
			a.drop(st, k, e)
			return
		}
		// Kept as a fence for fenceRowless; its deadline ends it.
		a.armExpiry(k, e)
		return
	}
	if e.deadline <= nowMS() {
		a.armExpiry(k, e) // its expiry is due: the deadline timer releases it
		return
	}
	q := a.rowQuery(k, e, e.state)
	e.h.submit(q)
	if err := do(q); err != nil {
		return // the session ended with it (sweep forgets the lease)
	}
	if q.fenced { // cannot be: a row is written only by the session holding the lock
		a.b.log.Error("pgbridge: a deferred lease row met a fence; the lock stays without a row", "db", k.db)
		a.armExpiry(k, e)
		return
	}
	e.row = true
	a.settled(k, e)
	a.arm(k, e)
}

// settled counts off a deferred lease that got its row or ended (its
// stripe locked): its session's count of row-less locks falls with it.
func (a *advisory) settled(k dbKey, e *held) {
	if e.rowless != nil {
		e.rowless.Add(-1) // its own session's count, whichever session holds now
	}
}

// lowerSQL sets the session's rowless_until_ms back to 0 once it has no
// row-less lock: a session that ends then fences nothing beyond its rows.
func (h *holder) lowerSQL() string {
	return `UPDATE ` + h.a.b.cfg.Schema + `.sessions SET rowless_until_ms = 0
		WHERE pid = pg_backend_pid() AND marker = 'pg_temp.lockproxy_session_marker'::regclass`
}

// lowerable reports whether the session may lower its rowless_until_ms:
// it raised it, and every row-less lock it granted since has its row or
// has ended. Grants are counted by the holder goroutine in the batch that
// makes them, before any later batch of it decides; a batch that grants a
// row-less lock raises instead. (A count that ends are subtracted from
// late only delays the lowering.)
func (h *holder) lowerable() bool {
	c := h.rowless.Load()
	return h.until > 0 && c != nil && c.Load() == 0
}

// drainWait bounds drain: a holder lowers its rowless_until_ms at its
// next ping (pingEvery).
const drainWait = pingEvery + time.Second

// drain runs at a graceful Close: it writes the rows of the deferred
// leases that have none and waits (up to drainWait) until every holder
// session of this instance has lowered its rowless_until_ms, so that the
// end of its sessions fences their keys (their rows) rather than every key
// of the database. A SIGKILL skips it: then every key waits (deferred.go).
//
// Clients still take locks while it runs: from its start (drained) they
// get their rows at once, and its pass over the stripes finds every lease
// granted without one before (an acquire holds its stripe from its choice
// to defer to the lease's storing). Otherwise a lock granted row-less
// after the pass kept its session's rowless_until_ms up, and the drain
// gave up after drainWait.
func (a *advisory) drain(ctx context.Context) {
	if a.b.cfg.LeaseRowDelay == 0 {
		return
	}
	a.drained.Store(true)
	ctx, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	var wg sync.WaitGroup
	for i := range a.b.stripes {
		st := &a.b.stripes[i]
		st.mu.Lock()
		for k, e := range st.owned {
			if e.deferred && !e.row && e.valid() {
				wg.Go(func() { a.writeRow(k, e) })
			}
		}
		st.mu.Unlock()
	}
	wg.Wait()
	for {
		var n int
		err := a.b.pool.QueryRow(ctx, `SELECT count(*) FROM `+a.b.cfg.Schema+`.sessions s
			WHERE s.holder LIKE $1 AND s.rowless_until_ms > 0 AND NOT `+markerGone, a.b.instance+"/%").Scan(&n)
		if err != nil || n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond): // polling for the holders' pings
		}
	}
}

// reapSessions deletes the sessions rows of ended sessions that fence
// nothing any more.
func (a *advisory) reapSessions(ctx context.Context) error {
	_, err := a.b.pool.Exec(ctx, `DELETE FROM `+a.b.cfg.Schema+`.sessions s WHERE s.rowless_until_ms <= `+pgNowMS+` AND `+markerGone)
	return err
}

// lower runs lowerSQL (deferred.go).
func (h *holder) lower(conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.a.b.cfg.OpTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, h.lowerSQL()); err != nil {
		return err
	}
	h.until = 0
	return nil
}

// unfence releases again the locks of acquires that the fence check
// refused (and deletes the rows those with rows wrote): they answer "not
// acquired".
func (h *holder) unfence(ctx context.Context, conn *pgx.Conn, acq []*query) error {
	var rel []*query
	for _, q := range acq {
		if q.ok && q.fenced {
			q.ok = false
			rel = append(rel, &query{k: q.k, id: q.id, row: !q.deferred})
		}
	}
	if len(rel) == 0 {
		return nil
	}
	return unlockBatch(ctx, conn, h.releaseSQL(true), rel, true)
}
