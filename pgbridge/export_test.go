package pgbridge

import "time"

// HoldStripe locks the stripe of db's key, as a slow operation on another
// key of the same stripe would, until unlock.
func HoldStripe(b *Backend, db int, key string) (unlock func()) {
	st := b.stripe(dbKey{db, key})
	st.mu.Lock()
	return st.mu.Unlock
}

// SkewClock shifts this process's wall clock (every Backend's) by d, as on
// an instance whose clock differs from PostgreSQL's, until the test ends.
// Only tests that do not run in parallel may use it.
func SkewClock(t interface{ Cleanup(func()) }, d time.Duration) {
	clockSkew.Store(d.Milliseconds())
	t.Cleanup(func() { clockSkew.Store(0) })
}

// ArmedTimers counts the advisory strategy's leases whose timer (row
// write or expiry) is armed.
func ArmedTimers(b *Backend) int {
	a := b.store.(*advisory) // the lease strategy has no timers
	n := 0
	for i := range b.stripes {
		st := &b.stripes[i]
		st.mu.Lock()
		for _, e := range st.owned {
			if a.timers.armed(e) {
				n++
			}
		}
		st.mu.Unlock()
	}
	return n
}

// LoopOps counts the commands the front end's event loops started on the
// advisory strategy (loop.go).
func LoopOps(b *Backend) int64 { return b.store.(*advisory).loopOps.Load() }
