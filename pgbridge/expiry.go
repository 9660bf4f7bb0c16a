package pgbridge

import (
	"container/heap"
	"sync"
	"time"
)

// The life of this instance's leases (advisory strategy): a timer ends each
// at its deadline, and a lost holder session turns its leases into fences
// (fence.go) or forgets them.

// drop forgets a lease (its stripe locked).
func (a *advisory) drop(st *stripe, k dbKey, e *held) {
	a.timers.stop(e)
	if (e.row || e.deferred) && !e.lost {
		a.rows.Add(-1)
	}
	if e.row || e.deferred {
		a.uncounted(k, e)
	}
	if e.deferred && !e.row {
		a.settled(k, e)
	}
	e.row, e.deferred = false, false
	delete(st.owned, k)
}

// arm sets the timer that ends a lease at its deadline: the holder
// deletes the row and releases the lock, to the millisecond of the
// deadline plus one round trip.
func (a *advisory) arm(k dbKey, e *held) {
	if a.b.ctx.Err() != nil {
		a.timers.stop(e)
		return // closed (stopTimers)
	}
	if e.deferred && !e.row {
		if at := e.granted + a.b.cfg.LeaseRowDelay.Milliseconds(); at < e.deadline {
			a.timers.set(k, e, at, true)
			return
		}
	}
	a.armExpiry(k, e)
}

// armExpiry sets the timer that ends e at its deadline, whether or not it
// has its row: for a row write that came too late (its deadline passed,
// or it met a fence), which arm would send back to writeRow at once, and
// for ever (the advisory lock would then never expire).
func (a *advisory) armExpiry(k dbKey, e *held) {
	if e.deadline == 0 || a.b.ctx.Err() != nil {
		a.timers.stop(e)
		return
	}
	a.timers.set(k, e, e.deadline, false)
}

// timers are the leases' timers: one heap by due time and one time.Timer
// for its earliest, rather than a time.AfterFunc per lease, whose
// allocation was most of a grant's garbage and, on the proxy's small
// per-command stacks, a stack copy per grant. A lease has at most one
// timer (leaseTimer, guarded by mu). A timer that is due runs its work on
// a goroutine of its own, as time.AfterFunc does, and the work decides
// under the stripe lock as before: a timer stopped too late to keep it
// from starting finds its lease gone or changed, as a time.AfterFunc
// whose Stop came too late did.
type timers struct {
	run func(k dbKey, e *held, row bool) // a due timer's work: writeRow (row) or expire
	mu  sync.Mutex
	q   timerHeap
	t   *time.Timer // fires at q's earliest due time, or is stopped
	at  int64       // when t fires (Unix ms; 0: stopped)
}

// leaseTimer is a lease's place in the heap.
type leaseTimer struct {
	idx int   // its index in timers.q while on
	on  bool  // in the heap
	at  int64 // due, Unix ms
	row bool  // writes the deferred row (writeRow), else ends the lease (expire)
	key dbKey
}

// set (re)sets e's timer to at.
func (ts *timers) set(k dbKey, e *held, at int64, row bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if e.timer.on {
		heap.Remove(&ts.q, e.timer.idx)
	}
	e.timer = leaseTimer{on: true, at: at, row: row, key: k}
	heap.Push(&ts.q, e)
	ts.schedule()
}

// stop removes e's timer, if it has one.
func (ts *timers) stop(e *held) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if e.timer.on {
		heap.Remove(&ts.q, e.timer.idx)
		e.timer.on = false
	}
}

// schedule points t at the earliest due time (mu held). A time.Timer is
// only reset when the earliest time moved earlier or the timer is off:
// when it fires early for what it was set for, fire sets it again.
func (ts *timers) schedule() {
	if len(ts.q) == 0 {
		return
	}
	at := ts.q[0].timer.at
	if ts.at != 0 && ts.at <= at {
		return
	}
	ts.at = at
	d := untilMS(at)
	if ts.t == nil {
		ts.t = time.AfterFunc(d, ts.fire)
		return
	}
	ts.t.Reset(d)
}

// fire starts the work of every timer that is due, and sets t for the
// next.
func (ts *timers) fire() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.at = 0
	now := nowMS()
	for len(ts.q) > 0 && ts.q[0].timer.at <= now {
		e := heap.Pop(&ts.q).(*held)
		e.timer.on = false
		go ts.run(e.timer.key, e, e.timer.row)
	}
	ts.schedule()
}

// armed reports whether e's timer is set.
func (ts *timers) armed(e *held) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return e.timer.on
}

// timerHeap orders leases by their timers' due times (container/heap).
type timerHeap []*held

func (q timerHeap) Len() int           { return len(q) }
func (q timerHeap) Less(i, j int) bool { return q[i].timer.at < q[j].timer.at }
func (q timerHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].timer.idx, q[j].timer.idx = i, j
}
func (q *timerHeap) Push(x any) {
	e := x.(*held)
	e.timer.idx = len(*q)
	*q = append(*q, e)
}
func (q *timerHeap) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// expire ends the lease e of k if it is still this one and its deadline
// has passed.
func (a *advisory) expire(k dbKey, e *held) {
	st := a.b.stripe(k)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.owned[k] != e {
		return
	}
	if !e.valid() {
		a.drop(st, k, e)
		return
	}
	if e.deadline == 0 || e.deadline > nowMS() {
		a.arm(k, e) // extended meanwhile
		return
	}
	q := &query{kind: qRelease, k: k, id: e.lockID, row: e.row, want: e.gen}
	e.h.submit(q)
	do(q) // on failure the session ended, and the lock with it
	a.drop(st, k, e)
	a.expired.Add(1)
}

// sweep forgets the leases of sessions that are gone, but for the fences
// they leave (their timers end them at their deadlines).
func (a *advisory) sweep() {
	now := nowMS()
	for i := range a.b.stripes {
		st := &a.b.stripes[i]
		st.mu.Lock()
		for k, e := range st.owned {
			_, fenced := e.fence(now)
			switch {
			case e.valid():
			case !fenced:
				a.drop(st, k, e)
			case !e.lost:
				e.lost = true
				a.rows.Add(-1)
			}
		}
		st.mu.Unlock()
	}
}

// stopTimers stops every lease's timer at Close, once Backend.ctx has
// ended (no timer is armed after that: arm, armExpiry), so that nothing of
// a closed Backend runs later. Its locks ended with its sessions.
func (a *advisory) stopTimers() {
	for i := range a.b.stripes {
		st := &a.b.stripes[i]
		st.mu.Lock()
		for _, e := range st.owned {
			a.timers.stop(e)
		}
		st.mu.Unlock()
	}
}
