package pgbridge

import (
	"fmt"

	"github.com/lockproxy/lockproxy/backend"
)

// Fences (advisory strategy). A holder session that ends takes its
// advisory locks with it, but the clients of those locks still believe
// they hold them until their TTL runs out. So a lost lease with a deadline
// is a fence until that deadline: nobody is granted the key, while its
// owner's release and extend answer 0 (it no longer holds it). The fence
// is the lease row itself (the UNLOGGED table survives a session's end):
// the row stays until its deadline, whatever session now holds the
// advisory lock, and no instance writes over a row whose deadline lies
// ahead and whose writer is not the session writing. The instance that
// lost the session also keeps the lease in memory, so it answers without
// a round trip. A lost lease without a deadline is simply lost: nothing
// bounds it (as a lock in a Redis that crashes without persistence).
//
// To the model a fence is a live key with a token nobody has (fenceToken)
// and the lost lease's deadline: SET NX answers nil, GET the fence token,
// PTTL the time left, a compare-and-delete or extend script 0. A write
// that would change it (plain SET, DEL, PEXPIRE) answers TRYAGAIN.

// fenceToken is the token a fenced key shows: the lock is held, by no
// one a client can be.
const fenceToken = backend.FenceToken

// fencedBy holds, in SQL, for a lease row (alias col's table) that fences
// its key against the session running the statement: its deadline lies
// ahead (by PostgreSQL's clock) and another session wrote it. A session
// that has just taken the key's advisory lock runs it: the row's writer
// then no longer holds the lock. A row without a deadline fences nothing:
// the COALESCE makes it false, not NULL (under NOT, NULL kept the row as
// if it were a fence, and the acquire answered nil until the next reap).
func fencedBy(alias string) string {
	return `COALESCE(` + alias + `.deadline_ms > ` + pgNowMS + ` AND ` + alias + `.holder_pid <> pg_backend_pid(), false)`
}

// reapable holds for a lease row (alias l) that means nothing any more:
// its holder session no longer holds the lock, and it fences nothing.
const reapable = `NOT ` + heldByRowHolder + ` AND (l.deadline_ms IS NULL OR l.deadline_ms <= ` + pgNowMS + `)`

// fenceState is a fenced key as the model sees it.
func fenceState(deadline int64) state {
	return state{present: true, token: []byte(fenceToken), deadline: deadline}
}

// fence returns the fence that e, a lease of this instance, left when its
// session was lost: ok is false for a lease that is still valid or fences
// nothing any more. A deferred lease without a row is kept as a fence too:
// fenceRowless (deferred.go) must find it to write its fence row.
func (e *held) fence(now int64) (state, bool) {
	if e.valid() || !(e.row || e.deferred) || e.deadline == 0 || e.deadline <= now {
		return state{}, false
	}
	return fenceState(e.deadline), true
}

// fencedError refuses a write that would change a fenced key.
//
// deadline 0 means the fence's deadline is not known here (a fence met by
// commit's INSERT, which returns no row for it): the reply then says no
// figure rather than a wrong one.
func fencedError(k dbKey, deadline int64) error {
	const why = "the PostgreSQL session that held its lock was lost while its lease ran"
	if deadline == 0 {
		return &backend.ReplyError{Reply: fmt.Sprintf("TRYAGAIN postgres: key '%s' is fenced: %s", k.key, why)}
	}
	left := max(deadline-nowMS(), 1)
	return &backend.ReplyError{Reply: fmt.Sprintf("TRYAGAIN postgres: key '%s' is fenced for %d ms more: %s", k.key, left, why)}
}
