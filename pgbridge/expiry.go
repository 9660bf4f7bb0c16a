package pgbridge

import "time"

// The life of this instance's leases (advisory strategy): a timer ends each
// at its deadline, and a lost holder session turns its leases into fences
// (fence.go) or forgets them.

// drop forgets a lease (its stripe locked).
func (a *advisory) drop(st *stripe, k dbKey, e *held) {
	if e.timer != nil {
		e.timer.Stop()
	}
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
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if a.b.ctx.Err() != nil {
		return // closed (stopTimers)
	}
	if e.deferred && !e.row {
		if at := e.granted + a.b.cfg.LeaseRowDelay.Milliseconds(); at < e.deadline {
			e.timer = time.AfterFunc(untilMS(at), func() { a.writeRow(k, e) })
			return
		}
	}
	a.armExpiry(k, e)
}

// armExpiry sets the timer that ends e at its deadline, whether or not it
// has its row: for a row write that came too late (its deadline passed,
// or it met a fence), which arm would send back to writeRow at once, and
// for ever (found by review: the advisory lock then never expired).
func (a *advisory) armExpiry(k dbKey, e *held) {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if e.deadline == 0 || a.b.ctx.Err() != nil {
		return
	}
	e.timer = time.AfterFunc(untilMS(e.deadline), func() { a.expire(k, e) })
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
			if e.timer != nil {
				e.timer.Stop()
				e.timer = nil
			}
		}
		st.mu.Unlock()
	}
}
