// Package model is lockproxy's lock model as pure logic: a key space of
// backend.Databases databases, each mapping a key to a value — a token
// (Entry), or an Object: a hash, set, list or sorted set (object.go) —
// and a deadline, and the rules every command and every redis.call of a
// script follows on it (View.Do runs the commands beyond the string
// methods: typed.go and the cmd_*.go files). It is a leaf: it imports the standard library and backend
// only, does no I/O, starts no goroutine and takes no lock. Its callers
// supply the exclusion and the clock: memory keeps one Space per shard
// behind the shard's mutex and runs scripts on a View over all of them;
// pgbridge loads the keys it prepared into a small Space, runs the
// operation on a View that refuses (Admit) other keys, and commits what
// changed, reading its keys back with Get.
//
// Time is a caller-given now in Unix milliseconds; a Space never reads a
// clock, and a View's clock stands still for its whole life, as Redis 7
// stops the clock for a script.
//
// Rules (each is a table test in this package; docs/architecture.md lists
// them with the other packages' invariants):
//   - a key is live while it has no deadline or now is before it; at its
//     deadline, to the millisecond, it is absent to every operation;
//   - an operation that finds a key past its deadline deletes it and counts
//     one expiry (Space.Expired), as does Sample; a key a command deletes
//     is not an expiry;
//   - SET writes under its condition (NX, XX, IFEQ, IFNE on the live
//     token) and reports the previous live token; KEEPTTL keeps a live
//     key's expiry; an expiry at or before now leaves the key deleted and
//     the write reported, as Redis does;
//   - EXPIRE under NX, XX, GT, LT (no expiry counts as infinite), PERSIST,
//     PTTL (-2 absent, -1 no deadline), DEL (a key named twice counts
//     once), EXISTS (twice), DELIFEQ, DELEX, MSET, MSETNX and DBSIZE
//     follow Redis; databases are separate key spaces;
//   - a key of another type is WRONGTYPE to GET, SET … GET, IFEQ, IFNE
//     and DELIFEQ, nil to MGET, and replaced by a plain, NX or XX SET;
//     a command that empties an object deletes its key; the value types'
//     commands follow Redis 7.0 in their checks, texts and reply shapes,
//     and where Redis's order depends on its encoding, the order of the
//     small encodings (object.go).
//
// A string key costs what it did before the other types existed: an
// Entry is a token and a deadline, and an object lives in a second map
// beside its Entry (whose Token is nil), so only keys holding objects pay
// for them.
//
// Go maps keep their memory after deletes, so a Space tracks each
// database's peak and Shrink rebuilds a map that fell well below it;
// Sample and Shrink are what memory's reaper runs, on its own schedule.
// The model reports changes through its results rather than a change log,
// which would cost memory's hot path a write per operation.
package model
