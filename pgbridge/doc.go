// Package pgbridge serves the lock model (SPEC §1) from PostgreSQL, so
// that unmodified Redis clients take locks that SQL sees and shares.
//
// A key's advisory lock id is hashtextextended(key, db), computed by
// PostgreSQL: SQL users of database 0 take the very same lock with
// pg_advisory_lock(hashtextextended('lock:x', 0)). (A key that is not
// valid UTF-8, or holds a NUL byte, hashes the text \x followed by its hex
// digits.) Every lock has a row in <schema>.leases (db, key, lock_id, token,
// expires_at, holder, holder_pid) that operators can read and delete; in
// the advisory strategy with Config.LeaseRowDelay, only once it has been
// held that long (deferred.go: a lock released sooner never writes one).
//
// Two strategies:
//
//   - advisory (default): the lock is a session-level advisory lock held by
//     one of a few dedicated holder sessions (two by default) of the
//     instance that took it (sharded by key; a holder merges the acquires
//     and the releases of each pipelined batch into one statement each). The
//     holding instance keeps the token and deadline and ends the lock at its
//     deadline to the millisecond (plus one round trip); the lease row
//     mirrors them (deadline on the holder's wall clock) and the table is
//     UNLOGGED, since a row means nothing without the session holding the
//     lock or its deadline. Other instances read rows whose holder session
//     still holds the lock (checked in pg_locks), and route writes on such
//     keys to the holding instance with LISTEN/NOTIFY; a lock without a row
//     yet (deferred.go) is found in pg_locks, and reads of it are routed
//     too. A holder session that ends (an error, pg_terminate_backend, a
//     restart of PostgreSQL, the instance's end) takes its advisory locks
//     with it, while their clients still believe they hold them until their
//     TTLs: so a lost lease with a deadline fences its key until that
//     deadline (fence.go): its row stays and counts as held by nobody (SET
//     NX nil, release and extend 0, GET the token lockproxy:lost-lease), on
//     every instance; the instance that lost it keeps it in memory too. A
//     lost lease without a deadline is lost at once (nothing bounds it, as with a Redis that crashes without
//     persistence). A lost lease without a row yet is fenced by its
//     session's rowless_until_ms, which holds every key until the instance
//     writes its fence row (deferred.go). A crash or immediate shutdown of
//     PostgreSQL also empties the UNLOGGED table: every instance records in
//     a LOGGED table how far its leases reach (horizon.go), and after a
//     restart takes no lock (TRYAGAIN) until the leases granted before it
//     have ended.
//   - lease: the (logged) lease table is the truth and PostgreSQL's clock
//     the only clock. Each write is one transaction that takes
//     pg_try_advisory_xact_lock on its keys and reads and writes their rows
//     (SET NX with a TTL and the catalogued release scripts: one statement
//     that does the same, lease.go); locks survive restarts of lockproxy, at
//     the price of a durable write per operation.
//
// Semantics come from package model (backend/model), whose rules the
// memory backend follows too: an operation locks its keys' stripes in this
// process, the strategy prepares the keys (advisory locks or transaction
// locks) and hands over their states, the operation or script runs on a
// small model space loaded with them (engine.go), and what it changed is
// committed before the reply. A script is atomic over
// its keys; one that touches keys it did not declare runs again with them
// prepared. A commit that fails is a TRYAGAIN error, never a false success.
//
// Limits (written down, not hidden): a multi-key DEL or EXISTS is atomic per
// key, not across keys; MSET over a key another instance holds and a script
// over keys several other instances hold are refused with TRYAGAIN rather
// than routed; a key locked from SQL without a lease row reads as absent and
// refuses SET NX (nil), while other writes on it answer TRYAGAIN. Fences
// exclude lockproxy clients only: an SQL user of pg_advisory_lock gets a
// fenced key's lock as soon as the lost session is gone. A fence's deadline
// is the holder's wall clock, compared with PostgreSQL's: the instances'
// clocks must agree with PostgreSQL's within the drift allowance (NTP). The
// wait after a restart of PostgreSQL is as long as the longest TTL granted
// just before it (plus 1 s), up to an hour: a lease longer than an hour is
// not covered, and a crash of PostgreSQL loses it.
//
// The two strategies share one Backend (the stripes, the engine, the
// KeySpace methods): a strategy (the interface in pgbridge.go; advisory.go
// with holder.go, read.go, route.go, fence.go, deferred.go, horizon.go and
// expiry.go, or lease.go) owns everything in which they differ: the lease table's
// persistence and its own tables, its background work, the fast paths of
// SET NX and of the catalogued scripts, what becomes of a write on a key
// held beyond reach (advisory routes it; lease answers TRYAGAIN), and its
// figures for metrics and INFO. New picks it; no other code asks which
// strategy it has.
package pgbridge
