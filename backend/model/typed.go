package model

import (
	"context"
	"math"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
)

// The commands a View runs through Do: the value types beyond strings,
// counters, and the commands on the key space as a whole. Each follows
// Redis 7.0 (the differential corpus in tests/ compares them byte for byte
// with a real redis-server): its checks in Redis's order, its texts, and
// its reply shapes, which the proxy renders for RESP2 or RESP3.

// call is one command being run: its View, database and arguments
// (args[0] is the name).
type call struct {
	v    *View
	db   int
	args [][]byte
	cmd  string // args[0] in lower case
}

type handler func(c *call) (backend.Value, error)

// handlers maps each command's lower-case name to its implementation.
// Arity is keycmd's (it checks before Do).
var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"type": cmdType, "pexpiretime": cmdExpireTime, "expiretime": cmdExpireTime,
		"incr": cmdIncr, "decr": cmdIncr, "incrby": cmdIncr, "decrby": cmdIncr,
		"keys": cmdKeys, "scan": cmdScan, "randomkey": cmdRandomKey,
		"flushdb": cmdFlush, "flushall": cmdFlush,
		"rename": cmdRename, "renamenx": cmdRename, "copy": cmdCopy, "object": cmdObject,
		"lockproxy": cmdLockproxy,
	}
	for name, h := range hashHandlers {
		handlers[name] = h
	}
	for name, h := range setHandlers {
		handlers[name] = h
	}
	for name, h := range listHandlers {
		handlers[name] = h
	}
	for name, h := range zsetHandlers {
		handlers[name] = h
	}
}

// Serves reports whether Do runs the command name (lower case).
func Serves(name string) bool { _, ok := handlers[name]; return ok }

// Do runs one of the commands above on the View: keys are the keys it
// names (asked of Admit), args[0] its name in any letter case.
func (v *View) Do(_ context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	if err := v.admit(db, keys...); err != nil {
		return backend.Value{}, err
	}
	name := lower(args[0])
	h := handlers[name]
	if h == nil {
		return backend.Value{}, backend.Reply(backend.ErrUnknownCommand(string(args[0]), args[1:]))
	}
	v.journal(db, name, keys, args)
	return h(&call{v: v, db: db, args: args, cmd: name})
}

// lower returns b in lower-case ASCII as a string.
func lower(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

// name is the command's lower-case name.
func (c *call) name() string { return c.cmd }

func (c *call) key(i int) string { return string(c.args[i]) }

func (c *call) space(key string) *Space { return c.v.space(key) }

// lookup returns key's live object of type T, ok false when the key is
// absent, and WRONGTYPE when it holds another type (a string included).
func lookup[T Object](c *call, key string) (obj T, ok bool, err error) {
	e, o, live := c.space(key).Lookup(c.db, key, c.v.Now)
	if !live {
		return obj, false, nil
	}
	if !e.IsString() {
		if t, is := o.(T); is {
			return t, true, nil
		}
	}
	return obj, false, backend.ErrWrongType
}

// create returns key's object of type T, made by mk (without expiry) when
// the key is absent.
func create[T Object](c *call, key string, mk func() T) (T, error) {
	obj, ok, err := lookup[T](c, key)
	if err != nil || ok {
		return obj, err
	}
	obj = mk()
	c.space(key).PutObject(c.db, key, obj, 0)
	return obj, nil
}

// settle deletes key when its object is left empty, as Redis does.
func (c *call) settle(key string, o Object) {
	if o.Len() == 0 {
		c.space(key).drop(c.db, key)
	}
}

// intArg parses argument i as an integer, with Redis's error.
func (c *call) intArg(i int) (int64, error) {
	n, ok := backend.ParseInt(c.args[i])
	if !ok {
		return 0, backend.Reply(backend.MsgNotInteger)
	}
	return n, nil
}

// parseFloat parses b as Redis's getDoubleFromObject does: strtod's
// syntax with nothing before or after the number, no NaN, and no
// overflow.
func parseFloat(b []byte) (float64, bool) {
	s := string(b)
	if s == "" || isSpace(s[0]) {
		return 0, false
	}
	f, err := strtod(s)
	if err != nil || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// strtod parses s as C's strtod does when it must consume all of s:
// decimal, "inf" and "infinity" in any case, and hexadecimal with or
// without a binary exponent ("0x10"), which Go's ParseFloat takes only
// with one. Out of range is an error, with ±Inf or 0 as the value.
func strtod(s string) (float64, error) {
	t := strings.TrimLeft(s, "+-")
	if len(t) > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X') && !strings.ContainsAny(t, "pP") {
		s += "p0"
	}
	return strconv.ParseFloat(s, 64)
}

func (c *call) floatArg(i int) (float64, error) {
	f, ok := parseFloat(c.args[i])
	if !ok {
		return 0, backend.Reply(backend.MsgNotFloat)
	}
	return f, nil
}

// double is a score as a reply.
func double(f float64) backend.Value { return backend.Value{Kind: backend.KindDouble, Float: f} }

func bulks(ss []string) backend.Value {
	out := make([]backend.Value, len(ss))
	for i, s := range ss {
		out[i] = backend.BulkString(s)
	}
	return backend.Array(out...)
}

func cmdType(c *call) (backend.Value, error) {
	key := c.key(1)
	e, o, live := c.space(key).Lookup(c.db, key, c.v.Now)
	switch {
	case !live:
		return backend.Status("none"), nil
	case e.IsString():
		return backend.Status("string"), nil
	}
	return backend.Status(o.Type()), nil
}

// cmdExpireTime is EXPIRETIME and PEXPIRETIME: the absolute deadline, -1
// without one, -2 for an absent key.
func cmdExpireTime(c *call) (backend.Value, error) {
	key := c.key(1)
	e, live := c.space(key).Get(c.db, key, c.v.Now)
	switch {
	case !live:
		return backend.Int(-2), nil
	case e.Deadline == 0:
		return backend.Int(-1), nil
	case c.name() == "expiretime":
		return backend.Int((e.Deadline + 500) / 1000), nil
	}
	return backend.Int(e.Deadline), nil
}

// cmdIncr is INCR, DECR, INCRBY and DECRBY on a string holding an integer;
// the key keeps its expiry.
func cmdIncr(c *call) (backend.Value, error) {
	by := int64(1)
	switch c.name() {
	case "decr":
		by = -1
	case "incrby", "decrby":
		n, err := c.intArg(2)
		if err != nil {
			return backend.Value{}, err
		}
		if c.name() == "decrby" {
			if n == math.MinInt64 {
				return backend.Value{}, backend.Reply(backend.MsgDecrOverflow)
			}
			n = -n
		}
		by = n
	}
	key := c.key(1)
	sp := c.space(key)
	e, live := sp.Get(c.db, key, c.v.Now)
	var cur int64
	if live {
		if !e.IsString() {
			return backend.Value{}, backend.ErrWrongType
		}
		n, ok := backend.ParseInt(e.Token)
		if !ok {
			return backend.Value{}, backend.Reply(backend.MsgNotInteger)
		}
		cur = n
	}
	if (by < 0 && cur < 0 && by < math.MinInt64-cur) || (by > 0 && cur > 0 && by > math.MaxInt64-cur) {
		return backend.Value{}, backend.Reply(backend.MsgOverflow)
	}
	cur += by
	sp.Put(c.db, key, Entry{Token: strconv.AppendInt(nil, cur, 10), Deadline: e.Deadline})
	return backend.Int(cur), nil
}
