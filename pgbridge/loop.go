package pgbridge

import (
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// The advisory strategy on the front end's event loops (backend.Looper):
// `SET key token NX [PX ms]` and a catalogued release script start on
// the loop, go to their key's holder queue as the blocking calls' do, and
// the holder goroutine that ran the batch finishes them (the lease's
// bookkeeping under its stripe lock) and posts the reply back to the
// loop. No goroutine is started or parked per command.
//
// Only the fast paths run here, and only when they need no waiting: the
// key's stripe lock free at once (TryLock; another operation of the stripe
// under way sends this one the ordinary way, which waits for it), and no
// horizon to record first (cover). A key held here, live, or fenced is
// refused on the loop. Everything else — a key held here past its
// deadline, a key held elsewhere, a deadline past the recorded horizon, the
// lease strategy — is declined and runs the ordinary way, which decides it
// as before. The stripe lock is taken on the loop and let go by the holder
// goroutine once the statement ran: the same critical section as the
// blocking path's, across two goroutines.

// NewLoop implements backend.Looper: nil for the lease strategy, which
// runs every command the ordinary way.
func (b *Backend) NewLoop(l backend.Loop) backend.LoopBackend {
	a, ok := b.store.(*advisory)
	if !ok {
		return nil
	}
	return &advLoop{a: a, l: l}
}

// advLoop is the advisory strategy's part of one event loop.
type advLoop struct {
	a *advisory
	l backend.Loop
}

var _ backend.LoopBackend = (*advLoop)(nil)

// StartSet implements backend.LoopBackend for SET … NX without GET.
func (al *advLoop) StartSet(hd *backend.Holder, db int, key string, token []byte, o backend.SetOptions, _ time.Time, done func(backend.SetResult, error)) bool {
	if o.Cond != backend.IfAbsent || o.Get || checkDB(db) != nil {
		return false
	}
	a, k := al.a, dbKey{db, key}
	st := a.b.stripe(k)
	if !st.mu.TryLock() {
		return false
	}
	g, res, ok := a.acquireStart(st, k, token, o, hd)
	if g == nil || !a.covered(g.q.dl) {
		if g != nil {
			a.unreserve(1)
		}
		st.mu.Unlock()
		if !ok || g != nil {
			return false
		}
		a.loopOps.Add(1)
		al.post(func() { done(res, nil) }) // held here, or fenced: refused
		return true
	}
	a.loopOps.Add(1)
	g.q.then = func() {
		res, err := a.acquireEnd(st, g, g.q.err)
		st.mu.Unlock()
		al.post(func() { done(res, err) })
	}
	g.h.submit(g.q)
	return true
}

// StartEval implements backend.LoopBackend for a catalogued release of a
// key this instance holds with the script's token.
func (al *advLoop) StartEval(_ *backend.Holder, db int, s backend.Script, keys []string, args [][]byte, ro bool, _ time.Time, done func(backend.Value, error)) bool {
	a := al.a
	if !a.fastRelease(s, len(keys), args, ro) || checkDB(db) != nil {
		return false
	}
	k := dbKey{db, keys[0]}
	st := a.b.stripe(k)
	if !st.mu.TryLock() {
		return false
	}
	e, q := a.releaseStart(st, k, args[0])
	if q == nil {
		st.mu.Unlock()
		return false
	}
	a.loopOps.Add(1)
	q.then = func() {
		v, err := a.releaseEnd(st, k, e, q.err)
		st.mu.Unlock()
		al.post(func() { done(v, err) })
	}
	e.h.submit(q)
	return true
}

// StartGet implements backend.LoopBackend: reads run the ordinary way.
func (al *advLoop) StartGet(int, string, time.Time, func([]byte, bool, error)) bool { return false }

// StartPTTL implements backend.LoopBackend: reads run the ordinary way.
func (al *advLoop) StartPTTL(int, string, time.Time, func(int64, error)) bool { return false }

// post runs f on the loop. A loop that has stopped has no client left to
// answer.
func (al *advLoop) post(f func()) { _ = al.l.Execute(f) }
