// Package proxy is lockproxy's RESP front end: everything a client can
// observe. It accepts connections, parses commands with Redis's arity and
// option rules (keycmd), answers the connection and discovery commands
// real clients send (HELLO, AUTH, SELECT, CLIENT, INFO, COMMAND, CONFIG
// GET, …), keeps the server-wide script cache, runs MULTI/EXEC, applies
// the limits, counts metrics, maps every outcome to the reply Redis would
// give, and drains gracefully. It talks to storage only through
// backend.Backend and never imports a backend (docs/architecture.md).
//
// Two front ends (Config.DataPath) serve the same client state and command
// table, so a client cannot tell them apart: loops (the default; gnet
// event loops own the connections, loop.go, and a backend.Looper may run
// a command on the loop, loop_backend.go) and goroutines (redcon, one
// goroutine per connection; any listener, TLS included). How a connection
// ends on the loops and what is bounded there is in loop_close.go.
//
// Guarantees:
//   - RESP2 by default, RESP3 after HELLO 3; pipelined commands are
//     answered in order, one write per batch; inline commands work.
//   - Every reply text is Redis's. Error mapping happens in one place
//     (errorValue): a *backend.ReplyError goes out verbatim, a command
//     deadline becomes "TRYAGAIN …", anything else "ERR internal error"
//     and one log line; internal error text never reaches a client.
//   - EXEC runs the queued commands as one script over every key they name
//     (cmd_multi.go), so a transaction is atomic on every backend; a queue
//     a script cannot express runs command by command instead.
//   - Limits (Config): MaxClients, MaxRequestBytes (refused as the header
//     arrives, with Redis's protocol errors, limits.go), Redis's limits
//     before AUTH, MaxScriptBytes, MaxScriptCacheBytes (past it the cache
//     starts over and clients fall back from EVALSHA to EVAL).
//   - Pub/sub (pubsub.go) as Redis serves it: a message never reaches a
//     subscriber before the reply to its SUBSCRIBE, a script's messages go
//     out after the script, a subscriber past the pubsub output limits is
//     closed; a backend.Bus carries PUBLISH to the other instances.
//   - Client-side caching (tracking.go): every write of a key a client
//     tracks sends it an invalidation, through this instance or (over the
//     Bus, while this one says it tracks: tracking_remote.go) another; a
//     spurious one is possible, a missed one is not (expiry aside:
//     docs/pubsub.md).
//   - BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN|MAX (blocking.go) block
//     their connection, never a loop, until a write of their keys serves
//     them (here: before the write's reply, in the order they blocked;
//     another instance's, by the same way as invalidations, after it),
//     CLIENT UNBLOCK, the timeout, or their own look every 250 ms; a
//     client that goes away while blocked stops waiting at once and
//     takes nothing.
//   - A panic while serving a command answers "-ERR internal error", is
//     logged with its stack, and closes that connection only.
//   - The admin port (Admin, admin.go): /metrics, /healthz, /readyz open;
//     the locks as JSON and the status page behind the RESP users (HTTP
//     Basic, the admin permission to release), sharing LOCKPROXY LOCKS'
//     and RELEASE's code. The page's contended keys and TRYAGAIN replies
//     (opsview.go) are kept in bounded memory, written on those outcomes
//     only.
//   - Shutdown stops accepting, lets every command already received finish
//     and its reply reach the client, then closes the connections. A failed
//     Accept is logged and retried with a backoff of up to a second.
//
// Not provided: WATCH (it answers the unknown-command error rather than
// pretending to watch). CLIENT NO-EVICT and NO-TOUCH are accepted and
// change nothing.
package proxy
