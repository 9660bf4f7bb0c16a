package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
)

// A holder is one dedicated PostgreSQL session that holds the advisory
// locks of its share of the keys. Statements reach it through its queue
// (pending, with a wake-up) and run in pipelined batches; a batch runs under the holder's own
// deadline (Config.OpTimeout), never under a client's, because a cancelled
// query closes the session and with it every lock it holds.
//
// Any error on a holder ends its session on purpose: PostgreSQL then
// releases all of its locks, which is a state this process can know. The
// session's generation moves on, and every lease taken under the old one
// counts as lost: never answered as held by its owner, and, when it has a
// deadline, a fence until then (fence.go).
type holder struct {
	a      *advisory
	idx    int
	name   string        // holder column value: instance/idx
	check  chan struct{} // a nudge to ping now: another holder's session was lost
	gen    atomic.Uint64 // the session's generation; 0 while down
	lost   atomic.Int64  // sessions lost
	until  int64         // the session's rowless_until_ms as last set, on this instance's clock (deferred.go); the holder goroutine's own
	pid    int32         // the session's backend pid and marker (deferred.go); the holder goroutine's own
	marker uint32
	inc    atomic.Pointer[string] // the incarnation of PostgreSQL the session connected in (horizon.go)
	// rowless counts the row-less locks the current session granted that
	// have neither a row nor ended: one counter per session (each lease
	// keeps its own session's), so that a lease of a lost session cannot
	// count off a later one's (registerSession).
	rowless atomic.Pointer[atomic.Int64]
	// leases counts the current session's live leases by database, for
	// DBSIZE (count.go); replaced, like rowless, for each session.
	leases atomic.Pointer[sessionLeases]
	sql    holderSQL // the batch statements' text, built once (run)

	// The queue: statements wait in pending, in the order submitted, until
	// the holder takes them; wake holds a token whenever pending may be
	// non-empty. A submitter appends and leaves without a hand-off to the
	// holder goroutine (an unbuffered channel's select cost a rendezvous
	// and, on the 2-4 KB stack of the proxy's goroutine per command, a
	// stack growth per statement). closed: the holder has ended; nothing
	// is queued any more.
	mu      sync.Mutex
	pending []*query
	closed  bool
	wake    chan struct{}
}

// holderSQL holds the text of the statements runBatch queues, built once
// rather than concatenated for every batch: pgx looks its prepared
// statements up by this text.
type holderSQL struct {
	acquire, release, releaseRows, raise, check, checkDead string
}

func (h *holder) statements() holderSQL {
	return holderSQL{acquire: h.acquireSQL(), release: h.releaseSQL(false), releaseRows: h.deleteRowsSQL(),
		raise: h.raiseSQL(), check: h.checkSQL(), checkDead: h.checkDeadSQL()}
}

// query is one statement for a holder: an acquire or a release, which
// the holder merges with the others of its batch into one statement each,
// or any other statement (sql, args; scan reads its single row, a nil scan
// executes it for its effect).
type query struct {
	kind     qkind
	k        dbKey
	token    []byte        // acquire
	grant    backend.Grant // acquire: when and for whom
	dl       int64         // acquire: deadline, Unix ms, 0 for none
	deferred bool          // acquire: without a row (deferred.go)
	rowless  *atomic.Int64 // a deferred acquire granted: its session's count (holder.rowless)
	row      bool          // release: the lease has a row to delete
	id       int64         // release: the lock id; acquire: the id it locked
	ok       bool          // acquire: locked (and its row written unless deferred)
	fenced   bool          // a write that found the key fenced (fence.go, deferred.go)
	locks    bool          // a statement that takes advisory locks (held back by a quarantine, horizon.go)
	sql      string
	args     []any
	scan     func(pgx.Row) error
	want     uint64 // the generation it is for (0: any)
	gen      uint64 // the generation it ran under
	err      error
	done     chan struct{}
	then     func() // run once it ran or failed, by whoever finished it (loop.go)
}

// finish says q ran or failed: done closes, and then runs.
func (q *query) finish() {
	close(q.done)
	if q.then != nil {
		q.then()
	}
}

type qkind uint8

const (
	qStmt    qkind = iota
	qAcquire       // pg_try_advisory_lock of the key and, if taken, its lease row
	qRelease       // delete the key's lease row (if any) and pg_advisory_unlock
)

var errHolderDown = errors.New("holder connection to PostgreSQL is down")

// errLost answers a statement meant for a session that is gone.
var errLost = errors.New("holder connection to PostgreSQL was lost: its locks were released")

const maxBatch = 256

// submit queues q for the holder; q.done closes once it ran or failed.
func (h *holder) submit(q *query) {
	q.done = make(chan struct{})
	h.mu.Lock()
	if h.closed || h.a.b.ctx.Err() != nil {
		h.mu.Unlock()
		q.err = errors.New("pgbridge: closed")
		q.finish()
		return
	}
	h.pending = append(h.pending, q)
	h.mu.Unlock()
	h.signal()
}

// signal leaves a token in wake (one is enough).
func (h *holder) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// take removes up to max queued statements, oldest first, appending them
// to batch. Called after receiving from wake; statements left behind get
// their token back.
func (h *holder) take(batch []*query, max int) []*query {
	h.mu.Lock()
	n := min(len(h.pending), max)
	batch = append(batch, h.pending[:n]...)
	clear(h.pending[:n])
	rest := copy(h.pending, h.pending[n:])
	clear(h.pending[rest:])
	h.pending = h.pending[:rest]
	h.mu.Unlock()
	if rest > 0 {
		h.signal()
	}
	return batch
}

// shut ends the queue at the holder's end: statements submitted later fail
// at once, and those queued fail with err.
func (h *holder) shut(err error) {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	for _, q := range h.take(nil, math.MaxInt) {
		q.err = err
		q.finish()
	}
}

// run is the holder's life: connect, serve until an error, repeat.
func (h *holder) run() {
	defer h.a.b.wg.Done()
	b := h.a.b
	h.sql = h.statements()
	var gen uint64
	for b.ctx.Err() == nil {
		conn, err := h.connect()
		if err != nil {
			b.outage.fail("holder "+h.name, err)
			h.failQueued(fmt.Errorf("%w: %w", errHolderDown, err), 200*time.Millisecond)
			continue
		}
		b.outage.ok()
		gen += 2 // odd numbers never occur: 0 means down
		h.leases.Store(&sessionLeases{gen: gen})
		h.gen.Store(gen)
		err = h.serve(conn, gen)
		h.gen.Store(0)
		conn.Close(context.Background())
		if b.ctx.Err() != nil {
			break
		}
		h.lost.Add(1)
		b.log.Warn("pgbridge: holder connection lost; its locks were released", "holder", h.idx, "err", flatErr(err))
		for _, o := range h.a.holders { // PostgreSQL may have restarted: every session may be gone
			select {
			case o.check <- struct{}{}:
			default:
			}
		}
		// Forget the lost leases in the background, then fence the
		// row-less ones (deferred.go), which retries until PostgreSQL
		// answers: an operation may hold a stripe while it waits for this
		// holder, which must go on.
		b.wg.Add(1)
		go func(lost session) {
			defer b.wg.Done()
			h.a.sweep()
			h.a.fenceRowless(lost)
		}(session{h: h, gen: gen, pid: h.pid, marker: h.marker})
	}
	h.shut(errors.New("pgbridge: closed"))
}

// connect opens the holder's session and removes the lease rows a former
// session of this holder left behind (its locks died with it) that fence
// nothing.
func (h *holder) connect() (*pgx.Conn, error) {
	b := h.a.b
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.OpTimeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(b.cfg.DSN)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "lockproxy holder " + h.name
	cfg.RuntimeParams[internalParam] = "on"
	// Each statement of a batch takes its own snapshot: the fence check
	// after the acquires must see what was committed before their locks.
	cfg.RuntimeParams["default_transaction_isolation"] = "read committed"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `DELETE FROM `+b.table+` l WHERE l.holder = $1 AND `+reapable, h.name); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	if err := h.a.quarantineAfter(ctx, conn, h); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	if err := h.registerSession(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// failQueued fails the statements that arrive while the holder is down,
// for d (and at least those already waiting).
func (h *holder) failQueued(err error, d time.Duration) {
	fail := func() {
		for _, q := range h.take(nil, math.MaxInt) {
			q.err = err
			q.finish()
		}
	}
	fail()
	t := time.NewTimer(d)
	defer t.Stop()
	for h.a.b.ctx.Err() == nil {
		select {
		case <-h.wake:
			fail()
		case <-t.C:
			return
		case <-h.a.b.ctx.Done():
			return
		}
	}
}

// pingEvery is how often an idle holder checks its session, so that a
// session killed from outside (pg_terminate_backend) is noticed without
// traffic.
const pingEvery = time.Second

// serve runs batches on conn until an error or Close.
func (h *holder) serve(conn *pgx.Conn, gen uint64) error {
	b := h.a.b
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	batch := make([]*query, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-h.wake:
			batch = h.take(batch, maxBatch)
			if len(batch) == 0 {
				continue
			}
		case <-h.check:
			if err := h.ping(conn); err != nil {
				return err
			}
			continue
		case <-ping.C:
			if h.lowerable() {
				if err := h.lower(conn); err != nil {
					return err
				}
				continue
			}
			if err := h.ping(conn); err != nil {
				return err
			}
			continue
		case <-b.ctx.Done():
			return b.ctx.Err()
		}
		if err := h.runBatch(conn, gen, batch); err != nil {
			return err
		}
	}
}

// releaseSQL deletes the lease rows of a batch's releases (those that
// have one) and unlocks their locks, answering (ordinality, unlocked, id,
// NULL) per release. Releases without rows only unlock.
func (h *holder) releaseSQL(rows bool) string {
	if !rows {
		return `SELECT ord, pg_advisory_unlock(id), id, NULL::boolean FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord) ORDER BY ord`
	}
	return `WITH r AS (SELECT * FROM unnest($1::int[], $2::bytea[], $3::bigint[], $4::bool[]) WITH ORDINALITY AS u(db, key, id, row, ord)),
		d AS (DELETE FROM ` + h.a.b.table + ` t USING r WHERE r.row AND t.db = r.db AND t.key = r.key AND t.holder_pid = pg_backend_pid())
		SELECT ord, pg_advisory_unlock(id), id, NULL::boolean FROM r ORDER BY ord`
}

// deleteRowsSQL is a batch's release statement when some of its releases
// have rows: it deletes those rows and unlocks only the releases without
// one (answering true for the others). Their locks are unlocked after the
// batch committed (unlockAfter): a lock let go inside the transaction
// that deletes its row is free to other sessions before the deletion is,
// and a session that took it then read the row as its holder's fence
// until its deadline (found with node-redisson's counter across two
// instances: TRYAGAIN for a lock released a moment before).
func (h *holder) deleteRowsSQL() string {
	return `WITH r AS (SELECT * FROM unnest($1::int[], $2::bytea[], $3::bigint[], $4::bool[]) WITH ORDINALITY AS u(db, key, id, row, ord)),
		d AS (DELETE FROM ` + h.a.b.table + ` t USING r WHERE r.row AND t.db = r.db AND t.key = r.key AND t.holder_pid = pg_backend_pid())
		SELECT ord, CASE WHEN row THEN true ELSE pg_advisory_unlock(id) END, id, NULL::boolean FROM r ORDER BY ord`
}

// unlockAfter unlocks, in a transaction of its own after the batch that
// deleted their rows committed, the locks of a batch's releases that had
// rows (deleteRowsSQL).
func (h *holder) unlockAfter(ctx context.Context, conn *pgx.Conn, rel []*query) error {
	var rows []*query
	for _, q := range rel {
		if q.row {
			rows = append(rows, q)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return unlockBatch(ctx, conn, h.sql.release, rows, false)
}

// unlockBatch runs one release statement (sql, for rel; rows: the form
// that also deletes rows) on conn alone, and checks every lock was held.
func unlockBatch(ctx context.Context, conn *pgx.Conn, sql string, rel []*query, rows bool) error {
	var pb pgx.Batch
	pb.Queue(sql, releaseArgs(rel, rows)...)
	br := conn.SendBatch(ctx, &pb)
	err := readRows(br, rel, checkUnlocked)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkUnlocked is readRows's check of a release's row.
func checkUnlocked(_ *query, ok bool, _ int64) error {
	if !ok {
		return errors.New("pg_advisory_unlock: the holder session did not hold the lock")
	}
	return nil
}

func releaseArgs(qs []*query, rows bool) []any {
	ids := make([]int64, len(qs))
	if !rows {
		for i, q := range qs {
			ids[i] = q.id
		}
		return []any{ids}
	}
	dbs, keys, rs := make([]int32, len(qs)), make([][]byte, len(qs)), make([]bool, len(qs))
	for i, q := range qs {
		dbs[i], keys[i], ids[i], rs[i] = int32(q.k.db), []byte(q.k.key), q.id, q.row
	}
	return []any{dbs, keys, ids, rs}
}

func anyRow(qs []*query) bool {
	for _, q := range qs {
		if q.row {
			return true
		}
	}
	return false
}

// acquireSQL tries the lock of each of a batch's acquires and writes the
// lease rows of those it took (but for deferred ones), answering
// (ordinality, acquired, lock id, unlocked). pg_try_advisory_lock is
// volatile, so the MATERIALIZED step runs it exactly once per row. A key
// whose row is a fence (fence.go: checked on the row as it stands, under
// the conflict's row lock) keeps its row, and its lock is released again
// in the same statement. A deferred acquire's fences are checked by the
// statement after it (checkSQL).
func (h *holder) acquireSQL() string {
	return `WITH l AS MATERIALIZED (
			SELECT u.*, pg_try_advisory_lock(hashtextextended(u.ht, u.db::bigint)) AS ok, hashtextextended(u.ht, u.db::bigint) AS id
			FROM unnest($1::int[], $2::bytea[], $3::text[], $4::bytea[], $5::bigint[], $7::bool[],
				$8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[]) WITH ORDINALITY AS u(db, key, ht, token, deadline, d, gms, ca, cn, cu, gb, ord)),
		ins AS (INSERT INTO ` + h.a.b.table + ` AS t (db, key, lock_id, token, deadline_ms, holder, holder_pid,
				granted_ms, client_addr, client_name, client_user, granted_by)
			SELECT db, key, id, token, deadline, $6, pg_backend_pid(), gms, ca, cn, cu, gb FROM l WHERE ok AND NOT d
			ON CONFLICT (db, key) DO UPDATE SET lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, kind = 0,
				deadline_ms = EXCLUDED.deadline_ms, holder = EXCLUDED.holder, holder_pid = EXCLUDED.holder_pid,
				fencing_token = NULL, granted_ms = EXCLUDED.granted_ms, client_addr = EXCLUDED.client_addr,
				client_name = EXCLUDED.client_name, client_user = EXCLUDED.client_user, granted_by = EXCLUDED.granted_by
			WHERE NOT ` + fencedBy("t") + `
			RETURNING t.db, t.key)
		SELECT l.ord, l.ok AND (l.d OR ins.db IS NOT NULL), l.id, CASE WHEN l.ok AND NOT l.d AND ins.db IS NULL THEN pg_advisory_unlock(l.id) END
		FROM l LEFT JOIN ins ON ins.db = l.db AND ins.key = l.key ORDER BY l.ord`
}

func (h *holder) acquireArgs(qs []*query) []any {
	n := len(qs)
	dbs, keys, hts, toks, dls, ds := make([]int32, n), make([][]byte, n), make([]string, n), make([][]byte, n), make([]*int64, n), make([]bool, n)
	for i, q := range qs {
		dbs[i], keys[i], hts[i], ds[i] = int32(q.k.db), []byte(q.k.key), hashText(q.k.key), q.deferred
		toks[i] = append(make([]byte, 0, len(q.token)), q.token...) // never nil: nil is NULL
		if q.dl != 0 {
			dls[i] = &q.dl
		}
	}
	g := grantArrays(qs)
	return []any{dbs, keys, hts, toks, dls, h.name, ds, g.at, g.addr, g.name, g.user, g.by}
}

// readRows reads a merged statement's rows (ordinality, ok, id, and a
// column it ignores) into its queries.
func readRows(br pgx.BatchResults, qs []*query, set func(q *query, ok bool, id int64) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var ord, id int64
		var ok bool
		var extra *bool
		if err := rows.Scan(&ord, &ok, &id, &extra); err != nil {
			return err
		}
		if ord < 1 || int(ord) > len(qs) {
			return fmt.Errorf("merged statement answered row %d of %d", ord, len(qs))
		}
		q := qs[ord-1]
		q.err = set(q, ok, id)
		seen++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != len(qs) {
		return fmt.Errorf("merged statement answered %d rows for %d requests", seen, len(qs))
	}
	for _, q := range qs {
		if q.err != nil {
			return q.err
		}
	}
	return nil
}

func (h *holder) ping(conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.a.b.cfg.OpTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, "SELECT 1")
	return err
}

// runBatch sends batch in one pipeline. On any error every statement of
// the batch fails and the session ends (the caller closes it): the batch
// ran in one implicit transaction, so its row changes are undone, and the
// locks go with the session.
func (h *holder) runBatch(conn *pgx.Conn, gen uint64, batch []*query) error {
	run, acq, rel, stmts := h.admit(gen, batch)
	if len(run) == 0 {
		return nil
	}
	var pb pgx.Batch
	raise, need := h.queueBatch(&pb, acq, rel, stmts)
	ctx, cancel := context.WithTimeout(context.Background(), h.a.b.cfg.OpTimeout)
	defer cancel()
	br := conn.SendBatch(ctx, &pb)
	first := readBatch(br, acq, rel, stmts, raise != 0, need > 0)
	if err := br.Close(); err != nil && first == nil {
		first = err
	}
	if first == nil && len(rel) > 0 {
		first = h.unlockAfter(ctx, conn, rel)
		if first == nil {
			h.lockTaken(gen, -int64(len(rel)))
		}
	}
	if first == nil && len(acq) > 0 {
		if raise != 0 {
			h.until = raise
		}
		first = h.unfence(ctx, conn, acq)
		for _, q := range acq {
			if !q.ok || first != nil {
				continue
			}
			h.counted(q.k.db, gen)
			h.lockTaken(gen, 1)
			if q.deferred {
				q.rowless = h.rowless.Load()
				q.rowless.Add(1) // before the acquire hears of it, and before the next batch
			}
		}
	}
	if first != nil {
		h.gen.Store(0) // before anyone hears of the failure
		for _, q := range run {
			if q.err == nil {
				q.err = fmt.Errorf("%w (%v)", errLost, first)
			}
		}
	}
	for _, q := range run {
		q.gen = gen
		q.finish()
	}
	return first
}

// admit answers at once the statements of a batch that cannot run (for an
// earlier session, or refused by the quarantine) and sorts the rest: run
// is every statement that runs, acq the acquires, rel the releases, stmts
// the others.
func (h *holder) admit(gen uint64, batch []*query) (run, acq, rel, stmts []*query) {
	run = batch[:0:0]
	var held error // the quarantine, once asked
	asked := false
	for _, q := range batch {
		if q.want != 0 && q.want != gen {
			q.err = errLost
			q.finish()
			continue
		}
		if q.kind == qAcquire || q.locks {
			if !asked {
				held, asked = h.a.quarantined(), true
			}
			if held != nil {
				q.err = held
				q.finish()
				continue
			}
		}
		switch q.kind {
		case qAcquire:
			acq = append(acq, q)
		case qRelease:
			rel = append(rel, q)
		default:
			stmts = append(stmts, q)
		}
		run = append(run, q)
	}
	return run, acq, rel, stmts
}

// queueBatch queues a batch's statements: the releases, the acquires with
// the session's rowless_until_ms raise they need (raise: its new value, 0
// for none; need: the latest deadline of a deferred acquire, 0 for none)
// and their check, then the rest. The statements of one batch are for
// different keys (an operation holds its keys' stripes until its
// statement is done), so their order does not matter.
func (h *holder) queueBatch(pb *pgx.Batch, acq, rel, stmts []*query) (raise, need int64) {
	if len(rel) > 0 {
		relRows := anyRow(rel)
		sql := h.sql.release
		if relRows {
			sql = h.sql.releaseRows
		}
		pb.Queue(sql, releaseArgs(rel, relRows)...)
	}
	if len(acq) > 0 {
		pb.Queue(h.sql.acquire, h.acquireArgs(acq)...)
		for _, q := range acq {
			if q.deferred {
				need = max(need, q.dl)
			}
		}
		if need > h.until { // in the grant's transaction: before any client hears OK
			raise = addMS(need, rowlessSlack.Milliseconds())
			pb.Queue(h.sql.raise, raise-nowMS())
		}
		if need > 0 {
			pb.Queue(h.sql.check, checkArgs(acq)...)
		} else {
			pb.Queue(h.sql.checkDead)
		}
	}
	for _, q := range stmts {
		pb.Queue(q.sql, q.args...)
	}
	return raise, need
}

// readBatch reads a batch's results in queueBatch's order into its
// statements, and returns the first error.
func readBatch(br pgx.BatchResults, acq, rel, stmts []*query, raised, deferred bool) error {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if len(rel) > 0 {
		note(readRows(br, rel, checkUnlocked))
	}
	if len(acq) > 0 {
		note(readRows(br, acq, func(q *query, ok bool, id int64) error {
			q.ok, q.id = ok, id
			return nil
		}))
		if raised {
			var one int
			if err := br.QueryRow().Scan(&one); errors.Is(err, pgx.ErrNoRows) {
				note(errors.New("the holder session's row in the sessions table is gone"))
			} else {
				note(err)
			}
		}
		if deferred {
			note(readChecks(br, acq))
		} else {
			note(readDeadCheck(br, acq))
		}
	}
	for _, q := range stmts {
		if q.scan != nil {
			q.err = q.scan(br.QueryRow())
		} else {
			_, q.err = br.Exec()
		}
		note(q.err)
	}
	return first
}
