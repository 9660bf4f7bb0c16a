// Package migrate serves locks during a move away from a single Redis
// without a flag day (docs/migration.md): a Backend wraps the configured
// backend (memory, quorum or postgres: the inner backend) and a client of
// the legacy Redis the applications use today, and takes every lock in
// both, so that clients still talking to the legacy Redis directly and
// clients already moved to lockproxy exclude each other.
//
// Guarantees:
//   - Acquire (SET … NX in every form, SETNX, MSETNX, acquiring scripts,
//     MULTI/EXEC): the legacy Redis first, then the inner backend, same
//     key, token and TTL. Granted only when both grant; a one-sided grant
//     is undone, owner-checked, of exactly what this very operation wrote
//     (a token, a hash field, a set or sorted-set member: elements.go),
//     and the client gets the refusing side's reply.
//   - A legacy Redis that fails or does not answer within Config.Timeout
//     fails the operation with "TRYAGAIN migrate: …", never a false OK or
//     nil; a release or extend fails before the inner backend is touched
//     (one extended side would let a direct client lock the other). The
//     inner backend's guarantees are unchanged.
//   - Release and extend act on both sides and succeed where the token is
//     held; reads answer from the inner backend, falling back to the legacy
//     Redis for a key it does not have; other writes run on both sides
//     (typed.go). Every value type is served so, as Redis answers.
//   - Scripts are recognised by what they do on an empty sandbox (the lock
//     model), per call, never by SHA1 (script.go says how they run on both
//     sides); their PUBLISH reaches the subscribers of both sides
//     (pubsub.go).
//   - Counters (INCR and its kin) live on the legacy Redis, never below
//     the inner backend's copy, which each change raises (counter.go): one
//     sequence of fencing numbers for the clients on either side.
//   - A status goroutine counts the legacy Redis's other clients
//     (status.go) for INFO and /metrics; Close stops it.
//
// Not guaranteed:
//   - A script status reply from the legacy Redis reaches the client as a
//     bulk string (go-redis reads RESP2 status and bulk alike).
//   - An extend that finds the lock only in the inner backend succeeds; a
//     direct client may then take it on the legacy Redis (past the
//     holder's validity, or after the legacy Redis lost it).
//   - Owner checks compare tokens: two clients sharing a token are one.
//   - A script that SELECTs inside its run is watched in its calling
//     database only; a script classified as not acquiring that still
//     creates a key in some state is not undone; nor is a write outside a
//     script that creates a value (HSETNX): it is not an acquire.
//   - An acquiring script whose legacy run failed has its tokens removed
//     there; a field or member it may have added is left to its key's
//     TTL (what was there before is unknown).
//
// The Backend does not claim backend.Immediate: its operations wait on the
// legacy Redis. proxy never imports migrate.
package migrate
