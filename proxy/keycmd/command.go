package keycmd

import (
	"context"
	"strings"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// Databases is the number of databases SELECT may choose from (0 to 15), as
// in Redis's default configuration.
const Databases = 16

// Command is one key command: its name, its arity in Redis's convention
// (positive: exact argument count including the name; negative: at least
// that many) and whether it writes.
type Command struct {
	Name  string
	Arity int
	Write bool
	run   func(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error)
}

// table lists every key command. Scripts see the same table through
// ScriptCaller.
var table = map[string]*Command{
	"get":       {Name: "get", Arity: 2, run: cmdGet},
	"set":       {Name: "set", Arity: -3, Write: true, run: cmdSet},
	"setnx":     {Name: "setnx", Arity: 3, Write: true, run: cmdSetNX},
	"setex":     {Name: "setex", Arity: 4, Write: true, run: cmdSetEX},
	"psetex":    {Name: "psetex", Arity: 4, Write: true, run: cmdSetEX},
	"getdel":    {Name: "getdel", Arity: 2, Write: true, run: cmdGetDel},
	"mget":      {Name: "mget", Arity: -2, run: cmdMGet},
	"mset":      {Name: "mset", Arity: -3, Write: true, run: cmdMSet},
	"msetnx":    {Name: "msetnx", Arity: -3, Write: true, run: cmdMSet},
	"getrange":  {Name: "getrange", Arity: 4, run: cmdGetRange},
	"del":       {Name: "del", Arity: -2, Write: true, run: cmdDel},
	"unlink":    {Name: "unlink", Arity: -2, Write: true, run: cmdDel},
	"exists":    {Name: "exists", Arity: -2, run: cmdExists},
	"dbsize":    {Name: "dbsize", Arity: 1, run: cmdDBSize},
	"delifeq":   {Name: "delifeq", Arity: 3, Write: true, run: cmdDelIfEq},
	"delex":     {Name: "delex", Arity: -2, Write: true, run: cmdDelEx},
	"expire":    {Name: "expire", Arity: -3, Write: true, run: cmdExpire},
	"pexpire":   {Name: "pexpire", Arity: -3, Write: true, run: cmdExpire},
	"expireat":  {Name: "expireat", Arity: -3, Write: true, run: cmdExpire},
	"pexpireat": {Name: "pexpireat", Arity: -3, Write: true, run: cmdExpire},
	"ttl":       {Name: "ttl", Arity: 2, run: cmdTTL},
	"pttl":      {Name: "pttl", Arity: 2, run: cmdTTL},
	"persist":   {Name: "persist", Arity: 2, Write: true, run: cmdPersist},
}

// Lookup returns the key command called name (case-insensitive), or nil
// when name is not a key command.
func Lookup(name []byte) *Command {
	if len(name) > 16 {
		return nil
	}
	var buf [16]byte
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return table[string(buf[:len(name)])] // no allocation: the compiler optimises map[string(bytes)]
}

// ArityOK reports whether n arguments (the name included) fit c's arity.
func (c *Command) ArityOK(n int) bool {
	if c.Arity >= 0 {
		return n == c.Arity
	}
	return n >= -c.Arity
}

// Exec runs the command; args[0] is the command name as the client sent it.
// Client errors (arity, syntax, a bad integer or expire time) come back as
// *backend.ReplyError with Redis's text; a backend's failure comes back
// unchanged, for the caller to map.
func (c *Command) Exec(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	if !c.ArityOK(len(args)) {
		return backend.Value{}, backend.Reply(backend.ErrWrongArgs(c.Name))
	}
	return c.run(ctx, ks, db, args)
}

// name returns the lower-case name of the command args calls, for the texts
// that quote it ("invalid expire time in 'setex' command").
func name(args [][]byte) string { return strings.ToLower(string(args[0])) }

// keys converts key arguments to strings (a copy: the caller's buffers are
// reused after the command).
func keys(args [][]byte) []string {
	ks := make([]string, len(args))
	for i, a := range args {
		ks[i] = string(a)
	}
	return ks
}

// clone copies b, so a backend may keep the slice after the command.
func clone(b []byte) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	return c
}
