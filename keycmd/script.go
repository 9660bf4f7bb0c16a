package keycmd

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// ScriptCaller runs the redis.call and redis.pcall of one running script
// against KS, a backend's view inside the script's atomic section. It
// implements luascripts.Caller.
//
// It keeps the script's database: SELECT inside a script changes DB for the
// rest of that script only, as in Redis. It refuses writes when RO (EVAL_RO)
// and answers Redis's script errors as *backend.ReplyError, in Redis's order
// of checks: unknown command, arity, not allowed from scripts, read-only.
// A ScriptCaller serves one script run and is not safe for concurrent use.
// PUBLISH counts as a write, as Redis's may-replicate commands do.
type ScriptCaller struct {
	KS backend.KeySpace
	DB int
	RO bool
	// Hub, when set, serves redis.call('publish'): the messages are kept
	// and handed to it by Deliver, once the script's changes are in.
	Hub       backend.Hub
	Published [][2][]byte // channel and message, in order
}

// ReadOnly tells luascripts' Runner that the run refuses writes (EVAL_RO),
// which a script whose shebang lacks no-writes may not run under.
func (c *ScriptCaller) ReadOnly() bool { return c.RO }

// Publishes tells luascripts' Runner that a script that publishes may run.
func (c *ScriptCaller) Publishes() bool { return c.Hub != nil }

// Deliver hands the messages the script published to the Hub, in order.
func (c *ScriptCaller) Deliver() {
	for _, m := range c.Published {
		c.Hub.Deliver(m[0], m[1])
	}
}

// LockModelOnly tells luascripts' Runner that this Caller serves
// lockproxy's commands only: a script that can send another command is
// refused before it runs, as on every backend (luascripts/refuse.go).
func (c *ScriptCaller) LockModelOnly() bool { return true }

// Call runs one command for the script.
func (c *ScriptCaller) Call(ctx context.Context, args [][]byte) (backend.Value, error) {
	if len(args) == 0 {
		return backend.Value{}, backend.Reply(backend.MsgScriptNoArgs)
	}
	if cmd := Lookup(args[0]); cmd != nil {
		if !cmd.ArityOK(len(args)) {
			return backend.Value{}, backend.Reply(backend.MsgScriptArity)
		}
		if c.RO && cmd.Write {
			return backend.Value{}, backend.Reply(backend.MsgScriptReadOnly)
		}
		if NotInScripts(cmd.Name) {
			return backend.Value{}, backend.Reply(NotInScriptsMsg(cmd.Name))
		}
		return cmd.run(ctx, c.KS, c.DB, args)
	}
	n := strings.ToLower(string(args[0]))
	if arity, ok := scriptConnCommands[n]; ok {
		if !arityOK(arity, len(args)) {
			return backend.Value{}, backend.Reply(backend.MsgScriptArity)
		}
		return c.conn(n, args)
	}
	if arity, ok := noScriptCommands[n]; ok {
		if !arityOK(arity, len(args)) {
			return backend.Value{}, backend.Reply(backend.MsgScriptArity)
		}
		return backend.Value{}, backend.Reply(backend.MsgScriptNoScript)
	}
	if redisCommands[n] {
		return backend.Value{}, backend.Reply(NotServedMsg(n))
	}
	return backend.Value{}, backend.Reply(backend.MsgScriptUnknown)
}

// conn runs the connection commands a script may call.
func (c *ScriptCaller) conn(n string, args [][]byte) (backend.Value, error) {
	switch n {
	case "select":
		db, err := intArg(args[1])
		if err != nil {
			return backend.Value{}, err
		}
		if db < 0 || db >= Databases {
			return backend.Value{}, backend.Reply(backend.MsgDBOutOfRange)
		}
		c.DB = int(db)
		return backend.OKValue, nil
	case "ping":
		if len(args) == 2 {
			return backend.Bulk(args[1]), nil
		}
		return backend.Status("PONG"), nil
	case "echo":
		return backend.Bulk(args[1]), nil
	case "publish":
		if c.RO {
			return backend.Value{}, backend.Reply(backend.MsgScriptReadOnly)
		}
		if c.Hub == nil {
			return backend.Value{}, backend.Reply(NotServedMsg(n))
		}
		// Redis counts the receivers as it publishes; here they are
		// counted now and get the message when the script is done.
		n := c.Hub.Receivers(args[1])
		c.Published = append(c.Published, [2][]byte{bytes.Clone(args[1]), bytes.Clone(args[2])})
		return backend.Int(n), nil
	case "time":
		now := time.Now()
		return backend.Array(
			backend.BulkString(strconv.FormatInt(now.Unix(), 10)),
			backend.BulkString(strconv.Itoa(now.Nanosecond()/1000)),
		), nil
	}
	return backend.Value{}, backend.Reply(backend.MsgScriptUnknown)
}

func arityOK(arity, n int) bool {
	if arity >= 0 {
		return n == arity
	}
	return n >= -arity
}

// scriptConnCommands are the commands outside the key table a script may
// call, with their arity.
var scriptConnCommands = map[string]int{"select": 2, "ping": -1, "echo": 2, "time": 1, "publish": 3}

// noScriptCommands are Redis's commands flagged "noscript", with their
// arity: redis.call refuses them even in Redis.
var noScriptCommands = map[string]int{
	"multi": 1, "exec": 1, "discard": 1, "watch": -2, "unwatch": 1,
	"eval": -3, "evalsha": -3, "eval_ro": -3, "evalsha_ro": -3, "fcall": -3, "fcall_ro": -3,
	"script": -2, "function": -2, "subscribe": -2, "unsubscribe": -1, "psubscribe": -2,
	"punsubscribe": -1, "ssubscribe": -2, "sunsubscribe": -1, "auth": -2, "hello": -1,
	"client": -2, "reset": 1, "monitor": 1, "sync": 1, "psync": -3, "quit": -1, "save": 1,
}

// NotServed reports whether name (lower case) is a command of Redis 7 that
// lockproxy does not serve, in scripts or outside them.
func NotServed(name string) bool { return redisCommands[name] && Lookup([]byte(name)) == nil }

// NotServedMsg is the error a script gets for calling NotServed command
// name.
func NotServedMsg(name string) string {
	return "ERR lockproxy serves lock commands only: '" + name + "' is not supported"
}

// redisCommands names the other commands of Redis 7, so that a script
// calling one outside the lock model is told so by name, while a name Redis
// does not know gets Redis's own "Unknown Redis command" text.
var redisCommands = func() map[string]bool {
	m := make(map[string]bool)
	for _, n := range strings.Fields(`append bitcount bitfield bitfield_ro bitop bitpos blmove blmpop
		blpop brpop brpoplpush bzmpop bzpopmax bzpopmin copy decr decrby dump expiretime getbit getex
		getset geoadd geodist geohash geopos georadius georadius_ro georadiusbymember
		georadiusbymember_ro geosearch geosearchstore hdel hexists hget hgetall hincrby
		hincrbyfloat hkeys hlen hmget hmset hrandfield hscan hset hsetnx hstrlen hvals incr incrby
		incrbyfloat keys lcs lindex linsert llen lmove lmpop lpop lpos lpush lpushx lrange lrem
		lset ltrim move object pexpiretime pfadd pfcount pfmerge publish pubsub randomkey rename
		renamenx restore rpop rpoplpush rpush rpushx sadd scan scard sdiff sdiffstore setbit
		setrange sinter sintercard sinterstore sismember smembers smismember smove sort sort_ro
		spop spublish srandmember srem sscan strlen substr sunion sunionstore touch type xack xadd
		xautoclaim xclaim xdel xgroup xinfo xlen xpending xrange xread xreadgroup xrevrange xtrim
		zadd zcard zcount zdiff zdiffstore zincrby zinter zintercard zinterstore zlexcount zmpop
		zmscore zpopmax zpopmin zrandmember zrange zrangebylex zrangebyscore zrangestore zrank
		zrem zremrangebylex zremrangebyrank zremrangebyscore zrevrange zrevrangebylex
		zrevrangebyscore zrevrank zscan zscore zunion zunionstore flushall flushdb info config
		command wait lastsave bgsave bgrewriteaof swapdb latency memory slowlog debug role
		replicaof slaveof acl cluster readonly readwrite asking migrate module lolwut failover
		shutdown`) {
		m[n] = true
	}
	return m
}()
