// Package migrate serves locks during a move away from a single Redis
// without a flag day (SPEC §8): a Backend wraps the configured backend
// (memory, quorum or postgres: the inner backend) and a client of the
// legacy Redis the applications use today, and takes every lock in both,
// so that clients still talking to the legacy Redis directly and clients
// already moved to lockproxy exclude each other during a rolling switch.
//
// # What it guarantees
//
//   - Acquire (SET … NX in every form, SETNX, MSETNX, and scripts that
//     acquire, MULTI/EXEC included: the proxy sends a transaction as a
//     script): the legacy Redis first, then the inner backend, with the
//     same key, token and TTL (PXAT stays absolute, a relative TTL is sent
//     as is). Granted only when both grant. When one side grants and the
//     other refuses, the granted side is undone with an owner-checked
//     delete of the token this very operation wrote (never a plain DEL),
//     and the client gets the refusing side's own reply.
//   - A legacy Redis that fails or does not answer within Config.Timeout
//     makes the operation fail with "TRYAGAIN migrate: …", never a false OK
//     or a false nil; an acquire then also removes, best effort and owner
//     checked, what it may have written there. The inner backend's
//     guarantees are unchanged.
//   - Release and extend (DEL, UNLINK, DELIFEQ, DELEX, EXPIRE and friends,
//     PERSIST, SET XX|IFEQ|IFNE, plain SET, MSET, GETDEL) act on both
//     sides, the legacy Redis first, and succeed where the token is held (a
//     per-key OR; DEL counts a key removed on either side once): a lock
//     taken directly on the legacy Redis is released or extended through
//     lockproxy. A legacy failure fails them with TRYAGAIN before the inner
//     backend is touched: an extend that reached only one side would let a
//     direct client take the lock on the other.
//   - Reads (GET, MGET, PTTL, TTL, EXISTS, GETRANGE) answer from the inner
//     backend, falling back to the legacy Redis for a key it does not have;
//     DBSIZE is the inner backend's.
//   - Cutover status: a goroutine reads the legacy Redis's CLIENT LIST
//     every Config.StatusInterval and counts the other clients (lockproxy's
//     own connections carry Config.ClientName and are left out, those of
//     every instance of the fleet; so are replication links) and when one
//     last ran a command. INFO and /metrics report it; when the count stays
//     at 0 past the longest TTL, removing migrate-from completes the move.
//
// # Scripts
//
// Scripts are recognised by what they do, never by a table of SHA1s.
// Each call first runs the script in process on an empty key space (a
// sandbox; keycmd.ScriptCaller and luascripts.Runner run it): a script
// that creates a key from nothing is an acquire, one that creates none is
// not (release, extend, reacquire). This runs per call rather than once
// per SHA1 because what a script does depends on its ARGV (lockproxy's own
// MULTI/EXEC script carries its commands in ARGV and declares no KEYS);
// it costs one in-process run, microseconds next to the legacy round
// trip. The keys the sandbox run names, after the declared KEYS, are the
// script's watched keys.
//
// The release scripts of luascripts' catalogue (recognised by their whole
// text, whitespace aside: the Redis docs' and redis-py's) skip all this:
// they read their key and delete it when it holds the token, answering
// how many they deleted, so they run on both sides as they are and the
// side that held the lock answers. Every unlock saves the watch.
//
// On the legacy Redis a script runs atomically with its watch: MULTI, MGET
// of the watched keys, EVALSHA (EVAL after NOSCRIPT), the same MGET, EXEC,
// which gives the exact before and after values of its keys there.
//
//   - An acquiring script that wrote none of its keys on the legacy Redis
//     was refused there: the legacy reply is returned, the inner backend is
//     not touched. Otherwise it runs on the inner backend, which granted
//     when every key the legacy run wrote now holds there the value the
//     legacy run wrote (tokens are per-client random: another client's lock
//     cannot look like this one). Both granted: the inner backend's reply.
//     The inner backend refused: the keys this run created on the legacy
//     Redis are removed again (owner checked), and the client gets the
//     inner backend's reply.
//   - Any other script runs on both. The reply is the inner backend's,
//     except when none of the watched keys was live there before and one
//     was live on the legacy Redis: then the lock was taken directly on
//     the legacy Redis and the legacy reply is the one the library expects.
//
// # Caveats
//
//   - Legacy replies are read with go-redis over RESP2, which does not tell
//     a status reply from a bulk string: a script's status reply that comes
//     from the legacy Redis (the cases above where the legacy reply wins)
//     reaches the client as a bulk string. Lock libraries' scripts answer
//     integers, nil or bulk strings there.
//   - Release and extend succeed where the token is held (SPEC §8): an
//     extend that finds the lock in the inner backend but no longer in the
//     legacy Redis (it expired there a moment earlier, the legacy Redis was
//     set first; or the legacy Redis restarted and lost it) succeeds, and a
//     direct client may then take the lock on the legacy Redis. The first
//     case lies past the holder's own validity time (TTL counted from
//     before its acquire was sent); the second is the legacy Redis's own
//     durability, which no proxy can add.
//   - Owner checks compare tokens: two clients using the same token are
//     one owner, as they are on Redis.
//   - A script that SELECTs another database inside its run is watched in
//     its calling database only.
//   - A script classified as not acquiring that still creates a key in
//     some state of the key space (none of the lock libraries' scripts
//     do) is not undone on either side.
//   - Each acquire costs one more round trip (to the legacy Redis) and each
//     release one more; the legacy Redis must stay up for locks to be
//     granted until the flag is removed.
//
// Layout decision: migrate imports keycmd (as quorum does) for
// ScriptCaller, the proxy's command table for a running script; proxy never
// imports migrate. The Backend does not claim backend.Immediate: its
// operations wait on the legacy Redis.
package migrate
