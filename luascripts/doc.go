// Package luascripts runs the Lua scripts that Redis lock libraries send
// (EVAL, EVALSHA) the way Redis 7 runs them, on gopher-lua (Lua 5.1, the
// dialect Redis embeds).
//
// It owns the sandbox, the redis.* library, Redis's Lua<->RESP conversion
// rules, the script time limit, the classifier that tells by what a script
// does whether it can create a key (classify.go, static.go), and a small
// catalogue of release scripts it runs natively (catalog.go). It does not
// own atomicity: the backend calls Runner.Run inside its own atomic
// section and gives it a Caller that runs redis.call against that section.
//
// Guarantees:
//   - The sandbox is Redis 7's: Lua's base functions, string, table and
//     math, the redis table, and the libraries Redis bundles — bit,
//     struct, cjson and cmsgpack (lib*.go, written after Redis's C
//     sources and checked against a real redis-server); no os, io, debug,
//     package, require or print. Globals are protected with Redis's error
//     texts.
//   - Error texts and conversions are Redis 7.0's byte for byte, checked
//     against a real redis-server, except where gopher-lua words a Lua
//     error itself (compile errors, arithmetic on nil): the frame of those
//     messages still matches.
//   - A script may start with Redis 7's shebang line ("#!lua
//     flags=no-writes,…", shebang.go): Redis's errors for a bad one,
//     EVAL_RO refusing a script without no-writes, and no-writes refusing
//     its write commands (PUBLISH included) with Redis's text.
//   - Redis 7 functions run on the same engine (functions.go):
//     LoadLibrary checks a library as FUNCTION LOAD does, in Redis's
//     load environment and words, and a backend.Script with Function set
//     runs the library's code, then that function with KEYS and ARGV,
//     under the flags it registered. Unlike Redis, the library's code
//     runs afresh on every call.
//   - A script running past Config.TimeLimit is stopped with
//     "ERR Script killed by lockproxy: …".
//   - A script holding more than Config.MemoryLimit is stopped with
//     "ERR Script killed by lockproxy: it used more memory than …"
//     (Redis has no such bound; it crashes instead). The heap is sampled
//     every millisecond a script runs and the Go functions that build
//     large strings check their size first, so a script passes its
//     budget by a few times at most before it is stopped (budget.go);
//     a `..` chain is joined four operands at a time for this (assign.go).
//   - The limits hold whatever the script does: deep recursion ends with
//     Lua's "stack overflow" at once, pattern matching (string.find,
//     match, gmatch, gsub: patterns.go) stops with the run, and no pcall
//     catches the run's end. A run cut short by lockproxy (the limits,
//     the caller's ctx, a failed Caller) carries ErrStopped: the backend
//     must then drop what the script wrote.
//   - Classify's "creates nothing" rests on the static half alone, which
//     holds for every run whatever KEYS, ARGV and the keys' contents; runs
//     on the model can only make a class more cautious. The argument is at
//     the top of classify.go.
//   - Natively run scripts are matched by whole text, so their replies are
//     byte-identical to Lua's in every state.
//
// Not offered, unlike Redis 7.0: load, loadstring and coroutine (a loader
// is a way around the sandbox). Unlike Redis too: cjson.encode and
// cmsgpack.pack write the keys of a table with several non-array keys in
// gopher-lua's order, not in the order of Lua 5.1's hash part (a single
// key, and arrays, are byte-identical); and cjson's settings
// (encode_max_depth …) last for the script that sets them, where Redis
// keeps them for every later script until it restarts.
//
// A Runner is safe for concurrent use. It pools Lua states and caches
// compiled scripts by SHA1. A state goes back to the pool only after a run
// that ended normally or with a script error; one whose script ran out of
// time, was cancelled, or lost its Caller is discarded, never reused.
package luascripts
