// Package quorum is the Redlock backend: every lock operation runs on N
// independent Redis nodes in parallel and counts only with a majority
// (Q = N/2+1), for clients that know nothing of Redlock.
//
// What it guarantees, and under which assumptions:
//
//   - An acquire (SET … NX with an expiry) answers OK only when at least Q
//     nodes set the key and the time it took, plus a clock-drift allowance
//     (TTL·DriftFactor + DriftConst), is below the TTL, measured on Go's
//     monotonic clock. Otherwise the nodes that said they set the key get an
//     owner-checked delete (never a plain DEL), never a node that refused:
//     values are not always unique. An operation ends once its outcome is
//     certain (a majority agreed); replies that come later are judged
//     against it, and what the client was not told of is undone there.
//
//   - A nil reply ("held by someone else") only when at least N−Q+1 nodes
//     said the key is held; when failures rather than contention decide,
//     the client gets "TRYAGAIN quorum not reached: K of N nodes answered"
//     (or "K of N nodes usable, M quarantined after a restart").
//     No false OK, no false nil.
//
//   - Other commands and scripts run on every node; the reply a majority
//     gave is returned, and no majority is a TRYAGAIN error, never a guess.
//
//   - Node clients are set up for a lock proxy: no retries, context
//     deadlines on the socket, explicit pool sizes and timeouts.
//
//   - A monitor reads each node's appendonly, appendfsync and
//     maxmemory-policy at start and every CheckInterval and reports the
//     settings that can lose or evict acknowledged locks (Warnings); a
//     node whose run_id changed (it restarted) is kept out of votes for the
//     longest TTL granted so far, unless it persists every write
//     (appendfsync always): Redlock's delayed restart.
//
// Redlock's safety rests on the nodes' clocks running at about the same
// rate, and there are no fencing tokens yet: a client paused past its TTL
// can still act on a lock it lost. Scripts that acquire are recognised by
// what they do on the nodes (see Eval).
//
// Two paths to the nodes, one set of rules. On the event-loop front end
// (backend.Looper, loop.go) each loop has its own connection to each
// node, and an acquire (SET key token NX PX|EX), a majority read (GET,
// PTTL, TTL) or a script whose class is known (watchCached: every script
// after its first call, but for a Guarded one) starts on the loop that owns the client: its commands are appended to that loop's node buffers, each buffer is
// written once per pass of the loop, the replies are decoded on the loop
// and the vote completes there, with no goroutine hand-off. Everything
// else (other commands, a script's first call, MULTI/EXEC, nodes over TLS or
// through Config.Dialer, the goroutine front end, a loop whose node
// connections are not set up yet) takes the stream path: one shared
// connection per node (stream.go) and a blocking call. Both decide with
// the same functions (setOutcome, evalOutcome, errNoQuorum, the node
// health, quarantine and failure counts), and both set their connections
// up with stream.connect (CLIENT KILL of the replaced connection, undos of
// unknown outcome sent again).
//
// Ordering on the loop path, and why it needs no key stripe. The stream
// path serialises this proxy's operations on one key (lockKeys) so that
// they reach every node in one order. A loop never blocks on a mutex, so
// its operations take no stripe; what they keep instead:
//
//   - One connection per node per loop carries the loop's operations in
//     the order they started, so on each node an undo runs after the
//     acquire it undoes (and before anything the client sends next: the
//     undo is queued before the client hears the outcome), and one
//     client's operations run in order (a connection takes no new command
//     until its reply is out).
//   - Operations from two loops, or a loop and a stream, on one key may
//     reach the nodes in different orders. That costs liveness, never
//     safety: it is exactly the situation of several clients (or several
//     proxies) running Redlock on the same nodes, which the algorithm
//     assumes. Every write on this path is SET NX (it never replaces a
//     token) or an owner-checked delete (an undo, a catalogued release:
//     it removes only its own token), so no interleaving lets a token
//     disappear from a node except by its owner or its expiry; an OK still
//     needs Q nodes that wrote within the validity time, and two such sets
//     of nodes intersect. A split vote ends in nil (N−Q+1 nodes said held:
//     true when they answered) or TRYAGAIN, and the client retries.
//   - "By its owner" includes the owner's own stale undo: clients retry an
//     acquire with the same token, and an undo of a failed attempt still
//     waiting on one connection could delete the retry's lock that reached
//     the node on another (found by review: a retry via a second loop got
//     OK, the first loop's undo then ran, and a third client got the
//     lock). So no request writes a token to a node while an undo of that
//     key and token is pending there (pendingUndos, pending.go): the retry
//     needs a majority of the other nodes.
//   - Acquiring scripts keep the stripe, so that this proxy's scripts on
//     one key read around each other in one order; a loop takes it with
//     TryLock and leaves the call to the stream path (which waits) when
//     it is taken. The stripe does not order them against releases, SET
//     NX undos, expiry or other proxies, so the reads around a script
//     decide nothing on their own: a node that gave the agreed reply
//     keeps what the script did there, and only the nodes that answered
//     otherwise have the keys it created undone (eval.go evalOutcome).
//
// Node connections speak RESP3 through resp: resp.Request encodes
// the commands, resp.Reader decodes the replies with their exact types,
// and a reply that is not RESP ends the connection (resp.ErrProtocol).
package quorum
