// Package proxy is lockproxy's RESP front end: everything a client can
// observe. It accepts connections (on github.com/tidwall/redcon), parses
// commands with Redis's arity and option rules, answers the connection and
// discovery commands real clients send (HELLO, AUTH, SELECT, CLIENT, INFO,
// COMMAND, CONFIG GET, …), keeps the server-wide script cache, runs
// MULTI/EXEC, maps every outcome to the reply Redis would give, and talks to
// storage only through backend.Backend.
//
// Protocol: RESP2 by default, RESP3 after HELLO 3; pipelined commands are
// answered in order with one flush per batch; inline commands work.
//
// Decisions worth knowing:
//   - EXEC runs the queued commands as one script (backend.Eval), so a
//     transaction is atomic on every backend, as in Redis. A transaction
//     holding commands no script may run (CLIENT, INFO, …) runs its
//     commands one after the other instead.
//   - WATCH is not implemented and answers the unknown-command error rather
//     than pretending to watch.
//   - The script cache holds at most Config.MaxScriptCacheBytes of sources;
//     past that it starts over, and clients fall back from EVALSHA to EVAL
//     on NOSCRIPT as Redis lets them.
//   - Limits (Config): clients beyond MaxClients get "ERR max number of
//     clients reached" and are closed; a connection that sends more than
//     MaxRequestBytes without completing a command gets "ERR Protocol error:
//     request larger than max-request-bytes" and is closed, since redcon
//     itself bounds neither; scripts longer than MaxScriptBytes are refused.
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
