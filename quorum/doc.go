// Package quorum is the Redlock backend: every lock operation runs on N
// independent Redis nodes and counts only with a majority (Q = N/2+1), for
// clients that know nothing of Redlock. docs/quorum.md is the operator's
// account; the rules below are what the code keeps.
//
//   - No client script runs on a node (evalmodel.go): a script runs once,
//     in lockproxy, on a model.Space loaded from the state Q nodes agree on
//     (read with leases, snapshot.go), and what it changed is committed by
//     a compare-and-set per node (commit.go); fewer than Q nodes that
//     showed that state applying is a TRYAGAIN with what was applied put
//     back. The nodes run only lockproxy's own scripts and commands, each
//     O(keys + states). Recognised lock scripts (an owner-checked release
//     or extend, an acquire writing only tokens from its ARGV:
//     classify.go) keep a one-round-trip path on which the nodes run them.
//   - An acquire (SET … NX with an expiry, or a lock script seen to create a
//     key) answers OK only when Q nodes wrote and the time it took plus the
//     drift allowance (TTL·DriftFactor + DriftConst, Go's monotonic clock)
//     is below the TTL; nil only when N−Q+1 nodes said the key is held;
//     otherwise TRYAGAIN. No false OK, no false nil.
//   - An acquire that would answer nil having written on some nodes (a
//     split among contenders through several instances) undoes its writes
//     and is sent again, unless a majority holds one token (ops.go, "Split
//     votes"): a nil leaves a holder that will release.
//   - An operation ends as soon as its outcome is certain (a majority
//     agreed); a reply that comes later is judged against what the client
//     was told (op.onLate): a write or a created key it was not told of is
//     repaired there (below), never deleted blind — other nodes may have run
//     it late too, and a read may have seen it. After a failed vote with Q
//     or more nodes still to answer, the operation keeps its keys until they
//     have, and undoes what they wrote before anything else of this proxy
//     sees it (latehold.go). Undos before the answer are
//     owner-checked deletes and go only to nodes that said they wrote, never
//     to one that refused: values are not always unique. A write of a
//     hash, a sorted set, a set or a list sent as a command is watched by
//     value instead (values.go): where its reply is not the one the
//     client was told, what it changed is put back to the node's state
//     before it, only while nothing else changed the key since (late
//     replies too).
//   - This proxy's operations on one key are sent one at a time: each
//     holds its keys' stripes from send to decision (stripe.go). Every
//     node runs the writes of a key in the order they were decided: a
//     write goes to a node only on the connection that carries the node's
//     unanswered writes of the key, if any; from another loop it waits
//     for them, or leaves the node out and the key is repaired there
//     afterwards (order.go).
//   - A key a lost connection or a late reply may have left on a node is
//     repaired once the node is reachable, deleted there only when Q other
//     nodes answered without it: no majority can see it (repair.go). A
//     call's connection is broken only after a grace of at least a second
//     past its deadline, so brief pauses lose no reply.
//   - A node that may have forgotten locks (its run_id changed, or on
//     first contact its horizon marker is missing or its uptime is below
//     it) is kept out of votes for the longest TTL granted, unless it
//     persists every write (marker.go, safety.go); the monitor reports
//     persistence and eviction settings that can lose locks.
//   - PUBLISH reaches the other instances through the nodes once Q nodes
//     took it, each message delivered once per instance (pubsub.go). A
//     script's messages are held back on the nodes and delivered only once
//     the vote decided it, from a node that gave the decided reply
//     (scriptpub.go).
//
// Not guaranteed: Redlock's safety rests on the nodes' clocks running at
// about the same rate; a client paused past its TTL can still act on a
// lock it lost unless its resource checks the grant's fencing token
// (fencing.go); another proxy instance, or a client on the nodes
// directly, using the same key and value within a repair's read and
// delete can lose its copy on the repaired node.
//
// One engine reaches the nodes: every operation runs on an event loop
// with its own connection to each node (loop*.go, link.go) — the front
// end's loops for the lock path, the Backend's own loops (ownloop.go) for
// blocking callers, which wait for the outcome (fanoutUntil). Node
// connections speak RESP3 through package resp.
package quorum
