// Package pgbridge serves the lock model from PostgreSQL, so that
// unmodified Redis clients take locks that SQL sees and shares
// (docs/postgres.md).
//
// It owns the holder-session pool, the lease table and its DDL, routing
// between instances (LISTEN/NOTIFY), the detection of lost holder
// sessions, the restart horizon, and the two strategies:
//   - advisory (default, advisory.go with holder.go, read.go, route.go,
//     fence.go, deferred.go, horizon.go, expiry.go): a lock is a
//     session-level advisory lock on hashtextextended(key, db), held by
//     one of a few dedicated holder sessions of the instance that took it;
//     the instance keeps token and deadline and mirrors them into an
//     UNLOGGED lease row, at once or after Config.LeaseRowDelay;
//   - lease (lease.go): the logged lease table is the truth and
//     PostgreSQL's clock the only clock; each write is one transaction
//     under pg_try_advisory_xact_lock. Locks survive restarts of lockproxy.
//
// Guarantees:
//   - Every command on named keys has the memory backend's semantics: it
//     runs on a small model space loaded with its prepared keys
//     (engine.go) and what it changed is committed before the reply; a
//     failed commit is TRYAGAIN, never a false success. A script is atomic
//     over its keys, and one that lockproxy stops (time limit, memory
//     budget, client gone: luascripts.ErrStopped) commits nothing. A value of another type than string is kept whole in
//     its lease row (kind, and model.Encode's bytes in token).
//   - Pub/sub between instances (pubsub.go): a message published through
//     one instance, by PUBLISH or by a script after its commit, reaches
//     the subscribers of every instance LISTENing on the database, or the
//     publisher gets an error.
//   - Every grant's fencing token, read by LOCKPROXY FENCE, comes from a
//     sequence, greater than every earlier one of its key across instances
//     and PostgreSQL's restarts (fencing.go).
//   - Advisory: the instance holds at most its limit of advisory locks
//     (3/4 of PostgreSQL's lock table, read at start: capacity.go); a
//     command that needs one more answers OOM alone, and no holder session
//     is lost to a full lock table of lockproxy's making.
//   - A client's context never reaches a holder connection; exclusion on a
//     shared holder session comes from this package's lease state, not
//     from PostgreSQL alone.
//   - A lost holder session (advisory) takes its locks with it: its leases
//     with a deadline fence their keys until then on every instance (SET
//     NX nil, release and extend 0), and row-less ones are fenced through
//     the session's rowless_until_ms. After a restart of PostgreSQL the
//     live leases' keys stay fenced (a crash: their instances write the
//     fences again; no lock is granted until they have, or until a gone
//     instance's leases have ended: horizon.go).
//
// Not guaranteed: a lease without a deadline, or longer than an hour, is
// lost with its session or a crash of PostgreSQL; fences exclude lockproxy
// clients, not SQL users of pg_advisory_lock; fence deadlines assume the
// instances' clocks agree with PostgreSQL's (NTP); deleting a lease row
// does not release an advisory lock. Multi-key DEL and EXISTS are atomic
// per key; writes on keys held beyond reach may answer TRYAGAIN; the
// commands on the whole key space (KEYS, SCAN, FLUSHDB …: whole.go) are
// refused from scripts, and a flush is not one atomic step. New picks
// the strategy; no other code asks which strategy it has.
package pgbridge
