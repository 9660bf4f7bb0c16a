// Package quorum is the Redlock backend: every lock operation runs on N
// independent Redis nodes in parallel and counts only with a majority
// (Q = N/2+1), for clients that know nothing of Redlock.
//
// What it guarantees, and under which assumptions:
//
//   - An acquire (SET … NX with an expiry) answers OK only when at least Q
//     nodes set the key and the time it took, plus a clock-drift allowance
//     (TTL·DriftFactor + DriftConst), is below the TTL, measured on Go's
//     monotonic clock. Otherwise every node that may have set the key gets an
//     owner-checked delete (never a plain DEL) under a fresh bounded context.
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
// what they do on the nodes (see Eval). Not done yet (issue #3): batching
// concurrent clients' commands per node into shared round trips.
//
// Node connections speak RESP3 through proxy/resp: resp.Request encodes
// the commands, resp.Reader decodes the replies with their exact types,
// and a reply that is not RESP ends the connection (resp.ErrProtocol).
package quorum
