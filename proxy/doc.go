// Package proxy is lockproxy's RESP front end: everything a client can
// observe. It accepts connections (on either front end, below), parses
// commands with Redis's arity and option rules, answers the connection and
// discovery commands real clients send (HELLO, AUTH, SELECT, CLIENT, INFO,
// COMMAND, CONFIG GET, …), keeps the server-wide script cache, runs
// MULTI/EXEC, maps every outcome to the reply Redis would give, and talks to
// storage only through backend.Backend.
//
// Protocol: RESP2 by default, RESP3 after HELLO 3; pipelined commands are
// answered in order with one flush per batch; inline commands work.
//
// Two front ends (Config.DataPath) serve the same client state and
// command table, so a client cannot tell them apart:
//   - loops (the default): gnet v2 event loops (Config.Loops, default
//     GOMAXPROCS-1) own the connections; accepting stays a goroutine on
//     the listener, which enrolls each connection into a loop
//     (loop_serve.go). A loop reads what a connection sent, runs the
//     complete commands one after the other (parsed by
//     redcon.ReadNextCommand, limits by the same framing scan as
//     limitConn, with the same hold-back rule), and writes the batch's
//     replies with one write. On a backend.Immediate backend (memory)
//     every command runs on the loop, scripts too (the memory backend runs
//     a script alone anyway, as Redis does). A command that may wait
//     (other backends, passthrough) runs on a goroutine; the connection
//     takes no further command until its reply is back on the loop, so
//     replies keep their order. A backend.Looper (quorum) may take such a
//     command on the loop instead (loop_backend.go): it completes on the
//     same loop, through the same command code, and the connection waits
//     for it as for a goroutine. This path saves the goroutine park and
//     wake-up per command: the CPU a lock cycle costs drops toward
//     redis-server's (tests/bench/memory.sh). It reads raw sockets: a TLS
//     listener needs the goroutine front end.
//   - goroutines: redcon's server, a goroutine per connection; limitConn
//     applies the request limits and the idle timeout to its reads. It
//     takes any listener, TLS included.
//
// How a connection ends on the loops, and what is bounded (loop_close.go;
// each point has a test on real sockets):
//   - A close the server decides (QUIT, a limit refusal, a drain, the idle
//     timeout, a panic) comes after the client has taken every reply
//     before it: the connection takes no further command and lingers while
//     the client takes its output, as the goroutine front end (a blocking
//     write) and redis-server do. A client that takes nothing for 10
//     seconds is closed with its replies cut (the goroutine front end
//     would wait on it until the drain's deadline).
//   - A client that shuts down its writing half while a command runs off
//     the loop gets that command's reply and those of the complete
//     commands it pipelined after it. gnet closes a connection as soon as
//     a read finds the end of stream, even while a command runs (its read
//     path has no half-close state), so the connection is finished on a
//     goroutine, on a duplicate of the socket taken in OnClose, with one
//     write bounded by 10 seconds. redis-server answers such a client too:
//     it runs the commands it read before it reads the end of stream (it
//     drops only blocking commands such as BLPOP). Like redis-server, a
//     half-closed client whose earlier replies are still unsent when the
//     end of stream is read loses them (checked with redis-server 7.0:
//     30 pipelined 1 MiB ECHO, shutdown(SHUT_WR) after 2 s without
//     reading: 219 kB delivered); the goroutine front end would deliver
//     them.
//   - gnet cannot stop reading a connection, so what a client sends
//     while a command runs off the loop is held, up to twice
//     MaxRequestBytes [16 MiB]; past that the client is closed and the
//     server logs "closing client that reached max query buffer length",
//     as Redis does past client-query-buffer-limit (1 GB there). The
//     goroutine front end stops reading instead (TCP holds the client
//     back), so it never closes such a client.
//   - Replies a client does not take are held, up to eight times
//     MaxRequestBytes [64 MiB] (eight maximal replies); past that the
//     client is closed at once ("closing client that reached max output
//     buffer length"). Redis's client-output-buffer-limit for normal
//     clients is unlimited by default; this bound differs on purpose (no
//     unbounded per-connection buffer). The goroutine front end blocks on
//     its write and stops reading instead, so it holds one batch's replies
//     at most, and a client that never reads stalls it.
//
// On both front ends a failed Accept (out of file descriptors, say) is
// logged and retried with a backoff of up to a second; the connections
// being served stay (server.go accept).
//
// Decisions worth knowing:
//   - EXEC runs the queued commands as one script (backend.Eval), so a
//     transaction is atomic on every backend, as in Redis. The script
//     declares every key the queued commands name (keycmd's key positions)
//     as its KEYS, so each backend treats the transaction as it treats a
//     script over those keys (quorum undoes an acquisition a majority did
//     not grant). A transaction holding commands no script may run (CLIENT,
//     INFO, …), or naming keys in another database than EXEC's after a
//     SELECT in the queue (keys a script cannot declare), runs its commands
//     one after the other instead (execPlan).
//   - WATCH is not implemented and answers the unknown-command error rather
//     than pretending to watch.
//   - The script cache (SHA1 → source, one per server, filled by EVAL and
//     SCRIPT LOAD) holds at most Config.MaxScriptCacheBytes of sources;
//     past that it starts over, and clients fall back from EVALSHA to EVAL
//     on NOSCRIPT as Redis lets them.
//   - CLIENT REPLY ON|OFF|SKIP works as in Redis; CLIENT NO-EVICT and
//     NO-TOUCH are accepted and change nothing.
//   - Limits (Config, defaults in brackets): clients beyond MaxClients
//     [10000, as Redis] get "ERR max number of clients reached" and are
//     closed. A command is refused as its header arrives, before its body
//     is read, with Redis's own protocol errors, and the connection closed
//     (redcon itself bounds nothing): a bulk string that would take the
//     command past MaxRequestBytes [8 MiB] gets "ERR Protocol error:
//     invalid bulk length", an argument count that could not fit in it
//     "invalid multibulk length", an inline command over 64 KiB "too big
//     inline request"; before AUTH (with RequirePass or Users) more than 10
//     arguments or a bulk over 16 KiB get Redis's "unauthenticated
//     multibulk length" / "unauthenticated bulk length". The replies to
//     the commands before the refused one are delivered first. Scripts
//     longer than MaxScriptBytes [1 MiB] are refused; the script cache
//     holds at most MaxScriptCacheBytes [64 MiB] of sources.
//   - A panic while serving a command answers "-ERR internal error", is
//     logged with its stack, closes that connection and nothing else.
//   - Shutdown stops accepting, lets every command already received finish
//     and its reply reach the client, then closes the connections (redcon's
//     own Close would drop in-flight replies).
//
// Error mapping happens in one place (errorValue): a *backend.ReplyError
// goes out verbatim, a command deadline becomes "TRYAGAIN …", anything else
// becomes "ERR internal error" and one log line.
package proxy
