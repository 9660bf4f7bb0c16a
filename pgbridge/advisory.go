package pgbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/luascripts"
)

// advisory is the session-advisory strategy: a key is held by this
// process while one of its holder sessions holds the advisory lock
// hashtextextended(key, db); its token and deadline are kept here (held)
// and mirrored into a lease row for other instances and operators.
type advisory struct {
	b       *Backend
	holders []*holder
	router  *router
	rows    atomic.Int64  // leases (the locks this instance holds), with a row or deferred
	expired atomic.Uint64 // leases its timers ended at their deadlines (expiry.go)
	drained atomic.Bool   // Close has begun: new leases get their rows at once (deferred.go drain)

	epoch      time.Time     // the monotonic origin of quarantine
	quarantine atomic.Int64  // no lock is taken before epoch + this (horizon.go)
	gateMu     sync.Mutex    // one reading of the restart wait at a time, read to quarantine
	gateKick   chan struct{} // wakes watchRestart
	horizon    atomic.Int64  // deadlines (Unix ms) up to this are covered by the recorded horizon
	horizonMu  sync.Mutex    // one horizon write at a time

	timers timers   // the leases' timers (expiry.go)
	cap    capacity // PostgreSQL's lock table and this instance's share (capacity.go)

	releases luascripts.Releases // catalogued release scripts seen (evalFast)
	loopOps  atomic.Int64        // commands the event loops started (loop.go)
}

// held is a key this process holds the advisory lock of. row is false for
// a key locked only for the length of one operation on an absent key, and
// for a deferred lease (deferred.go) until its row is written.
type held struct {
	state
	lockID   int64
	h        *holder
	gen      uint64
	row      bool
	deferred bool          // granted without a row (its row is written granted+LeaseRowDelay)
	granted  int64         // deferred: when, Unix ms
	lost     bool          // kept as a fence after its session was lost; no longer counted in rows
	timer    leaseTimer    // its timer in the advisory's timers (expiry.go)
	rowless  *atomic.Int64 // deferred: its session's count of row-less locks (holder.rowless)
}

// valid reports whether the session that took the lock is still the
// holder's session.
func (e *held) valid() bool { return e.gen == e.h.gen.Load() }

// heldByRowHolder is true for a lease row whose holder session still holds
// the row's advisory lock (l is the lease row).
const heldByRowHolder = `EXISTS (SELECT 1 FROM pg_locks p WHERE p.locktype = 'advisory' AND p.granted
	AND p.pid = l.holder_pid AND p.objsubid = 1
	AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND p.classid = ((l.lock_id >> 32) & 4294967295)::oid AND p.objid = (l.lock_id & 4294967295)::oid)`

func newAdvisory(b *Backend) *advisory {
	a := &advisory{b: b, epoch: time.Now(), gateKick: make(chan struct{}, 1)}
	a.timers.run = func(k dbKey, e *held, row bool) {
		if row {
			a.writeRow(k, e)
		} else {
			a.expire(k, e)
		}
	}
	a.addHolders(b.cfg.Holders)
	return a
}

// addHolders adds holders up to n (before start runs them).
func (a *advisory) addHolders(n int) {
	for i := len(a.holders); i < n; i++ {
		a.holders = append(a.holders, &holder{a: a, idx: i, name: fmt.Sprintf("%s/%d", a.b.instance, i), wake: make(chan struct{}, 1), check: make(chan struct{}, 1)})
	}
}

// The advisory strategy's lease table is UNLOGGED: its rows only mean
// something while the sessions holding the locks live, and a crash of
// PostgreSQL ends those sessions too. The horizons table is logged
// (horizon.go).
func (a *advisory) logged() bool { return false }

func (a *advisory) extraDDL() []string {
	s := a.b.cfg.Schema
	return []string{horizonsDDL(s), aliveDDL(s), aliveIDDDL(s), sessionsDDL(s)}
}

// start LISTENs for routed operations, starts the holder sessions and the
// reaper of stale rows, and returns once every holder session is up.
func (a *advisory) start(ctx context.Context) error {
	b := a.b
	if err := a.readCapacity(ctx, int64(b.cfg.AdvisoryLocks)); err != nil {
		return err
	}
	a.addHolders(a.cap.holders(len(a.holders)))
	r, err := newRouter(ctx, a)
	if err != nil {
		return err
	}
	a.router = r
	for _, h := range a.holders {
		b.wg.Add(1)
		go h.run()
	}
	b.wg.Add(2)
	go a.reapStale()
	go a.watchRestart()
	deadline := time.Now().Add(b.cfg.OpTimeout)
	for _, h := range a.holders {
		for h.gen.Load() == 0 {
			if time.Now().After(deadline) {
				b.cancel()
				b.wg.Wait()
				return fmt.Errorf("pgbridge: holder connections did not come up within %v", b.cfg.OpTimeout)
			}
			time.Sleep(5 * time.Millisecond) // waiting for the holder goroutines' first connect
		}
	}
	return nil
}

func (a *advisory) holderOf(k dbKey) *holder {
	return a.holders[maphash.String(a.b.seed, k.key)%uint64(len(a.holders))]
}

// do runs queries (on their holders, in parallel) and waits for all.
func do(qs ...*query) error {
	var first error
	for _, q := range qs {
		<-q.done
		if q.err != nil && first == nil {
			first = q.err
		}
	}
	return first
}

// acquire is SET … NX: refused at once for a key this process holds, live;
// for a key it does not hold, lock and lease row in one statement on the
// key's holder. done is false when the key needs the general path (held
// here past its deadline, or the expiry lies in the past).
func (a *advisory) acquire(ctx context.Context, k dbKey, token []byte, o backend.SetOptions) (backend.SetResult, bool, error) {
	st := a.b.stripe(k)
	st.mu.Lock()
	defer st.mu.Unlock()
	g, res, done := a.acquireStart(st, k, token, o, backend.HolderOf(ctx))
	if g == nil {
		return res, done, nil
	}
	if err := a.cover(ctx, g.q.dl); err != nil {
		a.unreserve(1)
		return backend.SetResult{}, true, err
	}
	g.h.submit(g.q)
	res, err := a.acquireEnd(st, g, do(g.q))
	return res, true, err
}

// acquiring is an acquire under way on its holder session.
type acquiring struct {
	q   *query
	h   *holder
	now int64 // when it began, Unix ms
}

// acquireStart is acquire's first half, under st.mu: the statement to
// submit for holder hd, or (nil) its answer without one (done false: the
// general path's, which answers OOM when the instance holds its limit of
// advisory locks). A statement returned has room reserved for its lock
// (acquireEnd, or its caller when it is not sent, gives it back).
func (a *advisory) acquireStart(st *stripe, k dbKey, token []byte, o backend.SetOptions, hd *backend.Holder) (*acquiring, backend.SetResult, bool) {
	now := wallNow()
	var deadline int64
	if !o.Expiry.IsZero() {
		d := o.Expiry.Deadline(now)
		if d.UnixMilli() <= now.UnixMilli() {
			return nil, backend.SetResult{}, false
		}
		deadline = d.UnixMilli()
	}
	if e := st.owned[k]; e != nil {
		if e.valid() && e.state.live(now.UnixMilli()) {
			return nil, backend.SetResult{}, true // held here: refused, whatever its type
		}
		if e.valid() {
			return nil, backend.SetResult{}, false
		}
		if _, fenced := e.fence(now.UnixMilli()); fenced {
			return nil, backend.SetResult{}, true
		}
		a.drop(st, k, e)
	}
	if a.reserve(1, false) != nil {
		return nil, backend.SetResult{}, false
	}
	q := &query{kind: qAcquire, k: k, token: token, dl: deadline, deferred: a.deferrable(deadline, now.UnixMilli()), grant: backend.Grant{At: now.UnixMilli(), Holder: hd}}
	return &acquiring{q: q, h: a.holderOf(k), now: now.UnixMilli()}, backend.SetResult{}, true
}

// acquireEnd is acquire's second half, under st.mu, once g's statement
// ran (err: it failed).
func (a *advisory) acquireEnd(st *stripe, g *acquiring, err error) (backend.SetResult, error) {
	q := g.q
	a.unreserve(1) // counted on its session by now, if taken
	if err != nil {
		return backend.SetResult{}, tryAgain(err)
	}
	if !q.ok { // held, or fenced (the batch unlocked it again)
		return backend.SetResult{}, nil
	}
	e := &held{state: state{present: true, token: append(make([]byte, 0, len(q.token)), q.token...), deadline: q.dl, grant: q.grant}, lockID: q.id, h: g.h, gen: q.gen,
		row: !q.deferred, deferred: q.deferred, granted: g.now, rowless: q.rowless}
	st.owned[q.k] = e
	a.rows.Add(1)
	a.arm(q.k, e)
	return backend.SetResult{Written: true}, nil
}

// advTx is one prepared operation of the advisory strategy.
type advTx struct {
	a      *advisory
	keys   []dbKey
	states map[dbKey]state
	fresh  []dbKey        // keys locked by prepare (absent before, or fenced)
	fenced map[dbKey]bool // keys that are fences (fence.go): nothing may change them
}

func (t *advTx) before() map[dbKey]state { return t.states }

// clock is this process's clock: the holder's timers end its locks by it.
func (t *advTx) clock() time.Time { return wallNow() }

// prepare takes the advisory lock of each key this process does not hold.
// Keys whose lock another session has are a *heldError, with the instance
// holding each (from its lease row, or the session holding the lock). A
// key whose lock was let go between the try and that read (a contended
// lock changing hands: no session holds it, or the row's holder no longer
// does) is tried again, a few times, rather than answered TRYAGAIN for
// want of a holder to route to. A fence stays a fence: taken, its lock
// shows it (t.fence).
func (a *advisory) prepare(ctx context.Context, keys []dbKey) (tx, error) {
	for attempt := 1; ; attempt++ {
		t, err := a.prepareOnce(ctx, keys)
		if !errors.Is(err, errLetGo) || attempt == 3 {
			return t, err
		}
	}
}

// errLetGo marks a *heldError one of whose keys was let go before its
// holder was read.
var errLetGo = errors.New("the lock was let go meanwhile")

// prepareOnce is one attempt of prepare.
func (a *advisory) prepareOnce(ctx context.Context, keys []dbKey) (tx, error) {
	t := &advTx{a: a, keys: keys, states: make(map[dbKey]state, len(keys))}
	var need []dbKey
	now := nowMS()
	for _, k := range keys {
		st := a.b.stripe(k)
		if e := st.owned[k]; e != nil {
			if e.valid() {
				t.states[k] = e.state
				continue
			}
			if f, ok := e.fence(now); ok {
				t.fence(k, f)
				continue
			}
			a.drop(st, k, e)
		}
		need = append(need, k)
	}
	if len(need) == 0 {
		return t, nil
	}
	if err := a.reserve(len(need), true); err != nil {
		return nil, err
	}
	defer a.unreserve(len(need)) // counted on their sessions once taken
	qs := make([]*query, 2*len(need))
	got := make([]bool, len(need))
	ids := make([]int64, len(need))
	fences := make([]*int64, len(need))
	for i, k := range need {
		h := a.holderOf(k)
		qs[2*i] = &query{sql: `SELECT pg_try_advisory_lock(hashtextextended($1::text, $2::int::bigint)), hashtextextended($1::text, $2::int::bigint)`,
			args: []any{hashText(k.key), k.db}, locks: true,
			scan: func(r pgx.Row) error {
				err := r.Scan(&got[i], &ids[i])
				if err == nil && got[i] {
					h.lockTaken(h.gen.Load(), 1) // on the holder goroutine, its session's (a failed batch ends it)
				}
				return err
			}}
		// The fences are read by the next statement on the same session,
		// whose snapshot is newer than the lock (deferred.go): a fence row,
		// or a session that ended with row-less locks.
		qs[2*i+1] = &query{sql: `SELECT GREATEST((SELECT f.deadline_ms FROM ` + a.b.table + ` f WHERE f.db = $1 AND f.key = $2 AND ` + fencedBy("f") + `), ` + a.deadUntilSQL() + `)`,
			args: []any{k.db, []byte(k.key)},
			scan: func(r pgx.Row) error { return r.Scan(&fences[i]) }}
		h.submit(qs[2*i])
		h.submit(qs[2*i+1])
	}
	err := do(qs...)
	var he heldError
	for i, k := range need {
		switch {
		case qs[2*i].err == nil && got[i]:
			st := a.b.stripe(k)
			st.owned[k] = &held{lockID: ids[i], h: a.holderOf(k), gen: qs[2*i].gen}
			t.states[k] = state{}
			t.fresh = append(t.fresh, k)
			if fences[i] != nil {
				t.fence(k, fenceState(*fences[i]))
			}
		case qs[2*i].err == nil:
			he.keys = append(he.keys, k)
		}
	}
	if err == nil && len(he.keys) == 0 {
		return t, nil
	}
	t.rollback()
	if err != nil {
		return nil, err
	}
	for _, k := range he.keys {
		_, in, rowless, rerr := a.readTable(ctx, k)
		if rerr != nil {
			return nil, rerr
		}
		// No instance to route to: no row and no session holds the lock
		// now, or the row read is its holder's, who no longer holds it (a
		// fence, or a release whose deletion the read's snapshot predates).
		he.letGo = he.letGo || (in == "" && !rowless)
		he.instances = append(he.instances, in)
	}
	return nil, &he
}

// fence makes k a fenced key of the operation.
func (t *advTx) fence(k dbKey, s state) {
	if t.fenced == nil {
		t.fenced = make(map[dbKey]bool)
	}
	t.fenced[k] = true
	t.states[k] = s
}

// rollback unlocks the keys prepare locked.
func (t *advTx) rollback() {
	t.unlock(t.fresh)
	t.fresh = nil
}

// unlock forgets keys this operation locked and releases their locks.
func (t *advTx) unlock(keys []dbKey) {
	var qs []*query
	for _, k := range keys {
		st := t.a.b.stripe(k)
		e := st.owned[k]
		delete(st.owned, k)
		if e == nil || !e.valid() {
			continue
		}
		q := &query{kind: qRelease, k: k, id: e.lockID, row: e.row, want: e.gen}
		e.h.submit(q)
		qs = append(qs, q)
	}
	do(qs...) // a failure ended the session, which released the lock
}

// commit writes what changed: a lease row for a key that came to be, an
// update for one that changed, and for one that is gone its row deleted
// and its lock released.
func (t *advTx) commit(ctx context.Context, after map[dbKey]state) error {
	b := t.a.b
	type change struct {
		k dbKey
		e *held
		s state
		q *query
	}
	for k := range t.fenced {
		// Nothing is written when a fenced key would change.
		if f, s := t.states[k], after[k]; !s.same(f) {
			t.rollback()
			return fencedError(k, f.deadline)
		}
	}
	var latest int64
	for _, k := range t.keys {
		if s := after[k]; s.present && s.deadline > latest && !t.fenced[k] {
			latest = s.deadline
		}
	}
	if err := t.a.overLimit(len(t.fresh), t.begins(after)); err != nil {
		t.rollback()
		return err
	}
	if err := t.a.cover(ctx, latest); err != nil {
		t.rollback()
		return err
	}
	var cs []change
	var unlock []dbKey // keys this operation locked that stay as they were
	for _, k := range t.keys {
		st := b.stripe(k)
		e := st.owned[k]
		s := after[k]
		if t.fenced[k] {
			if e.valid() {
				unlock = append(unlock, k)
			}
			continue
		}
		var q *query
		switch {
		case !s.present:
			q = &query{kind: qRelease, k: k, id: e.lockID, row: e.row}
		case !e.row:
			// Not over a fence that appeared since prepare read the row. A
			// deferred lease that changes gets its row now.
			q = t.a.rowQuery(k, e, s)
		case !s.same(e.state):
			q = &query{sql: `UPDATE ` + b.table + ` SET token = $3, kind = $5, deadline_ms = $4, fencing_token = $6,
					granted_ms = $7, client_addr = $8, client_name = $9, client_user = $10, granted_by = $11 WHERE db = $1 AND key = $2`,
				args: append([]any{k.db, []byte(k.key), s.token, deadlineParam(s.deadline), int16(s.kind), fencingParam(s.fencing)}, grantParams(s.grant)...)}
		default:
			continue
		}
		q.want = e.gen
		e.h.submit(q)
		cs = append(cs, change{k, e, s, q})
	}
	err := do(qsOf(cs, func(c change) *query { return c.q })...)
	for _, c := range cs {
		st := b.stripe(c.k)
		if c.q.err == nil && c.q.fenced {
			unlock = append(unlock, c.k) // still locked by this session
			if err == nil {
				err = fencedError(c.k, 0) // the fence's deadline, not c.s's, which is the refused lease's
			}
			continue
		}
		if c.q.err != nil || !c.s.present {
			// A lease whose statement failed (its session ended) stays, a
			// fence until its deadline (sweep): fenceRowless writes the
			// row of a deferred one (deferred.go), and a restart of
			// PostgreSQL that empties the lease table needs every one
			// (horizon.go's restore).
			if st.owned[c.k] == c.e && (c.q.err == nil || !(c.e.row || c.e.deferred)) {
				t.a.drop(st, c.k, c.e)
			}
			continue
		}
		c.e.state = c.s
		if !c.e.row {
			c.e.row = true
			if c.e.deferred {
				t.a.settled(c.k, c.e)
			} else {
				t.a.rows.Add(1)
			}
		}
		t.a.arm(c.k, c.e)
	}
	t.unlock(unlock)
	t.fresh = nil
	return err
}

// begins counts the keys this operation locked that become leases.
func (t *advTx) begins(after map[dbKey]state) int {
	n := 0
	for _, k := range t.fresh {
		if after[k].present && !t.fenced[k] {
			n++
		}
	}
	return n
}

func qsOf[T any](xs []T, f func(T) *query) []*query {
	qs := make([]*query, len(xs))
	for i, x := range xs {
		qs[i] = f(x)
	}
	return qs
}

// countLive counts the live keys of db, locks without rows included, on
// every instance alike (count.go).
func (a *advisory) countLive(ctx context.Context, db int, except [][]byte) (int64, error) {
	return a.countAll(ctx, db, except)
}

// evalFast runs a catalogued release script (luascripts.IsRelease) whose
// key this instance holds, live, with the script's token: it releases the
// lease as the general path would (the same release statement, merged by
// the holder with the others of its batch, and the same bookkeeping after
// it), without the general path's model round, which cost as much CPU as
// the rest of a lock cycle in pgbridge. Anything else (a key held
// elsewhere or by nobody, a fence, a lost session, an expired deadline, a
// token that differs) takes the general path, which decides it as before.
func (a *advisory) evalFast(ctx context.Context, sc backend.Script, keys []dbKey, args [][]byte, ro bool) (backend.Value, bool, error) {
	if !a.fastRelease(sc, len(keys), args, ro) {
		return backend.Value{}, false, nil
	}
	k := keys[0]
	st := a.b.stripe(k)
	st.mu.Lock()
	defer st.mu.Unlock()
	e, q := a.releaseStart(st, k, args[0])
	if q == nil {
		return backend.Value{}, false, nil
	}
	e.h.submit(q)
	v, err := a.releaseEnd(st, k, e, do(q))
	return v, true, err
}

// fastRelease reports whether evalFast may take a script call: a
// catalogued release of one key.
func (a *advisory) fastRelease(sc backend.Script, nkeys int, args [][]byte, ro bool) bool {
	return !ro && nkeys == 1 && len(args) >= 1 && a.releases.Is(sc)
}

// releaseStart is evalFast's first half, under st.mu: the release of k's
// lease e with token, or nil (the general path's).
func (a *advisory) releaseStart(st *stripe, k dbKey, token []byte) (*held, *query) {
	e := st.owned[k]
	// The general path's clock (advTx.clock): what the model would read.
	if e == nil || !e.valid() || !e.state.live((&advTx{}).clock().UnixMilli()) || e.kind != model.KindString || !bytes.Equal(e.token, token) {
		return nil, nil
	}
	return e, &query{kind: qRelease, k: k, id: e.lockID, row: e.row, want: e.gen}
}

// releaseEnd is evalFast's second half, under st.mu, once the release
// ran (err: it failed).
func (a *advisory) releaseEnd(st *stripe, k dbKey, e *held, err error) (backend.Value, error) {
	if err != nil {
		// As commit: a lease whose session ended stays, a fence until its
		// deadline (the client cannot tell whether it still holds it).
		return backend.Value{}, tryAgain(err)
	}
	a.drop(st, k, e)
	return backend.Int(1), nil
}

// reapStale deletes, every Config.ReapInterval, the lease rows whose holder
// session is gone (an instance that died) once they fence nothing.
func (a *advisory) reapStale() {
	defer a.b.wg.Done()
	t := time.NewTicker(a.b.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-a.b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(a.b.ctx, a.b.cfg.OpTimeout)
		_, err := a.b.pool.Exec(ctx, `DELETE FROM `+a.b.table+` l WHERE `+reapable)
		if err == nil {
			err = a.reapSessions(ctx)
		}
		cancel()
		if err != nil && a.b.ctx.Err() == nil {
			a.b.log.Warn("pgbridge: reaping stale lease rows", "err", err)
		}
	}
}

// check: the instance would grant a lock on a key nobody holds. Every
// holder session is up, no restart wait holds locking back (horizon.go),
// PostgreSQL answers, and no ended holder session's row-less locks fence
// every key (deferred.go).
func (a *advisory) check(ctx context.Context) error {
	if left := a.waitLeft(); left > 0 {
		return fmt.Errorf("postgres: not granting: %s", waitReason(left))
	}
	for _, h := range a.holders {
		if h.gen.Load() == 0 {
			return fmt.Errorf("pgbridge: holder %d: %w", h.idx, errHolderDown)
		}
	}
	var left *int64
	if err := a.b.pool.QueryRow(ctx, `SELECT `+a.deadUntilSQL()+` - `+pgNowMS).Scan(&left); err != nil {
		return err
	}
	if left != nil && *left > 0 {
		return fmt.Errorf("postgres: not granting: a holder session ended while it held locks not yet in the lease table; every key is fenced for %d ms more", *left)
	}
	return nil
}

func (a *advisory) close() {
	a.stopTimers()
	a.router.close()
}
