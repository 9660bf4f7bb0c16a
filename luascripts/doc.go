// Package luascripts runs the Lua scripts that Redis lock libraries send
// (EVAL, EVALSHA) the way Redis 7 runs them, on gopher-lua (Lua 5.1, the
// dialect Redis embeds).
//
// It owns the sandbox, the redis.* library, Redis's Lua<->RESP conversion
// rules, the script time limit, the classifier that tells by what a
// script does whether it can create a key, and a small catalogue of
// release scripts it runs natively. It does not own atomicity: the backend calls
// Runner.Run inside its own atomic section and gives it a Caller that runs
// redis.call against that section.
//
// The sandbox offers Lua's base functions, the string, table and math
// libraries and the redis table (call, pcall, error_reply, status_reply,
// sha1hex, log, setresp, set_repl, replicate_commands, breakpoint, debug,
// the LOG_* and REPL_* constants, REDIS_VERSION, REDIS_VERSION_NUM). As in
// Redis 7 there is no os, io, debug, package, dofile, loadfile, require,
// module, print, getfenv, setfenv or newproxy. Unlike Redis 7.0, load,
// loadstring and coroutine are not offered either (a loader is a way
// around the sandbox), nor are Redis's cjson, bit, struct and cmsgpack: no
// lock library uses them. Globals are protected as in Redis: reading an
// undefined global and creating one are errors with Redis's texts, and the
// globals, the libraries and the string metatable are read-only (rawset,
// setmetatable and table.insert on them fail too). Lua's pcall is Redis's:
// an error table caught by it comes back as its err text.
//
// Error texts are Redis 7.0's byte for byte, checked against a real
// redis-server by TestDifferentialRedis: a runtime or redis.call error that
// escapes a script ends in " script: <sha1>, on @user_script:<line>.";
// redis.pcall, redis.error_reply and {err=…} give error replies without it.
// Where gopher-lua's own words differ from Lua 5.1's they are rewritten,
// except where Lua names the variable involved ("attempt to index local
// 't' (a nil value)"; gopher-lua does not know it) and for compile errors
// that Lua words as "'x' expected" (gopher-lua: "unexpected symbol"): the
// frame of those messages still matches. A script running past
// Config.TimeLimit is stopped with "ERR Script killed by lockproxy: it ran
// longer than the script time limit (5s)".
//
// # Scripts recognised by what they do
//
// Classify (classify.go) tells whether a script can create a key, which is
// what the quorum backend needs to know: a script that may create one is
// watched on every node (its keys read before and after it, for the undo
// of a minority acquire and Redlock's validity check); one that cannot is
// sent alone. It works from the script's behaviour, not its text or SHA1,
// so a new library version needs no change here. Its answer has two
// halves, and only the first carries safety.
//
// The static half (static.go) reads, off the script's syntax tree, every
// command the script can send. That is sound for every run, whatever its
// KEYS, ARGV, the keys' contents, TIME or random numbers, and whatever Lua
// computes on the node (where real Redis runs it, not this package):
//
//   - a script reaches Redis only through the global redis, or through
//     names that could lead to it or compile code (_G; loadstring, which
//     Redis 7.0 still offers; rawget, getfenv …). The walker accepts
//     only scripts that name no global outside a short list of harmless
//     ones (KEYS, ARGV, string, table, math, tonumber, tostring, type,
//     ipairs, pairs, next, unpack, select, pcall, error, assert,
//     rawequal), a local shadowing a name counting only inside its scope,
//     and that mention redis only as redis.call(…)/redis.pcall(…) with a
//     string literal as the command, or redis.<other field>;
//   - so the literals are all the commands the script can send. When each
//     is one that cannot create a key (GET MGET EXISTS PTTL TTL GETRANGE
//     PING ECHO; DEL UNLINK DELIFEQ DELEX; PEXPIRE EXPIRE PEXPIREAT
//     EXPIREAT PERSIST, which do nothing on an absent key), no run of
//     the script can create a key on any node. When none changes an
//     expiry either, no run can lengthen a TTL, which the quorum backend's
//     restart quarantine would need to learn.
//
// The one thing the static half assumes is that gopher-lua's parser reads
// the same program as Redis's Lua 5.1 (comments, long brackets, escapes):
// TestStaticReadsWhatRedisRuns holds the two side by side on the sources
// where lexers part ways.
//
// Everything else — SET in every form, SETNX, MSET, SELECT, TIME, a
// command named at run time, redis passed as a value, a syntax the walker
// does not know — leaves the script watched, with one exception:
//
// Guarded scripts. Node redlock's extend rewrites its key with SET … PX
// once it found its token there; SET can create, and the walker does not
// follow the check. Such a script is Guarded when it was given one key,
// no probe saw it create or misbehave, and it keeps to a core subset of
// Lua (static.go: locals, control statements, functions, literals, ==
// and ~=, not/and/or, # and indexing of KEYS and ARGV, ipairs, redis.call
// with a literal command; no tables of its own, no arithmetic, ordering,
// concatenation, libraries, pcall or redis.pcall). Each call of it is
// then run once more on the model, with the call's own KEYS and ARGV,
// from its key absent, and goes unwatched (as an extend) only if that run
// creates nothing, meets no error, and sends only key commands on that
// one key. Why that is enough: a script creates its key only on a node
// where the key was absent before it. From that state the node's run and
// the model's see the same replies (the model answers as Redis does,
// which the differential tests hold it to), and in the core subset Lua
// computes the same on both, so they send the same commands in the same
// order; an error ends a run on both sides (nothing can catch it), and a
// command the node refuses where the model did not only cuts the node's
// run shorter. (The model's clock stands at a fixed past instant, so an
// absolute expiry the model finds past, the node finds past too.) So the
// node's run creates at most what the model's did: nothing. The argument rests on the model's conformance and on gopher-lua
// agreeing with Lua 5.1 on that small subset, where the static half rests
// on neither; a call with more keys, or any doubt, is watched.
//
// The dynamic half runs the script, with the call's own KEYS and ARGV, on
// the lock model (backend/model) at a stopped clock, in probe states
// per key (absent; holding each of the first ARGV; holding a foreign
// token; with and without a TTL). It can only make the answer more
// cautious: a probe that raises or meets an error, sends a command outside
// the key commands, names a key it was not given, or changes a key that
// did not hold one of its ARGV (an EXPIRE or DEL of someone else's lock)
// makes the script Other; a probe that creates a key labels it Acquire.
// The probes cannot prove anything about states or ARGV they did not try,
// which is why they never decide alone that a script is safe to leave
// unwatched (a Guarded call's own run, argued above, is about the one
// state that matters, with that call's ARGV).
//
// Caching (Classes) is by SHA1 and the numbers of KEYS and ARGV, bounded
// at 4096 entries (then it starts over). The static half depends on the
// text alone, so a cached "creates nothing" holds for every later call; the
// probes ran with the first call's ARGV, so a later call may behave
// differently, but only in ways the static half already allows. A cached
// Guarded is never an answer by itself: every call is checked. A script
// is classified once per entry, at the cost of one parse and up to 64
// short probe runs (the first failure ends them; each gets 250ms, all
// together 1s, and one cut short by time is not cached).
//
// The memory backend's natives (catalog.go) stay matched by whole text:
// running a script natively needs its replies to be byte-identical to
// Lua's in every state, which recognising "creates nothing" does not show.
// pgbridge and migrate's one-statement releases rely on the same exact
// replies (IsRelease, Releases), so they keep the text match too.
//
// A Runner is safe for concurrent use. It keeps a pool of Lua states so a
// script call does not pay for a new VM, and a cache of compiled scripts by
// SHA1. A state goes back to the pool only after a run that ended
// normally or with a script error; one whose script ran out of time, was
// cancelled, or lost its Caller is discarded, never reused.
package luascripts
