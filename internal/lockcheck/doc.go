// Package lockcheck runs a contended lock workload against a lock service and
// checks its history for the one property a lock service must keep: two
// clients never hold the same lock at once.
//
// Run starts Config.Workers workers, each with its own Locker, that contend on
// Config.Keys keys. Each grant is recorded as an interval on one monotonic
// clock (time.Now/time.Since from one start):
//
//	[reply received, min(release request sent, acquire request sent + TTL − drift)]
//	drift = TTL/100 + 2ms
//
// Both ends are taken on the conservative side: the start after the reply has
// arrived, the end before the release is sent and no later than the TTL
// counted from before the acquire was sent. A lock service that keeps mutual
// exclusion therefore never produces two overlapping intervals of different
// owners on one key, whatever the scheduling of the client process; any such
// overlap is reported as a Violation. The converse does not hold: a run
// without violations does not prove a service safe, it only failed to catch it.
//
// An acquire that returns an error is never counted as a grant (its outcome is
// unknown or failed); it is counted by kind in Report.Errors, and the worker
// sends a best-effort release for its token. A release that fails does not
// extend the interval: the TTL bound still ends it.
//
// The checker assumes the clocks of the client and of the lock service run at
// the same rate (within drift), as Redlock itself does. It does not check
// liveness or fairness.
//
// With a FencedLocker each grant also records its fence, and CheckFences
// reports every grant whose fence is not greater than that of a grant of
// the same key made before it was asked for (granted before its request
// was sent): the order of grants is the clients' real-time order, so the
// check needs no clock of the service.
//
// GoRedisLocker, RedsyncLocker and RedislockLocker drive real client
// libraries (go-redis SET NX PX with a compare-and-delete script, redsync v4
// with one pool, bsm/redislock); any Locker can be checked.
package lockcheck
