// Package luascripts runs the Lua scripts that Redis lock libraries send
// (EVAL, EVALSHA) the way Redis 7 runs them, on gopher-lua (Lua 5.1, the
// dialect Redis embeds).
//
// It owns the sandbox, the redis.* library, Redis's Lua<->RESP conversion
// rules, the script time limit, and a small catalogue of release scripts
// it runs natively. It does not own atomicity: the backend calls
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
// A Runner is safe for concurrent use. It keeps a pool of Lua states so a
// script call does not pay for a new VM, and a cache of compiled scripts by
// SHA1. A state goes back to the pool only after a run that ended
// normally or with a script error; one whose script ran out of time, was
// cancelled, or lost its Caller is discarded, never reused.
package luascripts
