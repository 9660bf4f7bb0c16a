// Package luascripts runs the Lua scripts that Redis lock libraries send
// (EVAL, EVALSHA) the way Redis 7 runs them, on gopher-lua (Lua 5.1, the
// dialect Redis embeds).
//
// It owns the sandbox, the redis.* library, Redis's Lua<->RESP conversion
// rules and the script time limit. It does not own atomicity: the backend
// calls Runner.Run inside its own atomic section and gives it a Caller that
// runs redis.call against that section.
//
// The sandbox offers Lua's base functions without the loaders (load,
// loadstring, loadfile, dofile, require, module), without print, getfenv,
// setfenv and newproxy, plus the string, table and math libraries and the
// redis table (call, pcall, error_reply, status_reply, sha1hex, log,
// setresp, replicate_commands, set_repl, breakpoint, debug, the LOG_* and
// REPL_* constants, REDIS_VERSION). Redis's extra libraries (cjson, bit,
// struct, cmsgpack) and its load/loadstring are not offered: no lock
// library uses them, and every loader is a way around the sandbox. Globals
// are protected as in Redis: reading an undefined global and creating one
// are errors with Redis's texts.
//
// Error texts follow Redis 7.0 byte for byte where gopher-lua lets them: a
// runtime or redis.call error that escapes a script ends in
// " script: <sha1>, on @user_script:<line>."; a compile error reads
// "ERR Error compiling script (new function): user_script:<line>: …". Where
// the VM itself describes a problem (a syntax error; arithmetic on nil and
// similar runtime errors) the description after "user_script:<line>:" is
// gopher-lua's, worded differently from Lua 5.1's: the one intended
// divergence, checked by prefix in the tests. Errors raised by the sandbox,
// the redis library and the commands are Redis's own texts.
//
// A Runner is safe for concurrent use. It keeps a pool of Lua states so a
// script call does not pay for a new VM, and a cache of compiled scripts by
// SHA1; a state whose script ran out of time or was cancelled is discarded,
// never reused.
package luascripts
