// Package keycmd parses and runs the key commands (GET, SET and
// its option forms, SETNX, EXPIRE and friends, DELIFEQ, DELEX, …) against a
// backend.KeySpace, with Redis's arity and option rules and its exact reply
// texts. It also knows where each command's keys are among its arguments
// ((*Command).Keys, as Redis's COMMAND GETKEYS; checked against a real
// redis-server), so that whoever runs commands on a backend's behalf — EXEC
// above all — can declare every key they touch.
//
// It sits just above backend and imports nothing else of lockproxy, so
// that the RESP front end (client commands) and the backends (redis.call from
// a running script, through ScriptCaller) share one definition of every
// command without either importing the other (docs/architecture.md, "The
// dependency rule").
//
// Everything here is safe for concurrent use: the command table is read-only
// after package initialisation (a composite literal, no init side effects).
package keycmd
