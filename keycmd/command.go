package keycmd

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
)

// Databases is the number of databases SELECT may choose from
// (backend.Databases).
const Databases = backend.Databases

// Command is one key command: its name, its arity in Redis's convention
// (positive: exact argument count including the name; negative: at least
// that many), whether it writes, and where its keys are.
type Command struct {
	Name  string
	Arity int
	Write bool
	keys  keySpec
	typed bool // run whole by the backend (cmd_typed.go)
	run   func(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error)
}

// keySpec places a command's keys among its arguments (args[0] is the
// name) as Redis's COMMAND INFO does: the first key's index, the last
// key's (negative: counted from the end, -1 the last argument) and the
// distance from one key to the next; all 0 when there are none.
type keySpec struct{ first, last, step int }

var (
	oneKey    = keySpec{1, 1, 1}  // GET key …
	allKeys   = keySpec{1, -1, 1} // DEL key [key …]
	keyValues = keySpec{1, -1, 2} // MSET key value [key value …]
)

// table lists every key command. Scripts see the same table through
// ScriptCaller.
var table = map[string]*Command{
	"get":       {Name: "get", Arity: 2, keys: oneKey, run: cmdGet},
	"set":       {Name: "set", Arity: -3, Write: true, keys: oneKey, run: cmdSet},
	"setnx":     {Name: "setnx", Arity: 3, Write: true, keys: oneKey, run: cmdSetNX},
	"setex":     {Name: "setex", Arity: 4, Write: true, keys: oneKey, run: cmdSetEX},
	"psetex":    {Name: "psetex", Arity: 4, Write: true, keys: oneKey, run: cmdSetEX},
	"getdel":    {Name: "getdel", Arity: 2, Write: true, keys: oneKey, run: cmdGetDel},
	"mget":      {Name: "mget", Arity: -2, keys: allKeys, run: cmdMGet},
	"mset":      {Name: "mset", Arity: -3, Write: true, keys: keyValues, run: cmdMSet},
	"msetnx":    {Name: "msetnx", Arity: -3, Write: true, keys: keyValues, run: cmdMSet},
	"getrange":  {Name: "getrange", Arity: 4, keys: oneKey, run: cmdGetRange},
	"strlen":    {Name: "strlen", Arity: 2, keys: oneKey, run: cmdStrLen},
	"del":       {Name: "del", Arity: -2, Write: true, keys: allKeys, run: cmdDel},
	"unlink":    {Name: "unlink", Arity: -2, Write: true, keys: allKeys, run: cmdDel},
	"exists":    {Name: "exists", Arity: -2, keys: allKeys, run: cmdExists},
	"dbsize":    {Name: "dbsize", Arity: 1, run: cmdDBSize},
	"delifeq":   {Name: "delifeq", Arity: 3, Write: true, keys: oneKey, run: cmdDelIfEq},
	"delex":     {Name: "delex", Arity: -2, Write: true, keys: oneKey, run: cmdDelEx},
	"expire":    {Name: "expire", Arity: -3, Write: true, keys: oneKey, run: cmdExpire},
	"pexpire":   {Name: "pexpire", Arity: -3, Write: true, keys: oneKey, run: cmdExpire},
	"expireat":  {Name: "expireat", Arity: -3, Write: true, keys: oneKey, run: cmdExpire},
	"pexpireat": {Name: "pexpireat", Arity: -3, Write: true, keys: oneKey, run: cmdExpire},
	"ttl":       {Name: "ttl", Arity: 2, keys: oneKey, run: cmdTTL},
	"pttl":      {Name: "pttl", Arity: 2, keys: oneKey, run: cmdTTL},
	"persist":   {Name: "persist", Arity: 2, Write: true, keys: oneKey, run: cmdPersist},
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

// Keys returns the keys among args (args[0] is the command name), in
// order and repeats included, as Redis's COMMAND GETKEYS lists them. For
// args that do not fit the arity it returns the keys the arguments present
// hold (Redis refuses to say), so that a caller declaring them declares
// at least every key the command could touch.
func (c *Command) Keys(args [][]byte) [][]byte {
	if c.keys.step == 0 {
		return nil
	}
	last := c.keys.last
	if last < 0 {
		last += len(args)
	}
	var out [][]byte
	for i := c.keys.first; i <= last && i < len(args); i += c.keys.step {
		out = append(out, args[i])
	}
	return out
}

// KeySpec returns where c's keys are, as COMMAND INFO reports them: the
// first key's index, the last key's (negative: from the end) and the
// step; all 0 for a command without keys.
func (c *Command) KeySpec() (first, last, step int) {
	if c.Name == "object" {
		return 0, 0, 0 // a container: its keys are its subcommands'
	}
	return c.keys.first, c.keys.last, c.keys.step
}

// Names returns the names of every key command, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(table))
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
