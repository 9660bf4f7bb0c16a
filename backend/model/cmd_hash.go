package model

import (
	"math"
	"strconv"

	"github.com/lockproxy/lockproxy/backend"
)

var hashHandlers = map[string]handler{
	"hset": cmdHSet, "hmset": cmdHSet, "hsetnx": cmdHSetNX, "hget": cmdHGet, "hmget": cmdHMGet,
	"hgetall": cmdHGetAll, "hkeys": cmdHGetAll, "hvals": cmdHGetAll, "hdel": cmdHDel,
	"hexists": cmdHExists, "hlen": cmdHLen, "hstrlen": cmdHStrLen, "hincrby": cmdHIncrBy,
}

func newHash() *Hash { return &Hash{} }

// cmdHSet is HSET and HMSET: field value pairs; HSET counts the new
// fields, HMSET answers OK.
func cmdHSet(c *call) (backend.Value, error) {
	if len(c.args)%2 != 0 {
		return backend.Value{}, backend.Reply(backend.ErrWrongArgs(c.name()))
	}
	h, err := create(c, c.key(1), newHash)
	if err != nil {
		return backend.Value{}, err
	}
	var added int64
	for i := 2; i < len(c.args); i += 2 {
		if h.o.put(string(c.args[i]), string(c.args[i+1])) {
			added++
		}
	}
	if c.name() == "hmset" {
		return backend.OKValue, nil
	}
	return backend.Int(added), nil
}

func cmdHSetNX(c *call) (backend.Value, error) {
	h, err := create(c, c.key(1), newHash)
	if err != nil {
		return backend.Value{}, err
	}
	f := string(c.args[2])
	if _, ok := h.o.get(f); ok {
		return backend.Int(0), nil
	}
	h.o.put(f, string(c.args[3]))
	return backend.Int(1), nil
}

func cmdHGet(c *call) (backend.Value, error) {
	h, ok, err := lookup[*Hash](c, c.key(1))
	if err != nil || !ok {
		return backend.NilValue, err
	}
	if v, ok := h.o.get(string(c.args[2])); ok {
		return backend.BulkString(v), nil
	}
	return backend.NilValue, nil
}

func cmdHMGet(c *call) (backend.Value, error) {
	h, ok, err := lookup[*Hash](c, c.key(1))
	if err != nil {
		return backend.Value{}, err
	}
	out := make([]backend.Value, len(c.args)-2)
	if ok {
		for i, f := range c.args[2:] {
			if v, ok := h.o.get(string(f)); ok {
				out[i] = backend.BulkString(v)
			}
		}
	}
	return backend.Array(out...), nil
}

// cmdHGetAll is HGETALL (a map), HKEYS and HVALS.
func cmdHGetAll(c *call) (backend.Value, error) {
	h, ok, err := lookup[*Hash](c, c.key(1))
	if err != nil {
		return backend.Value{}, err
	}
	var fields, values []string
	if ok {
		fields, values = h.Fields()
	}
	switch c.name() {
	case "hkeys":
		return bulks(fields), nil
	case "hvals":
		return bulks(values), nil
	}
	out := make([]backend.Value, 0, 2*len(fields))
	for i, f := range fields {
		out = append(out, backend.BulkString(f), backend.BulkString(values[i]))
	}
	return backend.Value{Kind: backend.KindMap, Elems: out}, nil
}

func cmdHDel(c *call) (backend.Value, error) {
	key := c.key(1)
	h, ok, err := lookup[*Hash](c, key)
	if err != nil || !ok {
		return backend.Int(0), err
	}
	var n int64
	for _, f := range c.args[2:] {
		if h.o.del(string(f)) {
			n++
		}
	}
	c.settle(key, h)
	return backend.Int(n), nil
}

func cmdHExists(c *call) (backend.Value, error) {
	h, ok, err := lookup[*Hash](c, c.key(1))
	if err != nil || !ok {
		return backend.Int(0), err
	}
	_, has := h.o.get(string(c.args[2]))
	return backend.Bool(has), nil
}

func cmdHLen(c *call) (backend.Value, error) {
	h, ok, err := lookup[*Hash](c, c.key(1))
	if err != nil || !ok {
		return backend.Int(0), err
	}
	return backend.Int(int64(h.Len())), nil
}

func cmdHStrLen(c *call) (backend.Value, error) {
	h, ok, err := lookup[*Hash](c, c.key(1))
	if err != nil || !ok {
		return backend.Int(0), err
	}
	v, _ := h.o.get(string(c.args[2]))
	return backend.Int(int64(len(v))), nil
}

// cmdHIncrBy checks the increment before the key's type, and the field's
// value after, as Redis does.
func cmdHIncrBy(c *call) (backend.Value, error) {
	by, err := c.intArg(3)
	if err != nil {
		return backend.Value{}, err
	}
	h, err := create(c, c.key(1), newHash)
	if err != nil {
		return backend.Value{}, err
	}
	f := string(c.args[2])
	var cur int64
	if v, ok := h.o.get(f); ok {
		n, ok := parseStrictInt(v)
		if !ok {
			c.settle(c.key(1), h)
			return backend.Value{}, backend.Reply(backend.MsgHashNotInteger)
		}
		cur = n
	}
	if (by < 0 && cur < 0 && by < math.MinInt64-cur) || (by > 0 && cur > 0 && by > math.MaxInt64-cur) {
		c.settle(c.key(1), h)
		return backend.Value{}, backend.Reply(backend.MsgOverflow)
	}
	cur += by
	h.o.put(f, strconv.FormatInt(cur, 10))
	return backend.Int(cur), nil
}

var setHandlers = map[string]handler{
	"sadd": cmdSAdd, "srem": cmdSRem, "sismember": cmdSIsMember, "smismember": cmdSIsMember,
	"scard": cmdSCard, "smembers": cmdSMembers,
}

func newSet() *Set { return &Set{} }

func cmdSAdd(c *call) (backend.Value, error) {
	s, err := create(c, c.key(1), newSet)
	if err != nil {
		return backend.Value{}, err
	}
	var n int64
	for _, m := range c.args[2:] {
		if s.o.put(string(m), "") {
			n++
		}
	}
	return backend.Int(n), nil
}

func cmdSRem(c *call) (backend.Value, error) {
	key := c.key(1)
	s, ok, err := lookup[*Set](c, key)
	if err != nil || !ok {
		return backend.Int(0), err
	}
	var n int64
	for _, m := range c.args[2:] {
		if s.o.del(string(m)) {
			n++
		}
	}
	c.settle(key, s)
	return backend.Int(n), nil
}

// cmdSIsMember is SISMEMBER (an integer) and SMISMEMBER (an array of
// them).
func cmdSIsMember(c *call) (backend.Value, error) {
	s, ok, err := lookup[*Set](c, c.key(1))
	if err != nil {
		return backend.Value{}, err
	}
	out := make([]backend.Value, len(c.args)-2)
	for i, m := range c.args[2:] {
		has := false
		if ok {
			_, has = s.o.get(string(m))
		}
		out[i] = backend.Bool(has)
	}
	if c.name() == "sismember" {
		return out[0], nil
	}
	return backend.Array(out...), nil
}

func cmdSCard(c *call) (backend.Value, error) {
	s, ok, err := lookup[*Set](c, c.key(1))
	if err != nil || !ok {
		return backend.Int(0), err
	}
	return backend.Int(int64(s.Len())), nil
}

func cmdSMembers(c *call) (backend.Value, error) {
	s, ok, err := lookup[*Set](c, c.key(1))
	if err != nil {
		return backend.Value{}, err
	}
	var members []string
	if ok {
		members = s.Members()
	}
	v := bulks(members)
	v.Kind = backend.KindSet
	return v, nil
}
