package keycmd

import (
	"context"

	"github.com/lockproxy/lockproxy/backend"
)

// The commands a backend runs whole (backend.KeySpace.Do): the value types
// beyond strings, counters, TYPE, and the key space as a whole. keycmd
// checks their arity and finds their keys; the rules are package model's
// (memory, postgres) or the nodes' own (quorum).

// typedCommand is one entry of typedCommands: name, arity, whether it
// writes, where its keys are.
type typedCommand struct {
	name  string
	arity int
	write bool
	keys  keySpec
}

var (
	noKeys  = keySpec{}
	twoKeys = keySpec{1, 2, 1} // RENAME src dst, COPY src dst …
	subKey  = keySpec{2, 2, 1} // OBJECT ENCODING key
)

var typedCommands = []typedCommand{
	{"type", 2, false, oneKey}, {"expiretime", 2, false, oneKey}, {"pexpiretime", 2, false, oneKey},
	{"incr", 2, true, oneKey}, {"decr", 2, true, oneKey}, {"incrby", 3, true, oneKey}, {"decrby", 3, true, oneKey},
	{"keys", 2, false, noKeys}, {"scan", -2, false, noKeys}, {"randomkey", 1, false, noKeys},
	{"flushdb", -1, true, noKeys}, {"flushall", -1, true, noKeys},
	{"rename", 3, true, twoKeys}, {"renamenx", 3, true, twoKeys}, {"copy", -3, true, twoKeys},
	{"object", -2, false, subKey}, {"lockproxy", -2, false, subKey},

	{"hset", -4, true, oneKey}, {"hmset", -4, true, oneKey}, {"hsetnx", 4, true, oneKey},
	{"hget", 3, false, oneKey}, {"hmget", -3, false, oneKey}, {"hgetall", 2, false, oneKey},
	{"hkeys", 2, false, oneKey}, {"hvals", 2, false, oneKey}, {"hdel", -3, true, oneKey},
	{"hexists", 3, false, oneKey}, {"hlen", 2, false, oneKey}, {"hstrlen", 3, false, oneKey},
	{"hincrby", 4, true, oneKey},

	{"sadd", -3, true, oneKey}, {"srem", -3, true, oneKey}, {"sismember", 3, false, oneKey},
	{"smismember", -3, false, oneKey}, {"scard", 2, false, oneKey}, {"smembers", 2, false, oneKey},

	{"lpush", -3, true, oneKey}, {"rpush", -3, true, oneKey}, {"lpushx", -3, true, oneKey},
	{"rpushx", -3, true, oneKey}, {"lpop", -2, true, oneKey}, {"rpop", -2, true, oneKey},
	{"lindex", 3, false, oneKey}, {"lrange", 4, false, oneKey}, {"lrem", 4, true, oneKey},
	{"llen", 2, false, oneKey}, {"lset", 4, true, oneKey}, {"ltrim", 4, true, oneKey},
	{"lmove", 5, true, twoKeys}, {"rpoplpush", 3, true, twoKeys},

	{"zadd", -4, true, oneKey}, {"zincrby", 4, true, oneKey}, {"zrem", -3, true, oneKey},
	{"zscore", 3, false, oneKey}, {"zmscore", -3, false, oneKey}, {"zcard", 2, false, oneKey},
	{"zcount", 4, false, oneKey}, {"zrank", 3, false, oneKey}, {"zrevrank", 3, false, oneKey},
	{"zrange", -4, false, oneKey}, {"zrangebyscore", -4, false, oneKey},
	{"zrevrangebyscore", -4, false, oneKey}, {"zrevrange", -4, false, oneKey},
	{"zrangebylex", -4, false, oneKey}, {"zrevrangebylex", -4, false, oneKey},
	{"zremrangebyscore", 4, true, oneKey}, {"zpopmin", -2, true, oneKey}, {"zpopmax", -2, true, oneKey},
}

func init() {
	for _, t := range typedCommands {
		c := &Command{Name: t.name, Arity: t.arity, Write: t.write, keys: t.keys, typed: true}
		c.run = func(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
			return ks.Do(ctx, db, keys(c.Keys(args)), args)
		}
		table[t.name] = c
	}
}

// Typed reports whether the backend runs c whole (backend.KeySpace.Do).
func (c *Command) Typed() bool { return c.typed }

// WholeKeySpace reports whether name (lower case) reads or changes the
// key space as a whole: KEYS, SCAN, RANDOMKEY, FLUSHDB, FLUSHALL.
func WholeKeySpace(name string) bool {
	c := Lookup([]byte(name))
	return c != nil && c.typed && c.keys == noKeys
}

// NotWholeMsg is the refusal of a backend whose scripts see their own
// keys only (where: "postgres backend") to a command on the whole key
// space called from a script.
func NotWholeMsg(name, where string) string {
	return "ERR lockproxy's " + where + " does not run '" + name + "' from scripts: a script sees its own keys only"
}

// NotInScripts reports whether name (lower case) is a command lockproxy
// does not run from scripts, on any backend: FLUSHDB and FLUSHALL, which
// the proxy grants to admin users only and which on quorum's nodes would
// take the horizon marker with them.
func NotInScripts(name string) bool { return name == "flushdb" || name == "flushall" }

// NotInScriptsMsg is the error a script gets for calling such a command.
func NotInScriptsMsg(name string) string {
	return "ERR lockproxy does not run '" + name + "' from scripts"
}
