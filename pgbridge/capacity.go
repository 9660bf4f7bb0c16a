package pgbridge

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/backend"
)

// The advisory strategy's capacity. Every advisory lock a holder session
// holds is an entry in PostgreSQL's shared lock table, sized at start from
// max_locks_per_transaction × (max_connections + max_prepared_transactions)
// (plus the other server processes and some slack); once it is full, the
// statement that takes one more lock fails with "out of shared memory",
// which would end the holder session and every lock it held. So the
// instance holds at most a limit of advisory locks (Config.AdvisoryLocks,
// at most three quarters of that capacity, the rest left to PostgreSQL's
// other locks), counted per holder session (sessionLeases.locks), and a
// command that would take one more answers OOM alone: no statement is
// sent, no session is lost, no other key is touched.

// capacity is what the advisory strategy read of PostgreSQL's lock table
// at start, and the limit it keeps to.
type capacity struct {
	perTx, conns, prepared int64 // max_locks_per_transaction, max_connections, max_prepared_transactions
	table                  int64 // perTx × (conns + prepared)
	limit                  int64 // advisory locks this instance holds at most
	reserved               atomic.Int64
}

// maxShare is the share of the lock table (numerator over 4) one
// instance may hold.
const maxShare = 3

// readCapacity reads the lock table's size from the server's settings
// and sets the limit: want, or three quarters of the table when want is
// 0. A want beyond that share is an error that names the setting to raise.
func (a *advisory) readCapacity(ctx context.Context, want int64) error {
	c := &a.cap
	err := a.b.pool.QueryRow(ctx, `SELECT current_setting('max_locks_per_transaction')::bigint,
		current_setting('max_connections')::bigint, current_setting('max_prepared_transactions')::bigint`).Scan(&c.perTx, &c.conns, &c.prepared)
	if err != nil {
		return fmt.Errorf("pgbridge: reading the lock table's size: %w", err)
	}
	c.table = c.perTx * (c.conns + c.prepared)
	most := c.table * maxShare / 4
	switch {
	case want < 0:
		return fmt.Errorf("pgbridge: postgres-advisory-locks %d is negative", want)
	case want == 0:
		c.limit = most
	case want > most:
		need := (want*4/maxShare + c.conns + c.prepared - 1) / (c.conns + c.prepared)
		return fmt.Errorf("pgbridge: postgres-advisory-locks %d is more than 3/4 of PostgreSQL's lock table, %s: raise max_locks_per_transaction to %d or more",
			want, c.describe(), need)
	default:
		c.limit = want
	}
	return nil
}

// Every transaction on a session costs PostgreSQL time in proportion to
// the locks the session holds (at its end, LockReleaseAll walks the
// session's whole local lock table: about 1-2 µs a lock, so a batch on a
// session of 50,000 locks took 70 ms). So an instance whose limit is
// large spreads its locks over more holder sessions: one per
// locksPerHolder of its limit, at most maxHolders.
const (
	locksPerHolder = 10_000
	maxHolders     = 32
)

// holders is how many holder sessions the limit asks for, at least n.
func (c *capacity) holders(n int) int {
	want := int((c.limit + locksPerHolder - 1) / locksPerHolder)
	return max(n, min(want, maxHolders))
}

// describe names the lock table's size and where it comes from.
func (c *capacity) describe() string {
	return fmt.Sprintf("max_locks_per_transaction %d × (max_connections %d + max_prepared_transactions %d) = %d",
		c.perTx, c.conns, c.prepared, c.table)
}

// locksHeld counts the advisory locks this instance's current holder
// sessions hold.
func (a *advisory) locksHeld() int64 {
	var n int64
	for _, h := range a.holders {
		if p := h.leases.Load(); p != nil && p.gen == h.gen.Load() {
			n += p.locks.Load()
		}
	}
	return n
}

// reserve claims room for n more advisory locks, or answers the OOM error
// when the limit would be passed (transient: up to the limit plus half
// the rest of the lock table, for the locks an operation takes only while
// it runs, such as a release or DEL routed to the holding instance; the
// leases it begins are checked against the limit itself by overLimit).
// Each reserve is matched by an unreserve once its statement ran (the
// locks it took are counted by then).
func (a *advisory) reserve(n int, transient bool) error {
	c := &a.cap
	if c.table == 0 {
		return nil // not read (tests that build an advisory by hand)
	}
	limit := c.limit
	if transient {
		limit += (c.table - c.limit) / 2
	}
	r := c.reserved.Add(int64(n))
	if held := a.locksHeld(); held+r > limit {
		c.reserved.Add(int64(-n))
		return c.full(held)
	}
	return nil
}

// full is the error of a command refused at the limit.
func (c *capacity) full(held int64) error {
	return &backend.ReplyError{Reply: fmt.Sprintf("OOM command not allowed when this instance holds %d PostgreSQL advisory locks, its limit "+
		"(postgres-advisory-locks; the lock table is %s): raise max_locks_per_transaction, or release locks", min(held, c.limit), c.describe())}
}

// overLimit is the OOM error when an operation that took fresh locks (of
// which begin become leases, and the rest are let go) would leave more
// advisory locks held than the limit, or nil. Acquires under way count
// as held (reserved): the check errs on the safe side.
func (a *advisory) overLimit(fresh, begin int) error {
	c := &a.cap
	if c.table == 0 || begin == 0 {
		return nil
	}
	if held := a.locksHeld() + c.reserved.Load() - int64(fresh) + int64(begin); held > c.limit {
		return c.full(held)
	}
	return nil
}

func (a *advisory) unreserve(n int) { a.cap.reserved.Add(int64(-n)) }

// lockTaken and lockLet count an advisory lock the holder's session gen
// took or let go (from the holder goroutine, once its statement ran).
func (h *holder) lockTaken(gen uint64, n int64) {
	if p := h.leases.Load(); p != nil && p.gen == gen {
		p.locks.Add(n)
	}
}
