// Package model is lockproxy's lock model (SPEC §1) as pure logic: a key
// space of backend.Databases databases, each mapping a key to a token and a
// deadline, and the rules every command and every redis.call of a script
// follows on it. It is a leaf: it imports the standard library and
// backend only, does no I/O, starts no goroutine and takes no lock.
// Its callers supply the exclusion and the clock:
//
//   - memory keeps one Space per shard behind the shard's mutex, and runs
//     scripts and multi-key commands on a View over all of them under its
//     store lock;
//   - pgbridge loads the states of the keys it prepared into a small Space,
//     runs the operation on a View over it that refuses (Admit) keys it did
//     not prepare, reads the states back and commits what changed.
//
// Time is a caller-given now in Unix milliseconds: a Space never reads a
// clock. A View's clock stands still for its whole life, as Redis 7 stops
// the clock for a script's run.
//
// Rules the model guarantees (each is a table test in this package):
//   - a key is live while it has no deadline or now is before its
//     deadline; at its deadline, to the millisecond, it is absent to every
//     operation (a read finds nothing, a write finds the key absent);
//   - an operation that finds a key past its deadline deletes it and counts
//     one expiry (Space.Expired); so does Sample, which reclaims expired
//     keys no command touched; a key a command deletes is not an expiry;
//   - SET writes under its condition (NX, XX, IFEQ, IFNE on the live key's
//     token) and reports the previous live token; a written key gets the
//     new expiry, keeps its old one with KEEPTTL (a live key only), or
//     loses it; a relative expiry counts from now, an absolute one is taken
//     as given; an expiry at or before now leaves the key deleted (the
//     write is reported, as Redis does);
//   - EXPIRE under NX, XX, GT, LT (no expiry counts as infinite) and LT+XX
//     sets a live key's deadline; one at or before now deletes the key and
//     reports true; PERSIST removes a deadline; PTTL is -2 for an absent
//     key, -1 for one without a deadline, else the milliseconds left;
//   - DEL counts the live keys it removed (a key named twice counts once);
//     DELIFEQ and DELEX IFEQ/IFNE compare the live token; MSET writes keys
//     without deadlines, MSETNX only when none is live; EXISTS counts a
//     key named twice twice; DBSIZE counts live keys and deletes nothing;
//   - databases are separate key spaces.
//
// Go maps keep their memory after entries are deleted, so a Space tracks
// each database's peak and Shrink rebuilds a map that fell well below it;
// Sample and Shrink are what memory's reaper runs, on its own schedule.
//
// The model reports what an operation changed through its results
// (written, deleted, set); a caller that needs the resulting states (a
// commit) reads its keys back with Get. A change log inside Space would
// cost memory's hot path a write per operation for pgbridge's sake, whose
// operations touch few keys it already knows.
package model
